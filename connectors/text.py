"""Text log files -> staging: DuckDB reads and splits whole files, keeps pre-filtered lines.

Lines are never held in Python lists: DuckDB splits each file and applies the rules' literal
pre-filter; only matching lines (with their line numbers) are stored. Files that are not valid
UTF-8 are decoded leniently (invalid bytes become U+FFFD and are counted), never dropped.
Compressed files (gzip, zstd: rotated and exported logs) are decompressed to a temporary file in
chunks and scanned the same way; a corrupt archive is reported (what could be read of it is
scanned), never fatal.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from workload_attribution.contracts.lines import COMPRESSED_SUFFIXES, compression_of, plain_text, read_lenient
from workload_attribution.contracts.staging import LONG_LINE, contains_any, one, render, scalar

SQL_DIR = Path(__file__).resolve().parent / "sql"
# Bytes per read_text batch: bounds memory when an attempt has thousands of large files.
BATCH_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class TextFile:
    path: Path  # where to read it
    ref: str  # how evidence names it (path relative to the bundle)
    node: str | None


@dataclass
class ScanStats:
    files: int = 0
    lines: int = 0
    hits: int = 0
    bad_lines: int = 0
    long_lines: int = 0
    nodes: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)  # "<ref>: why" for archives not read to their end


def scan_files(
    con: duckdb.DuckDBPyConnection, files: list[TextFile], source: str, connector: str, prefilter: list[str]
) -> ScanStats:
    stats = ScanStats()
    predicate = contains_any("x", prefilter)
    batch: list[TextFile] = []
    size = 0
    for f in files:
        if compression_of(f.path) or f.path.suffix.lower() in COMPRESSED_SUFFIXES:
            _scan_archive(con, f, source, connector, predicate, stats)
            continue
        batch.append(f)
        size += f.path.stat().st_size
        if size >= BATCH_BYTES:
            _scan_batch(con, batch, source, connector, predicate, stats)
            batch, size = [], 0
    if batch:
        _scan_batch(con, batch, source, connector, predicate, stats)
    return stats


def _scan_archive(con, f: TextFile, source: str, connector: str, predicate: str, stats: ScanStats) -> None:
    """A compressed file: decompressed to a temporary file, scanned alone under its own name."""
    with plain_text(f.path) as plain:
        if plain.problem:
            stats.corrupt.append(f"{f.ref}: {plain.problem}")
        if plain.path is not None:
            _scan_batch(con, [TextFile(path=plain.path, ref=f.ref, node=f.node)], source, connector, predicate, stats)


def _scan_batch(con, batch: list[TextFile], source: str, connector: str, predicate: str, stats: ScanStats) -> None:
    """Scan a batch of files and store what they hold, all in SQL: the hit lines never pass
    through Python, and a batch costs a handful of statements whatever its number of files."""
    query = render("scan_text.sql", SQL_DIR, files="read_text($paths)", prefilter=predicate, max_line=LONG_LINE)
    table = f"scan_{uuid.uuid4().hex}"
    try:
        con.execute(
            f"""
            CREATE TEMP TABLE {table} AS
            SELECT nextval('file_seq') AS file_id, f.node, f.ref, s.*
            FROM ({query}) s JOIN (SELECT unnest($paths) AS filename, unnest($nodes) AS node, unnest($refs) AS ref) f
                 USING (filename)
        """,
            {"paths": [str(f.path) for f in batch], "nodes": [f.node for f in batch], "refs": [f.ref for f in batch]},
        )
    except duckdb.InvalidInputException:
        for f in batch:  # some file is not valid UTF-8: one by one, leniently where needed
            try:
                row = one(con, query, {"paths": [str(f.path)]})
                bad = 0
            except duckdb.InvalidInputException:
                text, bad = read_lenient(f.path)
                lenient = render(
                    "scan_text.sql",
                    SQL_DIR,
                    files="(SELECT $name AS filename, $content AS content)",
                    prefilter=predicate,
                    max_line=LONG_LINE,
                )
                row = one(con, lenient, {"name": str(f.path), "content": text})
            _store(con, f, row, bad, source, connector, stats)
        return
    try:
        con.execute(
            f"""
            INSERT INTO source_files
            SELECT file_id, $source, $connector, node, ref, n_lines, 0, n_long, tail FROM {table}
        """,
            {"source": source, "connector": connector},
        )
        con.execute(f"""
            INSERT INTO raw_lines
            SELECT file_id, unnest(hit_lineno), unnest(hit_line), NULL, NULL FROM {table} WHERE len(hit_lineno) > 0
        """)
        files, lines, hits, long_lines, nodes = one(
            con,
            f"""
            SELECT count(*), coalesce(sum(n_lines), 0), coalesce(sum(len(hit_lineno)), 0), coalesce(sum(n_long), 0),
                   list(DISTINCT node) FILTER (WHERE node IS NOT NULL AND n_lines > 0)
            FROM {table}
        """,
        )
    finally:
        con.execute(f"DROP TABLE IF EXISTS {table}")
    stats.files += files
    stats.lines += lines
    stats.hits += hits
    stats.long_lines += long_lines
    stats.nodes.update(nodes or [])


def _store(con, f: TextFile, row, bad: int, source: str, connector: str, stats: ScanStats) -> None:
    _, n_lines, n_long, tail, hit_lineno, hit_line = row
    file_id = scalar(con, "SELECT nextval('file_seq')")
    con.execute(
        "INSERT INTO source_files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [file_id, source, connector, f.node, f.ref, n_lines, bad, n_long, tail],
    )
    if hit_lineno:
        con.execute(
            "INSERT INTO raw_lines SELECT $fid, unnest($n), unnest($l), NULL, NULL",
            {"fid": file_id, "n": hit_lineno, "l": hit_line},
        )
    stats.files += 1
    stats.lines += n_lines
    stats.hits += len(hit_lineno or [])
    stats.bad_lines += bad
    stats.long_lines += n_long
    if f.node and n_lines:
        stats.nodes.add(f.node)
