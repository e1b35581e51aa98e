"""The per-attempt staging database: schema, SQL files, connections and query helpers.

Tasks pass the staging *path* around, never a connection: DuckDB shares one database instance
between connections to the same path in a process, so each task (thread) opens its own.
A path of the form ':memory:<name>' is a named in-memory database shared within the process.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import duckdb

from workload_attribution.staging.grammar import add_grammar

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


# A DuckDB database of this process's (a staging database, the warehouse file, the templates' pass)
# starts on one thread; a big attempt's staging gets every core once its size is known
# (choose_threads). A database started on DuckDB's default (a thread a core) launched a worker
# thread, and the tiny attempt's first choose_threads stopped it again; a DuckDB thread that stops
# flushes its allocator's caches (jemalloc: the arena it shares with the attempt's own thread),
# and the attempt's next ~40 MB were page faults again: ~20 ms of CPU a warm diagnosis. Every
# connection to a named database passes the same configuration (DuckDB refuses a second one that
# differs from the first's, whatever was SET since).
ONE_THREAD: dict[str, str | bool | int | float | list[str]] = {"threads": 1}


def connect(path: str) -> duckdb.DuckDBPyConnection:
    """A connection to a staging database, finding the grammar's macros where its database keeps
    them (staging/grammar.py: a search_path is a connection's own setting)."""
    con = duckdb.connect(path, config=ONE_THREAD) if path.startswith(":memory:") else duckdb.connect(path)
    search = _search_paths.get(path)
    if search is not None:
        con.execute(f"SET search_path = {sql_literal(search)}")
    return con


@contextmanager
def connected(path: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to an attempt's staging database for the length of a `with` block."""
    con = connect(path)
    try:
        yield con
    finally:
        con.close()


# An in-memory database lives while a connection to it is open: one holder per staging path.
_holders: dict[str, duckdb.DuckDBPyConnection] = {}
_spill: dict[str, str] = {}
_search_paths: dict[str, str] = {}  # staging path -> the search_path that finds the grammar's file


def search_also(con: duckdb.DuckDBPyConnection, path: str, schema: str) -> None:
    """`schema` searched after what the staging database at `path` searched already (its own
    tables, the grammar's macros), on `con` and on every connection to it from now on."""
    search = _search_paths.get(path)
    if search is None:
        row = con.execute("SELECT current_database()").fetchone()
        search = '"' + str(row[0] if row else "memory").replace('"', '""') + '".main'
    search = f"{search},{schema}"
    con.execute(f"SET search_path = {sql_literal(search)}")
    _search_paths[path] = search


def release_staging(path: str) -> None:
    con = _holders.pop(path, None)
    _search_paths.pop(path, None)
    if con is not None:
        con.close()
    spill = _spill.pop(path, None)
    if spill:
        import shutil

        shutil.rmtree(spill, ignore_errors=True)


def open_staging(path: str) -> None:
    """A new staging database: its settings, schema and the grammar's macros (attached from the
    user's cache, staging/grammar.py), no attempt yet. They are made on the connection that holds
    the database (a second one only cost its own connect and close)."""
    con = _holders[path] = connect(path)
    con.execute("SET TimeZone = 'UTC'")
    if path.startswith(":memory:"):
        import tempfile

        # DuckDB makes the directory when it first spills (most attempts never do)
        _spill[path] = os.path.join(tempfile.gettempdir(), f"attribution-spill-{uuid.uuid4().hex}")
        con.execute(f"SET temp_directory = {sql_literal(_spill[path])}")
        con.execute(f"SET memory_limit = {sql_literal(STAGING_MEMORY)}")
    con.execute(sql("staging_schema.sql"))
    con.execute("CREATE SEQUENCE IF NOT EXISTS file_seq START 1")
    search = add_grammar(con, sql("log_time_macros.sql"))
    if search is not None:
        _search_paths[path] = search


# Below this many rows, an attempt's statements cost more to optimise than the optimised plans
# save: a tiny attempt's rules, report and grammar spent ~40% of their time in DuckDB's optimizer
# and in setting up what it made. Measured per rules phase: 440 -> 270 ms at ~50 observations,
# 500 -> 410 ms at 5,000, but 0.8 -> 2.1 s at 20,000 (joins left as written); the grammar breaks
# even near 4,000 lines. The optimizer only rewrites: the same rows either way.
FEW_ROWS = 3_000
# What DuckDB shares between threads is row groups (122,880 rows): over fewer, a second thread has
# nothing to take and still costs its own state. The grammar's statement over 100k lines, one row
# group: 0.46-0.52 s of CPU and +25-29 MiB on one thread, 0.67-0.97 s and +55-63 MiB on two, the
# same rows and no sooner (load 4.7); over 4,000 lines 54 against 94 ms. The rules choose alike
# (rules/phases.py).
ONE_THREAD_ROWS = 122_880


@contextmanager
def plainly(con: duckdb.DuckDBPyConnection, rows: int, pick_threads: bool = False) -> Iterator[None]:
    """Statements over `rows` rows, unoptimised when they are few (FEW_ROWS), and with `pick_threads`
    on the threads their number wants from then on (choose_threads: one for what fits in a row
    group, where a second only adds its own state; the rules choose alike). The optimizer is this
    connection's setting; threads are the database's (this attempt's own; a database the rules
    already locked keeps its threads: rules/claims.py stages lines into one)."""
    if pick_threads:
        choose_threads(con, rows)
    if rows >= FEW_ROWS:
        yield
        return
    con.execute("PRAGMA disable_optimizer")
    try:
        yield
    finally:
        con.execute("PRAGMA enable_optimizer")


def choose_threads(con: duckdb.DuckDBPyConnection, rows: int) -> None:
    """One thread for what fits in a row group (ONE_THREAD_ROWS), else every core DuckDB would
    use (a staging database starts on one: ONE_THREAD); a locked database keeps its own."""
    cores = os.cpu_count() or 1
    want = 1 if rows < ONE_THREAD_ROWS else cores
    if not scalar(con, f"SELECT current_setting('lock_configuration') OR current_setting('threads') = {want}"):
        con.execute(f"SET threads = {want}")


def observed(con: duckdb.DuckDBPyConnection) -> int:
    """How many observations the attempt holds: its log lines, samples and records."""
    return int(
        scalar(
            con,
            "SELECT (SELECT count(*) FROM log_lines) + (SELECT count(*) FROM samples) + (SELECT count(*) FROM records)",
        )
    )


def naive_utc(value: datetime | None) -> datetime | None:
    """DuckDB TIMESTAMP columns here are UTC without a zone."""
    if value is None:
        return None
    if value.tzinfo is not None:
        from datetime import timezone

        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


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
    return _alternation(column, tuple(sorted({lit for lit in literals if lit})))


# RE2's metacharacters, each escaped with a backslash (str.translate: a re.sub per literal cost a
# new process's first attempt ~3.6 ms for the shipped pack's log sources, this ~1.7 ms)
_RE2_ESCAPES = str.maketrans({c: "\\" + c for c in ".^$*+?()[]{}|\\"})


@lru_cache(maxsize=64)
def _alternation(column: str, lits: tuple[str, ...]) -> str:
    """contains_any's expression, kept: the same pack's literals at every attempt."""
    if not lits:
        return "false"
    alternation = "|".join(lit.translate(_RE2_ESCAPES) for lit in lits)
    return f"regexp_matches({column}, {sql_literal(alternation)})"
