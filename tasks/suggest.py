"""`attribution rules suggest`: catalog rows drafted from what the fleet's unexplained attempts logged.

The warehouse keeps the log templates of every doubtful diagnosis and of every attempt that ended
well (attempt_templates, tasks/novelty.py). Here the `insufficient_evidence` attempts of a window
are grouped by the messages they logged that no completed attempt ever logged:

- a message is a template's first line with its log prefix taken off (staging's prefix grammar,
  `parse_log_line`'s body) and masked as templates are (tasks/templates.py; the attempt's host
  names too), so one message read under different prefixes (time stamp forms, rank labels,
  syslog headers) is one group;
- only messages logged at error level or as an exception (an `...Error:`/`...Exception` word);
- not one any completed attempt with templates kept logged (the same message key, any time);
- not one the pack already reads: the first line is run through the pack's extract rules
  (rules/claims.py); a line a catalog row or a specific rule claims is known (left out, said
  why); a line only a failure concept reads gets the concept's meaning proposed.

This is novelty's notion (tasks/novelty.py) taken fleet-wide: a diagnosis' own `novel_templates`
are relative to its job's last good attempt and capped at 10, so they are recomputed here from the
rows every attempt keeps, against every completed attempt at once.

Groups are ranked by attempts, then hosts (those of each attempt's first such line: the table keeps
one first line per template and attempt). For each of the first `top` a catalog row is drafted:
the message as an RE2 pattern (each masked part a bounded class wide enough for every line of the
group, checked on each in DuckDB's RE2; a literal when nothing is masked), whose longest literal
is the scan's pre-filter (4+ characters: rules/catalog.py literals_of, MIN_LITERAL); the group's
earliest line as its test line, its attempt as its origin; the concept's symptom or, when no
concept reads it, the placeholder NEEDS_MEANING (a root of unknown/insufficient_evidence that
blames nobody: it names the line as the root without changing the verdict's words, so `rules
impact` shows which attempts it would take), which a reviewer must replace. `write_candidate`
copies the pack with the rows added as catalogs/suggested.csv.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import duckdb

from workload_attribution.rules.catalog import COLUMNS, FAMILIES, MIN_LITERAL, literals_of
from workload_attribution.staging.database import naive_utc, sql
from workload_attribution.staging.grammar import add_grammar
from workload_attribution.tasks.templates import VARIABLE, mask_expression
from workload_attribution.warehouse.store import Warehouse

# The placeholder meaning of a message no concept reads: defined in the candidate pack only.
NEEDS_MEANING = "needs_a_meaning"
NEEDS_MEANING_DEF = f"""  {NEEDS_MEANING}:
    title: "DRAFT by attribution rules suggest: a message no rule knows; a reviewer must set its meaning"
    role: root_candidate
    terminal_state: unknown
    sub_domain: insufficient_evidence
    action: investigate
