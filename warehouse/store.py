"""The warehouse holding every diagnosis, for fleet-wide SQL. Two backends, one schema, one SQL:

- a DuckDB file (the default: `warehouse: /path/warehouse.duckdb`). DuckDB allows one writing
  process per file: a writer that finds the file locked retries with backoff up to a bound, then
  fails loudly (the attempt stays undiagnosed for the next run).
- DuckLake with a PostgreSQL catalog and a shared data path, for many writers on many hosts
  (`warehouse: ducklake+postgres://user@host:5432/dbname?data_path=/shared/lake/`, the password
  in PGPASSWORD or ~/.pgpass as libpq reads them). DuckLake commits optimistically: a writer whose
  transaction conflicts with another's retries it. DuckLake has no PRIMARY KEY/UNIQUE constraints,
  so the key (cluster, scheduler, job_id, attempt) is kept by the writer's delete-then-insert
  transaction, the same in both backends. The ducklake and postgres_scanner extensions come from
  PyPI (duckdb-extension-ducklake / -postgres-scanner, built for the pinned DuckDB) and are loaded
  from their files: nothing is downloaded at run time.

Schema files in warehouse/schema/NNN_*.sql are applied in order on open and recorded in
schema_version; a file newer than this code is refused, never silently downgraded.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import duckdb

from workload_attribution.contracts.errors import BadInput, NotStored, first_line
from workload_attribution.contracts.models import Diagnosis
from workload_attribution.staging.database import scalar

SCHEMA_DIR = Path(__file__).resolve().parent / "schema"
VIEWS_DIR = Path(__file__).resolve().parent / "views"


def views() -> dict[str, str]:
    """View name -> what it answers (the first comment line of its SQL file)."""
    out = {}
    for f in sorted(VIEWS_DIR.glob("*.sql")):
        first = f.read_text().splitlines()[0].lstrip("- ")
        out[f.stem] = first.split(":", 1)[1].strip() if ":" in first else first
    return out


LOCK_WAIT_S = 60.0
# A lake writer's inserts of at most this many rows into a table go to the catalog (DuckLake's data
# inlining) rather than to a new Parquet file each: one diagnosis writes a few to a few hundred rows
# per table, so without it every attempt left two small files (symptoms, evidence) and a fleet's
# lake grew by thousands an hour. Warehouse.maintain moves inlined rows into Parquet files.
LAKE_INLINE_ROWS = 10_000
# What a maintenance run leaves of a lake's history: snapshots (time travel) this recent, and files
# no snapshot needs any more, once they have been unneeded this long (a reader may still scan them).
LAKE_SNAPSHOTS_KEPT = timedelta(days=7)
LAKE_FILES_GRACE = timedelta(hours=1)


# One writer at a time inside this process (a backfill diagnoses on several threads): DuckDB's
# optimistic concurrency would abort one of two transactions replacing rows of the same tables.
_WRITE_LOCK = threading.Lock()
# this process's attached connection to each lake it writes, used under _WRITE_LOCK (Warehouse._write_lake)
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
    if _WRITE_LOCK.acquire(timeout=5):
        try:
            for url in list(_LAKE_WRITERS):
                _drop_lake_writer(url)
        finally:
            _WRITE_LOCK.release()


atexit.register(_close_lake_writers)


class WarehouseLocked(NotStored):
    """Another process holds the warehouse file past the lock wait."""


class WarehouseTooNew(BadInput):
    """The warehouse was written by a newer version of this project."""


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
    import importlib

    mod = importlib.import_module(f"duckdb_extension_{name}")
    found = sorted(Path(mod.__file__ or "").parent.glob(f"extensions/v{duckdb.__version__}/{name}.duckdb_extension"))
    if not found:
        raise WarehouseConfigError(
            f"duckdb-extension-{name.replace('_', '-')} has no build for DuckDB {duckdb.__version__}"
        )
    return str(found[0])


# table constraints ", PRIMARY KEY (a, b)" and column constraints "a VARCHAR PRIMARY KEY,"
_NO_CONSTRAINTS = re.compile(r",\s*PRIMARY KEY\s*\([^)]*\)|\s+PRIMARY KEY(?=\s*[,)])", re.I)


# What the catalog's PostgreSQL says when two transactions touched the same rows (SQLSTATE 40001,
# 40P01): retrying is what it asks for. DuckLake passes it on as a plain Error (seen when a nightly
# maintenance moved inlined rows out while a worker deleted some of them).
_CATALOG_RETRY = ("could not serialize access", "deadlock detected")


def _conflict(exc: Exception) -> bool:
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


def _no_lake_yet(exc: Exception) -> bool:
    return "does not exist" in str(exc)


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Undo what is undoable; a transaction the failure already ended (a full disk) is no news: the
    caller raises the failure itself, not "cannot rollback"."""
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass


def views_digest() -> str:
    return hashlib.sha256(b"".join(f.read_bytes() for f in sorted(VIEWS_DIR.glob("*.sql")))).hexdigest()[:16]


def migrations() -> list[tuple[int, Path]]:
    return sorted((int(p.name.split("_")[0]), p) for p in SCHEMA_DIR.glob("[0-9][0-9][0-9]_*.sql"))


class Warehouse:
    def __init__(self, path: str | Path, lock_wait_s: float | None = None):
        self.url = str(path)
        self.lake = parse_lake(self.url)
        self.path = Path(path)  # the DuckDB file (unused for a lake)
        # how long a writer waits for a lock held by someone else (an analyst's session) before failing
        self.lock_wait_s = (
            lock_wait_s
            if lock_wait_s is not None
            else float(os.environ.get("ATTRIBUTION_WAREHOUSE_LOCK_WAIT_S", LOCK_WAIT_S))
        )

    def __str__(self) -> str:
        return self.url.split("?")[0] if self.lake else str(self.path)

    def exists(self) -> bool:
        """Whether there is anything to read yet (a lake: whether its catalog has been created)."""
        if not self.lake:
            return self.path.exists()
        try:
            self._open_lake(read_only=True).close()
        except duckdb.InvalidInputException as exc:
            if _no_lake_yet(exc):
                return False
            raise
        return True

    def rows(self, sql: str, args: list | dict | None = None) -> list[tuple]:
        """A read-only query's rows; none while nothing has been written (no file, no lake yet).
        One connection: readers that only need rows need not ask exists() first."""
        if not self.lake and not self.path.exists():
            return []
        try:
            with self.reader() as con:
                try:
                    return con.execute(sql, args or []).fetchall()
                except duckdb.CatalogException:
                    if not self.lake and not scalar(
                        con, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'schema_version'"
                    ):
                        return []  # a file no writer has initialised yet (created empty by someone else)
                    raise
        except duckdb.InvalidInputException as exc:
            if self.lake and _no_lake_yet(exc):
                return []
            raise

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        con = self._open(read_only)
        try:
            yield con
        finally:
            con.close()

    def _open(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        """A connection to the warehouse; a writer's with the schema migrated to this version."""
        con = self._open_lake(read_only) if self.lake else self._open_file(read_only)
        if not read_only:
            try:
                self._retry(lambda: self._migrate(con))
            except BaseException:
                con.close()
                raise
        return con

    @contextmanager
    def reader(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection that can reach nothing but the warehouse: no file reads or
        writes (read_csv, COPY, EXPORT), no ATTACH, no INSTALL/LOAD, and settings locked, so an
        analyst's query or a request's filter cannot turn into access to the machine."""
        with self.connect(read_only=True) as con:
            if self.lake is not None:  # DuckLake reads its own Parquet files: only the lake's directory stays reachable
                con.execute("SET allowed_directories = [?]", [self.lake.data_path])
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            yield con

    @contextmanager
    def stream(
        self, sql: str, args: list | dict | None = None, batch_rows: int = 4096
    ) -> Iterator[tuple[list[str], Iterator[list[tuple]]]]:
        """One read-only SELECT, sandboxed (see reader), as its column names and batches of rows:
        memory stays bounded whatever the result's size. Anything but a single SELECT is refused."""
        with self.reader() as con:
            try:
                statements = con.extract_statements(sql)
            except duckdb.Error as exc:
                raise BadInput(f"query: {first_line(exc)}") from None
            if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
                raise BadInput("query: only one read-only SELECT (or WITH ... SELECT) is allowed")
            try:
                cur = con.execute(sql, args or [])
            except duckdb.Error as exc:
                raise BadInput(f"query failed: {first_line(exc)}") from None
            cols = [d[0] for d in cur.description]

            def batches() -> Iterator[list[tuple]]:
                while True:
                    rows = cur.fetchmany(batch_rows)
                    if not rows:
                        return
                    yield rows

            yield cols, batches()

    def query(self, name_or_sql: str) -> tuple[list[str], list[tuple]]:
        """A named view (SELECT * FROM it) or one read-only SELECT, every row (see `stream` for large results)."""
        sql = f'SELECT * FROM "{name_or_sql}"' if name_or_sql in views() else name_or_sql
        with self.stream(sql) as (cols, batches):
            return cols, [r for batch in batches for r in batch]

    def _open_file(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + self.lock_wait_s
        delay = 0.05
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                return duckdb.connect(str(self.path), read_only=read_only)
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() >= deadline:
                    if "lock" in str(exc).lower():
                        raise WarehouseLocked(
                            f"{self.path}: still locked by another process after {self.lock_wait_s:.0f}s"
                        ) from None
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 1.0)

    def _open_lake(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        lake = self.lake
        assert lake is not None
        con = duckdb.connect()
        try:
            con.execute(f"LOAD '{_extension('postgres_scanner')}'")
            con.execute(f"LOAD '{_extension('ducklake')}'")
            if not read_only:
                Path(lake.data_path).mkdir(parents=True, exist_ok=True)
            opts = f"DATA_PATH '{lake.data_path}', " + (
                "READ_ONLY" if read_only else f"DATA_INLINING_ROW_LIMIT {LAKE_INLINE_ROWS}"
            )
            self._retry(lambda: con.execute(f"ATTACH 'ducklake:postgres:{lake.dsn}' AS warehouse ({opts})"))
            con.execute("USE warehouse")
        except Exception:
            con.close()
            raise
        return con

    def _retry(self, fn, attempts: int = 12, retryable: Callable[[Exception], bool] = _conflict):
        """Run fn, retrying a transaction another writer's commit made conflict (DuckLake)."""
        for i in range(attempts):
            try:
                return fn()
            except duckdb.Error as exc:
                if not retryable(exc) or i == attempts - 1:
                    raise
                time.sleep(min(2.0, 0.05 * 2**i) * (1 + random.random()))

    def _ddl(self, sql: str) -> str:
        return _NO_CONSTRAINTS.sub("", sql) if self.lake else sql

    def _migrate(self, con: duckdb.DuckDBPyConnection) -> None:
        con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER, applied_at TIMESTAMPTZ DEFAULT now())")
        current = scalar(con, "SELECT coalesce(max(version), 0) FROM schema_version")
        known = migrations()
        newest = known[-1][0] if known else 0
        if current > newest:
            raise WarehouseTooNew(f"{self}: schema version {current} is newer than this code ({newest})")
        for version, path in known:
            if version > current:
                con.execute("BEGIN TRANSACTION")
                try:
                    if scalar(con, "SELECT coalesce(max(version), 0) FROM schema_version") < version:
                        con.execute(self._ddl(path.read_text()))
                        con.execute("INSERT INTO schema_version (version) VALUES (?)", [version])
                    con.execute("COMMIT")
                except Exception:
                    _rollback(con)
                    raise
        # analyst views follow the code: replaced when their files changed (one catalog change, not
        # one per write: concurrent writers would conflict on it); a view built on another is
        # retried after the others, so files need no ordering
        digest = views_digest()
        have = con.execute("SELECT value FROM warehouse_meta WHERE key = 'views'").fetchone()
        if have and have[0] == digest:
            return
        con.execute("BEGIN TRANSACTION")
        try:
            pending = sorted(VIEWS_DIR.glob("*.sql"))
            while pending:
                failed = []
                for f in pending:
                    try:
                        con.execute(f.read_text())
                    except duckdb.CatalogException:
                        failed.append(f)
                if len(failed) == len(pending):
                    con.execute(failed[0].read_text())  # no progress: raise the real error
                pending = failed
            con.execute("DELETE FROM warehouse_meta WHERE key = 'views'")
            con.execute("INSERT INTO warehouse_meta VALUES ('views', ?)", [digest])
            con.execute("COMMIT")
        except Exception:
            _rollback(con)
            raise

    def maintain(self, snapshots_kept: timedelta = LAKE_SNAPSHOTS_KEPT) -> dict[str, Any]:
        """Keep a lake fast to read (the nightly backfill runs this after its attempts): rows
        writers left in the catalog go to Parquet files, files with deleted rows are rewritten and
        adjacent small files merged, snapshots older than `snapshots_kept` expire, and files no
        snapshot needs are deleted after LAKE_FILES_GRACE (DuckLake's maintenance functions). Returns
        what was done, counted. A DuckDB file is checkpointed (its write-ahead log folded in)."""
        if self.lake is None:
            if not self.path.exists():
                return {"backend": "duckdb", "skipped": "no warehouse file yet"}
            with _WRITE_LOCK, self.connect() as con:
                self._retry(lambda: con.execute("CHECKPOINT"))
            return {"backend": "duckdb", "checkpointed": True}
        now = datetime.now(timezone.utc)
        with _WRITE_LOCK, self.connect() as con:

            def step(call: str, params: dict | None = None) -> list[tuple]:
                # Each step is idempotent (what is left to move, merge or expire is moved, merged,
                # expired), so one that lost a race with a writer is run again. DuckLake words some
                # such failures only as "fetch from an unsuccessful query result" (seen when three
                # processes maintained one lake while writing it): retried too, after a rollback.
                def run() -> list[tuple]:
                    try:
                        return con.execute(f"CALL {call}", params).fetchall()
                    except duckdb.Error:
                        _rollback(con)
                        raise

                return self._retry(run, retryable=lambda e: _conflict(e) or "unsuccessful query result" in str(e))

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

    def write(self, d: Diagnosis, topology: list[tuple] | None = None) -> None:
        """Replace this attempt's diagnosis (and its parts) in one transaction; `topology` (switch,
        port, peer, peer_kind, hca) rows seen with the attempt are recorded as of its start."""
        try:
            with _WRITE_LOCK:
                if self.lake is None:
                    with self.connect() as con:
                        self._retry(lambda: self._write(con, d, topology))
                else:
                    self._write_lake(d, topology)
        except (duckdb.Error, OSError) as exc:
            raise NotStored(f"{self}: the diagnosis could not be written: {first_line(exc)}", d) from exc

    def _write_lake(self, d: Diagnosis, topology: list[tuple] | None) -> None:
        """A lake is written through this process's one attached connection to it, kept between
        writes: loading the extensions and attaching the catalog cost a worker ~0.5 CPU-seconds per
        attempt, more than the write (~0.2 s). Each write is its own transaction, which reads the
        catalog's latest snapshot, so a kept connection sees every other writer's commits. A kept
        connection that fails (the catalog's server restarted) is dropped and the write tried once
        more on a new one. (A DuckDB file is opened per write: held open it would lock out every
        other process, an analyst's included.)"""
        kept = _LAKE_WRITERS.get(self.url)
        if kept is not None:
            try:
                self._retry(lambda: self._write(kept, d, topology))
                return
            except duckdb.Error as exc:
                _drop_lake_writer(self.url)
                if _conflict(exc):
                    raise
        con = self._open(read_only=False)
        try:
            self._retry(lambda: self._write(con, d, topology))
        except BaseException:
            con.close()
            raise
        _LAKE_WRITERS[self.url] = con

    def _write(self, con: duckdb.DuckDBPyConnection, d: Diagnosis, topology: list[tuple] | None) -> None:
        a = d.attempt
        key = [a.cluster, a.scheduler, a.job_id, a.attempt]
        rc = d.root_cause
        con.execute("BEGIN TRANSACTION")
        try:
            old = [
                r[0]
                for r in con.execute(
                    "SELECT diagnosis_id FROM diagnoses WHERE cluster=? AND scheduler=? AND job_id=? AND attempt=?", key
                ).fetchall()
            ]
            for table in (
                "diagnosis_symptoms",
                "diagnosis_affected_nodes",
                "diagnosis_affected_components",
                "diagnosis_coverage",
                "diagnosis_evidence",
            ):
                con.execute(
                    f"DELETE FROM {table} WHERE diagnosis_id IN (SELECT unnest($ids))", {"ids": old + [d.diagnosis_id]}
                )
            con.execute("DELETE FROM diagnoses WHERE cluster=? AND scheduler=? AND job_id=? AND attempt=?", key)
            con.execute(
                f"INSERT INTO diagnoses VALUES ({', '.join('?' * 25)})",
                [
                    *key,
                    d.diagnosis_id,
                    a.name,
                    a.user,
                    a.state,
                    a.exit_code,
                    a.start,
                    a.end,
                    a.nodes,
                    d.terminal_state,
                    d.sub_domain,
                    d.confidence,
                    rc.symptom if rc else None,
                    rc.node if rc else None,
                    rc.component if rc else None,
                    rc.first_seen if rc else None,
                    d.recommended_action,
                    d.explanation,
                    d.rules.version,
                    len(d.rules.failed),
                    d.created_at,
                    d.model_dump_json(),
                ],
            )
            doc = json.loads(d.model_dump_json())
            con.execute(
                """
                INSERT INTO diagnosis_symptoms
                SELECT $id, s.symptom, s.role, s.node, s.rank, s.component, s.first_seen::TIMESTAMPTZ,
                       s.last_seen::TIMESTAMPTZ, s.count, s.demoted_by, s.interesting, s.rule
                FROM (SELECT unnest(from_json($doc::JSON -> 'symptoms',
                    '[{"symptom":"VARCHAR","role":"VARCHAR","node":"VARCHAR","rank":"INTEGER","component":"VARCHAR",
                       "first_seen":"VARCHAR","last_seen":"VARCHAR","count":"INTEGER","demoted_by":"VARCHAR",
                       "interesting":"BOOLEAN","rule":"VARCHAR"}]'), recursive := true)) s
            """,
                {"id": d.diagnosis_id, "doc": json.dumps(doc)},
            )
            if d.affected_nodes:
                con.execute(
                    "INSERT INTO diagnosis_affected_nodes SELECT $id, unnest($n)",
                    {"id": d.diagnosis_id, "n": d.affected_nodes},
                )
            if d.affected_components:
                con.execute(
                    "INSERT INTO diagnosis_affected_components SELECT $id, unnest($c)",
                    {"id": d.diagnosis_id, "c": d.affected_components},
                )
            con.execute(
                """UPDATE rules_versions SET first_used = least(first_used, $t), last_used = greatest(last_used, $t)
                           WHERE version = $v""",
                {"v": d.rules.version, "t": d.created_at},
            )
            con.execute(
                """INSERT INTO rules_versions SELECT $v, $t, $t
                           WHERE NOT EXISTS (SELECT 1 FROM rules_versions WHERE version = $v)""",
                {"v": d.rules.version, "t": d.created_at},
            )
            if topology:
                self._insert_topology(con, a.cluster, topology, a.start, f"bundle {a.job_id}")
            con.execute(
                """
                INSERT INTO diagnosis_coverage
                SELECT $id, c.source, c.connector, c.status, c.observations, c.unparsed, c.error, c.duration_ms
                FROM (SELECT unnest(from_json($doc::JSON -> 'coverage',
                    '[{"source":"VARCHAR","connector":"VARCHAR","status":"VARCHAR","observations":"BIGINT",
                       "unparsed":"BIGINT","error":"VARCHAR","duration_ms":"BIGINT"}]'), recursive := true)) c
            """,
                {"id": d.diagnosis_id, "doc": json.dumps(doc)},
            )
            con.execute(
                """
                INSERT INTO diagnosis_evidence
                SELECT $id, e.id, e.source, e.node, e.time::TIMESTAMPTZ, e.ref, e.text
                FROM (SELECT unnest(from_json($doc::JSON -> 'evidence',
                    '[{"id":"VARCHAR","source":"VARCHAR","node":"VARCHAR","time":"VARCHAR","ref":"VARCHAR",
                       "text":"VARCHAR"}]'), recursive := true)) e
            """,
                {"id": d.diagnosis_id, "doc": json.dumps(doc)},
            )
            con.execute("COMMIT")
        except Exception:
            _rollback(con)
            raise

    @staticmethod
    def _insert_topology(con, cluster: str, rows: list[tuple], valid_from, source: str) -> int:
        before = scalar(con, "SELECT count(*) FROM topology_links")
        con.execute(
            """
            INSERT INTO topology_links
            SELECT $cluster, n.s, n.p, n.peer, n.k, n.h, $t, $src
            FROM (SELECT DISTINCT ON (s, p) unnest($s) AS s, unnest($p) AS p, unnest($peer) AS peer, unnest($k) AS k,
                         unnest($h) AS h) n
            WHERE NOT EXISTS (SELECT 1 FROM topology_links o WHERE o.cluster = $cluster AND o.switch = n.s
                              AND o.port = n.p AND o.valid_from = $t)
        """,
            {
                "cluster": cluster,
                "s": [r[0] for r in rows],
                "p": [str(r[1]) for r in rows],
                "peer": [r[2] for r in rows],
                "k": [r[3] for r in rows],
                "h": [r[4] for r in rows],
                "t": valid_from,
                "src": source,
            },
        )
        return scalar(con, "SELECT count(*) FROM topology_links") - before

    def load_topology(self, cluster: str, rows: list[tuple], valid_from, source: str) -> int:
        """Record a topology snapshot (e.g. `attribution topology load`); returns the links added."""
        with _WRITE_LOCK, self.connect() as con:
            return self._retry(lambda: self._insert_topology(con, cluster, rows, valid_from, source))

    def get(self, cluster: str, scheduler: str, job_id: str, attempt: int) -> dict | None:
        with self.reader() as con:
            r = con.execute(
                "SELECT diagnosis FROM diagnoses WHERE cluster=? AND scheduler=? AND job_id=? AND attempt=?",
                [cluster, scheduler, job_id, attempt],
            ).fetchone()
        return json.loads(r[0]) if r else None
