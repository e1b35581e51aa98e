"""IBM Spectrum LSF: scope a job attempt, collect its record and history, find the attempts that
failed, read the notice of deployments/lsf/attribution-post-exec (a post-execution script). Its
table: data/lsf_states.csv.

The record is `bjobs -a -hms -json -o "<fields>" <job>` (finished jobs too, while mbatchd keeps
them: CLEAN_PERIOD); the history is `bhist -l <job>` (the job's events from lsb.events: dispatches,
starts, unknown-host spells, the exit with its TERM_* reason). Both run with TZ=UTC so their times
are UTC; LSF prints them without a year (unless LSB_DISPLAY_YEAR=Y), so a time takes the year that
puts it nearest before the record was read (a bundle: its attempt's end). bjobs' times are to the
minute, bhist's to the second: the window is bhist's (the last dispatch to the exit), bjobs' only
when there is no history. The nodes are EXEC_HOST's hosts (`4*hostA:2*hostB`), else the last
dispatch's; the attempt is the number of dispatches before the last. The reason is bhist's
`Completed <exit>; TERM_MEMLIMIT: ...` (bjobs prints none), read through the table with the exit
code and the state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
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
from workload_attribution.contracts.models import AttemptScope, CoverageStatus
from workload_attribution.contracts.vocabulary import Source

NAME = "lsf"
CONNECTOR = "lsf"
# mbatchd busy or down: retried
LSF_DOWN = re.compile(r"LSF is down|Please wait|batch system daemon not responding|timed out", re.I)
STATES = state_table(NAME)
LSF_JOB_ID = re.compile(r"[0-9]{1,12}(?:\[[0-9]{1,9}\])?")  # 4718921, or an array element 4718921[3]
# bjobs -o fields (the names and their JSON keys as LSF 10.1 prints them: BatchEuphoria's LSFJobManager)
FIELDS = (
    "jobid job_name stat user queue exit_code from_host exec_host submit_time start_time finish_time run_time"
    " max_mem runtimelimit slots"
)
FILES = ("bjobs.json", "bhist.txt")
MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()
# bhist -l: "Fri Nov  2 11:07:57: <event>" (a year after the seconds with LSB_DISPLAY_YEAR=Y)
BHIST_EVENT = re.compile(
    r"^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d):(\d\d)(?: (\d{4}))?: (.*)$"
)
# bjobs -o times: "Nov  2 11:07", "Nov  2 11:07 L" (L: the actual time, E: estimated), "Nov  2 11:07 2018 L"
BJOBS_TIME = re.compile(r"^([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d)(?::(\d\d))?(?: (\d{4}))?(?: [A-Z])?$")
CONTINUATION = 21  # bhist -l wraps at 80 columns, continuing under the text of the first line
REASON = re.compile(r"Completed <exit>; (TERM_[A-Z_]+(?:: [^;]*)?)")
EXITED = re.compile(r"^Exited with exit code (\d+)")
NOT_FOUND = re.compile(r"Job <[^>]*> is not found")  # bjobs of a job mbatchd does not hold (any more)
ENDS = ("Exited with exit code", "Exited by signal", "Done successfully", "Completed <exit>", "Completed <done>")


class LsfError(SourceError):
    """mbatchd answered, but not with the job: a refusal, an error, a record that is not usable."""


class NotYetRecorded(TransientSourceError):
    """LSF has not recorded the job's end yet (its post-execution processing still running)."""


class LsfSource(SourceConfig):
    bjobs: str = "bjobs"
    bhist: str = "bhist"
    timeout_s: float = Field(30.0, gt=0)

    def probe(self) -> tuple[str, str, dict[str, str]]:
        return "command", self.bjobs, {}


def check_job_id(job_id: str) -> str:
    """A job id in the form LSF writes it, or ValueError naming the form."""
    if not LSF_JOB_ID.fullmatch(job_id):
        raise ValueError(f"not an LSF job id: {job_id!r} (<number> or an array element <number>[<index>])")
    return job_id


# ------------------------------------------------------------------------------ the CLI


