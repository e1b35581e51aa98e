"""Text log files -> staging: read in pieces, split and pre-filtered in DuckDB, only hits kept.

Lines are never held in Python lists: a file is read in pieces of whole lines (staging/files.py
read_pieces: about PIECE_BYTES at a time, a line cut at MAX_LINE with the rest counted), DuckDB
splits each piece and applies the rules' literal pre-filter; only matching lines (with their line
numbers) are stored. Memory stays flat whatever the size of a file or a line. Bytes that are not
UTF-8 (and NULs) become U+FFFD and their lines are counted, never dropped. Compressed files (gzip,
zstd: rotated and exported logs) are decompressed to a temporary file in chunks and scanned the
same way; a corrupt archive is reported (what could be read of it is scanned), never fatal.

Per file, the first and last lines are kept too: a file whose lines are all blank, or whose
stamped first and last lines both lie outside the attempt's window (with WINDOW_SLACK), says
nothing about the attempt, and its coverage says so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from workload_attribution.contracts.models import AttemptScope, Coverage, CoverageStatus, Details
from workload_attribution.staging.database import contains_any, naive_utc, render
from workload_attribution.staging.files import (
    COMPRESSED_SUFFIXES,
    MAX_LINE,
    PIECE_BYTES,
    Piece,
    PlainText,
    ReadStats,
    clean_utf8,
    compression_of,
    decode,
    plain_text,
    read_blocks,
    read_pieces,
)
from workload_attribution.staging.prefilter import LineMatcher, engine, matcher

SQL_DIR = Path(__file__).resolve().parent / "sql"
# A file whose stamped lines all lie further than this before the attempt's start or after its end
# is outside the attempt's window.
WINDOW_SLACK = timedelta(hours=1)
HEAD_LINES = 8
# A head or tail line is kept this long (characters).
SHOWN = 4096


class LogFileDetails(Details):
    """A bundle's log folder (logs/<source>/), as scanned."""

    matched_lines: int
    lines_with_bad_bytes: int
    long_lines: int
    truncated_bytes: int
    missing_nodes: list[str]
    refused: list[str]
    not_read: list[str]
    corrupt_archives: list[str]
    blank_files: list[str]
    outside_window: list[str] = []  # filled once the lines' times are parsed (apply_spans)


class HostFileDetails(Details):
    """Per-host files of a shared filesystem (the files connector), as scanned."""

    matched_lines: int
    missing_nodes: list[str]
    long_lines: int
    truncated_bytes: int
    not_read: list[str]
    blank_files: list[str]
    outside_window: list[str] = []  # filled once the lines' times are parsed (apply_spans)


@dataclass(frozen=True)
class TextFile:
    path: Path  # where to read it
    ref: str  # how evidence names it (path relative to the bundle, escaped)
    node: str | None


@dataclass
class ScanStats:
    files: int = 0
    lines: int = 0
    hits: int = 0
    bad_lines: int = 0
    long_lines: int = 0
    truncated_bytes: int = 0
    nodes: set[str] = field(default_factory=set)  # nodes with a file saying something about the attempt
    errors: list[str] = field(default_factory=list)  # "<ref>: why" for files that could not be read
    corrupt: list[str] = field(default_factory=list)  # "<ref>: why" for archives not read to their end
    blank: list[str] = field(default_factory=list)  # files with no line that is not blank

    @property
    def usable(self) -> bool:
        """Some file read had a line about the attempt (files counts those read to their end)."""
        return self.files > len(self.blank)


@dataclass
class _File:
    f: TextFile
    file_id: int
    lines: int = 0
    nonblank: bool = False  # some line holds more than blanks
    bad: int = 0
    long: int = 0
    cut_bytes: int = 0
    head: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)
    error: str | None = None


