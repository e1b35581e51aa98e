"""The static scheduler: no scheduler at all. An explicit scope (these hosts over this window) is
taken as given, on any cluster; a cluster of its own has no jobs to scope, no failures to discover
and no completion notices. A bundle of its own says how the attempt ended in whatever words its
author chose: its table (data/static_states.csv) reads the common ones (Slurm's, mostly)."""

from __future__ import annotations

from typing import Any

from workload_attribution.connectors.schedulers import NO_STATE, Scheduler, register_scheduler, state_table
from workload_attribution.contracts.errors import BadInput
from workload_attribution.contracts.identity import STATIC, Target
from workload_attribution.contracts.models import AttemptScope

UNKNOWN = NO_STATE  # the state of an attempt no scheduler recorded


def scope(config: Any, target: Target) -> AttemptScope:
    """The window as given: its hosts (kept as data), start and end, under its digest job id."""
    if target.window is None:
        raise BadInput(
            f"cluster {target.cluster}: a {STATIC} cluster has no scheduler to scope job {target.job_id!r}; "
            "give nodes + start + end"
        )
    window = target.window
    return AttemptScope(
        cluster=target.cluster or "",
        scheduler=STATIC,
        job_id=window.job_id,
        attempt=0,
        nodes=list(window.nodes),
        start=window.start,
        end=window.end,
        state=UNKNOWN,
    )


STATIC_SCHEDULER = register_scheduler(Scheduler(name=STATIC, scope=scope, states=state_table(STATIC), jobs=False))
