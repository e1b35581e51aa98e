"""One staging database made ahead, on another thread, for the next attempt of this process.

A new process's first attempt spends most of its time in Python (imports, the configuration, the
rules pack) holding the interpreter lock; DuckDB works without it, so a database's own cost (a new
DuckDB instance, the schema, the macros: ~35 ms) is paid on the second core meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import duckdb

from workload_attribution.staging.database import connected, new_staging_path, open_staging, release_staging

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
            open_staging(path)
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


def take_ahead() -> str | None:
    """The database made ahead (waiting for it while it is being made), or None."""
    with _ahead_lock:
        thread = _ahead_thread
    if thread is not None and thread is not threading.current_thread():
        thread.join()
    with _ahead_lock:
        return _ahead.pop() if _ahead else None