def _run(src: LsfSource, argv: list[str]) -> str:
    """An LSF command's output; its times in UTC (LSF prints the reader's local time)."""
    return run_tool(
        argv, timeout_s=src.timeout_s, error=LsfError, connector=CONNECTOR, transient=LSF_DOWN, message=_not_found
    )


def _not_found(stdout: str, stderr: str) -> str | None:
    """bjobs -json of a forgotten job may print its JSON before (or instead of) the message."""
    return next((line for line in (stderr + stdout).splitlines() if NOT_FOUND.search(line)), None)


def bjobs(src: LsfSource, job_id: str | None = None) -> list[dict[str, Any]]:
    """`bjobs -a -hms -json -o FIELDS <job>`: the job's record; without a job, `bjobs -d -u all ...`:
    every user's recently finished jobs."""
    which = ["-a", "-hms"] if job_id else ["-d", "-u", "all", "-hms"]
    argv = [src.bjobs, *which, "-json", "-o", FIELDS, *([check_job_id(job_id)] if job_id else [])]
    return records(sr.load_json(_run(src, argv), "bjobs -json"))


def bhist(src: LsfSource, job_id: str) -> str:
    """`bhist -l <job>`: the job's history (lsb.events)."""
    return _run(src, [src.bhist, "-l", check_job_id(job_id)])


