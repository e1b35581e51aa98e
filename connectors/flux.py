"""Flux: scope a job attempt, collect its record and eventlog, find the attempts that failed, read
the notice of deployments/flux/attribution-epilog (a job-manager epilog). Its table:
data/flux_states.csv.

The record is `flux jobs --json <job>` (job-list's record: state, result, returncode, waitstatus,
the first fatal exception's type and note, nodelist, t_run/t_cleanup/t_inactive); the history is
`flux job eventlog --format=json <job>` (submit, alloc, start, exception, finish, release, clean;
a bundle's flux-eventlog.txt may hold the text form, `<time> <name> key=value ...`). Their times
are Unix times. The nodes are nodelist's hosts; the window runs from
the `start` event (the job shells started, after the prolog; t_run, the allocation, without an
eventlog) to t_inactive (the epilog done). Flux does not requeue: every job is attempt 0. The
exception (its note naming the lost broker's host), the result, the returncode and the state read
through the table, most telling first.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from workload_attribution.connectors import scheduler_records as sr
from workload_attribution.connectors.commands import run_tool
from workload_attribution.connectors.coverage import Cover
from workload_attribution.connectors.registry import CollectContext, Collected, SourceConfig, register
from workload_attribution.connectors.schedulers import (
    NO_STATE,
    STATE,
    BundleRecord,
    Fact,
    JobRecord,
    Notice,
    Scheduler,
    Webhook,
    register_scheduler,
    state_table,
    warn_unknown,
)
from workload_attribution.contracts.errors import BadInput, SourceError, TransientSourceError, first_line
from workload_attribution.contracts.hostlist import HostlistError, expand_hostlist
from workload_attribution.contracts.identity import NAME_PATTERN, AttemptId, EndedAttempt, Target
from workload_attribution.contracts.models import EARLIEST, LATEST, AttemptScope, CoverageStatus
from workload_attribution.contracts.vocabulary import Source

NAME = "flux"
CONNECTOR = "flux"
FLUX_DOWN = re.compile(r"Connection refused|No such file or directory.*local|timed out", re.I)  # broker not reachable
STATES = state_table(NAME)
# f58 (ƒNNzkJm7, or fNNzkJm7 where ƒ cannot be typed), decimal, or 0x hex: the forms flux accepts
FLUX_JOB_ID = re.compile(r"(?:[ƒf][1-9A-HJ-NP-Za-km-z]{1,13}|[0-9]{1,20}|0x[0-9a-f]{1,16})")
EVENT = re.compile(r"^(\d+(?:\.\d+)?) ([A-Za-z][\w.-]*)(?: (.*))?$")  # flux job eventlog: <time> <name> key=value...
KEY = re.compile(r"([A-Za-z_][\w-]*)=")
FILES = ("flux-job.json", "flux-eventlog.txt")
FAILED_RESULTS = "failed,timeout,canceled"  # flux jobs --filter: the results a backfill looks for


class FluxError(SourceError):
    """The Flux instance answered, but not with the job: a refusal, an error, a record that is not usable."""


class NotYetRecorded(TransientSourceError):
    """Flux has not recorded the job's end yet (it is still running or cleaning up)."""


class FluxSource(SourceConfig):
    flux: str = "flux"
    timeout_s: float = Field(30.0, gt=0)

    def probe(self) -> tuple[str, str, dict[str, str]]:
        return "command", self.flux, {}


def check_job_id(job_id: str) -> str:
    """A job id in a form Flux accepts, or ValueError naming the forms."""
    if not FLUX_JOB_ID.fullmatch(job_id):
        raise ValueError(f"not a Flux job id: {job_id!r} (f58 like ƒNNzkJm7, decimal, or 0x hex)")
    return job_id


# ------------------------------------------------------------------------------ the CLI


def _run(src: FluxSource, argv: list[str]) -> str:
    """A flux command's output (--since's time is read in the reader's zone: run in UTC)."""
    return run_tool(argv, timeout_s=src.timeout_s, error=FluxError, connector=CONNECTOR, transient=FLUX_DOWN)


def flux_job(src: FluxSource, job_id: str) -> dict[str, Any]:
    """`flux jobs --json <job>`: the job's record (one object)."""
    doc = sr.load_json(_run(src, [src.flux, "jobs", "--json", check_job_id(job_id)]), "flux jobs --json")
    if not isinstance(doc, dict):
        raise sr.RecordError("flux jobs --json: not a JSON object")
    return doc


