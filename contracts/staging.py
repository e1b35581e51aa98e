"""The per-attempt staging database: schema, SQL files, connections and bulk inserts.

Tasks pass the staging *path* around, never a connection: DuckDB shares one database instance
between connections to the same path in a process, so each task (thread) opens its own.
A path of the form ':memory:<name>' is a named in-memory database shared within the process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import duckdb

from workload_attribution.contracts.models import AttemptScope, Observation

SQL_DIR = Path(__file__).resolve().parent / "sql"

# DuckDB's Python client tries `import pandas` on every parameterised execute to check for
# DataFrames; without pandas installed each failed import walks sys.path (~0.15 ms, thousands of
# times per diagnosis). Marking the absent module as absent makes the check instant.
if "pandas" not in sys.modules and importlib.util.find_spec("pandas") is None:
    sys.modules["pandas"] = None  # type: ignore[assignment]

# Stored text of one observation is cut here (the raw file keeps the whole line; evidence says so).
MAX_TEXT = 16_384
# Lines longer than this are counted as 'long' in coverage details.
LONG_LINE = 1_048_576
# What one attempt's staging database holds in memory; past it DuckDB spills to a private temporary
# directory (removed with the database): a million pre-filter hits or samples keep the process
# under 1 GiB (tests/bench/bounds.py).
STAGING_MEMORY = "384MB"


@cache
def sql(name: str, directory: Path = SQL_DIR) -> str:
    """An SQL file of this folder's sql/ (or of `directory`: a layer above keeps its own SQL files)."""
    return (directory / name).read_text()


def render(name: str, directory: Path = SQL_DIR, **values: object) -> str:
    """An SQL file with {placeholders} filled (only the named ones: SQL braces stay as they are)."""
    text = sql(name, directory)
    for key, value in values.items():
        text = text.replace("{" + key + "}", str(value))
    return text


def new_staging_path() -> str:
    return f":memory:attempt_{uuid.uuid4().hex[:12]}"


def connect(path: str) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(path)


@contextmanager
def connected(path: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to an attempt's staging database for the length of a `with` block."""
    con = duckdb.connect(path)
    try:
        yield con
    finally:
        con.close()


# An in-memory database lives while a connection to it is open: one holder per staging path.
_holders: dict[str, duckdb.DuckDBPyConnection] = {}
_spill: dict[str, str] = {}


def release_staging(path: str) -> None:
    con = _holders.pop(path, None)
    if con is not None:
        con.close()
    spill = _spill.pop(path, None)
    if spill:
        import shutil

        shutil.rmtree(spill, ignore_errors=True)


def create_staging(scope: AttemptScope, path: str | None = None) -> str:
    """Create the schema and macros, record the scope; returns the path tasks connect with."""
    if path:
        _open_staging(path)
    else:
        path = _take_ahead()
        if path is None:
            path = new_staging_path()
            _open_staging(path)
    con = connect(path)
    try:
        con.execute(
            "INSERT INTO attempt VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                scope.cluster,
                scope.scheduler,
                scope.job_id,
                scope.attempt,
                scope.nodes,
                naive_utc(scope.start),
                naive_utc(scope.end),
                scope.state,
                scope.exit_code,
                scope.reason,
                scope.timezone,
                scope.gpus_per_node,
            ],
        )
    finally:
        con.close()
    return path


def _open_staging(path: str) -> None:
    """A new staging database: its settings, schema and macros, no attempt yet."""
    _holders[path] = connect(path)
    con = connect(path)
    try:
        con.execute("SET TimeZone = 'UTC'")
        if path.startswith(":memory:"):
            import tempfile

            # DuckDB makes the directory when it first spills (most attempts never do)
            _spill[path] = os.path.join(tempfile.gettempdir(), f"attribution-spill-{uuid.uuid4().hex}")
            con.execute(f"SET temp_directory = {sql_literal(_spill[path])}")
            con.execute(f"SET memory_limit = {sql_literal(STAGING_MEMORY)}")
        con.execute(sql("staging_schema.sql"))
        con.execute("CREATE SEQUENCE IF NOT EXISTS file_seq START 1")
        con.execute(sql("log_time_macros.sql"))
    finally:
        con.close()


# One staging database made ahead, on another thread, for the next create_staging of this process.
# A new process's first attempt spends most of its time in Python (imports, the configuration, the
# rules pack) holding the interpreter lock; DuckDB works without it, so a database's own cost (a new
# DuckDB instance, the schema, the macros: ~35 ms) is paid on the second core meanwhile.
_ahead: list[str] = []
_ahead_thread: threading.Thread | None = None
_ahead_lock = threading.Lock()


