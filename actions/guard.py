"""The guard: whether a diagnosis may take each of its nodes out of service.

A wrong root cause widens isolation and restart cost, so isolation is the exception that must
pass every check; the verdict's own, first:

- the recommended action isolates (drain_node, drain_and_reset_gpu, reboot_node);
- never for the workload's own failure (application_failure: user_code, OOMs ...), nor for an
  ambiguous or insufficient_evidence verdict;
- the confidence is at least `min_confidence`;
- no evidence that lies: no coverage record naming lines quarantined for their times (out of any
  plausible range, or no time at all), samples of NaN or +/-Inf, or a host whose clock is off
  (`DOUBT_KEYS`, contracts/models.py): a diagnosis built beside such evidence is told, never acted on alone;

then, node by node, in the order the diagnosis names them:

- a host name (it reaches scontrol's arguments and the APIs' paths);
- not already isolated by an action in force (for this diagnosis: no second drain; for another:
  that one's reason stands);
- the scheduler knows the node and its partitions (its view could not be read: nothing isolated blind);
- at most `max_nodes_per_hour` distinct nodes isolated in the cluster within the last hour;
- at most `max_partition_percent` of each of the node's partitions out of service, counting the
  nodes already down or drained there, those isolated here, and this one (the blast radius).

A node refused by the limits is told to the notifiers instead, with the reason. Pure: what it
reads is handed to it (the history from the warehouse, the fleet from the isolating sink).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from workload_attribution.actions.config import ActionsConfig
from workload_attribution.actions.registry import Fleet
from workload_attribution.contracts.actions import ActionHistory
from workload_attribution.contracts.models import DOUBT_KEYS, Diagnosis
from workload_attribution.contracts.vocabulary import ISOLATING_ACTIONS, Confidence, SubDomain, TerminalState

CONFIDENCE_RANK = {Confidence.low: 0, Confidence.medium: 1, Confidence.high: 2}
NEVER_ISOLATES = frozenset({SubDomain.ambiguous, SubDomain.insufficient_evidence})
# what a node to isolate must look like (a DNS label or name): it reaches scontrol and API paths
HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,251}[A-Za-z0-9])?")


@dataclass(frozen=True)
class NodeVerdict:
    """The guard's word on one node: isolate it, or why not."""

    node: str | None
    isolate: bool
    reason: str = ""
    already: str | None = None  # the action_id isolating the node for this very diagnosis


def refusal(d: Diagnosis, cfg: ActionsConfig) -> str | None:
    """Why this diagnosis isolates no node whatever the limits, or None."""
    verdict = f"{d.terminal_state.value}/{d.sub_domain.value}"
    if d.terminal_state == TerminalState.application_failure:
        return f"{verdict}: the workload's own failure never isolates a node"
    if d.sub_domain in NEVER_ISOLATES:
        return f"{verdict}: an {d.sub_domain.value} verdict never isolates a node"
    if d.recommended_action not in ISOLATING_ACTIONS:
        return f"{verdict}: the recommended action {d.recommended_action.value} does not isolate a node"
    if CONFIDENCE_RANK[d.confidence] < CONFIDENCE_RANK[cfg.min_confidence]:
        return f"confidence {d.confidence.value} is below min_confidence {cfg.min_confidence.value}"
    if not d.affected_nodes:
        return f"{verdict}: no affected node named"
    doubts = doubted(d)
    if doubts:
        return f"evidence that lies ({'; '.join(doubts)}): never isolates a node"
    return None


def doubted(d: Diagnosis) -> list[str]:
    """What of the diagnosis' coverage says its evidence lies: 'source key value' for each."""
    found = []
    for c in d.coverage:
        for key in DOUBT_KEYS:
            value = getattr(c.details, key, None)
            if value:
                found.append(f"{c.source} {key} {', '.join(value) if isinstance(value, list) else value}")
    return found


def decide(
    d: Diagnosis, cfg: ActionsConfig, history: ActionHistory, fleet: Fleet | None, fleet_error: str = ""
) -> list[NodeVerdict]:
    """One verdict per affected node (one for the attempt when it names none)."""
    why_not = refusal(d, cfg)
    if why_not is not None:
        return [NodeVerdict(n, False, why_not) for n in d.affected_nodes] or [NodeVerdict(None, False, why_not)]
    taken: list[str] = []
    verdicts = []
    for node in d.affected_nodes:
        verdict = _node(node, d, cfg, history, fleet, fleet_error, taken)
        if verdict.isolate:
            taken.append(node)
        verdicts.append(verdict)
    return verdicts


def _node(
    node: str,
    d: Diagnosis,
    cfg: ActionsConfig,
    history: ActionHistory,
    fleet: Fleet | None,
    fleet_error: str,
    taken: list[str],
) -> NodeVerdict:
    if not HOST_NAME.fullmatch(node):
        return NodeVerdict(node, False, f"{node!r} is not a host name a scheduler could hold")
    isolated = [r for r in history.standing if r.isolates and r.node == node]
    mine = [r for r in isolated if r.diagnosis_id == d.diagnosis_id]
    if mine:
        return NodeVerdict(
            node, False, f"already isolated for this diagnosis ({mine[0].sink} {mine[0].operation})", mine[0].action_id
        )
    if isolated:
        return NodeVerdict(node, False, f"already isolated for diagnosis {isolated[0].diagnosis_id}")
    if fleet is None:
        return NodeVerdict(
            node, False, f"the scheduler's partitions could not be read ({fleet_error}): nothing is isolated blind"
        )
    partitions = fleet.of(node)
    if not partitions:
        return NodeVerdict(node, False, f"{node} is in no partition the scheduler lists")
    recent = history.recent | set(taken) | {node}
    if len(recent) > cfg.max_nodes_per_hour:
        return NodeVerdict(
            node,
            False,
            f"limit: {len(history.recent | set(taken))} node(s) isolated in cluster {d.attempt.cluster} within "
            f"the last hour, max_nodes_per_hour {cfg.max_nodes_per_hour}",
        )
    out = fleet.unavailable | {r.node for r in history.standing if r.isolates and r.node} | set(taken) | {node}
    for name in partitions:
        members = fleet.partitions[name]
        down = len(out & members)
        if down * 100 > cfg.max_partition_percent * len(members):
            return NodeVerdict(
                node,
                False,
                f"blast radius: partition {name} would have {down} of {len(members)} node(s) out of service "
                f"({100 * down / len(members):.0f}% > max_partition_percent {cfg.max_partition_percent:g})",
            )
    return NodeVerdict(node, True)