def eventlog(src: FluxSource, job_id: str) -> str:
    """`flux job eventlog --format=json <job>`: the job's eventlog, one JSON event a line."""
    return _run(src, [src.flux, "job", "eventlog", "--format=json", check_job_id(job_id)])


def failed_jobs(src: FluxSource, since: datetime) -> list[dict[str, Any]]:
    """`flux jobs --json --user=all --filter=failed,timeout,canceled --since=<time>`: every user's
    jobs that ended in failure since then (`{"jobs": [...]}`)."""
    when = since.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    argv = [src.flux, "jobs", "--json", "--user=all", f"--filter={FAILED_RESULTS}", f"--since={when}"]
    doc = sr.load_json(_run(src, argv), "flux jobs --json")
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise sr.RecordError("flux jobs --json: no 'jobs' list")
    return [j for j in jobs if isinstance(j, dict)]


def _epoch(value: Any) -> datetime | None:
    """A Flux time (Unix seconds, fractions kept); 0 (not reached), or one outside 1970..2200, is none."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not EARLIEST.timestamp() <= value < LATEST.timestamp():
        return None
    return datetime.fromtimestamp(value, tz=timezone.utc)


# ------------------------------------------------------------------------------ the eventlog


@dataclass
class Events:
    """An eventlog read: its events (time, name, context, line) and the lines that could not be read."""

    entries: list[tuple[datetime | None, str, dict[str, Any], int]] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)

    def first(self, name: str) -> datetime | None:
        return next((when for when, n, _, _ in self.entries if n == name), None)


def _context(text: str) -> dict[str, Any]:
    """`type="exec" severity=0 note="..." annotations={"sched":{...}}`: values are JSON (bare words as text)."""
    got: dict[str, Any] = {}
    decoder = json.JSONDecoder()
    at = 0
    while (m := KEY.match(text, at)) is not None:
        at = m.end()
        try:
            value, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            end = text.find(" ", at)
            value, at = text[at : len(text) if end < 0 else end], len(text) if end < 0 else end
        got[m.group(1)] = value
        while at < len(text) and text[at] == " ":
            at += 1
    return got


def read_eventlog(text: str, path: str) -> Events:
    """`flux job eventlog`'s text lines, or its `-f json` lines (as KVS holds them)."""
    got = Events()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("{"):
            entry = _json_event(line)
        else:
            m = EVENT.match(line.strip())
            entry = (float(m.group(1)), m.group(2), _context(m.group(3) or "")) if m else None
        if entry is None:
            got.bad.append(f"{path} line {number}: not an eventlog entry")
            continue
        got.entries.append((_epoch(entry[0]), entry[1], entry[2], number))
    return got


def _json_event(line: str) -> tuple[float, str, dict[str, Any]] | None:
    try:
        doc = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
        return None
    context: dict[str, Any] = doc["context"] if isinstance(doc.get("context"), dict) else {}
    return float(doc.get("timestamp") or 0), str(doc["name"]), context


# ------------------------------------------------------------------------------ the record


def nodes(job: dict[str, Any]) -> list[str]:
    """nodelist's hosts (`elcap[8576-8703]`, `asp,asp`), once each."""
    try:
        return list(dict.fromkeys(expand_hostlist(str(job.get("nodelist") or ""))))
    except HostlistError:
        return []


def _exception(job: dict[str, Any]) -> dict[str, Any]:
    """The job's exception (flux jobs --json: `exception`; job-list's own keys: exception_*)."""
    exc = job.get("exception")
    if isinstance(exc, dict):
        return exc
    return {k: job.get(f"exception_{k}") for k in ("occurred", "severity", "type", "note")}


def _result(job: dict[str, Any]) -> str:
    result = job.get("result")
    numeric = {1: "COMPLETED", 2: "FAILED", 4: "CANCELED", 8: "TIMEOUT"}  # job-list's FLUX_JOB_RESULT_* bits
    return numeric.get(result, "") if isinstance(result, int) else str(result or "")


def _state(job: dict[str, Any]) -> str:
    state = job.get("state")
    numeric = {1: "NEW", 2: "DEPEND", 4: "PRIORITY", 8: "SCHED", 16: "RUN", 32: "CLEANUP", 64: "INACTIVE"}
    return numeric.get(state, "") if isinstance(state, int) else str(state or "")


def reason(job: dict[str, Any]) -> str | None:
    """The result and its exception, as flux jobs prints them: `FAILED (exception type=exec: <note>)`."""
    exc, result = _exception(job), _result(job)
    if exc.get("occurred") and exc.get("type"):
        severity = f" severity={exc['severity']}" if exc.get("severity") not in (0, None) else ""
        return f"{result} (exception type={exc['type']}{severity}: {exc.get('note') or ''})".strip()
    return result or None


