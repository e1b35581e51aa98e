"""The failure concepts (rules/concepts/*.yaml, the attempt's `concepts` table) read on the lines
and records no more specific rule claims: one event per line, the first concept in file order
that the line says, in its context, at a level that ended something.

1. The lines and records holding any concept's words are staged once (`concept_lines`): a log
   line as written (a Docker json-file line as its decoded `log`), a record by its text. Where
   Hyperscan scans, it also says there which concepts each kept line says (each concept's words
   as one pattern, read as RE2 reads it: staging/prefilter.py hyperscan_form), and only the lines
   saying one are staged; otherwise (or for a pattern left to RE2) DuckDB's RE2 finds them.
2. Each concept's words, context (`where_`: on the line, or on a kept line of its file at most
   AROUND lines away, where an exception's message goes on) and exclusions (`unless_`, on the line)
   are written into one query, so DuckDB compiles each pattern once.
3. What comes before the words decides whether the line says it happened: a lower level
   (`WARNING`, `INFO`, glog `W1120`) or a hedge ("may run out of memory", "retrying after") does
   not. A record's text (a pod's reason, a workload condition) is the scheduler's own word.

The event carries the concept and the words that matched (attrs.concept, attrs.words) and, for a
concept that blames the host the text names, that host (an allocation host named in the text,
else an IPv4 address: catalog-peer-to-host maps it to the allocation).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from workload_attribution.staging.prefilter import engine, patterns, rows_holding

if TYPE_CHECKING:
    import duckdb

    from workload_attribution.rules.engine import Settings

LOG_SOURCES = ("app", "syslog", "scheduler_log", "fabricmanager")
# a level below error in what precedes the words: the line reports, it does not fail
LOWER_LEVEL = (
    r"(?i:\b(?:warn(?:ing)?|info|debug|notice|trace|verbose)\b|level=(?:warn|info|debug))"
    r"|(?:^|[\s\[])[WIDV]\d{4} \d|\[[WIDV]\]|<[4-7]>"
)
# a hedge before the words: advice, a possibility, a retry, a recovery ...
HEDGE = (
    r"(?i:\b(?:consider|retry(?:ing)?|retries|if|whether|unless|hint|tip|e\.g|example|see|documentation|docs|"
    r"recovered|resolved|cleared|indicates?|possibl[ey]|probabl[ey]|likely|suggests?)\b)"
)
# ... and right before them, a modal or a negation: "may run out of memory", "no OOM", "not
# preempted" (further back, "Could not synchronize CUDA stream: CUDA_ERROR_ILLEGAL_ADDRESS" is a
# failure that goes on to say which)
NEAR_HEDGE = (
    r"(?i:\b(?:may|might|could|would|should|can|will|avoid(?:ing)?|prevent(?:ing)?|reduc(?:e|ing)|"
    r"no|not|without|never)\b)"
)
NEAR = 24  # characters before the words a modal or a negation reaches


# SQL: what precedes a line's first words (`upto`: the line up to their end, `^(?:.*?)(?:says)`;
# `words`: the words said, the first of them the same leftmost match), as `^(.*?)(?:says)` would
# capture it: a capture group costs RE2 ~50 us a line (its slowest engine), a match ~0.3 us. None
# when the words start past the text's first line (`.` takes no line break).
LEAD = "CASE WHEN upto = '' THEN '' ELSE substring(upto, 1, length(upto) - length(words[1])) END"


def _not_said(lead: str) -> str:
    """SQL: what comes before the words says the line does not report the failure: a hedge, a lower
    level (unless the concept is read at any level: `any_level`), a modal or a negation right
    before them. Each pattern written once, for every concept's lines (a pattern written for
    each concept is compiled for each)."""
    return (
        f"(regexp_matches({lead}, {_sql_text(HEDGE)}) "
        f"OR (NOT any_level AND regexp_matches({lead}, {_sql_text(LOWER_LEVEL)})) "
        f"OR regexp_matches(right({lead}, {NEAR}), {_sql_text(NEAR_HEDGE)}))"
    )


class _Concept(NamedTuple):
    no: int
    decides: bool
    id: str
    symptom: str
    sources: tuple[str, ...]
    says: str
    where_: str
    unless_: str
    any_level: bool
    blame: str
    literals: tuple[str, ...]


def _sql_text(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


# a line as written; a Docker json-file line's message is its `log`, decoded
_AS_WRITTEN = (
    "CASE WHEN starts_with(text, '{\"log\":') AND json_valid(text) "
    "THEN rtrim(coalesce(json_extract_string(text, '$.log'), ''), chr(10) || chr(13)) ELSE text END"
)
AROUND = 3  # a line's context: the kept lines of its file this many lines either side


def _escape(literal: str) -> str:
    return "".join("\\" + ch if ch in ".^$*+?()[]{}|\\" else ch for ch in literal)


@lru_cache(maxsize=8)
def _alternation(literals: tuple[str, ...]) -> str:
    """SQL: the concepts' literals as one RE2 alternation (~1,900 of them escaped: ~6 ms an attempt
    built anew, the same for every attempt of a pack)."""
    return _sql_text("|".join(sorted({_escape(lit) for lit in literals})))


class _Staged(NamedTuple):
    """What _stage kept: the number of lines staged; the concepts Hyperscan found a staged line
    saying (`said`: their numbers, each line's in its `heard` column; None on DuckDB's engine,
    which stages no such column); and the concepts RE2 reads on them, each by the pattern it reads
    (`rest`: all of the words on DuckDB's engine, the alternatives Hyperscan leaves to RE2 on its
    own)."""

    lines: int
    said: frozenset[int] | None
    rest: dict[int, str]


def _stage(con: duckdb.DuckDBPyConnection, concepts: list[_Concept]) -> _Staged:
    """concept_lines: the staged lines of the concepts' sources (and records' texts) holding one of
    their literals. The lines are scanned at once by Hyperscan (staging/prefilter.py) when it is
    there: its database is compiled once per process (~26 ms), where DuckDB compiles the RE2
    alternation of the ~2,000 literals anew for every attempt (~20-40 ms) and runs it at ~29 us a
    line. Without it, that alternation (one DFA over plain strings, not one alternation of every
    concept's words: case-insensitive groups and joins run RE2 out of DFA, 200 s over 50,000
    lines). The same lines either way (of which Hyperscan stages only those saying a concept)."""
    logs = sorted({s for c in concepts for s in c.sources if s in LOG_SOURCES})
    parts = []
    if logs:
        parts.append(
            f"SELECT obs_id, source, path, lineno, {_AS_WRITTEN} AS text "
            f"FROM log_lines WHERE source IN ({', '.join(map(_sql_text, logs))})"
        )
    if any("records" in c.sources for c in concepts):
        parts.append(
            "SELECT obs_id, 'records' AS source, NULL AS path, NULL AS lineno, text FROM records WHERE text IS NOT NULL"
        )
    staged = f"SELECT obs_id, source, path, lineno, text FROM ({' UNION ALL '.join(parts)})"
    literals = tuple(sorted({lit for c in concepts for lit in c.literals if lit}))
    if engine() == "hyperscan":
        return _stage_scanned(con, staged, concepts, literals)
    says = _alternation(literals)
    row = con.execute(
        f"CREATE OR REPLACE TEMP TABLE concept_lines AS {staged} WHERE regexp_matches(text, {says})"
    ).fetchone()
    return _Staged(row[0] if row else 0, None, {c.no: c.says for c in concepts})


def _stage_scanned(
    con: duckdb.DuckDBPyConnection, staged: str, concepts: list[_Concept], literals: tuple[str, ...]
) -> _Staged:
    """concept_lines from Hyperscan's scans: of the lines holding a literal, those a concept of
    their source says (its `says`, all concepts' at once: ~5 us a line, where DuckDB compiles the
    19 patterns anew for every attempt, ~21 ms), each with the concepts it says (`heard`); and
    those holding a literal of a concept with alternatives left to RE2, for RE2 to read."""
    said: set[int] = set()
    rest: dict[int, str] = {}
    kept = list(rows_holding(con.execute(f"SELECT obs_id, source, text FROM ({staged})"), literals))
    if not kept:  # most attempts: no line holds a concept's literal (nor is the patterns' database loaded)
        return _Staged(0, frozenset(), rest)
    m = patterns(tuple(c.says for c in concepts))
    unsure = [(c.no, set(c.sources), set(c.literals), rest) for c, rest in zip(concepts, m.rest) if rest]
    ids: list[str] = []
    nos: list[str] = []
    for (obs_id, source, text), held in kept:
        heard = [c.no for c in (concepts[i] for i in sorted(m.matching(text))) if source in c.sources]
        said.update(heard)
        for_re2 = {
            no: pattern
            for no, sources, lits, pattern in unsure
            if no not in heard and source in sources and not lits.isdisjoint(held)
        }
        rest |= for_re2
        if heard or for_re2:
            ids.append(str(obs_id))
            nos.append(" ".join(map(str, heard)))
    if not ids:  # no line says a concept's words: nothing reads the table then
        return _Staged(0, frozenset(), rest)
    row = con.execute(
        f"""CREATE OR REPLACE TEMP TABLE concept_lines AS
            SELECT s.*, CASE WHEN k.nos = '' THEN []::INTEGER[] ELSE string_split(k.nos, ' ')::INTEGER[] END AS heard
            FROM ({staged}) s
            JOIN (SELECT unnest(string_split($ids, ','))::BIGINT AS obs_id,
                         unnest(string_split($nos, ',')) AS nos) k ON k.obs_id = s.obs_id""",
        {"ids": ",".join(ids), "nos": ",".join(nos)},
    ).fetchone()
    return _Staged(row[0] if row else 0, frozenset(said), rest)


def _heard(con: duckdb.DuckDBPyConnection, concepts: list[_Concept], staged: _Staged) -> list[_Concept]:
    """The concepts whose words a staged line of their sources says, in file order: the only ones
    _said can find. Those Hyperscan found; for the others RE2 reads (`rest`), one pass of each
    concept's own pattern, so the full reading of a concept (its lead, hedges, context, neighbours:
    ~7 patterns each, ~70 ms to plan for the pack's 19 whatever the lines) is planned only for the
    one or two a tiny attempt's lines say."""
    found = set(staged.said or ())
    unsure = [c for c in concepts if c.no in staged.rest and c.no not in found]
    if unsure:
        flags = [
            f"bool_or(source IN ({', '.join(map(_sql_text, c.sources))}) "
            f"AND regexp_matches(text, {_sql_text(staged.rest[c.no])}))"
            for c in unsure
        ]
        row = con.execute(f"SELECT [{', '.join(flags)}] FROM concept_lines").fetchone()
        found |= {c.no for c, yes in zip(unsure, (row[0] if row else None) or []) if yes}
    return [c for c in concepts if c.no in found]


