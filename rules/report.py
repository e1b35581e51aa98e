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
from workload_attribution.contracts.vocabulary import ISOLATING_ACTIONS, Action
from workload_attribution.rules.engine import RunResult
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


def build(
    con: duckdb.DuckDBPyConnection,
    scope: AttemptScope,
    coverage: list[Coverage],
    run: RunResult,
    pack_version: str,
    notes: list[str],
) -> Diagnosis:
    verdict = rows(con, "SELECT * FROM verdict")
    if not verdict:  # run_phases always leaves one: the pack's no_verdict when no rule gave one
        raise RuntimeError("no verdict to report: the rule phases (run_phases) did not run")
    v = verdict[0]
    events = rows(
        con,
        """
        SELECT e.*, o.kind, o.text, o.path, o.lineno, o.series, o.connector,
               (SELECT time_quality FROM log_lines l WHERE l.obs_id = e.obs_id) AS time_quality
        FROM events e LEFT JOIN observations o USING (obs_id)
        WHERE e.role IS NOT NULL
        ORDER BY e.time NULLS LAST, e.event_id
    """,
    )
    evidence: dict[int, Evidence] = {}

    def cite(e: dict[str, Any]) -> str:
        if e["obs_id"] not in evidence:
            evidence[e["obs_id"]] = Evidence(
                id=f"ev-{len(evidence) + 1}",
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
        return evidence[e["obs_id"]].id

    groups: dict[tuple, list[dict[str, Any]]] = {}
    for e in events:
        key = (e["symptom"], e["node"], e["role"], e["demoted_by"])
        groups.setdefault(key, []).append(e)
    role_order = {"root": 0, "contributing": 1, "cascade": 2, "context": 3}
    symptoms: list[Symptom] = []
    for (symptom, node, role, demoted_by), evs in sorted(
        groups.items(), key=lambda kv: (role_order.get(kv[0][2], 9), kv[1][0]["time"] or datetime.max, kv[0][0])
    ):
        limit = EVIDENCE_FOR_ROOT if role == "root" else EVIDENCE_PER_SYMPTOM
        ranks = sorted({e["rank"] for e in evs if e["rank"] is not None})
        first = evs[0]
        times = [e["time"] for e in evs if e["time"] is not None]
        details = json.loads(first["attrs"]) if first["attrs"] else {}
        symptoms.append(
            Symptom(
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
                evidence=[cite(e) for e in evs[:limit]],
                details=details,
            )
        )

    root_cause = None
    candidates: list[Candidate] = []
    by_id = {e["event_id"]: e for e in events}
    root = by_id.get(v.get("root_event_id"))
    if root is not None:
        same = groups.get((root["symptom"], root["node"], root["role"], root["demoted_by"]), [root])
        details = json.loads(root["attrs"]) if root["attrs"] else {}
        blamed = v.get("blamed_nodes") or []
        root_cause = RootCause(
            symptom=root["symptom"],
            title=root["title"] or root["symptom"],
            node=root["node"] if blamed else None,
            component=root["component"],
            first_seen=_utc(root["time"]),
            evidence=[cite(e) for e in same[:EVIDENCE_FOR_ROOT]],
            details=details,
        )
    for cid in v.get("candidate_event_ids") or []:
        c = by_id.get(cid)
        if c is not None:
            candidates.append(
                Candidate(
                    symptom=c["symptom"],
                    terminal_state=c["terminal_state"],
                    sub_domain=c["sub_domain"],
                    node=c["node"],
                    first_seen=_utc(c["time"]),
                    evidence=[cite(c)],
                )
            )

    action = v.get("action") or "none"
    affected = sorted(n for n in (v.get("blamed_nodes") or []) if n)
    notes = list(notes) + ([v["reason"]] if v.get("reason") else [])
    if action in ISOLATING_ACTIONS and not affected:
        # the contract: an action that drains, resets or reboots names its hosts; none can be named
        notes.append(f"{action} asked for, but no node can be named from the evidence: investigate instead")
        action = Action.investigate.value
    if run.failed:
        notes.append(
            f"{len(run.failed)} rule(s) did not run and decided nothing: "
            + "; ".join(f"{f['rule']} ({f['error'][:120]})" for f in run.failed[:5])
        )

    diag = Diagnosis(
        diagnosis_id=scope.id.diagnosis_id,
        attempt=scope,
        terminal_state=v["terminal_state"],
        sub_domain=v["sub_domain"],
        confidence=v.get("confidence") or "low",
        root_cause=root_cause,
        affected_nodes=affected,
        affected_components=list(v.get("components") or []),
        candidates=candidates,
        symptoms=symptoms,
        recommended_action=action,
        notes=notes,
        coverage=coverage,
        rules=RulesStamp(version=pack_version, fired=sorted(set(run.fired)), failed=run.failed),
        evidence=sorted(evidence.values(), key=lambda ev: int(ev.id.split("-")[1])),
    )
    diag.explanation = explain(diag)
    return diag


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
