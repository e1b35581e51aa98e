"""Every throughput number of README's "How fast", in one run (issue 19).

    python -m tests.bench                 # scan, fixed cost, POST latency, the storm matrix (about an hour)
    python -m tests.bench --quick         # the same parts, smaller: 1M-line scales, one storm per setup
    python -m tests.bench --no-storm      # without Prefect (a few minutes)

Runs each bench as its own process, one after the other, so each starts as a user's would (a fresh
interpreter, nothing warm but the page cache), and prints their output as it comes, the load
average before each part (this machine is shared: a number measured under load is the load's as
much as ours), and at the end the exit status of each. Each part's own output ends with the
markdown table README shows:

  scan        tests/bench/bench.py: cat and grep -F floors, --inline per scale (0.1%, 1% and 10% of
              the lines passing the pre-filter), marginal / grep -F, cost per added hit, phases
  fixed cost  tests/bench/fixed_cost.py: --version, imports, a fresh --inline, a warm process
  latency     tests/bench/diagnose_latency.py: POST /v1/diagnose p50 / p99
  storm       tests/bench/trigger_storm.py: webhook -> diagnosis on Prefect with SQLite and with
              PostgreSQL, one worker (DuckDB file) and two (DuckLake), attempts/h, p50 / p90; then
              one and two workers on the same DuckLake (whether a second worker adds throughput)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def parts(quick: bool, storm: bool, keep: str) -> list[tuple[str, list[str]]]:
    scales = ["64:1M", "64:1M@1%", "64:1M@10%"] + ([] if quick else ["8:100k", "1024:10M", "1024:10M@10%"])
    runs = "1" if quick else "2"
    out = [
        ("scan", ["tests.bench.bench", "--scales", *scales, "--keep", keep, "--csv", str(Path(keep) / "bench.csv")]),
        ("fixed cost", ["tests.bench.fixed_cost", *(["-n", "5", "--rounds", "2"] if quick else [])]),
        ("latency", ["tests.bench.diagnose_latency", *(["-n", "20"] if quick else [])]),
    ]
    if storm:
        out += [
            ("storm", ["tests.bench.trigger_storm", "--runs", runs]),
            (
                "storm, one and two workers on one DuckLake",
                ["tests.bench.trigger_storm", "--db", "postgres", "--workers", "1", "--workers", "2"]
                + ["--warehouse", "ducklake", "--runs", runs],
            ),
        ]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1M-line scales only, each storm setup once")
    ap.add_argument("--no-storm", action="store_true", help="leave out the Prefect storms")
    ap.add_argument("--keep", default="/tmp/wa-bench", help="where the scan's attempts are generated (kept)")
    a = ap.parse_args(argv)
    status = []
    for name, args in parts(a.quick, not a.no_storm, a.keep):
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"\n### {name}: python -m {' '.join(args)}  (load average {load})\n", flush=True)
        started = time.perf_counter()
        rc = subprocess.call([sys.executable, "-m", *args], cwd=ROOT)
        status.append((name, rc, time.perf_counter() - started))
    print("\n### done")
    for name, rc, took in status:
        print(f"  {name}: exit {rc}, {took / 60:.1f} min")
    return max(rc for _, rc, _ in status)


if __name__ == "__main__":
    sys.exit(main())
