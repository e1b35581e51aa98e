"""One attempt's identity, and what is asked to be diagnosed, built in one place.

`AttemptId` names an attempt (cluster, scheduler, job id, restart count): the idempotency key of its
flow run, the warehouse's key, the diagnosis id. `Target` is what is asked to be diagnosed: an
attempt known to a scheduler, an explicit nodes + window scope (`Window`), or an attempt bundle on
disk; it is the one parameter of the `attribute-attempt` flow and what the CLI, the HTTP service and
the backfill hand over. `EndedAttempt` is an attempt a backfill found: its identity, the target that
diagnoses it, when it ended.

Which schedulers exist is the scheduler registry's to say (connectors/schedulers.py): here a
scheduler is a name, and `static` the one of an explicit scope, which no scheduler recorded.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# Cluster and host names as the rest of the system accepts them (ASCII, no separators).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
# A scheduler's name: the word in AttemptScope.scheduler, a cluster's `scheduler:` and the registry.
SCHEDULER_PATTERN = r"^[a-z][a-z0-9_]{0,31}$"
STATIC = "static"  # the scheduler of an explicit nodes + window scope, or of a bundle without records
MAX_JOB_ID = 2000
_NAMESPACE = uuid.UUID("6f1c1a52-9a51-4d6b-9d4e-3c8b1c1f7a10")

Name = Annotated[str, Field(pattern=NAME_PATTERN)]
SchedulerName = Annotated[str, Field(pattern=SCHEDULER_PATTERN)]


def printable_job_id(job_id: str) -> str:
    """A job id as any scheduler may write it: 1-2000 characters, none of them a control character.
    A scheduler's own form (digits for Slurm, RFC 1123 names for Kueue) is its module's to check."""
    if not job_id or len(job_id) > MAX_JOB_ID or any(ord(c) < 0x20 or ord(c) == 0x7F for c in job_id):
        raise ValueError(f"a job id is 1-{MAX_JOB_ID} printable characters")
    return job_id


class AttemptId(BaseModel):
    """cluster, scheduler, job id, attempt: the key of everything done for one attempt."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: Name
    scheduler: SchedulerName
    job_id: str
    attempt: int = Field(0, ge=0, le=1_000_000)

    @field_validator("job_id")
    @classmethod
    def _printable(cls, value: str) -> str:
        # The scheduler's own form is checked where a job id comes in from outside (the scheduler's
        # module, asked by the service); an exported bundle names its job as its site does.
        return printable_job_id(value)

    @property
    def key(self) -> str:
        """`<cluster>:<scheduler>:<job_id>:<attempt>`: the flow run's idempotency key."""
        return f"{self.cluster}:{self.scheduler}:{self.job_id}:{self.attempt}"

    @property
    def diagnosis_id(self) -> str:
        """Stable per attempt: re-diagnosing an attempt replaces the same diagnosis."""
        return str(uuid.uuid5(_NAMESPACE, self.key))

    def __str__(self) -> str:
        return self.key


class Window(BaseModel):
    """An explicit scope: these hosts over this time window, with no scheduler record."""

    # built when first used (a bundle's or a job's target has none); Target holds its schema
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

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
        """The job id an explicit scope is known by (no scheduler gave it one): a digest of its sorted
        hosts and its window, so that any allocation has a short id and the same hosts over the same
        window, however listed or zoned, are the same attempt. The hosts stay in the scope as data."""
        utc = [t.astimezone(timezone.utc).isoformat() for t in (self.start, self.end)]
        digest = hashlib.sha256("\n".join([*sorted(self.nodes), *utc]).encode()).hexdigest()
        return f"nodes-{digest[:24]}"


