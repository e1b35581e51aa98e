"""An attempt's log lines as templates, and what one attempt logged that another did not.

Every line of a bundle's text sources (app, syslog, fabricmanager, scheduler log) is read the way a
diagnosis reads it (connectors/bundle.py's folder walk and refusals, staging/files.py's pieces of
whole lines: gzip and zstd with their decompression budget, bad bytes as U+FFFD, a line cut at
MAX_LINE), but with no pre-filter: all of them. What varies from line to line is masked, prefix and
all (the bundle's host names, UUIDs, timestamps, IP addresses, paths, hex, numbers: the prefix's
times and rank labels with them) into a template. The masks are blind to which digit stands where,
so lines alike but for their digits (their shape) share a template: each line's shape is taken with
bytes operations, and only the first line of each shape is decoded and masked (in DuckDB), the rest
counted. Templates are counted with their first occurrence (the earliest stamp, read by staging's
prefix grammar `parse_log_line` in the attempt's timezone, then file and line). Docker's json-file
envelope is masked as it is, not unwrapped.

A regex masking pass in DuckDB (one RE2 alternation) was measured against Drain (PyPI drain3, the
log-parsing field's tool) on the same lines and was the faster (docs/benchmarks.md, "Log
templates"); Drain's tree also merges messages that differ in a word, which a diff between
attempts must tell apart, and drain3 pins a cachetools that Prefect refuses.

Bounded like the scan: at most `max_lines` lines are read per bundle and at most `max_templates`
templates kept (the earliest ones; lines of templates past the cap are counted, not kept); the
result says when either cap was hit.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from workload_attribution.connectors.bundle import TEXT_SOURCES, load_scope, log_files
from workload_attribution.connectors.text import TextFile
from workload_attribution.contracts.models import AttemptScope
from workload_attribution.staging.database import ONE_THREAD, naive_utc, sql, sql_literal
from workload_attribution.staging.files import (
    COMPRESSED_SUFFIXES,
    MAX_LINE,
    PIECE_BYTES,
    PlainText,
    ReadStats,
    compression_of,
    decode,
    plain_text,
    read_raw_pieces,
)
from workload_attribution.staging.grammar import add_grammar

# Lines read per bundle: a busy 64-host attempt has about a million; past this the rest is not read.
MAX_LINES = 4_000_000
# Templates kept per bundle: a few hundred is usual; a flood of lines masking cannot tame stops here.
MAX_TEMPLATES = 20_000
# A template is kept this long (characters): enough to tell messages apart.
TEMPLATE_CHARS = 400
# A template's first line is kept this long.
RAW_CHARS = 1000
# A template whose rate (per line read) differs between the attempts by this factor or more, and
# that one of them logged at least CHANGED_MIN times, has changed.
CHANGED_FACTOR = 10.0
CHANGED_MIN = 10

# What varies from line to line, as one RE2 alternation replaced by VARIABLE in one pass (a chain
# of regexp_replace, one per kind with its own token, cost four times as much: docs/benchmarks.md).
# At each place the first kind that matches wins: what identifies a thing (a UUID, a time, an
# address, a path) before the numbers inside it; the bundle's host names come before all of them.
VARIABLE = "<*>"
_MASKS: tuple[str, ...] = (
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",  # UUID
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?",  # RFC 3339, ISO 8601
    # syslog's, ctime's, Fabric Manager's (a month name varies with the day, so it goes too)
    r"\b(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) +)?(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2}"
    r"(?: \d{4})? \d{2}:\d{2}:\d{2}(?:\.\d+)?(?: \d{4})?",
    r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b",  # IPv4, with a port
    r"(?:/[\w.@+~-]+){2,}/?",  # a path of two parts or more
    r"\b\d[xX][0-9a-fA-F]+\b",  # 0x1f (any digit before the x: a mask is blind to which digit, _SHAPE)
    r"\b[0-9a-fA-F]*(?:[0-9][0-9a-fA-F]*[a-fA-F]|[a-fA-F][0-9a-fA-F]*[0-9])[0-9a-fA-F]*\b",  # hex with a digit
    r"\d+(?:\.\d+)*",  # numbers, versions, ranks' and ids' digits
)

# A template's level, from its words: what an engineer reads first.
_ERROR = re.compile(
    r"(?i)\b(?:error|errors|err|fatal|fail|failed|failure|panic|exception|traceback|critical|crit|abort|aborted|"
    r"segfault|segmentation fault|oom|killed|timed? ?out|xid|unrecoverable|uncorrectable)\b"
)
_WARNING = re.compile(r"(?i)\b(?:warn|warning|retry|retrying|degraded|unreachable|lost)\b")
LEVELS = ("error", "warning", "info")


def level_of(template: str) -> str:
    if _ERROR.search(template):
        return "error"
    return "warning" if _WARNING.search(template) else "info"


def mask_expression(column: str, hosts: list[str]) -> str:
    """The SQL expression masking a line (a column) into its template: the bundle's host names and
    each of _MASKS replaced by VARIABLE, in one pass."""
    kinds = list(_MASKS)
    if hosts:
        # a name's digits as \d+: a host of another attempt named like these is a host too, and the
        # mask stays blind to which digit stands where (_SHAPE)
        names = "|".join(
            dict.fromkeys(re.sub(r"\d+", r"\\d+", re.escape(h)) for h in sorted(set(hosts), key=len, reverse=True))
        )
        kinds.insert(0, rf"\b(?:{names})\b")
    pattern = sql_literal("|".join(kinds))
    return f"left(trim(regexp_replace({column}, {pattern}, {sql_literal(VARIABLE)}, 'g')), {TEMPLATE_CHARS})"


@dataclass(frozen=True)
class Template:
    """One template of a bundle: how many lines had it, and its first line (earliest stamp, then
    file and line)."""

    template: str
    level: str
    count: int
    source: str
    ref: str  # the first line's file, bundle-relative
    line: int
    raw: str
    time: datetime | None
    node: str | None = None  # the host its first line's file is of, when the file names one
    # an unstamped first line: the earliest stamp of the first lines after it in its file (it was
    # logged no later than that, _FIRSTS), by which it is ordered; None when stamped or none follows
    no_later_than: datetime | None = None


@dataclass
class Templates:
    """A bundle's templates, with what was read and whether a cap was hit."""

    bundle: str
    scope: AttemptScope
    templates: dict[str, Template] = field(default_factory=dict)
    lines: int = 0
    files: int = 0
    lines_cap_hit: bool = False
    lines_over_template_cap: int = 0  # lines of templates past the template cap, counted only
    not_read: list[str] = field(default_factory=list)  # "<ref>: why"
    notes: list[str] = field(default_factory=list)  # e.g. read back from the warehouse, capped there

    @property
    def templates_cap_hit(self) -> bool:
        return self.lines_over_template_cap > 0


