"""The log-line prefix grammar's macros (sql/log_time_macros.sql) in a DuckDB database.

Creating them costs every attempt's staging database ~11 ms of CPU: DuckDB parses and binds ~40
macros anew each time. Attaching a database file that holds them costs ~1.5 ms. So the macros are
made once per version of their SQL and of DuckDB, into a file in the user's cache
(staging/user_cache.py), and each database attaches that file read-only as GRAMMAR. Its macros
are then found by name through each connection's search_path (the grammar's macros call each other
unqualified, so a qualified call alone would not do): staging/database.py sets it on every
connection to a staging database. Where no file can be kept (no writable cache) or DuckDB cannot
attach it (a damaged file: built again for the next database), the macros are made in the
database itself, as they always were. Either way the same macros answer.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import duckdb

from workload_attribution.staging.user_cache import build_database, cache_dir, remove_quietly

# The catalog name the grammar's file is attached as: one no table or schema of the pack uses.
GRAMMAR = "attribution_grammar"
_FORMAT = 1  # a change to what the file holds or how it is attached is a new name
_KEEP = 4  # files kept in the folder (versions of the SQL side by side: a few checkouts or releases)

_found: set[Path] = set()  # files made or found by this process
_refused: set[Path] = set()  # files this process could not attach
_lock = threading.Lock()


def add_grammar(con: duckdb.DuckDBPyConnection, macros: str) -> str | None:
    """The grammar's macros (`macros`: the SQL that makes them) made available on `con`'s database:
    the file attached, and the search_path that finds them returned (also set on `con`); or, when
    no file will do, the macros made in the database itself and None returned."""
    path = grammar_file(macros)
    if path is not None:
        try:
            con.execute(f"ATTACH '{_quoted(str(path))}' AS {GRAMMAR} (READ_ONLY)")
        except duckdb.Error:
            _refuse(path)
        else:
            row = con.execute("SELECT current_database()").fetchone()
            home = str(row[0]) if row else "memory"
            search = '"' + home.replace('"', '""') + f'".main,{GRAMMAR}.main'
            con.execute(f"SET search_path = '{_quoted(search)}'")
            return search
    con.execute(macros)
    return None


def grammar_file(macros: str) -> Path | None:
    """The file holding the macros `macros` makes, built when this version has none; None when no
    cache folder takes it, or when this process could not attach it."""
    digest = hashlib.sha256(f"{_FORMAT}|{duckdb.__version__}|".encode())
    digest.update(macros.encode())
    path = cache_dir("grammar") / f"grammar-{digest.hexdigest()[:32]}.duckdb"
    with _lock:
        if path in _refused:
            return None
        if path in _found:
            return path
    if not path.is_file() and not _build(path, macros):
        return None
    with _lock:
        _found.add(path)
    return path


def _refuse(path: Path) -> None:
    """A file DuckDB would not attach (damaged; a file system that refuses its lock): this process
    makes the macros in each database from now on, and the file is removed, so that the next
    process builds it again rather than failing on it too."""
    with _lock:
        _refused.add(path)
        _found.discard(path)
    remove_quietly(path)


def _build(path: Path, macros: str) -> bool:
    """The file made (staging/user_cache.build_database); False when the folder cannot take it."""
    return build_database(path, lambda con: con.execute(macros), _KEEP)


def _quoted(text: str) -> str:
    """Text inside an SQL string literal."""
    return text.replace("'", "''")
