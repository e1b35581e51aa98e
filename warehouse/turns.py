"""Who writes a lake when, on every host: locks in the lake's catalog database.

DuckLake commits optimistically and has no PRIMARY KEY, and two of its races lose or double an
attempt's rows (DuckDB 1.5.5's ducklake extension, both reproduced by
tests/integration/test_lake_stress.py):

- two transactions that each delete an attempt's rows and insert its new ones conflict only when
  a delete found rows: the first two writes of an attempt find none, both commit, and the attempt
  has two rows (tests/integration/test_lake.py once saw 13 rows for 12 attempts);
- maintenance (flushing inlined rows to files, rewriting and merging files) committing while a
  writer's transaction is open lost that writer's rows or doubled others'.

So a lake writer takes the attempt's turn before its transaction reads the attempt's rows and
keeps it until after its commit: an exclusive PostgreSQL advisory lock on the attempt (a 32-bit
hash of its key; a collision only makes two attempts take turns), plus the lake's lock in shared
mode. Writers of different attempts do not wait for each other. A maintenance step holds the
lake's lock alone (exclusive): it waits for the writes in flight, and new writes wait for it.
The locks are transaction-scoped, in the catalog database every writer already reaches, so a
writer or host that dies releases them with its connection. A DuckDB file needs none of this:
one process writes it at a time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import duckdb

from workload_attribution.contracts.errors import NotStored
from workload_attribution.warehouse.conflicts import rollback

# the catalog database attached a second time, as plain PostgreSQL, on a lake writer's connection
TURNS_DB = "warehouse_turns"
# this project's advisory locks in the catalog database: (ATTEMPTS, hash of the attempt key) and
# (LAKE, 0), the lake's own
ATTEMPTS, LAKE = 0x5741_7474, 0x5741_4C4B


class TurnNotTaken(NotStored):
    """Another writer of the same attempt, or the lake's maintenance, held the lock past the wait."""


def attach(con: duckdb.DuckDBPyConnection, dsn: str) -> None:
    """Make turns available on a lake writer's connection (the postgres_scanner extension is loaded)."""
    con.execute(f"ATTACH '{dsn}' AS {TURNS_DB} (TYPE postgres)")


def lock_id(attempt_key: str) -> int:
    return int.from_bytes(hashlib.sha256(attempt_key.encode()).digest()[:4], "big", signed=True)


def turn(con: duckdb.DuckDBPyConnection, attempt_key: str, wait_s: float) -> AbstractContextManager[None]:
    """The attempt's turn, while the body runs (and commits) its transaction on `con`."""
    locks = [f"pg_advisory_xact_lock_shared({LAKE}, 0)", f"pg_advisory_xact_lock({ATTEMPTS}, {lock_id(attempt_key)})"]
    return _holding(con, locks, wait_s, f"another writer of {attempt_key}")


def alone(con: duckdb.DuckDBPyConnection, wait_s: float) -> AbstractContextManager[None]:
    """The lake to this connection alone, while the body runs a maintenance step."""
    return _holding(con, [f"pg_advisory_xact_lock({LAKE}, 0)"], wait_s, "the lake's writers")


@contextmanager
def _holding(con: duckdb.DuckDBPyConnection, locks: list[str], wait_s: float, holder_is: str) -> Iterator[None]:
    """The locks, taken in order in a transaction of a second connection to the same DuckDB (a
    cursor) that ends after the body: released only once the body's work is committed or undone."""
    holder = con.cursor()
    try:
        holder.execute("BEGIN TRANSACTION")
        _query(holder, f"SELECT set_config('lock_timeout', '{max(1, int(wait_s * 1000))}ms', true)")
        for lock in locks:
            try:
                _query(holder, f"SELECT {lock}::text")
            except duckdb.Error as exc:
                if "lock timeout" not in str(exc):
                    raise
                raise TurnNotTaken(f"{holder_is} held the lock for more than {wait_s:.0f}s") from None
        yield
    finally:
        rollback(holder)  # ends the catalog transaction: the locks go with it
        holder.close()


def _query(holder: duckdb.DuckDBPyConnection, sql: str) -> None:
    holder.execute(f"SELECT * FROM postgres_query('{TURNS_DB}', $q)", {"q": sql}).fetchall()
