"""The pack's data tables (data/<table>.csv) loaded into an attempt's database, from a cache.

A pack's CSV as a table, read from the file once per process (while the file is unchanged): each
attempt then loads it from JSON, about a third of read_csv's cost (its sniffer and reader are set up
for a file of any size). Kept only when the JSON round trip gives the same table.

That JSON is also kept on disk, once per version of the file (as Python keeps bytecode), in the
user's cache directory (never beside the pack: an installed package's folder would keep entries
that `pip uninstall` leaves behind, and a user's own rules folder would gain files), else nowhere. A new process
then loads it instead of reading the CSV, checking the round trip and describing the table again
(read_csv, DESCRIBE x2, SELECT x2: ~30 ms of a fresh `diagnose`'s CPU). An entry is named by what
it is built from (the file's bytes, how it is read, DuckDB's version, this format): a changed file is
another name, never a stale entry; entries are written whole under a temporary name, then renamed,
so two processes starting at once each read a whole entry or none.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import duckdb

from workload_attribution.rules import concepts as concept_table
from workload_attribution.rules.catalog import TABLE_SHAPE
from workload_attribution.rules.pack import Pack
from workload_attribution.staging.database import sql_literal
from workload_attribution.staging.user_cache import build_database, cache_dir, remove_quietly, temporary_name

DATA_DIR = Path(__file__).resolve().parent / "data"
# data/<table>.csv, all VARCHAR or typed; evidence_sources is read by the report (rules/settle.py)
PACK_DATA = (("xid_catalog", False), ("nvlink5_decode", True), ("evidence_sources", False))
CATALOG_TABLE = "catalog"  # the rows of catalogs/*.csv, one table
CONCEPTS_TABLE = concept_table.CONCEPTS_TABLE  # concepts/*.yaml, one row each

# (path, query) -> ((mtime_ns, size), (columns, from_json shape, JSON rows) or None: read the file)
_CSV_TABLES: dict[tuple[str, str], tuple[tuple[int, int], tuple[str, str, str] | None]] = {}
_CSV_LOCK = threading.Lock()


def load_pack_data(con: duckdb.DuckDBPyConnection, data: Path, temp: bool = False) -> None:
    """The pack's tables; one the pack does not have (a pack older than the table) is the shipped one."""
    for table, all_varchar in PACK_DATA:
        _load_csv(con, table, _csv_path(data, table), all_varchar=all_varchar, temp=temp)


def _csv_path(data: Path, table: str) -> Path:
    path = data / f"{table}.csv"
    return path if path.is_file() else DATA_DIR / path.name


# The catalog name the file of a pack's tables is attached as (attach_pack_tables): one no table or
# schema of a pack uses
PACK_TABLES = "attribution_pack"
_TABLES_FORMAT = 1  # a change to what the file holds or how it is attached is a new name
_TABLES_KEEP = 4  # files kept in the folder (packs and versions side by side)
# (pack version, pack folder, each CSV's path and stamp) -> the file holding those tables, or None
_TABLE_FILES: dict[tuple[object, ...], Path | None] = {}
_TABLES_REFUSED: set[Path] = set()  # files this process could not attach


def attach_pack_tables(con: duckdb.DuckDBPyConnection, pack: Pack) -> str | None:
    """The pack's tables (its data, catalog and concepts) attached read-only as PACK_TABLES from a
    DuckDB file in the user's cache, made once per version of them (as the grammar's macros are:
    staging/grammar.py): loading them into each attempt's database cost a warm attempt ~8-13 ms,
    attaching the file ~1-2. The schema to search for them returned; None where no file will do
    (no writable cache, a file DuckDB will not attach): the caller loads them as before."""
    data = Path(pack.path) / "data" if pack.path else DATA_DIR
    csvs = [_csv_path(data, table) for table, _ in PACK_DATA]
    key = (pack.version, str(pack.path), tuple((str(c), _file_stamp(c)) for c in csvs))
    with _CSV_LOCK:
        known = key in _TABLE_FILES
        path = _TABLE_FILES.get(key)
    if not known:
        path = _tables_file(pack, data, csvs)
        with _CSV_LOCK:
            _TABLE_FILES[key] = path
    if path is None or path in _TABLES_REFUSED:
        return None
    try:
        con.execute(f"ATTACH {sql_literal(str(path))} AS {PACK_TABLES} (READ_ONLY)")
    except duckdb.Error:  # damaged, or taken away: made again by the next process, loaded meanwhile
        with _CSV_LOCK:
            _TABLES_REFUSED.add(path)
        remove_quietly(path)
        return None
    return f"{PACK_TABLES}.main"


