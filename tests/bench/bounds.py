"""The bounds under hostile input, at full size: wall time and peak RSS of one diagnosis each.

    python -m tests.bench.bounds [--only NAME ...] [--keep DIR]

Each case is the worked example (tests/examples/xid149-worked) with one thing made huge, diagnosed
by `attribution diagnose BUNDLE --inline --json --warehouse W` in a process of its own:

    line-1gib        one 1 GiB "line" of NULs (a sparse file) in a host's syslog
    lines-10m        10,000,000 syslog lines (~1 GiB) on one host, a few of them pre-filter hits
    hits-1m          1,000,000 app lines that all pass the rules' pre-filter (NCCL WARN)
    prom-1gib        a 1 GiB metrics/*.prom (~8M samples of one series, repeated)
    nodes-10k        attempt.yaml with 10,000 nodes (and no sacct.json, whose allocation would win)
    topology-1m      topology.yaml with 1,000,000 ports (refused: more than 200,000 links)

It prints the verdict, the coverage of the source made huge, the time and the peak RSS, checks
the bounds docs/faults-and-bounds.md states (peak RSS under 1 GiB, the verdict unchanged,
hardware_failure/nvlink on gb-r12-n04, and for the topology no row added to the warehouse), and
ends with the markdown table of docs/benchmarks.md. The scaled-down versions of each run in the
default test run (tests/hostile).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKED = ROOT / "tests" / "examples" / "xid149-worked"
HOST, OTHER = "gb-r12-n04", "gb-r12-n01"
RSS_BOUND_MIB = 1024


def _line_1gib(b: Path) -> str:
    with open(b / "logs" / "syslog" / f"{OTHER}.log", "ab") as fh:
        fh.truncate(fh.seek(0, 2) + (1 << 30))
    return "syslog"


def _write_repeated(path: Path, block: bytes, total: int) -> None:
    with open(path, "ab") as fh:
        for _ in range(total // block.count(b"\n")):
            fh.write(block)


def _lines_10m(b: Path) -> str:
    lines = [
        f"Nov 20 11:{m:02d}:{s:02d}.000000 {OTHER} systemd[1]: Started Session {m * 60 + s} of user slurm, "
        f"cgroup /system.slice/session-{m * 60 + s}.scope\n"
        for m in range(10)
        for s in range(60)
    ]
    lines[17] = f"Nov 20 11:00:17.000000 {OTHER} kernel: mlx5_core 0000:1b:00.0: mlx5_fw_tracer: event 42\n"
    block = "".join(lines * 10).encode()  # 6,000 lines
    _write_repeated(b / "logs" / "syslog" / f"{OTHER}.log", block, 10_000_000)
    return "syslog"


def _hits_1m(b: Path) -> str:
    block = "".join(
        f"[rank{i % 4}]:[2026-11-20 11:30:00] {OTHER}:3000:3100 [0] NCCL WARN NET/IB : Got async event : "
        f"port active {i}\n"
        for i in range(1000)
    ).encode()
    _write_repeated(b / "logs" / "app" / f"{OTHER}.log", block, 1_000_000)
    return "app"


def _prom_1gib(b: Path) -> str:
    series = (
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="GPU-010",device="nvidia0",modelName="NVIDIA GB200",Hostname="{OTHER}"}}'
    )
    lines = [f"{series} {40 + i % 7} " for i in range(10_000)]
    size, t = 0, 1795168800000
    with open(b / "metrics" / "big.prom", "w") as fh:
        while size < 1 << 30:  # every sample its own time: ~8M distinct samples
            block = "".join(f"{line}{t + i}\n" for i, line in enumerate(lines))
            fh.write(block)
            size, t = size + len(block), t + len(lines)
    return "metrics"


def _nodes_10k(b: Path) -> str:
    spec = b / "attempt.yaml"
    extra = ", ".join(f"gb-r99-n{i:05d}" for i in range(10_000 - 6))
    spec.write_text(spec.read_text().replace("nodes: [", f"nodes: [{extra}, "))
    (b / "scheduler" / "sacct.json").unlink()
    return "syslog"


def _topology_1m(b: Path) -> str:
    with open(b / "topology.yaml", "w") as fh:
        fh.write("switches:\n")
        for s in range(1000):
            fh.write(f"  leaf-{s:04d}:\n    ports:\n")
            fh.writelines(f"      {p}: h{s:04d}-{p:04d}:mlx5_0\n" for p in range(1000))
    return "topology"


CASES: dict[str, Callable[[Path], str]] = {
    "line-1gib": _line_1gib,
    "lines-10m": _lines_10m,
    "hits-1m": _hits_1m,
    "prom-1gib": _prom_1gib,
    "nodes-10k": _nodes_10k,
    "topology-1m": _topology_1m,
}


def cli() -> list[str]:
    exe = Path(sys.executable).parent / "attribution"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "workload_attribution"]


def measure(args: list[str]) -> tuple[int, str, str, float, float]:
    """(exit code, stdout, stderr, seconds, peak RSS MiB) of one child process, on its own."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        proc = subprocess.Popen(args, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read().decode(), err.read().decode(), seconds, usage.ru_maxrss / 1024