@dataclass(frozen=True)
class _Piece:
    source: str
    file_id: int
    first: int
    take: int  # lines of the piece to read (fewer than it has when the line cap ends inside it)
    data: bytes


# Every ASCII digit as '0': a line's shape. The masks are blind to which digit stands where (each
# reads digits only as \d or in a class holding all ten; host names are matched with their digits
# as \d+, mask_expression), so lines of one shape have one template: only the first line of each
# shape in a piece is decoded and masked, the rest are counted (C-speed bytes operations).
_SHAPE = bytes.maketrans(b"0123456789", b"0000000000")


@dataclass
class _Firsts:
    """Each shape's first line and count, per file, for a batch of pieces; each shape masked once
    (the files of an attempt share most of theirs: 59,000 first lines in 1M lines, 400 shapes)."""

    shapes: dict[bytes, int] = field(default_factory=dict)  # shape -> its index in `shown`
    shown: list[bytes] = field(default_factory=list)  # each shape's first line, to be masked
    src: list[str] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    of: list[int] = field(default_factory=list)  # the shape of each first line
    linenos: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    raws: list[bytes] = field(default_factory=list)
    size: int = 0

    def add(self, p: _Piece) -> None:
        lines = p.data.split(b"\n", p.take)[: p.take]
        shapes = p.data.translate(_SHAPE).split(b"\n", p.take)[: p.take]
        counts = Counter(shapes)
        # the first index of each shape: later pairs overwrite earlier ones, so walk backwards
        firsts = dict(zip(reversed(shapes), range(len(shapes) - 1, -1, -1)))
        for shape, i in firsts.items():
            if shape not in self.shapes:
                self.shapes[shape] = len(self.shown)
                self.shown.append(lines[i])
            self.of.append(self.shapes[shape])
        self.src += [p.source] * len(firsts)
        self.ids += [p.file_id] * len(firsts)
        self.linenos += [p.first + i for i in firsts.values()]
        self.counts += [counts[shape] for shape in firsts]
        self.raws += [lines[i] for i in firsts.values()]
        self.size += sum(len(lines[i]) for i in firsts.values())

    def parameters(self) -> dict[str, str]:
        """The batch as one text per column, split in SQL: DuckDB converts a Python list's items one
        by one (~0.1 ms each), a string at once. Lines are decoded together (bad bytes as U+FFFD, as
        a diagnosis reads them: a '\\n' ends any bad sequence, so it is the same line by line)."""
        return {
            "shown": decode(b"\n".join(self.shown))[0],
            "src": "\n".join(self.src),
            "ids": ",".join(map(str, self.ids)),
            "of": ",".join(map(str, self.of)),
            "linenos": ",".join(map(str, self.linenos)),
            "counts": ",".join(map(str, self.counts)),
            "raws": decode(b"\n".join(self.raws))[0],
        }