def records(doc: Any) -> list[dict[str, Any]]:
    """bjobs -json's RECORDS (a job bjobs does not know is a record with an ERROR and no STAT)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("RECORDS"), list):
        raise sr.RecordError("bjobs -json: no RECORDS list")
    return [r for r in doc["RECORDS"] if isinstance(r, dict) and r.get("STAT")]


# ------------------------------------------------------------------------------ times


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError):
        return ZoneInfo("UTC")


def _dated(parts: tuple[str | None, ...], zone: ZoneInfo, near: datetime) -> datetime | None:
    """month, day, hour, minute, second, year (None: the year that puts it nearest before `near`,
    a day's grace for clocks) -> UTC."""
    month, day, hour, minute, second, year = parts
    if month not in MONTHS:
        return None
    years = [int(year)] if year else [near.year + 1, near.year, near.year - 1]
    for y in years:
        try:
            local = datetime(y, MONTHS.index(month) + 1, int(day or 0), int(hour or 0), int(minute or 0))
        except ValueError:  # Feb 29 of another year
            continue
        when = local.replace(second=int(second or 0), tzinfo=zone).astimezone(timezone.utc)
        if year or when <= near + timedelta(days=1):
            return when
    return None


def bjobs_time(text: Any, zone: ZoneInfo, near: datetime) -> datetime | None:
    m = BJOBS_TIME.match(str(text or "").strip())
    return _dated(m.groups(), zone, near) if m else None


# ------------------------------------------------------------------------------ the history


@dataclass
class History:
    """bhist -l read: its events (time, text, line), and what they say of the job's last run."""

    events: list[tuple[datetime | None, str, int]] = field(default_factory=list)
    dispatches: int = 0
    hosts: list[str] = field(default_factory=list)
    start: datetime | None = None
    end: datetime | None = None
    reason: str | None = None
    exit_code: str | None = None
    state: str = ""  # what the last event says of the job: RUN, DONE or EXIT ("" before a dispatch)


def _entries(text: str) -> list[tuple[int, str]]:
    """bhist -l's logical lines (a wrapped one joined) with their first line numbers. A wrapped line
    continues as far in as its first line's text begins (after `Fri Nov  2 11:07:57: `, 21 columns;
    26 with a year); what is left of the indent belongs to the text (a space at the wrap)."""
    first = next((m for m in map(BHIST_EVENT.match, text.splitlines()) if m), None)
    indent = first.start(7) if first else CONTINUATION
    entries: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line[:1].isspace() and line.strip() and entries:
            rest = line[indent:] if line[:indent].isspace() else line.lstrip()
            entries[-1] = (entries[-1][0], entries[-1][1] + rest.rstrip())
        elif line.strip():
            entries.append((number, line.rstrip()))
    return entries


def history(text: str, zone: ZoneInfo, near: datetime) -> History:
    """The job's events (the header, the memory and time summaries are not events)."""
    got = History()
    for number, line in _entries(text):
        m = BHIST_EVENT.match(line)
        if not m:
            continue
        *parts, event = m.groups()
        when = _dated((parts[0], parts[1], parts[2], parts[3], parts[4], parts[5]), zone, near)
        got.events.append((when, event, number))
        _note(got, when, event)
    return got


def _note(got: History, when: datetime | None, event: str) -> None:
    """What one event says of the last run."""
    if event.startswith("Dispatched "):
        got.dispatches += 1
        got.hosts = _dispatch_hosts(event)
        got.start, got.end, got.reason, got.exit_code, got.state = when, None, None, None, "RUN"
    elif event.startswith("Starting") and got.start is None:
        got.start = when
    if event.startswith(ENDS) and got.end is None:
        got.end = when
    if (m := REASON.search(event)) is not None:
        got.reason = m.group(1).rstrip(" ;")
    if (m := EXITED.match(event)) is not None:
        got.exit_code, got.state = m.group(1), "EXIT"
    elif event.startswith("Done successfully"):
        got.exit_code, got.state = "0", "DONE"
    elif event.startswith("Completed <exit>"):
        got.state = "EXIT"


def _dispatch_hosts(event: str) -> list[str]:
    """`Dispatched 2 Task(s) on Host(s) <a> <b>, Allocated ... on Host(s) <a> <b>`: the hosts
    (`<4*hostA>` as hostA)."""
    first = event.split(", Allocated")[0]
    return list(dict.fromkeys(h.split("*")[-1] for h in re.findall(r"<([^<>]+)>", first)))


# ------------------------------------------------------------------------------ the record


def exec_hosts(text: Any) -> list[str]:
    """EXEC_HOST (`hostA:hostA`, `4*hostA:2*hostB`): its hosts, once each."""
    return list(dict.fromkeys(p.split("*")[-1] for p in str(text or "").split(":") if p.split("*")[-1]))


def find_job(recs: list[dict[str, Any]], job_id: str) -> dict[str, Any] | None:
    return next((r for r in recs if str(r.get("JOBID")) == job_id), None)


def known(src: LsfSource, job_id: str) -> dict[str, Any] | None:
    """bjobs' record of the job; None once mbatchd has forgotten it (a finished job is kept for
    CLEAN_PERIOD, an hour by default: bhist, which reads lsb.events, still knows it)."""
    try:
        return find_job(bjobs(src, job_id), job_id)
    except LsfError as exc:
        if NOT_FOUND.search(str(exc)):
            return None
        raise


def history_record(job_id: str, past: History) -> dict[str, Any] | None:
    """The record bhist's history stands for when bjobs no longer holds the job: its state and hosts."""
    return {"JOBID": job_id, "STAT": past.state, "EXEC_HOST": ":".join(past.hosts)} if past.state else None


def job_facts(job: dict[str, Any], past: History) -> list[Fact]:
    """What the record says of the attempt's end, most telling first (lsf_states.csv)."""
    return [
        Fact("reason", past.reason),
        Fact("exit", job.get("EXIT_CODE") or past.exit_code),
        *(Fact("message", e[1]) for e in past.events),
        Fact(STATE, job.get("STAT")),
    ]


def job_attrs(job: dict[str, Any], past: History, zone: ZoneInfo, near: datetime) -> dict[str, Any]:
    """The record's attributes, as scope and rules read them: bhist's window to the second when it
    has one, else bjobs' to the minute."""
    stat = str(job.get("STAT") or "")
    return {
        "job_id": str(job.get("JOBID")),
        "name": job.get("JOB_NAME"),
        "state": stat,
        "exit_code": job.get("EXIT_CODE") or past.exit_code or ("0" if stat == "DONE" else None),
        "reason": past.reason,
        "nodes": exec_hosts(job.get("EXEC_HOST")) or past.hosts,
        "start": past.start or bjobs_time(job.get("START_TIME"), zone, near),
        "end": past.end or bjobs_time(job.get("FINISH_TIME"), zone, near),
        "exact_window": past.start is not None and past.end is not None,
        "attempt": max(0, past.dispatches - 1),
        "queue": job.get("QUEUE"),
        "run_time": job.get("RUN_TIME"),
        "run_limit": job.get("RUNTIMELIMIT"),
        "max_mem": job.get("MAX_MEM"),
        "unknown_spells": sum(e[1].startswith("Unknown; unable to reach") for e in past.events),
    }


def read_record(
    recs: list[dict[str, Any]] | None,
    text: str | None,
    job_id: str,
    zone: ZoneInfo,
    near: datetime,
    paths: tuple[str, str],
) -> JobRecord:
    """The job's record (bjobs') with its history (bhist's), read through the table; RecordError
    when bjobs' records hold not the job. No record: the history alone, nothing to check against."""
    past = history(text, zone, near) if text is not None else History()
    events = [
        sr.event_observation(when, event, paths[1], CONNECTOR, line=number, message=event)
        for when, event, number in past.events
    ]
    if recs is None:
        return JobRecord(events, {})
    job = find_job(recs, job_id)
    if job is None:
        raise sr.RecordError(f"bjobs -json holds job(s) {[r.get('JOBID') for r in recs][:5]}, not job {job_id}")
    attrs = job_attrs(job, past, zone, near)
    reading = STATES.read(job_facts(job, past), attrs["nodes"])
    observations = [sr.job_observation(NAME, attrs, reading, paths[0], CONNECTOR), *events]
    window = {"start": attrs["start"], "end": attrs["end"]} if attrs["exact_window"] else {}
    return JobRecord(observations, {"state": attrs["state"], "nodes": attrs["nodes"], **window})


def read_bundle(files: dict[str, str], scope: AttemptScope) -> JobRecord:
    """A bundle's scheduler/bjobs.json and scheduler/bhist.txt, both in the attempt's zone (the
    cluster's, as exported), their years the attempt's."""
    recs = records(sr.load_json(files["bjobs.json"], "bjobs.json")) if "bjobs.json" in files else None
    near = scope.end + timedelta(days=2)
    paths = ("scheduler/bjobs.json", "scheduler/bhist.txt")
    return read_record(recs, files.get("bhist.txt"), scope.job_id, _zone(scope.timezone), near, paths)


@register(CONNECTOR, LsfSource, kind="scheduler")
def collect(ctx: CollectContext[LsfSource]) -> Collected:
    """The job's record and history (source `scheduler_record`): bjobs', then bhist's."""
    cover = Cover(ctx.source, CONNECTOR)
    src, scope = ctx.config, ctx.scope
    try:
        job = known(src, scope.job_id)
    except (LsfError, sr.RecordError, BadInput, ValueError) as exc:
        return cover.outcome(CoverageStatus.error, first_line(exc))
    text, why = None, None
    try:
        text = bhist(src, scope.job_id)
    except LsfError as exc:  # the record alone still says how the attempt ended
        why = first_line(exc)
    if job is None and text is not None:  # forgotten by mbatchd: bhist's history stands for the record
        job = history_record(scope.job_id, history(text, _zone("UTC"), _now()))
    if job is None:
        return cover.outcome(CoverageStatus.error, why or f"neither bjobs nor bhist has job {scope.job_id}")
    recs = [job]
    try:
        record = read_record(recs, text, scope.job_id, _zone("UTC"), _now(), ("lsf:bjobs", "lsf:bhist"))
    except sr.RecordError as exc:
        return cover.outcome(CoverageStatus.error, first_line(exc))
    details = sr.HistoryDetails(history_lines=len(record.observations) - 1, history_error=why)
    return sr.stage_record(ctx, cover, record, details)


def _now() -> datetime:
    return datetime.now(timezone.utc)


# ------------------------------------------------------------------------------ as a scheduler


def scope(src: LsfSource, target: Target) -> AttemptScope:
    """The attempt's scope from bjobs' record and bhist's history; a completion trigger waits until
    LSF holds the job as finished (DONE or EXIT: the table's `ended`)."""
    job_id = target.job_id or ""
    job, past = known(src, job_id), None
    if job is None:  # forgotten by mbatchd: bhist's history alone
        past = history(bhist(src, job_id), _zone("UTC"), _now())
        job = history_record(job_id, past)
    if job is None:
        raise LsfError(f"neither bjobs -a nor bhist -l has job {job_id}")
    if target.trigger == "completion" and STATES.read([Fact(STATE, job.get("STAT"))]).ended != "yes":
        raise NotYetRecorded(f"job {job_id} has not finished in LSF yet (STAT {job.get('STAT')})")
    if past is None:
        try:
            past = history(bhist(src, job_id), _zone("UTC"), _now())
        except LsfError:  # bjobs' minutes and hosts still scope it
            past = History()
    attrs = job_attrs(job, past, _zone("UTC"), _now())
    end = attrs["end"] or _now()
    return AttemptScope(
        cluster=target.cluster or "",
        scheduler=NAME,
        job_id=job_id,
        attempt=attrs["attempt"],
        name=attrs["name"],
        nodes=attrs["nodes"],
        start=attrs["start"] or end,
        end=end,
        state=attrs["state"] or NO_STATE,
        exit_code=attrs["exit_code"],
        reason=attrs["reason"],
    )


def discover(src: LsfSource, cluster: str, since: datetime, until: datetime) -> list[EndedAttempt]:
    """The jobs mbatchd still holds as finished (`bjobs -d`) that ended in failure (EXIT) inside
    [since, until); the attempt is the job's last run (bjobs tells no run count: 0)."""
    found = []
    for job in bjobs(src):
        end = bjobs_time(job.get("FINISH_TIME"), _zone("UTC"), until)
        warn_unknown(STATES, job.get("STAT"), f"job {job.get('JOBID')} in bjobs")  # read as failed: diagnosed
        if STATES.failed(str(job.get("STAT"))) and end is not None and since <= end < until:
            attempt = AttemptId(cluster=cluster, scheduler=NAME, job_id=str(job.get("JOBID")), attempt=0)
            found.append(EndedAttempt.recorded(attempt, end))
    return sorted(found, key=lambda a: (a.end, a.key))


class LsfJobEvent(BaseModel):
    """What deployments/lsf/attribution-post-exec (a post-execution script) sends when a job ends."""

    # its validator built when a notice first arrives: a process diagnosing a bundle never needs it
    model_config = ConfigDict(extra="forbid", str_max_length=4096, defer_build=True)

    cluster: str = Field(pattern=NAME_PATTERN)
    job_id: str = Field(
        pattern=f"^{LSF_JOB_ID.pattern}$", description="LSB_JOBID, with [LSB_JOBINDEX] for an array element"
    )
    exit_status: int = Field(ge=0, le=65535, description="LSB_JOBEXIT_STAT: the job's wait status")
    exit_info: str | None = Field(None, max_length=256, description="LSB_JOBEXIT_INFO: the signal LSF ended it with")
    requeued: bool = Field(False, description="LSB_JOBPEND set: the job goes back to the queue")
    hosts: str | None = Field(None, max_length=65536, description="LSB_HOSTS")
    diagnose: bool = Field(False, description="diagnose even if the job exited 0")


def exit_code(wait_status: int) -> int:
    """A wait status as LSF's exit code: the exit value, or 128 + the signal that killed it."""
    return 128 + (wait_status & 0x7F) if wait_status & 0x7F else wait_status >> 8


def read_notice(event: LsfJobEvent) -> Notice:
    attempt = AttemptId(cluster=event.cluster, scheduler=NAME, job_id=event.job_id, attempt=0)
    code = exit_code(event.exit_status)
    failed = code != 0 or bool(event.exit_info) or event.requeued
    why = f"job exited {code}" + (f" ({event.exit_info})" if event.exit_info else "")
    return Notice(Target.completed(attempt), failed, why, asked=event.diagnose)


LSF = register_scheduler(
    Scheduler(
        name=NAME,
        scope=scope,
        states=STATES,
        config=LsfSource,
        records=(Source.scheduler_record.value, CONNECTOR),
        bundle=BundleRecord(FILES, read_bundle),
        job_id=check_job_id,
        discover=discover,
        webhook=Webhook(
            "lsf",
            LsfJobEvent,
            read_notice,
            "an LSF job",
            "An LSF job ended (sent by deployments/lsf/attribution-post-exec, a post-execution script). "
            "Failed -> diagnosed.",
        ),
    )
)