def scan_files(
    con: duckdb.DuckDBPyConnection, files: list[TextFile], source: str, connector: str, prefilter: list[str]
) -> ScanStats:
    """Scan the files into raw_lines/source_files (with each file's first and last lines: whether
    it lies outside the attempt's window is told once every line's time is parsed, `apply_spans`)."""
    stats = ScanStats()
    # Hyperscan finds the lines holding a literal and only those go to DuckDB, numbered, which the
    # query keeps whole; without it DuckDB splits every piece and tests every line
    # (staging/prefilter.py). Either way the same statement numbers, trims and cuts what is kept.
    # A piece holding a runtime's partial records joins them first, then pre-filters in DuckDB.
    lines = matcher(tuple(sorted(set(prefilter))), PARTIAL_MARKERS) if engine() == "hyperscan" else None
    queries = {
        name: render(
            name,
            SQL_DIR,
            lines=_KEPT_LINES if lines is not None else _PIECE_LINES,
            pieces=_PIECES,
            prefilter="true" if lines is not None and name == "scan_text.sql" else contains_any("x", prefilter),
            max_line=MAX_LINE,
        )
        for name in ("scan_text.sql", "scan_partial.sql")
    }
    # the files' ids drawn in one statement (one per file cost a statement each: 2,000 files, 0.2 s)
    ids = sorted(r[0] for r in con.execute("SELECT nextval('file_seq') FROM range($n)", {"n": len(files)}).fetchall())
    batch: list[tuple[_File, Piece]] = []
    size = 0
    kept = _Kept(con, queries["scan_text.sql"])
    odd = _Odd(con)
    done: list[_File] = []
    for f, file_id in zip(files, ids, strict=True):
        state = _File(f, file_id)
        done.append(state)
        read = ReadStats()
        try:
            with plain_text(f.path) if _compressed(f.path) else nullcontext(PlainText(f.path)) as plain:
                if plain.problem:
                    stats.corrupt.append(f"{f.ref}: {plain.problem}")
                if plain.path is not None:
                    pieces = (
                        whole_records(read_pieces(plain.path, read, PIECE_BYTES, MAX_LINE))
                        if lines is None
                        else _prefiltered(plain.path, read, state, lines, kept, odd)
                    )
                    for piece in pieces:
                        _facts(state, piece.text, piece.lines)
                        batch.append((state, piece))
                        size += len(piece.text)
                        if size >= PIECE_BYTES:
                            _scan(con, queries, batch, lines, kept, odd)
                            batch, size = [], 0
        except OSError as exc:  # unreadable, vanished, swapped for a FIFO: this file, not the source
            state.error = f"{f.ref}: {exc.strerror or exc}"
        state.long += read.cut_lines
        state.cut_bytes += read.cut_bytes
    if batch:
        _scan(con, queries, batch, lines, kept, odd)
    kept.flush()
    odd.flush()
    _record(con, done, source, connector, stats)
    for s in done:
        if s.error:
            stats.errors.append(s.error)
        elif s.f.node and s.nonblank:
            stats.nodes.add(s.f.node)
    return stats


# A container runtime's partial record: CRI's "P" tag after its time, Docker json-file's `log`
# without its final newline (its fields come in the order Docker's JSONLog declares them).
_CRI_PARTIAL = re.compile(r"^\S+ (std(?:out|err)) P(?: |$)")
_DOCKER_PARTIAL = re.compile(r'^\{"log":"(?:[^"\\]|\\.)*(?<!\\n)","stream":"(\w*)"')
_CRI_RECORD = re.compile(r"^\S+ (std(?:out|err)) [PF](?: |$)")
_DOCKER_RECORD = re.compile(r'^\{"log":"(?:[^"\\]|\\.)*","stream":"(\w*)"')
# A run of parts carried to the next piece grows to at most this before it is scanned as it is.
MAX_CARRY = 4 * MAX_LINE
# Walking back from a piece's end, a stream not met in this many lines has no part open.
OPEN_LOOKBACK = 256


# What a piece holding a runtime's partial record holds (Hyperscan looks for them in the same pass
# that keeps lines: three more searches of every piece cost ~0.14 s a million lines)
PARTIAL_MARKERS = (" stdout P", " stderr P", '{"log":"')


def holds_partial_records(text: str, marked: bool | None = None) -> bool:
    """Whether a piece may hold a runtime's partial record (cheap tests first: most pieces hold none).
    `marked`: whether it holds one of PARTIAL_MARKERS, when a scan already said."""
    if marked is False:
        return False
    if " stdout P" in text or " stderr P" in text:
        return True
    return '{"log":"' in text and re.search(r'(?<!\\n)","stream":"', text) is not None


def _partial_stream(line: str) -> str | None:
    """The stream of a partial record ('cri:stderr', 'docker:stdout'), None for any other line."""
    m = _CRI_PARTIAL.match(line)
    if m:
        return f"cri:{m.group(1)}"
    m = _DOCKER_PARTIAL.match(line) if line.startswith('{"log":"') else None
    return f"docker:{m.group(1)}" if m else None


