"""The user's cache directory: what a new process takes from disk instead of building it again (the
rules pack, its data tables, Hyperscan's databases, the grammar's macros), as Python keeps bytecode.

Each entry is named by what it is built from, so a changed source is another name, never a stale
entry. It is written whole under a name of its own process and thread, then renamed into place:
a reader sees a whole entry or none, and two processes building at once each keep a whole one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import duckdb


def cache_dir(*parts: str) -> Path:
    """A folder of this project's cache: $XDG_CACHE_HOME (else ~/.cache)/workload-attribution/<parts>."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "workload-attribution", *parts)


def temporary_name(path: Path) -> Path:
    """Where an entry is written before it is renamed to `path`: a hidden name of this process and
    thread, beside it (a rename within one folder is atomic)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")


def build_database(path: Path, fill: Callable[[duckdb.DuckDBPyConnection], object], keep: int) -> bool:
    """A DuckDB file made by `fill` under a temporary name, checkpointed, then renamed to `path`;
    beyond the `keep` newest files of its folder with its prefix (the name up to its first '-'),
    older ones removed. False when the folder cannot take it (read-only, full)."""
    tmp = temporary_name(path)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        con = duckdb.connect(str(tmp))
        try:
            fill(con)
            # everything in the file, no write-ahead log beside it; said here, since a checkpoint
            # that fails at close is silent (a full disk left a file without its contents in place)
            con.execute("CHECKPOINT")
        finally:
            con.close()
        os.replace(tmp, path)
    except (OSError, duckdb.Error):
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            remove_quietly(leftover)
        return False
    prefix = path.name.split("-", 1)[0]
    kept = sorted(path.parent.glob(f"{prefix}-*{path.suffix}"), key=_mtime, reverse=True)
    for old in kept[keep:]:
        remove_quietly(old)
    return True


def remove_quietly(path: Path) -> None:
    """An entry removed, if it can be: another process may have removed it, or the folder refuses."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
