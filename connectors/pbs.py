"""OpenPBS / PBS Pro: scope a job attempt, collect its record and history, find the attempts that
failed, read the notice of deployments/pbs/attribution_end.py (an execjob_end hook). Its table:
data/pbs_states.csv.

The record is `qstat -x -f -F json <job>` (finished jobs too, while the server keeps their history:
job_history_duration), read with TZ=UTC so its ctime-style times are UTC; the history is
`tracejob -n <days> <job>` (the server, MoM, scheduler and accounting log lines of the job, in the
server's own zone: the cluster's). The nodes are exec_host's hosts
(exec_vnode's when exec_host is missing); the window runs from stime to obittime; the attempt index
is run_count - 1. Exit_status, the comment, the substate and the MoM's own words ("walltime N
exceeded limit M", "node EOF 1 (gn-a02)") read through the table: a walltime kill is a time limit on
PBS before 22.05 (Exit_status 271 and the MoM's line) as after (-29).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo

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
from workload_attribution.contracts.identity import NAME_PATTERN, AttemptId, EndedAttempt, Target
from workload_attribution.contracts.models import AttemptScope, CoverageStatus, Observation
from workload_attribution.contracts.vocabulary import Source

NAME = "pbs"
CONNECTOR = "pbs"
PBS_DOWN = re.compile(r"cannot connect|Connection refused|timed out", re.I)  # pbs_server not reachable: retried
STATES = state_table(NAME)
# <sequence>[<array index>].<server>: 6617175.aurora-pbs-0001.hostmgmt.cm.aurora.alcf.anl.gov, 1234[7].pbs01
PBS_JOB_ID = re.compile(r"[0-9]{1,12}(?:\[[0-9]{0,9}\])?(?:\.[A-Za-z0-9][A-Za-z0-9.-]{0,252})?")
CTIME = "%a %b %d %H:%M:%S %Y"  # qstat's times: ctime(3) without the newline
TRACE_LINE = re.compile(r"^(\d\d/\d\d/\d{4} \d\d:\d\d:\d\d)\s+([A-Z])\s+(.*)$")  # tracejob: date time source message
FILES = ("qstat.json", "tracejob.txt")


class PbsError(SourceError):
    """The PBS server answered, but not with the job: a refusal, an error, a record that is not usable."""


class NotYetRecorded(TransientSourceError):
    """The server has not recorded the job's end yet (it is still exiting, or the hook was early)."""


class PbsSource(SourceConfig):
    qstat: str = "qstat"
    tracejob: str = "tracejob"
    timeout_s: float = Field(30.0, gt=0)
    history_days: int = Field(7, ge=1, le=366, description="tracejob -n: the days of server and MoM logs searched")

    def probe(self) -> tuple[str, str, dict[str, str]]:
        return "command", self.qstat, {}


def check_job_id(job_id: str) -> str:
    """A job id in the form PBS writes it, or ValueError naming the form."""
    if not PBS_JOB_ID.fullmatch(job_id):
        raise ValueError(f"not a PBS job id: {job_id!r} (<sequence>[<index>].<server>, e.g. 1234.pbs01)")
    return job_id


# ------------------------------------------------------------------------------ the CLI


def _run(src: PbsSource, argv: list[str]) -> str:
    """A PBS command's output; its times in UTC (qstat prints ctime(3) of the reader's zone)."""
    return run_tool(argv, timeout_s=src.timeout_s, error=PbsError, connector=CONNECTOR, transient=PBS_DOWN)


def qstat(src: PbsSource, job_id: str | None = None) -> dict[str, Any]:
    """`qstat -x -f -F json [job]`: the job (every job the server holds, history included, without one)."""
    argv = [src.qstat, "-x", "-f", "-F", "json", *([check_job_id(job_id)] if job_id else [])]
    doc = sr.load_json(_run(src, argv), "qstat -F json")
    if not isinstance(doc, dict):
        raise PbsError("qstat -F json: not a JSON object")
    return doc


