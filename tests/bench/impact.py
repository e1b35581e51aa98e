"""How fast `attribution rules impact` replays archived attempts: attempts a minute, per kind of
rule change, measured from the command's own start to its end (a fresh process, as CI runs it).

    python -m tests.bench.impact [--attempts 2000] [--jobs 2]

The archive: every bundle of tests/regression, tests/examples and tests/real diagnosed once into a
warehouse (its evidence archived as diagnoses archive it), then each archived attempt copied
under new attempt ids until there are --attempts (the copies share their evidence object, as
re-diagnosed attempts do; every copy is replayed on its own). Then one candidate pack per kind of
change, each replayed over the whole archive:

  extract rule     xid-driver-report ignores XID 149 (an extract rule: its old and new output compared)
  verdict rule     verdict-root-cause recommends `investigate` always (a final verdicts rule)
  role rule        demote-cascade-after-root's SQL changed (a final roles rule: the final phase replayed)
  early rule       xid-catalog-facts' SQL changed (an early rule: the early and final phases replayed)
  data table       one row of xid_catalog.csv changed (the two early rules reading it compared)
  catalog row      one row of catalogs/pytorch.csv changed (the extract rule reading the catalogs compared)
  python module    python/nvlink5.py changed (the early rule running it compared)
  last early rule  scope-attempt's SQL changed (the early rule run last: the eleven before it run first)
  precedence       two verdicts rules swapped in pack.yaml (the archive's verdicts chosen from again)
  extract and verdict  both changes above (the extract rule compared, then the verdicts rule where
                   it agreed)
  new verdict rule a verdicts rule added and placed in the precedence (its rows where it gives
                   some, else the archive's verdicts chosen from again by the new precedence)
  extract and new verdict  a new failure class: the extract rule changed and the new verdicts rule

Target: at least 1,000 attempts a minute on this machine (2 cores). Ends with a markdown table.

Each report is also checked (unless --no-verify): every corpus bundle diagnosed afresh under the
candidate must change exactly where the report says, with the same new outcome, copies included.
The check's time is not the bench's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules"
CORPORA = ("tests/regression", "tests/examples", "tests/real")


def corpus_bundles() -> list[str]:
    return sorted(str(p) for c in CORPORA for p in (ROOT / c).iterdir() if (p / "attempt.yaml").is_file())


def build_archive(warehouse: Path, attempts: int) -> int:
    """Diagnose every bundle of the corpora into `warehouse` (archived), then copy archived
    attempts under new ids until there are `attempts`. The number archived."""
    bundles = corpus_bundles()
    subprocess.run(
        [sys.executable, "-m", "workload_attribution", "diagnose", "--inline", "-q", "--warehouse", str(warehouse)]
        + bundles,
        check=False,  # a bundle the rules refuse still leaves the others archived
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
    )
    from workload_attribution.warehouse.archive import Archive, manifest_key

    archive = Archive(str(warehouse.with_name(f"{warehouse.stem}-archive")))
    base = [archive.read_manifest(e.key) for e in archive.entries()]
    made = len(base)
    for i in range(attempts - made):
        m = base[i % len(base)].model_copy(deep=True)
        m.attempt.job_id = f"{m.attempt.job_id}-copy{i}"
        m.diagnosis_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{m.diagnosis_id}/{i}"))
        import zstandard

        body = zstandard.ZstdCompressor(level=6).compress(m.model_dump_json().encode())
        archive.store.put(manifest_key(m.diagnosis_id, m.digest), body)
        made += 1
    return made


# A verdicts rule the shipped pack does not have (a GPU's hardware fault drains its host at once)
NEW_VERDICT_RULE = (ROOT / "tests" / "rule_changes" / "verdict-gpu-hardware-drain.yaml").read_text()


Edit = tuple[str, str | None, str]  # a file of the pack, the text replaced (None: a new file), the new text


def candidate(tmp: Path, kind: str) -> Path:
    """A copy of the shipped pack with one change of `kind`."""
    out = tmp / f"candidate-{kind.replace(' ', '-')}"
    shutil.copytree(RULES, out, ignore=shutil.ignore_patterns("*.py", "__pycache__", "*.md", "*.sql"))
    shutil.copytree(RULES / "python", out / "python", dirs_exist_ok=True)
    edits: dict[str, Edit | list[Edit]] = {
        "extract rule": (
            "extract/xid-driver-report.yaml",
            "FROM m WHERE g['code'] != ''",
            "FROM m WHERE g['code'] NOT IN ('', '149')",
        ),
        "verdict rule": (
            "final/verdict-root-cause.yaml",
            "CASE WHEN n_rivals > 0 THEN 'investigate' ELSE action END AS action",
            "'investigate' AS action",
        ),
        "role rule": ("final/demote-cascade-after-root.yaml", "sql: |\n", "sql: |\n  -- changed for the bench\n"),
        "early rule": ("early/xid-catalog-facts.yaml", "sql: |\n", "sql: |\n  -- changed for the bench\n"),
        "last early rule": ("early/scope-attempt.yaml", "sql: |\n", "sql: |\n  -- changed for the bench\n"),
        "python module": ("python/nvlink5.py", '"RESET_GPU": "drain_and_reset_gpu"', '"RESET_GPU": "drain_node"'),
        "precedence": (
            "pack.yaml",
            "  - verdict-root-cause         # the earliest root candidate inside the failure window\n"
            "  - verdict-scheduler-oom      # the scheduler ended it for the job's own doing: memory, its own limits,"
            " a command not found\n",
            "  - verdict-scheduler-oom\n  - verdict-root-cause\n",
        ),
        "data table": ("data/xid_catalog.csv", ",drain_and_reset_gpu", ",drain_node"),
        "catalog row": (
            "catalogs/pytorch.csv",
            "(SIGABRT) received by PID,task_killed,,,cascade,none,none,",
            "(SIGABRT) received by PID,task_killed,application_failure,user_code,root_candidate,host,fix_code,",
        ),
        "new verdict rule": [
            ("final/verdict-gpu-hardware-drain.yaml", None, NEW_VERDICT_RULE),
            (
                "pack.yaml",
                "  - verdict-root-cause         #",
                "  - verdict-gpu-hardware-drain\n  - verdict-root-cause         #",
            ),
        ],
    }
    for part in kind.split(" and "):  # "extract rule and verdict rule": both changes
        change = edits[part if part in edits else f"{part} rule"]
        for path, old, new in change if isinstance(change, list) else [change]:
            _edit(out / path, old, new)
    return out


def _edit(f: Path, old: str | None, new: str) -> None:
    """`old` replaced by `new` in the pack's file `f`; with no `old`, a file the pack did not have."""
    if old is None:
        f.write_text(new)
        return
    text = f.read_text()
    if old not in text:
        sys.exit(f"bench: {f.name} no longer holds {old!r}: update tests/bench/impact.py")
    f.write_text(text.replace(old, new, 1))


