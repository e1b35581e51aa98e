"""Keeping a warehouse fast to read (the nightly backfill runs this after its attempts).

A lake: rows writers left in the catalog go to Parquet files, files with deleted rows are rewritten
and adjacent small files merged, old snapshots expire, and files no snapshot needs are deleted
(DuckLake's maintenance functions). A DuckDB file: checkpointed (its write-ahead log folded in).
Callers hold backends.WRITE_LOCK on a writer's connection.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import duckdb

from workload_attribution.warehouse import turns
from workload_attribution.warehouse.conflicts import is_conflict, is_store_busy, retry, rollback

# What a maintenance run leaves of a lake's history: snapshots (time travel) this recent, and files
# no snapshot needs any more, once they have been unneeded this long (a reader may still scan them).
LAKE_SNAPSHOTS_KEPT = timedelta(days=7)
LAKE_FILES_GRACE = timedelta(hours=1)


def checkpoint_file(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    retry(lambda: con.execute("CHECKPOINT"))
    return {"backend": "duckdb", "checkpointed": True}


def maintain_lake(
    con: duckdb.DuckDBPyConnection, now: datetime, snapshots_kept: timedelta, wait_s: float
) -> dict[str, Any]:
    """Flush, rewrite, merge, expire snapshots older than `snapshots_kept`, delete files unneeded
    for LAKE_FILES_GRACE; what was done, counted. Each step holds the lake alone (turns.alone:
    DuckLake's maintenance racing a writer's transaction lost or doubled rows), waiting up to
    `wait_s` for the writes in flight; writers wait for one step at a time, never the whole run."""

    def step(call: str, params: dict | None = None) -> list[tuple]:
        with turns.alone(con, wait_s):
            return _step(con, call, params)

    flushed = step("ducklake_flush_inlined_data('warehouse')")
    # a file with deleted rows (an attempt diagnosed again) is never merged: rewritten first, whatever
    # the share deleted (DuckLake's default waits for 95%), it merges with its neighbours again
    rewritten = step("ducklake_rewrite_data_files('warehouse', delete_threshold => 0)")
    merged = step("ducklake_merge_adjacent_files('warehouse')")
    expired = step("ducklake_expire_snapshots('warehouse', older_than => $t)", {"t": now - snapshots_kept})
    deleted = step("ducklake_cleanup_old_files('warehouse', older_than => $t)", {"t": now - LAKE_FILES_GRACE})
    return {
        "backend": "ducklake",
        "rows_moved_to_files": sum(int(r[-1] or 0) for r in flushed),
        # per table: (schema, table, files processed, files they became)
        "files_rewritten": sum(int(r[2] or 0) for r in rewritten),
        "files_merged": sum(int(r[2] or 0) for r in merged),
        "snapshots_expired": len(expired),
        "files_deleted": len(deleted),
    }


def _step(con: duckdb.DuckDBPyConnection, call: str, params: dict | None = None) -> list[tuple]:
    """One maintenance function's rows. Each step is idempotent (what is left to move, merge or
    expire is moved, merged, expired), so one that lost a race with a writer is run again. DuckLake
    words some such failures only as "fetch from an unsuccessful query result" (seen when three
    processes maintained one lake while writing it), and a busy object store's server error are
    retried too, after a rollback."""

    def run() -> list[tuple]:
        try:
            return con.execute(f"CALL {call}", params).fetchall()
        except duckdb.Error:
            rollback(con)
            raise

    return retry(run, retryable=lambda e: is_conflict(e) or is_store_busy(e) or "unsuccessful query result" in str(e))
