"""The warehouse setting -> a connection. Two backends, one schema, one SQL:

- a DuckDB file (the default: `warehouse: /path/warehouse.duckdb`). DuckDB allows one writing
  process per file: a writer that finds the file locked retries with backoff up to a bound, then
  fails loudly (the attempt stays undiagnosed for the next run).
- DuckLake with a PostgreSQL catalog and a shared data path, for many writers on many hosts
  (`warehouse: ducklake+postgres://user@host:5432/dbname?data_path=/shared/lake/`, the password
  in PGPASSWORD or ~/.pgpass as libpq reads them); the data path may be a bucket
  (`data_path=s3://bucket/prefix/`, credentials from the AWS variables: warehouse/object_store.py).
  DuckLake commits optimistically: a writer whose transaction conflicts with another's retries it
  (warehouse/conflicts.py), and writers of one attempt take turns (warehouse/turns.py). The
  ducklake, postgres_scanner and httpfs extensions come from PyPI (duckdb-extension-*, built for
  the pinned DuckDB) and are loaded from their files: nothing is downloaded at run time.

A process keeps its connection to each lake it writes between writes (see write_kept_lake).
"""

from __future__ import annotations

import atexit
import glob
import hashlib
import importlib
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qs, unquote, urlparse

import duckdb

from workload_attribution.contracts.errors import BadInput, NotStored
from workload_attribution.staging.database import ONE_THREAD
from workload_attribution.warehouse import turns
from workload_attribution.warehouse.conflicts import is_conflict, retry
from workload_attribution.warehouse.object_store import is_object_store, secret_sql

T = TypeVar("T")
log = logging.getLogger("attribution.warehouse")

LOCK_WAIT_S = 60.0
# A lake writer's inserts of at most this many rows into a table go to the catalog (DuckLake's data
# inlining) rather than to a new Parquet file each: one diagnosis writes a few to a few hundred rows
# per table, so without it every attempt left two small files (symptoms, evidence) and a fleet's
# lake grew by thousands an hour. Warehouse.maintain moves inlined rows into Parquet files.
LAKE_INLINE_ROWS = 10_000
# A writer's close checkpoints a DuckDB file only once its write-ahead log holds more than this
# (~20 diagnoses of ~50 KB): a checkpoint at every close rewrote the newest row group of every
# table a diagnosis touched, 50-225 ms a write as that group grew to 2,048 rows, where each open
# replays what the log holds (~30 ms a write on average at this bound; docs/benchmarks.md, "A
# warehouse file that grows"). DuckDB's own checkpoint at 16 MiB of log (checkpoint_threshold)
# stays the bound when one write is larger.
WAL_KEPT_BYTES = 1 << 20
# Turns between processes. DuckDB's file lock has no queue: a process that gives the file up and
# takes it again at once (a loop of writes, a backfill, maintenance) has it back before a process
# retrying with backoff ever finds it free, and kept one out past its lock wait (tested). So a
# process that waits for the file says so in a file beside it (<file>.waiting.<host>.<pid>, touched
# at each try, removed when it stops waiting; one untouched for WAITING_FRESH_S is a dead process's),
# tries at least every WAITING_RETRY_S, and a process taking the file again within TURN_S of giving
# it up first leaves it free while another says it waits, for what is left of TURN_S.
TURN_S = 0.5
WAITING_RETRY_S = 0.25
WAITING_FRESH_S = 5.0
# A file this process writes is kept attached after a write while work that will write it again
# is in flight on another of its threads (writes_coming: the worker's other flow runs, a backfill's
# loop), so that the next write neither attaches it nor replays its write-ahead log nor checks its
# schema again (a third of a published diagnosis's write: docs/warehouse.md). It is given up when
# that work is done, once idle for HOLD_S, at once when this process reads the file, and at its
# next write when another process says it waits for it (a waiting file); such a process waits at
# most HOLD_S more. Nothing polls meanwhile: a thread waking every 50 ms to look for waiting files
# cost the diagnoses beside it ~10% of their CPU. A library caller (`attribution diagnose`, a
# script) gives it up at each write's end, as one opening the file itself right after expects.
# ATTRIBUTION_WAREHOUSE_HOLD_S overrides HOLD_S (0: never kept).
HOLD_S = 3.0


class WarehouseLocked(NotStored):
    """Another process holds the warehouse file past the lock wait."""


