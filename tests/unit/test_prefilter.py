"""The pre-filter's two engines keep the same lines (staging/prefilter.py): Hyperscan where its wheel
imports, DuckDB's RE2 alternation as the fallback. Checked line by line on text built to trip one
of them, and diagnosis by diagnosis on the regression and example bundles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from workload_attribution.connectors.text import PARTIAL_MARKERS, holds_partial_records
from workload_attribution.contracts.errors import BadInput
from workload_attribution.staging import prefilter
from workload_attribution.staging.database import contains_any

ROOT = Path(__file__).resolve().parents[2]
BUNDLES = sorted(
    p for d in ("tests/regression", "tests/examples") for p in (ROOT / d).iterdir() if (p / "attempt.yaml").is_file()
)

needs_hyperscan = pytest.mark.skipif(
    prefilter._hyperscan() is None, reason="the hyperscan wheel is not installed here (the DuckDB path runs)"
)

LITERALS = (
    "NCCL WARN",
    "Xid",
    "a.c",  # regex characters are literal
    "(pid=",
    "[rank",
    "a|b",
    "ü-Fehler",  # UTF-8 beyond ASCII
    "\ufffd",  # a replaced byte
    "end\r",  # a carriage return ends the line before the trim
    "two\nlines",  # no line holds a line break: never kept
    "",
    "XidXid",  # a literal inside another
)

TEXT = "\n".join(
    [
        "Xid 79 at start",
        "nothing here",
        "",
        "abc does not hold a.c",
        "but a.c does, and Xid twice: Xid XidXid",
        "kernel: [rank 3] (pid=12) a|b",
        "ü-Fehler im Modul",
        "bad byte \ufffd here",
        "line with end\r",
        "two",
        "lines",
        "NCCL WAR",
        "at the end NCCL WARN",
    ]
)


def _duckdb_lines(text: str, literals: tuple[str, ...]) -> list[tuple[int, str]]:
    con = duckdb.connect()
    rows = con.execute(
        f"SELECT i - 1, x FROM (SELECT unnest(l) AS x, generate_subscripts(l, 1) AS i "
        f"FROM (SELECT string_split($t, chr(10)) AS l)) WHERE {contains_any('x', literals)} ORDER BY i",
        {"t": text},
    ).fetchall()
    return [(int(i), x) for i, x in rows]


@needs_hyperscan
@pytest.mark.parametrize(
    "text",
    [TEXT, "", "Xid", "\n\nXid\n\n", "no literal at all\nnone", TEXT + "\n", "\n".join(["Xid a.c"] * 50)],
    ids=["mixed", "empty", "one-line", "blank-around", "no-hit", "final-newline", "every-line"],
)
def test_hyperscan_keeps_the_lines_duckdb_keeps(text: str) -> None:
    kept = prefilter.LineMatcher(LITERALS).lines(text)
    assert kept == _duckdb_lines(text, LITERALS)


@needs_hyperscan
@pytest.mark.parametrize("text", [TEXT, "", "XidXid\nXi\nd", "\n".join(["Xid a.c"] * 50)])
def test_the_literals_each_line_holds_are_every_one_overlapping_or_not(text: str) -> None:
    """held: the kept lines' indexes, and on each every literal it holds (XidXid holds Xid twice
    over, one occurrence inside it), as a test of each literal on the line finds them."""
    literals = tuple(lit for lit in LITERALS if lit and "\n" not in lit)
    want = [
        (i, tuple(sorted(lit for lit in literals if lit in line)))
        for i, line in enumerate(text.split("\n"))
        if any(lit in line for lit in literals)
    ]
    assert prefilter.LineMatcher(LITERALS).held(text) == want
    assert [i for i, _ in want] == [i for i, _ in prefilter.LineMatcher(LITERALS).lines(text)]


@needs_hyperscan
def test_the_literals_some_text_holds_are_found_each_once_whatever_their_count() -> None:
    """held_by(...).among: which literals the texts hold anywhere, each a literal found inside one
    text (rules/held.py asks it of an attempt's lines, a batch of them joined a text)."""
    texts = ["Xid 79 at start\nXid again\n" * 3, "kernel: ü-Fehler im Modul", "abc", "end\r"]
    literals = tuple(lit for lit in LITERALS if lit and "\n" not in lit)
    want = {lit for lit in literals if any(lit in t for t in texts)}
    assert want == {"Xid", "ü-Fehler", "end\r"}
    assert prefilter.held_by(literals).among(texts) == want
    assert prefilter.held_by(literals).among(["NCCL ", "WARN", ""]) == set()  # none across two texts
    assert prefilter.held_by(()).among(["Xid"]) == set()


@needs_hyperscan
def test_no_literal_keeps_no_line() -> None:
    assert prefilter.LineMatcher(("", "a\nb")).lines("a\nb\nab") == []


PARTS = [
    "2026-11-20T11:01:10.1Z stdout P first half of a split line\n2026-11-20T11:01:10.2Z stdout F and its end Xid",
    "2026-11-20T11:01:10.1Z stderr F a whole CRI record Xid\n2026-11-20T11:01:10.1Z stderr P part",
    '{"log":"a partial docker record","stream":"stderr","time":"2026-11-20T11:01:10Z"}\n',
    '{"log":"a whole docker record Xid\\n","stream":"stdout","time":"2026-11-20T11:01:10Z"}',
    "the word stdout P inside prose, no runtime's record: NCCL WARN",
]


@needs_hyperscan
@pytest.mark.parametrize(
    "text", [TEXT, "", *PARTS], ids=["mixed", "empty", "cri-p", "cri-f", "docker-p", "docker", "prose"]
)
def test_a_marker_keeps_no_line_and_says_a_piece_may_hold_partial_records(text: str) -> None:
    """The scan asks Hyperscan, in the pass that keeps lines, whether a piece may hold a runtime's
    partial records (connectors/text.py PARTIAL_MARKERS): the same lines kept, the same answer."""
    kept, marked = prefilter.LineMatcher(LITERALS, PARTIAL_MARKERS).scan(text)
    assert kept == prefilter.LineMatcher(LITERALS).lines(text)
    assert marked == any(m in text for m in PARTIAL_MARKERS)
    assert holds_partial_records(text, marked) == holds_partial_records(text)


def test_the_engine_is_chosen_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(prefilter.ENV, "duckdb")
    assert prefilter.engine() == "duckdb"
    monkeypatch.setenv(prefilter.ENV, "grep")
    with pytest.raises(BadInput, match="one of hyperscan, duckdb"):
        prefilter.engine()
    monkeypatch.delenv(prefilter.ENV)
    assert prefilter.engine() == ("hyperscan" if prefilter._hyperscan() else "duckdb")


def _without_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k not in ("duration_ms", "created_at")}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


