"""`attribution backfill`: the failed attempts of a window that have no diagnosis by these rules."""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from workload_attribution.cli import common
from workload_attribution.cli.common import EXIT_CHECKS_FAILED, EXIT_OK, EXIT_UNREACHABLE, BadInput


def add(sub: Any) -> None:
    b = common.command(
        sub,
        "backfill",
        help="diagnose the failed attempts of a window not yet diagnosed",
        description=(
            "Find the failed attempts that ended in [--since, --until) (Slurm accounting / Kueue workloads of the "
            "configured clusters, or the bundles under --bundles), skip those already diagnosed by the current rules "
            "version, re-diagnose those diagnosed by an older one, and print a summary. Exit 4 when an attempt "
            "could not be diagnosed, 5 when a cluster's scheduler could not be asked. Ends by maintaining the "
            "warehouse (a DuckLake: rows its writers left in the catalog moved to Parquet files, snapshots older than "
            "7 days expired); exit 4 when that failed too."
        ),
    )
    b.add_argument(
        "--since", metavar="TIME", help="RFC 3339, or a span ago: 26h, 7d (default: backfill.lookback_hours)"
    )
    b.add_argument("--until", metavar="TIME", help="RFC 3339 or a span ago (default: now)")
    b.add_argument("--cluster", metavar="NAME", help="only this cluster (default: every configured cluster)")
    b.add_argument("--bundles", metavar="DIR", help="offline: backfill the bundles under DIR")
    b.add_argument("--force", action="store_true", help="re-diagnose even attempts diagnosed by the current rules")
    b.add_argument("--concurrency", type=int, metavar="N", help="attempts at once (default: backfill.concurrency)")
    b.add_argument("--inline", action="store_true", help="run without Prefect (the default without PREFECT_API_URL)")
    b.add_argument("--prefect", action="store_true", help="run as the Prefect flow `backfill`")
    b.add_argument("--json", action="store_true", help="print the summary as JSON")
    b.add_argument("--warehouse", metavar="PATH")
    b.add_argument("--rules-dir", metavar="DIR")
    b.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = common.load_config(args, warehouse=args.warehouse, rules_dir=args.rules_dir)
    _check(args, cfg)
    kwargs = dict(
        since=args.since,
        until=args.until,
        cluster=args.cluster,
        bundles_dir=args.bundles,
        force=args.force,
        concurrency=args.concurrency,
        warehouse=cfg.warehouse,
        rules_dir=cfg.rules_dir,
    )
    if args.prefect or (os.environ.get("PREFECT_API_URL") and not args.inline):
        summary = _through_prefect(args, kwargs)
    else:
        summary = _inline(args, cfg, kwargs)
    upkeep = summary.get("warehouse_maintenance") or {}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_summary(summary, upkeep)
    return _exit(summary, upkeep)


def _check(args: argparse.Namespace, cfg: Any) -> None:
    """The flags and the configuration, refused before any work (BadInput: exit 2)."""
    from workload_attribution.contracts.times import parse_when

    for flag in ("since", "until"):
        if getattr(args, flag):
            try:
                parse_when(getattr(args, flag))
            except BadInput as exc:
                raise BadInput(f"--{flag}: {exc}") from None
    if args.concurrency is not None and not 1 <= args.concurrency <= 64:
        raise BadInput("--concurrency: 1 to 64")
    if args.cluster and not args.bundles:
        cfg.cluster(args.cluster)
    if args.bundles and not Path(args.bundles).is_dir():
        raise BadInput(f"{args.bundles}: no such directory")
    if not args.bundles and not cfg.backfill.bundles_dir and not cfg.clusters:
        raise BadInput("nothing to backfill: configure clusters or give --bundles DIR")


def _through_prefect(args: argparse.Namespace, kwargs: dict[str, Any]) -> dict[str, Any]:
    from workload_attribution.cli.deploy import prefect_answers
    from workload_attribution.cli.diagnose import prefect_env

    if os.environ.get("PREFECT_API_URL"):
        prefect_answers(os.environ["PREFECT_API_URL"])
    prefect_env()
    os.environ["PREFECT_LOGGING_LEVEL"] = "WARNING" if args.quiet else "INFO"  # the flow's log is the progress
    from workload_attribution.flows.backfill import DiscoveryFailed
    from workload_attribution.flows.backfill_flow import backfill

    try:
        return dict(backfill(**kwargs))
    except DiscoveryFailed as exc:
        return dict(exc.summary)


def _inline(args: argparse.Namespace, cfg: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    from workload_attribution.flows.backfill import backfill_inline

    progress = common.Progress(args)

    def on_window(since: datetime, until: datetime, found: int, skipped: int, todo: int) -> None:
        progress(
            f"window {since.isoformat()} .. {until.isoformat()}: {found} found, {skipped} already diagnosed "
            f"by these rules, {todo} to diagnose"
        )

    return dict(
        backfill_inline(
            **kwargs,
            progress=lambda i, n, a, outcome: progress(f"[{i}/{n}] {a.key}: {outcome}"),
            on_window=on_window,
            cfg=cfg,
        ).as_dict()
    )


def _print_summary(summary: dict[str, Any], upkeep: dict[str, Any]) -> None:
    print(
        f"window {summary['since']} .. {summary['until']}"
        + (f" ({summary['source']})" if summary.get("source") else "")
    )
    print(
        f"found {summary['found']}, skipped {summary['skipped']} (current rules), diagnosed {summary['diagnosed']}"
        f" ({summary['redone_stale']} re-diagnosed after a rules change), failed {summary['failed']}"
        f" in {summary['seconds']:.1f}s"
    )
    if summary["found"] == 0 and not summary.get("discovery_failures"):
        print(
            f"  nothing found: no failed attempt ended in this window in {summary.get('source') or 'the sources'}"
            " (widen it with --since, e.g. --since 30d)"
        )
    for state, n in summary["by_terminal_state"].items():
        print(f"  {state:24} {n}")
    for f in summary.get("discovery_failures") or []:
        print(f"  DISCOVERY FAILED {f['where']}: {f['error']}")
    for f in summary["failures"]:
        print(f"  FAILED {f['attempt']}: {f['error']}")
    if "error" in upkeep:
        print(f"  WAREHOUSE MAINTENANCE FAILED: {upkeep['error']}")
    elif upkeep.get("backend") == "ducklake":
        print(
            f"  warehouse maintained: {upkeep['rows_moved_to_files']} rows moved from the catalog to files, "
            f"{upkeep['files_merged']} files merged, {upkeep['snapshots_expired']} snapshots expired, "
            f"{upkeep['files_deleted']} unneeded files deleted"
        )


def _exit(summary: dict[str, Any], upkeep: dict[str, Any]) -> int:
    """5 when a cluster's failed attempts could not even be listed, 4 when an attempt or the
    maintenance failed; said in one line on stderr (the summary above has the details)."""
    if summary.get("discovery_failures"):
        failures = summary["discovery_failures"]
        common.say(f"{len(failures)} cluster(s) could not be asked: {failures[0]['error']}")
        return EXIT_UNREACHABLE
    if summary["failed"] or "error" in upkeep:
        what = f"{summary['failed']} attempt(s) not diagnosed" if summary["failed"] else "warehouse maintenance failed"
        common.say(what)
        return EXIT_CHECKS_FAILED
    return EXIT_OK