class WarehouseConfigError(BadInput):
    """The warehouse setting is not a path or a DuckLake URL this project can open."""


@dataclass(frozen=True)
class Lake:
    dsn: str  # libpq connection string of the PostgreSQL catalog
    data_path: str  # where the Parquet files live: a shared filesystem, or s3://bucket/prefix/


def parse_lake(url: str) -> Lake | None:
    """`ducklake+postgres://user@host:port/db?data_path=/shared/lake/` -> Lake; a file path -> None."""
    if not url.startswith("ducklake"):
        return None
    u = urlparse(url)
    if u.scheme != "ducklake+postgres" or not u.path.strip("/"):
        raise WarehouseConfigError(f"{url}: expected ducklake+postgres://user@host:port/dbname?data_path=/shared/dir/")
    query = parse_qs(u.query)
    unknown = sorted(set(query) - {"data_path"})
    if unknown:  # named, never echoed: credentials belong in the environment, not in the URL
        raise WarehouseConfigError(f"{str(url).split('?')[0]}: unknown option {unknown[0]}= (only data_path=)")
    data_path = (query.get("data_path") or [""])[0]
    if not data_path:
        raise WarehouseConfigError(f"{url}: data_path= is required (a directory every writer can reach, or s3://)")
    if "://" in data_path and not is_object_store(data_path):
        raise WarehouseConfigError(f"{url}: data_path= is a directory or s3://bucket/prefix/")
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


@contextmanager
def writes_coming() -> Iterator[None]:
    """The work inside the `with` (a flow run, a backfill's loop) writes the warehouse, maybe more
    than once: meanwhile another thread's write keeps the file attached (see HOLD_S)."""
    given = os.environ.get("ATTRIBUTION_WAREHOUSE_HOLD_S", "")
    try:
        hold_s = float(given) if given else HOLD_S
    except ValueError:  # said, never fatal to the work: the default kept
        log.warning("ATTRIBUTION_WAREHOUSE_HOLD_S=%r is not a number of seconds: %s s", given, HOLD_S)
        hold_s = HOLD_S
    _HOST.enter_unit(max(0.0, hold_s))
    try:
        yield
    finally:
        _HOST.leave_unit()


def open_file(
    path: Path, read_only: bool, lock_wait_s: float, prepare: Callable[[duckdb.DuckDBPyConnection], None] | None = None
) -> duckdb.DuckDBPyConnection:
    """A connection to a DuckDB file, on one thread (ONE_THREAD; a reader takes every core back:
    Warehouse.reader). A diagnosis's publishing touches a few rows a statement, and its commit and
    the checkpoint at close on a pool of threads cost more CPU than they saved (~40 ms of a ~190 ms
    write); opened on a thread a core and SET to one, the file's worker thread was started and
    stopped at every diagnosis (~30 ms of CPU a warm published diagnosis in page faults). A writer
    has the file attached to this process's kept DuckDB (_HOST) and its close leaves the
    write-ahead log to the next open until it passes WAL_KEPT_BYTES (close_file). A file another
    process holds (an analyst's session) is waited for with backoff up to lock_wait_s, then
    WarehouseLocked; so is one this process's readers hold, for a writer, and the other way round
    (two DuckDB instances of one file in a process would share, and drop, its one lock). A writer's
    `prepare` (the schema brought up to date) runs once an attachment: a file kept attached between
    writes (writes_coming) was changed by no other process meanwhile."""
    deadline = time.monotonic() + lock_wait_s
    key = str(path.resolve())
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            _create_whole(path)
        con, entry = _HOST.writer(path, key, deadline, lock_wait_s)
        if prepare is not None and not entry.prepared:
            try:
                prepare(con)
            except BaseException:
                close_file(con, path)
                raise
            entry.prepared = True
        return con
    _HOST.enter_reader(key, deadline, lock_wait_s)
    try:
        _HOST.give_turn(path, key)
        return _opening(
            path, lock_wait_s, deadline, lambda: duckdb.connect(str(path), read_only=True, config=ONE_THREAD)
        )
    except BaseException:
        _HOST.leave_reader(key)
        raise


