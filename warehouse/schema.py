"""The warehouse's schema and analyst views, brought to this code's version on a writer's open.

Schema files in warehouse/schema/NNN_*.sql are applied in order and recorded in schema_version; a
warehouse newer than this code is refused, never silently downgraded. The views in
warehouse/views/*.sql follow the code: replaced when their files change.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import duckdb

from workload_attribution.contracts.errors import BadInput
from workload_attribution.staging.database import scalar
from workload_attribution.warehouse.conflicts import rollback

SCHEMA_DIR = Path(__file__).resolve().parent / "schema"
VIEWS_DIR = Path(__file__).resolve().parent / "views"

# table constraints ", PRIMARY KEY (a, b)" and column constraints "a VARCHAR PRIMARY KEY,": DuckLake
# has none, so a lake's key (cluster, scheduler, job_id, attempt) is kept by the writer's
# delete-then-insert transaction (warehouse/writer.py), the same in both backends (a file's
# `diagnoses` and `actions` lost their keys too: schema v9 and v10)
_NO_CONSTRAINTS = re.compile(r",\s*PRIMARY KEY\s*\([^)]*\)|\s+PRIMARY KEY(?=\s*[,)])", re.I)


class WarehouseTooNew(BadInput):
    """The warehouse was written by a newer version of this project."""


def views() -> dict[str, str]:
    """View name -> what it answers (the first comment line of its SQL file)."""
    out = {}
    for f in sorted(VIEWS_DIR.glob("*.sql")):
        first = f.read_text().splitlines()[0].lstrip("- ")
        out[f.stem] = first.split(":", 1)[1].strip() if ":" in first else first
    return out


def views_digest() -> str:
    return hashlib.sha256(b"".join(f.read_bytes() for f in sorted(VIEWS_DIR.glob("*.sql")))).hexdigest()[:16]


def migrations() -> list[tuple[int, Path]]:
    return sorted((int(p.name.split("_")[0]), p) for p in SCHEMA_DIR.glob("[0-9][0-9][0-9]_*.sql"))


def migrate(con: duckdb.DuckDBPyConnection, lake: bool, name: str) -> None:
    """Apply the schema files this warehouse (`name` in errors) lacks, then replace the views if
    their files changed. Safe against another writer doing the same at the same time."""
    con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER, applied_at TIMESTAMPTZ DEFAULT now())")
    current = scalar(con, "SELECT coalesce(max(version), 0) FROM schema_version")
    known = migrations()
    newest = known[-1][0] if known else 0
    if current > newest:
        raise WarehouseTooNew(f"{name}: schema version {current} is newer than this code ({newest})")
    for version, path in known:
        if version > current:
            _apply(con, version, path, lake)
    _replace_views(con)


# A schema file whose first line is this changes only a DuckDB file (a lake records its version
# and runs nothing: what the file changes, a lake never had)
FILE_ONLY = "-- backend: file"


def _apply(con: duckdb.DuckDBPyConnection, version: int, path: Path, lake: bool) -> None:
    """One schema file in its own transaction, unless another writer applied it meanwhile."""
    con.execute("BEGIN TRANSACTION")
    try:
        if scalar(con, "SELECT coalesce(max(version), 0) FROM schema_version") < version:
            sql = path.read_text()
            if not lake:
                con.execute(sql)
            elif not sql.startswith(FILE_ONLY):
                con.execute(_NO_CONSTRAINTS.sub("", sql))
            con.execute("INSERT INTO schema_version (version) VALUES (?)", [version])
        con.execute("COMMIT")
    except Exception:
        rollback(con)
        raise


def _replace_views(con: duckdb.DuckDBPyConnection) -> None:
    # analyst views follow the code: replaced when their files changed (one catalog change, not
    # one per write: concurrent writers would conflict on it); a view built on another is
    # retried after the others, so files need no ordering
    digest = views_digest()
    have = con.execute("SELECT value FROM warehouse_meta WHERE key = 'views'").fetchone()
    if have and have[0] == digest:
        return
    con.execute("BEGIN TRANSACTION")
    try:
        _create_views(con)
        con.execute("DELETE FROM warehouse_meta WHERE key = 'views'")
        con.execute("INSERT INTO warehouse_meta VALUES ('views', ?)", [digest])
        con.execute("COMMIT")
    except Exception:
        rollback(con)
        raise


def _create_views(con: duckdb.DuckDBPyConnection) -> None:
    """Every view file; one built on a view not created yet is tried again after the others."""
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
