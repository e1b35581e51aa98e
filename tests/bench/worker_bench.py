"""Throughput and per-attempt overhead through a Prefect worker (a program that prints numbers).

    python -m tests.bench.worker_bench                    # 40 small attempts, warm worker
    python -m tests.bench.worker_bench -n 40 --process    # the same through Prefect's process worker
    python -m tests.bench.worker_bench --csv worker.csv

It starts the production shape on this machine (a real `prefect server start`, `attribution
deploy`, one `attribution worker --limit L`), generates N small failed attempts (2-4 hosts, the
scenario generator's classes in turn), diagnoses each once with `--inline` in-process to know the
work itself, then submits all N through the `attribute-attempt/attempt` deployment at once and
reads each flow run's timeline back from Prefect:

  queue     created -> started      (poll interval, claim, and for --process the Python start)
  run       started -> ended        (the flow: Prefect engine + tasks + the attribution work)
  work      the same attempt inline, published to a warehouse too (no Prefect): the flow's work
  overhead  created -> ended minus work

and prints p50 / p90 / max of each, the wall time for all N, and attempts per hour per worker.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def make_bundles(base: Path, n: int, seed: int) -> list[Path]:
    from tests.scenarios.generator import CLASSES, new_bundle, write_bundle

    rng = random.Random(seed)
    classes = [c for c in CLASSES if c != "completed"]
    out = []
    for i in range(n):
        cls = classes[i % len(classes)]
        b = new_bundle(rng, cls, n_hosts=rng.randint(2, 4))
        CLASSES[cls](b)
        path = base / f"attempt-{i:04d}"
        write_bundle(b, path, i)
        out.append(path)
    return out


def inline_work(bundles: list[Path], warehouse: Path) -> dict[str, float]:
    """Seconds each attempt takes inline in a warm process, published to a warehouse like the flow
    does: the same work without Prefect."""
    from tests.helpers import diagnose
    from workload_attribution.rules.pack import default_pack

    pack = default_pack()
    diagnose(bundles[0], warehouse=warehouse, pack=pack)  # warm
    out = {}
    for b in bundles:
        t = time.perf_counter()
        diagnose(b, warehouse=warehouse, pack=pack)
        out[str(b)] = time.perf_counter() - t
    return out


async def submit_and_wait(bundles: list[Path], timeout_s: float, one_at_a_time: bool) -> list:
    """All at once (throughput), or each after the one before ended (overhead on an idle worker)."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    async def wait(ids):
        deadline = time.monotonic() + timeout_s
        async with get_client() as client:
            while True:
                runs = [await client.read_flow_run(i) for i in ids]
                if all(r.state and r.state.is_final() for r in runs):
                    return runs
                if time.monotonic() > deadline:
                    raise SystemExit(
                        f"not all runs finished in {timeout_s:.0f} s: "
                        f"{sum(1 for r in runs if r.state and r.state.is_final())}/{len(runs)}"
                    )
                await asyncio.sleep(0.1)

    async def submit(b):
        run = await run_deployment(
            "attribute-attempt/attempt",
            parameters={"target": {"bundle": str(b)}},
            timeout=0,
            idempotency_key=f"bench:{b}:{time.time()}",
        )
        return run.id

    if one_at_a_time:
        return [(await wait([await submit(b)]))[0] for b in bundles]
    return await wait([await submit(b) for b in bundles])


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=40, help="small attempts to push through the worker")
    ap.add_argument("--limit", type=int, default=2, help="flow runs at once on the worker (2 cores here)")
    ap.add_argument("--process", action="store_true", help="Prefect's process worker instead of the warm one")
    ap.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="submit each attempt after the previous one ended: the overhead on an idle warm worker",
    )
    ap.add_argument(
        "--profile",
        metavar="FILE",
        help="py-spy the worker while the runs go through (raw stacks; needs `pip install py-spy`)",
    )
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--csv", metavar="FILE", help="append one row per run")
    ap.add_argument("--keep", metavar="DIR", help="work directory (kept); default a temporary one")
    a = ap.parse_args(argv)

    from tests.services.prefect_stack import PrefectStack

    base = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="worker-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    bundles = make_bundles(base / "bundles", a.n, a.seed)
    work = inline_work(bundles, base / "inline-warehouse.duckdb")
    cfg = base / "attribution.yaml"
    cfg.write_text(yaml.safe_dump({"warehouse": str(base / "warehouse.duckdb")}))
    stack = PrefectStack(base, cfg, worker_args=["--limit", str(a.limit), *(["--process"] if a.process else [])])
    kind = "process" if a.process else "warm"
    try:
        t0 = time.monotonic()
        stack.start()
        print(f"stack up in {time.monotonic() - t0:.1f} s (server, deploy, worker [{kind}], service)", file=sys.stderr)
        spy = None
        if a.profile:
            import subprocess

            spy = subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "--pid",
                    str(stack.procs["worker"].pid),
                    "--idle",
                    "--threads",
                    "-f",
                    "raw",
                    "-o",
                    a.profile,
                    "-r",
                    "50",
                ],
                stderr=subprocess.DEVNULL,
            )
        with stack.client_settings():
            t0 = time.monotonic()
            runs = asyncio.run(submit_and_wait(bundles, timeout_s=60 + 30 * a.n, one_at_a_time=a.one_at_a_time))
            wall = time.monotonic() - t0
        if spy:
            import signal

            spy.send_signal(signal.SIGINT)
            spy.wait(30)
    finally:
        stack.stop()
    failed = [r for r in runs if not r.state.is_completed()]
    rows = []
    for r in runs:
        b = str(r.parameters["target"]["bundle"])
        queue = (r.start_time - r.created).total_seconds()
        run = (r.end_time - r.start_time).total_seconds()
        rows.append(
            {
                "worker": kind,
                "mode": "sequential" if a.one_at_a_time else "burst",
                "bundle": Path(b).name,
                "queue_s": round(queue, 3),
                "run_s": round(run, 3),
                "work_s": round(work[b], 3),
                "overhead_s": round(queue + run - work[b], 3),
                "run_overhead_s": round(run - work[b], 3),
                "state": r.state.type.value,
            }
        )
    how = "one at a time" if a.one_at_a_time else "submitted at once"
    print(f"\n{a.n} small attempts ({how}) through one {kind} worker (--limit {a.limit}), {len(failed)} not completed")
    print(f"{'':18s}{'p50':>8s}{'p90':>8s}{'max':>8s}")
    for key, label in (
        ("queue_s", "queue (s)"),
        ("run_s", "flow run (s)"),
        ("work_s", "work inline (s)"),
        ("run_overhead_s", "run - work (s)"),
        ("overhead_s", "overhead (s)"),
    ):
        vals = [row[key] for row in rows]
        print(f"{label:18s}{pct(vals, 0.5):8.2f}{pct(vals, 0.9):8.2f}{max(vals):8.2f}")
    print(
        f"all {a.n} done in {wall:.1f} s -> {a.n / wall * 3600:,.0f} attempts/hour on this worker "
        f"(mean work inline {statistics.mean(work.values()):.2f} s)"
    )
    if a.csv:
        new = not Path(a.csv).exists()
        with open(a.csv, "a", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            if new:
                w.writeheader()
            w.writerows(rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
