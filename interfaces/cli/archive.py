"""`attribution archive usage | prune`: the evidence archive beside the warehouse (warehouse/archive.py)."""

from __future__ import annotations

import argparse
from typing import Any

from workload_attribution.cli import common
from workload_attribution.cli.common import EXIT_OK, BadInput


def add(sub: Any) -> None:
    a = common.command(
        sub,
        "archive",
        help="the evidence archive: its usage, and pruning it by age and size",
        description=(
            "Each diagnosed attempt's evidence is archived beside the warehouse (archive.location; a folder, or "
            "s3://bucket/prefix). usage: attempts, evidence objects and bytes (in all, and an attempt on average). "
            "prune: attempts archived more than "
            "--max-age-days ago go, then the oldest until the archive is within --max-total-gib, then evidence no "
            "attempt names (defaults: archive.max_age_days, archive.max_total_gib)."
        ),
    )
    a.add_argument("action", choices=["usage", "prune"])
    a.add_argument("--warehouse", metavar="PATH", help="the warehouse whose archive it is (default from config)")
    a.add_argument("--max-age-days", type=float, metavar="DAYS")
    a.add_argument("--max-total-gib", type=float, metavar="GIB")
    a.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from workload_attribution.warehouse.archive import Archive, location_for

    cfg = common.load_config(args, warehouse=args.warehouse)
    location = location_for(cfg.warehouse, cfg.archive)
    if location is None:
        raise BadInput("no evidence archive (configure a warehouse, and archive.enabled)")
    archive = Archive(location)
    if args.action == "usage":
        attempts, objects, size = archive.usage()
        each = f", {_size(size // attempts)} an attempt" if attempts else ""
        print(f"archive {archive}: {attempts} attempt(s), {objects} evidence object(s), {_size(size)}{each}")
        return EXIT_OK
    days = args.max_age_days if args.max_age_days is not None else cfg.archive.max_age_days
    gib = args.max_total_gib if args.max_total_gib is not None else cfg.archive.max_total_gib
    if days <= 0 or gib < 0:
        raise BadInput("--max-age-days must be above 0 and --max-total-gib at least 0")
    r = archive.prune(timedelta(days=days), int(gib * 2**30))
    print(
        f"archive {archive}: {len(r.removed)} attempt(s) and {r.evidence_removed} evidence object(s) removed "
        f"({_size(r.bytes_freed)}); {r.kept} attempt(s) kept ({_size(r.bytes_kept)})"
    )
    return EXIT_OK


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
