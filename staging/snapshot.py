"""Tables of an attempt's staging database as canonical text, and back: what the evidence archive
keeps of an attempt (warehouse/archive.py) and what a replay (tasks/replay.py) loads.

The text is JSON lines: for each table a header line `{"table": ..., "rows": N, "columns": {name:
type}}`, then its N rows, one JSON object a line, in a fixed order (their ids), so the same
evidence gives the same bytes and the same digest. DuckDB writes and reads every line (to_json,
from_json): no row is built in Python. A JSON column travels as its text (JSON `null` stays
`null`, not SQL NULL).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator

import duckdb

# The tables of staged evidence and the order their rows are written in. raw_lines is left out:
# normalising made log_lines from it, and nothing after normalising reads it.
EVIDENCE_TABLES = {
    "attempt": "cluster",
    "source_files": "file_id",
    "log_lines": "obs_id",
    "samples": "obs_id",
    "records": "obs_id",
    "topology": "switch, port, peer",
}
BATCH_ROWS = 20_000


def dump(con: duckdb.DuckDBPyConnection, tables: dict[str, str], write: Callable[[bytes], None]) -> dict[str, int]:
    """Write each table (name -> ORDER BY columns) as canonical JSON lines; rows written per table."""
    counts: dict[str, int] = {}
    for table, order in tables.items():
        columns = _columns(con, table)
        n = con.execute(f"SELECT count(*) FROM {table}").fetchone()
        counts[table] = int(n[0]) if n else 0
        write(json.dumps({"table": table, "rows": counts[table], "columns": columns}).encode() + b"\n")
        if not counts[table]:
            continue
        select = ", ".join(f'"{c}"::VARCHAR AS "{c}"' if t == "JSON" else f'"{c}"' for c, t in columns.items())
        # sorted as JSON text by its key columns: DuckDB sorting every column of the rows, then
        # making each row's text, cost twice as much (samples of an attempt: 11.7 -> 6.1 ms)
        keys = ", ".join(f"t.{key.strip()}" for key in order.split(","))
        cur = con.execute(f"SELECT to_json(t)::VARCHAR FROM (SELECT {select} FROM {table}) t ORDER BY {keys}")
        while batch := cur.fetchmany(BATCH_ROWS):
            write(b"".join(row[0].encode() + b"\n" for row in batch))
    return counts


def load(
    con: duckdb.DuckDBPyConnection, lines: Iterable[bytes], only: set[str] | None = None, into: str | None = None
) -> dict[str, int]:
    """Insert what dump wrote into the tables of the same names (those of `only`, when given), or
    all of it into table `into`; columns the table no longer has are left out, columns it gained
    stay NULL. Rows per table."""
    counts: dict[str, int] = {}
    it = iter(lines)
    for header_line in it:
        if not header_line.strip():
            continue
        header = json.loads(header_line)
        table, n = header["table"], int(header["rows"])
        rows = _take(it, n)
        if only is not None and table not in only:
            for _ in rows:
                pass
            continue
        counts[table] = _insert(con, into or table, header["columns"], rows)
    return counts


def _take(it: Iterator[bytes], n: int) -> Iterator[bytes]:
    for _ in range(n):
        yield next(it)


def _insert(con: duckdb.DuckDBPyConnection, table: str, written: dict[str, str], rows: Iterator[bytes]) -> int:
    have = _columns(con, table)
    shape = {c: ("VARCHAR" if have[c] == "JSON" else have[c]) for c in written if c in have}
    names = ", ".join(f'"{c}"' for c in shape)
    # the rows as one string, split and parsed by DuckDB: a Python list of strings costs ten times more
    query = (
        f"INSERT INTO {table} ({names}) SELECT {names} FROM "
        "(SELECT unnest(from_json(line, $shape)) FROM (SELECT unnest(string_split($p, chr(10))) AS line))"
    )
    total, batch = 0, []
    for row in rows:
        batch.append(row.rstrip(b"\n"))
        if len(batch) == BATCH_ROWS:
            total += _insert_batch(con, query, shape, batch)
            batch = []
    if batch:
        total += _insert_batch(con, query, shape, batch)
    return total


def _insert_batch(con: duckdb.DuckDBPyConnection, query: str, shape: dict[str, str], batch: list[bytes]) -> int:
    con.execute(query, {"p": b"\n".join(batch).decode(), "shape": json.dumps(shape)})
    return len(batch)


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, str]:
    return {str(r[0]): str(r[1]) for r in con.execute(f"DESCRIBE {table}").fetchall()}


# The evidence tables a source's rows are in, by their `source` column; topology has none (its source is "topology").
SOURCED_TABLES = ("source_files", "log_lines", "samples", "records")


def restore_evidence(con: duckdb.DuckDBPyConnection, lines: Iterable[bytes], leave_out: set[str]) -> None:
    """An attempt's archived evidence in place of what its staging database holds (its scope row
    stays), but for the sources `leave_out` (collected again); the id sequences go on after the
    restored ids, so what is collected next takes new ones."""
    for table in (*SOURCED_TABLES, "topology"):
        con.execute(f"DELETE FROM {table}")
    load(con, lines, only={*SOURCED_TABLES, "topology"})
    for table in SOURCED_TABLES:
        con.execute(f"DELETE FROM {table} WHERE source IN (SELECT unnest($s))", {"s": sorted(leave_out)})
    if "topology" in leave_out:
        con.execute("DELETE FROM topology")
    ids = con.execute(
        "SELECT greatest((SELECT max(obs_id) FROM log_lines), (SELECT max(obs_id) FROM samples), "
        "(SELECT max(obs_id) FROM records)), (SELECT max(file_id) FROM source_files)"
    ).fetchone()
    obs, files = (ids or (None, None))[0] or 0, (ids or (None, None))[1] or 0
    con.execute(f"DROP SEQUENCE IF EXISTS obs_seq; CREATE SEQUENCE obs_seq START {int(obs) + 1}")
    con.execute(f"DROP SEQUENCE IF EXISTS file_seq; CREATE SEQUENCE file_seq START {int(files) + 1}")
