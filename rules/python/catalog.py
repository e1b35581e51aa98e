"""The message catalogs (rules/catalogs/*.csv, the attempt's `catalog` table) matched against the
attempt's lines and Kubernetes records in one pass of one automaton, not one regex per row.

1. Every row is found by a literal it always contains (rules/catalog.py derives it from the
   pattern; the scan kept only lines holding one). Hyperscan (staging/prefilter.py) lists every
   literal each line holds, the lines scanned at once, its database compiled once per process.
   Without it, one RE2 alternation of all of them, longest first, lists them: one DFA pass over
   the line, but compiled at every attempt (~13 ms for ~350 literals) and ~30 us a line.
2. An alternation reports matches that do not overlap, so a literal starting inside another's
   match is not listed; the rows to try on a line are those of the literals it lists and, unless
   Hyperscan listed them all, of the literals that can overlap those (`_hidden`), for the line's
   source. Lines holding the same literals share that work: it is done once per distinct set.
3. Each candidate row's own pattern is checked on its lines with the pattern written into the
   query, so DuckDB compiles it once, and only the rows some line may match are written.

A line gives one event per symptom (the first matching row in catalog order names it).
"""

from __future__ import annotations

import bisect
import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from workload_attribution.staging.prefilter import engine, held_rows

if TYPE_CHECKING:
    import duckdb

    from workload_attribution.rules.engine import Settings

_COLUMNS = (
    "row_no, id, family, sources, literals, regex, peer_group, symptom, role, terminal_state, sub_domain, action, blame"
)


# NamedTuples, not dataclasses: the pack loads this module by path, outside sys.modules
class _Row(NamedTuple):
    row_no: int
    id: str
    family: str
    sources: tuple[str, ...]
    literals: tuple[str, ...]
    regex: str
    peer_group: int | None
    symptom: str
    role: str
    terminal_state: str | None
    sub_domain: str | None
    action: str
    blame: str


class _Matcher(NamedTuple):
    rows: dict[int, _Row]
    literals: tuple[str, ...]
    alternation: str
    by_literal: dict[str, tuple[int, ...]]
    sources: tuple[str, ...]

    def candidates(self, source: str, found: list[str], every: bool = False) -> list[int]:
        """The rows of the source a line holding `found` may match: `every` when found lists every
        literal the line holds (Hyperscan's), else also those an alternation's scan hides."""
        if every:
            literals = set(found)
        else:  # worked out only where the fallback scans (~37 ms of a new process's first attempt)
            hidden = _hidden(self.literals)
            literals = set(found).union(*(hidden.get(f, frozenset()) for f in found))
        rows = {n for lit in literals for n in self.by_literal.get(lit, ())}
        return sorted(n for n in rows if source in self.rows[n].sources)


_PAIRS = json.dumps([{"source": "VARCHAR", "found": "VARCHAR[]", "row_no": "INTEGER"}])