def stage_ahead(*also: Callable[[duckdb.DuckDBPyConnection], None]) -> None:
    """Start making one staging database for the next create_staging, then run each of `also` on a
    connection to it (work its first attempt would do, e.g. reading the rules pack's data); nothing
    when one is made or being made already. The thread is not a daemon: the process ends after it."""
    global _ahead_thread

    def make() -> None:
        path = new_staging_path()
        try:
            _open_staging(path)
        except Exception:  # the attempt makes its own, and says what went wrong then
            release_staging(path)
            return
        with _ahead_lock:
            _ahead.append(path)
        for work in also:
            try:
                with connected(path) as con:
                    work(con)
            except Exception:  # only ahead of time: the attempt does it again, and reports it
                pass

    with _ahead_lock:
        if _ahead or (_ahead_thread is not None and _ahead_thread.is_alive()):
            return
        _ahead_thread = threading.Thread(target=make, name="stage-ahead")
        _ahead_thread.start()


def _take_ahead() -> str | None:
    with _ahead_lock:
        thread = _ahead_thread
    if thread is not None and thread is not threading.current_thread():
        thread.join()
    with _ahead_lock:
        return _ahead.pop() if _ahead else None


def naive_utc(value):
    """DuckDB TIMESTAMP columns here are UTC without a zone."""
    if value is None:
        return None
    if value.tzinfo is not None:
        from datetime import timezone

        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def insert_observations(con: duckdb.DuckDBPyConnection, observations: Sequence[Observation]) -> int:
    """Bulk-insert structured observations (records or samples) in one statement per table.

    Column lists travel as DuckDB list parameters and are unnested in SQL: one round trip,
    no per-row executemany (which runs at ~1k rows/s).
    """
    records = [o for o in observations if o.kind != "sample"]
    samples = [o for o in observations if o.kind == "sample"]
    if records:
        con.execute(
            """
            INSERT INTO records
            SELECT nextval('obs_seq'), unnest($source), unnest($connector), unnest($node), unnest($kind),
                   unnest($time), unnest($text), unnest($attrs)::JSON, unnest($path), unnest($line)
            """,
            {
                "source": [o.source for o in records],
                "connector": [o.connector for o in records],
                "node": [o.node for o in records],
                "kind": [o.kind for o in records],
                "time": [naive_utc(o.time) for o in records],
                "text": [o.text[:MAX_TEXT] for o in records],
                "attrs": [json.dumps(o.attrs, default=str) for o in records],
                "path": [o.path for o in records],
                "line": [o.line for o in records],
            },
        )
    if samples:
        # One JSON document parsed by DuckDB: handing it nested Python lists costs a type probe per
        # value (seconds for 10^4 samples); json.dumps + from_json is milliseconds.
        payload = json.dumps(
            [
                {
                    "source": o.source,
                    "connector": o.connector,
                    "node": o.node,
                    "metric": o.attrs.get("__name__", o.series),
                    "labels": {k: str(v) for k, v in (o.attrs.get("labels") or {}).items()},
                    "series": o.series,
                    "value": o.value,
                    "time": naive_utc(o.time).isoformat() if o.time else None,
                    "path": o.path,
                    "raw": o.text,
                }
                for o in samples
            ]
        )
        con.execute(
            """
            INSERT INTO samples
            SELECT nextval('obs_seq'), source, connector, node, metric, labels, series, value, time::TIMESTAMP,
                   path, NULL, raw
            FROM (SELECT unnest(from_json($p::JSON, '[{"source": "VARCHAR", "connector": "VARCHAR", "node": "VARCHAR",
                   "metric": "VARCHAR", "labels": "MAP(VARCHAR, VARCHAR)", "series": "VARCHAR", "value": "DOUBLE",
                   "time": "VARCHAR", "path": "VARCHAR", "raw": "VARCHAR"}]'), recursive := true))
        """,
            {"p": payload},
        )
    return len(observations)


def one(con: duckdb.DuckDBPyConnection, query: str, params: Any = None) -> tuple[Any, ...]:
    """The row a query always returns (an aggregate, nextval)."""
    row = (con.execute(query, params) if params is not None else con.execute(query)).fetchone()
    if row is None:
        raise LookupError(f"no row from: {query[:80]}")
    return row


def scalar(con: duckdb.DuckDBPyConnection, query: str, params: Any = None) -> Any:
    """The first value of that row."""
    return one(con, query, params)[0]


def rows(con: duckdb.DuckDBPyConnection, query: str, params: Any = None) -> list[dict[str, Any]]:
    cur = con.execute(query, params) if params is not None else con.execute(query)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def contains_any(column: str, literals: Iterable[str]) -> str:
    """A boolean SQL expression: column contains any of the literals (case-sensitive).

    One RE2 alternation of the escaped literals, not a chain of contains(): RE2 runs one automaton
    over the line whatever the number of literals (measured on 1M log lines: 0.45 s against 0.83 s
    for 30 literals), which keeps the scan close to one `grep -E` pass."""
    lits = sorted({lit for lit in literals if lit})
    if not lits:
        return "false"
    alternation = "|".join(re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", lit) for lit in lits)
    return f"regexp_matches({column}, {sql_literal(alternation)})"