def _opening(path: Path, lock_wait_s: float, deadline: float, open_: Callable[[], T]) -> T:
    """open_() retried with backoff while another process holds the file or is creating it, this
    process saying that it waits (TURN_S) and trying often enough to find the turn it is left."""
    delay = 0.02
    waiting: Path | None = None
    try:
        while True:
            before = _identity(path)
            try:
                return open_()
            except duckdb.IOException as exc:
                being_created = _identity(path) != before or _being_created(path, exc)
                if "not a valid DuckDB database" in str(exc) and not being_created:  # names something else: say which
                    raise WarehouseConfigError(
                        f"{path}: not a DuckDB database file (the warehouse must be one)"
                    ) from None
                if "lock" not in str(exc).lower() and not being_created:
                    raise
                if time.monotonic() >= deadline:
                    raise WarehouseLocked(
                        f"{path}: still locked by another process (or being created by one) after {lock_wait_s:.0f}s"
                    ) from None
            waiting = _say_waiting(path)
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, WAITING_RETRY_S / 2)
    finally:
        if waiting is not None:
            waiting.unlink(missing_ok=True)


def _waiting_file(path: Path) -> Path:
    return path.with_name(f"{path.name}.waiting.{socket.gethostname()}.{os.getpid()}")


def _say_waiting(path: Path) -> Path | None:
    """This process's waiting file, made or touched; None where the folder takes none (then it only
    retries, as before)."""
    mine = _waiting_file(path)
    try:
        mine.touch()
    except OSError:
        return None
    return mine


def _others_waiting(path: Path) -> bool:
    """Whether another process says it waits for the file (a waiting file touched lately)."""
    mine, now = _waiting_file(path).name, time.time()
    try:
        found = list(path.parent.glob(f"{glob.escape(path.name)}.waiting.*"))
    except OSError:
        return False
    for other in found:
        try:
            fresh = now - other.stat().st_mtime < WAITING_FRESH_S
        except OSError:  # gone meanwhile: it has its turn
            continue
        if other.name != mine and fresh:
            return True
    return False


def close_file(con: duckdb.DuckDBPyConnection, path: Path, read_only: bool = False) -> None:
    """Close a connection open_file gave. The last writer of the file detaches it, checkpointing
    it first on this process's first close of the file and whenever its write-ahead log holds more
    than WAL_KEPT_BYTES; between those, the log is left for the next open to replay. A process that
    writes once (`attribution diagnose`) so leaves the file whole as before, and one that keeps
    writing (a worker, serve, a backfill) checkpoints every ~20 writes and once more as it exits
    (_Host.checkpoint_left). What a commit wrote is durable either way: the log is synced at each
    commit, and every open replays it, a reader's too. A copy of the file while a worker runs takes
    the log beside it (the file's name + `.wal`), or is made after a checkpoint (the nightly
    backfill's maintenance makes one)."""
    key = str(path.resolve())
    try:
        con.close()
    finally:
        if read_only:
            _HOST.leave_reader(key)
        else:
            _HOST.release_writer(path, key)


@dataclass
class _Attached:
    alias: str
    threads: list[int]  # one entry per writer's connection: the thread that opened it
    ready: bool = False  # attached (until then, the thread attaching it is)
    prepared: bool = False  # its schema checked (open_file's prepare)
    idle_since: float | None = None  # no writer since then: kept attached (_Host.hold_s)


