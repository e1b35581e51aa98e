"""A rule's output (temp table rule_out): what each kind must look like, the words it may use, and
how it changes the attempt's tables (events, verdicts, the chosen verdict)."""

from __future__ import annotations

from collections.abc import Callable

import duckdb

from workload_attribution.contracts.vocabulary import (
    Action,
    Confidence,
    Role,
    SubDomain,
    TerminalState,
    Vocabulary,
    check_pair,
)
from workload_attribution.rules.pack import Rule
from workload_attribution.rules.sandbox import RuleRuntimeError

EVENT_COLUMNS = (
    "symptom",
    "obs_id",
    "source",
    "node",
    "time",
    "rank",
    "component",
    "peer_node",
    "attrs",
    "title",
    "role_hint",
    "terminal_state",
    "sub_domain",
    "action",
    "interesting",
    "blame",
)
ANNOTATION_COLUMNS = tuple(c for c in EVENT_COLUMNS if c not in ("obs_id",))
VERDICT_COLUMNS = (
    "terminal_state",
    "sub_domain",
    "confidence",
    "root_event_id",
    "blamed_nodes",
    "components",
    "candidate_event_ids",
    "action",
    "reason",
)


def check_columns(rule: Rule, cols: list[str]) -> None:
    """What a rule's output must look like, checked whether or not it found anything."""
    _COLUMN_CHECKS[rule.output](cols)


def _event_columns(cols: list[str]) -> None:
    missing = {"obs_id", "symptom"} - set(cols)
    if missing:
        raise RuleRuntimeError(f"events output lacks column(s) {sorted(missing)}")
    extra = set(cols) - set(EVENT_COLUMNS)
    if extra:
        raise RuleRuntimeError(f"events output has unknown column(s) {sorted(extra)}")


def _annotation_columns(cols: list[str]) -> None:
    if "event_id" not in cols:
        raise RuleRuntimeError("annotations output needs an event_id column")
    strange = [c for c in cols if c != "event_id" and c not in ANNOTATION_COLUMNS]
    if strange:
        raise RuleRuntimeError(f"annotations output has unknown column {strange[0]!r}")


def _verdict_columns(cols: list[str]) -> None:
    required = {"terminal_state", "sub_domain"}
    if required - set(cols):
        raise RuleRuntimeError(f"verdicts output lacks column(s) {sorted(required - set(cols))}")
    unknown = set(cols) - set(VERDICT_COLUMNS)
    if unknown:
        raise RuleRuntimeError(f"verdicts output has unknown column(s) {sorted(unknown)}")


def _role_columns(cols: list[str]) -> None:
    if not {"event_id", "role"} <= set(cols):
        raise RuleRuntimeError("roles output needs event_id and role columns")


def _action_columns(cols: list[str]) -> None:
    if "action" not in cols or set(cols) - {"action", "reason"}:
        raise RuleRuntimeError("actions output is the columns action (and reason)")


_COLUMN_CHECKS: dict[str, Callable[[list[str]], None]] = {
    "events": _event_columns,
    "annotations": _annotation_columns,
    "verdicts": _verdict_columns,
    "roles": _role_columns,
    "actions": _action_columns,
}

# What a rule may say, checked on what it said: the diagnosis vocabulary (contracts/vocabulary.py).
_VOCABULARY_CHECKS: dict[str, list[tuple[str, type[Vocabulary]]]] = {
    "events": [("terminal_state", TerminalState), ("sub_domain", SubDomain), ("action", Action)],
    "annotations": [("terminal_state", TerminalState), ("sub_domain", SubDomain), ("action", Action)],
    "verdicts": [
        ("terminal_state", TerminalState),
        ("sub_domain", SubDomain),
        ("action", Action),
        ("confidence", Confidence),
    ],
    "roles": [("role", Role)],
    "actions": [("action", Action)],
}


def check_words(con: duckdb.DuckDBPyConnection, rule: Rule, cols: list[str]) -> None:
    """Every word of rule_out in the vocabulary, and a verdict's state and sub-domain a pair that belongs."""
    # the distinct words of every checked column in one plain statement, judged here: a statement
    # costs its planning (~0.3 ms), an aggregate of DISTINCT lists with filters twice that
    checks = [(col, words) for col, words in _VOCABULARY_CHECKS.get(rule.output, []) if col in cols]
    pairs = rule.output == "verdicts"
    if not checks and not pairs:
        return
    read = [col for col, _ in checks]
    if pairs:
        read += [c for c in ("terminal_state", "sub_domain") if c not in read]
    found = con.execute(f"SELECT DISTINCT {', '.join(read)} FROM rule_out").fetchall()
    for i, (col, words) in enumerate(checks):
        allowed = set(words.values())
        bad = sorted({row[i] for row in found if row[i] is not None and row[i] not in allowed}, key=str)
        if bad:
            raise RuleRuntimeError(f"{col} {bad[0]!r} is not a {col} word (allowed: {', '.join(words.values())})")
    if pairs:
        ts, sd = read.index("terminal_state"), read.index("sub_domain")
        for row in found:
            try:
                check_pair(row[ts], row[sd])
            except ValueError as exc:
                raise RuleRuntimeError(str(exc)) from None


