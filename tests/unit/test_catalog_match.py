"""The catalog's matching (rules/python/catalog.py) finds the same rows on the same lines whichever
engine lists the literals a line holds: Hyperscan, every literal wherever occurrences overlap, or
without it DuckDB's RE2 alternation, whose scan does not report a literal hidden by an overlapping
one (then the rows of the literals that can hide behind those are tried too: `_hidden`)."""

from __future__ import annotations

import re

import pytest

from tests.helpers import claims_on_each_engine
from workload_attribution.rules.claims import Probe
from workload_attribution.rules.pack import default_pack
from workload_attribution.staging import prefilter


@pytest.fixture(scope="module")
def pack():
    return default_pack()


def _hiding(test_line: str, hidden: str, by: str) -> str | None:
    """The row's test line with `by` written over its literal `hidden` so that an occurrence of
    `by` starts first and overlaps it (`hidden` inside `by`, or a suffix of `by` its prefix), the
    literal itself left in place."""
    at = test_line.find(hidden)
    if at < 0 or by == hidden:
        return None
    inside = by.find(hidden)
    if inside > 0:
        return test_line[:at] + by[:inside] + hidden + by[inside + len(hidden) :] + test_line[at + len(hidden) :]
    for k in range(min(len(by), len(hidden)) - 1, 0, -1):
        if by[-k:] == hidden[:k]:
            return test_line[:at] + by[:-k] + test_line[at:]
    return None


def _hidden_lines(pack) -> list[tuple[str, Probe]]:
    """(row id, a line of its source where the alternation's scan hides a literal of the row)."""
    literals = sorted({lit for row in pack.catalog for lit in row.literals}, key=lambda s: (-len(s), s))
    alternation = re.compile("|".join(map(re.escape, literals)))  # leftmost, then first listed: as RE2's
    out = []
    for row in pack.catalog:
        for lit in row.literals:
            for by in literals:
                line = _hiding(row.test_line, lit, by)
                if line is not None and lit not in alternation.findall(line):
                    out.append((row.id, Probe(row.sources[0], line)))
                    break  # one a literal
    return out


@pytest.mark.skipif(prefilter._hyperscan() is None, reason="the hyperscan wheel is not installed here")
def test_the_rows_matched_are_the_same_found_by_hyperscan_or_the_alternation(pack, monkeypatch) -> None:
    """Every row's test line, each behind a Docker json-file envelope, a record with a line break,
    and lines where a row's literal is hidden from the alternation's scan by another overlapping
    it: the same (line, row) pairs either way, and the hidden rows found."""
    hidden = _hidden_lines(pack)
    probes = [Probe(row.sources[0], row.test_line) for row in pack.catalog] + [p for _, p in hidden]
    found = {
        name: [sorted(e["attrs"]["catalog"] for e in events if "catalog" in e["attrs"]) for events in per_probe]
        for name, per_probe in claims_on_each_engine(pack, "catalog:match", probes, monkeypatch).items()
    }
    assert found["hyperscan"] == found["duckdb"]
    assert sum(bool(rows) for rows in found["duckdb"]) >= len(pack.catalog)
    first = len(pack.catalog) + 1
    matched = [row_id for (row_id, _), rows in zip(hidden, found["duckdb"][first:], strict=False) if row_id in rows]
    assert len(hidden) >= 20 and len(matched) >= 10, (len(hidden), len(matched))
