"""Log templates: Drain (PyPI drain3) against the regex masking pass in DuckDB (tasks/templates.py).

    python -m tests.bench.templates [--hosts 16] [--lines 200000]

Generates one attempt (tests/bench/bench.py's make_attempt: the scenario generator's GPU fault in
noise), takes every line's message after its prefix (staging's parse_log_line), then times, on the
same messages, one core each where it can:
  - Drain3's TemplateMiner with its default configuration, one add_log_message per message;
  - Drain3 with masking of numbers, hex and IPs configured (what a fair template needs);
  - DuckDB's masking (tasks/templates.mask_expression) and GROUP BY over the messages, and over
    the whole lines (what templates_of masks: times and rank labels are masked like any number);
  - the whole of tasks/templates.templates_of on the bundle (read, prefix grammar, masking, counts).
Drain3 is installed apart (`pip install --no-deps drain3 jsonpickle`): it pins cachetools 4.2.1,
which Prefect refuses. Prints a markdown table of lines per second.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import duckdb

from tests.bench.bench import make_attempt
from workload_attribution.staging.database import sql
from workload_attribution.tasks.templates import mask_expression, templates_of


def messages(bundle: Path, hosts: list[str]) -> tuple[duckdb.DuckDBPyConnection, int]:
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.execute(sql("log_time_macros.sql"))
    files = [str(p) for p in sorted((bundle / "logs").glob("*/*.log"))]
    con.execute(
        "CREATE TABLE raw AS SELECT line FROM read_csv($f, columns={'line': 'VARCHAR'}, delim=chr(0), "
        "header=false, quote='', escape='')",
        {"f": files},
    )
    con.execute("CREATE TABLE msg AS SELECT parse_log_line(line, 'UTC', TIMESTAMP '2026-01-01')['body'] AS m FROM raw")
    return con, con.execute("SELECT count(*) FROM msg").fetchone()[0]  # type: ignore[index]


def drain(lines: list[str], masked: bool) -> tuple[float, int]:
    from drain3 import TemplateMiner
    from drain3.masking import MaskingInstruction
    from drain3.template_miner_config import TemplateMinerConfig

    config = TemplateMinerConfig()
    if masked:
        config.masking_instructions = [
            MaskingInstruction(r"((?<=[^A-Za-z0-9])|^)(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})((?=[^A-Za-z0-9])|$)", "IP"),
            MaskingInstruction(r"((?<=[^A-Za-z0-9])|^)(0x[a-f0-9A-F]+)((?=[^A-Za-z0-9])|$)", "HEX"),
            MaskingInstruction(r"((?<=[^A-Za-z0-9])|^)([\-\+]?\d+)((?=[^A-Za-z0-9])|$)", "NUM"),
        ]
    config.profiling_enabled = False
    miner = TemplateMiner(config=config)
    t0 = time.perf_counter()
    for line in lines:
        miner.add_log_message(line)
    return time.perf_counter() - t0, len(miner.drain.clusters)


def drain_installed() -> bool:
    try:
        import drain3  # noqa: F401
    except ImportError:
        print("drain3 is not installed: its rows are left out (pip install --no-deps drain3 jsonpickle)")
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--lines", type=int, default=200_000)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-templates-") as tmp:
        bundle = Path(tmp) / "attempt"
        made = make_attempt(bundle, args.hosts, args.lines)
        hosts = [Path(f).stem for f in made["files"]]
        con, n = messages(bundle, hosts)
        bodies = [r[0] for r in con.execute("SELECT m FROM msg").fetchall()]
        rows = []
        for masked in (False, True) if drain_installed() else ():
            seconds, count = drain(bodies, masked)
            rows.append(
                (f"Drain3 0.9.11, {'numbers, hex, IPs masked' if masked else 'default configuration'}", seconds, count)
            )
        for table, what in (("msg", "the same messages"), ("raw", "whole lines, prefix and all")):
            t0 = time.perf_counter()
            expr = mask_expression("m" if table == "msg" else "line", sorted(set(hosts)))
            count = con.execute(f"SELECT count(DISTINCT {expr}) FROM {table}").fetchone()[0]  # type: ignore[index]
            rows.append((f"DuckDB masking + GROUP BY, 1 thread, {what}", time.perf_counter() - t0, count))
        t0 = time.perf_counter()
        whole = templates_of(bundle)
        rows.append(
            (
                f"tasks/templates.py templates_of (files read, masked, counted), {os.cpu_count()} cores",
                time.perf_counter() - t0,
                len(whole.templates),
            )
        )
    print(f"{n:,} messages of a {args.hosts}-host generated attempt ({made['bytes'] / 1e6:.0f} MB)\n")
    print("| method | seconds | lines/s | templates |")
    print("| --- | ---: | ---: | ---: |")
    for name, seconds, count in rows:
        print(f"| {name} | {seconds:.2f} | {n / seconds:,.0f} | {count} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
