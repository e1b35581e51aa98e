"""Fleet memory in a diagnosis: how often the nodes and switch ports it blames were root (and
cascade) of other attempts in the 7 and 30 days before its end, read from the warehouse as it is
published (warehouse/memory.py); and, when a blamed subject keeps failing, the action escalated
(for example a GPU reset -> drain the node and open a hardware ticket), the diagnosis saying why.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, field_validator

from workload_attribution.contracts.models import Diagnosis, Escalation, History, SubjectHistory
from workload_attribution.contracts.vocabulary import ISOLATING_ACTIONS, Action
from workload_attribution.rules.report import explain
from workload_attribution.warehouse.memory import DAYS, blames

if TYPE_CHECKING:  # a bundle diagnosed with no warehouse never loads it (~25 ms of a new process)
    from workload_attribution.warehouse.store import Warehouse


def _default_escalations() -> dict[Action, Action]:
    # what did not hold the first times: a restart elsewhere, a GPU reset, a reboot, a look
    return {
        Action.restart_job: Action.drain_node,
        Action.drain_and_reset_gpu: Action.drain_node,
        Action.reboot_node: Action.drain_node,
        Action.investigate: Action.drain_node,
    }


class MemoryPolicy(BaseModel):
    """`memory:` in the configuration."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="read the blamed subjects' history from the warehouse")
    listed: int = Field(10, ge=0, le=100, description="past attempts listed per subject, the latest first")
    escalate_at: int = Field(
        3, ge=2, le=1000, description="the Nth time a subject is root within escalate_within_days escalates"
    )
    escalate_within_days: int = Field(30, description="7 or 30: the window escalate_at counts in")
    escalations: dict[Action, Action] = Field(
        default_factory=_default_escalations, description="action -> the action it escalates to"
    )

    @field_validator("escalate_within_days")
    @classmethod
    def _a_window_shown(cls, value: int) -> int:
        if value not in DAYS:
            raise ValueError(f"one of {', '.join(map(str, DAYS))} (the windows a history counts)")
        return value


def remember(d: Diagnosis, wh: Warehouse, topology: list[tuple] | None, policy: MemoryPolicy) -> Diagnosis:
    """The diagnosis with its blamed subjects' history, escalated when one crosses the threshold."""
    if not policy.enabled:
        return d
    subjects = [b for b in blames(d, topology) if b.role == "root"]
    found = wh.recall(d, subjects, policy.listed)
    # a copy of what changes below (a deep copy of a 1,024-host diagnosis cost ~0.4 s); the caller's
    # diagnosis stays the rules' own verdict
    d = d.model_copy(update={"notes": list(d.notes)})
    escalation = escalate(d, found, policy)
    d.history = History(window_end=d.attempt.end, subjects=found, escalation=escalation)
    if escalation is not None:
        d.recommended_action = escalation.to_action
        d.notes.append(escalation.reason)
        d.explanation = f"{explain(d)} Escalated: {escalation.reason}"
    return d


def _roots(h: SubjectHistory, days: int) -> int:
    return h.root_7d if days == DAYS[0] else h.root_30d


def escalate(d: Diagnosis, found: list[SubjectHistory], policy: MemoryPolicy) -> Escalation | None:
    """The escalation the history calls for: a subject that is root for the escalate_at-th time
    (this attempt counted) within the window. An action that isolates needs a blamed host: with
    only switch ports blamed the action stays and the ticket is the escalation."""
    days = policy.escalate_within_days
    crossing = [h for h in found if _roots(h, days) + 1 >= policy.escalate_at]
    if not crossing:
        return None
    was = d.recommended_action
    to = policy.escalations.get(was, was)
    if to in ISOLATING_ACTIONS and not d.affected_nodes:
        to = was
    ticket = "hardware" if any(h.kind == "node" for h in crossing) else "network"
    worst = max(crossing, key=lambda h: (_roots(h, days), h.kind == "node", h.subject))  # a host before its port
    return Escalation(
        from_action=was,
        to_action=to,
        ticket=ticket,
        subjects=[h.subject for h in crossing],
        reason=_why(worst, days, was, to, ticket),
    )


def _why(h: SubjectHistory, days: int, was: Action, to: Action, ticket: str) -> str:
    n = _roots(h, days) + 1
    last = h.last_root.strftime("%Y-%m-%d %H:%M") if isinstance(h.last_root, datetime) else "?"
    latest = next((p for p in h.attempts if p.role == "root"), None)
    where = f" ({latest.cluster} job {latest.job_id})" if latest else ""
    change = f"{was} -> {to}" if to != was else f"{was} stays"
    return (
        f"{h.subject} is root for the {_ordinal(n)} time in {days} days (last {last}{where}): "
        f"{change}, and open a {ticket} ticket"
    )


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
