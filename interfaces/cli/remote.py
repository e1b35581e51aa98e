"""`attribution diagnose BUNDLE --remote URL`: the same diagnosis, computed by a running service."""

from __future__ import annotations

import argparse
from pathlib import Path

from workload_attribution.cli import common
from workload_attribution.cli.common import EXIT_OK, BadInput


def run(args: argparse.Namespace) -> int:
    from workload_attribution.cli.diagnose import summary
    from workload_attribution.client import diagnose_remote, token_from_env

    if args.job or args.nodes or not args.bundles:
        raise BadInput("--remote sends bundle directories: give them (not --job / --nodes)")
    cfg = common.load_config(args)
    token = token_from_env(cfg.service.token_env)
    status = EXIT_OK
    for bundle in args.bundles:
        try:
            d = diagnose_remote(args.remote, Path(bundle), token=token, store=not args.no_warehouse)
        except Exception as exc:
            if common.exit_code(exc) == common.EXIT_BUG:
                raise
            common.say(f"{bundle}: {common.first_line(exc)}")
            status = max(status, common.exit_code(exc))  # the service unreachable: 5; the bundle refused: 2
            continue
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / f"{Path(bundle).resolve().name}.json").write_text(d.to_json())
        print((d.model_dump_json() if len(args.bundles) > 1 else d.to_json()) if args.json else summary(d), flush=True)
    return status