@needs_hyperscan
@pytest.mark.slow  # 15 bundles diagnosed on each engine
def test_both_engines_give_the_same_diagnoses(monkeypatch: pytest.MonkeyPatch) -> None:
    from workload_attribution.contracts.identity import Target
    from workload_attribution.flows.config import load_config
    from workload_attribution.flows.inline import attribute_inline
    from workload_attribution.flows.pipeline import load_rules, resolve

    cfg = load_config().model_copy(update={"warehouse": ""})
    pack = load_rules(None)
    assert BUNDLES
    for bundle in BUNDLES:
        seen = {}
        for name in prefilter.ENGINES:
            monkeypatch.setenv(prefilter.ENV, name)
            d = attribute_inline(*resolve(cfg, Target(bundle=str(bundle)), pack))
            seen[name] = _without_timings(d.model_dump(mode="json"))
        assert seen["hyperscan"] == seen["duckdb"], bundle.name


def re2_matches(patterns: list[str], lines: list[str]) -> list[list[bool]]:
    """By pattern, whether DuckDB's regexp_matches (RE2) finds it in each line."""
    import json

    con = duckdb.connect()
    con.execute(
        "CREATE TABLE l AS SELECT unnest(j) AS t, generate_subscripts(j, 1) AS i "
        "FROM (SELECT from_json($j, '[\"VARCHAR\"]') AS j)",
        {"j": json.dumps(lines)},
    )
    out = []
    for p in patterns:
        q = "'" + p.replace("'", "''") + "'"
        found = con.execute(f"SELECT list(regexp_matches(t, {q}) ORDER BY i) FROM l").fetchone()
        out.append(found[0] if found and found[0] else [False] * len(lines))
    return out


def hyperscan_matches(patterns: list[str], lines: list[str]) -> list[list[bool]]:
    """The same, as the concepts ask it: Hyperscan's database of the alternatives it reads alike,
    and RE2 (DuckDB) for each pattern's rest."""
    m = prefilter.PatternMatcher(tuple(patterns))
    rest = re2_matches([r or "(?:$.)" for r in m.rest], lines)  # no rest: matches nothing
    said = [m.matching(line) for line in lines]
    return [[i in s or (bool(m.rest[i]) and r) for s, r in zip(said, rest[i])] for i in range(len(patterns))]


