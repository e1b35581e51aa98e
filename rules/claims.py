"""Which extract rules claim a line: lines run through the real prefix grammar and the pack's
extract rules in one staging database, each line a file of its own (its time is its own, not
inherited from a neighbour). What the catalog tests, the duplicate-claim report of `rules
validate`, `rules coverage` and the prefix property test are built on."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from workload_attribution.contracts.models import AttemptScope, Observation
from workload_attribution.rules.catalog import RECORD_SOURCES
from workload_attribution.rules.pack import Pack, Rule
from workload_attribution.rules.phases import drop_overridden, prepare
from workload_attribution.rules.runner import RunResult, run_rule
from workload_attribution.rules.settings import Settings
from workload_attribution.staging.attempt import create_staging
from workload_attribution.staging.database import connected, release_staging
from workload_attribution.staging.lines import Line, Stream, stage_streams
from workload_attribution.staging.normalize import normalize
from workload_attribution.staging.observations import insert_observations

SCOPE = {
    "cluster": "claims",
    "scheduler": "static",
    "job_id": "claims",
    "attempt": 0,
    "start": "2026-06-01T00:00:00Z",  # year-less stamps take the year nearest to it
    "end": "2026-12-31T00:00:00Z",
    "state": "FAILED",
}


@dataclass(frozen=True)
class Probe:
    """A line to try: its source, its text, the host whose log holds it."""

    source: str
    text: str
    node: str = "n1"


@dataclass
class Claims:
    """Per probe (in order), the events the rules made of it; the rules that failed."""

    events: list[list[dict[str, Any]]] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)


def claims(pack: Pack, probes: list[Probe], rules: list[Rule] | None = None, resolve: bool = False) -> Claims:
    """Run the extract rules (all, or `rules`) over the probes; with `resolve`, as a diagnosis
    does: overridden rules' events dropped where an overriding rule claims the line."""
    scope = AttemptScope.model_validate({**SCOPE, "nodes": sorted({p.node for p in probes}) or ["n1"]})
    staging = create_staging(scope)
    try:
        with connected(staging) as con:
            prepare(con, pack, Settings())
            _stage(con, probes, scope)
            result = RunResult()
            for rule in rules if rules is not None else pack.by_phase("extract"):
                run_rule(con, pack, rule, Settings(), result)
            if resolve:
                drop_overridden(con, pack)
            return Claims(_events_by_probe(con, len(probes)), result.failed)
    finally:
        release_staging(staging)


def _stage(con: Any, probes: list[Probe], scope: AttemptScope) -> None:
    records, streams = [], []
    for i, p in enumerate(probes):
        if p.source in RECORD_SOURCES:
            records.append(
                Observation(source=p.source, connector="test", kind="k8s_event", text=p.text, path=f"probe/{i}")
            )
        else:
            streams.append(Stream(p.source, "test", p.node, f"probe/{i}", [Line(p.text, 1)]))
    stage_streams(con, streams)
    if streams:
        normalize(con, scope.timezone, scope.start.replace(tzinfo=None), {})
    if records:
        insert_observations(con, records)


def _events_by_probe(con: Any, n: int) -> list[list[dict[str, Any]]]:
    out: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    found = con.execute(
        """SELECT o.path, e.rule_id, e.symptom, e.node, e.time, e.role_hint, e.peer_node, e.attrs
           FROM events e JOIN observations o USING (obs_id) WHERE starts_with(o.path, 'probe/')
           ORDER BY e.event_id"""
    ).fetchall()
    for path, rule_id, symptom, node, time, role_hint, peer_node, attrs in found:
        out[int(path.split("/", 1)[1])].append(
            {
                "rule": rule_id,
                "symptom": symptom,
                "node": node,
                "time": time,
                "role_hint": role_hint,
                "peer_node": peer_node,
                "attrs": json.loads(attrs) if attrs else {},
            }
        )
    return out
