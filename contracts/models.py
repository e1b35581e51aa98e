"""Typed contracts at the seams: scope -> observations/coverage -> symptoms -> diagnosis.

Field names of `Diagnosis` and its parts are the contract of ../shared/spec/diagnosis.md
(documented again in docs/contracts.md); they may grow, never be renamed. Their words are the closed sets
of contracts/vocabulary.py.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializeAsAny,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from workload_attribution.contracts.identity import AttemptId, SchedulerName
from workload_attribution.contracts.vocabulary import (
    Action,
    Confidence,
    CoverageStatus,
    Role,
    SubDomain,
    TerminalState,
    check_pair,
)

__all__ = [
    "Action",
    "AttemptScope",
    "Candidate",
    "Confidence",
    "Coverage",
    "CoverageDetails",
    "CoverageStatus",
    "Diagnosis",
    "Escalation",
    "Evidence",
    "History",
    "MissingEvidence",
    "NovelTemplate",
    "Novelty",
    "Observation",
    "PastAttempt",
    "Role",
    "RootCause",
    "RulesStamp",
    "SubjectHistory",
    "Symptom",
    "SubDomain",
    "TerminalState",
    "as_utc",
]


class Contract(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_assignment=True)


# What a diagnosis often goes without (an undecided verdict's candidates and what would settle it,
# fleet memory and novelty: with a warehouse; a connector's details: each its own) builds its
# validator when first used, not at import (`LATER`): a new process builds only those its attempt
# makes. Diagnosis, built at import, holds their schemas in its own.
LATER = ConfigDict(defer_build=True)


# Empty defaults are made by these, not by the builtins `list` and `dict`: building a model, pydantic
# asks each default factory for its signature, and a builtin's is parsed from its text by the
# tokenizer (~0.2 ms each, and ~5 ms to compile the tokenizer's expression the first time).
def empty_list() -> list[Any]:
    return []


def empty_dict() -> dict[str, Any]:
    return {}


# Times outside this span are not a log's or a scheduler's: refused in a scope, unparsed in a line.
EARLIEST = datetime(1970, 1, 2, tzinfo=timezone.utc)
LATEST = datetime(2200, 1, 1, tzinfo=timezone.utc)


# Bounds on an attempt's scope: more nodes, or longer names, are not an attempt's (bad input).
MAX_NODES = 65_536
MAX_HOST = 253  # a DNS name
# A name as an attempt.yaml may give it (connectors/bundle.py load_scope checks): no whitespace or
# control character (a host, a cluster), no control character (a job id).
HOST_NAME = r"^[^\s\x00-\x1f\x7f-\x9f]{1,253}$"
TEXT = r"^[^\x00-\x08\x0b-\x1f\x7f-\x9f]*$"


def as_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


class AttemptScope(Contract):
    """One workload attempt: who ran where, when, and how the scheduler says it ended."""

    cluster: str = Field(min_length=1, max_length=256)
    scheduler: SchedulerName
    job_id: str = Field(min_length=1, max_length=2000)
    attempt: int = Field(ge=0, le=1_000_000, description="restart count (a requeue or Kueue requeue)")
    name: str | None = Field(default=None, max_length=1024)
    user: str | None = Field(default=None, max_length=256)
    nodes: list[str] = Field(
        max_length=MAX_NODES, description="the allocation; empty when the attempt ended before any node was allocated"
    )
    gpus_per_node: int | None = Field(default=None, ge=0, le=1024)
    start: datetime
    end: datetime
    state: str = Field(max_length=256)
    exit_code: str | None = Field(default=None, max_length=64)
    reason: str | None = Field(default=None, max_length=4096)
    timezone: str = Field(default="UTC", max_length=64)

    @field_validator("job_id", "exit_code", mode="before")
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) else value

    @field_validator("start", "end", mode="before")
    @classmethod
    def _a_time_not_a_number(cls, value: Any) -> Any:
        if isinstance(value, (bool, int, float)):
            raise ValueError(f"{value!r} is a number, not an RFC 3339 time (e.g. 2026-11-20T10:00:00Z)")
        return value

    @field_validator("start", "end")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        try:
            value = as_utc(value)
        except OverflowError:  # 9999-12-31T23:59:59-14:00 is in year 10000 in UTC
            raise ValueError(f"{value.isoformat()} is outside {EARLIEST.year}..{LATEST.year}") from None
        if not (EARLIEST <= value <= LATEST):
            raise ValueError(f"{value.isoformat()} is outside {EARLIEST.year}..{LATEST.year}")
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (an IANA name, e.g. UTC, Europe/Berlin)") from None
        return value

    @model_validator(mode="after")
    def _ordered(self) -> AttemptScope:
        if self.end < self.start:
            raise ValueError(f"end ({self.end.isoformat()}) is before start ({self.start.isoformat()})")
        if len(set(self.nodes)) != len(self.nodes):
            raise ValueError("nodes contains duplicates")
        return self

    @property
    def id(self) -> AttemptId:
        return AttemptId(cluster=self.cluster, scheduler=self.scheduler, job_id=self.job_id, attempt=self.attempt)


# coverage details naming lines normalisation quarantined (their times are never used)
QUARANTINE_KEYS = ("lines_with_time_out_of_range", "lines_with_impossible_time")
# coverage details naming evidence that lies (times that cannot be, values that are no number):
# never what a high-confidence verdict rests on, and the guard isolates no node on such a diagnosis
DOUBT_KEYS = (*QUARANTINE_KEYS, "non_finite_samples", "clock_skew")


class CoverageDetails(BaseModel):
    """What a coverage record says beyond its counts. Each connector writes its own model (a
    subclass naming its keys: LogFileDetails, LokiDetails ...); read back from a diagnosis' JSON,
    the keys are kept as they were written. `lines_with_time_out_of_range` and
    `lines_with_impossible_time` are normalisation's, for any source with lines it quarantined
    (stamped outside 1970..2200; stamped with fields that make no time: 11:59:60 on a day with no
    leap second, hour 25, a 15-digit fraction): written last, and only when there are some; so are
    `non_finite_samples` and `non_finite_series` (samples of NaN or +/-Inf, never evidence: how
    many, and the first of their series), and `clock_skew` (the hosts of a log source whose clock
    is off by more than the skew tolerance, staging/clocks.py)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    lines_with_time_out_of_range: int | None = None
    lines_with_impossible_time: int | None = None
    non_finite_samples: int | None = None
    non_finite_series: list[str] | None = None
    clock_skew: list[str] | None = None

    @model_serializer(mode="wrap")
    def _normalisation_last(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        out = handler(self)
        for key in (*QUARANTINE_KEYS, "non_finite_samples", "non_finite_series", "clock_skew"):
            late = out.pop(key, None)
            if late is not None:
                out[key] = late
        return out


class Details(CoverageDetails):
    """Base of a connector's own details model: its keys, and no other."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # as LATER, for every connector's own


class Coverage(Contract):
    """What one source delivered for this attempt. Every configured source gets one, whatever happened.
    connectors/coverage.py builds it (one status ladder for every connector)."""

    source: str
    connector: str
    status: CoverageStatus
    observations: int = 0
    nodes: list[str] = Field(default_factory=empty_list, description="nodes this source delivered data for")
    unparsed: int = Field(default=0, description="records/lines that could not be read faithfully")
    files: int = 0
    error: str | None = None
    duration_ms: int = 0
    details: SerializeAsAny[CoverageDetails] = Field(default_factory=CoverageDetails)


class Observation(Contract):
    """One raw fact as a connector saw it: a log line, a metric sample or a scheduler record."""

    source: str
    connector: str
    node: str | None = None
    time: datetime | None = None
    text: str
    path: str | None = None
    line: int | None = None
    series: str | None = None
    value: float | None = None
    kind: str = "line"
    attrs: dict[str, Any] = Field(default_factory=empty_dict)


class Evidence(Contract):
    id: str
    source: str
    node: str | None = None
    time: datetime | None = None
    text: str
    ref: str = Field(description="where the raw line/sample lives: path:line, or series@time")
    connector: str | None = None
    path: str | None = None
    line: int | None = None
    series: str | None = None
    time_quality: str | None = Field(default=None, description="own | inherited | none | quarantined")


class Symptom(Contract):
    symptom: str
    role: Role
    title: str | None = None
    node: str | None = None
    rank: int | None = None
    ranks: list[int] = Field(default_factory=empty_list)
    component: str | None = None
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    count: int = 1
    demoted_by: str | None = None
    interesting: bool = False
    rule: str | None = None
    evidence: list[str] = Field(default_factory=empty_list)
    details: dict[str, Any] = Field(default_factory=empty_dict)


class RootCause(Contract):
    symptom: str
    title: str
    node: str | None = None
    component: str | None = None
    first_seen: datetime | None = None
    evidence: list[str] = Field(default_factory=empty_list)
    details: dict[str, Any] = Field(default_factory=empty_dict)


class Candidate(Contract):
    model_config = LATER

    symptom: str
    terminal_state: TerminalState | None = None
    sub_domain: SubDomain | None = None
    node: str | None = None
    first_seen: datetime | None = None
    evidence: list[str] = Field(default_factory=empty_list)


class RulesStamp(Contract):
    version: str
    fired: list[str] = Field(default_factory=empty_list)
    failed: list[dict[str, str]] = Field(default_factory=empty_list)


class PastAttempt(Contract):
    """Another attempt that blamed the same node or switch port (fleet memory)."""

    model_config = LATER

    cluster: str
    job_id: str
    attempt: int
    diagnosis_id: str | None = None
    role: Role = Field(description="root: the subject was blamed; cascade: it only showed the cascade")
    end: datetime | None = None
    symptom: str | None = Field(default=None, description="the root symptom of that attempt")


class SubjectHistory(Contract):
    """How often one blamed node or switch port was root (and cascade) of other attempts in the
    warehouse, in the 7 and 30 days ending at this attempt's end."""

    model_config = LATER

    kind: str = Field(description="node | switch_port")
    subject: str = Field(description="a host, or a switch port as switch:port")
    root_7d: int = 0
    root_30d: int = 0
    cascade_7d: int = 0
    cascade_30d: int = 0
    last_root: datetime | None = None
    last_cascade: datetime | None = None
    attempts: list[PastAttempt] = Field(
        default_factory=empty_list, description="the latest first, at most memory.listed"
    )
    more: int = Field(default=0, description="attempts of the 30 days not listed")


class Escalation(Contract):
    """The recommended action raised because a blamed subject keeps failing (memory.escalate_at)."""

    model_config = LATER

    from_action: Action
    to_action: Action
    ticket: str | None = Field(default=None, description="the ticket to open besides the action: hardware | network")
    subjects: list[str] = Field(default_factory=empty_list)
    reason: str


class History(Contract):
    """Fleet memory: what the warehouse knew of the blamed subjects when this attempt was diagnosed."""

    model_config = LATER

    window_end: datetime = Field(description="the attempt's end: the 7 and 30 days end here")
    subjects: list[SubjectHistory] = Field(default_factory=empty_list)
    escalation: Escalation | None = None


class MissingEvidence(Contract):
    """Evidence not collected that would decide an ambiguous or insufficient verdict: this source,
    of these hosts, in this window, would separate these candidates."""

    model_config = LATER

    source: str
    hosts: list[str] = Field(
        default_factory=empty_list, description="the hosts whose records are missing; none: the job's"
    )
    start: datetime | None = None
    end: datetime | None = None
    separates: list[str] = Field(default_factory=empty_list, description="the readings it would decide between")
    reason: str = Field(description="what it would show, in one sentence")


class NovelTemplate(Contract):
    """A log template (a line with what varies masked) this attempt logged that its job's last good
    attempt did not, or that is rare in the fleet: what no rule read, for a person to look at first."""

    model_config = LATER

    template: str
    level: str = Field(description="error | warning | info, from its words")
    count: int = Field(description="lines of this attempt with this template")
    first: str = Field(description="its first line: path:line, bundle-relative")
    line: str = Field(description="the first line's text")
    time: datetime | None = None
    node: str | None = Field(default=None, description="the host whose file holds the first line")
    why: str = Field(description="not in the job's last good attempt ..., or rare in the fleet: N of M attempts ...")
    fleet_attempts: int | None = Field(default=None, description="other attempts of the fleet window that logged it")
    fleet_total: int | None = Field(default=None, description="attempts of the fleet window with templates kept")


class Novelty(Contract):
    """What `novel_templates` was computed against, and what it could not see."""

    model_config = LATER

    baseline: str | None = Field(default=None, description="the job's last good attempt compared with, if any")
    baseline_diagnosis_id: str | None = None
    fleet_days: int = 30
    fleet_total: int = Field(default=0, description="other attempts with templates kept in the fleet window")
    lines: int = Field(default=0, description="lines of this attempt read")
    templates: int = Field(default=0, description="its templates")
    novel: int = Field(default=0, description="novel templates found (novel_templates lists the first ones)")
    note: str | None = Field(default=None, description="why there is nothing or less to compare with")


class Diagnosis(Contract):
    diagnosis_id: str
    attempt: AttemptScope
    terminal_state: TerminalState
    sub_domain: SubDomain
    confidence: Confidence
    root_cause: RootCause | None = None
    affected_nodes: list[str] = Field(default_factory=empty_list)
    affected_components: list[str] = Field(default_factory=empty_list)
    candidates: list[Candidate] = Field(default_factory=empty_list)
    symptoms: list[Symptom] = Field(default_factory=empty_list)
    recommended_action: Action
    explanation: str = ""
    notes: list[str] = Field(default_factory=empty_list)
    coverage: list[Coverage] = Field(default_factory=empty_list)
    rules: RulesStamp
    evidence: list[Evidence] = Field(default_factory=empty_list)
    created_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    would_settle: list[MissingEvidence] = Field(
        default_factory=empty_list, description="ambiguous or insufficient_evidence: what would decide it"
    )
    history: History | None = Field(default=None, description="fleet memory, when a warehouse was read")
    novel_templates: list[NovelTemplate] = Field(
        default_factory=empty_list,
        description="doubtful verdicts: log templates new to the job or rare in the fleet, errors first, then earliest",
    )
    novelty: Novelty | None = Field(default=None, description="doubtful verdicts: what novel_templates compared with")

    @model_validator(mode="after")
    def _words_belong_together(self) -> Diagnosis:
        check_pair(self.terminal_state, self.sub_domain)
        return self

    def to_json(self, **kwargs: Any) -> str:
        return self.model_dump_json(indent=2, **kwargs)
