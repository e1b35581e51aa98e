"""Every figure of docs/benchmarks.md, in one run.

    python -m tests.bench --docs          # all parts (about an hour and a half); write docs/benchmarks.md
    python -m tests.bench --quick         # the same parts, smaller: 1M-line scales, one storm per setup
    python -m tests.bench --no-storm      # without Prefect (about 15 minutes)

Runs each bench as its own process, one after the other, so each starts as a user's would (a fresh
interpreter, nothing warm but the page cache), and prints their output as it comes, the load
average before each part (this machine is shared: a number measured under load is the load's as
much as ours), and at the end the exit status of each. Each part's own output ends with a markdown
table; with --docs, each table that a part printed and exited 0 with replaces that part's section
of docs/benchmarks.md (between `<!-- bench: NAME -->` and `<!-- /bench: NAME -->`), headed by the
command, the date, the cores and the load average before it:

  scan          tests/bench/bench.py: cat and grep -F floors, --inline per scale (0.1%, 1% and 10%
                of the lines passing the pre-filter), marginal / grep -F, cost per added hit, phases
  fixed cost    tests/bench/fixed_cost.py: --version, imports, a fresh --inline, a warm process
  latency       tests/bench/diagnose_latency.py: POST /v1/diagnose p50 / p99
  bounds        tests/bench/bounds.py: hostile inputs at full size (a 1 GiB line, 10M lines, ...)
  rules impact  tests/bench/impact.py: archived attempts replayed a minute, per kind of rule change
  warehouse growth  tests/bench/warehouse_growth.py: a diagnosis written into a DuckDB file of
                14 to 14,000 diagnoses (the write, the checkpoint at its close)
  storm         tests/bench/trigger_storm.py: webhook -> diagnosis on Prefect with SQLite and with
                PostgreSQL, one worker (DuckDB file) and two (DuckLake), attempts/h, p50 / p90
  storm, one and two workers on one DuckLake: whether a second worker adds throughput
  webhook burst tests/bench/webhook_burst.py: 1,000 signed webhooks at once, answers and exactly-once
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "benchmarks.md"


def parts(quick: bool, storm: bool, keep: str) -> list[tuple[str, list[str]]]:
    scales = ["64:1M", "64:1M@1%", "64:1M@10%"] + ([] if quick else ["8:100k", "1024:10M", "1024:10M@10%"])
    runs = "1" if quick else "2"
    out = [
        ("scan", ["tests.bench.bench", "--scales", *scales, "--keep", keep, "--csv", str(Path(keep) / "bench.csv")]),
        ("fixed cost", ["tests.bench.fixed_cost", *(["-n", "5", "--rounds", "2"] if quick else [])]),
        ("latency", ["tests.bench.diagnose_latency", *(["-n", "20"] if quick else [])]),
        ("bounds", ["tests.bench.bounds", *(["--only", "nodes-10k", "topology-1m"] if quick else [])]),
        ("rules impact", ["tests.bench.impact", *(["--attempts", "600"] if quick else [])]),
        ("warehouse growth", ["tests.bench.warehouse_growth", *(["--sizes", "14,1400"] if quick else [])]),
    ]
    if storm:
        out += [
            ("storm", ["tests.bench.trigger_storm", "--runs", runs]),
            (
                "storm, one and two workers on one DuckLake",
                ["tests.bench.trigger_storm", "--db", "postgres", "--workers", "1", "--workers", "2"]
                + ["--warehouse", "ducklake", "--runs", runs],
            ),
            ("webhook burst", ["tests.bench.webhook_burst", *(["-n", "200", "--concurrency", "50"] if quick else [])]),
        ]
    return out


def section_name(part: str) -> str:
    """A part's name as its section marker in docs/benchmarks.md: 'fixed cost' -> 'fixed-cost'."""
    return re.sub(r"[^a-z0-9]+", "-", part.lower()).strip("-")


def last_table(output: str) -> str | None:
    """The last markdown table of a part's output (a header, its |---| line, rows), if any."""
    lines = output.splitlines()
    end = max((i for i, line in enumerate(lines) if line.startswith("|")), default=-1)
    if end < 0:
        return None
    start = end
    while start > 0 and lines[start - 1].startswith("|"):
        start -= 1
    table = lines[start : end + 1]
    return "\n".join(table) if len(table) >= 3 and set(table[1]) <= set("|-: ") else None


def splice(doc: str, name: str, body: str) -> str:
    """`doc` with the section `name` (between its two markers) replaced by `body`."""
    begin, end = f"<!-- bench: {name} -->", f"<!-- /bench: {name} -->"
    if begin not in doc or end not in doc:
        raise KeyError(f"{DOC.name} has no section {begin} ... {end}")
    head, _, rest = doc.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{body.strip()}\n{end}{tail}"


def run_part(args: list[str]) -> tuple[int, str]:
    """Run one part as its own process, its output shown as it comes and kept."""
    proc = subprocess.Popen([sys.executable, "-u", "-m", *args], cwd=ROOT, stdout=subprocess.PIPE, text=True, bufsize=1)
    assert proc.stdout is not None
    kept = []
    for line in proc.stdout:
        sys.stdout.write(line)
        kept.append(line)
    return proc.wait(), "".join(kept)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1M-line scales only, each storm setup once")
    ap.add_argument("--no-storm", action="store_true", help="leave out the Prefect storms")
    ap.add_argument("--keep", default="/tmp/wa-bench", help="where the scan's attempts are generated (kept)")
    ap.add_argument("--docs", action="store_true", help=f"write each part's table into {DOC.relative_to(ROOT)}")
    a = ap.parse_args(argv)
    status = []
    for name, args in parts(a.quick, not a.no_storm, a.keep):
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"\n### {name}: python -m {' '.join(args)}  (load average {load})\n", flush=True)
        started = time.perf_counter()
        rc, output = run_part(args)
        status.append((name, rc, time.perf_counter() - started))
        table = last_table(output)
        if a.docs and rc == 0 and table:
            when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            head = f"`python -m {' '.join(args)}`, {when}, {os.cpu_count()} cores, load average before: {load}"
            DOC.write_text(splice(DOC.read_text(), section_name(name), f"{head}\n\n{table}"))
    print("\n### done")
    for name, rc, took in status:
        print(f"  {name}: exit {rc}, {took / 60:.1f} min")
    return max(rc for _, rc, _ in status)


if __name__ == "__main__":
    sys.exit(main())
