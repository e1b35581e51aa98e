"""One rule run over an attempt: its output made (SQL, or a Python function's rows), checked and
applied all or nothing, under the watchdog. A rule that fails is recorded with its id and changes
nothing; the rest of the pack still runs."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import duckdb

from workload_attribution.rules.outputs import apply_output, check_columns
from workload_attribution.rules.pack import Pack, Rule
from workload_attribution.rules.sandbox import WATCHDOG, Snapshots, python_rule
from workload_attribution.rules.settings import Settings


@dataclass
class RunResult:
    fired: list[str] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)


class _NoRows(Exception):
    """A Python rule found nothing: nothing to apply."""


def run_rule(
    con: duckdb.DuckDBPyConnection,
    pack: Pack,
    rule: Rule,
    settings: Settings,
    result: RunResult,
    snapshots: Snapshots | None = None,
) -> None:
    started = time.perf_counter()
    # A runaway query is interrupted (DuckDB checks between vectors); a Python rule's own loops
    # cannot be, only the SQL it runs.
    token = WATCHDOG.arm(con, settings.rule_timeout_s)
    changed = True  # whether events may have changed (snapshots of the views are then dropped)
    try:
        if rule.sql:
            n, changed = _run_sql_rule(con, pack, rule, settings, snapshots)
        else:
            n = _run_python_rule(con, pack, rule, settings)
        if n:
            result.fired.append(rule.id)
    except Exception as exc:  # one broken rule never stops the diagnosis
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:  # none open: the rule failed before applying anything
            pass
        result.failed.append({"rule": rule.id, "error": _failure(exc, settings)})
    finally:
        WATCHDOG.disarm(token)
        if changed and snapshots is not None:
            snapshots.drop(con)
        result.timings_ms[rule.id] = round((time.perf_counter() - started) * 1000, 2)


def rule_rows(con: duckdb.DuckDBPyConnection, pack: Pack, rule: Rule, settings: Settings) -> list[tuple[Any, ...]]:
    """What the rule would apply over the state as it stands, applied nowhere: its output's rows
    in a fixed order (a replay compares two versions of a rule by them). Errors are raised."""
    token = WATCHDOG.arm(con, settings.rule_timeout_s)
    try:
        n = _rule_output(con, pack, rule, settings)
        return sorted(con.execute("SELECT * FROM rule_out").fetchall(), key=repr) if n else []
    except _NoRows:
        return []
    finally:
        WATCHDOG.disarm(token)


def _run_sql_rule(
    con: duckdb.DuckDBPyConnection, pack: Pack, rule: Rule, settings: Settings, snapshots: Snapshots | None
) -> tuple[int, bool]:
    """(rows found, whether events may have changed). Most rules find nothing in most attempts:
    their output, its columns checked, and done; what a rule found is applied all or nothing (one
    statement)."""
    if snapshots is not None:
        snapshots.before(con, rule)
    n = _rule_output(con, pack, rule, settings)
    cols = _columns(con, pack, rule)
    check_columns(rule, cols)
    changed = bool(n) and rule.output in ("events", "annotations", "roles")
    if n:  # one statement, all or nothing by itself (its checks before it write nothing)
        apply_output(con, rule, n, cols)
    return n, changed


def _run_python_rule(con: duckdb.DuckDBPyConnection, pack: Pack, rule: Rule, settings: Settings) -> int:
    """A Python rule is handed the connection: all of it in the transaction."""
    con.execute("BEGIN TRANSACTION")
    try:
        n = _rule_output(con, pack, rule, settings)
        cols = _columns(con, pack, rule)
        check_columns(rule, cols)
        apply_output(con, rule, n, cols)
    except _NoRows:
        n = 0
    con.execute("COMMIT")
    return n


def _failure(exc: Exception, settings: Settings) -> str:
    """What the diagnosis says of a failed rule: a timeout as such, else the error's first line."""
    if isinstance(exc, duckdb.InterruptException) or "INTERRUPT" in str(exc).upper():
        return f"timed out after {settings.rule_timeout_s:g} s (interrupted)"
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__


def _rule_output(con: duckdb.DuckDBPyConnection, pack: Pack, rule: Rule, settings: Settings) -> int:
    """Materialise the rule's result as temp table rule_out; returns its number of rows."""
    if rule.sql:
        pack.check_select(rule.sql)
        row = con.execute(f"CREATE OR REPLACE TEMP TABLE rule_out AS {rule.sql}").fetchone()
        return row[0] if row else 0
    assert rule.python is not None  # a rule has sql or python (the model checks)
    func = python_rule(pack, rule.python)
    rows: list[dict[str, Any]] = func(con, settings) or []
    if not rows:  # nothing to apply, and nothing reads rule_out but after a rule that found something
        raise _NoRows
    payload = json.dumps(rows, default=str)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE rule_out AS SELECT unnest(from_json($p::JSON, $shape), recursive := true)",
        {"p": payload, "shape": json.dumps([_json_shape(rows)])},
    )
    return len(rows)


# A SQL rule's output columns are bound from its text against the staging schema, the same for
# every attempt: asked of DuckDB once per process, not once per rule and attempt.
_COLUMNS: dict[tuple[str, str], list[str]] = {}


def _columns(con: duckdb.DuckDBPyConnection, pack: Pack, rule: Rule) -> list[str]:
    key = (pack.version, rule.sql or "")
    cols = _COLUMNS.get(key) if rule.sql else None
    if cols is None:
        # the table's columns as the catalog has them: a relation bound, no query planned (~0.3 ms less)
        cols = list(con.table("rule_out").columns)
        if rule.sql:
            if len(_COLUMNS) > 4096:  # packs come and go in a long-lived process
                _COLUMNS.clear()
            _COLUMNS[key] = cols
    return cols


def _json_shape(rows: list[dict[str, Any]]) -> dict[str, str]:
    """The DuckDB types of a Python rule's columns, for from_json."""
    shape: dict[str, str] = {}
    for row in rows:
        for k, v in row.items():
            if k not in shape:  # a column's first value decides its type (None: VARCHAR)
                shape[k] = _json_type(k, v)
    return shape


def _json_type(column: str, value: Any) -> str:
    if column == "attrs" or isinstance(value, (dict, list)):
        return "JSON"
    if isinstance(value, bool):
        return "BOOLEAN"
    if isinstance(value, int) and column.endswith("_id"):
        return "BIGINT"
    if isinstance(value, (int, float)):
        return "DOUBLE"
    return "VARCHAR"
