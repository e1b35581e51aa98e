"""`attribution topology load`: a fabric snapshot for the switch-port views."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from workload_attribution.cli import common
from workload_attribution.cli.common import EXIT_OK, BadInput


def add(sub: Any) -> None:
    tp = common.command(
        sub,
        "topology",
        help="record a fabric topology snapshot in the warehouse",
        description=(
            "Record which host or switch each switch port is cabled to, as of --valid-from (default: the file's time), "
            "from a topology.yaml (the bundle format) or `ibnetdiscover` output. Diagnoses join to the topology of "
            "their attempt's time (view topology_history)."
        ),
    )
    tp.add_argument("action", choices=["load"])
    tp.add_argument("file", metavar="FILE")
    tp.add_argument("--cluster", required=True, metavar="NAME")
    tp.add_argument("--valid-from", metavar="TIME", help="RFC 3339 or a span ago")
    tp.add_argument("--format", choices=["auto", "yaml", "ibnetdiscover"], default="auto")
    tp.add_argument("--warehouse", metavar="PATH")
    tp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    import yaml

    from workload_attribution.connectors.bundle import SAFE_LOADER
    from workload_attribution.connectors.topology import (
        MAX_TOPOLOGY_BYTES,
        TopologyError,
        check_size,
        links_from_ibnetdiscover,
        links_from_yaml,
    )
    from workload_attribution.contracts.times import parse_when
    from workload_attribution.staging.files import read_regular
    from workload_attribution.warehouse.store import Warehouse

    cfg = common.load_config(args, warehouse=args.warehouse)
    path = Path(args.file)
    if not path.is_file():
        raise BadInput(f"{path}: no such file")
    try:
        text = read_regular(path, MAX_TOPOLOGY_BYTES).decode("utf-8", errors="replace")
    except OSError as exc:
        raise BadInput(f"{path}: {exc.strerror or exc}") from None
    fmt = args.format
    if fmt == "auto":
        fmt = "ibnetdiscover" if any(line.startswith("Switch") for line in text.splitlines()) else "yaml"
    valid_from = (
        parse_when(args.valid_from) if args.valid_from else datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
    )
    try:
        if fmt == "yaml":
            check_size(text, SAFE_LOADER)  # parsed into events first: a huge one is refused unbuilt
            links = links_from_yaml(yaml.load(text, Loader=SAFE_LOADER) or {})
        else:
            links = links_from_ibnetdiscover(text)
    except (TopologyError, yaml.YAMLError) as exc:
        raise BadInput(f"{path}: {common.first_line(exc)}") from None
    added = Warehouse(cfg.warehouse).load_topology(args.cluster, links, valid_from, f"{fmt} {path.name}")
    hosts = sum(1 for link in links if link[3] == "host")
    print(
        f"{path}: {len(links)} link(s) ({hosts} to hosts) as of {valid_from.isoformat()}, "
        f"{added} new in {cfg.warehouse}"
    )
    return EXIT_OK