class Target(BaseModel):
    """What to diagnose: exactly one of a scheduler's job (`job_id`), an explicit `window`, or a
    `bundle` directory. `cluster` names a configured cluster (optional when only one is
    configured; a bundle names its own). `trigger="completion"` (a scheduler's end-of-job hook)
    makes scoping wait, with retries, until the scheduler has recorded the attempt's end."""

    model_config = ConfigDict(extra="forbid")

    cluster: Name | None = None
    job_id: str | None = Field(None, max_length=MAX_JOB_ID)
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

    @classmethod
    def completed(cls, attempt: AttemptId) -> Target:
        """The target of an attempt its scheduler recorded as ended (a completion notice, a backfill)."""
        return cls(cluster=attempt.cluster, job_id=attempt.job_id, attempt=attempt.attempt, trigger="completion")

    def attempt_id(self, scheduler: str) -> AttemptId:
        """The identity this target is diagnosed under on a cluster of `scheduler` (not for bundles:
        theirs is in attempt.yaml); a window's scheduler is `static` whatever the cluster's."""
        if self.bundle or self.cluster is None:
            raise ValueError("a bundle's identity is in its attempt.yaml; a job or window needs its cluster")
        if self.window is not None:
            return AttemptId(cluster=self.cluster, scheduler=STATIC, job_id=self.window.job_id, attempt=0)
        return AttemptId(cluster=self.cluster, scheduler=scheduler, job_id=self.job_id or "", attempt=self.attempt or 0)

    def describe(self) -> str:
        if self.bundle:
            return f"bundle:{self.bundle.rstrip('/').rsplit('/', 1)[-1]}"
        what = self.job_id or ",".join(self.window.nodes if self.window else [])[:60]
        return f"{self.cluster or 'default'}:{what}" + (f":{self.attempt}" if self.attempt is not None else "")


@dataclass(frozen=True)
class EndedAttempt:
    """An attempt found to have ended (a backfill's discovery, from a scheduler or a tree of
    bundles): who it is, the target that diagnoses it, when it ended."""

    id: AttemptId
    target: Target
    end: datetime | None = None

    @classmethod
    def recorded(cls, attempt: AttemptId, end: datetime | None) -> EndedAttempt:
        """An attempt its scheduler recorded: diagnosed as a completion notice would have it."""
        return cls(attempt, Target.completed(attempt), end)

    @property
    def key(self) -> str:
        return self.id.key


def host_key(name: str) -> str:
    """A host name as DNS compares it: case-insensitive, a trailing dot (the root) dropped."""
    return name.strip().rstrip(".").lower()


def allocated_spelling(name: str | None, allocation: list[str]) -> str | None:
    """The allocation's own spelling of a host named `name` (a log file's, a label's, a line's):
    equal as DNS compares names (GB-R12-N01, gb-r12-n01. and gb-r12-n01 are one host), or the short
    name of one the other's fully qualified name (gb-r12-n01 and gb-r12-n01.eos.internal). None
    when no allocated host is that one, or when two are (a short name of two domains decides
    nothing): the name then stays as written, a host outside the allocation."""
    if not name:
        return None
    key = host_key(name)
    if not key:
        return None
    by_key, by_short = _spellings(tuple(allocation))
    exact = by_key.get(key, [])
    if exact:
        return exact[0] if len(exact) == 1 else None
    # a short name is any allocated host's short name; a qualified one, an allocated short name
    matches = by_short.get(key, []) if "." not in key else by_key.get(key.split(".", 1)[0], [])
    return matches[0] if len(matches) == 1 else None


@lru_cache(maxsize=8)
def _spellings(allocation: tuple[str, ...]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """An allocation's hosts by name as DNS compares it, and by short name, in allocation order:
    a 1,024-host attempt's 2,048 log files each compared with every host cost ~0.3 s."""
    by_key: dict[str, list[str]] = {}
    by_short: dict[str, list[str]] = {}
    for n in allocation:
        k = host_key(n)
        by_key.setdefault(k, []).append(n)
        by_short.setdefault(k.split(".", 1)[0], []).append(n)
    return by_key, by_short