def tracejob(src: PbsSource, job_id: str, since: datetime | None) -> str:
    """`tracejob -n <days> <job>`: the job's lines of the server, MoM, scheduler and accounting logs."""
    days = src.history_days
    if since is not None:
        days = min(src.history_days, max(1, (datetime.now(timezone.utc) - since).days + 2))
    return _run(src, [src.tracejob, "-n", str(days), check_job_id(job_id)])


# ------------------------------------------------------------------------------ the record


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError):
        return ZoneInfo("UTC")


def _time(text: Any, zone: ZoneInfo, fmt: str = CTIME) -> datetime | None:
    """A PBS time in the zone it was printed in, as UTC; None when it is not one."""
    try:
        return datetime.strptime(str(text).strip(), fmt).replace(tzinfo=zone).astimezone(timezone.utc)
    except (ValueError, OverflowError):
        return None


def hosts(job: dict[str, Any]) -> list[str]:
    """The job's hosts: exec_host's (host/N*M+...), else exec_vnode's ((host[1]:ncpus=8)+...) without
    the vnode index."""
    if job.get("exec_host"):
        return list(dict.fromkeys(p.split("/")[0] for p in str(job["exec_host"]).split("+") if p.split("/")[0]))
    return vnode_hosts(str(job.get("exec_vnode") or ""))


def vnode_hosts(exec_vnode: str) -> list[str]:
    names = re.findall(r"[(+]([^:()+]+?)(?:\[\d+\])?:", exec_vnode)
    return list(dict.fromkeys(n.strip() for n in names if n.strip()))


def find_job(doc: dict[str, Any], job_id: str) -> tuple[str, dict[str, Any]] | None:
    """The job of a qstat document: by its full id, or by the id given without (all of) its server name."""
    jobs = doc.get("Jobs") or {}
    if not isinstance(jobs, dict):
        raise sr.RecordError("qstat -F json: 'Jobs' is not an object")
    for key, job in jobs.items():
        if isinstance(job, dict) and (key == job_id or key.startswith(f"{job_id}.")):
            return key, job
    return None


def job_facts(job: dict[str, Any], messages: list[str]) -> list[Fact]:
    """What the record says of the attempt's end, most telling first (pbs_states.csv)."""
    return [
        Fact("exit", job.get("Exit_status")),
        Fact("reason", job.get("comment")),
        *(Fact("message", m) for m in messages),
        Fact("substate", job.get("substate")),
        Fact(STATE, job.get("job_state")),
    ]


def job_attrs(key: str, job: dict[str, Any], zone: ZoneInfo, version: Any) -> dict[str, Any]:
    """The record's attributes, as scope and rules read them."""
    used, limits = job.get("resources_used") or {}, job.get("Resource_List") or {}
    exit_status = job.get("Exit_status")
    return {
        "job_id": key,
        "name": job.get("Job_Name"),
        "state": job.get("job_state"),
        "substate": job.get("substate"),
        "exit_code": None if exit_status is None else str(exit_status),
        "reason": job.get("comment"),
        "nodes": hosts(job),
        "start": _time(job.get("stime"), zone),
        "end": _time(job.get("obittime") or job.get("mtime"), zone),
        "attempt": max(0, int(job.get("run_count") or 1) - 1),
        "queue": job.get("queue"),
        "walltime": {"used": used.get("walltime"), "limit": limits.get("walltime")},
        "mem": {"used": used.get("mem"), "limit": limits.get("mem")},
        "pbs_version": version,
    }


# ------------------------------------------------------------------------------ the history


