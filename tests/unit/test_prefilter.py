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