def templates_of(
    bundle: Path,
    max_lines: int = MAX_LINES,
    max_templates: int = MAX_TEMPLATES,
    progress: Callable[[str], None] | None = None,
) -> Templates:
    """Every line of the bundle's text sources reduced to templates (attempt.yaml is checked first:
    BundleError, a BadInput, names what is wrong with it)."""
    scope = load_scope(bundle)
    out = Templates(bundle=str(bundle), scope=scope)
    files: list[tuple[str, TextFile]] = []
    for source in TEXT_SOURCES:
        found, not_read = log_files(bundle, source)
        files += [(source, f) for f in found]
        out.not_read += not_read
    # one DuckDB thread (ONE_THREAD): each statement reads a batch of first lines, one row group
    con = duckdb.connect(config=ONE_THREAD)
    try:
        con.execute("SET TimeZone = 'UTC'")
        # Unoptimised: these statements are a join of first lines to their shapes' templates, the
        # stamps of a few lines, and merges of a few rows; optimising their plans (constants of
        # megabytes, the stamps' grammar of ~136 KB) cost 2-3 times running them (docs/benchmarks.md)
        con.execute("PRAGMA disable_optimizer")
        add_grammar(con, sql("log_time_macros.sql"))
        con.execute(
            "CREATE TABLE seen (template VARCHAR, n BIGINT, "
            "first STRUCT(t TIMESTAMP, f INTEGER, l BIGINT, src VARCHAR, raw VARCHAR, upto TIMESTAMP))"
        )
        query = _batch_query(list(scope.nodes))
        params: dict[str, object] = {"tz": scope.timezone or "UTC", "ref": naive_utc(scope.end or scope.start)}
        batch, unsaid = _Firsts(), 0
        for piece in _pieces(files, out, max_lines):
            batch.add(piece)
            if batch.size >= PIECE_BYTES:  # first lines held: bounded when few lines share a shape
                _merge(con, query, params, batch, max_templates, out)
                batch = _Firsts()
            unsaid += len(piece.data)
            if progress and unsaid >= PIECE_BYTES:
                progress(f"{bundle}: {out.lines:,} lines read")
                unsaid = 0
        if batch.raws:
            _merge(con, query, params, batch, max_templates, out)
        out.templates = _kept(con, files)
    finally:
        con.close()
    return out