def apply_output(con: duckdb.DuckDBPyConnection, rule: Rule, n: int, cols: list[str]) -> int:
    """Apply rule_out's n rows (columns cols, checked) to the attempt's tables."""
    if rule.output in ("verdicts", "actions") and n > 1:
        raise RuleRuntimeError(f"{rule.output} output has {n} rows: a {rule.output} rule gives at most one")
    check_words(con, rule, cols)
    _APPLY[rule.output](con, rule, cols)
    return n


# What an event's rule did not say, the observation says (node, time, rank, source) and the symptom's
# definition gives its meaning: each such column as it is filled, with the events table's type.
_FILLED = {
    "node": ("ob.node", "VARCHAR"),
    "time": ("ob.time", "TIMESTAMP"),
    "rank": ("ob.rank", "INTEGER"),
    "source": ("ob.source", "VARCHAR"),
    "title": ("d.title", "VARCHAR"),
    "role_hint": ("d.role", "VARCHAR"),
    "terminal_state": ("d.terminal_state", "VARCHAR"),
    "sub_domain": ("d.sub_domain", "VARCHAR"),
    "action": ("d.action", "VARCHAR"),
    "interesting": ("d.interesting", "BOOLEAN"),
    "blame": ("d.blame", "VARCHAR"),
}


def _add_events(con: duckdb.DuckDBPyConnection, rule: Rule, cols: list[str]) -> None:
    """The rule's events, what it did not say filled in, in one statement (all or nothing by itself:
    an INSERT then an UPDATE of what it inserted took two, and a transaction around them). Ids are
    drawn in rule_out's order and rows written in that order, as the INSERT alone wrote them."""
    said = [f"o.{c}" for c in cols if c not in _FILLED]
    filled = [
        f"coalesce(CAST(o.{c} AS {kind}), {fill}) AS {c}" if c in cols else f"{fill} AS {c}"
        for c, (fill, kind) in _FILLED.items()
    ]
    con.execute(
        f"""
        INSERT INTO events BY NAME
        SELECT o.event_id, $rule AS rule_id, {", ".join(said + filled)}
        FROM (SELECT nextval('event_seq') AS event_id, * FROM rule_out) o
             LEFT JOIN observation_places ob ON ob.obs_id = o.obs_id
             LEFT JOIN symptom_defs d ON d.symptom = o.symptom
        ORDER BY o.event_id
    """,
        {"rule": rule.id},
    )


def _annotate_events(con: duckdb.DuckDBPyConnection, rule: Rule, cols: list[str]) -> None:
    sets = []
    for c in cols:
        if c == "event_id":
            continue
        if c == "attrs":
            sets.append("attrs = json_merge_patch(coalesce(events.attrs, '{}'), coalesce(a.attrs::JSON, '{}'))")
        else:
            sets.append(f"{c} = coalesce(a.{c}, events.{c})")
    if sets:
        con.execute(f"UPDATE events SET {', '.join(sets)} FROM rule_out a WHERE a.event_id = events.event_id")


def _add_verdict(con: duckdb.DuckDBPyConnection, rule: Rule, cols: list[str]) -> None:
    select = ", ".join(f"o.{c}" for c in cols)
    con.execute(f"INSERT INTO verdicts BY NAME SELECT $rule AS rule_id, {select} FROM rule_out o", {"rule": rule.id})


def _assign_roles(con: duckdb.DuckDBPyConnection, rule: Rule, cols: list[str]) -> None:
    """Roles for events that have none yet; a cascade keeps what demoted it (the rule's word, else the rule)."""
    demoted = "coalesce(r.demoted_by, $rule)" if "demoted_by" in cols else "CASE WHEN r.role = 'cascade' THEN $rule END"
    interesting = "coalesce(r.interesting, events.interesting)" if "interesting" in cols else "events.interesting"
    con.execute(
        f"""
        UPDATE events SET role = r.role,
                          demoted_by = CASE WHEN r.role = 'cascade' THEN {demoted} END,
                          interesting = {interesting}
        FROM rule_out r WHERE r.event_id = events.event_id AND events.role IS NULL
    """,
        {"rule": rule.id},
    )


def _set_action(con: duckdb.DuckDBPyConnection, rule: Rule, cols: list[str]) -> None:
    reason = "a.reason" if "reason" in cols else "NULL"
    con.execute(f"""
        UPDATE verdict SET action = a.action,
                           reason = concat_ws('; ', verdict.reason, {reason})
        FROM rule_out a WHERE a.action IS NOT NULL
    """)


_APPLY: dict[str, Callable[[duckdb.DuckDBPyConnection, Rule, list[str]], None]] = {
    "events": _add_events,
    "annotations": _annotate_events,
    "verdicts": _add_verdict,
    "roles": _assign_roles,
    "actions": _set_action,
}
