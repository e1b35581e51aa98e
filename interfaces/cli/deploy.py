"""`attribution deploy`: the work pool and the Prefect deployments, applied to PREFECT_API_URL."""

from __future__ import annotations

import argparse
import os
from typing import Any

from workload_attribution.cli import common
from workload_attribution.cli.common import EXIT_OK, BadInput
from workload_attribution.contracts.errors import Unreachable


def add(sub: Any) -> None:
    dp = common.command(
        sub,
        "deploy",
        help="apply the Prefect deployments to the server in PREFECT_API_URL",
        description="Create the process work pool (if missing) and apply the deployments "
        "attribute-attempt/attempt and backfill/nightly (02:30 UTC). Flows are referenced "
        "by import path: any worker with this package installed can run them.",
    )
    dp.add_argument("--pool", default="attribution", help="process work pool (created if missing)")
    dp.add_argument("--print-yaml", action="store_true", help="print the same deployments as a prefect.yaml")
    dp.add_argument(
        "--print-server-env",
        action="store_true",
        help="print the Prefect server settings for this project's load (deployments/prefect-server.env)",
    )
    dp.add_argument(
        "--zombie-after",
        type=float,
        default=90.0,
        metavar="S",
        help="mark a flow run Crashed when its worker goes silent for S seconds, from the claim on (default 90: "
        "three heartbeats of 30 s; workers beat every $ATTRIBUTION_HEARTBEAT_S)",
    )
    dp.set_defaults(func=run)


def need_prefect_server(answering: bool = False) -> None:
    """PREFECT_API_URL is set (BadInput); with `answering`, the server there answers (Unreachable:
    exit 5, in one line, instead of the Prefect client's error from deep inside a run)."""
    url = os.environ.get("PREFECT_API_URL")
    if not url:
        raise BadInput("set PREFECT_API_URL to the Prefect server (e.g. http://127.0.0.1:4200/api)")
    if answering:
        prefect_answers(url)


def prefect_answers(url: str, timeout_s: float = 10.0) -> None:
    import httpx

    try:
        httpx.get(url.rstrip("/") + "/health", timeout=timeout_s).raise_for_status()
    except httpx.HTTPStatusError as exc:
        raise Unreachable(f"the Prefect server at {url} answered {exc.response.status_code} to /health") from None
    except httpx.HTTPError as exc:
        raise Unreachable(f"the Prefect server at {url} does not answer ({type(exc).__name__}: {exc})") from None


def run(args: argparse.Namespace) -> int:
    from workload_attribution.flows import deployments

    if args.print_yaml:
        print(deployments.render_yaml(args.pool), end="")
        return EXIT_OK
    if args.print_server_env:
        print(deployments.render_server_env(), end="")
        return EXIT_OK
    need_prefect_server(answering=True)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if args.zombie_after < 5:
        raise BadInput("--zombie-after: 5 seconds or more")
    for name in deployments.apply(args.pool, zombie_after_s=args.zombie_after):
        print(f"applied {name} (pool {args.pool})")
    print(f"automation: a claimed or running flow run with no heartbeat for {args.zombie_after:g} s is Crashed")
    print(f"automation: a crashed attempt run is run again, at most {deployments.CRASH_RETRIES} times")
    return EXIT_OK