def _says(c: _Concept, staged: _Staged, line: str = "") -> str:
    """SQL: the staged line says the concept's words: as Hyperscan found (`heard`), or RE2 reads."""
    said = [f"list_contains({line}heard, {c.no})"] if staged.said is not None else []
    if c.no in staged.rest:
        said.append(f"regexp_matches({line}text, {_sql_text(staged.rest[c.no])})")
    return f"({' OR '.join(said)})" if said else "false"


def _near(c: _Concept, staged: _Staged) -> str:
    """SQL: the staged lines saying the concept whose context a kept line of the same file says,
    at most AROUND lines away (an exception's message goes on below it: "ResourceExhaustedError:
    2 root error(s) found." then "(0) ... device:GPU:0"). An equi-join on (path, line number) over
    each line's few neighbours, not a range join over the file's kept lines."""
    return (
        "SELECT b.obs_id FROM concept_lines b CROSS JOIN range(-" + str(AROUND) + ", " + str(AROUND + 1) + ") r(d) "
        "JOIN log_lines n ON n.path = b.path AND n.lineno = b.lineno + r.d "
        f"WHERE r.d <> 0 AND b.path IS NOT NULL AND {_says(c, staged, 'b.')} "
        f"AND regexp_matches(n.text, {_sql_text(c.where_)})"
    )