def whole_records(pieces: Iterator[Piece]) -> Iterator[Piece]:
    """Pieces that never end inside a line a runtime split: a piece ending in partial records
    gives them, and the lines of other streams among them, to the next piece (up to MAX_CARRY)."""
    records = _Records()
    for p in pieces:
        yield from records.push(p)
    yield from records.end()


class _Records:
    """whole_records one piece at a time: `carry` is the open run held for the next piece."""

    def __init__(self) -> None:
        self.carry: Piece | None = None

    def push(self, p: Piece) -> list[Piece]:
        if self.carry is not None:
            c, self.carry = self.carry, None
            p = Piece(f"{c.text}\n{p.text}", c.first, c.lines + p.lines, c.lenient or p.lenient)
        cut = _open_tail(p.text)
        if cut is None or len(p.text) - cut > MAX_CARRY:
            return [p]
        n = p.text.count("\n", cut) + 1
        self.carry = Piece(p.text[cut:], p.first + p.lines - n, n, p.lenient)
        return [Piece(p.text[: cut - 1], p.first, p.lines - n, p.lenient)] if cut > 0 else []

    def end(self) -> list[Piece]:
        carry, self.carry = self.carry, None
        return [carry] if carry is not None else []


def _prefiltered(path: Path, read: ReadStats, s: _File, lines: LineMatcher, kept: _Kept, odd: _Odd) -> Iterator[Piece]:
    """A file read for Hyperscan: each piece is scanned as the file holds it, bytes never decoded
    but for the lines kept (and a piece that may hold bad bytes or long lines, which DuckDB counts),
    its lines counted on the way (LineMatcher.scan_bytes), its facts taken and its kept lines
    gathered here. Only what this pass cannot finish is given back, as text and whole records
    (whole_records): a piece holding a marker of a runtime's partial records, and those after it
    while a run is open."""
    records = _Records()
    first = 1
    for data in read_blocks(path, read, PIECE_BYTES, MAX_LINE):
        if records.carry is None:
            clean = clean_utf8(data)
            found, marked, n = lines.scan_bytes(data, clean)
            if not marked:
                _facts(s, data, n)
                kept.add(s.file_id, first, found)
                lenient, long = not clean, _may_hold_long(data)
                if lenient or long:
                    odd.add(s, Piece(decode(data)[0], first, n, lenient), long)
                first += n
                continue
        text, lenient = decode(data)
        n = text.count("\n") + 1
        yield from records.push(Piece(text, first, n, lenient))
        first += n
    yield from records.end()
    read.lines = first - 1


def _open_tail(text: str) -> int | None:
    """Where the first run of partial records still open at the piece's end starts (a line's
    offset), None when none is: walked back from the end until each stream met has its latest
    record whole, or its open run's start (both streams met, or OPEN_LOOKBACK lines with none open),
    and the record before each one carried is met: a run of one stream that closed after the start
    (another stream's run opened between its parts) is carried whole, from its first part."""
    # the walk below stops OPEN_LOOKBACK lines up unless it met a partial record by then: with none
    # in those lines (most pieces) no run is open, and the rest of the piece need not be searched
    if not holds_partial_records(text[_lines_up(text, OPEN_LOOKBACK, MAX_CARRY) :]):
        return None
    latest: dict[str, bool] = {}  # stream -> its run still open (walking back: not yet its start)
    nearest: dict[str, int] = {}  # stream -> where its record met last (walking back) starts
    start, end, walked = None, len(text), 0
    while end >= 0 and len(text) - end <= MAX_CARRY:
        nl = text.rfind("\n", 0, end)
        line = text[nl + 1 : end]
        stream = _stream_of(line)
        if stream is not None:
            partial = _partial_stream(line) is not None
            if stream not in latest or latest[stream]:
                latest[stream] = partial
                if partial:
                    start = nl + 1
            elif partial and start is not None and nearest[stream] >= start:
                # a run of this stream closed after where the carry starts (another stream's run
                # open between its parts): cut there, the two parts of one line would be apart
                latest[stream] = True
                start = nl + 1
            nearest[stream] = nl + 1
        walked += 1
        # done when each stream met has its latest record whole or its open run's start, and what
        # precedes every record carried is met (a part there joins it)
        carried = start is not None and any(at >= start for at in nearest.values())
        if not any(latest.values()) and not carried and (len(latest) >= 2 or walked >= OPEN_LOOKBACK):
            break
        end = nl if nl >= 0 else -1
    return start