class _Host:
    """This process's kept in-memory DuckDB, to which each warehouse file is ATTACHed while this
    process writes it and DETACHed after. A new DuckDB for each write cost ~25-30 ms more CPU than
    an ATTACH and DETACH (its catalog of functions built anew, its buffers' memory faulted in then
    given back: 64 against 34 ms with ~0.5 MiB of log to replay): DETACH gives the file back to
    other processes as a close did. Writers on several threads share one attachment (each a cursor
    of its own); this process's readers open a read-only DuckDB of their own (their settings are
    locked: Warehouse.reader) and wait for the writers, as writers wait for them. A thread that
    asks for the other kind while it holds one is refused at once, as DuckDB refused a second
    connection of another configuration to an open file (waiting would be for itself)."""

    def __init__(self) -> None:
        self._state = threading.Condition()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._statement = threading.Lock()  # one statement at a time on the host's own connection
        self._attached: dict[str, _Attached] = {}
        self._readers: dict[str, list[int]] = {}
        self._released: dict[str, float] = {}  # file -> when this process last gave it up (TURN_S)
        self.hold_s = HOLD_S  # the longest a file is kept idle (writes_coming)
        self._units = 0  # work in flight that writes (writes_coming), on every thread
        self._watching = False  # the thread giving up held files runs (_watch)

    def give_turn(self, path: Path, key: str) -> None:
        """Before taking the file again within TURN_S of giving it up: left free while another
        process says it waits, for what is left of TURN_S (one directory listing when none does)."""
        with self._state:
            until = self._released.get(key, 0.0) + TURN_S
        while time.monotonic() < until and _others_waiting(path):
            time.sleep(0.01)

    def _execute(self, sql: str) -> None:
        with self._statement:
            if self._con is None:
                self._con = duckdb.connect(":memory:", config=ONE_THREAD)
                self._con.execute("PRAGMA disable_checkpoint_on_shutdown")  # close_file checkpoints
            self._con.execute(sql)

    def _wait(self, free: Callable[[], bool], key: str, deadline: float, lock_wait_s: float) -> None:
        while not free():
            left = deadline - time.monotonic()
            if left <= 0:
                raise WarehouseLocked(f"{key}: still in use by this process after {lock_wait_s:.0f}s")
            self._state.wait(left)

    @staticmethod
    def _refuse_if_mine(key: str, threads: list[int], wanted: str) -> None:
        if threading.get_ident() in threads:
            raise duckdb.ConnectionException(f"{key}: this thread holds the file open and asked for a {wanted} too")

    def writer(
        self, path: Path, key: str, deadline: float, lock_wait_s: float
    ) -> tuple[duckdb.DuckDBPyConnection, _Attached]:
        me = threading.get_ident()
        with self._state:
            self._refuse_if_mine(key, self._readers.get(key, []), "writer")

            def free() -> bool:
                """No reader of this process, not being attached by another thread, and not in
                use while another process waits for the file (not joined then: given up when the
                writers in it are done, it is that process's turn)."""
                if self._readers.get(key):
                    return False
                entry = self._attached.get(key)
                if entry is None:
                    return True
                if not entry.ready:
                    return False
                if _others_waiting(path):
                    if entry.threads:
                        return False
                    self._detach(key, entry)
                return True

            self._wait(free, key, deadline, lock_wait_s)
            entry = self._attached.get(key)
            if entry is not None:
                entry.threads.append(me)
                entry.idle_since = None
                return self._cursor(entry), entry
            entry = self._attached[key] = _Attached(f"warehouse_{hashlib.sha256(key.encode()).hexdigest()[:16]}", [me])
        try:
            self.give_turn(path, key)
            _opening(path, lock_wait_s, deadline, lambda: self._attach(str(path), entry.alias))
        except BaseException:
            with self._state:
                del self._attached[key]
                self._state.notify_all()
            raise
        with self._state:
            entry.ready = True
            self._state.notify_all()
        return self._cursor(entry), entry

    def _attach(self, path: str, alias: str) -> None:
        literal = path.replace("'", "''")
        self._execute(f"ATTACH '{literal}' AS {alias}")

    def _cursor(self, entry: _Attached) -> duckdb.DuckDBPyConnection:
        with self._statement:
            assert self._con is not None
            con = self._con.cursor()
        con.execute(f"USE {entry.alias}")
        return con

    def release_writer(self, path: Path, key: str) -> None:
        with self._state:
            entry = self._attached[key]
            _forget(entry.threads)
            if entry.threads:
                return
            kept = False
            try:
                try:
                    logged = path.with_name(path.name + ".wal").stat().st_size
                except FileNotFoundError:
                    logged = 0
                if logged > WAL_KEPT_BYTES or key not in _WRITTEN:
                    self._checkpoint(entry.alias)
                _WRITTEN.add(key)
                kept = self._writes_coming() and not _others_waiting(path)
            finally:
                if kept:
                    entry.idle_since = time.monotonic()
                    self._start_watching()
                    self._state.notify_all()
                else:
                    self._detach(key, entry)

    def enter_unit(self, hold_s: float) -> None:
        _UNITS.depth = getattr(_UNITS, "depth", 0) + 1
        with self._state:
            self._units += 1
            self.hold_s = hold_s

    def leave_unit(self) -> None:
        _UNITS.depth -= 1
        with self._state:
            self._units -= 1
            if not self._writes_coming():
                self._give_up_held(checkpoint=False)

    def _writes_coming(self) -> bool:
        """Work that writes is in flight on another thread (the caller holds _state)."""
        return self.hold_s > 0 and self._units - getattr(_UNITS, "depth", 0) > 0

    def _detach(self, key: str, entry: _Attached) -> None:
        """Give the file up (the caller holds _state): the waiters go on once its block is done."""
        del self._attached[key]
        self._state.notify_all()
        self._execute(f"DETACH {entry.alias}")
        self._released[key] = time.monotonic()

    def _start_watching(self) -> None:
        if not self._watching:
            self._watching = True
            threading.Thread(target=self._watch, name="warehouse-hold", daemon=True).start()

    def _watch(self) -> None:
        """Give up each file kept attached with no writer once it has been idle for hold_s; asleep
        until the next one is due, or while none is kept."""
        with self._state:
            while True:
                held = [(k, e.idle_since) for k, e in self._attached.items() if e.idle_since is not None]
                if not held:
                    self._state.wait()
                    continue
                now = time.monotonic()
                for key, since in held:
                    if now - since >= self.hold_s:
                        self._detach(key, self._attached[key])
                due = [since + self.hold_s - now for _, since in held if now - since < self.hold_s]
                if due:
                    self._state.wait(min(due))

    def _checkpoint(self, alias: str) -> None:
        """A failed checkpoint (a full disk) leaves the log, which holds every commit, for the next
        open to replay: as DuckDB's checkpoint at a close did, it fails nothing."""
        try:
            self._execute(f"CHECKPOINT {alias}")
        except duckdb.Error as exc:
            log.debug("checkpoint of %s failed, its log kept: %s", alias, exc)

    def enter_reader(self, key: str, deadline: float, lock_wait_s: float) -> None:
        with self._state:
            entry = self._attached.get(key)
            self._refuse_if_mine(key, entry.threads if entry else [], "reader")

            def free() -> bool:  # no writer of this process; one kept attached with none is given up
                entry = self._attached.get(key)
                if entry is not None and entry.ready and entry.idle_since is not None:
                    self._detach(key, entry)
                return key not in self._attached

            self._wait(free, key, deadline, lock_wait_s)
            self._readers.setdefault(key, []).append(threading.get_ident())

    def leave_reader(self, key: str) -> None:
        with self._state:
            _forget(self._readers[key])
            if not self._readers[key]:
                del self._readers[key]
                self._released[key] = time.monotonic()
            self._state.notify_all()

    def _give_up_held(self, checkpoint: bool) -> None:
        """Every file kept attached with no writer given up now, checkpointed first if it has a log
        and `checkpoint` (the caller holds _state)."""
        for key, entry in list(self._attached.items()):
            if entry.idle_since is not None:
                if checkpoint and Path(key + ".wal").exists():
                    self._checkpoint(entry.alias)
                self._detach(key, entry)

    def checkpoint_left(self) -> None:
        """At exit, each file whose log this process left is checkpointed, if no other process holds it
        (one try, no wait: whoever holds it checkpoints in turn)."""
        with self._state:  # a file still open here (a thread mid-write at exit) keeps its log
            self._give_up_held(checkpoint=True)
            for key in sorted(_WRITTEN):
                if key in self._attached or key in self._readers or not Path(key + ".wal").exists():
                    continue
                alias = "warehouse_at_exit"
                try:
                    self._attach(key, alias)
                except duckdb.Error:
                    continue
                try:
                    self._checkpoint(alias)
                finally:
                    self._execute(f"DETACH {alias}")
            _WRITTEN.clear()