def _said(
    con: duckdb.DuckDBPyConnection, concepts: list[_Concept], staged: _Staged
) -> list[tuple[int, int, list[str], int, str]]:
    """(obs_id, concept_no, words, where they start, text) for every concept a staged line says, in
    its context."""
    parts = []
    for c in concepts:
        says = _sql_text(c.says)
        # the line up to the end of its first words (LEAD takes them off)
        upto = f"regexp_extract(text, {_sql_text('^(?:.*?)(?:' + c.says + ')')})"
        cond = [f"source IN ({', '.join(map(_sql_text, c.sources))})", _says(c, staged)]
        if c.unless_:
            cond.append(f"NOT regexp_matches(text, {_sql_text(c.unless_)})")
        here = f"regexp_matches(text, {_sql_text(c.where_)})" if c.where_ else "true"
        part = (
            f"SELECT obs_id, {c.no} AS concept_no, {str(c.decides).lower()} AS decides, {here} AS here, "
            f"{str(c.any_level).lower()} AS any_level, source, regexp_extract_all(text, {says}) AS words, "
            f"{upto} AS upto, text FROM concept_lines l WHERE {' AND '.join(cond)}"
        )
        # the context on the line (`here`, its pattern written once) or on a neighbour
        parts.append(f"SELECT * FROM ({part}) WHERE here OR obs_id IN ({_near(c, staged)})" if c.where_ else part)
    # a line's meaning: one that ends an attempt before a cascade, one whose context the line
    # itself says before one its neighbours say, then file order
    return con.execute(
        f"SELECT obs_id, concept_no, words, length(lead) + 1 AS starts, text "
        f"FROM (SELECT *, {LEAD} AS lead FROM ({' UNION ALL '.join(parts)})) "
        f"WHERE source = 'records' OR NOT {_not_said('lead')} ORDER BY obs_id, decides DESC, here DESC, concept_no"
    ).fetchall()