def _pieces(files: list[tuple[str, TextFile]], out: Templates, max_lines: int) -> Iterator[_Piece]:
    """Each file's pieces of whole lines, as a diagnosis reads them, up to max_lines in all."""
    for file_id, (source, f) in enumerate(files):
        read = ReadStats()
        try:
            with plain_text(f.path) if _compressed(f.path) else nullcontext(PlainText(f.path)) as plain:
                if plain.problem:
                    out.not_read.append(f"{f.ref}: {plain.problem}")
                if plain.path is None:
                    continue
                out.files += 1
                for p in read_raw_pieces(plain.path, read, PIECE_BYTES, MAX_LINE):
                    take = min(p.lines, max_lines - out.lines)
                    if take <= 0:
                        out.lines_cap_hit = True
                        return
                    out.lines += take
                    yield _Piece(source, file_id, p.first, take, p.data)
        except OSError as exc:  # unreadable, vanished, swapped for a FIFO: this file, not the bundle
            out.not_read.append(f"{f.ref}: {exc.strerror or exc}")


def _compressed(path: Path) -> bool:
    return path.suffix.lower() in COMPRESSED_SUFFIXES or compression_of(path) is not None


def _batch_query(hosts: list[str]) -> str:
    """One statement: each shape's first line in a file (_Firsts) masked into its template (prefix
    and all: its times and rank labels are masked like any number), the templates counted per file
    with their first line there. A file's lines are in time order: only each file's first line of a
    template has its time read (staging's prefix grammar, _FIRSTS), and the earliest of those is the
    template's first."""
    return f"""
        WITH shapes AS (
            SELECT shape, {mask_expression(f"left(rtrim(x, chr(13)), {MAX_LINE})", hosts)} AS template
            FROM (SELECT unnest(l) AS x, generate_subscripts(l, 1) - 1 AS shape
                  FROM (SELECT string_split($shown, chr(10)) AS l))
            WHERE trim(x) <> ''
        ),
        lines AS (
            SELECT unnest(string_split($src, chr(10))) AS src,
                   unnest(string_split($ids, ','))::INTEGER AS file_id,
                   unnest(string_split($of, ','))::INTEGER AS shape,
                   unnest(string_split($linenos, ','))::BIGINT AS lineno,
                   unnest(string_split($counts, ','))::BIGINT AS n,
                   unnest(string_split($raws, chr(10))) AS x
        )
        SELECT template, file_id, any_value(src) AS src, sum(n)::BIGINT AS n, min(lineno) AS l,
               arg_min(left(rtrim(x, chr(13)), {RAW_CHARS}), lineno) AS raw
        FROM lines JOIN shapes USING (shape)
        GROUP BY template, file_id
    """


# Each template's first line in a batch: the earliest stamp of its files' first lines. A statement
# of its own: within the one above, DuckDB read the stamp of every line (three times the cost). A
# first line without a stamp gets `upto`: the earliest stamp of the first lines (of any template)
# after it in its file: a file's lines are in time order, so it was logged no later than that.
_FIRSTS = """
    WITH stamped AS (SELECT *, parse_log_line(raw, $tz, $ref)['ts'] AS ts FROM per_file),
    bounded AS (
        SELECT *, CASE WHEN ts IS NULL THEN min(ts) OVER (PARTITION BY file_id ORDER BY l DESC
                                                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) END AS upto
        FROM stamped
    )
    SELECT template, sum(n)::BIGINT AS n,
           min({'t': coalesce(ts, TIMESTAMP '9999-12-31'), 'f': file_id, 'l': l, 'src': src, 'raw': raw,
                'upto': upto}) AS first
    FROM bounded GROUP BY template
"""