def _forget(threads: list[int]) -> None:
    """One connection of this thread's closed (of another's, when a thread closes what another opened)."""
    me = threading.get_ident()
    threads.remove(me if me in threads else threads[0])


# The DuckDB files this process wrote (resolved paths): at exit, those with a log are checkpointed.
_WRITTEN: set[str] = set()
_UNITS = threading.local()  # depth: how many writes_coming this thread is inside
_HOST = _Host()
atexit.register(_HOST.checkpoint_left)


def _create_whole(path: Path) -> None:
    """A new warehouse file appears whole or not at all. DuckDB creates a file, then locks it and
    writes its headers; several workers starting on one new warehouse found it empty in between,
    and a creator that lost the lock to one of them reopened its own empty file as an existing,
    invalid one: nobody ever wrote the headers. So the database is made under a name of this
    process's, then linked into place; when another process got there first, its file is used."""
    made = path.with_name(f".{path.name}.{os.getpid()}.{random.getrandbits(32):08x}.new")
    try:
        duckdb.connect(str(made)).close()
        os.link(made, path)
    except FileExistsError:
        pass  # another writer's, complete
    except OSError:
        pass  # a file system without hard links: DuckDB creates it in place, as before
    finally:
        made.unlink(missing_ok=True)


# A DuckDB file's main header and its two database headers, each a 4 KiB block: a file shorter
# than that is one another process has created and not yet written its headers to.
_HEADERS_BYTES = 3 * 4096


