"""The warehouse holding every diagnosis, for fleet-wide SQL: `Warehouse`, the one object the rest
of the project uses, over the modules that each do one part of it:

- backends.py: the warehouse setting -> a connection (a DuckDB file, or DuckLake on PostgreSQL),
  the lock wait on a file, the process's kept lake writer connections;
- conflicts.py: a transaction that lost a race with another writer, retried;
- schema.py: migrations and the analyst views, applied on a writer's open;
- writer.py: one diagnosis (delete-then-insert of the attempt's rows) and topology rows;
- actions.py: the action sinks' decisions (the `actions` table), decided, finished and read;
- maintenance.py: a lake's files compacted and its history expired; a file checkpointed.

Reads go through a sandboxed read-only connection (`reader`); the service's reads are reads.py.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from workload_attribution.contracts.actions import ActionHistory, ActionRecord
from workload_attribution.contracts.errors import BadInput, NotStored, first_line
from workload_attribution.contracts.models import Diagnosis, SubjectHistory
from workload_attribution.staging.database import scalar
from workload_attribution.warehouse import actions as action_table
from workload_attribution.warehouse.backends import (
    _LAKE_WRITERS,
    LOCK_WAIT_S,
    WRITE_LOCK,
    Lake,
    WarehouseConfigError,
    WarehouseLocked,
    _drop_lake_writer,
    close_file,
    no_lake_yet,
    open_file,
    open_lake,
    parse_lake,
    write_kept_lake,
)
from workload_attribution.warehouse.conflicts import is_conflict, retry
from workload_attribution.warehouse.maintenance import LAKE_SNAPSHOTS_KEPT, checkpoint_file, maintain_lake
from workload_attribution.warehouse.memory import Blame, recall
from workload_attribution.warehouse.schema import WarehouseTooNew, migrate, views
from workload_attribution.warehouse.templates import AttemptTemplates, has_table
from workload_attribution.warehouse.turns import turn
from workload_attribution.warehouse.writer import insert_topology, write_diagnosis

log = logging.getLogger("attribution.warehouse")

# the names callers and tests import from here (the kept lake writers: test_lake looks at them)
_conflict = is_conflict
__all__ = [
    "_LAKE_WRITERS",
    "Lake",
    "Warehouse",
    "WarehouseConfigError",
    "WarehouseLocked",
    "WarehouseTooNew",
    "_conflict",
    "_drop_lake_writer",
    "parse_lake",
    "views",
]

T = TypeVar("T")


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
        self._in_session = False  # inside session(): writers' connections share one (_held)
        self._held: duckdb.DuckDBPyConnection | None = None

    def __str__(self) -> str:
        return self.url.split("?")[0] if self.lake else str(self.path)

    def exists(self) -> bool:
        """Whether there is anything to read yet (a lake: whether its catalog has been created)."""
        if not self.lake:
            return self.path.exists()
        try:
            open_lake(self.lake, read_only=True).close()
        except duckdb.InvalidInputException as exc:
            if no_lake_yet(exc):
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
            if self.lake and no_lake_yet(exc):
                return []
            raise

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        if self._in_session and not read_only:  # a cursor of the session's one connection
            if self._held is None:
                self._held = self._open(read_only=False)
            con = self._held.cursor()
            con.execute(f"USE {scalar(self._held, 'SELECT current_database()')}")  # a cursor starts in the host's own
            try:
                yield con
            finally:
                con.close()
            return
        con = self._open(read_only)
        try:
            yield con
        finally:
            self._close(con, read_only)

    @contextmanager
    def session(self) -> Iterator[None]:
        """A diagnosis's publishing (its fleet memory read, its known templates read, its write) on
        one connection to a warehouse file: opened by the first writer's connect inside the `with`,
        each connect after it a cursor of it, closed once at the end. Each step opened the file,
        brought its schema up to date and closed it, checkpointing: ~15 ms an open, a checkpoint
        at each close. Other processes wait for the file from the first step to the last (the
        evidence archived between them included) where they waited for each step. A lake's
        writers keep their own connection (backends.write_kept_lake)."""
        if self.lake is not None or self._in_session:
            yield
            return
        self._in_session = True
        try:
            yield
        except BaseException:
            self._release(quietly=True)
            raise
        else:
            self._release(quietly=False)
        finally:
            self._in_session = False

    def _release(self, quietly: bool) -> None:
        """The session's connection closed (its checkpoint made); a failure said as NotStored, or
        only logged when the session already failed (that failure is the one told)."""
        held, self._held = self._held, None
        if held is None:
            return
        try:
            self._close(held, read_only=False)
        except (duckdb.Error, OSError) as exc:
            if not quietly:
                raise NotStored(f"{self}: the diagnosis could not be written: {first_line(exc)}") from exc
            log.warning("%s: closing the warehouse: %s", self, first_line(exc))

    def _close(self, con: duckdb.DuckDBPyConnection, read_only: bool) -> None:
        """A file's connection closed as backends.close_file says (a writer's last detaches the
        file, checkpointing it at this process's first close of it, then only once its write-ahead
        log is large); a lake's simply closed."""
        if self.lake is not None:
            con.close()
        else:
            close_file(con, self.path, read_only)

    def _open(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        """A connection to the warehouse; a writer's with the schema migrated to this version."""
        if self.lake is None:  # a file's schema is checked once each time this process attaches it
            return open_file(self.path, read_only, self.lock_wait_s, prepare=None if read_only else self._migrate)
        con = open_lake(self.lake, read_only)
        if not read_only:
            try:
                self._migrate(con)
            except BaseException:
                self._close(con, read_only=False)
                raise
        return con

    def _migrate(self, con: duckdb.DuckDBPyConnection) -> None:
        retry(lambda: migrate(con, lake=self.lake is not None, name=str(self)))

    @contextmanager
    def reader(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection that can reach nothing but the warehouse: no file reads or
        writes (read_csv, COPY, EXPORT), no ATTACH, no INSTALL/LOAD, and settings locked, so an
        analyst's query or a request's filter cannot turn into access to the machine."""
        with self.connect(read_only=True) as con:
            # an analyst's query over the fleet's diagnoses gets every core (a file opens on one:
            # staging/database.ONE_THREAD)
            con.execute(f"SET threads = {os.cpu_count() or 1}")
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

    def get(self, cluster: str, scheduler: str, job_id: str, attempt: int) -> dict | None:
        with self.reader() as con:
            r = con.execute(
                "SELECT diagnosis FROM diagnoses WHERE cluster=? AND scheduler=? AND job_id=? AND attempt=?",
                [cluster, scheduler, job_id, attempt],
            ).fetchone()
        return json.loads(r[0]) if r else None

    def write(
        self, d: Diagnosis, topology: list[tuple] | None = None, templates: AttemptTemplates | None = None
    ) -> bool:
        """Replace this attempt's diagnosis (and its parts) in one transaction, unless the stored
        one outranks it (a newer rules pack's: warehouse/precedence.py; then False, nothing
        written); `topology` (switch, port, peer, peer_kind, hca) rows seen with the attempt are
        recorded as of its start; `templates` are its log templates (warehouse/templates.py). A
        lake is written through this process's kept connection to it (backends.write_kept_lake), in
        the attempt's turn (warehouse/turns.py)."""

        def in_turn(con: duckdb.DuckDBPyConnection) -> bool:
            with turn(con, d.attempt.id.key, self.lock_wait_s):
                return retry(lambda: write_diagnosis(con, d, topology, templates))

        try:
            with WRITE_LOCK:
                if self.lake is None:
                    with self.connect() as con:
                        written = retry(lambda: write_diagnosis(con, d, topology, templates))
                else:
                    written = write_kept_lake(self.url, lambda: self._open(read_only=False), in_turn)
        except (duckdb.Error, OSError) as exc:
            raise NotStored(f"{self}: the diagnosis could not be written: {first_line(exc)}", d) from exc
        except NotStored as exc:  # the file locked, the attempt's turn not taken: the diagnosis goes with it
            exc.diagnosis = exc.diagnosis or d
            raise
        if not written:
            log.info("%s: kept the stored diagnosis of %s (it outranks this one)", self, d.attempt.id.key)
        return written

    def recall(self, d: Diagnosis, subjects: list[Blame], listed: int) -> list[SubjectHistory]:
        """Fleet memory of a diagnosis's subjects (warehouse/memory.py), read on a writer's
        connection (so the schema is this code's, and a lake's kept connection serves it)."""
        if not subjects:
            return []
        found: list[list[SubjectHistory]] = []
        try:
            with WRITE_LOCK:
                if self.lake is None:
                    with self.connect() as con:
                        return recall(con, d, subjects, listed)
                write_kept_lake(
                    self.url,
                    lambda: self._open(read_only=False),
                    lambda con: found.append(recall(con, d, subjects, listed)),
                )
        except (duckdb.Error, OSError) as exc:
            raise NotStored(f"{self}: fleet memory could not be read: {first_line(exc)}", d) from exc
        return found[-1]

    def on_writer(self, work: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """A read on a writer's connection (the schema brought to this code's version first; a
        lake's kept connection serves it), as fleet memory's recall reads."""
        return self._transaction(work)

    def read_templates(self, work: Callable[[duckdb.DuckDBPyConnection], T], absent: T) -> T:
        """A read of attempt_templates on a read-only connection; `absent` while the warehouse has
        no such table (nothing written yet, or by an older version of this code)."""
        if not self.lake and not self.path.exists():
            return absent
        if self._held is not None:  # the session's connection (a read-only one cannot open beside it)
            with self.connect() as con:
                return work(con) if has_table(con) else absent
        try:
            with self.reader() as con:
                return work(con) if has_table(con) else absent
        except duckdb.InvalidInputException as exc:
            if self.lake and no_lake_yet(exc):
                return absent
            raise

    def load_topology(self, cluster: str, rows: list[tuple], valid_from: datetime, source: str) -> int:
        """Record a topology snapshot (e.g. `attribution topology load`); returns the links added."""
        with WRITE_LOCK, self.connect() as con:
            return retry(lambda: insert_topology(con, cluster, rows, valid_from, source))

    def maintain(self, snapshots_kept: timedelta = LAKE_SNAPSHOTS_KEPT) -> dict[str, Any]:
        """Keep the warehouse fast to read (warehouse/maintenance.py); what was done, counted."""
        if self.lake is None and not self.path.exists():
            return {"backend": "duckdb", "skipped": "no warehouse file yet"}
        now = datetime.now(timezone.utc)
        with WRITE_LOCK, self.connect() as con:
            return (
                checkpoint_file(con) if self.lake is None else maintain_lake(con, now, snapshots_kept, self.lock_wait_s)
            )

    def _transaction(self, work: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """One write transaction's work, under the write lock, retried when it lost a race; a lake's
        through this process's kept connection (backends.write_kept_lake)."""
        result: list[T] = []

        def run(con: duckdb.DuckDBPyConnection) -> None:
            result[:] = [work(con)]

        with WRITE_LOCK:
            if self.lake is None:
                with self.connect() as con:
                    retry(lambda: run(con))
            else:
                write_kept_lake(self.url, lambda: self._open(read_only=False), lambda con: retry(lambda: run(con)))
        return result[0]

    def decide_actions(
        self,
        cluster: str,
        diagnosis_id: str,
        dry_run: bool,
        since: datetime,
        plan: Callable[[ActionHistory], list[ActionRecord]],
    ) -> list[ActionRecord]:
        """The cluster's action history read, `plan` made from it and recorded, in one transaction
        (warehouse/actions.py): the decisions recorded."""
        return self._transaction(lambda con: action_table.decide(con, cluster, diagnosis_id, dry_run, since, plan))

    def finish_actions(self, records: list[ActionRecord]) -> None:
        """The outcome of decided actions, once their sinks answered."""
        if records:
            self._transaction(lambda con: action_table.finish(con, records))

    def record_actions(self, records: list[ActionRecord]) -> list[ActionRecord]:
        """Actions decided outside the guard (an undo's reversals), recorded in the order given."""
        records = action_table.numbered(records)
        if records:
            self._transaction(lambda con: action_table.insert_actions(con, records))
        return records

    def actions(
        self,
        cluster: str | None = None,
        diagnosis_id: str | None = None,
        since: datetime | None = None,
        in_force: bool = False,
        limit: int | None = None,
    ) -> list[ActionRecord]:
        """Recorded actions, oldest first: of a cluster, of a diagnosis, decided since, in force only."""
        if not self.lake and not self.path.exists():
            return []
        with self.reader() as con:
            if not scalar(con, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'actions'"):
                return []  # a warehouse no writer of this version has opened yet
            return action_table.select(con, cluster, diagnosis_id, since, in_force, limit)