def _lines_up(text: str, lines: int, most: int) -> int:
    """Where the last `lines` lines of the text start, at most `most` characters from its end."""
    at, floor = len(text), max(0, len(text) - most)
    for _ in range(lines):
        nl = text.rfind("\n", floor, at)
        if nl < 0:
            return floor
        at = nl
    return at


def _stream_of(line: str) -> str | None:
    """A runtime record's stream, whole or partial."""
    m = _CRI_RECORD.match(line)
    if m:
        return f"cri:{m.group(1)}"
    m = _DOCKER_RECORD.match(line) if line.startswith('{"log":"') else None
    return f"docker:{m.group(1)}" if m else None


def _compressed(path: Path) -> bool:
    return path.suffix.lower() in COMPRESSED_SUFFIXES or compression_of(path) is not None


# What a line is made of when it is blank (DuckDB's trim of these leaves nothing), and line breaks.
_BLANKS = " \t\n\x0b\x0c\r"
_BLANK_BYTES = _BLANKS.encode()


def _facts(s: _File, text: str | bytes, lines: int) -> None:
    """The facts of a piece Python has at little cost, so DuckDB need not measure every line: its
    lines (counted while reading), whether one is not blank (a piece of blanks and line breaks
    strips to nothing; a piece neither starting nor ending with one is not even copied), the
    file's first and last lines. The piece as text, or as the file's bytes (_prefiltered)."""
    s.lines += lines
    if not s.nonblank:
        s.nonblank = bool(text.strip(_BLANKS) if isinstance(text, str) else text.strip(_BLANK_BYTES))
    if len(s.head) < HEAD_LINES:
        s.head += _ends(text, HEAD_LINES - len(s.head), first=True)
    s.tail = (s.tail + _ends(text, HEAD_LINES, first=False))[-HEAD_LINES:]


def _ends(text: str | bytes, k: int, first: bool) -> list[str]:
    """The first (or last) k lines of a piece, as the file's head and tail keep them (the piece as
    text, or as bytes: each line decoded alone, as it decodes among the others)."""
    nl: Any = "\n" if isinstance(text, str) else b"\n"
    out: list[Any] = []
    if first:
        start = 0
        while len(out) < k:
            at = text.find(nl, start)
            out.append(text[start : at if at >= 0 else len(text)])
            if at < 0:
                break
            start = at + 1
    else:
        end = len(text)
        while len(out) < k:
            at = text.rfind(nl, 0, end)
            out.append(text[at + 1 : end])
            if at < 0:
                break
            end = at
        out.reverse()
    return [(line if isinstance(line, str) else decode(line)[0]).rstrip("\r")[:SHOWN] for line in out]


def _may_hold_long(text: str | bytes) -> bool:
    """Whether a line of the piece may be longer than MAX_LINE characters: a run that long holds a
    whole aligned block of (MAX_LINE + 1) // 2 characters, so a piece whose every such block has a
    line break has none (a few find() per piece instead of measuring every line in DuckDB). Of
    bytes, it may answer yes where the text would not (a character can take more than a byte),
    never no where the text would say yes: DuckDB's count is then exact either way."""
    half = (MAX_LINE + 1) // 2
    nl: Any = "\n" if isinstance(text, str) else b"\n"
    return any(text.find(nl, i, i + half) < 0 for i in range(0, len(text) - half + 1, half))


# A batch's pieces as a relation: a few pieces of megabytes, as lists.
_PIECES = "(SELECT unnest($ids) AS file_id, unnest($firsts) AS first, unnest($texts) AS content)"
# Their lines, numbered, for scan_text.sql. Lines flow as rows, not lists: the pre-filter keeps the
# hits by a selection, and nothing is built for the lines it drops (a list pass per fact cost three
# times as much).
_PIECE_LINES = (
    "(SELECT file_id, first + i - 1 AS lineno, x "
    "FROM (SELECT file_id, first, unnest(l) AS x, generate_subscripts(l, 1) AS i "
    f"FROM (SELECT file_id, first, string_split(content, chr(10)) AS l FROM {_PIECES})))"
)
# The lines Hyperscan kept (_Kept), passed as two texts and split in SQL: DuckDB converts a Python
# list's items one by one (3.2 s for 100,000 lines as three lists, ~0.1 s as three strings); a line
# holds no line break. Each line's file and number travel as one key, file_id << LINE_BITS | lineno,
# in a JSON array: one text read as numbers at once (~0.75 against ~1.05 us a line for the file
# ids and the numbers as two comma-separated texts, each split and cast).
LINE_BITS = 40  # room for a file of over a trillion lines (file ids stay far below 2^23)
_KEPT_LINES = (
    f"(SELECT k >> {LINE_BITS} AS file_id, k & {(1 << LINE_BITS) - 1} AS lineno, x "
    "FROM (SELECT unnest(from_json($keys, '[\"BIGINT\"]')) AS k, unnest(string_split($texts, chr(10))) AS x))"
)