def run_impact(warehouse: Path, cand: Path, jobs: int) -> dict:
    started = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "workload_attribution", "rules", "impact", "--candidate", str(cand)]
        + ["--warehouse", str(warehouse), "--json", "-q", "--jobs", str(jobs)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    wall = time.perf_counter() - started
    if r.returncode != 0:
        sys.exit(f"bench: rules impact failed ({r.returncode}): {r.stderr[-800:]}")
    report = json.loads(r.stdout)
    report["wall"] = wall
    return report


def _original(job_id: str) -> str:
    return re.sub(r"-copy\d+$", "", job_id)


def archived_outcomes(warehouse: Path) -> tuple[dict[tuple[str, str, int], Any], Counter[tuple[str, str, int]]]:
    """The archived attempts' outcomes under the shipped pack, by (cluster, job id, attempt) of
    the bundle each was copied from, and how many archived attempts each bundle has."""
    from workload_attribution.warehouse.archive import Archive

    archive = Archive(str(warehouse.with_name(f"{warehouse.stem}-archive")))
    outcomes: dict[tuple[str, str, int], Any] = {}
    copies: Counter[tuple[str, str, int]] = Counter()
    for e in archive.entries():
        m = archive.read_manifest(e.key)
        key = (m.attempt.cluster, _original(m.attempt.job_id), m.attempt.attempt)
        copies[key] += 1
        if key[1] == m.attempt.job_id:
            outcomes[key] = m.outcome
    return outcomes, copies


def fresh_flips(cand: Path, shipped: dict[tuple[str, str, int], Any], jobs: int) -> dict[tuple[str, str, int], Any]:
    """Every corpus bundle diagnosed afresh under the candidate (`jobs` processes): those whose
    outcome differs from the shipped pack's, with the new outcome."""
    from workload_attribution.contracts.models import Diagnosis
    from workload_attribution.warehouse.archive import Outcome

    bundles = corpus_bundles()
    cmd = [sys.executable, "-m", "workload_attribution", "diagnose", "--inline", "-q", "--json", "--no-warehouse"]
    procs = [
        subprocess.Popen(
            [*cmd, "--rules-dir", str(cand), *bundles[i::jobs]], stdout=subprocess.PIPE, cwd=ROOT, text=True
        )
        for i in range(jobs)
    ]
    flips = {}
    for proc in procs:
        out, _ = proc.communicate()
        for line in out.splitlines():
            d = Diagnosis.model_validate_json(line)
            key = (d.attempt.cluster, d.attempt.job_id, d.attempt.attempt)
            new = Outcome.of(d)
            if key in shipped and not shipped[key].decides_as(new):
                flips[key] = new
    return flips


def verify(report: dict, flips: dict[tuple[str, str, int], Any], copies: Counter[tuple[str, str, int]]) -> str:
    """'yes', or what the report got wrong against a fresh diagnosis."""
    from workload_attribution.warehouse.archive import Outcome

    said: Counter[tuple[str, str, int]] = Counter()
    wrong = []
    for c in report["changed"]:
        key = (c["cluster"], _original(c["job_id"]), c["attempt"])
        said[key] += 1
        if key not in flips or Outcome.model_validate(c["new"]) != flips[key]:
            wrong.append(f"{key}: said {c['new']}, fresh {flips.get(key)}")
    missed = [f"{k}: {copies[k] - said[k]} of {copies[k]} not reported" for k in flips if said[k] != copies[k]]
    return "yes" if not (wrong or missed) else "NO: " + "; ".join((wrong + missed)[:5])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attempts", type=int, default=2000)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument(
        "--kinds",
        nargs="*",
        default=[
            "extract rule",
            "verdict rule",
            "role rule",
            "early rule",
            "last early rule",
            "data table",
            "catalog row",
            "python module",
            "precedence",
            "extract and verdict",
            "new verdict rule",
            "extract and new verdict",
        ],
    )
    ap.add_argument("--no-verify", action="store_true", help="skip checking each report against fresh diagnoses")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="impact-bench-") as tmp:
        wh = Path(tmp) / "w.duckdb"
        t = time.perf_counter()
        n = build_archive(wh, a.attempts)
        print(f"archive: {n} attempts ({time.perf_counter() - t:.0f} s to build)", flush=True)
        shipped, copies = archived_outcomes(wh)
        rows = []
        for kind in a.kinds:
            load = os.getloadavg()[0]
            cand = candidate(Path(tmp), kind)
            rep = run_impact(wh, cand, a.jobs)
            per_min = rep["attempts"] / rep["wall"] * 60
            how = ", ".join(f"{k} {v}" for k, v in sorted(rep["how"].items()))
            right = "not checked" if a.no_verify else verify(rep, fresh_flips(cand, shipped, a.jobs), copies)
            rows.append((kind, rep["attempts"], len(rep["changed"]), rep["wall"], per_min, how, load, right))
            print(f"{kind}: {rep['attempts']} in {rep['wall']:.1f} s = {per_min:,.0f}/min ({how}); right: {right}")
    print(
        f"\n{n} archived attempts, {a.jobs} processes, wall time of the whole command (start-up included):\n\n"
        "| change | attempts | changed | wall | **attempts / minute** | what the replays took | load | right |\n"
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | --- |"
    )
    for kind, total, changed, wall, per_min, how, load, right in rows:
        print(
            f"| {kind} | {total:,} | {changed:,} | {wall:.1f} s | **{per_min:,.0f}** | {how} | {load:.1f} | {right} |"
        )
    return 0 if all(r[4] >= 1000 and r[7] in ("yes", "not checked") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