def _tables_file(pack: Pack, data: Path, csvs: list[Path]) -> Path | None:
    """The file of these tables, named by everything they are made from, built when missing."""
    digest = hashlib.sha256(f"{_TABLES_FORMAT}|{duckdb.__version__}|{pack.version}|".encode())
    try:
        for csv in csvs:
            digest.update(csv.read_bytes())
    except OSError:
        return None
    digest.update(pack.table_json("catalog").encode())
    digest.update(pack.table_json("concepts").encode())
    path = cache_dir("pack-tables") / f"tables-{digest.hexdigest()[:32]}.duckdb"
    if path.is_file() or _build_tables(path, pack, data):
        return path
    return None


def _build_tables(path: Path, pack: Pack, data: Path) -> bool:
    """The file made (staging/user_cache.build_database); False where the folder takes none."""

    def fill(con: duckdb.DuckDBPyConnection) -> None:
        load_pack_data(con, data)
        load_catalog_table(con, pack)
        load_concepts_table(con, pack)

    return build_database(path, fill, _TABLES_KEEP)


def table_of(file: str) -> str | None:
    """The table a file of the pack becomes in an attempt's database (data/<table>.csv; every
    catalogs/*.csv is a part of the catalog), None for any other file."""
    folder, _, name = file.partition("/")
    if folder == "data" and name.removesuffix(".csv") in {t for t, _ in PACK_DATA}:
        return name.removesuffix(".csv")
    if folder == "concepts" and name.endswith(".yaml") and "/" not in name:
        return CONCEPTS_TABLE
    return CATALOG_TABLE if folder == "catalogs" and name.endswith(".csv") and "/" not in name else None


def load_lent_tables(con: duckdb.DuckDBPyConnection, pack: Pack, schema: str) -> None:
    """Another pack's tables (data and catalog) in a schema of their own, beside this database's:
    a replay runs that pack's version of a rule here by putting them in front (tasks/replay.py).
    Before the database is locked (it reads files)."""
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}; SET schema = '{schema}'")
    try:
        load_pack_data(con, Path(pack.path) / "data" if pack.path else DATA_DIR)
        load_catalog_table(con, pack)
        load_concepts_table(con, pack)
    finally:
        con.execute("SET schema = 'main'")


def load_catalog_table(con: duckdb.DuckDBPyConnection, pack: Pack) -> None:
    """The pack's catalog rows (catalogs/*.csv) as the table `catalog`, which the catalog rule
    reads: built once per pack version (Pack.table_json, kept with the shipped pack), then loaded
    from JSON."""
    con.execute(
        f"CREATE OR REPLACE TABLE {CATALOG_TABLE} AS "
        "SELECT unnest(s) FROM (SELECT unnest(from_json($p::JSON, $shape)) AS s)",
        {"p": pack.table_json("catalog"), "shape": TABLE_SHAPE},
    )


def load_concepts_table(con: duckdb.DuckDBPyConnection, pack: Pack) -> None:
    """The pack's failure concepts (concepts/*.yaml) as the table `concepts`, which the concept
    rule reads: built once per pack version (Pack.table_json), then loaded from JSON."""
    payload = pack.table_json("concepts")
    con.execute(
        f"CREATE OR REPLACE TABLE {CONCEPTS_TABLE} AS "
        "SELECT unnest(s) FROM (SELECT unnest(from_json($p::JSON, $shape)) AS s)",
        {"p": payload, "shape": concept_table.TABLE_SHAPE},
    )


def read_data_ahead(con: duckdb.DuckDBPyConnection, data: Path = DATA_DIR) -> None:
    """The pack's CSVs read once into this process's cache, ahead of the first attempt (on a
    connection of its own: what it makes is gone when that closes); a table kept on disk only
    read into the cache (no statement: the attempt loads it)."""
    for table, all_varchar in PACK_DATA:
        path = _csv_path(data, table)
        if not _cached_from_disk(path, all_varchar):
            _load_csv(con, table, path, all_varchar=all_varchar, temp=True)


def _cached_from_disk(path: Path, all_varchar: bool) -> bool:
    """Whether this version of the file's table is in this process's cache now, read from disk if needed."""
    stamp = _file_stamp(path)
    if stamp is None:
        return False
    key = (str(path), _read_query(path, all_varchar))
    cached = _CSV_TABLES.get(key)
    if cached is not None and cached[0] == stamp:
        return True
    kept = _disk_entry(path, all_varchar)
    if kept is None:
        return False
    with _CSV_LOCK:
        _CSV_TABLES[key] = (stamp, kept[1])
    return True


def _read_query(path: Path, all_varchar: bool) -> str:
    return f"SELECT * FROM read_csv('{path}', header=true, all_varchar={str(all_varchar).lower()})"