def returncode(job: dict[str, Any]) -> int | None:
    """flux jobs' returncode (job-list's raw record has only the waitstatus): the exit code, -N for
    a job shell killed by signal N, -128 for a job that ended by exception before it ran."""
    if isinstance(job.get("returncode"), int):
        return int(job["returncode"])
    status = job.get("waitstatus")
    if isinstance(status, int) and not isinstance(status, bool):
        return -(status & 0x7F) if status & 0x7F else status >> 8
    return -128 if _state(job) == "INACTIVE" and _exception(job).get("occurred") else None


def job_facts(job: dict[str, Any]) -> list[Fact]:
    """What the record says of the attempt's end, most telling first (flux_states.csv)."""
    exc = _exception(job)
    exception = Fact("exception", exc.get("type") if exc.get("occurred") else None, str(exc.get("note") or ""))
    result = Fact("result", _result(job))
    # a job that completed despite a non-fatal exception (a node-failure on a rank it no longer needed) completed
    first = [result, exception] if result.said == "COMPLETED" else [exception, result]
    return [*first, Fact("exit", returncode(job)), Fact(STATE, _state(job))]


def job_attrs(job: dict[str, Any], events: Events) -> dict[str, Any]:
    """The record's attributes, as scope and rules read them."""
    exc, code = _exception(job), returncode(job)
    return {
        "job_id": str(job.get("jobid") or job.get("id")),
        "name": job.get("name"),
        "state": _state(job),
        "result": _result(job),
        "exit_code": None if code is None else str(code),
        "waitstatus": job.get("waitstatus"),
        "reason": reason(job),
        "exception": {k: exc.get(k) for k in ("type", "severity", "note")} if exc.get("occurred") else None,
        "nodes": nodes(job),
        "start": events.first("start") or _epoch(job.get("t_run")),
        "end": _epoch(job.get("t_inactive")) or _epoch(job.get("t_cleanup")),
        "attempt": 0,
        "queue": job.get("queue"),
    }


def read_record(job: dict[str, Any] | None, text: str | None, paths: tuple[str, str]) -> JobRecord:
    """The job's record with its eventlog, read through the table. No record: the eventlog alone."""
    events = read_eventlog(text, paths[1]) if text is not None else Events()
    observations = [
        sr.event_observation(
            when,
            f"{name} {json.dumps(ctx, separators=(',', ':'))}" if ctx else name,
            paths[1],
            CONNECTOR,
            line=number,
            event=name,
            context=ctx,
        )
        for when, name, ctx, number in events.entries
    ]
    if job is None:
        return JobRecord(observations, {}, events.bad)
    attrs = job_attrs(job, events)
    reading = STATES.read(job_facts(job), attrs["nodes"])
    record = sr.job_observation(NAME, attrs, reading, paths[0], CONNECTOR)
    facts = {k: attrs[k] for k in ("state", "nodes", "start", "end")}
    facts["status"] = attrs["result"] or attrs["state"]  # what flux jobs shows: an inactive job's result
    return JobRecord([record, *observations], facts, events.bad)


def _matches(job: dict[str, Any], job_id: str) -> bool:
    return job_id in {str(job.get("jobid")), str(job.get("id")), str(job.get("jobid", "")).replace("ƒ", "f")}


def read_bundle(files: dict[str, str], scope: AttemptScope) -> JobRecord:
    """A bundle's scheduler/flux-job.json (`flux jobs --json <job>`) and scheduler/flux-eventlog.txt."""
    job = None
    if "flux-job.json" in files:
        job = sr.load_json(files["flux-job.json"], "flux-job.json")
        if not isinstance(job, dict):
            raise sr.RecordError("flux-job.json: not a JSON object")
        if not _matches(job, scope.job_id):
            raise sr.RecordError(f"flux-job.json is job {job.get('jobid') or job.get('id')}, not job {scope.job_id}")
    return read_record(job, files.get("flux-eventlog.txt"), ("scheduler/flux-job.json", "scheduler/flux-eventlog.txt"))


@register(CONNECTOR, FluxSource, kind="scheduler")
def collect(ctx: CollectContext[FluxSource]) -> Collected:
    """The job's record and eventlog (source `scheduler_record`)."""
    cover = Cover(ctx.source, CONNECTOR)
    src, scope = ctx.config, ctx.scope
    try:
        job = flux_job(src, scope.job_id)
    except (FluxError, sr.RecordError, BadInput, ValueError) as exc:
        return cover.outcome(CoverageStatus.error, first_line(exc))
    text, why = None, None
    try:
        text = eventlog(src, scope.job_id)
    except FluxError as exc:  # the record alone still says how the attempt ended
        why = first_line(exc)
    record = read_record(job, text, ("flux:jobs", "flux:eventlog"))
    details = sr.HistoryDetails(history_lines=len(record.observations) - 1, history_error=why)
    return sr.stage_record(ctx, cover, record, details)


# ------------------------------------------------------------------------------ as a scheduler


def scope(src: FluxSource, target: Target) -> AttemptScope:
    """The attempt's scope from the job's record and eventlog; a completion trigger waits until the
    job is INACTIVE (the table's `ended`)."""
    job_id = target.job_id or ""
    job = flux_job(src, job_id)
    if target.trigger == "completion" and STATES.read([Fact(STATE, _state(job))]).ended != "yes":
        raise NotYetRecorded(f"job {job_id} has not finished in Flux yet (state {_state(job)})")
    try:
        events = read_eventlog(eventlog(src, job_id), "flux:eventlog")
    except FluxError:  # t_run still starts the window
        events = Events()
    attrs = job_attrs(job, events)
    end = attrs["end"] or datetime.now(timezone.utc)
    return AttemptScope(
        cluster=target.cluster or "",
        scheduler=NAME,
        job_id=job_id,
        attempt=0,
        name=attrs["name"],
        nodes=attrs["nodes"],
        start=attrs["start"] or end,
        end=end,
        state=attrs["state"] or NO_STATE,
        exit_code=attrs["exit_code"],
        reason=attrs["reason"],
    )


def discover(src: FluxSource, cluster: str, since: datetime, until: datetime) -> list[EndedAttempt]:
    """The jobs that ended in failure (failed, timeout, canceled) inside [since, until)."""
    found = []
    for job in failed_jobs(src, since):
        end = _epoch(job.get("t_inactive")) or _epoch(job.get("t_cleanup"))
        reading = STATES.read(job_facts(job))
        warn_unknown(STATES, _state(job), f"job {job.get('jobid') or job.get('id')} in flux jobs")
        if reading.ended == "yes" and reading.failed and end is not None and since <= end < until:
            job_id = str(job.get("jobid") or job.get("id"))
            found.append(EndedAttempt.recorded(AttemptId(cluster=cluster, scheduler=NAME, job_id=job_id), end))
    return sorted(found, key=lambda a: (a.end, a.key))


class FluxJobEvent(BaseModel):
    """What deployments/flux/attribution-epilog (a job-manager epilog) sends when a job finishes."""

    # its validator built when a notice first arrives: a process diagnosing a bundle never needs it
    model_config = ConfigDict(extra="forbid", str_max_length=4096, defer_build=True)

    cluster: str = Field(pattern=NAME_PATTERN)
    job_id: str = Field(pattern=f"^{FLUX_JOB_ID.pattern}$", description="FLUX_JOB_ID")
    status: int | None = Field(None, ge=0, le=65535, description="the finish event's wait status (none: never ran)")
    exception_type: str | None = Field(
        None, max_length=64, description="the first fatal (or node-failure) exception's type"
    )
    exception_note: str | None = Field(None, max_length=1024)
    diagnose: bool = Field(False, description="diagnose even if the job completed")


def read_notice(event: FluxJobEvent) -> Notice:
    attempt = AttemptId(cluster=event.cluster, scheduler=NAME, job_id=event.job_id)
    reading = STATES.read([Fact("exception", event.exception_type, event.exception_note or "")])
    failed = bool(event.status) or reading.failed or event.status is None
    why = f"job finished with wait status {event.status}" + (
        f" (exception {event.exception_type})" if event.exception_type else ""
    )
    return Notice(Target.completed(attempt), failed, why, asked=event.diagnose)


FLUX = register_scheduler(
    Scheduler(
        name=NAME,
        scope=scope,
        states=STATES,
        config=FluxSource,
        records=(Source.scheduler_record.value, CONNECTOR),
        bundle=BundleRecord(FILES, read_bundle),
        job_id=check_job_id,
        discover=discover,
        webhook=Webhook(
            "flux",
            FluxJobEvent,
            read_notice,
            "a Flux job",
            "A Flux job finished (sent by deployments/flux/attribution-epilog, a job-manager epilog). "
            "Failed -> diagnosed.",
        ),
    )
)
