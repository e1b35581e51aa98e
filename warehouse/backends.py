"""The warehouse setting -> a connection. Two backends, one schema, one SQL:

- a DuckDB file (the default: `warehouse: /path/warehouse.duckdb`). DuckDB allows one writing
  process per file: a writer that finds the file locked retries with backoff up to a bound, then
  fails loudly (the attempt stays undiagnosed for the next run).
- DuckLake with a PostgreSQL catalog and a shared data path, for many writers on many hosts
  (`warehouse: ducklake+postgres://user@host:5432/dbname?data_path=/shared/lake/`, the password
  in PGPASSWORD or ~/.pgpass as libpq reads them). DuckLake commits optimistically: a writer whose
  transaction conflicts with another's retries it (warehouse/conflicts.py). The ducklake and
  postgres_scanner extensions come from PyPI (duckdb-extension-ducklake / -postgres-scanner, built
  for the pinned DuckDB) and are loaded from their files: nothing is downloaded at run time.

A process keeps its connection to each lake it writes between writes (see write_kept_lake).
"""

from __future__ import annotations

import atexit
import importlib
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

import duckdb

from workload_attribution.contracts.errors import BadInput, NotStored
from workload_attribution.warehouse.conflicts import is_conflict, retry

LOCK_WAIT_S = 60.0
# A lake writer's inserts of at most this many rows into a table go to the catalog (DuckLake's data
# inlining) rather than to a new Parquet file each: one diagnosis writes a few to a few hundred rows
# per table, so without it every attempt left two small files (symptoms, evidence) and a fleet's
# lake grew by thousands an hour. Warehouse.maintain moves inlined rows into Parquet files.
LAKE_INLINE_ROWS = 10_000


class WarehouseLocked(NotStored):
    """Another process holds the warehouse file past the lock wait."""


class WarehouseConfigError(BadInput):
    """The warehouse setting is not a path or a DuckLake URL this project can open."""


@dataclass(frozen=True)
class Lake:
    dsn: str  # libpq connection string of the PostgreSQL catalog
    data_path: str  # where the Parquet files live (a shared filesystem for many hosts)


def parse_lake(url: str) -> Lake | None:
    """`ducklake+postgres://user@host:port/db?data_path=/shared/lake/` -> Lake; a file path -> None."""
    if not url.startswith("ducklake"):
        return None
    u = urlparse(url)
    if u.scheme != "ducklake+postgres" or not u.path.strip("/"):
        raise WarehouseConfigError(f"{url}: expected ducklake+postgres://user@host:port/dbname?data_path=/shared/dir/")
    data_path = (parse_qs(u.query).get("data_path") or [""])[0]
    if not data_path:
        raise WarehouseConfigError(f"{url}: data_path= is required (a directory every writer can reach)")
    parts = {
        "host": u.hostname,
        "port": u.port,
        "dbname": unquote(u.path.strip("/")),
        "user": unquote(u.username) if u.username else None,
        "password": unquote(u.password) if u.password else None,
    }
    dsn = " ".join(f"{k}={v}" for k, v in parts.items() if v)
    if any(c in dsn + data_path for c in "'\\\n"):
        raise WarehouseConfigError(f"{url}: quotes, backslashes and newlines are not allowed")
    return Lake(dsn=dsn, data_path=data_path.rstrip("/") + "/")


def _extension(name: str) -> str:
    """The file of a DuckDB extension installed from its PyPI wheel, for the DuckDB in use."""
    mod = importlib.import_module(f"duckdb_extension_{name}")
    found = sorted(Path(mod.__file__ or "").parent.glob(f"extensions/v{duckdb.__version__}/{name}.duckdb_extension"))
    if not found:
        raise WarehouseConfigError(
            f"duckdb-extension-{name.replace('_', '-')} has no build for DuckDB {duckdb.__version__}"
        )
    return str(found[0])


