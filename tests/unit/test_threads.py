"""How many threads an attempt's staging database runs on (staging/database.py choose_threads):
one from the start and while what a statement reads fits in one row group (a second has nothing to
take), every core past it, and a database the rules locked keeps what it has."""

from __future__ import annotations

import os

import duckdb

from workload_attribution.staging.database import (
    ONE_THREAD_ROWS,
    choose_threads,
    connected,
    new_staging_path,
    open_staging,
    plainly,
    release_staging,
)


def _threads(con: duckdb.DuckDBPyConnection) -> int:
    row = con.execute("SELECT current_setting('threads')").fetchone()
    assert row is not None
    return int(row[0])


def test_few_rows_one_thread_many_rows_every_core_and_a_locked_database_keeps_its_own() -> None:
    cores = os.cpu_count() or 1
    con = duckdb.connect()
    con.execute(f"SET threads = {cores + 1}")
    with plainly(con, 5_000, pick_threads=True):  # the grammar over a small attempt's lines
        assert _threads(con) == 1
    assert _threads(con) == 1  # the rules of that attempt choose alike
    choose_threads(con, ONE_THREAD_ROWS)  # an attempt past a row group: every core back
    assert _threads(con) == cores
    with plainly(con, ONE_THREAD_ROWS, pick_threads=True):
        assert _threads(con) == cores
    con.execute("SET threads = 3; SET lock_configuration = true")
    choose_threads(con, 10)
    with plainly(con, 10, pick_threads=True):
        assert _threads(con) == 3


def test_a_staging_database_starts_on_one_thread_and_takes_every_core_for_a_big_attempt() -> None:
    cores = os.cpu_count() or 1
    path = new_staging_path()
    open_staging(path)
    try:
        with connected(path) as con:
            assert _threads(con) == 1  # no DuckDB worker started (and stopped again) for a tiny attempt
            with plainly(con, ONE_THREAD_ROWS, pick_threads=True):  # the grammar over a big attempt's lines
                assert _threads(con) == cores
        # every task's connection to it still opens: DuckDB compares a connection's configuration with
        # the first connection's, not with what was SET since
        with connected(path) as con:
            assert _threads(con) == cores
            with plainly(con, 10, pick_threads=True):
                assert _threads(con) == 1
    finally:
        release_staging(path)