def links(warehouse: Path) -> int:
    import duckdb

    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        row = con.execute("SELECT count(*) FROM topology_links").fetchone()
        return int(row[0]) if row else 0
    finally:
        con.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", choices=sorted(CASES), help="these cases (default: all)")
    ap.add_argument("--keep", metavar="DIR", help="build the bundles here and keep them")
    a = ap.parse_args(argv)
    base = Path(a.keep or tempfile.mkdtemp(prefix="bounds-bench-"))
    failures: list[str] = []
    rows: list[str] = []
    try:
        print(f"{'case':<13} {'build':>7} {'diagnose':>9} {'peak RSS':>10}  verdict / coverage")
        for name in a.only or list(CASES):
            b = base / name
            shutil.rmtree(b, ignore_errors=True)
            shutil.copytree(WORKED, b)
            started = time.monotonic()
            source = CASES[name](b)
            built = time.monotonic() - started
            wh = base / f"{name}.duckdb"
            wh.unlink(missing_ok=True)
            code, out, err, seconds, rss = measure(
                [*cli(), "diagnose", str(b), "--inline", "--json", "-q", "--warehouse", str(wh)]
            )
            if code != 0:
                failures.append(f"{name}: exit {code}: {err.strip()[-300:]}")
                print(f"{name:<13} {built:6.1f}s {seconds:8.1f}s {rss:7.0f} MiB  exit {code}: {err.strip()[-200:]}")
                continue
            d = json.loads(out)
            c = next(x for x in d["coverage"] if x["source"] == source)
            shown = {
                k: v
                for k, v in c["details"].items()
                if v
                and k
                in (
                    "long_lines",
                    "truncated_bytes",
                    "lines_with_bad_bytes",
                    "matched_lines",
                    "missing_nodes",
                    "duplicate_samples",
                )
            }
            if "missing_nodes" in shown:
                shown["missing_nodes"] = len(shown["missing_nodes"])
            print(
                f"{name:<13} {built:6.1f}s {seconds:8.1f}s {rss:7.0f} MiB  {d['terminal_state']}/{d['sub_domain']} "
                f"{source}={c['status']} observations={c['observations']:,} {shown} "
                + (f"error={c['error'][:80]!r}" if c["error"] else "")
            )
            rows.append(
                f"| `{name}` | {seconds:.1f} s | {rss:,.0f} MiB | {d['terminal_state']}/{d['sub_domain']} "
                f"| {source} `{c['status']}`, {c['observations']:,} observations"
                + "".join(f", `{k}` {v:,}" for k, v in shown.items())
                + (f", error: {c['error'][:60]}{'…' if len(c['error']) > 60 else ''}" if c["error"] else "")
                + " |"
            )
            if rss >= RSS_BOUND_MIB:
                failures.append(f"{name}: peak RSS {rss:.0f} MiB, over {RSS_BOUND_MIB} MiB")
            if (d["terminal_state"], d["sub_domain"]) != ("hardware_failure", "nvlink") or (
                (d.get("root_cause") or {}).get("node") != HOST
            ):
                failures.append(f"{name}: verdict {d['terminal_state']}/{d['sub_domain']}")
            if name == "topology-1m" and (c["status"] != "error" or links(wh) != 0):
                failures.append(f"{name}: topology {c['status']}, {links(wh)} link(s) in the warehouse")
            shutil.rmtree(b)
    finally:
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)
    for f in failures:
        print(f"FAILED {f}")
    print("\n| case | diagnose | peak RSS | verdict | coverage of the source made huge |")
    print("| --- | ---: | ---: | --- | --- |\n" + "\n".join(rows))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