"""
# The placeholder's row columns
PLACEHOLDER = {
    "symptom": NEEDS_MEANING,
    "terminal_state": "unknown",
    "sub_domain": "insufficient_evidence",
    "role": "root_candidate",
    "blame": "none",
    "action": "investigate",
}
SUGGESTED_CSV = "suggested.csv"
# The origin of a drafted test line: the diagnosis, as the service serves it (GET /v1/diagnoses/ID).
# `.invalid` (RFC 2606): the address of this deployment's service, which a reviewer resolves.
ORIGIN_BASE = "https://attribution.invalid/v1/diagnoses/"
# An exception's word: what level_of does not call an error (RuntimeError: has no word boundary)
EXCEPTION_WORD = r"[A-Za-z](?:Error|Exception|Fault)\b"
# How many groups past `top` have their first line tried on the pack (some are known)
PROBE_EXTRA = 20
MESSAGE_CHARS = 300  # a message's key and pattern are taken from at most this much of its line

# The classes a masked part may become, narrowest first: the first that holds every value of the
# group at that place is taken. Bounded, so a pattern cannot run away along a line.
CLASSES = (
    r"[0-9]{1,20}",
    r"[0-9][0-9.,]{0,39}",
    r"(?:0[xX])?[0-9a-fA-F]{1,40}",
    r"[0-9a-fA-F-]{1,64}",
    r"[\w.:@+~-]{1,128}",
    r"\S{1,256}",
    r".{1,256}",
)
_CLASS_RE = [re.compile(c) for c in CLASSES]
_SPECIAL = set("\\.^$|?*+()[]{}")
# A bracketed header the prefix grammar leaves in front of a message (a glog stamp after a rank
# label: "[E0206 18:41:01.000 shard_io.cc:88]"), masked: not part of the message.
_HEADER = re.compile(r"^(?:\[[^\]]*<\*>[^\]]*\]:?\s*)+")
# Words a message must say (outside its masked parts) to be a row: one word alone is found anywhere.
MIN_WORDS = 2
_WORD = re.compile(r"[A-Za-z]{2,}")

# A family guessed from the words of the message, else from its source.
_FAMILY_WORDS = (
    (r"(?i)\bnccl", "nccl"),
    (r"(?i)\b(?:ucx|ucp|uct)\b", "ucx"),
    (r"(?i)libfabric|\befa\b|\bfi_", "ofi"),
    (r"(?i)\b(?:mpi|pmix|prrte|orte|mpich)", "mpi"),
    (r"(?i)\bmlx5|infiniband|\bib_|\brdma", "ib"),
    (r"(?i)\bnvrm\b|nvidia|\bdcgm|\bnvml|\bxid\b", "nvidia-driver"),
    (r"(?i)lustre|\bnfs\b|gpfs|ceph|beegfs", "storage"),
    (r"(?i)deepspeed", "deepspeed"),
    (r"(?i)megatron", "megatron"),
    (r"(?i)\bjax|\bxla\b", "jax"),
    (r"(?i)tensorflow", "tensorflow"),
    (r"(?i)\bslurm", "slurm"),
)
_SOURCE_FAMILY = {"syslog": "kernel", "fabricmanager": "nvidia-driver", "app": "pytorch"}
_SCHEDULER_FAMILY = {"slurm": "slurm", "pbs": "pbs", "lsf": "lsf", "flux": "flux", "kueue": "kubernetes"}


@dataclass(frozen=True)
class AttemptRef:
    diagnosis_id: str
    cluster: str
    scheduler: str
    job_id: str
    attempt: int
    end: datetime | None

    def describe(self) -> str:
        return f"{self.cluster}/{self.scheduler}/{self.job_id}/{self.attempt}"


@dataclass
class Line:
    """A template row of a doubtful attempt: its first line and where it was."""

    attempt: AttemptRef
    source: str
    node: str | None
    ref: str
    line: int
    time: datetime | None
    text: str
    hosts: list[str] = field(default_factory=list)  # the attempt's
    body: str = ""  # the message: the line without its prefix
    key: str = ""  # the message masked


@dataclass
class Group:
    """The attempts that logged one message."""

    key: str
    lines: list[Line] = field(default_factory=list)
    row: dict[str, str] | None = None  # the drafted catalog row
    concept: str | None = None  # the concept whose meaning is proposed
    read_by: str | None = None  # "rule: symptom" when the pack already reads the line
    why_not: str | None = None  # why no row was drafted
    # whether the archive holds the group's lines (the first holds a literal of the pack in force):
    # `rules impact` replays only what the archive holds
    archived: bool | None = None

    @property
    def attempts(self) -> list[AttemptRef]:
        seen: dict[str, AttemptRef] = {}
        for x in self.lines:
            seen.setdefault(x.attempt.diagnosis_id, x.attempt)
        return sorted(seen.values(), key=lambda a: (a.end or datetime.min, a.cluster, a.job_id, a.attempt))

    @property
    def hosts(self) -> int:
        return len({(x.attempt.cluster, x.node or x.attempt.diagnosis_id) for x in self.lines})

    @property
    def first(self) -> Line:
        return min(self.lines, key=lambda x: (x.time is None, x.time or datetime.min, x.attempt.diagnosis_id))

    @property
    def needs_meaning(self) -> bool:
        return self.row is not None and self.row["symptom"] == NEEDS_MEANING


@dataclass
class Suggestions:
    since: datetime | None
    attempts: int = 0  # insufficient_evidence attempts in the window with templates kept
    without_novel: int = 0  # of them, those that logged no message of a group (known ones left out)
    groups: list[Group] = field(default_factory=list)  # ranked; the drafted first
    known: list[Group] = field(default_factory=list)  # groups whose line the pack already reads
    notes: list[str] = field(default_factory=list)

    @property
    def drafted(self) -> list[Group]:
        return [g for g in self.groups if g.row]


# ------------------------------------------------------------------------------------ reading

_DOUBTFUL = f"""
    SELECT d.diagnosis_id, d.cluster, d.scheduler, d.job_id, d.attempt, d.end_time, d.nodes,
           t.source, t.node, t.first_ref, t.first_line, t.first_time, t.first_text
    FROM diagnoses d LEFT JOIN attempt_templates t
      ON t.diagnosis_id = d.diagnosis_id
     AND (t.level = 'error' OR regexp_matches(t.template, '{EXCEPTION_WORD}'))
    WHERE d.sub_domain = 'insufficient_evidence' AND ($since IS NULL OR d.end_time >= $since::TIMESTAMPTZ)
      AND d.diagnosis_id IN (SELECT diagnosis_id FROM attempt_templates)
