"""`attribution worker`: run the pool's flow runs, warm, in this process."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from workload_attribution.cli import common
from workload_attribution.cli.common import EXIT_OK
from workload_attribution.cli.deploy import need_prefect_server


def add(sub: Any) -> None:
    wk = common.command(
        sub,
        "worker",
        help="run the attribution pool's flow runs (warm, in this process)",
        description="Take flow runs from the work pool and run them in this already-warm process "
        "(no Python start per run). --process uses Prefect's process worker instead "
        "(a process per run: crash isolation, ~5 s more per run).",
    )
    wk.add_argument("--pool", default="attribution")
    wk.add_argument("--queue", action="append", help="only these work queues (repeatable; default all)")
    wk.add_argument("--limit", type=int, default=4, help="flow runs at once on this worker")
    wk.add_argument("--poll", type=float, default=0.25, help="seconds between polls of the pool")
    wk.add_argument("--process", action="store_true", help="Prefect's process worker (a process per flow run)")
    wk.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    need_prefect_server()
    common.load_config(args)  # fail here, not in every flow run, when the configuration is broken
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if args.process:
        # the engine of each run then beats as this worker does (Prefect's default is every 180 s,
        # past the 90 s after which `attribution deploy`'s automation crashes a silent run)
        beat = max(30, int(float(os.environ.get("ATTRIBUTION_HEARTBEAT_S", "30"))))
        os.environ.setdefault("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", str(beat))
        os.execvp(
            sys.executable,
            [
                sys.executable,
                "-m",
                "prefect",
                "worker",
                "start",
                "--pool",
                args.pool,
                "--limit",
                str(args.limit),
                "--type",
                "process",
            ],
        )
    import logging
    import signal

    from workload_attribution.flows.worker import InProcessWorker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    worker = InProcessWorker(args.pool, queues=args.queue, limit=args.limit, poll_s=args.poll)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: worker.stop.set())
    print(
        f"worker {worker.name}: polling pool {args.pool!r} every {args.poll:g} s, up to {args.limit} run(s) "
        "at once in this process",
        file=sys.stderr,
        flush=True,
    )
    worker.run()
    return EXIT_OK
