"""Reading log files safely: only regular files (never blocking on a FIFO), in pieces of whole
lines (memory flat whatever the file or one of its lines), gzip and zstd streamed to a temporary
copy, and file-system names shown escaped."""

from __future__ import annotations

import itertools
import os
import stat
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from workload_attribution.staging.database import LONG_LINE

# Compressed logs (rotated and exported) are known by their magic bytes; a name ending in one of
# COMPRESSED_SUFFIXES only claims to be compressed, and an archive that is not is reported.
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
COMPRESSED_SUFFIXES = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
# Decompression is streamed: compressed input is read this much at a time ...
READ_CHUNK = 1 << 16
# ... and a gzip step produces at most this much (a zstd step what ZSTD_STEP of input holds).
GZIP_CHUNK = 1 << 20
# A compressed member is decompressed up to this many bytes and lines, whichever comes first: a
# bomb (a few KB that expand to GiBs of short lines) stops there and its coverage says so. A day of
# a busy host's syslog is well under both; what is cut is the newest part of the file.
DECOMPRESSED_MAX_BYTES = 256 << 20
DECOMPRESSED_MAX_LINES = 4_000_000
# A zstd step decodes all its input at once: a KiB of a bomb (at most ~32,000:1, runs of one byte)
# is 32 MiB, 64 KiB would be 2 GiB
ZSTD_STEP = 1 << 10
# Text files are read in pieces of whole lines of about this many bytes, each handed to DuckDB on
# its own: memory stays flat whatever the size of a file or of one of its lines.
PIECE_BYTES = 8 << 20
# A line is cut at read after this many bytes (at a character boundary); the rest of it is counted
# (`truncated_bytes`), never held.
MAX_LINE = LONG_LINE
# Names from the file system (file names, host names taken from them) are shown escaped and at
# most this long, in every output.
MAX_NAME = 160


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


def open_regular(path: Path) -> BinaryIO:
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


def decode(raw: bytes) -> tuple[str, bool]:
    """Bytes as text, and whether they were not all UTF-8 (or held NULs): bad bytes become U+FFFD."""
    lenient = False
    if b"\x00" in raw:
        raw, lenient = raw.replace(b"\x00", b"\xef\xbf\xbd"), True
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text, lenient = raw.decode("utf-8", errors="replace"), True
    return text, lenient


# Line breaks are counted a block at a time, each block the way its lines are fastest counted:
# bytes.count of one byte tests every byte in a loop (~0.4 ns a byte, whatever the lines), while
# bytes.replace finds each break with memchr and copies what lies between (~0.2 ns a byte over
# log lines of ~100 bytes, but ~11 ns a break: 25x slower than count over nothing but breaks).
# As GNU `wc -l` does, a block is counted by replace when the lines of the block before it
# averaged MEMCHR_LINE_BYTES or more, else by count; the first by count. A block that replace
# counted and found shorter lines in sends the next WRONG_GUESS_WAIT blocks to count whatever they
# hold, so no input costs more than ~3x count (crafted blocks of long lines and of bare breaks
# alternating). Blocks of 16 KiB stay in the CPU's caches while replace copies them. Over 40 files
# of the bench (32.7 MB, lines of ~105 bytes): 13.6 ms by count, 9.3 ms so.
BREAK_BLOCK = 1 << 14
MEMCHR_LINE_BYTES = 32
WRONG_GUESS_WAIT = 8


def line_breaks(data: bytes, start: int = 0, end: int | None = None) -> int:
    """How many b'\\n' data[start:end] holds (what data.count(b'\\n', start, end) says, faster)."""
    end = len(data) if end is None else min(end, len(data))
    total, by_replace, wait = 0, False, 0
    for at in range(start, end, BREAK_BLOCK):
        stop = min(at + BREAK_BLOCK, end)
        if by_replace:
            block = data[at:stop]
            n = len(block) - len(block.replace(b"\n", b""))
        else:
            n = data.count(b"\n", at, stop)
        total += n
        memchr_pays = stop - at >= MEMCHR_LINE_BYTES * (n + 1)
        if by_replace and not memchr_pays:  # a wrong guess: the next blocks are counted
            wait = WRONG_GUESS_WAIT
        by_replace, wait = memchr_pays and wait == 0, max(wait - 1, 0)
    return total


def clean_utf8(raw: bytes) -> bool:
    """Whether `decode` would keep the bytes as they are (UTF-8, no NUL): ASCII is told without
    decoding (~20 GB/s)."""
    if b"\x00" in raw:
        return False
    if raw.isascii():
        return True
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _decode(raw: bytes, first: int, lines: int) -> Piece:
    text, lenient = decode(raw)
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
    for raw in read_raw_pieces(path, stats, piece_bytes, max_line):
        yield _decode(raw.data, raw.first, raw.lines)


@dataclass(frozen=True)
class RawPiece:
    """A Piece before decoding: whole lines as bytes, joined by b'\\n' (no final newline)."""

    data: bytes
    first: int
    lines: int