# What RE2 and Hyperscan could read apart: shorthand classes (Hyperscan's \s takes a vertical tab;
# RE2 folds \w's case under (?i)), the end of the text ($ before a final line break), counted
# repeats of multi-byte characters, Unicode case folding (the Kelvin sign, the long s), word
# boundaries next to letters beyond ASCII, and what Hyperscan refuses (a pattern matching the
# empty text, too large a repeat): each tried bare and case-insensitive.
CONSTRUCTS = [
    r"a\sb", r"a\Sb", r"a[\s_]b", r"a[^\s]b", r"a\wb", r"a\Wb", r"a\db", r"a\Db", r"a[\w.]b", r"ab$",
    r"(?:^|[^A-Za-z0-9])ab(?:[^A-Za-z]|$)", r"\bk", r"k\b", r"limit\b.{0,5}\bhit", r"x[^`]{1,3}y",
    r"x[^`]{1,200}y", r"kill", r"status", r"a[^A-Za-z0-9]b", r"^ab", r"a.b", r"a{2,3}b", r"a\.b",
    r"a\-b", r"a*", r"a|b*", r"(?i)x|ab", r"a\x{62}", r"é", r"\pL", r"a[[:space:]]b", r"(?s:a.b)",
    r"(?m:ab$)", r"[]a]b", r"a{,2}b", r"a[\t]b", r"can't", r"I/O error",
]  # fmt: skip
TRICKY = [
    "a b", "a\x0bb", "a\u00a0b", "a\u2003b", "a\tb", "a\nb", "a\rb", "aKb", "akb", "a\u212ab", "a\u017fb",
    "aéb", "a\u0663b", "a1b", "a_b", "a.b", "ab", "AB", "ab\n", "ab\r", "xab\n", "\u212a", "k", "K", "ké",
    "éxk", "\u212aILL", "KILL", "\u017ftatus", "STATUS", "limit  hit", "LIMIT\u00e9\u00e9HIT",
    "limit \u00e9\u00e9\u00e9\u00e9 hit", "x\u00e9\u00e9\u00e9y", "x\u00e9\u00e9\u00e9\u00e9y", "x``y",
    "x" + "\u4e2d" * 150 + "y", "aab", "aaab", "AAB", "a-b", "ſ", "", "\u00e9", "a{,2}b", "]b", "a\u0000b",
    "can't", "CAN'T", "i/o error", "I/O\u00a0error",
]  # fmt: skip


@needs_hyperscan
def test_hyperscan_finds_a_pattern_where_re2_does() -> None:
    patterns = CONSTRUCTS + [f"(?i:{p})" for p in CONSTRUCTS]
    want = re2_matches(patterns, TRICKY)
    got = hyperscan_matches(patterns, TRICKY)
    for p, w, g in zip(patterns, want, got):
        assert [t for t, yes in zip(TRICKY, g) if yes] == [t for t, yes in zip(TRICKY, w) if yes], p
    assert sum(map(sum, want)) > 100  # the lines do match, and some do not
    assert sum(map(len, want)) - sum(map(sum, want)) > 100


def test_what_hyperscan_may_read_otherwise_is_left_to_re2() -> None:
    form = prefilter.hyperscan_form
    assert form(r"(?i:a[\s_\-]*b)$") == r"(?i:a[\t\n\f\r _\-]*b)\z"
    assert form(r"\w\S\d") == r"[0-9A-Za-z_][^\t\n\f\r ][0-9]"
    for refused in (r"[^\S]", r"é", r"\pL", r"\x41", r"(?m:^a)", r"(?s).", r"[]a]", r"[[:alpha:]]", r"a{,2}",
                    r"a{1,200}", r"[\b]", r"\Qa\E", "a\\"):  # fmt: skip
        assert form(refused) is None, refused
    assert prefilter.alternatives(r"(?:a|b)|[|]|\||c") == ["(?:a|b)", "[|]", r"\|", "c"]
    assert prefilter.alternatives(r"(?i)a|b") == [r"(?i)a|b"]  # the flag reaches across
    if prefilter._hyperscan() is not None:
        m = prefilter.PatternMatcher((r"a*|bc|x{1,200}", r"de"))
        assert m.rest == ("a*|x{1,200}", "")  # refused by Hyperscan (the empty text), and too large a repeat
        assert m.matching("xbc de") == {0, 1} and m.matching("a") == set()