def _identity(path: Path) -> tuple[int, int, int] | None:
    """Which file a path names and how far it has been written. A creator that links its finished
    file into place while this process reads the empty one it replaces changes it; the error then
    describes the file that was, and the next try reads the one that is."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _being_created(path: Path, exc: duckdb.IOException) -> bool:
    """Another writer's first open of a new warehouse is under way: its file exists and has no
    headers yet, which DuckDB reports as "not a valid DuckDB database" (seen when several workers
    start on one new warehouse at once). Waited for like a lock."""
    try:
        if "not a valid DuckDB database" not in str(exc) or path.stat().st_size >= _HEADERS_BYTES:
            return False
        with path.open("rb") as f:
            start = f.read(12)
    except OSError:
        return True  # gone again: the creator failed; the next try creates it
    # what a creator leaves before its headers are in: nothing, zeros, or the start of a header
    # (an 8-byte checksum, then the magic); text or any other file is not a warehouse being made
    return not start.strip(b"\0") or len(start) <= 8 or start[8:12] == b"DUCK"[: len(start) - 8]


def open_lake(lake: Lake, read_only: bool) -> duckdb.DuckDBPyConnection:
    """A connection with the lake attached as `warehouse` and in use; a writer's inlines small
    inserts and can take an attempt's turn (warehouse/turns.py)."""
    con = duckdb.connect()
    try:
        con.execute(f"LOAD '{_extension('postgres_scanner')}'")
        con.execute(f"LOAD '{_extension('ducklake')}'")
        if is_object_store(lake.data_path):
            _reach_bucket(con, lake.data_path)
        elif not read_only:
            Path(lake.data_path).mkdir(parents=True, exist_ok=True)
        opts = f"DATA_PATH '{lake.data_path}', " + (
            "READ_ONLY" if read_only else f"DATA_INLINING_ROW_LIMIT {LAKE_INLINE_ROWS}"
        )
        retry(lambda: con.execute(f"ATTACH 'ducklake:postgres:{lake.dsn}' AS warehouse ({opts})"))
        con.execute("USE warehouse")
        if not read_only:
            turns.attach(con, lake.dsn)
    except Exception:
        con.close()
        raise
    return con


def _reach_bucket(con: duckdb.DuckDBPyConnection, data_path: str) -> None:
    """httpfs and the bucket's secret (warehouse/object_store.py). DuckDB's error for a statement
    quotes the statement, which holds the credentials: its failure is said without it."""
    con.execute(f"LOAD '{_extension('httpfs')}'")
    # object stores answer 500/503 now and then (S3's SlowDown, a busy server): retried for ~15 s
    # (httpfs's default gives up after 3 tries in 2 s), so a busy bucket delays a write, not fails it
    con.execute("SET http_retries = 6; SET http_retry_wait_ms = 250; SET http_retry_backoff = 2")
    sql = secret_sql(data_path, os.environ)
    try:
        con.execute(sql)
    except duckdb.Error:
        raise WarehouseConfigError(f"{data_path}: no S3 secret could be made from the AWS_* variables") from None


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
    write: Callable[[duckdb.DuckDBPyConnection], T],
) -> T:
    """Run one write (its transaction, retried as it needs: conflicts.retry) on this process's kept
    connection to the lake at `url` (the caller holds WRITE_LOCK). The connection is kept between
    writes: loading the extensions and attaching the catalog cost a worker ~0.5 CPU-seconds per
    attempt, more than the write (~0.2 s). Each write is its own transaction, which reads the
    catalog's latest snapshot, so a kept connection sees every other writer's commits. A kept
    connection that fails (the catalog's server restarted) is dropped and the write tried once
    more on a new one from `open_writer`. (A DuckDB file is opened per write: held open it would
    lock out every other process, an analyst's included.)"""
    kept = _LAKE_WRITERS.get(url)
    if kept is not None:
        try:
            return write(kept)
        except duckdb.Error as exc:
            _drop_lake_writer(url)
            if is_conflict(exc):
                raise
    con = open_writer()
    try:
        done = write(con)
    except BaseException:
        con.close()
        raise
    _LAKE_WRITERS[url] = con
    return done
