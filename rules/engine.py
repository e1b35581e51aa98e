"""The rule engine: run the pack's phases over an attempt's staging database.

extract  -> events from observations (SQL over log_lines / samples / records)
early    -> annotations on events (catalog facts, decodes, address -> host mapping)
final    -> verdict candidates, then roles (root, cascade with demoted_by, context)
report   -> the Diagnosis (rules/report.py)

A rule that fails (bad SQL at run time, Python error) is recorded with its id and the rest of the
pack still runs; the diagnosis lists the failed rules.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel, ConfigDict, Field

from workload_attribution.contracts.vocabulary import (
    Action,
    Confidence,
    Role,
    SubDomain,
    TerminalState,
    Vocabulary,
    check_pair,
)
from workload_attribution.rules.pack import Pack, Rule

ENGINE_SQL = Path(__file__).resolve().parent / "engine.sql"
DATA_DIR = Path(__file__).resolve().parent / "data"
ONE_THREAD_ROWS = 122_880  # a DuckDB row group

EVENT_COLUMNS = (
    "symptom",
    "obs_id",
    "source",
    "node",
    "time",
    "rank",
    "component",
    "peer_node",
    "attrs",
    "title",
    "role_hint",
    "terminal_state",
    "sub_domain",
    "action",
    "interesting",
    "blame",
)
ANNOTATION_COLUMNS = tuple(c for c in EVENT_COLUMNS if c not in ("obs_id",))
VERDICT_COLUMNS = (
    "terminal_state",
    "sub_domain",
    "confidence",
    "root_event_id",
    "blamed_nodes",
    "components",
    "candidate_event_ids",
    "action",
    "reason",
)


class Settings(BaseModel):
    """What the rules run with (`rules:` in the configuration)."""

    model_config = ConfigDict(extra="forbid")

    skew_tolerance_s: float = Field(
        30.0, ge=0, le=3600, description="clock skew between hosts tolerated when ordering events"
    )
    default_collective_timeout_s: float = Field(
        600.0, gt=0, le=86400, description="NCCL timeout assumed when none is printed"
    )
    lookback_margin_s: float = Field(120.0, ge=0, le=86400, description="extra look-back before the first cascade")
    burst_window_s: float = Field(
        300.0, ge=0, le=86400, description="repeats of one symptom within this window are one burst"
    )
    rule_timeout_s: float = Field(
        60.0, gt=0, le=3600, description="a rule running longer is interrupted and reported failed"
    )


@dataclass
class RunResult:
    fired: list[str] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)


class RuleRuntimeError(Exception):
    pass


class _NoRows(Exception):
    """A Python rule found nothing: nothing to apply."""


@lru_cache(maxsize=1)
def _engine_sql() -> str:
    return ENGINE_SQL.read_text()


# A pack's CSV as a table, read from the file once per process (while the file is unchanged): each
# attempt then loads it from JSON, about a third of read_csv's cost (its sniffer and reader are
# set up for a file of any size). Kept only when the JSON round trip gives the same table.
PACK_DATA = (("xid_catalog", False), ("nvlink5_decode", True))  # data/<table>.csv, all VARCHAR or typed
_CSV_TABLES: dict[tuple[str, str], tuple[tuple[int, int], tuple[str, str, str] | None]] = {}
_CSV_LOCK = threading.Lock()


def _load_csv(con: duckdb.DuckDBPyConnection, table: str, path: Path, all_varchar: bool, temp: bool = False) -> None:
    read = f"SELECT * FROM read_csv('{path}', header=true, all_varchar={str(all_varchar).lower()})"
    create = f"CREATE OR REPLACE {'TEMP ' if temp else ''}TABLE {table} AS"
    key = (str(path), read)
    try:
        st = path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None
    cached = _CSV_TABLES.get(key)
    if stamp is not None and cached is not None and cached[0] == stamp:
        if cached[1] is not None:
            columns, shape, payload = cached[1]
            con.execute(
                f"{create} SELECT {columns} FROM (SELECT unnest(from_json($p::JSON, $shape), recursive := true))",
                {"p": payload, "shape": shape},
            )
            return
        con.execute(f"{create} {read}")  # a table JSON does not give back
        return
    con.execute(f"{create} {read}")
    if stamp is None:
        return
    with _CSV_LOCK:
        _CSV_TABLES[key] = (stamp, _as_json(con, table))


def _load_pack_data(con: duckdb.DuckDBPyConnection, data: Path, temp: bool = False) -> None:
    for table, all_varchar in PACK_DATA:
        _load_csv(con, table, data / f"{table}.csv", all_varchar=all_varchar, temp=temp)


def read_data_ahead(con: duckdb.DuckDBPyConnection, data: Path = DATA_DIR) -> None:
    """The pack's CSVs read once into this process's cache, ahead of the first attempt (on a
    connection of its own: what it makes is gone when that closes)."""
    _load_pack_data(con, data, temp=True)


def _as_json(con: duckdb.DuckDBPyConnection, table: str) -> tuple[str, str, str] | None:
    """The table as (columns, from_json shape, JSON rows), if that gives back the same table."""
    described = con.execute(f"DESCRIBE {table}").fetchall()
    names = [d[0] for d in described]
    if len(set(names)) != len(names) or any(not isinstance(n, str) for n in names):
        return None
    rows = con.execute(f"SELECT * FROM {table}").fetchall()
    shape = json.dumps([{d[0]: d[1] for d in described}])
    columns = ", ".join('"' + n.replace('"', '""') + '"' for n in names)
    try:
        payload = json.dumps([dict(zip(names, r)) for r in rows])
        same = con.execute(
            f"SELECT {columns} FROM (SELECT unnest(from_json($p::JSON, $shape), recursive := true))",
            {"p": payload, "shape": shape},
        )
        if same.fetchall() != rows or [d[0] for d in same.description] != names:
            return None
        again = con.execute(
            f"DESCRIBE SELECT {columns} FROM (SELECT unnest(from_json($p::JSON, $shape), recursive := true))",
            {"p": "[]", "shape": shape},
        ).fetchall()
    except (TypeError, ValueError, duckdb.Error):
        return None
    if [(d[0], d[1]) for d in again] != [(d[0], d[1]) for d in described]:
        return None
    return columns, shape, payload


def prepare(con: duckdb.DuckDBPyConnection, pack: Pack, settings: Settings) -> None:
    con.execute(_engine_sql())
    con.execute("DELETE FROM settings")
    con.execute(
        "INSERT INTO settings VALUES (?, ?, ?, ?)",
        [
            settings.skew_tolerance_s,
            settings.default_collective_timeout_s,
            settings.lookback_margin_s,
            settings.burst_window_s,
        ],
    )
    locked = con.execute("SELECT current_setting('lock_configuration')").fetchone()
    if not (locked and locked[0]):  # the first time: load the pack's data, then lock the database
        _load_pack_data(con, Path(pack.path) / "data" if pack.path else DATA_DIR)
        # An attempt whose observations fit in one row group (DuckDB's unit of parallel work) runs
        # its rules on one thread: a second has nothing to share and only adds the hand-over of
        # every pipeline (~15% of a tiny attempt's diagnosis), and what SQL leaves unordered (a
        # list(DISTINCT ...)) comes out the same at every run. A bigger attempt keeps every core.
        observed = con.execute(
            "SELECT (SELECT count(*) FROM log_lines) + (SELECT count(*) FROM samples) + (SELECT count(*) FROM records)"
        ).fetchone()
        if observed and observed[0] < ONE_THREAD_ROWS:
            con.execute("SET threads = 1")
        lock_down(con)
    defs = pack.symptom_defs
    con.execute("DELETE FROM symptom_defs")
    if defs:
        # one JSON document, parsed by DuckDB: lists of Python values cost a type probe each (~4 ms here)
        rows = [
            {
                "symptom": name,
                "rule_id": rule_id,
                "title": d.title,
                "role": d.role,
                "terminal_state": d.terminal_state and d.terminal_state.value,
                "sub_domain": d.sub_domain and d.sub_domain.value,
                "action": d.action and d.action.value,
                "interesting": d.interesting,
                "blame": d.blame,
                "failure_signal": d.failure_signal,
            }
            for name, (rule_id, d) in defs.items()
        ]
        con.execute(
            "INSERT INTO symptom_defs SELECT symptom, rule_id, title, role, terminal_state, sub_domain, action, "
            "interesting, blame, failure_signal FROM (SELECT unnest(from_json($p::JSON, $shape), recursive := true))",
            {"p": json.dumps(rows), "shape": _SYMPTOM_SHAPE},
        )


_SYMPTOM_SHAPE = json.dumps(
    [
        {
            **dict.fromkeys(
                ("symptom", "rule_id", "title", "role", "terminal_state", "sub_domain", "action"), "VARCHAR"
            ),
            "interesting": "BOOLEAN",
            "blame": "VARCHAR",
            "failure_signal": "BOOLEAN",
        }
    ]
)


_PY_MODULES: dict[Path, Any] = {}
_PY_LOCK = threading.Lock()


def python_rule(pack: Pack, spec: str) -> Callable[..., Any]:
    """A Python rule's function: `module:function`, the module a file of the pack's own python/
    folder named in pack.yaml's `python:` list. Nothing else is importable by a rule."""
    module, _, func = spec.partition(":")
    if module not in pack.python_modules:
        raise RuleRuntimeError(
            f"python module {module!r} is not allowed by the pack (pack.yaml python: {pack.python_modules})"
        )
    path = (Path(pack.path) / "python" / f"{module}.py").resolve()
    if not path.is_file() or not path.is_relative_to((Path(pack.path) / "python").resolve()):
        raise RuleRuntimeError(f"python module {module!r}: no file python/{module}.py in the pack")
    with _PY_LOCK:
        mod = _PY_MODULES.get(path)
        if mod is None:
            import hashlib
            import importlib.util

            name = f"_attribution_rules_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}_{module}"
            loader_spec = importlib.util.spec_from_file_location(name, path)
            if loader_spec is None or loader_spec.loader is None:
                raise RuleRuntimeError(f"python module {module!r}: cannot be loaded")
            mod = importlib.util.module_from_spec(loader_spec)
            loader_spec.loader.exec_module(mod)
            _PY_MODULES[path] = mod
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise RuleRuntimeError(f"python module {module!r} has no function {func!r}")
    return fn


