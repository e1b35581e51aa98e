"""Log lines in staging: how raw lines enter (`stage_lines`) and how they are normalised
(`normalize`: line prefixes, timestamps of every form, ranks; continuation lines inherit the time
of the line before them). Every text source ends here, whoever collected it.
"""

from __future__ import annotations

import bisect
import os
import stat
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb
import zstandard

from workload_attribution.contracts.staging import LONG_LINE, MAX_TEXT, naive_utc, render, scalar, sql

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
# Text files are read in pieces of whole lines of about this many bytes, each handed to DuckDB on
# its own: memory stays flat whatever the size of a file or of one of its lines.
PIECE_BYTES = 8 << 20
# A line is cut at read after this many bytes (at a character boundary); the rest of it is counted
# (`truncated_bytes`), never held.
MAX_LINE = LONG_LINE
# Names from the file system (file names, host names taken from them) are shown escaped and at
# most this long, in every output.
MAX_NAME = 160


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
        "INSERT INTO source_files VALUES (?, ?, ?, ?, ?, ?, 0, 0, NULL, NULL)",
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


def printable_name(name: str, most: int = MAX_NAME) -> str:
    """A name from the file system as every output shows it: control characters, and bytes that
    were not UTF-8 (surrogate escapes), as \\xNN; longer than `most`, its start and end around '...'."""
    out = []
    for c in name:
        o = ord(c)
        if 0xDC80 <= o <= 0xDCFF:  # an undecodable byte (os.fsdecode's surrogateescape)
            out.append(f"\\x{o - 0xDC00:02x}")
        elif o < 0x20 or 0x7F <= o < 0xA0 or 0xD800 <= o < 0xE000:
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}")
        else:
            out.append(c)
    text = "".join(out)
    if len(text) > most:
        keep = (most - 3) // 2
        text = f"{text[:keep]}...{text[-keep:]}"
    return text


def file_kind(path: Path) -> str | None:
    """None for a regular file (links followed); else what it is, in words ('a FIFO', 'a socket' ...)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a broken symlink" if os.path.islink(path) else "missing"
    except OSError as exc:
        return f"not readable ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    for test, words in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return words
    return "not a regular file"


def open_regular(path: Path):
    """Open a file for reading only if it is a regular file: never blocks (a FIFO swapped in after
    a check is refused, not waited on). Raises OSError naming what it is otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{printable_name(os.fspath(path))}: not a regular file, not read")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, limit: int) -> bytes:
    """A whole (small) regular file; a file larger than `limit` bytes is refused unread."""
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise OSError(f"{size:,} bytes, more than the {limit:,}-byte limit: not read")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"more than the {limit:,}-byte limit: not read")
    return data


@dataclass(frozen=True)
class Piece:
    """Whole lines of a file, joined by '\\n' (no final newline): lines first .. first + lines - 1.
    `lenient`: the bytes were not all UTF-8 (or held NULs) and were replaced by U+FFFD."""

    text: str
    first: int
    lines: int
    lenient: bool


@dataclass
class ReadStats:
    lines: int = 0
    cut_lines: int = 0  # lines cut at MAX_LINE while reading
    cut_bytes: int = 0  # what was dropped of them


def _decode(raw: bytes, first: int, lines: int) -> Piece:
    lenient = False
    if b"\x00" in raw:
        raw, lenient = raw.replace(b"\x00", b"\xef\xbf\xbd"), True
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text, lenient = raw.decode("utf-8", errors="replace"), True
    return Piece(text, first, lines, lenient)


def _cut_at(line: bytes, most: int) -> int:
    """Where to cut a line to at most `most` bytes without splitting a UTF-8 character."""
    cut = most
    while cut > 0 and line[cut] & 0xC0 == 0x80:
        cut -= 1
    return cut


def read_pieces(
    path: Path, stats: ReadStats | None = None, piece_bytes: int = PIECE_BYTES, max_line: int = MAX_LINE
) -> Iterator[Piece]:
    """A text file as pieces of whole lines, streamed: at most about 2 x piece_bytes + max_line bytes
    are held at a time, whatever the file (a 1 GiB line is read as its first max_line bytes, the rest
    counted in `stats` and skipped). Only a regular file is opened (never blocks on a FIFO)."""
    stats = stats if stats is not None else ReadStats()
    lineno, carry, skipping = 1, b"", False
    with open_regular(path) as fh:
        while block := fh.read(piece_bytes):
            if skipping:  # the rest of a line already cut
                nl = block.find(b"\n")
                if nl < 0:
                    stats.cut_bytes += len(block)
                    continue
                stats.cut_bytes += nl
                block, skipping = block[nl:], False
            data = carry + block if carry else block
            last = data.rfind(b"\n")
            if last < 0:
                carry = data
            else:
                whole, carry = data[:last], data[last + 1 :]
                n = whole.count(b"\n") + 1
                yield _decode(whole, lineno, n)
                lineno += n
                del whole, data
            if len(carry) > max_line:
                cut = _cut_at(carry, max_line)
                stats.cut_lines += 1
                stats.cut_bytes += len(carry) - cut
                carry, skipping = carry[:cut], True
        if carry or skipping:
            yield _decode(carry, lineno, 1)
            lineno += 1
    stats.lines = lineno - 1


