"""`attribution rules validate`: everything that can be known about a pack without an attempt.

Per file: the schema (typed vocabulary, file name = id, phase folder); per pack: the precedence and
explicit orders (pack.check_pack_shape); per rule: its SQL is one SELECT that compiles against the
staging schema (DuckDB binds it: unknown tables, columns and functions fail here, not in an
attempt) and gives the columns its output needs; a Python rule's module is allowed by pack.yaml and
has the function. Each problem is one RuleFileError naming the file, the rule and the field.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from workload_attribution.contracts.errors import first_line
from workload_attribution.contracts.models import AttemptScope
from workload_attribution.rules import graph
from workload_attribution.rules.engine import (
    RuleRuntimeError,
    Settings,
    check_columns,
    prepare,
    python_rule,
    single_select,
)
from workload_attribution.rules.pack import Pack, RuleFileError, validate_pack
from workload_attribution.staging.attempt import create_staging
from workload_attribution.staging.database import connected, release_staging

_PROBE = AttemptScope(
    cluster="validate",
    scheduler="static",
    job_id="validate",
    attempt=0,
    nodes=["n1"],
    start="2026-01-01T00:00:00Z",
    end="2026-01-01T01:00:00Z",
    state="FAILED",
)


def compile_rules(pack: Pack) -> list[RuleFileError]:
    errors: list[RuleFileError] = []
    staging = create_staging(_PROBE)
    try:
        with connected(staging) as con:
            prepare(con, pack, Settings())
            for rule in pack.rules:
                try:
                    if rule.sql:
                        single_select(rule.sql)
                        try:
                            cols = [r[0] for r in con.execute(f"DESCRIBE {rule.sql}").fetchall()]
                        except duckdb.Error as exc:
                            raise RuleRuntimeError(
                                f"does not compile against the staging schema: {first_line(exc)}"
                            ) from None
                        check_columns(rule, cols)
                    elif rule.python:
                        python_rule(pack, rule.python)
                except RuleRuntimeError as exc:
                    errors.append(RuleFileError(rule.path, rule.id, "sql" if rule.sql else "python", str(exc)))
            errors += check_catalog_patterns(con, pack)
    finally:
        release_staging(staging)
    return errors


def check_catalog_patterns(con: duckdb.DuckDBPyConnection, pack: Pack) -> list[RuleFileError]:
    """Each catalog row's pattern compiles in DuckDB's RE2 (the engine that runs it) and finds its
    own test line there, the peer it blames non-empty; its literal is in the line too."""
    errors: list[RuleFileError] = []
    folder = Path(pack.path) / "catalogs"
    for row in pack.catalog:
        try:
            found, peer = con.execute(
                "SELECT regexp_matches($line, $re), CASE WHEN $g > 0 THEN regexp_extract($line, $re, $g) END",
                {"line": row.test_line, "re": row.regex, "g": row.peer_group or 0},
            ).fetchone() or (False, None)
        except duckdb.Error as exc:
            found, peer = None, first_line(exc)
        why = (
            f"RE2 (DuckDB) refuses the pattern: {peer}"
            if found is None
            else "the pattern does not find its own test_line in RE2 (DuckDB)"
            if not found
            else "the (?P<peer>...) group is empty on the test_line"
            if row.peer_group and not peer
            else "the test_line holds none of the row's literals"
            if not any(lit in row.test_line for lit in row.literals)
            else None
        )
        if why:
            errors.append(RuleFileError(folder / f"{row.family}.csv", f"catalog row {row.id}", "pattern", why))
    return errors


def validate(rules_dir: str | Path | None) -> tuple[Pack | None, list[RuleFileError]]:
    pack, errors = validate_pack(rules_dir)
    if pack is None:
        return None, errors
    errors = compile_rules(pack) + graph.check(pack)[0]
    return (None, errors) if errors else (pack, [])


def warnings(pack: Pack) -> list[str]:
    """What does not make a pack invalid but deserves a look: producers nobody reads, two rules
    claiming one line of the pack's tests or catalogs."""
    return graph.check(pack)[1] + graph.duplicate_claims(pack)
