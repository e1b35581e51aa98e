"""`attribution rules list | validate | test`: the rules pack the diagnoses use."""

from __future__ import annotations

import argparse
import json
from typing import Any

from workload_attribution.cli import common
from workload_attribution.cli.common import EXIT_BAD_INPUT, EXIT_CHECKS_FAILED, EXIT_OK, BadInput


def add(sub: Any) -> None:
    r = common.command(
        sub,
        "rules",
        help="list, validate or test the rules pack",
        description=(
            "The rules pack `diagnose` uses (--rules-dir > $ATTRIBUTION_RULES_DIR > config rules_dir > the shipped "
            "pack). validate: every file, every problem, one line each (exit 2 when any); list: the rules by phase "
            "and the precedence of verdicts; test: the test cases beside each rule (exit 4 when any fails)."
        ),
    )
    r.add_argument("action", choices=["list", "validate", "test"])
    r.add_argument("--rules-dir", metavar="DIR", help="rules pack directory")
    r.add_argument("--rule", metavar="ID", help="test only this rule")
    r.add_argument("--json", action="store_true", help="list as JSON")
    r.add_argument("-v", "--verbose", action="store_true", help="show passing test cases too")
    r.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from workload_attribution.rules.pack import RULES_DIR
    from workload_attribution.rules.validation import validate

    rules_dir = Path(common.rules_dir(args) or RULES_DIR)
    if not rules_dir.is_dir():
        raise BadInput(f"rules pack {rules_dir}: no such directory")
    pack, errors = validate(rules_dir)
    if errors:
        for e in errors:
            print(f"INVALID {e}")
        common.say(f"rules pack {rules_dir}: {len(errors)} problem(s)")
        return EXIT_BAD_INPUT
    assert pack is not None
    if args.action == "validate":
        print(f"rules pack {rules_dir} {pack.version}: {len(pack.rules)} rule(s) valid")
        return EXIT_OK
    if args.action == "list":
        return _list(pack, rules_dir, args.json)
    return _test(pack, rules_dir, args.rule, args.verbose)


def _list(pack: Any, rules_dir: Any, as_json: bool) -> int:
    if as_json:
        print(json.dumps([_rule_entry(pack, r) for r in pack.rules], indent=2))
        return EXIT_OK
    print(f"rules pack {rules_dir} {pack.version}")
    for phase in ("extract", "early", "final", "report"):
        for r in pack.by_phase(phase):
            order = f"order {r.order}" if r.output in ("annotations", "roles", "actions") else ""
            print(f"  {phase:8} {r.id:32} v{r.version:<3} {r.output:11} {order:10} {len(r.tests)} test(s)")
    print("precedence of verdicts (the first that gives one wins):")
    for i, rid in enumerate(pack.precedence, 1):
        print(f"  {i}. {rid}")
    print(f"pack tests: {len(pack.tests)}")
    return EXIT_OK


def _rule_entry(pack: Any, r: Any) -> dict[str, Any]:
    return {
        "id": r.id,
        "version": r.version,
        "phase": r.phase,
        "output": r.output,
        "sources": r.sources,
        "description": r.description.strip(),
        "tests": len(r.tests),
        "path": r.path,
        "precedence": pack.precedence.index(r.id) + 1 if r.id in pack.precedence else None,
    }


def _test(pack: Any, rules_dir: Any, rule: str | None, verbose: bool) -> int:
    from workload_attribution.rules.pack import load_pack
    from workload_attribution.rules.testing import run_tests

    if rule and rule not in {r.id for r in pack.rules} | {"pack"}:
        raise BadInput(f"no rule {rule!r} in {rules_dir} (rules: attribution rules list)")
    results = run_tests(load_pack(rules_dir), only=rule)
    failed = [c for c in results if not c.ok]
    for c in results:
        if not c.ok or verbose:
            print(f"{'PASS' if c.ok else 'FAIL'} {c.rule} :: {c.case}" + (f"\n     {c.message}" if c.message else ""))
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return EXIT_OK if not failed else EXIT_CHECKS_FAILED
