"""`attribution query`: the warehouse, by named view or read-only SQL, streamed."""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from workload_attribution.cli import common
from workload_attribution.cli.common import EXIT_OK, BadInput

DEFAULT_LIMIT = 1000


def add(sub: Any) -> None:
    q = common.command(
        sub,
        "query",
        help="query the warehouse (named views or read-only SQL)",
        description=(
            "Run a named analyst view (`--list` shows them) or one read-only SELECT against the warehouse. The query "
            "runs sandboxed (no file access, nothing written) and its rows are streamed: at most --limit rows are "
            f"printed (default {DEFAULT_LIMIT}; 0 = all)."
        ),
    )
    q.add_argument("query", nargs="?", metavar="NAME|SQL")
    q.add_argument("--list", action="store_true", help="list the named views and what each answers")
    q.add_argument(
        "--format",
        choices=["table", "csv", "json"],
        default="table",
        help="table (default), csv, or json (an array of objects)",
    )
    q.add_argument("--limit", type=int, default=DEFAULT_LIMIT, metavar="N", help="rows at most (0: all)")
    q.add_argument("--warehouse", metavar="PATH")
    q.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:  # noqa: C901 (the command's modes: list, a view, SQL, each format)
    from workload_attribution.warehouse.store import Warehouse, views

    known = views()
    if args.list:
        for name, what in known.items():
            print(f"{name:24} {what}")
        return EXIT_OK
    if not args.query:
        raise BadInput("give a view name (attribution query --list) or SQL")
    if args.limit < 0:
        raise BadInput("--limit: 0 (all) or more")
    text = args.query.strip()
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        if text not in known:
            raise BadInput(f"no view {text!r}; views: {', '.join(known)} (or give SQL)")
        text = f'SELECT * FROM "{text}"'
    cfg = common.load_config(args, warehouse=args.warehouse)
    wh = Warehouse(cfg.warehouse)
    if not wh.exists():
        raise BadInput(f"{cfg.warehouse}: no warehouse yet (diagnose something first)")
    shown = 0
    with wh.stream(text) as (cols, batches):
        write = rows_writer(args.format, cols)
        for rows in batches:
            if args.limit:
                rows = rows[: args.limit - shown]
            write(rows)
            shown += len(rows)
            if args.limit and shown >= args.limit:
                break
        more = args.limit and shown >= args.limit and next(batches, None) is not None
        write(None)
    if more:
        common.say(f"showing the first {shown} rows; --limit 0 for all")
    elif args.format == "table":
        print(f"({shown} row{'s' if shown != 1 else ''})", file=sys.stderr)
    return EXIT_OK


def rows_writer(fmt: str, cols: list[str]) -> Callable[[Sequence[Sequence[Any]] | None], None]:
    """A function taking batches of rows (None: the end) and printing them as they come."""
    if fmt == "csv":
        w = csv.writer(sys.stdout)
        w.writerow(cols)
        return lambda rows: w.writerows(rows) if rows else None
    if fmt == "json":  # one JSON array, written as the rows come
        count = [0]

        def json_array(rows: Sequence[Sequence[Any]] | None) -> None:
            if rows is None:
                sys.stdout.write("[]\n" if not count[0] else "\n]\n")
                return
            for r in rows:
                sys.stdout.write(("[\n" if not count[0] else ",\n") + json.dumps(dict(zip(cols, r)), default=str))
                count[0] += 1

        return json_array
    # table: widths from the first batch (later values are cut to them)
    state: dict[str, Any] = {"widths": None}

    def table(rows: Sequence[Sequence[Any]] | None) -> None:
        if rows is None:
            if state["widths"] is None:
                print("  ".join(cols))
            return
        cells = [[("" if v is None else str(v)).replace("\n", " ") for v in r] for r in rows]
        if state["widths"] is None:
            widths = [min(60, max([len(c)] + [len(row[i]) for row in cells])) for i, c in enumerate(cols)]
            state["widths"] = widths
            print("  ".join(c[:60].ljust(w) for c, w in zip(cols, widths)).rstrip())
            print("  ".join("-" * w for w in widths))
        widths = state["widths"]
        for row in cells:
            print("  ".join(v[:w].ljust(w) for v, w in zip(row, widths)).rstrip())

    return table
