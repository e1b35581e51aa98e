"""What was decided and done about a diagnosis, one row of the warehouse's `actions` table each:
the seam between the action sinks (actions/) that decide and act, the warehouse that keeps the
record, and the command that lists and undoes (`attribution actions`).

One record is one sink's one operation on one node (or on the attempt, `node` None): a drain, a
cordon, an alert, an event, or their reversal (`reverts` names the record reversed). Every
decision is a record: what was done, what a dry run would have done, what was skipped and why,
what failed and the last error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import Field

from workload_attribution.contracts.models import Contract
from workload_attribution.contracts.vocabulary import Vocabulary


class Outcome(Vocabulary):
    pending = "pending"  # decided, being done (a process that died here leaves it so: it still counts)
    done = "done"
    dry_run = "dry_run"  # would have been done: the cluster's actions are in dry run
    skipped = "skipped"  # the guard or the sink decided not to; `reason` says why
    failed = "failed"  # tried `tries` times; `reason` is the last error
    flagged = "flagged"  # a re-diagnosis no longer stands behind the isolation it `reverts`: undo it


# Records whose effect is (or, in a dry run, would be) in place until reversed.
IN_FORCE = frozenset({Outcome.pending, Outcome.done, Outcome.dry_run})


class ActionRecord(Contract):
    action_id: str
    decided_at: datetime
    seq: int = Field(0, description="the record's place among those decided together")
    finished_at: datetime | None = None
    cluster: str
    scheduler: str
    job_id: str
    attempt: int
    diagnosis_id: str
    rules_version: str
    terminal_state: str
    sub_domain: str
    confidence: str
    recommended_action: str
    root_symptom: str | None = None
    sink: str = Field(description="the sink's kind: slurm, kubernetes, alertmanager, webhook")
    operation: str = Field(description="drain, cordon, alert, notify; resume, uncordon, resolve, withdraw; flag_undo")
    isolates: bool = Field(description="the operation takes a node out of service")
    node: str | None = None
    dry_run: bool
    outcome: Outcome
    reason: str = ""
    tries: int = 0
    reverts: str | None = Field(default=None, description="the action_id this record reverses or flags")
    details: dict[str, Any] = Field(default_factory=dict, description="what was sent: what an undo needs")


@dataclass
class ActionHistory:
    """What the guard needs to know of a cluster's earlier actions, read in the transaction that
    records the new decisions (so two deciders cannot both take the last of a limit)."""

    recent: set[str] = field(default_factory=set)  # nodes isolated within the last hour (in this mode)
    standing: list[ActionRecord] = field(default_factory=list)  # in force, not reversed (in this mode)
    flagged: set[str] = field(default_factory=set)  # action_ids of this diagnosis' isolations flagged for undo