def compression_of(path: Path) -> str | None:
    """'gzip' or 'zstd' when the file is one (by its magic bytes), else None."""
    with open_regular(path) as f:
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


@dataclass
class Normalized:
    """What normalising found for coverage: per source, lines whose stamp is outside 1970..2200
    (`far`), and each scanned file's first and last stamps (of its first and last lines; None
    when they have none) as (source, path, node, first, last) rows: `spans`."""

    far: dict[str, int]
    spans: list[tuple[str, str, str | None, datetime | None, datetime | None]]


def normalize(con: duckdb.DuckDBPyConnection, tz: str, ref, files_by_ref: dict[str, Path]) -> Normalized:
    """raw_lines -> log_lines, then continuation lines take their time and interval from the
    stamped lines around them in their file (read again, streamed, only around those lines).
    A stamp outside 1970..2200 is no time (the line is like one without a stamp), counted."""
    con.execute(sql("parse_lines.sql"), {"tz": tz, "ref": ref})
    n = scalar(con, "SELECT count(*) FROM parsed_lines WHERE kind = 'raw'")
    # the lines' ids, taken from obs_seq as one block (nothing else draws from it meanwhile) and
    # given in file order: an id says where a line stands, whatever order DuckDB reads them in
    last = scalar(con, "SELECT max(nextval('obs_seq')) FROM range($n)", {"n": n}) if n else 0
    con.execute(render("normalize_lines.sql", max_text=MAX_TEXT), {"base": (last or 0) - n})
    spans = [
        tuple(r)
        for r in con.execute(
            """
            SELECT s.source, s.path, s.node,
                   min(p.stamp) FILTER (WHERE p.kind = 'head' AND p.stamp >= TIMESTAMP '1970-01-02'
                                        AND p.stamp < TIMESTAMP '2200-01-01'),
                   max(p.stamp) FILTER (WHERE p.kind = 'tail' AND p.stamp >= TIMESTAMP '1970-01-02'
                                        AND p.stamp < TIMESTAMP '2200-01-01')
            FROM source_files s LEFT JOIN parsed_lines p ON p.file_id = s.file_id AND p.kind != 'raw'
            WHERE s.head IS NOT NULL
            GROUP BY ALL
            """
        ).fetchall()
    ]
    con.execute("DROP TABLE IF EXISTS parsed_lines")
    far = dict(
        con.execute("SELECT source, count(*) FROM log_lines WHERE time_quality = 'far' GROUP BY source").fetchall()
    )
    if far:
        con.execute("UPDATE log_lines SET time_quality = 'none' WHERE time_quality = 'far'")
    done = Normalized(far, spans)
    needing = [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT path FROM log_lines WHERE time_quality = 'none' AND path IS NOT NULL ORDER BY path"
        ).fetchall()
        if r[0] in files_by_ref
    ]
    if not needing:
        return done
    con.execute("CREATE OR REPLACE TEMP TABLE line_window (path VARCHAR, lineno BIGINT, line VARCHAR)")
    for ref_path in needing:  # the file read once, in pieces; only the pieces holding a window go to DuckDB
        with plain_text(files_by_ref[ref_path]) as plain:
            if plain.path is not None:
                _window(con, ref_path, plain.path)
    con.execute(render("inherit_time.sql", context=CONTEXT_LINES), {"tz": tz, "ref": ref})
    return done


def _window(con: duckdb.DuckDBPyConnection, ref_path: str, path: Path) -> None:
    """The lines around one file's lines with no time, into line_window."""
    need = [
        r[0]
        for r in con.execute(
            f"""SELECT DISTINCT unnest(range(greatest(1, lineno - {CONTEXT_LINES}), lineno + {CONTEXT_LINES} + 1)) AS n
                FROM log_lines WHERE path = $ref AND time_quality = 'none' ORDER BY n""",
            {"ref": ref_path},
        ).fetchall()
    ]
    if not need:
        return
    query = render("line_window.sql", max_text=MAX_TEXT)
    try:
        for piece in read_pieces(path):
            last = piece.first + piece.lines - 1
            lo = bisect.bisect_left(need, piece.first)
            hi = bisect.bisect_right(need, last)
            if lo < hi:
                con.execute(query, {"ref": ref_path, "content": piece.text, "first": piece.first, "n": need[lo:hi]})
            if hi >= len(need):
                break
    except OSError:  # gone or swapped since the scan: those lines keep no time
        return
