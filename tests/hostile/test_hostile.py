"""The hostile-input corpus through the real CLI: every case's exit code, coverage and verdict.

The bundles are built at test time (tests/hostile/build.py). They run in two `attribution
diagnose --inline --json` processes (the cases that must be diagnosed, the cases that must be
refused), against a warehouse that already holds a diagnosis and a topology: afterwards every row
it held is still there and a refused topology added nothing. No process may print a traceback,
crash, or hang (each has a deadline).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from tests.hostile import build as corpus
from workload_attribution.cli import main

# a long operational proof: the slow tier (`pytest -m slow`, run by .ci/run after the default tier)
pytestmark = pytest.mark.slow

DEADLINE_S = 300
CASES = [c for c in corpus.CASES if not (c.root_only and os.geteuid() != 0)]


def cli() -> list[str]:
    exe = Path(sys.executable).parent / "attribution"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "workload_attribution"]


def attribution(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*cli(), *args],
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=DEADLINE_S,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def snapshot(warehouse: Path) -> dict[str, set]:
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
            ).fetchall()
        ]
        return {t: {repr(r) for r in con.execute(f'SELECT * FROM "{t}"').fetchall()} for t in tables}
    finally:
        con.close()


def batch(bundles: list[Path], warehouse: Path, out: Path) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """Diagnose the bundles in one process; a crash (exit 1) ends a process: it is noted against the
    bundle in progress and the rest go on in a new one."""
    crashed: dict[str, str] = {}
    args = ["--inline", "--json", "--warehouse", str(warehouse), "--out", str(out)]
    run = attribution("diagnose", *map(str, bundles), *args)
    code, stdout, stderr = run.returncode, run.stdout, run.stderr
    while run.returncode not in (0, 2) and bundles:
        begun = [x for x in run.stderr.splitlines() if x.startswith("[") and x.endswith(" ...")]
        last = begun[-1].split("bundle:", 1)[1][: -len(" ...")] if begun else bundles[0].name
        crashed[last] = run.stderr.splitlines()[-1] if run.stderr else f"exit {run.returncode}"
        bundles = bundles[[b.name for b in bundles].index(last) + 1 :]
        if not bundles:
            break
        run = attribution("diagnose", *map(str, bundles), *args)
        code = max(code, run.returncode) if run.returncode else code
        stdout, stderr = stdout + run.stdout, stderr + run.stderr
    return subprocess.CompletedProcess(run.args, code, stdout, stderr), crashed


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from concurrent.futures import ThreadPoolExecutor

    base = tmp_path_factory.mktemp("hostile")
    started = time.monotonic()
    built = corpus.build(base / "cases", CASES)
    build_s = time.monotonic() - started
    seeded = base / "seeded.duckdb"
    seed = base / "seed"
    shutil.copytree(corpus.WORKED, seed)
    (seed / "attempt.yaml").write_text((seed / "attempt.yaml").read_text().replace("cluster: eos", "cluster: seed"))
    done = attribution("diagnose", str(seed), "--inline", "--json", "-q", "--warehouse", str(seeded))
    assert done.returncode == 0, done.stderr
    before = snapshot(seeded)

    # three processes at once, each writing its own copy of the seeded warehouse: the diagnosed
    # cases in two halves, the refused ones
    good = [b for c, b in built if c.exit == 0]
    groups = {"0a": good[::2], "0b": good[1::2], "2": [b for c, b in built if c.exit == 2]}
    out = base / "out"
    warehouses = {}
    for key in groups:
        warehouses[key] = base / f"warehouse-{key}.duckdb"
        shutil.copy(seeded, warehouses[key])
    started = time.monotonic()
    with ThreadPoolExecutor(len(groups)) as pool:
        futures = {k: pool.submit(batch, groups[k], warehouses[k], out) for k in groups}
        runs = {k: f.result() for k, f in futures.items()}
    elapsed = time.monotonic() - started
    return {
        "runs": {k: r for k, (r, _) in runs.items()},
        "crashed": {name: why for _, c in runs.values() for name, why in c.items()},
        "out": out,
        "before": before,
        "after": {k: snapshot(w) for k, w in warehouses.items()},
        "elapsed": elapsed,
        "build_s": build_s,
    }


def _error_line(results, name: str) -> list[str]:
    stderr = "".join(r.stderr for r in results["runs"].values())
    return [x for x in stderr.splitlines() if x.startswith(f"attribution: bundle:{name}: ")]


def test_the_corpus_is_large_enough():
    assert len(corpus.CASES) >= 60
    assert len({c.name for c in corpus.CASES}) == len(corpus.CASES)


def test_no_traceback_no_crash_no_hang(results):
    assert not results["crashed"], results["crashed"]
    for key, run in results["runs"].items():
        assert "Traceback" not in run.stdout + run.stderr, run.stderr[-3000:]
        assert "internal error" not in run.stderr, run.stderr[-3000:]
        assert run.returncode == int(key[0]), (key, run.returncode, run.stderr[-3000:])


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(results, case):
    assert case.name not in results["crashed"], results["crashed"][case.name]
    errors = _error_line(results, case.name)
    written = results["out"] / f"{case.name}.json"
    if case.exit == 2:
        assert not written.exists(), "diagnosed, expected to be refused"
        assert len(errors) == 1, errors or results["runs"]["2"].stderr[-2000:]
        for w in case.words:
            assert w in errors[0], (w, errors[0])
        return
    assert not errors, errors
    assert written.exists(), "not diagnosed"
    d = json.loads(written.read_text())
    if case.verdict:
        assert (d["terminal_state"], d["sub_domain"]) == case.verdict, (
            d["terminal_state"],
            d["sub_domain"],
            d["notes"],
        )
        if case.node:
            assert d["root_cause"]["node"] == case.node, d["root_cause"]
    assert not d["rules"]["failed"], d["rules"]["failed"]
    for source, allowed in case.coverage.items():
        c = corpus.cov(d, source)
        allowed = (allowed,) if isinstance(allowed, str) else allowed
        assert c["status"] in allowed, (source, c)
        if case.words:
            text = json.dumps({k: c[k] for k in ("error", "details")})
            for w in case.words:
                assert w in text, (w, c)
    corpus.no_control_characters(d)
    corpus.names_capped()(d)
    if case.check:
        case.check(d)
    # the text summary: one line per item, nothing raw from a file name or a log
    from workload_attribution.cli.diagnose import summary
    from workload_attribution.contracts.models import Diagnosis

    text = summary(Diagnosis.model_validate(d))
    assert all(c.isprintable() for line in text.split("\n") for c in line), [
        line for line in text.split("\n") if not line.isprintable()
    ]


def test_the_warehouse_keeps_what_it_had_and_a_refused_topology_adds_nothing(results):
    before = results["before"]
    for after in results["after"].values():
        for table, rows in before.items():
            if table == "rules_versions":  # last_used moves on: the versions and when first used stay
                rows = {r.rsplit(", datetime", 1)[0] for r in rows}
                now = {r.rsplit(", datetime", 1)[0] for r in after[table]}
            else:
                now = after[table]
            assert rows <= now, (table, len(rows - now))
        # the alias bomb's hosts h0..h999 and the other refused topologies never reach the warehouse
        assert not any("'h999'" in r for r in after["topology_links"])
        assert len(after["topology_links"]) < 100, len(after["topology_links"])


def test_the_corpus_runs_in_bounded_time(results):
    assert results["build_s"] < 20, results["build_s"]
    assert results["elapsed"] < DEADLINE_S, results["elapsed"]


@pytest.mark.parametrize(
    "var,value",
    [
        ("ATTRIBUTION_RULES__SKEW_TOLERANCE_S", "1e309"),
        ("ATTRIBUTION_RULES__SKEW_TOLERANCE_S", "nan"),
        ("ATTRIBUTION_RULES__SKEW_TOLERANCE_S", "-1"),
        ("ATTRIBUTION_RULES__RULE_TIMEOUT_S", "inf"),
        ("ATTRIBUTION_RULES__BURST_WINDOW_S", "1e12"),
        ("ATTRIBUTION_RULES__DEFAULT_COLLECTIVE_TIMEOUT_S", "0"),
    ],
)
def test_out_of_range_settings_are_bad_input(monkeypatch, capsys, var, value):
    monkeypatch.setenv(var, value)
    code = main(["diagnose", "--inline", "--no-warehouse", "--json", str(corpus.WORKED)])
    out, err = capsys.readouterr()
    assert code == 2 and not out, (code, err)
    assert err.count("\n") == 1 and err.startswith("attribution: ") and var.split("__")[-1].lower() in err, err


def test_one_unreadable_host_log_costs_that_host(tmp_path, monkeypatch):
    """A host's log that cannot be opened (permission denied: root reads every file, so the refusal
    is made here) is named in coverage; the other hosts' lines are read, the verdict stands."""
    from tests.helpers import diagnose
    from workload_attribution.staging import files as lines

    b = tmp_path / "b"
    shutil.copytree(corpus.WORKED, b)
    real = lines.open_regular

    def refuse(path):
        if Path(path).name == f"{corpus.OTHER}.log" and Path(path).parent.name == "syslog":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(lines, "open_regular", refuse)
    d = json.loads(diagnose(b).to_json())
    c = corpus.cov(d, "syslog")
    assert c["status"] == "partial" and c["observations"] > 100, c
    assert any(corpus.OTHER in x and "Permission denied" in x for x in c["details"]["not_read"]), c
    assert corpus.OTHER not in c["nodes"] and len(c["nodes"]) == 5, c["nodes"]
    assert (d["terminal_state"], d["sub_domain"], d["root_cause"]["node"]) == (*corpus.NVLINK, corpus.HOST)


def test_no_high_confidence_verdict_rests_on_evidence_that_lies(results):
    """Over the whole corpus: a `high` verdict's root evidence has no quarantined time and no
    non-finite value, no host's clock was found off, and its blamed nodes are the allocation's."""
    for case in CASES:
        written = results["out"] / f"{case.name}.json"
        if case.exit != 0 or not written.exists():
            continue
        d = json.loads(written.read_text())
        if d["confidence"] != "high":
            continue
        cited = set((d["root_cause"] or {}).get("evidence") or [])
        root = [e for e in d["evidence"] if e["id"] in cited]
        assert all(e["time_quality"] != "quarantined" for e in root), (case.name, root)
        assert not any(x in e["text"] for e in root if e["series"] for x in ("NaN", "Inf", "e400")), (case.name, root)
        assert not any(c["details"].get("clock_skew") for c in d["coverage"]), case.name
        assert set(d["affected_nodes"]) <= set(d["attempt"]["nodes"]), (case.name, d["affected_nodes"])