def _sql_text(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _escape(literal: str) -> str:
    return "".join("\\" + c if c in ".^$*+?()[]{}|\\" else c for c in literal)


@lru_cache(maxsize=4)
def _matcher(rows: tuple[_Row, ...]) -> _Matcher:
    literals = sorted({lit for r in rows for lit in r.literals}, key=lambda s: (-len(s), s))
    by_literal: dict[str, list[int]] = {}
    for r in rows:
        for lit in r.literals:
            by_literal.setdefault(lit, []).append(r.row_no)
    return _Matcher(
        rows={r.row_no: r for r in rows},
        literals=tuple(literals),
        alternation="|".join(_escape(lit) for lit in literals),
        by_literal={k: tuple(v) for k, v in by_literal.items()},
        sources=tuple(sorted({s for r in rows for s in r.sources})),
    )


@lru_cache(maxsize=4)
def _hidden(literals: tuple[str, ...]) -> dict[str, frozenset[str]]:
    """Per literal, the literals an occurrence of it can hide from a non-overlapping scan: those
    inside it, and those starting inside it (a suffix of it is a prefix of theirs)."""
    by_prefix: dict[str, set[str]] = {}
    for b in literals:
        for k in range(1, len(b)):
            by_prefix.setdefault(b[:k], set()).add(b)
    inside = _inside(literals)
    out: dict[str, frozenset[str]] = {}
    for a in literals:
        hidden = {b for k in range(1, len(a) + 1) for b in by_prefix.get(a[-k:], ())}
        hidden |= inside[a]
        out[a] = frozenset(hidden - {a})
    return out


def _inside(literals: tuple[str, ...]) -> dict[str, set[str]]:
    """Per literal, the other literals it holds: each literal's occurrences found in all of them
    joined (one C search each, not one test per pair: ~10 ms of a new process's first attempt)."""
    sep = "\x00"
    inside: dict[str, set[str]] = {a: set() for a in literals}
    if any(sep in lit for lit in literals):
        for a in literals:
            inside[a] = {b for b in literals if b != a and b in a}
        return inside
    joined = sep.join(literals)
    starts, at = [], 0
    for a in literals:
        starts.append(at)
        at += len(a) + 1
    for b in set(literals):
        i = joined.find(b)
        while i != -1:  # an occurrence lies within one literal (none holds the separator)
            a = literals[bisect.bisect_right(starts, i) - 1]
            if a != b:
                inside[a].add(b)
            i = joined.find(b, i + 1)
    return inside


def _stage_lines(con: duckdb.DuckDBPyConnection, m: _Matcher) -> bool | None:
    """catalog_lines: the lines and records of the catalogs' sources holding a literal, with the
    literals each holds: every one of them when Hyperscan found them (then True; None when it
    found no line, and no table is staged), else those an alternation lists."""
    log_sources = [s for s in m.sources if s != "kueue"]
    parts = []
    if log_sources:
        # the line as written (prefix-blind: a pattern matches wherever the message sits, whatever the
        # grammar took for a prefix); a Docker json-file line's message is its `log`, decoded
        parts.append(
            "SELECT obs_id, source, CASE WHEN starts_with(text, '{\"log\":') AND json_valid(text) "
            "THEN rtrim(coalesce(json_extract_string(text, '$.log'), ''), chr(10) || chr(13)) ELSE text END AS body "
            f"FROM log_lines WHERE source IN ({', '.join(map(_sql_text, log_sources))})"
        )
    if "kueue" in m.sources:
        parts.append("SELECT obs_id, source, text AS body FROM records WHERE source = 'kueue' AND text IS NOT NULL")
    staged = " UNION ALL ".join(parts)
    # a literal holding a line break (a NUL: one inside a record, as scanned) is the alternation's
    if engine() == "hyperscan" and not any("\n" in lit or "\0" in lit for lit in m.literals):
        return _stage_held(con, staged, m)
    # the alternation written once: each place it is written, DuckDB compiles it (~13 ms for the
    # pack's ~350 literals); a line holds a literal exactly when it lists one (none is empty)
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE catalog_lines AS
            SELECT obs_id, source, body, list_sort(list_distinct(found)) AS found
            FROM (SELECT obs_id, source, body, regexp_extract_all(body, {_sql_text(m.alternation)}) AS found
                  FROM ({staged}))
            WHERE len(found) > 0"""
    )
    return False


def _stage_held(con: duckdb.DuckDBPyConnection, staged: str, m: _Matcher) -> bool | None:
    """catalog_lines from Hyperscan's scan of the staged lines (the one concepts runs): each kept
    line's id and the number of its set of literals handed back as text, the few distinct sets
    as a list (a line holding none is not kept, as the alternation keeps none). Most attempts'
    lines hold none: then nothing is staged (None)."""
    held = list(held_rows(con.execute(f"SELECT obs_id, body FROM ({staged})"), m.literals))
    if not held:
        return None
    sets: dict[tuple[str, ...], int] = {}
    for _, found in held:
        sets.setdefault(found, len(sets) + 1)
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE catalog_lines AS
            SELECT s.obs_id, s.source, s.body, ($sets::VARCHAR[][])[k.found_no] AS found
            FROM ({staged}) s
            JOIN (SELECT unnest(string_split($ids, ','))::BIGINT AS obs_id,
                         unnest(string_split($nos, ','))::INTEGER AS found_no) k ON k.obs_id = s.obs_id""",
        {
            "ids": ",".join(str(obs_id) for obs_id, _ in held),
            "nos": ",".join(str(sets[found]) for _, found in held),
            "sets": [list(found) for found in sets],
        },
    )
    return True