"""
# one line per template (the same template is the same message): the fleet's completed attempts
# share most of theirs, so this keeps the lines to key few
_COMPLETED = f"""
    SELECT arg_min(t.first_text, t.diagnosis_id), arg_min(t.first_time, t.diagnosis_id),
           arg_min(coalesce(d.nodes, []), t.diagnosis_id)
    FROM attempt_templates t LEFT JOIN diagnoses d USING (diagnosis_id)
    WHERE t.terminal_state = 'completed' AND (t.level = 'error' OR regexp_matches(t.template, '{EXCEPTION_WORD}'))
    GROUP BY t.template
"""


def read(con: duckdb.DuckDBPyConnection, since: datetime | None) -> tuple[list[Line], int, list[tuple]]:
    """The error-level template rows of the window's insufficient_evidence attempts, how many such
    attempts keep templates, and the completed attempts' error-level first lines (text, time, nodes)."""
    lines, attempts = [], set()
    for r in con.execute(_DOUBTFUL, {"since": since}).fetchall():
        attempts.add(r[0])
        if r[12] is None:
            continue
        a = AttemptRef(r[0], r[1], r[2], r[3], int(r[4]), r[5])
        lines.append(Line(a, r[7] or "app", r[8], r[9] or "", int(r[10] or 0), r[11], r[12], list(r[6] or [])))
    completed = con.execute(_COMPLETED).fetchall()
    return lines, len(attempts), completed


def message_keys(texts: list[tuple[str, datetime | None, list[str]]]) -> list[tuple[str, str]]:
    """(body, key) of each line: its prefix taken off by staging's grammar, its hosts and what
    varies masked as templates mask it."""
    if not texts:
        return []
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        add_grammar(con, sql("log_time_macros.sql"))
        bodies = [
            r[0] or ""
            for r in con.execute(
                "SELECT parse_log_line(x.t, 'UTC', coalesce(x.r::TIMESTAMP, now()::TIMESTAMP))['body'] "
                "FROM (SELECT unnest($t) AS t, unnest($r) AS r, generate_subscripts($t, 1) AS i) x ORDER BY i",
                {"t": [t for t, _, _ in texts], "r": [naive_utc(w) for _, w, _ in texts]},
            ).fetchall()
        ]
        bodies = [b.strip()[:MESSAGE_CHARS] for b in bodies]
        hosted = [_mask_hosts(b, hosts) for b, (_, _, hosts) in zip(bodies, texts)]
        keys = con.execute(
            f"SELECT {mask_expression('x', [])} FROM (SELECT unnest($x) AS x, generate_subscripts($x, 1) AS i) "
            "ORDER BY i",
            {"x": hosted},
        ).fetchall()
    finally:
        con.close()
    return [(b, _HEADER.sub("", k[0])) for b, k in zip(bodies, keys)]


def _mask_hosts(body: str, hosts: list[str]) -> str:
    names = [h for h in sorted(set(hosts), key=len, reverse=True) if h]
    if not names:
        return body
    return re.sub(r"\b(?:" + "|".join(re.escape(h) for h in names) + r")\b", VARIABLE, body)


def group(lines: list[Line], completed: list[tuple]) -> list[Group]:
    """The messages no completed attempt logged, each with its lines, the most attempts first."""
    keyed = message_keys([(x.text, x.time, x.hosts) for x in lines])
    for x, (body, key) in zip(lines, keyed):
        x.body, x.key = body, key
    known = {k for _, k in message_keys([(t, w, list(n)) for t, w, n in completed])}
    groups: dict[str, Group] = {}
    for x in lines:
        if x.key and x.key not in known:
            groups.setdefault(x.key, Group(x.key)).lines.append(x)
    return sorted(groups.values(), key=lambda g: (-len(g.attempts), -g.hosts, g.key))


# --------------------------------------------------------------------------------- the pattern


def escape(text: str) -> str:
    """A literal in RE2 (and Python) syntax: only the characters that mean something escaped."""
    return "".join("\\" + c if c in _SPECIAL else c for c in text)


