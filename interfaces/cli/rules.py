"""`attribution rules list | validate | test | catalog | graph | coverage`: the rules pack the diagnoses use."""

from __future__ import annotations

import argparse
import json
from typing import Any

from workload_attribution.cli import common, impact, suggest
from workload_attribution.cli.common import EXIT_BAD_INPUT, EXIT_CHECKS_FAILED, EXIT_OK, BadInput


def add(sub: Any) -> None:
    r = common.command(
        sub,
        "rules",
        help="list, validate or test the rules pack; its message catalogs, rule graph and test coverage",
        description=(
            "The rules pack `diagnose` uses (--rules-dir > $ATTRIBUTION_RULES_DIR > config rules_dir > the shipped "
            "pack). validate: every file, every problem, one line each (exit 2 when any); list: the rules by phase "
            "and the precedence of verdicts; test: the test cases beside each rule and each catalog row's test line "
            "(exit 4 when any fails); catalog: the message catalogs' rows (--family F); graph: which rule produces "
            "each symptom and which rules read it; coverage: catalog rows and verdict paths no test reaches; impact: "
            "replay the archived attempts under this pack and --candidate DIR, and say what would change (exit 4 "
            "past --max-changed or --max-changed-percent); suggest: group the warehouse's insufficient_evidence "
            "attempts (--since, 30d) by the messages they logged that no completed attempt did, draft a catalog row "
            "for each of the --top N largest groups, and with --out DIR write a candidate pack holding them."
        ),
    )
    r.add_argument("action", choices=["list", "validate", "test", "catalog", "graph", "coverage", "impact", "suggest"])
    r.add_argument("--rules-dir", metavar="DIR", help="rules pack directory")
    r.add_argument(
        "--rule",
        metavar="ID",
        help="test only this rule ('catalog': the catalogs' rows, 'concepts': the concepts' lines, "
        "'pack': the pack's tests)",
    )
    r.add_argument("--family", metavar="F", help="catalog: only this family's rows (nccl, slurm, ...)")
    r.add_argument("--json", action="store_true", help="list (impact: the report) as JSON")
    r.add_argument("-v", "--verbose", action="store_true", help="show passing test cases too")
    impact.add_arguments(r)
    suggest.add_arguments(r)
    r.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.action == "suggest":
        return suggest.run(args)
    suggest.refuse_its_options(args)
    if args.action == "impact":
        return impact.run(args)
    impact.refuse_its_options(args)

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
        from workload_attribution.rules.validation import warnings

        for w in warnings(pack):
            print(f"WARN {w}")
        rows = len(pack.catalog)
        print(f"rules pack {rules_dir} {pack.version}: {len(pack.rules)} rule(s), {rows} catalog row(s) valid")
        return EXIT_OK
    if args.action == "graph":
        return _graph(pack, args.json)
    if args.action == "coverage":
        return _coverage(pack, args.json)
    if args.action == "list":
        return _list(pack, rules_dir, args.json)
    if args.action == "catalog":
        return _catalog(pack, args.family, args.json)
    return _test(pack, rules_dir, args.rule, args.verbose)


def _coverage(pack: Any, as_json: bool) -> int:
    from dataclasses import asdict

    from workload_attribution.rules.coverage import coverage

    c = coverage(pack)
    if as_json:
        print(json.dumps(asdict(c), indent=2))
        return EXIT_OK
    print(f"catalog rows no test line but their own reaches: {len(c.rows_unreached)} of {c.rows}")
    for row in c.rows_unreached:
        print(f"    {row}")
    print("verdict paths the pack tests take: " + ", ".join(f"{r} x{n}" for r, n in sorted(c.verdicts_taken.items())))
    print(f"verdict paths no pack test takes: {', '.join(c.verdicts_unreached) or 'none'}")
    return EXIT_OK


def _graph(pack: Any, as_json: bool) -> int:
    from workload_attribution.rules.graph import lineage

    rows = lineage(pack)
    if as_json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    for r in rows:
        kinds = f" kinds: {', '.join(r['kinds'][:6])}{' ...' if len(r['kinds']) > 6 else ''}" if r["kinds"] else ""
        print(f"{r['symptom']} ({r['role']}){kinds}")
        print(f"    produced by {', '.join(r['produced_by'])}")
        read = [*r["read_by_name"], *(f"{len(r['read_by_role'])} rule(s) by its role" for _ in r["read_by_role"][:1])]
        print(f"    read by {', '.join(read) or 'no rule but those reading every event'}")
    print(f"{len(rows)} symptom(s)")
    return EXIT_OK


def _catalog(pack: Any, family: str | None, as_json: bool) -> int:
    from workload_attribution.rules.catalog import FAMILIES

    if family and family not in FAMILIES:
        raise BadInput(f"no catalog family {family!r} (families: {', '.join(FAMILIES)})")
    rows = [r for r in pack.catalog if not family or r.family == family]
    if as_json:
        print(json.dumps([{**r.model_dump(mode="json"), "literals": list(r.literals)} for r in rows], indent=2))
        return EXIT_OK
    for r in rows:
        verdict = f"{r.terminal_state}/{r.sub_domain}" if r.terminal_state else "-"
        print(f"{r.id:48} {r.symptom:26} {r.role:14} {verdict:40} blame={r.blame:14} {'|'.join(r.sources)}")
        print(f"    {r.match}: {r.pattern}")
    print(
        f"{len(rows)} row(s)" + (f" of family {family}" if family else f" in {len({r.family for r in rows})} families")
    )
    return EXIT_OK


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

    if rule and rule not in {r.id for r in pack.rules} | {"pack", "catalog", "concepts"}:
        raise BadInput(f"no rule {rule!r} in {rules_dir} (rules: attribution rules list)")
    results = run_tests(load_pack(rules_dir), only=rule)
    failed = [c for c in results if not c.ok]
    for c in results:
        if not c.ok or verbose:
            print(f"{'PASS' if c.ok else 'FAIL'} {c.rule} :: {c.case}" + (f"\n     {c.message}" if c.message else ""))
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return EXIT_OK if not failed else EXIT_CHECKS_FAILED
