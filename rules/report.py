"""Report phase: staging tables after the rule phases -> the Diagnosis contract."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import duckdb

from workload_attribution.contracts.models import (
    AttemptScope,
    Candidate,
    Coverage,
    Diagnosis,
    Evidence,
    RootCause,
    RulesStamp,
    Symptom,
)
from workload_attribution.contracts.vocabulary import ISOLATING_ACTIONS, Action, Role
from workload_attribution.rules.engine import RunResult
from workload_attribution.rules.settle import unnamed_host_note, would_settle
from workload_attribution.staging.database import rows

# Evidence records kept per symptom group (the count says how many lines there were).
EVIDENCE_PER_SYMPTOM = 3
EVIDENCE_FOR_ROOT = 10


def _utc(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=timezone.utc) if value is not None and value.tzinfo is None else value


def _ref(o: dict[str, Any]) -> str:
    if o["kind"] == "sample":
        where = f"{o['path']}:{o['lineno']}" if o["lineno"] else (o["path"] or "metrics")
        when = _utc(o["time"])
        return f"{where} {o['series']}@{when.isoformat() if when else '?'}"
    if o["path"] and o["lineno"]:
        return f"{o['path']}:{o['lineno']}"
    return o["path"] or o["source"] or "unknown"


# Symptoms listed root first, in the order contracts.vocabulary.Role declares the roles.
ROLE_ORDER = {role.value: place for place, role in enumerate(Role)}


def build(
    con: duckdb.DuckDBPyConnection,
    scope: AttemptScope,
    coverage: list[Coverage],
    run: RunResult,
    pack_version: str,
    notes: list[str],
) -> Diagnosis:
    """The diagnosis of what the rule phases left: the chosen verdict (run_phases always leaves one)
    and the events that have a role, each cited with its evidence."""
    verdict = _the_verdict(con)
    events = _events_with_a_role(con)
    groups = _symptom_groups(events)
    by_id = {e["event_id"]: e for e in events}
    evidence = _Citations()
    symptoms = _symptoms(groups, evidence)  # cited first: their evidence numbers come first
    root_cause = _root_cause(verdict, by_id.get(verdict.get("root_event_id")), groups, evidence)
    candidates = _candidates([by_id.get(i) for i in verdict.get("candidate_event_ids") or []], evidence)
    affected = sorted(n for n in (verdict.get("blamed_nodes") or []) if n)
    action, notes = _action_and_notes(verdict, affected, run, notes)
    diag = Diagnosis(
        diagnosis_id=scope.id.diagnosis_id,
        attempt=scope,
        terminal_state=verdict["terminal_state"],
        sub_domain=verdict["sub_domain"],
        confidence=verdict.get("confidence") or "low",
        root_cause=root_cause,
        affected_nodes=affected,
        affected_components=list(verdict.get("components") or []),
        candidates=candidates,
        symptoms=symptoms,
        recommended_action=action,
        notes=notes,
        coverage=coverage,
        rules=RulesStamp(version=pack_version, fired=sorted(set(run.fired)), failed=run.failed),
        evidence=evidence.records(),
    )
    diag.explanation = explain(diag)
    diag.would_settle = would_settle(con, diag)  # undecided verdicts, and node-level ones naming no host
    unnamed = unnamed_host_note(diag, _host_unnamed(by_id.get(verdict.get("root_event_id"))))
    if unnamed:
        diag.notes.append(unnamed)
    return diag


def _host_unnamed(root: dict[str, Any] | None) -> str | None:
    """Why the root event names no host, as rules/python/hosts.py found (attrs.host_unnamed)."""
    attrs = (root or {}).get("attrs")
    attrs = json.loads(attrs) if isinstance(attrs, str) else attrs
    return attrs.get("host_unnamed") if isinstance(attrs, dict) else None


def _the_verdict(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    verdict = rows(con, "SELECT * FROM verdict")
    if not verdict:  # run_phases always leaves one: the pack's no_verdict when no rule gave one
        raise RuntimeError("no verdict to report: the rule phases (run_phases) did not run")
    return verdict[0]


class _Citations:
    """The diagnosis's evidence records, one per observation cited, numbered in citing order."""

    def __init__(self) -> None:
        self._by_obs: dict[int, Evidence] = {}

    def cite(self, e: dict[str, Any]) -> str:
        if e["obs_id"] not in self._by_obs:
            self._by_obs[e["obs_id"]] = Evidence(
                id=f"ev-{len(self._by_obs) + 1}",
                source=e["source"] or "?",
                node=e["node"],
                time=_utc(e["time"]),
                text=e["text"] or "",
                ref=_ref(e),
                connector=e["connector"],
                path=e["path"],
                line=e["lineno"],
                series=e["series"],
                time_quality=e["time_quality"],
            )
        return self._by_obs[e["obs_id"]].id

    def records(self) -> list[Evidence]:
        return list(self._by_obs.values())  # in citing order: ev-1, ev-2, ...


# One symptom of the diagnosis: its events, keyed (symptom, node, role, demoted_by), in time order.
GroupKey = tuple[str, str | None, str, str | None]
Groups = dict[GroupKey, list[dict[str, Any]]]