# Kept lines written at a time: a statement's planning is paid once per ~8,000 lines; eight times
# as many (PIECE_BYTES) raised the peak RSS of an attempt with 100,000 kept lines by ~80 MiB
KEPT_BYTES = 1 << 20


class _Kept:
    """The lines Hyperscan kept, gathered across batches and files and written in one statement
    when they come to KEPT_BYTES (or the source's end): a statement per batch of pieces read cost
    ~13 ms of planning however few lines it wrote (a 10M-line attempt reads ~150 batches)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, query: str) -> None:
        self.con, self.query = con, query
        self.keys: list[str] = []
        self.texts: list[str] = []
        self.size = 0

    def add(self, file_id: int, first: int, found: list[tuple[int, str]]) -> None:
        """A piece's kept lines (their index in the piece, their text), its first line numbered `first`."""
        base = (file_id << LINE_BITS) + first
        texts = [text for _, text in found]
        self.keys.extend([str(base + i) for i, _ in found])
        self.texts.extend(texts)
        self.size += sum(map(len, texts))
        if self.size >= KEPT_BYTES:
            self.flush()

    def flush(self) -> None:
        """One statement (_KEPT_LINES: the keys and the lines as two texts, split in SQL)."""
        if self.texts:
            self.con.execute(self.query, {"keys": f"[{','.join(self.keys)}]", "texts": "\n".join(self.texts)})
        self.keys, self.texts, self.size = [], [], 0


