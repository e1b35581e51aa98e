"""One attempt's identity, built in one place.

`AttemptId` names an attempt (cluster, scheduler, job id, restart count): the idempotency key of its
flow run, the warehouse's key, the diagnosis id. `Target` is what is asked to be diagnosed: an
attempt known to a scheduler, an explicit nodes + window scope, or an attempt bundle on disk; it is
the one parameter of the `attribute-attempt` flow and what the CLI, the HTTP service and the
backfill hand over.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from workload_attribution.contracts.vocabulary import Scheduler

# Cluster and host names as the rest of the system accepts them (ASCII, no separators).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
SLURM_JOB_ID = re.compile(r"[0-9]{1,12}(?:_[0-9]{1,9})?(?:\+[0-9]{1,6})?")  # ASCII only: \d takes digits of any script
K8S_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?")  # RFC 1123 subdomain
K8S_NAMESPACE = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")  # RFC 1123 label
_NAMESPACE = uuid.UUID("6f1c1a52-9a51-4d6b-9d4e-3c8b1c1f7a10")

Name = Annotated[str, Field(pattern=NAME_PATTERN)]


def check_job_id(scheduler: str, job_id: str) -> str:
    """A scheduler's job id in the form that scheduler writes, or ValueError naming the form."""
    if scheduler == Scheduler.slurm and not SLURM_JOB_ID.fullmatch(job_id):
        raise ValueError(f"not a Slurm job id: {job_id!r} (digits, optionally _array or +het)")
    if scheduler == Scheduler.kueue:
        namespace, _, name = job_id.rpartition("/")
        if (namespace and not K8S_NAMESPACE.fullmatch(namespace)) or not K8S_NAME.fullmatch(name):
            raise ValueError(f"not a Kubernetes workload name: {job_id!r} ([namespace/]name, RFC 1123)")
    if not job_id or len(job_id) > 2000 or any(ord(c) < 0x20 or ord(c) == 0x7F for c in job_id):
        raise ValueError("a job id is 1-2000 printable characters")
    return job_id


class AttemptId(BaseModel):
    """cluster, scheduler, job id, attempt: the key of everything done for one attempt."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: Name
    scheduler: Scheduler
    job_id: str
    attempt: int = Field(0, ge=0, le=1_000_000)

    @field_validator("job_id")
    @classmethod
    def _printable(cls, value: str) -> str:
        # The scheduler's own form is checked where a job id comes in from outside (Target); an
        # exported bundle names its job as its site does.
        if not value or len(value) > 2000 or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise ValueError("a job id is 1-2000 printable characters")
        return value

    @property
    def key(self) -> str:
        """`<cluster>:<scheduler>:<job_id>:<attempt>`: the flow run's idempotency key."""
        return f"{self.cluster}:{self.scheduler.value}:{self.job_id}:{self.attempt}"

    @property
    def diagnosis_id(self) -> str:
        """Stable per attempt: re-diagnosing an attempt replaces the same diagnosis."""
        return str(uuid.uuid5(_NAMESPACE, self.key))

    def __str__(self) -> str:
        return self.key


class Window(BaseModel):
    """An explicit scope: these hosts over this time window, with no scheduler record."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: list[Name] = Field(min_length=1, max_length=10_000)
    start: datetime
    end: datetime

    @field_validator("start", "end")
    @classmethod
    def _zoned(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("a time zone is required (RFC 3339, e.g. 2026-11-20T10:00:00Z)")
        return value

    @model_validator(mode="after")
    def _ordered(self) -> Window:
        if self.end <= self.start:
            raise ValueError("end must be after start")
        if len(set(self.nodes)) != len(self.nodes):
            raise ValueError("nodes contains duplicates")
        return self

    @property
    def job_id(self) -> str:
        """The job id an explicit scope is known by (no scheduler gave it one)."""
        return f"{','.join(self.nodes)}@{self.start.isoformat()}"


class Target(BaseModel):
    """What to diagnose: exactly one of a scheduler's job (`job_id`), an explicit `window`, or a
    `bundle` directory. `cluster` names a configured cluster (optional when only one is
    configured; a bundle names its own). `trigger="completion"` (a scheduler's end-of-job hook)
    makes scoping wait, with retries, until the scheduler has recorded the attempt's end."""

    model_config = ConfigDict(extra="forbid")

    cluster: Name | None = None
    job_id: str | None = Field(None, max_length=2000)
    attempt: int | None = Field(None, ge=0, le=1_000_000, description="the restart count the trigger reported")
    window: Window | None = None
    bundle: str | None = Field(None, max_length=4096)
    trigger: Literal["completion"] | None = None

    @model_validator(mode="after")
    def _one_scope(self) -> Target:
        given = [n for n in ("job_id", "window", "bundle") if getattr(self, n)]
        if len(given) != 1:
            raise ValueError("give exactly one of job_id, window (nodes + start + end) or bundle")
        if self.job_id and any(ord(c) < 0x20 or ord(c) == 0x7F for c in self.job_id):
            raise ValueError("job_id has control characters")
        return self

    def attempt_id(self, scheduler: Scheduler | str) -> AttemptId:
        """The identity this target will be diagnosed under (not for bundles: theirs is in attempt.yaml)."""
        if self.bundle or self.cluster is None:
            raise ValueError("a bundle's identity is in its attempt.yaml; a job or window needs its cluster")
        if self.window is not None:
            return AttemptId(cluster=self.cluster, scheduler=Scheduler.static, job_id=self.window.job_id, attempt=0)
        sched = Scheduler(scheduler)
        return AttemptId(
            cluster=self.cluster,
            scheduler=sched,
            job_id=check_job_id(sched, self.job_id or ""),
            attempt=self.attempt or 0,
        )

    def describe(self) -> str:
        if self.bundle:
            return f"bundle:{self.bundle.rstrip('/').rsplit('/', 1)[-1]}"
        what = self.job_id or ",".join(self.window.nodes if self.window else [])[:60]
        return f"{self.cluster or 'default'}:{what}" + (f":{self.attempt}" if self.attempt is not None else "")
