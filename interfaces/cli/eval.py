"""`attribution eval DIR`: how well the rules do on bundles that carry their expected diagnosis."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from workload_attribution.cli import common
from workload_attribution.cli.common import EXIT_CHECKS_FAILED, EXIT_OK, BadInput


def add(sub: Any) -> None:
    e = common.command(
        sub,
        "eval",
        help="measure the rules on bundles that carry expected.json",
        description=(
            "Diagnose every bundle under DIR that has an expected.json (in this process, nothing stored) and print a "
            "per-class table: exact match of terminal_state + sub_domain + affected_nodes (against the label or one of "
            "its also_acceptable), each field, healthy nodes blamed, wrong answers given with high confidence; then "
            "every miss. With --leave-out, each bundle is diagnosed again without the catalog rows that could have "
            "been written for it, and the table is per catalog family, the full pack's exact share beside "
            "(docs/accuracy.md). Exit 0 when the share of exact matches is at least --min-exact (default 1: every "
            "bundle), 4 otherwise."
        ),
    )
    e.add_argument("dir", metavar="DIR")
    e.add_argument("--rules-dir", metavar="DIR", help="rules pack directory (default: config, else the shipped pack)")
    e.add_argument("--json", action="store_true", help="one JSON record per bundle")
    e.add_argument(
        "--min-exact",
        type=float,
        default=1.0,
        metavar="SHARE",
        help="the share of bundles that must match exactly, 0 to 1 (default 1: all); under it: exit 4",
    )
    e.add_argument(
        "--leave-out",
        choices=("family", "origin"),
        help="diagnose each bundle without the catalog rows of every family that reads it (family), or those "
        "whose test_line_origin or reference is an address the bundle cites (origin: expected.json source, "
        "its SOURCES.md section); --min-exact then holds that share",
    )
    e.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from workload_attribution.flows.evaluation import evaluate, find_bundles
    from workload_attribution.flows.leave_out import evaluate_left_out
    from workload_attribution.flows.pipeline import load_rules

    if not 0 <= args.min_exact <= 1:
        raise BadInput(f"--min-exact {args.min_exact:g}: a share, 0 to 1 (0.95: 95 in 100 bundles)")
    if not Path(args.dir).is_dir():
        raise BadInput(f"{args.dir}: no such directory")
    if not find_bundles(Path(args.dir)):
        raise BadInput(f"{args.dir}: no bundle with an expected.json under it")
    pack = load_rules(common.rules_dir(args))
    progress = common.Progress(args)
    if args.leave_out:
        report = evaluate_left_out(
            Path(args.dir),
            pack,
            args.leave_out,
            lambda step, i, n: progress(f"[{i}/{n}] diagnosed ({step})", final=i == n),
        )
    else:
        report = evaluate(Path(args.dir), pack, lambda i, n: progress(f"[{i}/{n}] diagnosed", final=i == n))
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "bundle": o.bundle,
                        "class": o.cls,
                        "exact": o.exact,
                        "expected": o.expected,
                        "got": o.got,
                        "healthy_blamed": o.healthy_blamed,
                        "wrong_with_high_confidence": o.wrong_with_high_confidence,
                        "error": o.error,
                        **_left_out(o),
                    }
                    for o in report.outcomes
                ],
                indent=2,
            )
        )
        return _verdict(report, args.min_exact)
    print(report.table())
    misses = report.misses()
    if misses:
        print(f"\n{len(misses)} miss(es):")
        for o in misses:
            e, g = o.expected, o.got or {}
            print(
                f"  {o.bundle}\n"
                f"    expected {e['terminal_state']}/{e['sub_domain']} {sorted(e.get('affected_nodes') or [])}"
                f"\n    got      {g.get('terminal_state')}/{g.get('sub_domain')} "
                f"{sorted(g.get('affected_nodes') or [])}"
                f" root={g.get('root')} {o.error or ''}"
                + (f"\n    left out {_what(o, args.leave_out)}" if args.leave_out else "")
            )
    n = len(report.outcomes)
    print(f"\n{n} bundle(s) in {report.seconds:.1f} s ({report.seconds / n:.2f} s each), rules {pack.version}")
    return _verdict(report, args.min_exact)


def _left_out(o: Any) -> dict[str, Any]:
    """A leave-out outcome's family, what was left out and the full pack's outcome."""
    if o.full is None:
        return {}
    return {
        "family": o.family,
        "left_out": o.left_out,
        "full": {"exact": o.full.exact, "got": o.full.got, "error": o.full.error},
    }


def _what(o: Any, mode: str) -> str:
    if not o.left_out:
        return "nothing (no catalog row reads it)" if mode == "family" else "nothing (no row cites its sources)"
    if mode == "family":
        return f"families {', '.join(o.left_out)}"
    return f"{len(o.left_out)} row(s): {', '.join(o.left_out)}"


def _verdict(report: Any, min_exact: float) -> int:
    """0 when the exact share reaches the threshold, else 4 (said on stderr)."""
    n = len(report.outcomes)
    exact = n - len(report.misses())
    if exact >= min_exact * n:
        return EXIT_OK
    common.say(f"{exact}/{n} exact ({exact / n:.1%}): under --min-exact {min_exact:g}")
    return EXIT_CHECKS_FAILED
