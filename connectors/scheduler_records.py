"""Scheduler documents -> record observations (Slurm sacct/slurmdb JSON, Kueue/Kubernetes objects,
and the `scheduler_job` / `scheduler_event` records every other scheduler's module makes).

These documents are small and nested; Python reads them into records that SQL rules query
(`records.kind`, `records.attrs`). The scheduler's own record is evidence like any log line; what
its state, exit code and reason mean comes from the scheduler's table (schedulers.py StateTable)
and travels with the record (`terminal_state`, `sub_domain`, `blamed_nodes`).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from workload_attribution.connectors.coverage import Cover, Tally
from workload_attribution.connectors.registry import CollectContext, Collected
from workload_attribution.connectors.schedulers import NO_STATE, STATE, Fact, JobRecord, Reading, state_table
from workload_attribution.contracts.errors import SourceError
from workload_attribution.contracts.hostlist import expand_hostlist
from workload_attribution.contracts.models import EARLIEST, LATEST, Details, Observation
from workload_attribution.contracts.vocabulary import Source
from workload_attribution.staging.database import connected
from workload_attribution.staging.observations import insert_observations

SCHEDULER_JOB = "scheduler_job"  # a scheduler's record of the job (PBS, LSF, Flux ...): its end, read through its table
SCHEDULER_EVENT = "scheduler_event"  # one entry of the job's history as the scheduler recorded it


class RecordError(SourceError):
    """The document is not what it claims to be (wrong shape, another job)."""


class HistoryDetails(Details):
    """A scheduler record's coverage details: the history entries read with it, or why there are none
    (PBS tracejob, LSF bhist, the Flux eventlog)."""

    history_lines: int
    history_error: str | None


def stage_record(ctx: CollectContext[Any], cover: Cover, record: JobRecord, details: HistoryDetails) -> Collected:
    """Stage a job's record and history for the rules. Covered with gaps when the history could not be
    read (the record alone still says how the attempt ended) or parts of either could not."""
    why = details.history_error
    with connected(ctx.staging) as con:
        insert_observations(con, record.observations)
    return cover.judged(
        Tally(observations=len(record.observations), unparsed=len(record.problems), gaps=why is not None),
        error="; ".join(([why] if why else []) + record.problems[:5]) or None,
        details=details,
    )


def _epoch(value: Any, problems: list[str] | None = None, what: str = "time") -> datetime | None:
    """A Unix time; one outside 1970..2200 (or not a number) is no time, and a problem when counted."""
    if isinstance(value, dict):  # slurm >= 23.02 wraps numbers: {"set": true, "number": N}
        value = value.get("number") if value.get("set", True) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    if not EARLIEST.timestamp() <= value < LATEST.timestamp():
        if problems is not None:
            problems.append(f"{what} {str(value)[:24]}: outside {EARLIEST.year}..{LATEST.year}, no time")
        return None
    return datetime.fromtimestamp(value, tz=timezone.utc)


def _within(what: str, problems: list[str] | None, read: Any) -> Any:
    """One record read on its own: a record of the wrong shape costs that record (counted)."""
    try:
        return read()
    except (AttributeError, TypeError, ValueError, KeyError, IndexError, OverflowError) as exc:
        if problems is not None:
            problems.append(f"{what}: not read ({type(exc).__name__}: {str(exc)[:120]})")
        return None


def _exit(value: Any) -> dict[str, Any]:
    """sacct/slurmdb exit_code object -> {status, return_code, signal}."""
    if isinstance(value, dict):
        rc = value.get("return_code")
        if isinstance(rc, dict):
            rc = rc.get("number")
        sig = value.get("signal") or {}
        return {
            "status": value.get("status"),
            "return_code": rc,
            "signal": sig.get("signal_id") if isinstance(sig, dict) else None,
        }
    if isinstance(value, int):  # /slurm endpoints: raw wait status
        return {"status": "RAW", "return_code": value >> 8, "signal": value & 0x7F}
    return {"status": None, "return_code": None, "signal": None}


def _state(value: Any) -> str:
    if isinstance(value, dict):
        value = value.get("current")
    if isinstance(value, list):
        value = value[0] if value else None
    return str(value or NO_STATE)


def sacct_observations(
    doc: Any, job_id: str, path: str, connector: str = "bundle"
) -> tuple[list[Observation], dict[str, Any]]:
    """`sacct --json` (or /slurmdb/.../job) -> a job record, its step records and facts about them."""
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise RecordError("not a sacct --json document: no 'jobs' list")
    release = ((doc.get("meta") or {}).get("Slurm") or {}).get("release") or ""
    jobs = [j for j in doc["jobs"] if isinstance(j, dict) and str(j.get("job_id")) == str(job_id)]
    if not jobs:
        found = sorted({str(j.get("job_id")) for j in doc["jobs"] if isinstance(j, dict)})[:5]
        raise RecordError(f"sacct document holds job(s) {found}, not job {job_id}")
    # Job ids are reused (the id space wraps; a controller that lost its state starts again): of
    # several records under one id, the attempt is the latest submitted, and the others are not its evidence.
    job = latest_record(jobs)
    problems: list[str] = []
    attrs = _sacct_job(job, release, problems)
    exit_code = attrs["exit_code"]
    obs = [
        Observation(
            source="sacct",
            connector=connector,
            kind="sacct_job",
            time=attrs["end"] or attrs["start"],
            text=f"job {attrs['job_id']} state={attrs['state']} "
            f"exit={exit_code.get('status')}:{exit_code.get('return_code')} nodes={job.get('nodes')}",
            path=path,
            attrs=attrs,
        )
    ]
    steps = job.get("steps") or []
    for i, step in enumerate(steps if isinstance(steps, list) else []):
        one = _within(f"step {i}", problems, lambda step=step: _sacct_step(step, attrs, path, connector, problems))
        if one is not None:
            obs.append(one)
    facts = {
        "slurm_release": release,
        "problems": problems,
        **{k: attrs[k] for k in ("state", "nodes", "start", "end", "exit_code")},
    }
    return obs, facts


def _sacct_job(job: dict[str, Any], release: str, problems: list[str]) -> dict[str, Any]:
    """A job record's attributes, as rules read them (records.attrs)."""
    t = job.get("time") or {}
    return {
        "job_id": str(job.get("job_id")),
        "name": job.get("name"),
        "state": _state(job.get("state")),
        "reason": (job.get("state") or {}).get("reason") if isinstance(job.get("state"), dict) else None,
        "exit_code": _exit(job.get("exit_code")),
        "nodes": expand_hostlist(job.get("nodes")),
        "cluster": job.get("cluster"),
        "start": _epoch(t.get("start"), problems, "job time.start"),
        "end": _epoch(t.get("end"), problems, "job time.end"),
        "restarts": job.get("restart_cnt"),
        "slurm_release": release,
        "requeue": (job.get("flags") or []),
        **state_table("slurm").read([Fact(STATE, _state(job.get("state")))]).attrs(),
    }


