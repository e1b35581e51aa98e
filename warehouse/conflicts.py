"""When a warehouse transaction lost a race with another writer, and running it again until it wins.

DuckLake commits optimistically: a writer whose transaction conflicts with another's retries it.
A transaction that failed is rolled back before anything else runs on its connection.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from typing import TypeVar

import duckdb

T = TypeVar("T")

# What the catalog's PostgreSQL says when two transactions touched the same rows (SQLSTATE 40001,
# 40P01): retrying is what it asks for. DuckLake passes it on as a plain Error (seen when a nightly
# maintenance moved inlined rows out while a worker deleted some of them).
_CATALOG_RETRY = ("could not serialize access", "deadlock detected")


def is_conflict(exc: Exception) -> bool:
    """Another writer got there first: a commit conflict, the catalog database's serialization
    failure, or two processes creating a new lake's catalog tables at the same moment (the loser's
    ATTACH fails; the next one finds them)."""
    text = str(exc).lower()
    return (
        isinstance(exc, duckdb.TransactionException)
        or "conflict" in text
        or "failed to initialize ducklake" in text
        or any(s in text for s in _CATALOG_RETRY)
    )


# An object store that answered a server error (S3's 500 InternalError and 503 SlowDown ask the
# client to retry; a busy SeaweedFS answers 500 to a PUT) after httpfs's own retries gave up.
_STORE_BUSY = re.compile(r"HTTP Error: Request returned HTTP 5\d\d")


def is_store_busy(exc: Exception) -> bool:
    """The lake's object store failed a request with a server error: a step that is safe to run
    again (idempotent) can be."""
    return isinstance(exc, duckdb.HTTPException) and bool(_STORE_BUSY.search(str(exc)))


def retry(fn: Callable[[], T], attempts: int = 12, retryable: Callable[[Exception], bool] = is_conflict) -> T:
    """Run fn, retrying (with jittered backoff, up to 2 s a wait) a transaction another writer's
    commit made conflict; the last attempt's failure, or any other, is raised."""
    for i in range(attempts - 1):
        try:
            return fn()
        except duckdb.Error as exc:
            if not retryable(exc):
                raise
            time.sleep(min(2.0, 0.05 * 2**i) * (1 + random.random()))
    return fn()


def rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Undo what is undoable; a transaction the failure already ended (a full disk) is no news: the
    caller raises the failure itself, not "cannot rollback"."""
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass
