"""The scheduler protocol and its registry, like the sources' (registry.py).

A scheduler is one module of this package that registers what it can do, and one table of its
states (data/<name>_states.csv):

    register_scheduler(Scheduler(
        name="slurm",                      # AttemptScope.scheduler, a cluster's `scheduler:`
        states=StateTable.load(DATA / "slurm_states.csv"),
        scope=scope,                       # (its config, a Target) -> the attempt's AttemptScope
        config=SlurmSource,                # how to reach it: the cluster's `slurm:` block
        records=("sacct", "slurm"),        # the source its record of the attempt is collected as, and by
        job_id=check_job_id,               # a job id in its own form, or ValueError naming the form
        discover=discover,                 # (config, cluster, since, until) -> the attempts that failed
        webhook=Webhook("slurm", SlurmJobEvent, read_notice, "a Slurm job", "..."),  # its completion notice
    ))

Everything else finds it here: the cluster configuration's `scheduler:` and its block
(clusters.py), scoping (tasks/steps.py), the backfill's discovery, the service's webhooks
(`POST /v1/webhooks/<path>`) and job id checks. A new scheduler is its module, its table and tests.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from workload_attribution.connectors.registry import SourceConfig, load_all
from workload_attribution.contracts.identity import SCHEDULER_PATTERN, EndedAttempt, Target, printable_job_id
from workload_attribution.contracts.models import AttemptScope
from workload_attribution.contracts.vocabulary import TerminalState, check_pair

DATA = Path(__file__).resolve().parent / "data"
ENDED = ("yes", "no", "requeued")


@dataclass(frozen=True)
class State:
    """What one of a scheduler's states says about an attempt (a row of its states table)."""

    state: str
    ended: str = "yes"  # yes: over; no: still on its way (pending, running, ending); requeued: over, to run again
    failed: bool = False  # ended in failure: a backfill diagnoses these
    terminal_state: str = ""  # what the state alone means, where it means something ("" : the evidence decides)
    sub_domain: str = ""
    reference: str = ""

    @property
    def completed(self) -> bool:
        return self.terminal_state == TerminalState.completed


@dataclass(frozen=True)
class StateTable:
    """A scheduler's states -> the terminal-state vocabulary. A state is looked up by its first word
    (Slurm's `CANCELLED by 0` is CANCELLED), exactly, then by the table's `prefix*` rows; a state the
    table does not know is over, not a failure a backfill looks for, and means nothing by itself."""

    rows: tuple[State, ...] = ()

    @classmethod
    def load(cls, path: Path) -> StateTable:
        with path.open(newline="") as f:
            rows = tuple(_state_row(path, i, row) for i, row in enumerate(csv.DictReader(f), 2))
        return cls(rows)

    def of(self, state: str) -> State:
        word = (state.split() or [""])[0]
        for row in self.rows:
            if row.state == word:
                return row
        for row in self.rows:
            if row.state.endswith("*") and word.startswith(row.state[:-1]):
                return row
        return State(word)

    def ended(self, state: str) -> bool:
        """The attempt is over and the record is its last word."""
        return self.of(state).ended == "yes"

    def unended(self, state: str) -> bool:
        """Still on its way: a record taken now is not the attempt's last word."""
        return self.of(state).ended == "no"

    def failed(self, state: str) -> bool:
        return self.of(state).failed

    def completed(self, state: str) -> bool:
        return self.of(state).completed

    def failure_states(self) -> list[str]:
        """The states a backfill looks for (exact ones: a scheduler's filter takes names)."""
        return [r.state for r in self.rows if r.failed and not r.state.endswith("*")]


def _state_row(path: Path, line: int, row: dict[str, str]) -> State:
    where = f"{path.name} line {line}"
    ended, failed = row.get("ended", ""), row.get("failed", "")
    if ended not in ENDED or failed not in ("yes", "no") or not row.get("state"):
        raise ValueError(f"{where}: state, ended ({'|'.join(ENDED)}) and failed (yes|no) are required")
    ts, sd = row.get("terminal_state", ""), row.get("sub_domain", "")
    if sd and not ts:
        raise ValueError(f"{where}: sub_domain {sd!r} without its terminal_state")
    try:
        if sd:
            check_pair(ts, sd)
        elif ts:
            TerminalState(ts)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if not row.get("reference", "").startswith("https://"):
        raise ValueError(f"{where}: every state names its reference (an https:// address)")
    return State(row["state"], ended, failed == "yes", ts, sd, row["reference"])


@dataclass(frozen=True)
class Notice:
    """A scheduler's completion notice, read: the attempt it names and whether it ended in failure."""

    target: Target
    failed: bool
    why: str  # said when the attempt is recorded rather than diagnosed ("job COMPLETED")
    asked: bool = False  # the sender asks for a diagnosis whatever the outcome


@dataclass(frozen=True)
class Webhook:
    """How a scheduler tells the service that an attempt ended: `POST /v1/webhooks/<path>`."""

    path: str
    body: type[BaseModel]  # what the sender posts; its schema is the endpoint's
    read: Callable[[Any], Notice]  # the parsed body -> the notice
    what: str  # "a Slurm job": named when a cluster of another scheduler is given one
    doc: str  # the endpoint's description


Scope = Callable[[Any, Target], AttemptScope]
Discover = Callable[[Any, str, datetime, datetime], list[EndedAttempt]]


@dataclass(frozen=True)
class Scheduler:
    """What a scheduler can do, registered by its module (see the module's docstring)."""

    name: str
    scope: Scope  # (its config, the target) -> the attempt's scope; transient failures raise to be retried
    states: StateTable = field(default_factory=StateTable)
    config: type[SourceConfig] | None = None  # a cluster's `<name>:` block; None: nothing to reach
    records: tuple[str, str] | None = None  # (source, connector) collecting its record of a job
    job_id: Callable[[str], str] = printable_job_id  # its own form, or ValueError naming the form
    jobs: bool = True  # scopes jobs by id (static: only explicit windows)
    discover: Discover | None = None
    webhook: Webhook | None = None

    def settings(self, block: SourceConfig | None) -> SourceConfig | None:
        """How to reach it: a cluster's block, else its defaults."""
        return block if block is not None or self.config is None else self.config()


_SCHEDULERS: dict[str, Scheduler] = {}


def register_scheduler(scheduler: Scheduler) -> Scheduler:
    if not re.match(SCHEDULER_PATTERN, scheduler.name):
        raise ValueError(f"scheduler name {scheduler.name!r}: lower_snake_case, at most 32 characters")
    known = _SCHEDULERS.get(scheduler.name)
    if known is not None and known.scope.__module__ != scheduler.scope.__module__:
        raise ValueError(
            f"scheduler {scheduler.name!r} is registered twice ({known.scope.__module__}, {scheduler.scope.__module__})"
        )
    _SCHEDULERS[scheduler.name] = scheduler
    return scheduler


def schedulers() -> dict[str, Scheduler]:
    load_all()
    return dict(_SCHEDULERS)


def get_scheduler(name: str) -> Scheduler:
    found = schedulers().get(name)
    if found is None:
        raise KeyError(f"no scheduler {name!r} (known: {', '.join(sorted(_SCHEDULERS))})")
    return found
