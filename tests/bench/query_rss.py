"""How much memory `attribution query` takes for a result larger than memory should hold.

    python -m tests.bench.query_rss [--rows 100000000]

Runs `attribution query "SELECT * FROM range(N)" --format json --limit 0 > /dev/null` (rows
streamed in batches) against a small warehouse and prints its wall time and peak RSS, and the
same for csv and table output. The bound it is held to: under 500 MiB.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(args: list[str]) -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    r = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB, the largest child so far
    if r.returncode != 0:
        sys.exit(f"failed: {r.stderr[-500:]}")
    return wall, max(peak, before) / 1024, r.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000_000)
    a = ap.parse_args(argv)
    root = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory(prefix="query-rss-") as tmp:
        wh = Path(tmp) / "w.duckdb"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "workload_attribution",
                "diagnose",
                "--inline",
                "-q",
                str(root / "tests" / "examples" / "xid149-worked"),
                "--warehouse",
                str(wh),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        print(f"{'format':8} {'rows':>12} {'wall':>8} {'peak RSS':>10}")
        for fmt in ("json", "csv", "table"):
            wall, rss, _ = run(
                [
                    sys.executable,
                    "-m",
                    "workload_attribution",
                    "query",
                    f"SELECT * FROM range({a.rows})",
                    "--format",
                    fmt,
                    "--limit",
                    "0",
                    "--warehouse",
                    str(wh),
                ]
            )
            print(f"{fmt:8} {a.rows:>12,} {wall:>7.1f}s {rss:>8.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