class _Odd:
    """Pieces that may hold lines with bad bytes or longer than MAX_LINE (`long`), whose lines
    DuckDB counts, in one statement when they come to PIECE_BYTES (or the source's end)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.pieces: list[tuple[_File, Piece, bool]] = []
        self.size = 0

    def add(self, s: _File, p: Piece, long: bool) -> None:
        self.pieces.append((s, p, long))
        self.size += len(p.text)
        if self.size >= PIECE_BYTES:
            self.flush()

    def flush(self) -> None:
        odd, self.pieces, self.size = self.pieces, [], 0
        if not odd:
            return
        counts = self.con.execute(
            render(
                "scan_counts.sql",
                SQL_DIR,
                pieces="(SELECT unnest($k) AS k, unnest($texts) AS content, unnest($lenient) AS lenient, "
                "unnest($long) AS long)",
                max_line=MAX_LINE,
            ),
            {
                "k": list(range(len(odd))),
                "texts": [p.text for _, p, _ in odd],
                "lenient": [p.lenient for _, p, _ in odd],
                "long": [long for _, _, long in odd],
            },
        ).fetchall()
        for k, n_bad, n_long, cut_bytes in counts:
            s = odd[k][0]
            s.bad += n_bad
            s.long += n_long
            s.cut_bytes += cut_bytes or 0


def _scan(
    con: duckdb.DuckDBPyConnection,
    queries: dict[str, str],
    batch: list[tuple[_File, Piece]],
    lines: LineMatcher | None,
    kept: _Kept,
    odd: _Odd,
) -> None:
    """One statement splits and pre-filters a batch of pieces into raw_lines (with `lines`, the
    lines Hyperscan found, gathered in `kept` until there are enough to write);
    the pieces holding a runtime's partial records, another statement that joins them first; the
    pieces that may have lines with bad bytes or too long are counted by a third (`odd`)."""
    if lines is None:
        split = [holds_partial_records(p.text) for _, p in batch]
        plain = [(s.file_id, p.first, p.text) for (s, p), parted in zip(batch, split, strict=True) if not parted]
    else:  # one Hyperscan pass a piece: the lines it keeps, and whether it may hold partial records
        scanned = [lines.scan(p.text) for _, p in batch]
        split = [holds_partial_records(p.text, marked) for (_, p), (_, marked) in zip(batch, scanned, strict=True)]
        for (s, p), (found, _), parted in zip(batch, scanned, split, strict=True):
            if not parted:
                kept.add(s.file_id, p.first, found)
        plain = []
    joined = [(s.file_id, p.first, p.text) for (s, p), parted in zip(batch, split, strict=True) if parted]
    for name, pieces in (("scan_text.sql", plain), ("scan_partial.sql", joined)):
        if pieces:
            con.execute(
                queries[name],
                {
                    "ids": [file_id for file_id, _, _ in pieces],
                    "firsts": [first for _, first, _ in pieces],
                    "texts": [text for _, _, text in pieces],
                },
            )
    for s, p in batch:
        long = _may_hold_long(p.text)
        if long or p.lenient:
            odd.add(s, p, long)


_FILE_ROWS = json.dumps(
    [
        {
            "id": "INTEGER",
            "node": "VARCHAR",
            "ref": "VARCHAR",
            "lines": "BIGINT",
            "bad": "BIGINT",
            "long": "BIGINT",
            "tail": ["VARCHAR"],
            "head": ["VARCHAR"],
        }
    ]
)


def _record(con: duckdb.DuckDBPyConnection, done: list[_File], source: str, connector: str, stats: ScanStats) -> None:
    if not done:
        return
    # the files as one JSON document, not ten Python lists: DuckDB converts a list's items one by
    # one (~6 us each: 2,048 files with their first and last lines, ~0.3 s)
    rows = [
        {
            "id": s.file_id,
            "node": s.f.node,
            "ref": s.f.ref,
            "lines": s.lines,
            "bad": s.bad,
            "long": s.long,
            "tail": s.tail,
            "head": s.head,
        }
        for s in done
    ]
    con.execute(
        f"""
        INSERT INTO source_files
        SELECT r.id, $source, $connector, r.node, r.ref, r.lines, r.bad, r.long, r.tail, r.head
        FROM (SELECT unnest(from_json($rows, '{_FILE_ROWS}')) AS r)
        """,
        {"rows": json.dumps(rows), "source": source, "connector": connector},
    )
    hits = dict(
        con.execute(
            "SELECT file_id, count(*) FROM raw_lines "
            "WHERE file_id IN (SELECT unnest(string_split($ids, ','))::INTEGER) GROUP BY file_id",
            {"ids": ",".join(str(s.file_id) for s in done)},
        ).fetchall()
    )
    for s in done:
        if s.error:
            continue
        stats.files += 1
        stats.lines += s.lines
        stats.hits += hits.get(s.file_id, 0)
        stats.bad_lines += s.bad
        stats.long_lines += s.long
        stats.truncated_bytes += s.cut_bytes
        if not s.nonblank:
            stats.blank.append(s.f.ref)


def _before(a: datetime, b: datetime) -> bool:
    return a + WINDOW_SLACK < b


def _day(t: datetime) -> str:
    return t.isoformat(timespec="seconds")


def apply_spans(
    cov: Coverage, spans: list[tuple[str, str, str | None, datetime | None, datetime | None]], scope: AttemptScope
) -> None:
    """After normalising (staging/files.py normalize: each scanned file's first and last stamps),
    a source's files whose stamps all lie before the attempt's start or all after its end
    (WINDOW_SLACK either side) are named in its coverage; their hosts are not covered by them, and
    a source with nothing else to say is `empty`."""
    start, end = naive_utc(scope.start), naive_utc(scope.end)
    assert start is not None and end is not None
    mine = [row for row in spans if row[0] == cov.source]
    outside, shown = set(), []
    for _, path, _, first, last in mine:
        first, last = first or last, last or first
        if first is not None and last is not None and (_before(last, start) or _before(end, first)):
            outside.add(path)
            shown.append(f"{path} ({_day(first)} .. {_day(last)})")
    details = cov.details
    if not outside or cov.status.value not in ("ok", "partial", "empty"):
        return
    if not isinstance(details, (LogFileDetails, HostFileDetails)):  # only scanned files have spans
        return
    blank = set(details.blank_files)
    usable = [node for _, path, node, _, _ in mine if path not in outside and path not in blank]
    lost = sorted(set(cov.nodes) - set(usable))
    cov.nodes = sorted(set(cov.nodes) & set(usable))
    details.outside_window = shown
    details.missing_nodes = sorted(set(details.missing_nodes) | set(lost))
    why = f"{len(shown)} file(s) with every line outside the attempt's window: {', '.join(shown[:10])}"
    cov.error = f"{cov.error}; {why}" if cov.error else why
    cov.status = CoverageStatus.partial if usable else CoverageStatus.empty