def history(text: str, zone: ZoneInfo, path: str) -> tuple[list[Observation], list[str]]:
    """tracejob's lines as the job's history (a line wrapped onto the next, indented, is one entry),
    and the lines that could not be read."""
    entries: list[list[str]] = []
    bad: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("Job: "):
            continue
        if line[:1].isspace() and entries:
            entries[-1][3] += " " + line.strip()
        elif TRACE_LINE.match(line):
            entries.append([str(number), *TRACE_LINE.match(line).groups()])  # type: ignore[union-attr]
        else:
            bad.append(f"{path} line {number}: not a tracejob line")
    return [_event(e, zone, path) for e in entries], bad


def _event(entry: list[str], zone: ZoneInfo, path: str) -> Observation:
    line, when, where, message = entry
    return sr.event_observation(
        _time(when, zone, "%m/%d/%Y %H:%M:%S"), message, path, CONNECTOR, line=int(line), log=where, message=message
    )


def read_record(
    doc: dict[str, Any] | None, trace: str | None, job_id: str, zones: tuple[str, str], paths: tuple[str, str]
) -> JobRecord:
    """The job's record (qstat's, its times in zones[0]) with its history (tracejob's, in zones[1]),
    read through the table; RecordError when qstat's document is not one of the job. No document:
    the history alone, nothing to check a scope against."""
    events, bad = history(trace, _zone(zones[1]), paths[1]) if trace is not None else ([], [])
    if doc is None:
        return JobRecord(events, {}, bad)
    found = find_job(doc, job_id)
    if found is None:
        held = sorted(doc.get("Jobs") or {})[:5]
        raise sr.RecordError(f"qstat -F json holds job(s) {held}, not job {job_id}")
    key, job = found
    attrs = job_attrs(key, job, _zone(zones[0]), doc.get("pbs_version"))
    reading = STATES.read(job_facts(job, [e.attrs["message"] for e in events]), attrs["nodes"])
    observations = [sr.job_observation(NAME, attrs, reading, paths[0], CONNECTOR), *events]
    return JobRecord(observations, {k: attrs[k] for k in ("state", "nodes", "start", "end")}, bad)


def read_bundle(files: dict[str, str], scope: AttemptScope) -> JobRecord:
    """A bundle's scheduler/qstat.json and scheduler/tracejob.txt, both in the attempt's zone (the
    server's, as exported)."""
    doc = sr.load_json(files["qstat.json"], "qstat.json") if "qstat.json" in files else None
    if doc is not None and not isinstance(doc, dict):
        raise sr.RecordError("qstat.json: not a JSON object")
    zones = (scope.timezone, scope.timezone)
    return read_record(
        doc, files.get("tracejob.txt"), scope.job_id, zones, ("scheduler/qstat.json", "scheduler/tracejob.txt")
    )


class PbsDetails(sr.HistoryDetails):
    pbs_version: str | None


@register(CONNECTOR, PbsSource, kind="scheduler")
def collect(ctx: CollectContext[PbsSource]) -> Collected:
    """The job's record and history (source `scheduler_record`): qstat's, then tracejob's."""
    cover = Cover(ctx.source, CONNECTOR)
    src, scope = ctx.config, ctx.scope
    try:
        doc = qstat(src, scope.job_id)
    except (PbsError, sr.RecordError, BadInput, ValueError) as exc:
        return cover.outcome(CoverageStatus.error, first_line(exc))
    trace, why = None, None
    try:
        trace = tracejob(src, scope.job_id, scope.start)
    except PbsError as exc:  # the record alone still says how the attempt ended
        why = first_line(exc)
    try:
        record = read_record(doc, trace, scope.job_id, ("UTC", scope.timezone), ("pbs:qstat", "pbs:tracejob"))
    except sr.RecordError as exc:
        return cover.outcome(CoverageStatus.error, first_line(exc))
    lines = len(record.observations) - 1
    details = PbsDetails(pbs_version=doc.get("pbs_version"), history_lines=lines, history_error=why)
    return sr.stage_record(ctx, cover, record, details)


# ------------------------------------------------------------------------------ as a scheduler


def scope(src: PbsSource, target: Target) -> AttemptScope:
    """The attempt's scope from qstat's record; a completion trigger waits until the server holds
    the job as finished (job_state F: the table's `ended`)."""
    job_id = target.job_id or ""
    doc = qstat(src, job_id)
    found = find_job(doc, job_id)
    if found is None:
        raise PbsError(f"qstat -x has no job {job_id}")
    key, job = found
    attrs = job_attrs(key, job, _zone("UTC"), doc.get("pbs_version"))
    reading = STATES.read(job_facts(job, []), attrs["nodes"])
    if target.trigger == "completion" and reading.ended != "yes":
        raise NotYetRecorded(f"job {job_id} has not finished in PBS yet (job_state {attrs['state']})")
    end = attrs["end"] or datetime.now(timezone.utc)
    return AttemptScope(
        cluster=target.cluster or "",
        scheduler=NAME,
        job_id=job_id,
        attempt=attrs["attempt"],
        name=attrs["name"],
        nodes=attrs["nodes"],
        start=attrs["start"] or end,
        end=end,
        state=str(attrs["state"] or NO_STATE),
        exit_code=attrs["exit_code"],
        reason=attrs["reason"],
    )


def discover(src: PbsSource, cluster: str, since: datetime, until: datetime) -> list[EndedAttempt]:
    """The jobs the server holds (history included) that finished in failure inside [since, until)."""
    found = []
    for key, job in (qstat(src).get("Jobs") or {}).items():
        if not isinstance(job, dict):
            continue
        attrs = job_attrs(key, job, _zone("UTC"), None)
        reading = STATES.read(job_facts(job, []))
        warn_unknown(STATES, job.get("job_state"), f"job {key} in qstat")  # its Exit_status decides
        end = attrs["end"]
        if reading.ended == "yes" and reading.failed and end is not None and since <= end < until:
            attempt = AttemptId(cluster=cluster, scheduler=NAME, job_id=key, attempt=attrs["attempt"])
            found.append(EndedAttempt.recorded(attempt, end))
    return sorted(found, key=lambda a: (a.end, a.key))


class PbsJobEvent(BaseModel):
    """What deployments/pbs/attribution_end.py (an execjob_end hook) sends when a job's run ends."""

    # its validator built when a notice first arrives: a process diagnosing a bundle never needs it
    model_config = ConfigDict(extra="forbid", str_max_length=4096, defer_build=True)

    cluster: str = Field(pattern=NAME_PATTERN)
    job_id: str = Field(pattern=f"^{PBS_JOB_ID.pattern}$")
    exit_status: int = Field(ge=-1000, le=100000, description="the job's Exit_status (pbs_states.csv)")
    run_count: int = Field(1, ge=0, le=100000, description="the job's run_count: this run is attempt run_count - 1")
    exec_host: str | None = Field(None, max_length=65536)
    queue: str | None = Field(None, pattern=NAME_PATTERN)
    diagnose: bool = Field(False, description="diagnose even if the job finished with Exit_status 0")


def read_notice(event: PbsJobEvent) -> Notice:
    attempt = AttemptId(cluster=event.cluster, scheduler=NAME, job_id=event.job_id, attempt=max(0, event.run_count - 1))
    reading = STATES.read([Fact("exit", event.exit_status)])
    return Notice(
        Target.completed(attempt),
        reading.failed,
        f"job ended with Exit_status {event.exit_status}",
        asked=event.diagnose,
    )


PBS = register_scheduler(
    Scheduler(
        name=NAME,
        scope=scope,
        states=STATES,
        config=PbsSource,
        records=(Source.scheduler_record.value, CONNECTOR),
        bundle=BundleRecord(FILES, read_bundle),
        job_id=check_job_id,
        discover=discover,
        webhook=Webhook(
            "pbs",
            PbsJobEvent,
            read_notice,
            "a PBS job",
            "A PBS job's run ended (sent by deployments/pbs/attribution_end.py, an execjob_end hook). "
            "Failed -> diagnosed.",
        ),
    )
)