def open_file(path: Path, read_only: bool, lock_wait_s: float) -> duckdb.DuckDBPyConnection:
    """A connection to a DuckDB file. A file another process holds (an analyst's session) is waited
    for with backoff up to lock_wait_s, then WarehouseLocked."""
    deadline = time.monotonic() + lock_wait_s
    delay = 0.05
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as exc:
            if "not a valid DuckDB database" in str(exc):  # the setting names something else: say which
                raise WarehouseConfigError(f"{path}: not a DuckDB database file (the warehouse must be one)") from None
            if "lock" not in str(exc).lower():
                raise
            if time.monotonic() >= deadline:
                raise WarehouseLocked(f"{path}: still locked by another process after {lock_wait_s:.0f}s") from None
        time.sleep(delay * (1 + random.random()))
        delay = min(delay * 2, 1.0)


def open_lake(lake: Lake, read_only: bool) -> duckdb.DuckDBPyConnection:
    """A connection with the lake attached as `warehouse` and in use; a writer's inlines small inserts."""
    con = duckdb.connect()
    try:
        con.execute(f"LOAD '{_extension('postgres_scanner')}'")
        con.execute(f"LOAD '{_extension('ducklake')}'")
        if not read_only:
            Path(lake.data_path).mkdir(parents=True, exist_ok=True)
        opts = f"DATA_PATH '{lake.data_path}', " + (
            "READ_ONLY" if read_only else f"DATA_INLINING_ROW_LIMIT {LAKE_INLINE_ROWS}"
        )
        retry(lambda: con.execute(f"ATTACH 'ducklake:postgres:{lake.dsn}' AS warehouse ({opts})"))
        con.execute("USE warehouse")
    except Exception:
        con.close()
        raise
    return con


def no_lake_yet(exc: Exception) -> bool:
    """The lake's catalog has not been created (nothing was ever written)."""
    return "does not exist" in str(exc)


# One writer at a time inside this process (a backfill diagnoses on several threads): DuckDB's
# optimistic concurrency would abort one of two transactions replacing rows of the same tables.
WRITE_LOCK = threading.Lock()
# this process's attached connection to each lake it writes, used under WRITE_LOCK (write_kept_lake)
_LAKE_WRITERS: dict[str, duckdb.DuckDBPyConnection] = {}


def _drop_lake_writer(url: str) -> None:
    con = _LAKE_WRITERS.pop(url, None)
    if con is not None:
        try:
            con.close()
        except duckdb.Error:
            pass


def _close_lake_writers() -> None:
    # at exit: a daemon thread stopped mid-write may hold the lock; its connection is then left to the OS
    if WRITE_LOCK.acquire(timeout=5):
        try:
            for url in list(_LAKE_WRITERS):
                _drop_lake_writer(url)
        finally:
            WRITE_LOCK.release()


atexit.register(_close_lake_writers)


def write_kept_lake(
    url: str,
    open_writer: Callable[[], duckdb.DuckDBPyConnection],
    write: Callable[[duckdb.DuckDBPyConnection], None],
) -> None:
    """Run one write transaction on this process's kept connection to the lake at `url` (the caller
    holds WRITE_LOCK). The connection is kept between writes: loading the extensions and attaching
    the catalog cost a worker ~0.5 CPU-seconds per attempt, more than the write (~0.2 s). Each write
    is its own transaction, which reads the catalog's latest snapshot, so a kept connection sees
    every other writer's commits. A kept connection that fails (the catalog's server restarted) is
    dropped and the write tried once more on a new one from `open_writer`. (A DuckDB file is opened
    per write: held open it would lock out every other process, an analyst's included.)"""
    kept = _LAKE_WRITERS.get(url)
    if kept is not None:
        try:
            retry(lambda: write(kept))
            return
        except duckdb.Error as exc:
            _drop_lake_writer(url)
            if is_conflict(exc):
                raise
    con = open_writer()
    try:
        retry(lambda: write(con))
    except BaseException:
        con.close()
        raise
    _LAKE_WRITERS[url] = con