def read_raw_pieces(
    path: Path, stats: ReadStats | None = None, piece_bytes: int = PIECE_BYTES, max_line: int = MAX_LINE
) -> Iterator[RawPiece]:
    """read_pieces' pieces as bytes, for a reader that decodes only some lines (tasks/templates.py)."""
    stats = stats if stats is not None else ReadStats()
    lineno = 1
    for data in read_blocks(path, stats, piece_bytes, max_line):
        n = line_breaks(data) + 1
        yield RawPiece(data, lineno, n)
        lineno += n
    stats.lines = lineno - 1


def read_blocks(
    path: Path, stats: ReadStats | None = None, piece_bytes: int = PIECE_BYTES, max_line: int = MAX_LINE
) -> Iterator[bytes]:
    """read_raw_pieces' pieces unnumbered (their lines not counted, `stats.lines` not set), for a
    reader that counts them in a pass it makes anyway (connectors/text.py: counting a piece's line
    breaks costs as much as Hyperscan's scan of it)."""
    stats = stats if stats is not None else ReadStats()
    carry, skipping = b"", False
    with open_regular(path) as fh:
        blocks: Iterator[bytes] = iter(lambda: fh.read(piece_bytes), b"")
        size = os.fstat(fh.fileno()).st_size
        if 1 < size <= piece_bytes:
            # A file of one piece is read as all but its last byte, then that byte: when it is the
            # last line's break (and the file did not grow), the first read is the piece as it is.
            # Cutting the break off the whole file copied every byte again (~0.1 s at 10M lines).
            head, end = fh.read(size - 1), fh.read(1)
            more = fh.read(1) if end == b"\n" else b""
            if end == b"\n" and not more and len(head) == size - 1:
                yield head
                return
            blocks = itertools.chain([head + end + more], blocks)
        for block in blocks:
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
                del data, block  # only the piece is held while it is scanned
                yield whole
                del whole
            if len(carry) > max_line:
                cut = _cut_at(carry, max_line)
                stats.cut_lines += 1
                stats.cut_bytes += len(carry) - cut
                carry, skipping = carry[:cut], True
        if carry or skipping:
            yield carry


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


class OverBudget(Exception):
    """A compressed file decompressed to more than its budget: what came before it is kept."""


class BoundedWriter:
    """Writes to `dst` until DECOMPRESSED_MAX_BYTES or _LINES; then writes the whole lines that fit
    and raises OverBudget."""

    def __init__(self, dst: Any) -> None:
        self.dst, self.bytes_left, self.lines_left = dst, DECOMPRESSED_MAX_BYTES, DECOMPRESSED_MAX_LINES

    def write(self, data: bytes) -> None:
        lines = line_breaks(data)
        if len(data) <= self.bytes_left and lines <= self.lines_left:
            self.dst.write(data)
            self.bytes_left, self.lines_left = self.bytes_left - len(data), self.lines_left - lines
            return
        end = _end_of_lines(data, min(len(data), self.bytes_left), self.lines_left)
        if end == self.bytes_left:  # the byte budget ends inside a line: keep the lines before it
            end = data.rfind(b"\n", 0, end) + 1 or end
        self.dst.write(memoryview(data)[:end])
        raise OverBudget(
            f"decompressed past its budget ({DECOMPRESSED_MAX_BYTES:,} bytes or {DECOMPRESSED_MAX_LINES:,} lines): "
            "the rest not read"
        )


def _end_of_lines(data: bytes, end: int, lines: int) -> int:
    """Where `data[:end]` ends at the latest after its first `lines` lines (without copying it)."""
    at, step = 0, 1 << 16
    while at < end:
        block = min(step, end - at)
        found = data.count(b"\n", at, at + block)
        if found >= lines:  # the last line allowed ends in this block
            for _ in range(lines):
                at = data.index(b"\n", at) + 1
            return at
        at, lines = at + block, lines - found
    return end


def _gunzip(src: Path, dst: BoundedWriter) -> None:
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


def _unzstd(src: Path, dst: BoundedWriter) -> None:
    """Frame by frame (a file may hold several), so a truncated last frame is noticed."""
    import zstandard  # ~7 ms a new process pays only for a zstd file

    dctx = zstandard.ZstdDecompressor()
    obj, fed = dctx.decompressobj(), False
    with open(src, "rb") as f:
        while chunk := f.read(ZSTD_STEP):
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
    import zstandard  # as _unzstd: imported for a compressed file only

    fd, name = tempfile.mkstemp(prefix="attribution-", suffix=".log")
    problem = None
    try:
        with os.fdopen(fd, "wb") as dst:
            try:
                (_gunzip if kind == "gzip" else _unzstd)(path, BoundedWriter(dst))
            except OverBudget as exc:
                problem = f"{kind} archive {exc}"
            except (OSError, EOFError, zlib.error, zstandard.ZstdError) as exc:
                reason = (str(exc).splitlines() or [type(exc).__name__])[0]
                problem = f"corrupt {kind} archive, read up to byte {dst.tell():,} of its content: {reason}"
        yield PlainText(Path(name) if not problem or os.path.getsize(name) else None, problem)
    finally:
        os.unlink(name)
