"""`attribution actions`: what the action sinks decided and did (list), and reversing what a
diagnosis' actions did (undo). The sinks and the guard: actions/, docs/actions.md."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from workload_attribution.cli import common
from workload_attribution.cli.common import EXIT_CHECKS_FAILED, EXIT_OK, BadInput

DESCRIPTION = """\
list [DIAGNOSIS_ID]: the recorded decisions, oldest first (every one: done, dry_run, skipped and
why, failed and the last error, flagged for undo by a re-diagnosis), of one diagnosis or filtered
by --cluster and --since; --in-force: only what still stands.

undo DIAGNOSIS_ID: reverse every action of the diagnosis still in force, through the sinks of its
cluster's `actions` block: resume the drained node (when its reason is still the diagnosis'),
remove the taint (and uncordon), resolve the alert, withdraw the event. Each reversal is recorded.
A dry run's actions are reversed as a dry run; --dry-run shows the reversals without doing them.

Exit codes: 0 done (nothing in force is done too); 2 bad input (an unknown diagnosis, a cluster
without an actions block); 4 a reversal that failed (its record says why)."""

COLUMNS = ("decided_at", "cluster", "node", "sink", "operation", "outcome", "dry_run", "diagnosis_id", "reason")


def add(sub: Any) -> None:
    a = common.command(sub, "actions", help="list or undo what the action sinks did", description=DESCRIPTION)
    a.add_argument("verb", choices=["list", "undo"])
    a.add_argument("diagnosis_id", nargs="?", metavar="DIAGNOSIS_ID", help="list: its decisions; undo: required")
    a.add_argument("--cluster", metavar="NAME", help="list: this cluster's decisions")
    a.add_argument("--since", metavar="TIME", help="list: decided since (RFC 3339 or a span ago: 26h, 7d)")
    a.add_argument("--in-force", action="store_true", help="list: only what still stands (not reversed)")
    a.add_argument("--limit", type=int, default=200, metavar="N", help="list: the newest N (default 200; 0: all)")
    a.add_argument("--json", action="store_true", help="list: one JSON document per record")
    a.add_argument("--dry-run", action="store_true", help="undo: show the reversals, do nothing")
    a.add_argument("--warehouse", metavar="PATH")
    a.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return run_undo(args) if args.verb == "undo" else run_list(args)


def _print(records: list[Any], as_json: bool) -> None:
    from workload_attribution.cli.query import rows_writer

    if as_json:
        for r in records:
            print(json.dumps(r.model_dump(mode="json")))
        return
    write = rows_writer("table", list(COLUMNS))
    if records:
        write([[_cell(r, c) for c in COLUMNS] for r in records])
    write(None)


def _cell(record: Any, column: str) -> Any:
    value = getattr(record, column)
    if column == "decided_at":
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return value.value if hasattr(value, "value") else value


def run_list(args: argparse.Namespace) -> int:
    from workload_attribution.contracts.times import parse_when
    from workload_attribution.warehouse.store import Warehouse

    if args.limit < 0:
        raise BadInput("--limit: 0 (all) or more")
    cfg = common.load_config(args, warehouse=args.warehouse)
    since = parse_when(args.since) if args.since else None
    wh = Warehouse(cfg.warehouse)
    records = wh.actions(args.cluster, args.diagnosis_id, since, args.in_force, args.limit or None)
    _print(records, args.json)
    if not args.json:
        print(f"({len(records)} action{'s' if len(records) != 1 else ''})", file=sys.stderr)
    return EXIT_OK


def run_undo(args: argparse.Namespace) -> int:
    from workload_attribution.actions.act import undo
    from workload_attribution.contracts.actions import Outcome

    if not args.diagnosis_id:
        raise BadInput("actions undo: name the diagnosis (DIAGNOSIS_ID, as `attribution actions list` shows it)")
    cfg = common.load_config(args, warehouse=args.warehouse)
    records = undo(args.diagnosis_id, cfg.clusters, cfg.warehouse, preview=args.dry_run)
    if not records:
        common.say(f"diagnosis {args.diagnosis_id}: nothing in force to undo")
        return EXIT_OK
    for r in records:
        what = "would " + r.operation if args.dry_run else f"{r.operation}: {r.outcome.value}"
        print(f"{r.sink} {what} {r.node or '-'}" + (f" ({r.reason})" if r.reason and not args.dry_run else ""))
    return EXIT_CHECKS_FAILED if any(r.outcome == Outcome.failed for r in records) else EXIT_OK