_IPV4 = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})(?![\d.])")


def _named(text: str, hosts: list[str]) -> str | None:
    """The host the text names: an allocation host (by its short name, case aside), else an IPv4."""
    low = text.lower()
    for host in sorted(hosts, key=len, reverse=True):
        short = host.split(".")[0].lower()
        if re.search(rf"(?<![\w.-]){re.escape(short)}(?![\w-])", low):
            return host
    m = _IPV4.search(text)
    return m.group(1) if m else None


def _clean(words: list[str]) -> list[str]:
    """The words as said, without the boundary characters the patterns took with them."""
    out: list[str] = []
    for w in words:
        w = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", w)
        if w and w not in out:
            out.append(w)
    return out[:5]


def match(con: duckdb.DuckDBPyConnection, settings: Settings) -> list[dict[str, Any]]:
    concepts = [_Concept(*r) for r in con.execute("SELECT * FROM concepts ORDER BY concept_no").fetchall()]
    if not concepts:
        return []
    by_no = {c.no: c for c in concepts}
    # most attempts' lines say no concept's words: nothing to read then
    staged = _stage(con, concepts)
    heard = _heard(con, concepts, staged) if staged.lines else []
    hosts = list((con.execute("SELECT nodes FROM attempt").fetchone() or [[]])[0] or []) if heard else []
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    for obs_id, no, words, starts, text in _said(con, heard, staged) if heard else []:
        if obs_id in seen:  # the first row of a line is its meaning (_said's order)
            continue
        seen.add(obs_id)
        c = by_no[no]
        peer = _named(text, hosts) if c.blame == "peer" else None
        out.append(
            {
                "obs_id": obs_id,
                "symptom": c.symptom,
                "blame": c.blame,
                "peer_node": peer,
                "attrs": {"concept": c.id, "words": _clean(words), "at": starts, **({"peer": peer} if peer else {})},
            }
        )
    con.execute("DROP TABLE IF EXISTS concept_lines")
    return out