def _load_csv(con: duckdb.DuckDBPyConnection, table: str, path: Path, all_varchar: bool, temp: bool = False) -> None:
    read = _read_query(path, all_varchar)
    create = f"CREATE OR REPLACE {'TEMP ' if temp else ''}TABLE {table} AS"
    key = (str(path), read)
    stamp = _file_stamp(path)
    cached = _CSV_TABLES.get(key)
    if stamp is not None and cached is not None and cached[0] == stamp:
        _load_kept(con, create, read, cached[1])
        return
    if stamp is not None:
        kept = _disk_entry(path, all_varchar)
        if kept is not None:
            _load_kept(con, create, read, kept[1])
            with _CSV_LOCK:
                _CSV_TABLES[key] = (stamp, kept[1])
            return
    con.execute(f"{create} {read}")
    if stamp is None:
        return
    built = _as_json(con, table)
    with _CSV_LOCK:
        _CSV_TABLES[key] = (stamp, built)
    _keep_on_disk(path, all_varchar, built)


def _load_kept(con: duckdb.DuckDBPyConnection, create: str, read: str, kept: tuple[str, str, str] | None) -> None:
    if kept is not None:
        columns, shape, payload = kept
        con.execute(f"{create} {_FROM_JSON.format(columns=columns)}", {"p": payload, "shape": shape})
    else:
        con.execute(f"{create} {read}")  # a table JSON does not give back


# the format of an entry on disk; a change to what an entry holds or how it is read is a new one
_DISK_FORMAT = 1


def _disk_name(path: Path, all_varchar: bool) -> str | None:
    """The entry's file name: the table and a digest of what the entry is built from."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    digest = hashlib.sha256(f"{_DISK_FORMAT}|{duckdb.__version__}|{all_varchar}|".encode())
    digest.update(data)
    return f"{path.stem}-{digest.hexdigest()[:32]}.json"


def _disk_dirs(path: Path) -> list[Path]:
    """Where entries are looked for and written: the user's cache directory, keyed by the data
    folder's location."""
    place = hashlib.sha256(str(path.parent.resolve()).encode()).hexdigest()[:12]
    return [cache_dir("pack-data", place)]


def _disk_entry(path: Path, all_varchar: bool) -> tuple[str, tuple[str, str, str] | None] | None:
    """(name, what _as_json gave) from the first readable entry of this version of the file, or None."""
    name = _disk_name(path, all_varchar)
    if name is None:
        return None
    for folder in _disk_dirs(path):
        try:
            kept = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        if kept.get("format") != _DISK_FORMAT:
            continue
        table = kept.get("table")
        if table is None:
            return name, None
        if isinstance(table, list) and len(table) == 3 and all(isinstance(x, str) for x in table):
            return name, (table[0], table[1], table[2])
    return None


def _keep_on_disk(path: Path, all_varchar: bool, built: tuple[str, str, str] | None) -> None:
    """The entry written whole under a name of this process, then renamed into place; older entries
    of the same table in that folder removed. The first folder that takes it; none: nothing kept."""
    name = _disk_name(path, all_varchar)
    if name is None:
        return
    body = json.dumps({"format": _DISK_FORMAT, "table": list(built) if built is not None else None})
    for folder in _disk_dirs(path):
        tmp = temporary_name(folder / name)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp.write_text(body)
            os.replace(tmp, folder / name)
        except OSError:  # a read-only folder: the next one
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
            continue
        for old in folder.glob(f"{path.stem}-*.json"):
            if old.name != name:
                try:
                    old.unlink(missing_ok=True)
                except OSError:
                    pass
        return


def _file_stamp(path: Path) -> tuple[int, int] | None:
    """What says the file changed: (mtime, size), None when it cannot be read."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


_FROM_JSON = "SELECT {columns} FROM (SELECT unnest(from_json($p::JSON, $shape), recursive := true))"


def _as_json(con: duckdb.DuckDBPyConnection, table: str) -> tuple[str, str, str] | None:
    """The table as (columns, from_json shape, JSON rows), if that gives back the same table."""
    described = con.execute(f"DESCRIBE {table}").fetchall()
    names = [d[0] for d in described]
    if len(set(names)) != len(names) or any(not isinstance(n, str) for n in names):
        return None
    rows = con.execute(f"SELECT * FROM {table}").fetchall()
    shape = json.dumps([{d[0]: d[1] for d in described}])
    columns = ", ".join('"' + n.replace('"', '""') + '"' for n in names)
    query = _FROM_JSON.format(columns=columns)
    try:
        payload = json.dumps([dict(zip(names, r)) for r in rows])
        same = con.execute(query, {"p": payload, "shape": shape})
        if same.fetchall() != rows or [d[0] for d in same.description] != names:
            return None
        again = con.execute(f"DESCRIBE {query}", {"p": "[]", "shape": shape}).fetchall()
    except (TypeError, ValueError, duckdb.Error):
        return None
    if [(d[0], d[1]) for d in again] != [(d[0], d[1]) for d in described]:
        return None
    return columns, shape, payload
