"""The rules' literal pre-filter over pieces of text: which lines hold one of the literals.

Two engines give the same lines. Hyperscan (the `hyperscan` wheel; Vectorscan where the CPU is not
x86) scans a piece's bytes for every literal at once, one database compiled per set of literals,
and only the lines holding a match go to DuckDB. Where the wheel cannot be imported, or
ATTRIBUTION_PREFILTER=duckdb asks for it, DuckDB splits each piece and tests every line with one
RE2 alternation (staging/database.py contains_any): the fallback, slower per line (docs/benchmarks.md).

A literal is matched byte for byte in the line's UTF-8 (so character for character), case
sensitive, as RE2 matches the escaped alternation; one holding a line break can hold no line and
is left out, as splitting leaves it out of every line.

A few RE2 patterns (the concepts' words, rules/python/concepts.py) are also asked of a few texts
at once, one database of them (`patterns`): which match somewhere in a text, as DuckDB's
regexp_matches would say. Hyperscan gets each in a form it reads as RE2 does (`hyperscan_form`);
a pattern it may read otherwise, or refuses, is left to RE2.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from workload_attribution.contracts.errors import BadInput
from workload_attribution.staging.files import BREAK_BLOCK, decode, line_breaks
from workload_attribution.staging.user_cache import cache_dir, temporary_name

ENV = "ATTRIBUTION_PREFILTER"
ENGINES = ("hyperscan", "duckdb")


def engine() -> str:
    """The engine a scan uses now: ATTRIBUTION_PREFILTER when set (hyperscan, duckdb), else
    Hyperscan when its wheel imports. An unknown name, or hyperscan asked for and missing, is an
    error rather than a silent fallback."""
    asked = os.environ.get(ENV, "").strip().lower()
    if asked and asked not in ENGINES:
        raise BadInput(f"{ENV}={asked!r}: one of {', '.join(ENGINES)}")
    if asked == "duckdb":
        return "duckdb"
    if _hyperscan() is None:
        if asked == "hyperscan":
            raise BadInput(f"{ENV}=hyperscan: the hyperscan package cannot be imported here")
        return "duckdb"
    return "hyperscan"


@lru_cache(maxsize=1)
def _hyperscan() -> Any:
    try:
        import hyperscan
    except ImportError:  # no wheel for this platform: DuckDB's RE2 does it
        return None
    return hyperscan


class LineMatcher:
    """The lines of a piece of text that hold one of the literals (Hyperscan), with their index in
    the piece; and whether the piece holds one of the `markers` (literals that keep no line: a
    caller's cheap test of the whole piece, answered by the same pass). One compiled database per
    set of literals (`matcher`), a scratch space per thread."""

    def __init__(self, literals: tuple[str, ...], markers: tuple[str, ...] = ()):
        hs = _hyperscan()
        patterns = sorted({lit.encode() for lit in literals if lit and "\n" not in lit})
        self._literals = tuple(p.decode() for p in patterns)  # a kept literal by its id
        self._keeping = len(patterns)  # ids below this keep a line; the markers' ids follow
        patterns += sorted({m.encode() for m in markers if m and "\n" not in m})
        self._db = _database(hs, patterns) if patterns else None
        self._local = threading.local()

    def _scratch(self) -> Any:
        return _thread_scratch(self._local, self._db)

    def lines(self, text: str) -> list[tuple[int, str]]:
        """(index of the line in the piece, from 0; the line as the piece holds it) for each line
        of `text` (split at '\\n') holding a literal, in order."""
        return self.scan(text)[0]

    def scan(self, text: str) -> tuple[list[tuple[int, str]], bool]:
        """`lines(text)`, and whether the text holds one of the markers."""
        data = text.encode("utf-8", "surrogatepass")
        ends, marked = self._matches(data)
        return self._lines(data, ends, _as_text)[0], marked

    def scan_bytes(self, data: bytes, clean: bool = False) -> tuple[list[tuple[int, str]], bool, int]:
        """`scan` of whole lines as a file holds them, undecoded: each kept line decoded as the
        whole would be (bad bytes and NULs as U+FFFD: a line break is never part of a character,
        so a line decodes alone as it does among the others); and the number of lines (line
        breaks + 1), counted on the way: one pass over the bytes where a count, a decode and an
        encode of the whole piece cost ~3 passes more than Hyperscan's own. `clean`: the bytes are
        UTF-8 with no NUL (files.clean_utf8), so each line is decoded as it is, without the checks
        for what is not (~0.4 us a kept line)."""
        ends, marked = self._matches(data)
        kept, lines = self._lines(data, ends, bytes.decode if clean else _decoded, count=True)
        return kept, marked, lines

    def held(self, text: str) -> list[tuple[int, tuple[str, ...]]]:
        """(index of the line in the piece, from 0; the literals it holds, sorted) for each line of
        `text` holding a literal, in order: every literal, wherever its occurrences overlap."""
        data = text.encode("utf-8", "surrogatepass")
        if self._db is None:
            return []
        hits: list[tuple[int, int]] = []
        keeping = self._keeping

        def found(id_: int, _from: int, to: int, _flags: int, _ctx: Any) -> None:
            if id_ < keeping:
                hits.append((to, id_))

        self._db.scan(data, match_event_handler=found, scratch=self._scratch())
        hits.sort()
        out: list[tuple[int, set[int]]] = []
        index, counted, line_end = 0, 0, -1
        for to, id_ in hits:
            if to > line_end:  # the first literal of another line
                start = data.rfind(b"\n", 0, to) + 1
                line_end = data.find(b"\n", to)
                if line_end < 0:
                    line_end = len(data)
                index += (
                    line_breaks(data, counted, start)
                    if start - counted >= BREAK_BLOCK
                    else data.count(b"\n", counted, start)
                )
                counted = start
                out.append((index, set()))
            out[-1][1].add(id_)
        return [(i, tuple(self._literals[n] for n in sorted(ids))) for i, ids in out]

    def _matches(self, data: bytes) -> tuple[list[int], bool]:
        """Where each match of a kept literal ends, and whether a marker matched."""
        if self._db is None:
            return [], False
        ends: list[int] = []
        marked: list[int] = []
        keeping = self._keeping

        def found(id_: int, _from: int, to: int, _flags: int, _ctx: Any) -> None:
            (ends if id_ < keeping else marked).append(to)

        self._db.scan(data, match_event_handler=found, scratch=self._scratch())
        return ends, bool(marked)

    @staticmethod
    def _lines(
        data: bytes, ends: list[int], text_of: Callable[[bytes], str], count: bool = False
    ) -> tuple[list[tuple[int, str]], int]:
        """The lines holding a match (index, text), and with `count` the number of lines."""
        ends.sort()
        out: list[tuple[int, str]] = []
        index, counted, line_end = 0, 0, -1
        for to in ends:
            if to <= line_end:  # another literal of a line already taken
                continue
            start = data.rfind(b"\n", 0, to) + 1  # no literal holds a line break: the match is inside one line
            line_end = data.find(b"\n", to)
            if line_end < 0:
                line_end = len(data)
            # a short gap (~1 KB between lines of a tenth kept) by count itself: no call per line
            index += (
                line_breaks(data, counted, start)
                if start - counted >= BREAK_BLOCK
                else data.count(b"\n", counted, start)
            )
            counted = start
            out.append((index, text_of(data[start:line_end])))
        return out, (index + line_breaks(data, counted) + 1 if count else 0)


def _thread_scratch(local: threading.local, db: Any) -> Any:
    """This thread's scratch space for a compiled database (Hyperscan's scratch is one thread's)."""
    scratch = getattr(local, "scratch", None)
    if scratch is None:
        scratch = local.scratch = _hyperscan().Scratch(db)
    return scratch


def _as_text(line: bytes) -> str:
    return line.decode("utf-8", "surrogatepass")


def _decoded(line: bytes) -> str:
    return decode(line)[0]


def _compile(hs: Any, patterns: list[bytes], flags: int | None = None, once: bool = False) -> Any:
    """The database of literals, or with `flags` of regular expressions (ids: their positions);
    `once`: each reported once a scan at most (SINGLEMATCH)."""
    db = hs.Database(mode=hs.HS_MODE_BLOCK)
    db.compile(
        expressions=patterns,
        ids=list(range(len(patterns))),
        elements=len(patterns),
        flags=[(flags or 0) | (hs.HS_FLAG_SINGLEMATCH if once else 0)] * len(patterns),
        literal=flags is None,
    )
    return db


# Compiling a pack's literals costs a new process ~90 ms of CPU (~0.7k-2k literals a source: ~15-37
# ms each); loading the compiled database Hyperscan serialised costs microseconds. So each database
# is kept, serialised, in the user's cache directory under a key covering every literal in its
# order, Hyperscan's version and the machine (Hyperscan refuses a database built for a CPU this one
# is not: it is compiled again). Written whole, then renamed; no cache directory: compiled as always.
_CACHE_FORMAT = 1
_CACHE_KEEP = 32  # entries kept (a pack's sources and its concepts, for a few packs)


def _cache_dir() -> Path:
    return cache_dir("hyperscan")


@lru_cache(maxsize=1)
def _platform(hs: Any) -> str:
    """What Hyperscan builds for here: a tiny database serialised (its header names the version
    and the CPU features it was built for), so a cache shared by two machines keeps two entries."""
    return hashlib.sha256(hs.dumpb(_compile(hs, [b"attribution"]))).hexdigest()[:16]


def _cache_key(hs: Any, patterns: list[bytes], flags: int | None = None, once: bool = False) -> str:
    version = getattr(hs, "__version__", "?")
    kind = "" if flags is None else f"regex {flags}|"  # a literal database's key as it always was
    kind += "once|" if once else ""
    digest = hashlib.sha256(
        f"{_CACHE_FORMAT}|{version}|{platform.machine()}|{_platform(hs)}|{len(patterns)}|{kind}".encode()
    )
    for p in patterns:
        digest.update(len(p).to_bytes(4, "little"))
        digest.update(p)
    return digest.hexdigest()[:40]


def _database(hs: Any, patterns: list[bytes], flags: int | None = None, once: bool = False) -> Any:
    """The compiled database of these literals (or with `flags`, regular expressions; ids: their
    positions; `once`: each reported once a scan), from the cache when it holds it."""
    try:
        path = _cache_dir() / f"{_cache_key(hs, patterns, flags, once)}.hsdb"
    except Exception:  # no home to name a cache in: compiled
        return _compile(hs, patterns, flags, once)
    try:
        return hs.loadb(path.read_bytes(), hs.HS_MODE_BLOCK)
    except Exception:  # none kept, unreadable, or built for another CPU: compiled, then kept
        pass
    db = _compile(hs, patterns, flags, once)
    try:
        _keep_file(path, hs.dumpb(db))
    except Exception:  # a read-only home, a full disk: nothing kept, the next process compiles again
        pass
    return db


def _keep_file(path: Path, body: bytes) -> None:
    """An entry of a cache folder written whole, then renamed (a reader never sees half of one);
    the folder's newest _CACHE_KEEP entries of its kind kept, the rest removed."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = temporary_name(path)
    tmp.write_bytes(body)
    os.replace(tmp, path)
    kept = sorted(path.parent.glob(f"*{path.suffix}"), key=lambda f: f.stat().st_mtime, reverse=True)
    for old in kept[_CACHE_KEEP:]:
        old.unlink(missing_ok=True)


class LiteralsHeld:
    """Which of a set of literals some text holds anywhere: one Hyperscan database reporting each
    literal once a scan (SINGLEMATCH), so a text of many lines costs a pass of its bytes and a call
    per literal it holds, not one per occurrence. Compiled once per set of literals (`held_by`)."""

    def __init__(self, literals: tuple[str, ...]):
        hs = _hyperscan()
        self._literals = tuple(sorted({lit for lit in literals if lit}))
        patterns = [lit.encode("utf-8", "surrogatepass") for lit in self._literals]
        self._db = _database(hs, patterns, once=True) if patterns else None
        self._local = threading.local()

    def among(self, texts: Iterable[str]) -> set[str]:
        """The literals the texts hold (a literal found inside one text: texts joined are not read)."""
        if self._db is None:
            return set()
        found: set[int] = set()
        scratch = _thread_scratch(self._local, self._db)

        def hit(id_: int, _from: int, _to: int, _flags: int, _ctx: Any) -> None:
            found.add(id_)

        for text in texts:
            self._db.scan(text.encode("utf-8", "surrogatepass"), match_event_handler=hit, scratch=scratch)
            if len(found) == len(self._literals):  # every one held: the rest cannot add one
                break
        return {self._literals[i] for i in found}


@lru_cache(maxsize=8)
def held_by(literals: tuple[str, ...]) -> LiteralsHeld:
    """The LiteralsHeld of a set of literals, compiled once per process (a pack's rules')."""
    return LiteralsHeld(literals)


SCAN_ROWS = 20_000  # rows fetched and scanned at a time by rows_holding


def held_rows(rows: Any, literals: tuple[str, ...]) -> Iterator[tuple[Any, tuple[str, ...]]]:
    """(key, the literals its text holds, sorted) for each row (key, text) of a DuckDB result
    holding one, in order (rows_holding, the key only)."""
    for row, held in rows_holding(rows, literals):
        yield row[0], held


def rows_holding(rows: Any, literals: tuple[str, ...]) -> Iterator[tuple[tuple[Any, ...], tuple[str, ...]]]:
    """(the row, the literals its text holds, sorted) for each row (..., text) of a DuckDB result
    whose text, its last column, holds one, in order: the rows fetched a few megabytes at a time,
    whatever their number, and each batch scanned at once as one text, a row per line (a text's own
    line breaks as NULs, so no literal spans them)."""
    m = matcher(literals)
    while batch := rows.fetchmany(SCAN_ROWS):
        joined = "\n".join(row[-1].replace("\n", "\0") for row in batch)
        for i, held in m.held(joined):
            yield batch[i], held


@lru_cache(maxsize=16)
def matcher(literals: tuple[str, ...], markers: tuple[str, ...] = ()) -> LineMatcher:
    """The matcher of a set of literals (and markers), compiled once per process (a pack's literals
    for a source)."""
    return LineMatcher(literals, markers)


# RE2's shorthand classes as the ASCII classes they are: Hyperscan's \s also takes a vertical tab,
# and under (?i) RE2 folds \w's case (the Kelvin sign K is a word character to it) where
# Hyperscan does not; written out, both read and fold a class alike.
_SHORTHANDS = {"d": "0-9", "w": "0-9A-Za-z_", "s": "\\t\\n\\f\\r "}
# escapes both read alike: ASCII word boundaries (neither engine is told Unicode's), control characters
_ALIKE = frozenset("bBtnrf")
# the groups both read alike; any other flag (m, s, U) changes what ^ $ . mean, differently
_GROUPS = ("(?:", "(?i:", "(?i)")
# what either engine reads as it is written: ASCII but \ [ ] ( { $ (the class written as its ranges:
# negating the rest of Unicode cost every new process ~2.5 ms to compile)
_PLAIN = re.compile(r"[\x00-#%-')-Z^-z|-\x7f]+")
_REPEAT = re.compile(r"\{(\d+)(?:,(\d*))?\}")
# A repeat count above this is left to RE2: in UTF-8 mode each repeated character is an automaton
# of its own, and `[^`]{1,200}` alone costs Hyperscan ~1 s to compile (the whole pack ~1 s else)
MAX_REPEAT = 64


def hyperscan_form(pattern: str) -> str | None:
    """The RE2 pattern as Hyperscan (UTF-8 mode, no Unicode properties) reads it the same: whether
    it matches somewhere in a text, each engine says the same (tests/unit/test_prefilter.py tries
    them side by side). None when it may read otherwise: a character outside ASCII (case folding
    by each engine's own Unicode tables), a Unicode class or any escape but the alike ones and
    punctuation, a POSIX class, a class opening with `]`, a negated shorthand inside a class, a
    group with other flags, a `{` that is not a repeat count, or one above MAX_REPEAT."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        if plain := _PLAIN.match(pattern, i):  # as written, a run at a time (a new process forms ~400)
            out.append(plain.group())
            i = plain.end()
            continue
        piece, i, in_class = _form_of(pattern, i, in_class)
        if piece is None:
            return None
        out.append(piece)
    return None if in_class else "".join(out)


def _form_of(pattern: str, i: int, in_class: bool) -> tuple[str | None, int, bool]:
    """The piece of the pattern at i in Hyperscan's form (None: may be read otherwise), where the
    next piece starts, and whether it is inside a class."""
    ch = pattern[i]
    if not ch.isascii():
        return None, i, in_class
    if ch == "\\":
        return _escape_form(pattern[i + 1 : i + 2], in_class), i + 2, in_class
    if in_class:  # a class inside a class is a POSIX class
        return (None if ch == "[" else ch), i + 1, ch != "]"
    if ch == "[":
        j = i + 1 + pattern.startswith("^", i + 1)
        return (None if pattern.startswith("]", j) else pattern[i:j]), j, True
    if ch == "(" and pattern.startswith("(?", i):
        group = next((g for g in _GROUPS if pattern.startswith(g, i)), None)
        return group, i + len(group or ""), False
    if ch == "{":
        m = _REPEAT.match(pattern, i)
        if not m or int(m.group(2) or m.group(1)) > MAX_REPEAT:
            return None, i, False
        return m.group(), m.end(), False
    # RE2's $ (not multiline) is the end of the text; Hyperscan's also sits before a final line break
    return ("\\z" if ch == "$" else ch), i + 1, False


def _escape_form(e: str, in_class: bool) -> str | None:
    """An escaped character (e: what follows the backslash) in Hyperscan's form."""
    if e.lower() in _SHORTHANDS:
        body, negated = _SHORTHANDS[e.lower()], e.isupper()
        if in_class:
            return None if negated else body
        return f"[{'^' if negated else ''}{body}]"
    if e in _ALIKE and not (in_class and e in "bB"):  # [\b] is a backspace to one, refused by the other
        return "\\" + e
    if e and e.isascii() and not e.isalnum():  # escaped punctuation: itself
        return "\\" + e
    return None


_NO_SPLIT = re.compile(r"[^\\\[()|]+")  # no alternative starts or ends within


def alternatives(pattern: str) -> list[str]:
    """The pattern's top-level alternatives (it matches somewhere where one of them does), split
    at each `|` outside a group and a class; whole when a flag set at its top level (`(?i)`) or a
    quotation (`\\Q`) reaches across them."""
    out, start, depth, i, n = [], 0, 0, 0, len(pattern)
    while i < n:
        if plain := _NO_SPLIT.match(pattern, i):
            i = plain.end()
            continue
        ch = pattern[i]
        if ch == "\\":
            if pattern.startswith("Q", i + 1):
                return [pattern]
            i += 1
        elif ch == "[":
            i = _class_end(pattern, i)
        elif ch == "(":
            if depth == 0 and re.match(r"\(\?[a-zA-Z-]*\)", pattern[i:]):
                return [pattern]
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0:  # a `|`
            out.append(pattern[start:i])
            start = i + 1
        i += 1
    return [*out, pattern[start:]]


def _class_end(pattern: str, i: int) -> int:
    """Where the class opening at i ends (its `]`): a `]` first is literal, a POSIX class
    `[:name:]` holds one."""
    i += 1 + pattern.startswith("^", i + 1)
    i += pattern.startswith("]", i)
    while i < len(pattern) and pattern[i] != "]":
        if pattern[i] == "\\":
            i += 1
        elif pattern.startswith("[:", i):
            i = max(pattern.find(":]", i + 2), i) + 1
        i += 1
    return i


class PatternMatcher:
    """Which of a few RE2 patterns match somewhere in a text, by Hyperscan: one database of their
    alternatives it reads alike (`hyperscan_form`), each reported once a text (SINGLEMATCH),
    compiled once per set of patterns (`patterns`). `rest`: by pattern, the alternation of its
    alternatives left to RE2 (those Hyperscan may read otherwise or refuses), else ""."""

    def __init__(self, patterns: tuple[str, ...]):
        hs = _hyperscan()
        flags = hs.HS_FLAG_UTF8 | hs.HS_FLAG_SINGLEMATCH
        split = _kept_split(hs, patterns, flags)
        if split is not None:  # a process before this one split them (and kept their database)
            alts, taken = split
            try:
                self._db = _database(hs, [form for *_, form in taken], flags) if taken else None
            except hs.error:  # its database gone, and refused when compiled again: split again
                split = None
        if split is None:
            forms = [(i, alt, hyperscan_form(alt)) for i, p in enumerate(patterns) for alt in alternatives(p)]
            alts = [(i, alt) for i, alt, _ in forms]
            taken = [(i, alt, form.encode()) for i, alt, form in forms if form is not None]
            try:
                self._db = _database(hs, [form for *_, form in taken], flags) if taken else None
            except hs.error:  # one is refused (too large, matching nothing but the empty text ...): each tried
                taken = [t for t in taken if _compiles(hs, t[2], flags)]
                self._db = _database(hs, [form for *_, form in taken], flags) if taken else None
            _keep_split(hs, patterns, flags, alts, taken)
        self._ids = [i for i, *_ in taken]  # a database id's pattern
        kept = {(i, alt) for i, alt, _ in taken}
        rest: dict[int, list[str]] = {}
        for i, alt in alts:
            if (i, alt) not in kept:
                rest.setdefault(i, []).append(alt)
        self.rest = tuple("|".join(rest.get(i, ())) for i in range(len(patterns)))
        self._local = threading.local()

    def matching(self, text: str) -> set[int]:
        """The patterns (by position) an alternative Hyperscan reads matches somewhere in the text."""
        if self._db is None:
            return set()
        found: set[int] = set()
        ids = self._ids

        def hit(id_: int, _from: int, _to: int, _flags: int, _ctx: Any) -> None:
            found.add(ids[id_])

        scratch = _thread_scratch(self._local, self._db)
        self._db.scan(text.encode("utf-8", "surrogatepass"), match_event_handler=hit, scratch=scratch)
        return found


# Splitting the concepts' patterns into alternatives and writing each in Hyperscan's form cost a new
# process ~7 ms (~400 alternatives, a character at a time) wherever a line held a concept's literal;
# so the split is kept beside the databases, as JSON, under a key covering the patterns, this
# module's code (what decides a form), Hyperscan's version and what it builds for here (what it
# refuses). Written whole, then renamed; no cache directory or an unreadable entry: split again.
_Split = tuple[list[tuple[int, str]], list[tuple[int, str, bytes]]]


def _split_path(hs: Any, patterns: tuple[str, ...], flags: int) -> Path:
    digest = hashlib.sha256(
        f"{_CACHE_FORMAT}|{getattr(hs, '__version__', '?')}|{platform.machine()}|{_platform(hs)}|{flags}|".encode()
    )
    digest.update(Path(__file__).read_bytes())
    for p in patterns:
        digest.update(f"\0{len(p)}\0{p}".encode("utf-8", "surrogatepass"))
    return _cache_dir().with_name("hyperscan-forms") / f"{digest.hexdigest()[:40]}.json"


def _kept_split(hs: Any, patterns: tuple[str, ...], flags: int) -> _Split | None:
    try:
        doc = json.loads(_split_path(hs, patterns, flags).read_bytes())
        alts = [(int(i), str(alt)) for i, alt in doc["alternatives"]]
        taken = [(int(i), str(alt), str(form).encode()) for i, alt, form in doc["taken"]]
    except Exception:  # none kept, unreadable, or no home to name a cache in: split again
        return None
    return alts, taken


def _keep_split(
    hs: Any, patterns: tuple[str, ...], flags: int, alts: list[tuple[int, str]], taken: list[tuple[int, str, bytes]]
) -> None:
    try:
        body = json.dumps({"alternatives": alts, "taken": [(i, alt, form.decode()) for i, alt, form in taken]})
        _keep_file(_split_path(hs, patterns, flags), body.encode())
    except Exception:  # a read-only home, a full disk: nothing kept, the next process splits again
        pass


def _compiles(hs: Any, pattern: bytes, flags: int) -> bool:
    try:
        _compile(hs, [pattern], flags)
    except hs.error:
        return False
    return True


@lru_cache(maxsize=8)
def patterns(regexes: tuple[str, ...]) -> PatternMatcher:
    """The matcher of a set of RE2 patterns, compiled once per process (a pack's concepts)."""
    return PatternMatcher(regexes)