@lru_cache(maxsize=512)
def single_select(sql: str) -> None:
    """A rule's SQL is one SELECT (or WITH ... SELECT): nothing a rule says can be a second statement."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise RuleRuntimeError(f"SQL does not parse: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        kinds = ", ".join(s.type.name for s in statements)
        raise RuleRuntimeError(f"a rule's SQL is one SELECT, not {len(statements)} statement(s): {kinds}")


def _rule_output(con: duckdb.DuckDBPyConnection, pack: Pack, rule: Rule, settings: Settings) -> int:
    """Materialise the rule's result as temp table rule_out; returns its number of rows."""
    if rule.sql:
        single_select(rule.sql)
        row = con.execute(f"CREATE OR REPLACE TEMP TABLE rule_out AS {rule.sql}").fetchone()
        return row[0] if row else 0
    assert rule.python is not None  # a rule has sql or python (the model checks)
    func = python_rule(pack, rule.python)
    rows: list[dict[str, Any]] = func(con, settings) or []
    con.execute("DROP TABLE IF EXISTS rule_out")
    if not rows:
        raise _NoRows
    payload = json.dumps(rows, default=str)
    con.execute(
        "CREATE TEMP TABLE rule_out AS SELECT unnest(from_json($p::JSON, $shape), recursive := true)",
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
    shape: dict[str, str] = {}
    for row in rows:
        for k, v in row.items():
            if k in shape and shape[k] != "NULL":
                continue
            if k == "attrs" or isinstance(v, (dict, list)):
                shape[k] = "JSON"
            elif isinstance(v, bool):
                shape[k] = "BOOLEAN"
            elif isinstance(v, int) and k.endswith("_id"):
                shape[k] = "BIGINT"
            elif isinstance(v, (int, float)):
                shape[k] = "DOUBLE"
            elif v is None:
                shape.setdefault(k, "VARCHAR")
            else:
                shape[k] = "VARCHAR"
    return shape


def check_columns(rule: Rule, cols: list[str]) -> None:
    """What a rule's output must look like, checked whether or not it found anything."""
    if rule.output == "events":
        missing = {"obs_id", "symptom"} - set(cols)
        if missing:
            raise RuleRuntimeError(f"events output lacks column(s) {sorted(missing)}")
        extra = set(cols) - set(EVENT_COLUMNS)
        if extra:
            raise RuleRuntimeError(f"events output has unknown column(s) {sorted(extra)}")
    elif rule.output == "annotations":
        if "event_id" not in cols:
            raise RuleRuntimeError("annotations output needs an event_id column")
        strange = [c for c in cols if c != "event_id" and c not in ANNOTATION_COLUMNS]
        if strange:
            raise RuleRuntimeError(f"annotations output has unknown column {strange[0]!r}")
    elif rule.output == "verdicts":
        required = {"terminal_state", "sub_domain"}
        if required - set(cols):
            raise RuleRuntimeError(f"verdicts output lacks column(s) {sorted(required - set(cols))}")
        unknown = set(cols) - set(VERDICT_COLUMNS)
        if unknown:
            raise RuleRuntimeError(f"verdicts output has unknown column(s) {sorted(unknown)}")
    elif rule.output == "roles":
        if not {"event_id", "role"} <= set(cols):
            raise RuleRuntimeError("roles output needs event_id and role columns")
    elif rule.output == "actions":
        if "action" not in cols or set(cols) - {"action", "reason"}:
            raise RuleRuntimeError("actions output is the columns action (and reason)")


# What a rule may say, checked on what it said: the diagnosis vocabulary (contracts/vocabulary.py).
_VOCABULARY_CHECKS: dict[str, list[tuple[str, type[Vocabulary]]]] = {
    "events": [("terminal_state", TerminalState), ("sub_domain", SubDomain), ("action", Action)],
    "annotations": [("terminal_state", TerminalState), ("sub_domain", SubDomain), ("action", Action)],
    "verdicts": [
        ("terminal_state", TerminalState),
        ("sub_domain", SubDomain),
        ("action", Action),
        ("confidence", Confidence),
    ],
    "roles": [("role", Role)],
    "actions": [("action", Action)],
}


def _check_words(con: duckdb.DuckDBPyConnection, rule: Rule, cols: list[str]) -> None:
    # every column's words in one statement (each statement costs its planning, ~0.3 ms)
    checks = [(col, words) for col, words in _VOCABULARY_CHECKS.get(rule.output, []) if col in cols]
    pairs = rule.output == "verdicts"
    if not checks and not pairs:
        return
    select = [
        f"list(DISTINCT {col}) FILTER (WHERE {col} IS NOT NULL AND NOT list_contains($w{i}, {col}))"
        for i, (col, _) in enumerate(checks)
    ]
    if pairs:
        select.append("list(DISTINCT [terminal_state, sub_domain])")
    found = con.execute(
        f"SELECT {', '.join(select)} FROM rule_out", {f"w{i}": words.values() for i, (_, words) in enumerate(checks)}
    ).fetchone()
    assert found is not None  # an aggregate gives one row
    for (col, words), bad in zip(checks, found):
        if bad:
            raise RuleRuntimeError(f"{col} {bad[0]!r} is not a {col} word (allowed: {', '.join(words.values())})")
    if pairs:
        for ts, sd in found[-1] or []:
            try:
                check_pair(ts, sd)
            except ValueError as exc:
                raise RuleRuntimeError(str(exc)) from None


def _apply(con: duckdb.DuckDBPyConnection, rule: Rule, n: int, cols: list[str]) -> int:
    """Apply rule_out's n rows (columns cols, checked) to the attempt's tables."""
    if rule.output in ("verdicts", "actions") and n > 1:
        raise RuleRuntimeError(f"{rule.output} output has {n} rows: a {rule.output} rule gives at most one")
    _check_words(con, rule, cols)
    if rule.output == "events":
        select = ", ".join(f"o.{c}" for c in cols)
        con.execute(
            f"""
            INSERT INTO events BY NAME
            SELECT nextval('event_seq') AS event_id, $rule AS rule_id, {select} FROM rule_out o
        """,
            {"rule": rule.id},
        )
        # Whatever the rule did not say, the observation does; the symptom's definition gives its meaning
        # (one statement: neither part reads a column the other sets).
        con.execute(
            """
            UPDATE events SET node = coalesce(events.node, f.o_node), time = coalesce(events.time, f.o_time),
                rank = coalesce(events.rank, f.o_rank), source = coalesce(events.source, f.o_source),
                title = coalesce(events.title, f.title), role_hint = coalesce(events.role_hint, f.role),
                terminal_state = coalesce(events.terminal_state, f.terminal_state),
                sub_domain = coalesce(events.sub_domain, f.sub_domain), action = coalesce(events.action, f.action),
                interesting = coalesce(events.interesting, f.interesting), blame = coalesce(events.blame, f.blame)
            FROM (
                SELECT e.event_id, o.node AS o_node, o.time AS o_time, o.rank AS o_rank, o.source AS o_source,
                       d.title, d.role, d.terminal_state, d.sub_domain, d.action, d.interesting, d.blame
                FROM events e LEFT JOIN observations o ON o.obs_id = e.obs_id
                              LEFT JOIN symptom_defs d ON d.symptom = e.symptom
                WHERE e.rule_id = $rule
            ) f
            WHERE f.event_id = events.event_id AND events.rule_id = $rule
        """,
            {"rule": rule.id},
        )
    elif rule.output == "annotations":
        sets = []
        for c in cols:
            if c == "event_id":
                continue
            if c == "attrs":
                sets.append("attrs = json_merge_patch(coalesce(events.attrs, '{}'), coalesce(a.attrs::JSON, '{}'))")
            else:
                sets.append(f"{c} = coalesce(a.{c}, events.{c})")
        if sets:
            con.execute(f"UPDATE events SET {', '.join(sets)} FROM rule_out a WHERE a.event_id = events.event_id")
    elif rule.output == "verdicts":
        select = ", ".join(f"o.{c}" for c in cols)
        con.execute(
            f"INSERT INTO verdicts BY NAME SELECT $rule AS rule_id, {select} FROM rule_out o", {"rule": rule.id}
        )
    elif rule.output == "roles":
        demoted = (
            "coalesce(r.demoted_by, $rule)" if "demoted_by" in cols else "CASE WHEN r.role = 'cascade' THEN $rule END"
        )
        interesting = "coalesce(r.interesting, events.interesting)" if "interesting" in cols else "events.interesting"
        con.execute(
            f"""
            UPDATE events SET role = r.role,
                              demoted_by = CASE WHEN r.role = 'cascade' THEN {demoted} END,
                              interesting = {interesting}
            FROM rule_out r WHERE r.event_id = events.event_id AND events.role IS NULL
        """,
            {"rule": rule.id},
        )
    elif rule.output == "actions":
        reason = "a.reason" if "reason" in cols else "NULL"
        con.execute(f"""
            UPDATE verdict SET action = a.action,
                               reason = concat_ws('; ', verdict.reason, {reason})
            FROM rule_out a WHERE a.action IS NOT NULL
        """)
    return n


class _Watchdog:
    """Interrupts a connection whose rule runs past its deadline. One thread for the process, not a
    timer thread per rule: starting and stopping a thread cost about a millisecond, 46 times a
    diagnosis. A rule disarmed before its deadline is never interrupted."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._armed: dict[int, tuple[float, duckdb.DuckDBPyConnection]] = {}
        self._tokens = itertools.count()
        self._wakes_at: float | None = None  # when the thread looks next (None: when armed)
        self._thread: threading.Thread | None = None

    def arm(self, con: duckdb.DuckDBPyConnection, seconds: float) -> int:
        deadline = time.monotonic() + seconds
        with self._cond:
            token = next(self._tokens)
            self._armed[token] = (deadline, con)
            if self._thread is None or not self._thread.is_alive():  # the first rule, or a forked child
                self._thread = threading.Thread(target=self._watch, name="rule-watchdog", daemon=True)
                self._wakes_at = None
                self._thread.start()
            elif self._wakes_at is None or deadline < self._wakes_at:
                self._cond.notify()
        return token

    def disarm(self, token: int) -> None:
        with self._cond:
            self._armed.pop(token, None)

    def _watch(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for token, (deadline, con) in list(self._armed.items()):
                    if deadline <= now:
                        del self._armed[token]
                        try:
                            con.interrupt()
                        except Exception:  # closed meanwhile: nothing left to interrupt
                            pass
                self._wakes_at = min((d for d, _ in self._armed.values()), default=None)
                self._cond.wait(None if self._wakes_at is None else self._wakes_at - now)


_WATCHDOG = _Watchdog()


class _Snapshots:
    """The engine's views that final-phase rules read several times each (root_candidates over
    failure_window over events and every observation): DuckDB binds and plans a view wherever a
    query names it, which cost those rules 2-3 times their own planning. While events do not
    change, a view's rows do not either: a rule naming one reads it from a temp table of the same
    name (temp comes first in DuckDB's search path), made when first named and dropped as soon as
    anything may have changed events."""

    VIEWS = ("failure_window", "root_candidates")  # in dependency order

    def __init__(self) -> None:
        self.made: list[str] = []

    def before(self, con: duckdb.DuckDBPyConnection, rule: Rule) -> None:
        for view in _views_named(rule.sql or ""):
            if view not in self.made:
                con.execute(f"CREATE TEMP TABLE {view} AS SELECT * FROM {view}")
                self.made.append(view)

    def drop(self, con: duckdb.DuckDBPyConnection) -> None:
        if self.made:
            con.execute("; ".join(f"DROP TABLE IF EXISTS temp.main.{view}" for view in self.made))
            self.made = []


@lru_cache(maxsize=1024)
def _views_named(sql: str) -> tuple[str, ...]:
    return tuple(v for v in _Snapshots.VIEWS if re.search(rf"\b{v}\b", sql, re.IGNORECASE))


def run_rule(
    con: duckdb.DuckDBPyConnection,
    pack: Pack,
    rule: Rule,
    settings: Settings,
    result: RunResult,
    snapshots: _Snapshots | None = None,
) -> None:
    started = time.perf_counter()
    # A runaway query is interrupted (DuckDB checks between vectors); a Python rule's own loops
    # cannot be, only the SQL it runs.
    token = _WATCHDOG.arm(con, settings.rule_timeout_s)
    changed = True  # whether events may have changed (snapshots of the views are then dropped)
    try:
        if rule.sql:
            if snapshots is not None:
                snapshots.before(con, rule)
            # most rules find nothing in most attempts: their output, its columns checked, and done;
            # what a rule found is applied all or nothing (a transaction where that takes two statements)
            n = _rule_output(con, pack, rule, settings)
            cols = _columns(con, pack, rule)
            check_columns(rule, cols)
            changed = bool(n) and rule.output in ("events", "annotations", "roles")
            if n and rule.output == "events":  # an INSERT and an UPDATE: both or neither
                con.execute("BEGIN TRANSACTION")
                _apply(con, rule, n, cols)
                con.execute("COMMIT")
            elif n:  # one statement, all or nothing by itself (its checks before it write nothing)
                _apply(con, rule, n, cols)
        else:  # a Python rule is handed the connection: all of it in the transaction
            con.execute("BEGIN TRANSACTION")
            try:
                n = _rule_output(con, pack, rule, settings)
                cols = _columns(con, pack, rule)
                check_columns(rule, cols)
                _apply(con, rule, n, cols)
            except _NoRows:
                n = 0
            con.execute("COMMIT")
        if n:
            result.fired.append(rule.id)
    except Exception as exc:  # one broken rule never stops the diagnosis
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:  # none open: the rule failed before applying anything
            pass
        timed_out = isinstance(exc, duckdb.InterruptException) or "INTERRUPT" in str(exc).upper()
        error = (
            f"timed out after {settings.rule_timeout_s:g} s (interrupted)"
            if timed_out
            else str(exc).splitlines()[0][:300]
            if str(exc)
            else type(exc).__name__
        )
        result.failed.append({"rule": rule.id, "error": error})
    finally:
        _WATCHDOG.disarm(token)
        if changed and snapshots is not None:
            snapshots.drop(con)
        result.timings_ms[rule.id] = round((time.perf_counter() - started) * 1000, 2)


def choose_verdict(con: duckdb.DuckDBPyConnection, pack: Pack) -> None:
    """The verdict of the rule first in the pack's precedence (pack.yaml) among those that gave one."""
    con.execute("DELETE FROM verdict")
    con.execute(
        "INSERT INTO verdict SELECT * EXCLUDE (place) FROM (SELECT *, list_position($order, rule_id) AS place "
        "FROM verdicts) ORDER BY place NULLS LAST LIMIT 1",
        {"order": pack.precedence},
    )


def renumber_events(con: duckdb.DuckDBPyConnection) -> None:
    """Events numbered by what they are (time, observation, symptom), not by which rule found them
    first: a tie anywhere later falls the same way whatever the rules are called."""
    con.execute("""
        CREATE OR REPLACE TEMP TABLE renumbered AS
        SELECT * REPLACE (row_number() OVER (ORDER BY time NULLS LAST, obs_id, symptom, node, component,
                                                      attrs::VARCHAR) AS event_id)
        FROM events
    """)
    con.execute("DELETE FROM events")
    con.execute("INSERT INTO events SELECT * FROM renumbered")
    con.execute("DROP TABLE renumbered")
    n = con.execute("SELECT coalesce(max(event_id), 0) + 1 FROM events").fetchone()
    con.execute(f"DROP SEQUENCE IF EXISTS event_seq; CREATE SEQUENCE event_seq START {n[0] if n else 1}")


def lock_down(con: duckdb.DuckDBPyConnection) -> None:
    """From here on the attempt's database reaches nothing else: no file reads or writes, no ATTACH,
    no INSTALL/LOAD, settings locked. Rules are a pack's code; the sandbox is what they run in."""
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def run_phases(
    con: duckdb.DuckDBPyConnection, pack: Pack, settings: Settings | None = None, prepared: bool = False
) -> RunResult:
    settings = settings or Settings()
    result = RunResult(failed=list(pack.broken))
    if not prepared:
        prepare(con, pack, settings)
    snapshots = _Snapshots()
    try:
        for rule in pack.by_phase("extract"):
            run_rule(con, pack, rule, settings, result, snapshots)
        snapshots.drop(con)
        renumber_events(con)
        for rule in pack.by_phase("early"):
            run_rule(con, pack, rule, settings, result, snapshots)
        final = pack.by_phase("final")
        for rule in (r for r in final if r.output == "verdicts"):
            run_rule(con, pack, rule, settings, result, snapshots)
        choose_verdict(con, pack)
        for rule in (r for r in final if r.output not in ("verdicts", "actions")):
            run_rule(con, pack, rule, settings, result, snapshots)
        for rule in (r for r in final if r.output == "actions"):
            run_rule(con, pack, rule, settings, result, snapshots)
        for rule in pack.by_phase("report"):
            run_rule(con, pack, rule, settings, result, snapshots)
    finally:  # what reads the views after the rules (the report, a test) reads them live
        snapshots.drop(con)
    return result
