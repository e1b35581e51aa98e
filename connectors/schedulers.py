"""The scheduler protocol and its registry, like the sources' (registry.py).

A scheduler is one module of this package that registers what it can do, and one table of what its
records say (data/<name>_states.csv):

    register_scheduler(Scheduler(
        name="slurm",                      # AttemptScope.scheduler, a cluster's `scheduler:`
        states=StateTable.load(DATA / "slurm_states.csv"),
        scope=scope,                       # (its config, a Target) -> the attempt's AttemptScope
        config=SlurmSource,                # how to reach it: the cluster's `slurm:` block
        records=("sacct", "slurm"),        # the source its record of the attempt is collected as, and by
        bundle=BundleRecord(("sacct.json",), read_bundle),  # that record in a bundle's scheduler/ folder
        job_id=check_job_id,               # a job id in its own form, or ValueError naming the form
        discover=discover,                 # (config, cluster, since, until) -> the attempts that failed
        webhook=Webhook("slurm", SlurmJobEvent, read_notice, "a Slurm job", "..."),  # its completion notice
    ))

Everything else finds it here: the cluster configuration's `scheduler:` and its block
(clusters.py), scoping (tasks/steps.py), a bundle's scheduler record, the backfill's discovery, the
service's webhooks (`POST /v1/webhooks/<path>`) and job id checks. A new scheduler is its module,
its table and tests.

The table reads a record as facts (`Fact("exit", "-29")`, `Fact("state", "F")`): each fact's field
has rows of values, and the facts, most telling first, say whether the attempt is over, whether it
failed, what it means (`StateTable.read`) and which hosts the record names at fault. Every record
reads its attempt's `exit`, `reason` and `state` (AttemptScope's exit_code, reason, state; the
facts of an attempt.yaml, `scope_facts`); a scheduler's module adds its own fields (PBS's substate,
the messages of its history).
"""

from __future__ import annotations

import csv
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from workload_attribution.connectors.registry import SourceConfig, load_all, load_named
from workload_attribution.contracts.identity import SCHEDULER_PATTERN, EndedAttempt, Target, printable_job_id
from workload_attribution.contracts.models import AttemptScope, Observation
from workload_attribution.contracts.vocabulary import TerminalState, check_pair

DATA = Path(__file__).resolve().parent / "data"
log = logging.getLogger("workload_attribution.schedulers")
ENDED = ("yes", "no", "requeued")
STATE = "state"  # the field of the scheduler's states (AttemptScope.state); `exit`, `reason`: its exit_code, reason
BLAME = ("", "named")  # named: the allocation's hosts this fact names are the ones at fault
UNKNOWN_STATE = "unknown state"  # how the note on a word no table holds begins (the CLI warns with it)
NO_STATE = "UNKNOWN"  # what a scope says when no record gives a state (a window's, a record without one): no word


@dataclass(frozen=True)
class State:
    """What one value of a field says about an attempt (a row of the scheduler's table). A `state`
    row always says whether the attempt is over and failed; a row of another field (`exit`,
    `reason`, ...) may leave them to the state ("" and None)."""

    state: str  # the value as the table holds it: exactly, or a pattern (`*` any text)
    ended: str = "yes"  # yes: over; no: still on its way (pending, running, ending); requeued: over, to run again
    failed: bool | None = False  # ended in failure: a backfill diagnoses these
    terminal_state: str = ""  # what the value alone means, where it means something ("" : the evidence decides)
    sub_domain: str = ""
    reference: str = ""
    field: str = STATE
    meaning: str = ""
    blame: str = ""

    @property
    def completed(self) -> bool:
        return self.terminal_state == TerminalState.completed

    def matches(self, value: str) -> bool:
        """The value is this row's (case aside: a bundle's author may write `Completed`)."""
        if "*" not in self.state:
            return value.casefold() == self.state.casefold()
        pattern = ".*".join(re.escape(p) for p in self.state.split("*"))
        return re.fullmatch(pattern, value, re.S | re.I) is not None


@dataclass(frozen=True)
class Fact:
    """One thing a scheduler's record says: a value of a field of its table (`exit` -29), and the
    text the hosts it names are read from (the value itself unless given)."""

    field: str
    value: Any  # None or "": the record does not say
    text: str = ""

    @property
    def said(self) -> str:
        return "" if self.value is None else str(self.value).strip()


@dataclass(frozen=True)
class Reading:
    """A record read through its scheduler's table (StateTable.read): whether the attempt is over
    and failed, what it means by itself (the first fact whose row means something: `by`), and the
    allocation's hosts the record names at fault."""

    ended: str = "yes"
    failed: bool = False
    terminal_state: str = ""
    sub_domain: str = ""
    by: str = ""  # "exit=-29": the fact the meaning comes from
    meaning: str = ""
    reference: str = ""
    blamed: tuple[str, ...] = ()

    @property
    def completed(self) -> bool:
        return self.terminal_state == TerminalState.completed

    def attrs(self) -> dict[str, Any]:
        """What a record observation carries of it (the rules read terminal_state and sub_domain)."""
        return {
            "terminal_state": self.terminal_state or None,
            "sub_domain": self.sub_domain or None,
            "meaning_by": self.by or None,
            "meaning": self.meaning or None,
            "reference": self.reference or None,
            "blamed_nodes": list(self.blamed),
        }


def scope_facts(scope: AttemptScope) -> list[Fact]:
    """What an attempt's scope says of its end, most telling first: its exit code, its reason, its state."""
    return [Fact("exit", scope.exit_code), Fact("reason", scope.reason), Fact(STATE, scope.state)]


@dataclass(frozen=True)
class StateTable:
    """A scheduler's fields and their values -> the terminal-state vocabulary. A state is looked up
    by its first word (Slurm's `CANCELLED by 0` is CANCELLED), another field by its whole value:
    exactly, then by the table's patterns (`*` any text) in the table's order.

    A state the table does not hold (a later release's word, a typo such as FAILD) is never a reason
    to refuse or to skip an attempt, and never reads as a success: it is over (a completion trigger
    does not wait for it), it means nothing by itself, and it failed unless another fact of the
    record says otherwise (an exit code 0 whose row says `failed: no`), so a backfill and a
    webhook diagnose it and the record and the evidence decide. `unknown` says so in a note.
    NO_STATE (no record gave one) is no word: nothing is noted, and it fails nothing."""

    rows: tuple[State, ...] = ()
    name: str = ""  # the scheduler's (slurm_states.csv: slurm), named in the note on an unknown state

    @classmethod
    def load(cls, path: Path) -> StateTable:
        with path.open(newline="") as f:
            rows = tuple(_state_row(path, i, row) for i, row in enumerate(csv.DictReader(f), 2))
        return cls(rows, path.stem.removesuffix("_states"))

    def find(self, field: str, value: str) -> State | None:
        """The row of `field` for a value, or None."""
        word = (value.split() or [""])[0] if field == STATE else value.strip()
        rows = [r for r in self.rows if r.field == field]
        return next((r for r in rows if "*" not in r.state and r.matches(word)), None) or next(
            (r for r in rows if "*" in r.state and r.matches(word)), None
        )

    def of(self, state: str) -> State:
        """The row of a state; a word the table does not hold: over, meaning nothing, failed when it
        is a word (`unknown`: not NO_STATE, nor any word of a scheduler without a table)."""
        word = (state.split() or [""])[0]
        return self.find(STATE, state) or State(word, failed=bool(self.unknown(word, "")), meaning=UNKNOWN_STATE)

    def words(self) -> list[str]:
        """The states the table holds by name, in its order."""
        return [r.state for r in self.rows if r.field == STATE and "*" not in r.state]

    def unknown(self, state: str | None, where: str) -> str:
        """The note on a state the table does not hold (`where`: whose word it is, "attempt.yaml"),
        naming the word, the scheduler and the table's words; "" for a word it holds, no word, or a
        scheduler without a table of states."""
        word = (str(state or "").split() or [""])[0]
        if word in ("", NO_STATE) or not self.words() or self.find(STATE, word) is not None:
            return ""
        shown = word if len(word) <= 40 else word[:37] + "..."  # repr escapes what a terminal should not see
        return (
            f"{UNKNOWN_STATE} {shown!r} ({where}): not a word of the {self.name or 'scheduler'} "
            f"states table ({', '.join(self.words())}); it says nothing by itself: read as over and failed "
            "unless the record says otherwise, the record and the evidence decide"
        )

    def read(self, facts: Iterable[Fact], hosts: Iterable[str] = ()) -> Reading:
        """What the facts say, the first of them that says each thing: over, failed, meaning. The
        hosts blamed are the allocation's hosts named by the facts whose rows blame what they name.
        A state the table does not hold counts as failed when no other fact says (see the class)."""
        facts = list(facts)
        found = [(f, row) for f in facts if f.said for row in [self.find(f.field, f.said)] if row is not None]
        unknown = any(f.field == STATE and f.said and self.unknown(f.said, "") for f in facts)
        ended = next((r.ended for _, r in found if r.ended), "yes")
        failed = next((r.failed for _, r in found if r.failed is not None), unknown)
        means = next(((f, r) for f, r in found if r.terminal_state), None)
        blamed = _named(hosts, [f.text or f.said for f, r in found if r.blame == "named"])
        if means is None:
            return Reading(ended, failed, blamed=blamed)
        fact, row = means
        by = f"{fact.field}={fact.said}"
        return Reading(ended, failed, row.terminal_state, row.sub_domain, by, row.meaning, row.reference, blamed)

    def ended(self, state: str) -> bool:
        """The attempt is over and the record is its last word."""
        return self.of(state).ended == "yes"

    def unended(self, state: str) -> bool:
        """Still on its way: a record taken now is not the attempt's last word."""
        return self.of(state).ended == "no"

    def failed(self, state: str) -> bool:
        return bool(self.of(state).failed)

    def completed(self, state: str) -> bool:
        return self.of(state).completed

    def failure_states(self) -> list[str]:
        """The states a backfill looks for (exact ones: a scheduler's filter takes names)."""
        return [r.state for r in self.rows if r.field == STATE and r.failed and "*" not in r.state]