def _sacct_step(step: Any, attrs: dict[str, Any], path: str, connector: str, problems: list[str]) -> Observation:
    if not isinstance(step, dict):
        raise TypeError(f"a step is an object, not {type(step).__name__}")
    st = step.get("step") or {}
    step_id = st.get("id") if not isinstance(st.get("id"), dict) else st["id"].get("step_id")
    snodes = (step.get("nodes") or {}).get("list") or expand_hostlist((step.get("nodes") or {}).get("range"))
    stime = step.get("time") or {}
    sattrs = {
        "job_id": attrs["job_id"],
        "step_id": str(step_id),
        "name": st.get("name"),
        "state": _state(step.get("state")),
        "exit_code": _exit(step.get("exit_code")),
        "nodes": snodes,
        "start": _epoch(stime.get("start"), problems, f"step {step_id} time.start"),
        "end": _epoch(stime.get("end"), problems, f"step {step_id} time.end"),
    }
    return Observation(
        source="sacct",
        connector=connector,
        kind="sacct_step",
        time=sattrs["end"] or sattrs["start"],
        text=f"step {attrs['job_id']}.{sattrs['step_id']} ({sattrs['name']}) state={sattrs['state']}",
        path=path,
        attrs=sattrs,
    )


def latest_record(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    def submitted(j: dict[str, Any]) -> float:
        t = j.get("time") or {}
        for key in ("submission", "eligible", "start"):
            when = _epoch(t.get(key))
            if when:
                return when.timestamp()
        return 0.0

    return max(jobs, key=submitted)


def _items(doc: Any, what: str) -> list[dict[str, Any]]:
    if not isinstance(doc, dict):
        raise RecordError(f"{what}: not a JSON object")
    if "items" in doc:
        if not isinstance(doc["items"], list):
            raise RecordError(f"{what}: 'items' is not a list")
        return [i for i in doc["items"] if isinstance(i, dict)]
    return [doc]


def _k8s_time(value: Any, problems: list[str] | None = None) -> datetime | None:
    """An RFC 3339 time; one outside 1970..2200 (year 10000 in UTC) is no time, counted."""
    if not isinstance(value, str) or not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if t.tzinfo is None:
            t = t.replace(tzinfo=timezone.utc)
        t = t.astimezone(timezone.utc)
    except (ValueError, OverflowError):
        t = None
    if t is None or not EARLIEST <= t < LATEST:
        if problems is not None:
            problems.append(f"time {value[:40]!r}: not an RFC 3339 time within {EARLIEST.year}..{LATEST.year}")
        return None
    return t


def _records(items: list[dict[str, Any]], what: str, problems: list[str] | None, read: Any) -> list[Observation]:
    """Each item read on its own (read(item) -> observations): a bad item costs that item."""
    out: list[Observation] = []
    for i, item in enumerate(items):
        got = _within(f"{what} item {i}", problems, lambda item=item: read(item))
        out.extend(got or [])
    return out


def workload_observations(
    doc: Any, path: str, connector: str = "bundle", problems: list[str] | None = None
) -> list[Observation]:
    def read(wl: dict[str, Any]) -> list[Observation]:
        name = (wl.get("metadata") or {}).get("name")
        return [
            Observation(
                source="kueue",
                connector=connector,
                kind="workload_condition",
                time=_k8s_time(c.get("lastTransitionTime"), problems),
                text=f"Workload {name} {c.get('type')}={c.get('status')} reason={c.get('reason')}: "
                f"{c.get('message') or ''}",
                path=path,
                attrs={
                    "workload": name,
                    **{k: c.get(k) for k in ("type", "status", "reason", "message")},
                    **_ending(c),
                },
            )
            for c in (wl.get("status") or {}).get("conditions") or []
        ]

    return _records(_items(doc, "workload"), path, problems, read)


def _ending(condition: dict[str, Any]) -> dict[str, Any]:
    """What a Workload's Finished condition means by itself (kueue_states.csv `Finished:<reason>`)."""
    if condition.get("type") != "Finished" or condition.get("status") != "True":
        return {}
    return state_table("kueue").read([Fact(STATE, f"Finished:{condition.get('reason')}")]).attrs()


def pod_observations(
    doc: Any, path: str, connector: str = "bundle", problems: list[str] | None = None
) -> list[Observation]:
    def read(pod: dict[str, Any]) -> list[Observation]:
        obs = []
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName")
        for cs in status.get("containerStatuses") or []:
            term = ((cs.get("state") or {}).get("terminated")) or ((cs.get("lastState") or {}).get("terminated"))
            if not term:
                continue
            obs.append(
                Observation(
                    source="kueue",
                    connector=connector,
                    kind="pod_terminated",
                    node=node,
                    time=_k8s_time(term.get("finishedAt"), problems),
                    text=f"pod {meta.get('name')} container {cs.get('name')} terminated reason={term.get('reason')} "
                    f"exitCode={term.get('exitCode')}{_pod_status_said(status)}",
                    path=path,
                    attrs={
                        "pod": meta.get("name"),
                        "container": cs.get("name"),
                        "reason": term.get("reason"),
                        "exit_code": term.get("exitCode"),
                        "phase": status.get("phase"),
                        "pod_reason": status.get("reason"),
                    },
                )
            )
        if (status.get("reason") or status.get("message")) and not any(o.kind == "pod_terminated" for o in obs):
            # no container ended, yet the pod's status says why it did (the kubelet's "Terminated:
            # Pod was terminated in response to imminent node shutdown" on a pod still Running)
            obs.append(
                Observation(
                    source="kueue",
                    connector=connector,
                    kind="pod_status",
                    node=node,
                    time=None,  # a status tells no time of its own (startTime is the pod's start)
                    text=f"pod {meta.get('name')} phase={status.get('phase')}{_pod_status_said(status)}",
                    path=path,
                    attrs={
                        "pod": meta.get("name"),
                        "phase": status.get("phase"),
                        "pod_reason": status.get("reason"),
                        "message": status.get("message"),
                    },
                )
            )
        for c in status.get("conditions") or []:
            if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
                obs.append(
                    Observation(
                        source="kueue",
                        connector=connector,
                        kind="pod_disruption",
                        node=node,
                        time=_k8s_time(c.get("lastTransitionTime"), problems),
                        text=f"pod {meta.get('name')} DisruptionTarget reason={c.get('reason')}: "
                        f"{c.get('message') or ''}",
                        path=path,
                        attrs={"pod": meta.get("name"), "reason": c.get("reason"), "message": c.get("message")},
                    )
                )
        return obs

    return _records(_items(doc, "pods"), path, problems, read)


def _pod_status_said(status: dict[str, Any]) -> str:
    """What the pod's own status says of its end (the kubelet's `Shutdown: Node is shutting,
    evicting pods`), so the catalogs read it with the container's end."""
    reason, message = status.get("reason"), status.get("message")
    if not reason and not message:
        return ""
    return f"; pod status reason={reason}: {message or ''}"


def event_observations(
    doc: Any, path: str, connector: str = "bundle", problems: list[str] | None = None
) -> list[Observation]:
    def read(ev: dict[str, Any]) -> list[Observation]:
        io = ev.get("involvedObject") or ev.get("regarding") or {}
        when = ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp")
        return [
            Observation(
                source="kueue",
                connector=connector,
                kind="k8s_event",
                node=io.get("name") if io.get("kind") == "Node" else None,
                time=_k8s_time(when, problems),
                text=f"{ev.get('type')} {ev.get('reason')} {io.get('kind')}/{io.get('name')}: "
                f"{ev.get('message') or ''}",
                path=path,
                attrs={
                    "type": ev.get("type"),
                    "reason": ev.get("reason"),
                    "kind": io.get("kind"),
                    "name": io.get("name"),
                    "message": ev.get("message"),
                },
            )
        ]

    return _records(_items(doc, "events"), path, problems, read)


def node_observations(
    doc: Any, path: str, connector: str = "bundle", problems: list[str] | None = None
) -> list[Observation]:
    def read(node: dict[str, Any]) -> list[Observation]:
        name = (node.get("metadata") or {}).get("name")
        return [
            Observation(
                source="kueue",
                connector=connector,
                kind="node_condition",
                node=name,
                time=_k8s_time(c.get("lastTransitionTime"), problems),
                text=f"node {name} {c.get('type')}={c.get('status')} reason={c.get('reason')}: "
                f"{c.get('message') or ''}",
                path=path,
                attrs={k: c.get(k) for k in ("type", "status", "reason", "message")},
            )
            for c in (node.get("status") or {}).get("conditions") or []
        ]

    return _records(_items(doc, "nodes"), path, problems, read)


# ------------------------------------------------------------- any other scheduler's record


def job_observation(scheduler: str, job: dict[str, Any], reading: Reading, path: str, connector: str) -> Observation:
    """A scheduler's record of the job as one observation (kind scheduler_job, source
    scheduler_record): `job` holds job_id, name, state, exit_code, reason, nodes, start, end,
    attempt (and what else the scheduler says); the reading says what it means."""
    attrs = {"scheduler": scheduler, **job, **reading.attrs()}
    return Observation(
        source=Source.scheduler_record,
        connector=connector,
        kind=SCHEDULER_JOB,
        time=job.get("end") or job.get("start"),
        text=f"job {job.get('job_id')} state={job.get('state')} exit={job.get('exit_code')}"
        + (f" reason={job['reason']}" if job.get("reason") else ""),
        path=path,
        attrs=attrs,
    )


def event_observation(
    time: datetime | None, text: str, path: str, connector: str, line: int | None = None, **attrs: Any
) -> Observation:
    """One entry of the job's history as the scheduler recorded it (kind scheduler_event, source
    scheduler_record): a tracejob line, a bhist event, an eventlog entry."""
    return Observation(
        source=Source.scheduler_record,
        connector=connector,
        kind=SCHEDULER_EVENT,
        time=time,
        text=text,
        path=path,
        line=line,
        attrs=attrs,
    )


def load_json(text: str, name: str) -> Any:
    """A scheduler's JSON document, or RecordError naming the file and where it breaks."""
    try:
        return json.loads(text, parse_int=lambda t: int(t) if len(t) < 1000 else float(t))
    except RecursionError:
        raise RecordError(f"{name}: nested too deeply to read") from None
    except json.JSONDecodeError as exc:
        raise RecordError(f"{name}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