def _matches(
    con: duckdb.DuckDBPyConnection, m: _Matcher, every: bool = False
) -> list[tuple[int, int, str | None, int | None]]:
    """(obs_id, row_no, peer, where a notice's match ends) for every row whose pattern matches a
    staged line (`every`: the lines list every literal they hold)."""
    pairs = [
        {"source": source, "found": found, "row_no": n}
        for source, found in con.execute("SELECT DISTINCT source, found FROM catalog_lines").fetchall()
        for n in m.candidates(source, found, every)
    ]
    if not pairs:
        return []
    wanted = sorted({p["row_no"] for p in pairs})
    check = " ".join(f"WHEN {n} THEN regexp_matches(l.body, {_sql_text(m.rows[n].regex)})" for n in wanted)
    peers = [n for n in wanted if m.rows[n].peer_group]
    peer = (
        "CASE c.row_no "
        + " ".join(
            f"WHEN {n} THEN regexp_extract(l.body, {_sql_text(m.rows[n].regex)}, {m.rows[n].peer_group})" for n in peers
        )
        + " END"
        if peers
        else "NULL"
    )
    # where a notice's match ends on its line: a concept may still read what a wrapper embeds
    # after it ("Execution of replica 0 failed: <the error>"; phases.drop_overridden)
    notices = [n for n in wanted if m.rows[n].role in ("context", "benign")]
    ends = (
        "CASE c.row_no "
        + " ".join(
            f"WHEN {n} THEN strpos(l.body, regexp_extract(l.body, {_sql_text(m.rows[n].regex)})) "
            f"+ length(regexp_extract(l.body, {_sql_text(m.rows[n].regex)})) - 1"
            for n in notices
        )
        + " END"
        if notices
        else "NULL"
    )
    return con.execute(
        f"""SELECT l.obs_id, c.row_no, nullif({peer}, '') AS peer, {ends} AS notice_end
            FROM catalog_lines l
            JOIN (SELECT unnest(from_json($p::JSON, $shape), recursive := true)) c
              ON c.source = l.source AND c.found = l.found
            WHERE CASE c.row_no {check} END
            ORDER BY l.obs_id, c.row_no""",
        {"p": json.dumps(pairs), "shape": _PAIRS},
    ).fetchall()


def _row(values: tuple[Any, ...]) -> _Row:
    # sources and literals (_COLUMNS' 4th and 5th) are lists: tuples, so the rows key _matcher
    return _Row._make((*values[:3], tuple(values[3]), tuple(values[4]), *values[5:]))


def match(con: duckdb.DuckDBPyConnection, settings: Settings) -> list[dict[str, Any]]:
    rows = tuple(_row(r) for r in con.execute(f"SELECT {_COLUMNS} FROM catalog ORDER BY row_no").fetchall())
    if not rows:
        return []
    m = _matcher(rows)
    every = _stage_lines(con, m)
    if every is None:
        return []
    out: list[dict[str, Any]] = []
    seen: set[tuple[int, str]] = set()
    for obs_id, row_no, peer, notice_end in _matches(con, m, every):
        r = m.rows[row_no]
        if (obs_id, r.symptom) in seen:
            continue
        seen.add((obs_id, r.symptom))
        out.append(
            {
                "obs_id": obs_id,
                "symptom": r.symptom,
                "role_hint": r.role,
                "terminal_state": r.terminal_state,
                "sub_domain": r.sub_domain,
                "action": None if r.role in ("cascade", "context", "benign") else r.action,
                "blame": r.blame,
                "peer_node": peer,
                "attrs": {
                    "catalog": r.id,
                    "family": r.family,
                    **({"peer": peer} if peer else {}),
                    **({"notice_end": notice_end} if notice_end else {}),
                },
            }
        )
    con.execute("DROP TABLE IF EXISTS catalog_lines")
    return out