def pattern_of(g: Group) -> tuple[str, str] | None:
    """(match, pattern) of a group's message: a literal when nothing is masked, else a regex whose
    masked parts are the narrowest CLASSES holding each line's value there; None when no literal
    of MIN_LITERAL+ characters remains, or fewer than MIN_WORDS words."""
    parts = g.key.split(VARIABLE)
    if len(_WORD.findall(" ".join(parts))) < MIN_WORDS:
        return None
    if len(parts) == 1:
        text = g.key.strip()
        return ("literal", text) if literals_of("literal", text) and len(text) >= MIN_LITERAL else None
    # the parts every line's body shows between the masked values: the values, per place
    finder = re.compile("(.+?)".join(re.escape(p) for p in parts[:-1]) + "(.+?)" + re.escape(parts[-1]) + "$")
    # the key may have lost a header in front: the body is searched, not matched
    values: list[list[str]] = [[] for _ in parts[:-1]]
    for x in g.lines:
        m = finder.search(x.body)
        if m:
            for i, v in enumerate(m.groups()):
                values[i].append(v)
    pieces: list[str] = []
    for i, p in enumerate(parts):
        pieces.append(escape(p))
        if i < len(parts) - 1:
            found = values[i]
            cls = next((c for c, r in zip(CLASSES, _CLASS_RE) if found and all(r.fullmatch(v) for v in found)), None)
            pieces.append(cls or CLASSES[-1])
    # a masked part in front narrows nothing: the pattern matches wherever it sits
    if pieces[0] == "":
        pieces = pieces[2:]
    pattern = "".join(pieces)
    found_literals = literals_of("regex", pattern)
    if not found_literals or min(len(x) for x in found_literals) < MIN_LITERAL or pattern.startswith("^"):
        return None
    return "regex", pattern


def widened(pattern: str) -> str:
    """The pattern with every class the widest: when the narrow one missed a line."""
    for c in CLASSES[:-1]:
        pattern = pattern.replace(c, CLASSES[-1])
    return pattern


def matches_all(pattern: str, match: str, texts: list[str]) -> bool:
    """Whether DuckDB's RE2 finds the pattern in every text (as the catalog matcher does)."""
    regex = escape(pattern) if match == "literal" else pattern
    con = duckdb.connect()
    try:
        found = con.execute(
            "SELECT bool_and(regexp_matches(x, $p)) FROM (SELECT unnest($t) AS x)", {"p": regex, "t": texts}
        ).fetchone()
    except duckdb.Error:
        return False
    finally:
        con.close()
    return bool(found and found[0])


# ----------------------------------------------------------------------------------- the rows


def family_of(text: str, source: str, scheduler: str) -> str:
    for words, family in _FAMILY_WORDS:
        if re.search(words, text):
            return family
    if source == "scheduler_log":
        return _SCHEDULER_FAMILY.get(scheduler, "slurm")
    return _SOURCE_FAMILY.get(source, "pytorch")


def _slug(pattern: str, match: str) -> str:
    lits = literals_of(match, pattern)
    words = re.findall(r"[a-z0-9]+", max(lits, key=len).lower()) if lits else []
    return "-".join(words[:6]) or "message"


def draft(g: Group, pack: Any, taken: set[str], since: datetime | None) -> None:
    """The group's catalog row (g.row), or why none (g.why_not)."""
    found = pattern_of(g)
    if found is None:
        g.why_not = f"too generic: no literal of {MIN_LITERAL}+ characters or fewer than {MIN_WORDS} words"
        return
    match, pattern = found
    texts = [x.text for x in g.lines]
    if not matches_all(pattern, match, texts):
        pattern = widened(pattern)
        if not matches_all(pattern, match, texts):
            g.why_not = "no pattern drawn from the message finds every line of the group"
            return
    first = g.first
    a = first.attempt
    family = family_of(first.body, first.source, a.scheduler)
    assert family in FAMILIES
    base = f"{family}-suggested-{_slug(pattern, match)}"
    rid, n = base, 2
    while rid in taken:
        rid, n = f"{base}-{n}", n + 1
    taken.add(rid)
    meaning = dict(PLACEHOLDER)
    if g.concept:
        symptom = g.concept.split(":", 1)[1]
        d = pack.symptom_defs[symptom][1]
        verdict = d.role in ("root_candidate", "scheduler")
        meaning = {
            "symptom": symptom,
            "terminal_state": d.terminal_state.value if d.terminal_state and verdict else "",
            "sub_domain": d.sub_domain.value if d.sub_domain and verdict else "",
            "role": d.role,
            "blame": "host" if d.blame == "node" else "none",
            "action": d.action.value if d.action else ("investigate" if d.role == "root_candidate" else "none"),
        }
    g.archived = any(k in first.text for k in pack.prefilter(first.source))
    origin = f"{ORIGIN_BASE}{quote(a.diagnosis_id, safe='')}#{quote(a.describe(), safe='/')}"
    window = f" since {since:%Y-%m-%d %H:%M}" if since else ""
    g.row = {
        "id": rid,
        "family": family,
        "sources": first.source,
        "match": match,
        "pattern": pattern,
        **meaning,
        "reference": origin,
        "test_line": first.text,
        "test_line_origin": f"log:{origin}",
        "false_positives": (
            f"DRAFT by attribution rules suggest: logged by {len(g.attempts)} insufficient_evidence attempt(s) "
            f"on {g.hosts} host(s){window}, by no completed attempt. A reviewer must set "
            + ("its meaning (symptom), " if not g.concept else f"or confirm its meaning ({g.concept}), ")
            + "family, reference (the upstream source) and when it is not a failure."
        ),
    }


