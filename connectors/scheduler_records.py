"""Scheduler documents -> record observations (Slurm sacct/slurmdb JSON, Kueue/Kubernetes objects).

These documents are small and nested; Python reads them into records that SQL rules query
(`records.kind`, `records.attrs`). The scheduler's own record is evidence like any log line.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from workload_attribution.contracts.errors import SourceError
from workload_attribution.contracts.hostlist import expand_hostlist
from workload_attribution.contracts.models import Observation


class RecordError(SourceError):
    """The document is not what it claims to be (wrong shape, another job)."""


def _epoch(value: Any) -> datetime | None:
    if isinstance(value, dict):  # slurm >= 23.02 wraps numbers: {"set": true, "number": N}
        value = value.get("number") if value.get("set", True) else None
    if isinstance(value, (int, float)) and value > 0:
        return datetime.fromtimestamp(value, tz=timezone.utc)
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
    return str(value or "UNKNOWN")


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
    jobs = [latest_record(jobs)]
    obs: list[Observation] = []
    facts: dict[str, Any] = {"slurm_release": release}
    for job in jobs:
        t = job.get("time") or {}
        state = _state(job.get("state"))
        exit_code = _exit(job.get("exit_code"))
        nodes = expand_hostlist(job.get("nodes"))
        attrs = {
            "job_id": str(job.get("job_id")),
            "name": job.get("name"),
            "state": state,
            "reason": (job.get("state") or {}).get("reason") if isinstance(job.get("state"), dict) else None,
            "exit_code": exit_code,
            "nodes": nodes,
            "cluster": job.get("cluster"),
            "start": _epoch(t.get("start")),
            "end": _epoch(t.get("end")),
            "restarts": job.get("restart_cnt"),
            "slurm_release": release,
            "requeue": (job.get("flags") or []),
        }
        obs.append(
            Observation(
                source="sacct",
                connector=connector,
                kind="sacct_job",
                time=attrs["end"] or attrs["start"],
                text=f"job {attrs['job_id']} state={state} "
                f"exit={exit_code.get('status')}:{exit_code.get('return_code')} nodes={job.get('nodes')}",
                path=path,
                attrs=attrs,
            )
        )
        facts.update(state=state, nodes=nodes, start=attrs["start"], end=attrs["end"], exit_code=exit_code)
        for step in job.get("steps") or []:
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
                "start": _epoch(stime.get("start")),
                "end": _epoch(stime.get("end")),
            }
            obs.append(
                Observation(
                    source="sacct",
                    connector=connector,
                    kind="sacct_step",
                    time=sattrs["end"] or sattrs["start"],
                    text=f"step {attrs['job_id']}.{sattrs['step_id']} ({sattrs['name']}) state={sattrs['state']}",
                    path=path,
                    attrs=sattrs,
                )
            )
    return obs, facts


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


def _k8s_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def workload_observations(doc: Any, path: str, connector: str = "bundle") -> list[Observation]:
    obs = []
    for wl in _items(doc, "workload"):
        name = (wl.get("metadata") or {}).get("name")
        for c in (wl.get("status") or {}).get("conditions") or []:
            obs.append(
                Observation(
                    source="kueue",
                    connector=connector,
                    kind="workload_condition",
                    time=_k8s_time(c.get("lastTransitionTime")),
                    text=f"Workload {name} {c.get('type')}={c.get('status')} reason={c.get('reason')}: "
                    f"{c.get('message') or ''}",
                    path=path,
                    attrs={"workload": name, **{k: c.get(k) for k in ("type", "status", "reason", "message")}},
                )
            )
    return obs


def pod_observations(doc: Any, path: str, connector: str = "bundle") -> list[Observation]:
    obs = []
    for pod in _items(doc, "pods"):
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
                    time=_k8s_time(term.get("finishedAt")),
                    text=f"pod {meta.get('name')} container {cs.get('name')} terminated reason={term.get('reason')} "
                    f"exitCode={term.get('exitCode')}",
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
        for c in status.get("conditions") or []:
            if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
                obs.append(
                    Observation(
                        source="kueue",
                        connector=connector,
                        kind="pod_disruption",
                        node=node,
                        time=_k8s_time(c.get("lastTransitionTime")),
                        text=f"pod {meta.get('name')} DisruptionTarget reason={c.get('reason')}: "
                        f"{c.get('message') or ''}",
                        path=path,
                        attrs={"pod": meta.get("name"), "reason": c.get("reason"), "message": c.get("message")},
                    )
                )
    return obs


def event_observations(doc: Any, path: str, connector: str = "bundle") -> list[Observation]:
    obs = []
    for ev in _items(doc, "events"):
        io = ev.get("involvedObject") or ev.get("regarding") or {}
        when = ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp")
        obs.append(
            Observation(
                source="kueue",
                connector=connector,
                kind="k8s_event",
                node=io.get("name") if io.get("kind") == "Node" else None,
                time=_k8s_time(when),
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
        )
    return obs


def node_observations(doc: Any, path: str, connector: str = "bundle") -> list[Observation]:
    obs = []
    for node in _items(doc, "nodes"):
        name = (node.get("metadata") or {}).get("name")
        for c in (node.get("status") or {}).get("conditions") or []:
            obs.append(
                Observation(
                    source="kueue",
                    connector=connector,
                    kind="node_condition",
                    node=name,
                    time=_k8s_time(c.get("lastTransitionTime")),
                    text=f"node {name} {c.get('type')}={c.get('status')} reason={c.get('reason')}: "
                    f"{c.get('message') or ''}",
                    path=path,
                    attrs={k: c.get(k) for k in ("type", "status", "reason", "message")},
                )
            )
    return obs