def warn_unknown(table: StateTable, state: str | None, where: str) -> str:
    """The note on a state the table does not hold, logged as a warning where no diagnosis carries
    it (a backfill's discovery, a webhook's notice); "" for a word the table holds."""
    note = table.unknown(state, where)
    if note:
        log.warning("%s", note)
    return note


def _named(hosts: Iterable[str], texts: list[str]) -> tuple[str, ...]:
    """The hosts that appear, as whole names, in the texts."""
    return tuple(
        h for h in dict.fromkeys(hosts) if any(re.search(rf"(?<![\w.-]){re.escape(h)}(?![\w-])", t) for t in texts)
    )


@cache
def state_table(name: str) -> StateTable:
    """A shipped scheduler's table (data/<name>_states.csv), loaded once."""
    return StateTable.load(DATA / f"{name}_states.csv")


def _state_row(path: Path, line: int, row: dict[str, str]) -> State:
    where = f"{path.name} line {line}"
    field, value = row.get("field") or "", row.get("value") or ""
    ended, failed = row.get("ended", ""), row.get("failed", "")
    optional = ("",) if field != STATE else ()
    if not field or not value:
        raise ValueError(f"{where}: field and value are required")
    if ended not in (*optional, *ENDED) or failed not in (*optional, "yes", "no"):
        raise ValueError(
            f"{where}: a {field} row's ended is {'|'.join(ENDED)} and failed yes|no"
            + (" (or both empty)" if optional else "")
        )
    if row.get("blame", "") not in BLAME:
        raise ValueError(f"{where}: blame is empty or 'named'")
    _check_meaning(where, row.get("terminal_state", ""), row.get("sub_domain", ""))
    if not row.get("reference", "").startswith("https://"):
        raise ValueError(f"{where}: every row names its reference (an https:// address)")
    return State(
        value,
        ended,
        None if failed == "" else failed == "yes",
        row.get("terminal_state", ""),
        row.get("sub_domain", ""),
        row["reference"],
        field,
        row.get("meaning", ""),
        row.get("blame", ""),
    )


def _check_meaning(where: str, ts: str, sd: str) -> None:
    if sd and not ts:
        raise ValueError(f"{where}: sub_domain {sd!r} without its terminal_state")
    try:
        if sd:
            check_pair(ts, sd)
        elif ts:
            TerminalState(ts)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


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


@dataclass
class JobRecord:
    """A scheduler's record of one job, read: the observations staged for the rules, and the facts
    a bundle's attempt.yaml is checked against (`state`, `nodes`, `start`, `end`: tasks/steps.py
    record_wins; `status`: another word of the record's for the same state, which attempt.yaml may
    give instead: Flux's result, as flux jobs shows an inactive job)."""

    observations: list[Observation]
    facts: dict[str, Any]
    problems: list[str] = field(default_factory=list)  # parts that could not be read, each costing itself


@dataclass(frozen=True)
class BundleRecord:
    """The scheduler's record in an attempt bundle: its files in the bundle's scheduler/ folder
    (../shared/spec/bundle.md) and how they read (the files present, name -> text, and the attempt's
    scope -> the record; sr.RecordError when they hold no usable record of the job)."""

    files: tuple[str, ...]
    read: Callable[[dict[str, str], AttemptScope], JobRecord]


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
    bundle: BundleRecord | None = None  # that record in a bundle
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


def find_scheduler(name: str) -> Scheduler | None:
    """The scheduler of that name, None when none registers it; only its own module imported
    when it lives in one of its name (registry.load_named), every module otherwise."""
    if name not in _SCHEDULERS:
        load_named(name)
    return _SCHEDULERS.get(name) or schedulers().get(name)


def get_scheduler(name: str) -> Scheduler:
    found = find_scheduler(name)
    if found is None:
        raise KeyError(f"no scheduler {name!r} (known: {', '.join(sorted(_SCHEDULERS))})")
    return found