def _merge(
    con: duckdb.DuckDBPyConnection,
    query: str,
    params: dict[str, object],
    batch: _Firsts,
    max_templates: int,
    out: Templates,
) -> None:
    """A batch's templates added to those seen: counts summed, the earlier first line kept; new
    templates while there is room under the cap (the earliest first), the rest counted only."""
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE per_file AS {query}",
        batch.parameters(),
    )
    con.execute(f"CREATE OR REPLACE TEMP TABLE batch AS {_FIRSTS}", params)
    room = max(0, max_templates - con.execute("SELECT count(*) FROM seen").fetchone()[0])  # type: ignore[index]
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE admitted AS
        SELECT template FROM seen
        UNION ALL
        (SELECT template FROM batch ANTI JOIN seen USING (template) ORDER BY first LIMIT $room)
        """,
        {"room": room},
    )
    over = con.execute("SELECT coalesce(sum(n), 0) FROM batch ANTI JOIN admitted USING (template)").fetchone()
    out.lines_over_template_cap += int(over[0]) if over else 0
    con.execute(
        """
        CREATE OR REPLACE TABLE seen AS
        SELECT template, sum(n)::BIGINT AS n, min(first) AS first
        FROM (SELECT * FROM seen UNION ALL SELECT * FROM batch SEMI JOIN admitted USING (template))
        GROUP BY template
        """
    )


def _kept(con: duckdb.DuckDBPyConnection, files: list[tuple[str, TextFile]]) -> dict[str, Template]:
    kept = {}
    for template, n, first in con.execute("SELECT template, n, first FROM seen").fetchall():
        stamp = first["t"] if first["t"] and first["t"].year < 9999 else None
        kept[template] = Template(
            template=template,
            level=level_of(template),
            count=int(n),
            source=first["src"],
            ref=files[first["f"]][1].ref,
            line=int(first["l"]),
            raw=first["raw"],
            time=stamp.replace(tzinfo=timezone.utc) if stamp else None,
            node=files[first["f"]][1].node,
            no_later_than=first["upto"].replace(tzinfo=timezone.utc) if first["upto"] and not stamp else None,
        )
    return kept


@dataclass(frozen=True)
class Changed:
    """A template both attempts logged, at rates (per line read) that differ by `factor` or more."""

    template: Template  # as the first attempt logged it
    other_count: int
    factor: float  # first's rate / other's rate (below 1: the first logged it less)


@dataclass(frozen=True)
class Diff:
    new: list[Template]  # templates the first attempt logged and the other never did, in order
    changed: list[Changed]


def order_of(t: Template) -> tuple[int, bool, datetime, str, int]:
    """Error level first, then the earliest (an unstamped line at the earliest stamp after it in its
    file, `no_later_than`; lines with neither after the rest), then file order."""
    when = t.time or t.no_later_than
    return (LEVELS.index(t.level), when is None, when or datetime.max.replace(tzinfo=timezone.utc), t.ref, t.line)


def diff(a: Templates, b: Templates) -> Diff:
    """What `a` logged that `b` did not, by template; and the templates whose rate changed."""
    new = sorted((t for key, t in a.templates.items() if key not in b.templates), key=order_of)
    changed = []
    for key, t in a.templates.items():
        other = b.templates.get(key)
        if other is None or max(t.count, other.count) < CHANGED_MIN:
            continue
        factor = (t.count / max(a.lines, 1)) / (other.count / max(b.lines, 1))
        if factor >= CHANGED_FACTOR or factor <= 1 / CHANGED_FACTOR:
            changed.append(Changed(t, other.count, factor))
    changed.sort(key=lambda c: (LEVELS.index(c.template.level), -max(c.factor, 1 / c.factor), order_of(c.template)))
    return Diff(new, changed)
