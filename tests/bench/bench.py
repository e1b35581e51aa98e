"""The benchmark: attribution against the floor of a plain scan, at growing scale.

    python -m tests.bench.bench                              # default scales, table + CSV
    python -m tests.bench.bench --scales 8:100k 64:1M 1024:10M --csv bench.csv --keep /tmp/bench

For each scale (hosts : log lines) it generates one failed attempt with the scenario generator (a
GPU falling off the bus on one host, its NCCL cascade on every rank) and buries it in realistic
noise (training steps, NCCL INFO, kernel and systemd chatter) up to the line count. Few noise lines
hold a pre-filter literal (~0.1%, NCCL's bootstrap lines): routine logs are mostly lines no rule
reads. A scale `HOSTS:LINES@HITS%` makes that share of the noise lines ones the rules must read
(the driver's `NVRM: GPU at PCI:... GPU-<uuid>` line, which it prints before each event it reports
about a GPU), to measure what each line that passes the pre-filter costs. Then, on the same files, warm in the
page cache:

  cat      cat every log file > /dev/null                    (the raw read)
  grep -F  one `grep -F -c -f` pass with the rules' pre-filter literals and the catalogs' (what
           the rules look for: the floor), its counts written to a file (on /dev/null GNU grep stops
           at each file's first match, and would not scan the files)
  grep -E  the same literals as one `grep -E` alternation      (a slower floor, for comparison)
  hyperscan the same literals as one Hyperscan database, one core, each file read then scanned
           (the floor of the pre-filter itself: compiled before the clock starts; without the
           hyperscan wheel, not measured)
  inline   `attribution diagnose --inline --no-warehouse`     (wall and peak RSS of the process)
  phases   the same steps timed one by one in a fresh process (scope, collect, store, rules, report)

and prints, per scale, the lines that pass the pre-filter (hits), lines/s, the ratio
inline/grep -F, the cost per hit beyond the scan, the marginal cost (inline at this scale
minus inline on a tiny attempt) over the Hyperscan floor, grep -F and grep -E, peak RSS, the
pre-filter engine the diagnosis ran (staging/prefilter.py: ATTRIBUTION_PREFILTER=duckdb measures
the fallback) and the load average before the scale's runs (this is a shared machine); every row
goes to the CSV too.

The marginal cost is the difference of two times of a few tenths of a second each, on a shared
machine whose speed drifts by a fifth within minutes: the best tiny run against the best large
one, taken minutes apart, put the same commit's ratio anywhere from 2.3x to 4.8x. So each scale
runs the tiny attempt and the large one alternately, --repeat pairs, and the marginal is the
median of the pairs' differences; it is given twice, as wall time and as CPU time (user + system
of the process and its threads, from wait4: what the attempt asked of the cores, whatever else
ran). The floor is one core's work, so the CPU marginal over the floor is the stricter ratio (a
diagnosis that spreads over two cores pays for both).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

NOISE_APP = [
    "[rank{r}]: step {s} | loss {l:.4f} | lr 3.000e-04 | grad_norm {g:.3f} | tokens/s {t}",
    "[rank{r}]: iteration {s}/200000 consumed samples {c} elapsed time per iteration (ms): {t}",
    "{h}:{p}:{p} [{gpu}] NCCL INFO Channel {ch:02d}/0 : {r} -> {r2} via P2P/CUMEM",
    "[rank{r}]: [checkpoint] saving shard {ch} of step {s} to /lustre/ckpt/run-17/iter_{s:07d}",
    "[rank{r}]: dataloader worker {ch} prefetch queue depth {g:.0f}",
]
NOISE_SYS = [
    "{h} systemd[1]: Started Session {s} of User slurm.",
    "{h} kernel: [{k:.6f}] perf: interrupt took too long ({t} > {c}), lowering kernel.perf_event_max_sample_rate",
    "{h} slurmstepd[{p}]: debug:  jag_common_poll_data: Task 0 pid {p} ave_freq = 2100000 mem size/max 1234/5678",
    "{h} chronyd[812]: Selected source 10.0.0.{ch}",
    # AppArmor denials: a kernel line that floods real hosts' syslog (and no rule reads)
    '{h} kernel: [{k:.6f}] audit: type=1400 audit({c}.{g:.0f}:{s}): apparmor="DENIED" operation="open" '
    'profile="/usr/sbin/chronyd" name="/proc/{p}/status" pid={p} comm="chronyd" requested_mask="r" '
    'denied_mask="r" fsuid=0 ouid=0',
]
# A line the rules must read (pcie-aer-errors, gpu-driver-lost map a PCI address to its GPU by it):
# the form the driver prints before each event it reports (tests/real/SOURCES.md has verbatim ones).
HIT = "{h} kernel: [{k:.6f}] NVRM: GPU at PCI:0000:{ch:02x}:00: GPU-5c24755a-a937-465c-27bc-8658613a{ch:04x}"


def parse_scale(text: str) -> tuple[int, int, float]:
    """HOSTS:LINES[@HITS%]: 64:1M, or 64:1M@10% with a tenth of the noise lines read by the rules."""
    hosts, _, rest = text.partition(":")
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmM]?)(?:@(\d+(?:\.\d+)?)%)?", rest)
    if not hosts.isdigit() or not m or float(m.group(3) or 0) > 50:
        raise argparse.ArgumentTypeError(f"{text!r}: HOSTS:LINES[@HITS%], e.g. 64:1M or 64:1M@10%")
    mult = {"": 1, "k": 1_000, "m": 1_000_000}[m.group(2).lower()]
    return int(hosts), int(float(m.group(1)) * mult), float(m.group(3) or 0) / 100


def make_attempt(out: Path, hosts: int, lines: int, seed: int = 1, hit_share: float = 0.0) -> dict:
    """One failed attempt with `hosts` hosts and about `lines` log lines, the fault buried in noise
    (a share `hit_share` of which are lines the rules read)."""
    from tests.scenarios.generator import CLASSES, new_bundle, write_bundle

    rng = random.Random(f"bench:{hosts}:{lines}:{seed}")
    b = new_bundle(rng, "gpu", n_hosts=hosts)
    CLASSES["gpu"](b)
    write_bundle(b, out, 0)
    logs = sorted((out / "logs").glob("*/*.log"))
    have = sum(f.read_bytes().count(b"\n") for f in logs)
    pad = max(0, lines - have)
    span = (b.end - b.start).total_seconds()
    per_host = pad // (2 * hosts) + 1
    for h in b.hosts:
        for source, templates, share in (("app", NOISE_APP, per_host), ("syslog", NOISE_SYS, per_host)):
            path = out / "logs" / source / f"{h.name}.log"
            if not path.exists():
                continue
            step = span / share
            chunk = []
            # the hits are kernel lines: syslog's half of the noise carries all of them
            every = round(1 / (2 * hit_share)) if hit_share and source == "syslog" else 0
            for i in range(share):
                t = b.start + timedelta(seconds=i * step)
                tmpl = HIT if every and i % every == 0 else templates[i % len(templates)]
                body = tmpl.format(
                    r=i % (b.gpus * hosts),
                    r2=(i + 1) % (b.gpus * hosts),
                    s=i,
                    l=2.5 - i * 1e-7,
                    g=(i % 97) / 10,
                    t=30000 + i % 5000,
                    c=i * 4096,
                    h=h.name,
                    p=1000 + i % 50000,
                    gpu=i % b.gpus,
                    ch=i % 32,
                    k=1000.0 + i * step,
                )
                chunk.append(f"{t.strftime('%Y-%m-%dT%H:%M:%S.%f')[:-3]}Z {body}\n")
            original = path.read_text(encoding="utf-8", errors="replace")
            with open(path, "w", encoding="utf-8") as f:  # noise first, then the attempt's own lines
                f.writelines(chunk)
                f.write(original)
    logs = sorted((out / "logs").glob("*/*.log"))
    return {
        "hosts": hosts,
        "lines": sum(f.read_bytes().count(b"\n") for f in logs),
        "bytes": sum(f.stat().st_size for f in logs),
        "files": [str(f) for f in logs],
        "expected": b.expected,
    }


def literals() -> list[str]:
    """The literals the rules' pre-filter keeps, for every text source: what grep must look for."""
    from workload_attribution.rules.pack import default_pack

    pack = default_pack()
    return sorted({lit for src in ("app", "syslog", "fabricmanager") for lit in pack.prefilter(src) if lit})