def _events_with_a_role(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Events the final phase gave a role, in time order, with their observation's evidence columns."""
    return rows(
        con,
        """
        SELECT e.*, o.kind, o.text, o.path, o.lineno, o.series, o.connector, o.time_quality
        FROM events e LEFT JOIN observation_evidence o USING (obs_id)
        WHERE e.role IS NOT NULL
        ORDER BY e.time NULLS LAST, e.event_id
    """,
    )


def _symptom_groups(events: list[dict[str, Any]]) -> Groups:
    groups: Groups = {}
    for e in events:
        groups.setdefault(_group_key(e), []).append(e)
    return groups


def _group_key(e: dict[str, Any]) -> GroupKey:
    return (e["symptom"], e["node"], e["role"], e["demoted_by"])


def _symptoms(groups: Groups, evidence: _Citations) -> list[Symptom]:
    """One symptom per group: root first (ROLE_ORDER), then by first time, then by name."""
    ordered = sorted(
        groups.items(),
        key=lambda kv: (ROLE_ORDER.get(kv[0][2], len(ROLE_ORDER)), kv[1][0]["time"] or datetime.max, kv[0][0]),
    )
    return [_symptom(key, evs, evidence) for key, evs in ordered]


def _symptom(key: GroupKey, evs: list[dict[str, Any]], evidence: _Citations) -> Symptom:
    symptom, node, role, demoted_by = key
    limit = EVIDENCE_FOR_ROOT if role == "root" else EVIDENCE_PER_SYMPTOM
    ranks = sorted({e["rank"] for e in evs if e["rank"] is not None})
    first = evs[0]
    times = [e["time"] for e in evs if e["time"] is not None]
    return Symptom(
        symptom=symptom,
        role=role,
        title=first["title"],
        node=node,
        rank=ranks[0] if ranks else None,
        ranks=ranks[:64],
        component=first["component"],
        first_seen=_utc(min(times)) if times else None,
        last_seen=_utc(max(times)) if times else None,
        count=len(evs),
        demoted_by=demoted_by,
        interesting=bool(first["interesting"]) and role != "root",
        rule=first["rule_id"],
        evidence=[evidence.cite(e) for e in evs[:limit]],
        details=json.loads(first["attrs"]) if first["attrs"] else {},
    )


def _root_cause(
    verdict: dict[str, Any], root: dict[str, Any] | None, groups: Groups, evidence: _Citations
) -> RootCause | None:
    """The verdict's root event, cited with the other lines of its symptom; its node only when blamed."""
    if root is None:
        return None
    same = groups.get(_group_key(root), [root])
    return RootCause(
        symptom=root["symptom"],
        title=root["title"] or root["symptom"],
        node=root["node"] if verdict.get("blamed_nodes") else None,
        component=root["component"],
        first_seen=_utc(root["time"]),
        evidence=[evidence.cite(e) for e in same[:EVIDENCE_FOR_ROOT]],
        details=json.loads(root["attrs"]) if root["attrs"] else {},
    )


def _candidates(events: list[dict[str, Any] | None], evidence: _Citations) -> list[Candidate]:
    """The roots the verdict could not decide between (an ambiguous verdict), each with its line."""
    return [
        Candidate(
            symptom=c["symptom"],
            terminal_state=c["terminal_state"],
            sub_domain=c["sub_domain"],
            node=c["node"],
            first_seen=_utc(c["time"]),
            evidence=[evidence.cite(c)],
        )
        for c in events
        if c is not None
    ]


def _action_and_notes(
    verdict: dict[str, Any], affected: list[str], run: RunResult, notes: list[str]
) -> tuple[str, list[str]]:
    """The recommended action (one that isolates hosts needs hosts named) and the notes: the
    attempt's, the verdict's reason, what was asked and could not be done, the rules that failed."""
    action = verdict.get("action") or "none"
    notes = list(notes) + ([verdict["reason"]] if verdict.get("reason") else [])
    if action in ISOLATING_ACTIONS and not affected:
        # the contract: an action that drains, resets or reboots names its hosts; none can be named
        notes.append(f"{action} asked for, but no node can be named from the evidence: investigate instead")
        action = Action.investigate.value
    if run.failed:
        notes.append(
            f"{len(run.failed)} rule(s) did not run and decided nothing: "
            + "; ".join(f"{f['rule']} ({f['error'][:120]})" for f in run.failed[:5])
        )
    return action, notes


def explain(d: Diagnosis) -> str:
    """A few sentences an on-call engineer can act on."""
    parts = [f"{d.terminal_state}/{d.sub_domain} ({d.confidence} confidence)."]
    rc = d.root_cause
    if d.sub_domain == "ambiguous":
        names = ", ".join(f"{c.symptom} on {c.node}" for c in d.candidates)
        parts.append(f"Root could not be decided between: {names}.")
    elif rc is not None and d.terminal_state != "completed":
        where = f" on {rc.node}" if rc.node else ""
        comp = f" ({rc.component})" if rc.component else ""
        when = f" at {rc.first_seen.isoformat()}" if rc.first_seen else ""
        parts.append(f"Root: {rc.title}{where}{comp}{when}.")
        decode = rc.details.get("decode") if isinstance(rc.details, dict) else None
        if decode and decode.get("investigatory_action"):
            parts.append(
                f"NVLink decode ({decode.get('layout')}): {decode.get('subcode')}, reason bits "
                f"{decode.get('reason_bits')} -> {decode.get('investigatory_action')}."
            )
    cascades = [s for s in d.symptoms if s.role == "cascade"]
    if cascades:
        nodes = sorted({s.node for s in cascades if s.node})
        lines = sum(s.count for s in cascades)
        parts.append(f"{lines} later error line(s) on {len(nodes)} host(s) are cascade of it and were demoted.")
    if d.affected_nodes:
        parts.append(f"Isolate: {', '.join(d.affected_nodes)}. Action: {d.recommended_action}.")
    else:
        parts.append(f"No node is blamed. Action: {d.recommended_action}.")
    gaps = [c.source for c in d.coverage if c.status.value in ("unavailable", "error", "timeout")]
    if gaps:
        parts.append(f"Not collected: {', '.join(gaps)}.")
    return " ".join(parts)
