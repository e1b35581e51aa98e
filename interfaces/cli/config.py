"""`attribution config check`: every problem of the configuration, and whether its endpoints answer."""

from __future__ import annotations

import argparse
import glob
import os
import shutil
from typing import Any

from workload_attribution.cli import common
from workload_attribution.cli.common import EXIT_BAD_INPUT, EXIT_CHECKS_FAILED, EXIT_OK


def add(sub: Any) -> None:
    c = common.command(
        sub,
        "config",
        help="check the configuration",
        description=(
            "Validate the YAML configuration and the ATTRIBUTION_* environment (every problem, with its dotted key, "
            "its value and the reason; exit 2 when any) and try every endpoint and path it names (exit 4 when one "
            "does not answer)."
        ),
    )
    c.add_argument("action", choices=["check"])
    c.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from workload_attribution.flows.config import ConfigError

    try:
        cfg = common.load_config(args)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"INVALID {problem}")
        common.say(f"configuration: {len(exc.problems)} problem(s)")
        return EXIT_BAD_INPUT
    print(f"config file: {os.environ.get('ATTRIBUTION_CONFIG') or 'attribution.yaml (if present)'}")
    print(f"warehouse: {cfg.warehouse or '(none: diagnoses are not stored)'}")
    print(f"rules: {cfg.rules_dir or 'the shipped pack'}")
    failures = 0
    for name, cl in cfg.clusters.items():
        print(f"cluster {name} (scheduler {cl.scheduler}, timezone {cl.timezone})")
        endpoints: list[tuple[str, Any]] = [(cl.scheduler, cl.block(cl.scheduler))]
        endpoints += [(f"{src} ({sc.connector})", sc) for src, sc in cl.sources.items()]
        if cl.actions is not None:  # the action sinks' endpoints too (actions/, docs/actions.md)
            print(f"  actions: {'dry run (nothing is done)' if cl.actions.dry_run else 'LIVE'}")
            endpoints += [(f"action sink {s.label} ({s.kind})", s) for s in cl.actions.sinks]
        for label, sc in endpoints:
            probe = sc.probe() if sc is not None else None
            if probe is None:
                continue
            ok, detail = _try(*probe)
            failures += not ok
            print(f"  {'ok  ' if ok else 'FAIL'} {label}: {detail}")
    return EXIT_OK if not failures else EXIT_CHECKS_FAILED


def _try(kind: str, target: str, headers: dict[str, str]) -> tuple[bool, str]:
    if kind == "path":
        found = glob.glob(target.replace("{host}", "*"))
        return bool(found), f"{target} ({len(found)} file(s))"
    if kind == "command":
        where = shutil.which(target)
        return where is not None, f"{target} ({where or 'not installed'})"
    import httpx

    try:
        r = httpx.get(target, timeout=5, headers=headers)
    except httpx.HTTPError as exc:
        return False, f"{target} ({type(exc).__name__})"
    return r.status_code < 400, f"{target} ({r.status_code})"