def patterns() -> list[str]:
    """The same literals as extended regular expressions (for grep -E)."""
    return [re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", lit) for lit in literals()]


# the CPU seconds (user + system, the process and its threads) of each run_timed answer, by its id
CPU: dict[int, float] = {}


def run_timed(cmd: list[str], env: dict | None = None, stdout=subprocess.DEVNULL) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (MiB) of the child, its stdout (its CPU seconds: CPU[id(answer)])."""
    started = time.perf_counter()
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE if stdout is None else stdout, stderr=subprocess.PIPE, env=env, cwd=ROOT
    )
    out = p.stdout.read().decode() if p.stdout else ""
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[:4]} exited {p.returncode}: {p.stderr.read().decode()[-1500:]}")
    answer = (wall, usage.ru_maxrss // 1024, out)
    CPU[id(answer)] = usage.ru_utime + usage.ru_stime
    return answer


def grep_to_file(kind: str, patterns_file: Path, files: list[str], counts: Path, env: dict) -> tuple[float, int, str]:
    """One `grep <kind> -c -f patterns` pass over the files, its per-file counts written to a file."""
    with counts.open("w") as out:
        return run_timed(["grep", kind, "-c", "-f", str(patterns_file), *files], env, out)


def hyperscan_floor(literals_file: str, files: list[str]) -> dict[str, float]:
    """Seconds to read each file and scan it with one Hyperscan database of the literals (compiled
    first, off the clock), on one core, and the matches found; run in a fresh process by the bench."""
    import hyperscan

    lits = sorted({line.encode() for line in Path(literals_file).read_text().split("\n") if line})
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(expressions=lits, ids=list(range(len(lits))), elements=len(lits), flags=[0] * len(lits), literal=True)
    matches = 0

    def found(*_: object) -> None:
        nonlocal matches
        matches += 1

    started = time.perf_counter()
    for f in files:
        db.scan(Path(f).read_bytes(), match_event_handler=found)
    return {"seconds": time.perf_counter() - started, "matches": matches}


def floor_of(literals_file: Path, files: list[str], env: dict) -> float | None:
    """The Hyperscan floor of a scale, best of three fresh processes; None without the wheel."""
    try:
        import hyperscan  # noqa: F401
    except ImportError:
        return None
    cmd = [sys.executable, "-m", "tests.bench.bench", "--hyperscan-floor", str(literals_file), *files]
    return min(json.loads(run_timed(cmd, env, None)[2])["seconds"] for _ in range(3))


def best(n: int, fn):
    runs = [fn() for _ in range(n)]
    return min(runs, key=lambda r: r[0]), runs


@dataclass
class Paired:
    """A scale's attempt run alternately with the tiny one: the large runs, and the median of the
    pairs' differences in wall and in CPU seconds (each at least 0)."""

    runs: list[tuple[float, int, str]]
    marginals: list[float]
    cpu_marginals: list[float]

    @property
    def best(self) -> tuple[float, int, str]:
        return min(self.runs, key=lambda r: r[0])

    @property
    def marginal(self) -> float:
        return max(0.0, statistics.median(self.marginals))

    @property
    def cpu_marginal(self) -> float:
        return max(0.0, statistics.median(self.cpu_marginals))


def paired(n: int, tiny, large) -> Paired:
    """n pairs (tiny, large), each pair run back to back so both see the same machine."""
    runs, walls, cpus = [], [], []
    for _ in range(n):
        t, big = tiny(), large()
        runs.append(big)
        walls.append(big[0] - t[0])
        cpus.append(CPU[id(big)] - CPU[id(t)])
    return Paired(runs, walls, cpus)


def phases(bundle: str) -> dict[str, float]:
    """The inline steps, timed one by one (run in a fresh process by the bench)."""
    from workload_attribution.contracts.identity import Target
    from workload_attribution.flows.pipeline import Options  # noqa: F401  (same imports as a real run)
    from workload_attribution.rules.pack import default_pack
    from workload_attribution.tasks import steps

    t = {}
    s = time.perf_counter()
    pack = default_pack()
    t["load_rules"] = time.perf_counter() - s
    s = time.perf_counter()
    scoped = steps.scope_attempt(Target(bundle=bundle))
    t["scope"] = time.perf_counter() - s
    s = time.perf_counter()
    results = [steps.collect_source(scoped, src, pack) for src in scoped.sources]
    t["collect"] = time.perf_counter() - s
    s = time.perf_counter()
    coverage = steps.normalize_collected(scoped, results)
    t["store"] = time.perf_counter() - s
    s = time.perf_counter()
    steps.attribute(scoped, coverage, pack)
    t["rules_and_report"] = time.perf_counter() - s
    steps.drop_staging(scoped)
    return t


def _n(x: int) -> str:
    return f"{x / 1e6:.1f}M" if x >= 1_000_000 else f"{x / 1e3:.0f}k" if x >= 1_000 else str(x)


def markdown(rows: list[dict]) -> str:
    """The rows as a markdown table (docs/benchmarks.md, "The scan")."""
    out = [
        "| hosts | lines | hits (share) | MiB | Hyperscan floor | grep -F | --inline | marginal (CPU) "
        "| **marginal / floor** (CPU) | marginal / grep -F | per added hit | peak RSS | collect / store / rules "
        "| pre-filter | load |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |",
    ]
    for r in rows:
        hit = f"{r['us_per_added_hit']:.1f} us" if r["us_per_added_hit"] is not None else ""
        phases = " / ".join(f"{r[f'phase_{k}_s']:.2f}" for k in ("collect", "store", "rules_and_report"))
        floor = f"{r['hs_floor_s']:.2f} s" if r["hs_floor_s"] is not None else "-"
        vs_floor = (
            f"**{r['marginal_vs_floor']:.1f}x** ({r['marginal_cpu_vs_floor']:.1f}x)"
            if r["marginal_vs_floor"] is not None
            else "-"
        )
        out.append(
            f"| {r['hosts']} | {_n(r['lines'])} | {_n(r['hits'])} ({r['hits'] / r['lines']:.2%}) | {r['mib']:.0f} "
            f"| {floor} | {r['grep_f_s']:.2f} s | {r['inline_s']:.2f} s "
            f"| {r['marginal_s']:.2f} s ({r['marginal_cpu_s']:.2f} s) "
            f"| {vs_floor}{'' if r['correct'] else ' (WRONG diagnosis)'} | {r['marginal_vs_grep_f']:.2f}x | {hit} "
            f"| {r['inline_rss_mib']} MiB | {phases} s | {r['prefilter']} | {r['load_avg_1m']:.1f} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--scales",
        nargs="+",
        type=parse_scale,
        default=[parse_scale(s) for s in ("8:100k", "64:1M", "64:1M@1%", "64:1M@10%", "256:3M", "1024:10M")],
        help="HOSTS:LINES[@HITS%%] (default: %(default)s)",
    )
    ap.add_argument("--csv", default="bench.csv", help="append the rows here")
    ap.add_argument("--keep", metavar="DIR", help="generate into DIR and keep it (default: a temporary directory)")
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="runs per measurement: the best of the floors, the median of the (tiny, large) pairs' marginals",
    )
    ap.add_argument("--phases-of", metavar="BUNDLE", help=argparse.SUPPRESS)
    ap.add_argument("--hyperscan-floor", nargs="+", metavar="FILE", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.phases_of:
        print(json.dumps(phases(a.phases_of)))
        return 0
    if a.hyperscan_floor:
        print(json.dumps(hyperscan_floor(a.hyperscan_floor[0], a.hyperscan_floor[1:])))
        return 0
    from workload_attribution.staging.prefilter import engine

    prefilter = engine()
    print(f"pre-filter engine of the diagnoses: {prefilter}")
    base = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="attribution-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    lit = base / "literals.txt"
    lit.write_text("\n".join(literals()) + "\n")
    pat = base / "patterns.txt"
    pat.write_text("\n".join(patterns()) + "\n")
    py = sys.executable
    diagnose = lambda b: [py, "-m", "workload_attribution", "diagnose", str(b), "--inline", "--no-warehouse", "--json"]  # noqa: E731
    env = {**os.environ, "LC_ALL": "C"}

    tiny = base / "tiny"
    if not tiny.exists():
        make_attempt(tiny, 2, 1_000)
    run_tiny = lambda: run_timed(diagnose(tiny), env, None)  # noqa: E731
    (tiny_wall, tiny_rss, _), _ = best(max(a.repeat, 3), run_tiny)
    print(f"tiny attempt (2 hosts, ~1k lines): --inline {tiny_wall:.2f} s wall, {tiny_rss} MiB peak RSS")

    counts_file = base / "grep-counts.txt"
    rows = []
    for hosts, lines, hit_share in a.scales:
        d = base / f"h{hosts}-l{lines}-hits{hit_share * 100:g}"
        t0 = time.perf_counter()
        info = (
            make_attempt(d, hosts, lines, hit_share=hit_share)
            if not (d / "bench.json").exists()
            else json.loads((d / "bench.json").read_text())
        )
        (d / "bench.json").write_text(json.dumps(info))
        gen_s = time.perf_counter() - t0
        files = info["files"]
        run_timed(["cat", *files], env)  # into the page cache
        load = os.getloadavg()
        (cat_s, cat_rss, _), _ = best(a.repeat, lambda files=files: run_timed(["cat", *files], env))
        # grep's counts are written to a file: with its output on /dev/null GNU grep stops reading
        # each file at its first match (grep.c, dev_null_output), and -c would time a partial scan
        (grep_s, grep_rss, _), _ = best(a.repeat, lambda files=files: grep_to_file("-F", lit, files, counts_file, env))
        hits = sum(int(line.rpartition(":")[2]) for line in counts_file.read_text().split())
        (grepe_s, _, _), _ = best(a.repeat, lambda files=files: grep_to_file("-E", pat, files, counts_file, env))
        floor_s = floor_of(lit, files, env)
        pairs = paired(a.repeat, run_tiny, lambda d=d: run_timed(diagnose(d), env, None))
        inl_s, inl_rss, out = pairs.best
        doc = json.loads(out)
        ok = (doc["terminal_state"], doc["sub_domain"], doc["affected_nodes"]) == (
            info["expected"]["terminal_state"],
            info["expected"]["sub_domain"],
            info["expected"]["affected_nodes"],
        )
        _, _, ph = run_timed([py, "-m", "tests.bench.bench", "--phases-of", str(d)], env, None)
        ph = json.loads(ph)
        marginal, cpu_marginal = pairs.marginal, pairs.cpu_marginal
        # what a line passing the pre-filter costs: against the same scale without the added hits
        base_row = next(
            (r for r in rows if (r["hosts"], r["hit_share"]) == (hosts, 0.0) and r["lines"] >= lines * 0.99), None
        )
        per_hit = (
            (marginal - base_row["marginal_s"]) / (hits - base_row["hits"]) * 1e6
            if base_row and hits - base_row["hits"] >= 0.05 * lines  # fewer: within run-to-run noise
            else None
        )
        row = {
            "hosts": hosts,
            "lines": info["lines"],
            "hit_share": hit_share,
            "hits": hits,
            "mib": round(info["bytes"] / 2**20, 1),
            "cat_s": round(cat_s, 3),
            "grep_f_s": round(grep_s, 3),
            "grep_e_s": round(grepe_s, 3),
            "hs_floor_s": round(floor_s, 3) if floor_s is not None else None,
            "inline_s": round(inl_s, 3),
            "tiny_s": round(tiny_wall, 3),
            "marginal_s": round(marginal, 3),
            "marginal_cpu_s": round(cpu_marginal, 3),
            "marginals_s": " ".join(f"{x:.3f}" for x in pairs.marginals),
            "us_per_added_hit": round(per_hit, 1) if per_hit is not None else None,
            "inline_vs_grep_f": round(inl_s / grep_s, 2),
            "marginal_vs_grep_f": round(marginal / grep_s, 2),
            "marginal_vs_grep_e": round(marginal / grepe_s, 2),
            "marginal_vs_floor": round(marginal / floor_s, 2) if floor_s else None,
            "marginal_cpu_vs_floor": round(cpu_marginal / floor_s, 2) if floor_s else None,
            "prefilter": prefilter,
            "lines_per_s": int(info["lines"] / inl_s),
            "inline_rss_mib": inl_rss,
            "grep_rss_mib": grep_rss,
            "correct": ok,
            "load_avg_1m": round(load[0], 2),
            **{f"phase_{k}_s": round(v, 3) for k, v in ph.items()},
            "generate_s": round(gen_s, 1),
        }
        rows.append(row)
        print(
            f"\n== {hosts} hosts, {info['lines']:,} lines, {row['mib']} MiB, {hits:,} pass the pre-filter "
            f"({hits / info['lines']:.2%}) =="
        )
        shown_floor = f"{floor_s:.3f} s" if floor_s is not None else "not measured (no hyperscan wheel)"
        vs_floor = (
            f"{marginal / floor_s:.1f}x the Hyperscan floor "
            f"(CPU: {cpu_marginal:.2f} s, {cpu_marginal / floor_s:.1f}x), "
            if floor_s
            else ""
        )
        print(f"  Hyperscan floor {shown_floor}   pre-filter of the diagnosis: {prefilter}")
        print(
            f"  cat {cat_s:.2f} s   grep -F {grep_s:.2f} s ({grep_rss} MiB)   grep -E {grepe_s:.2f} s   "
            f"--inline {inl_s:.2f} s ({inl_rss} MiB)   {row['lines_per_s']:,} lines/s   correct={ok}"
        )
        print(
            f"  inline/grep-F {row['inline_vs_grep_f']:.2f}x   marginal (median of {a.repeat} pairs with the tiny "
            f"attempt: {row['marginals_s']} s): "
            f"{marginal:.2f} s = {vs_floor}{row['marginal_vs_grep_f']:.2f}x grep-F, "
            f"{row['marginal_vs_grep_e']:.2f}x grep-E   "
            f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
        )
        print("  phases: " + "  ".join(f"{k} {v:.2f}s" for k, v in ph.items()))
        if per_hit is not None:
            print(f"  each line added to the pre-filter's hits: {per_hit:.1f} us (against {hosts}:{lines:,} without)")
    fields = list(rows[0]) + ["when"]
    header = Path(a.csv).read_text().partition("\n")[0] if Path(a.csv).exists() else None
    with open(a.csv, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        if header != ",".join(fields):  # a new file, or one an older bench wrote with other columns
            w.writeheader()
        for r in rows:
            w.writerow({**r, "when": time.strftime("%Y-%m-%dT%H:%M:%S")})
    print(f"\nrows appended to {a.csv}\n")
    print(markdown(rows))
    if not a.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
