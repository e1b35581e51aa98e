"""Log lines in staging: how raw lines enter (`stage_lines`) and how they are normalised
(`normalize`: line prefixes, timestamps of every form, ranks; continuation lines inherit the time
of the line before them). Every text source ends here, whoever collected it.
"""

from __future__ import annotations

import os
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb
import zstandard

from workload_attribution.contracts.staging import MAX_TEXT, naive_utc, render, scalar

# How many lines before and after a continuation line are searched for the stamps around it.
CONTEXT_LINES = 48

# Compressed logs (rotated and exported) are known by their magic bytes; a name ending in one of
# COMPRESSED_SUFFIXES only claims to be compressed, and an archive that is not is reported.
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
COMPRESSED_SUFFIXES = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
# Decompression is streamed: compressed input is read this much at a time ...
READ_CHUNK = 1 << 16
# ... and a gzip step produces at most this much (a zstd step what READ_CHUNK of input holds).
GZIP_CHUNK = 1 << 20


@dataclass(frozen=True)
class Line:
    """One raw line as a connector got it. `collector_time` is the time the collector stamped
    (Loki, journald), used when the line itself carries none."""

    text: str
    lineno: int
    collector_time: datetime | None = None


def stage_lines(
    con: duckdb.DuckDBPyConnection,
    source: str,
    connector: str,
    node: str | None,
    ref: str,
    lines: Sequence[Line],
    total_lines: int | None = None,
) -> int:
    """Store one stream's lines (a file, a host's stream) as raw lines; returns the file id.
    `ref` is how evidence names the stream (a path, a query); `total_lines` how many lines the
    stream had before any pre-filter (for coverage), default len(lines)."""
    file_id = scalar(con, "SELECT nextval('file_seq')")
    con.execute(
        "INSERT INTO source_files VALUES (?, ?, ?, ?, ?, ?, 0, 0, NULL)",
        [file_id, source, connector, node, ref, len(lines) if total_lines is None else total_lines],
    )
    if lines:
        con.execute(
            "INSERT INTO raw_lines SELECT $f, unnest($n), unnest($l), NULL, unnest($t)",
            {
                "f": file_id,
                "n": [x.lineno for x in lines],
                "l": [x.text[:MAX_TEXT] for x in lines],
                "t": [naive_utc(x.collector_time) for x in lines],
            },
        )
    return file_id


def read_lenient(path: Path) -> tuple[str, int]:
    """Decode a file that is not valid UTF-8; returns (text, number of lines with bad bytes)."""
    data = path.read_bytes().replace(b"\x00", b"\xef\xbf\xbd")
    text = data.decode("utf-8", errors="replace")
    bad = sum(1 for line in text.split("\n") if "\ufffd" in line) if "\ufffd" in text else 0
    return text, bad


def compression_of(path: Path) -> str | None:
    """'gzip' or 'zstd' when the file is one (by its magic bytes), else None."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


@dataclass(frozen=True)
class PlainText:
    """A log file as plain text on disk. `path` is the file itself, or a temporary decompressed
    copy; None when nothing of it could be read. `problem` says why an archive could not be read
    to its end (corrupt, truncated, not what its name says); what came before the fault is kept."""

    path: Path | None
    problem: str | None = None


def _gunzip(src: Path, dst) -> None:
    """Member by member (`cat a.gz b.gz > c.gz` is valid gzip), each step producing at most
    GZIP_CHUNK bytes; zlib keeps what it decoded before a fault (the gzip module drops it)."""
    obj, fed = zlib.decompressobj(wbits=31), False
    with open(src, "rb") as f:
        while chunk := f.read(READ_CHUNK):
            while True:
                out = obj.decompress(chunk, GZIP_CHUNK)
                dst.write(out)
                fed = fed or bool(chunk)
                if obj.eof:  # a member ended; what follows is the next one
                    chunk, obj, fed = obj.unused_data, zlib.decompressobj(wbits=31), False
                    if not chunk:
                        break
                else:
                    chunk = obj.unconsumed_tail
                    if not chunk and len(out) < GZIP_CHUNK:  # a full step may leave output pending
                        break
    if fed and not obj.eof:
        raise EOFError("compressed data ends inside a member (truncated)")


def _unzstd(src: Path, dst) -> None:
    """Frame by frame (a file may hold several), so a truncated last frame is noticed."""
    dctx = zstandard.ZstdDecompressor()
    obj, fed = dctx.decompressobj(), False
    with open(src, "rb") as f:
        while chunk := f.read(READ_CHUNK):
            while chunk:
                dst.write(obj.decompress(chunk))
                fed = True
                if obj.eof:  # a frame ended; what follows is the next one
                    chunk, obj, fed = obj.unused_data, dctx.decompressobj(), False
                else:
                    chunk = b""
    if fed and not obj.eof:
        raise EOFError("compressed data ends inside a frame (truncated)")


@contextmanager
def plain_text(path: Path) -> Iterator[PlainText]:
    """The file readable as text: itself, or (gzip, zstd) a temporary decompressed copy, streamed
    to disk in chunks (never the whole file in memory) and deleted on leaving the block."""
    kind = compression_of(path)
    claimed = COMPRESSED_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        if claimed:
            yield PlainText(None, f"named {path.suffix} but not {claimed} data: not read")
        else:
            yield PlainText(path)
        return
    fd, name = tempfile.mkstemp(prefix="attribution-", suffix=".log")
    problem = None
    try:
        with os.fdopen(fd, "wb") as dst:
            try:
                (_gunzip if kind == "gzip" else _unzstd)(path, dst)
            except (OSError, EOFError, zlib.error, zstandard.ZstdError) as exc:
                reason = (str(exc).splitlines() or [type(exc).__name__])[0]
                problem = f"corrupt {kind} archive, read up to byte {dst.tell():,} of its content: {reason}"
        yield PlainText(Path(name) if not problem or os.path.getsize(name) else None, problem)
    finally:
        os.unlink(name)


def normalize(con: duckdb.DuckDBPyConnection, tz: str, ref, files_by_ref: dict[str, Path]) -> None:
    """raw_lines -> log_lines, then continuation lines take their time and interval from the
    stamped lines around them in their file (read again in DuckDB, only around those lines)."""
    con.execute(render("normalize_lines.sql", max_text=MAX_TEXT), {"tz": tz, "ref": ref})
    needing = [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT path FROM log_lines WHERE time_quality = 'none' AND path IS NOT NULL ORDER BY path"
        ).fetchall()
        if r[0] in files_by_ref
    ]
    if not needing:
        return
    con.execute("CREATE OR REPLACE TEMP TABLE line_window (path VARCHAR, lineno BIGINT, line VARCHAR)")
    for ref_path in needing:  # one statement per file
        with plain_text(files_by_ref[ref_path]) as plain:
            if plain.path is not None:
                _window(con, ref_path, plain.path)
    con.execute(render("inherit_time.sql", context=CONTEXT_LINES), {"tz": tz, "ref": ref})


def _window(con: duckdb.DuckDBPyConnection, ref_path: str, path: Path) -> None:
    """The lines around one file's lines with no time, into line_window."""
    try:
        con.execute(
            render("line_window.sql", files="read_text($path)", context=CONTEXT_LINES, max_text=MAX_TEXT),
            {"ref": ref_path, "path": str(path)},
        )
    except duckdb.InvalidInputException:  # not valid UTF-8: decoded leniently, as the scan did
        con.execute(
            render("line_window.sql", files="(SELECT $content AS content)", context=CONTEXT_LINES, max_text=MAX_TEXT),
            {"ref": ref_path, "content": read_lenient(path)[0]},
        )