def probe(pack: Any, groups: list[Group]) -> None:
    """What the pack makes of each group's first line (rules/claims.py, resolved as a diagnosis
    does): read by a row or a specific rule (g.read_by), or by a concept only (g.concept)."""
    from workload_attribution.rules.claims import Probe, claims

    if not groups:
        return
    found = claims(pack, [Probe(g.first.source, g.first.text) for g in groups], resolve=True)
    for g, events in zip(groups, found.events):
        defs = pack.symptom_defs
        concept = [e for e in events if e["rule"] == "concept-meanings"]
        # a reading of last resort (python-exception's user-code exception) gives way to a concept's
        generic = {e["symptom"] for e in events if concept and e["symptom"] in defs and defs[e["symptom"]][1].generic}
        other = [e for e in events if e["rule"] != "concept-meanings" and e["symptom"] not in generic]
        if other:
            g.read_by = f"{other[0]['rule']}: {other[0]['symptom']}"
        elif concept:
            e = concept[0]
            g.concept = f"{e['attrs'].get('concept', 'concept')}:{e['symptom']}"


def suggest(wh: Warehouse, pack: Any, since: datetime | None, top: int) -> Suggestions:
    """The window's groups, the first `top` the pack does not read drafted as catalog rows."""
    out = Suggestions(since=since)
    got = wh.read_templates(lambda con: read(con, since), None)
    if got is None:
        out.notes.append("the warehouse keeps no log templates (nothing diagnosed yet, or by an older version)")
        return out
    lines, out.attempts, completed = got
    ranked = group(lines, completed)
    taken = {r.id for r in pack.catalog}
    start = 0
    while len(out.drafted) < top and start < len(ranked):
        batch = ranked[start : start + top + PROBE_EXTRA]
        start += len(batch)
        probe(pack, batch)
        for g in batch:
            if g.read_by:
                out.known.append(g)
                continue
            if len(out.drafted) < top:
                draft(g, pack, taken, since)
            out.groups.append(g)
    out.groups += ranked[start:]
    out.without_novel = out.attempts - len({a.diagnosis_id for g in out.groups for a in g.attempts})
    return out


# ---------------------------------------------------------------------------- the candidate pack


def rows_csv(groups: list[Group]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(COLUMNS), lineterminator="\n")
    w.writeheader()
    for g in groups:
        if g.row:
            w.writerow(g.row)
    return buf.getvalue()


def write_candidate(rules_dir: Path, out: Path, groups: list[Group]) -> Path:
    """A copy of the pack with the drafted rows as catalogs/suggested.csv (and the placeholder
    meaning defined, when a row has it): ready for `rules validate`, `rules test` and `rules impact
    --candidate`."""
    shutil.copytree(rules_dir, out, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True)
    (out / "catalogs" / SUGGESTED_CSV).write_text(rows_csv(groups), encoding="utf-8")
    if any(g.needs_meaning for g in groups):
        rule = out / "extract" / "catalog-messages.yaml"
        text = rule.read_text(encoding="utf-8")
        if f"\n  {NEEDS_MEANING}:" not in text:
            if "\nsymptoms:\n" not in text:
                raise RuntimeError(f"{rule}: no `symptoms:` mapping to define {NEEDS_MEANING} in")
            rule.write_text(text.replace("\nsymptoms:\n", "\nsymptoms:\n" + NEEDS_MEANING_DEF, 1), encoding="utf-8")
    return out / "catalogs" / SUGGESTED_CSV
