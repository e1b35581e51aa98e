"""Slurm: scope a job attempt, collect its scheduler record, find the attempts that failed, read
the completion notice of deployments/slurm/attribution-hook. Its states: data/slurm_states.csv.

Two ways in, the same answer: slurmrestd (JWT; the API version is negotiated from what the
server's /openapi offers) or the CLI (`sacct --json`, `sacct -P`) with a subprocess deadline.
Slurm 22.05's data parser reports exit codes of failed jobs as SUCCESS in `sacct --json` and
/slurmdb/...; the raw wait status comes from /slurm/<v>/job/<id> (while slurmctld still holds the
job) or from `sacct -P` text, and replaces the parsed one.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from workload_attribution.connectors import scheduler_records as sr
from workload_attribution.connectors.commands import run_tool
from workload_attribution.connectors.coverage import Cover, Tally
from workload_attribution.connectors.http import http_get, tls
from workload_attribution.connectors.registry import CollectContext, Collected, SourceConfig, register
from workload_attribution.connectors.schedulers import (
    BundleRecord,
    JobRecord,
    Notice,
    Scheduler,
    Webhook,
    register_scheduler,
    state_table,
    warn_unknown,
)
from workload_attribution.contracts.errors import BadInput, SourceError, TransientSourceError, first_line
from workload_attribution.contracts.hostlist import expand_hostlist
from workload_attribution.contracts.identity import NAME_PATTERN, AttemptId, EndedAttempt, Target
from workload_attribution.contracts.models import AttemptScope, CoverageStatus, Details, Observation
from workload_attribution.contracts.vocabulary import Source
from workload_attribution.staging.database import connected
from workload_attribution.staging.observations import insert_observations

if TYPE_CHECKING:  # at run time httpx is imported where a request is made: the offline path never pays for it
    import httpx

CONNECTOR = "slurm"
SLURM_DOWN = re.compile(r"Connection refused")  # slurmdbd/slurmctld not reachable: retried
KNOWN_VERSIONS = ["v0.0.41", "v0.0.40", "v0.0.39", "v0.0.38"]
STATES = state_table("slurm")
# A Slurm job id: digits, optionally _array or +het (ASCII only: \d takes digits of any script).
SLURM_JOB_ID = re.compile(r"[0-9]{1,12}(?:_[0-9]{1,9})?(?:\+[0-9]{1,6})?")


class SlurmError(SourceError):
    """Slurm answered, but not with the job: a refusal, an error, or a record that is not usable."""


class NotASlurmJob(BadInput):
    """A job id Slurm could never have given."""


class NotYetRecorded(TransientSourceError):
    """The job is not in accounting (yet): slurmdbd records a job a little after slurmctld ends it,
    so a trigger fired at completion may ask too early. Retried; after the retries, reported."""


class SlurmSource(SourceConfig):
    rest_url: str | None = Field(default=None, description="slurmrestd URL; without it the CLI is used")
    user: str = "root"
    token_env: str = Field("SLURMRESTD_TOKEN", description="env var holding the JWT (never SLURM_JWT)")
    timeout_s: float = Field(15.0, gt=0)
    sacct: str = "sacct"

    def probe(self) -> tuple[str, str, dict[str, str]]:
        if not self.rest_url:
            return "command", self.sacct, {}
        return (
            "http",
            self.rest_url.rstrip("/") + "/openapi",
            {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": os.environ.get(self.token_env, "")},
        )


def _job_id_ok(job_id: str) -> str:
    if not SLURM_JOB_ID.fullmatch(str(job_id)):  # ASCII digits only
        raise NotASlurmJob(f"not a Slurm job id: {job_id!r}")
    return str(job_id)


def check_job_id(job_id: str) -> str:
    """A job id in the form Slurm writes it, or ValueError naming the form."""
    if not SLURM_JOB_ID.fullmatch(job_id):
        raise ValueError(f"not a Slurm job id: {job_id!r} (digits, optionally _array or +het)")
    return job_id


class Rest:
    def __init__(self, src: SlurmSource, transport: httpx.BaseTransport | None = None):
        token = os.environ.get(src.token_env, "")
        self.token_env = src.token_env
        import httpx

        self.client = httpx.Client(
            base_url=(src.rest_url or "").rstrip("/"),
            transport=transport,
            timeout=httpx.Timeout(src.timeout_s, connect=min(5.0, src.timeout_s)),
            headers={"X-SLURM-USER-NAME": src.user, "X-SLURM-USER-TOKEN": token},
            verify=tls(),
        )
        self.version = self._negotiate()

    def _get(self, path: str, params: dict | None = None) -> Any:
        r = http_get(self.client, path, "slurmrestd", params)
        if r.status_code == 401:
            raise SlurmError(f"slurmrestd: HTTP 401 for {path}: authentication failed (token from ${self.token_env})")
        try:
            body = r.json()
        except ValueError:
            raise SlurmError(f"slurmrestd: HTTP {r.status_code} for {path}: body is not JSON") from None
        if not isinstance(body, dict):
            raise SlurmError(
                f"slurmrestd: HTTP {r.status_code} for {path}: unexpected answer "
                f"(a JSON {type(body).__name__}, not an object)"
            )
        errors = [e for e in body.get("errors") or [] if isinstance(e, dict)]
        if r.status_code >= 400 or errors:
            msg = "; ".join(str(e.get("error") or e.get("description") or e) for e in errors) or r.text[:200]
            raise SlurmError(f"slurmrestd: HTTP {r.status_code} for {path}: {msg}")
        return body

    def get(self, path: str, params: dict | None = None) -> Any:
        """A GET of the API, its JSON object (errors as SlurmError, transport failures transient)."""
        return self._get(path, params)

    def offers(self, method: str, path: str) -> bool:
        """Whether the server's OpenAPI document offers `method` on `path` (`{v}`: the version in use)."""
        ops = self.paths.get(path.replace("{v}", self.version))
        return isinstance(ops, dict) and method.lower() in ops

    def _negotiate(self) -> str:
        spec = self._get("/openapi")
        self.paths: dict[str, Any] = spec.get("paths") or {}
        offered = {m.group(1) for p in self.paths for m in [re.match(r"^/slurm/(v[\d.]+)/", p)] if m}
        for v in KNOWN_VERSIONS:
            if v in offered:
                return v
        raise SlurmError(f"slurmrestd offers no API version this connector knows ({sorted(offered)})")

    def db_job(self, job_id: str) -> dict:
        return self._get(f"/slurmdb/{self.version}/job/{job_id}")

    def ctl_job(self, job_id: str) -> dict | None:
        try:
            body = self._get(f"/slurm/{self.version}/job/{job_id}")
        except SlurmError:
            return None  # aged out of slurmctld (MinJobAge): accounting still has it
        jobs = body.get("jobs") or []
        return jobs[0] if jobs else None

    def db_jobs(self, start: datetime, end: datetime) -> dict:
        return self._get(
            # ISO times: slurmrestd 22.05 refuses Unix seconds here ("Invalid time specification")
            f"/slurmdb/{self.version}/jobs",
            {"start_time": _slurm_time(start), "end_time": _slurm_time(end)},
        )


def _slurm_time(t: datetime) -> str:
    """A time as Slurm reads it (sacct -S, slurmrestd ?start_time=): wall clock, read in the reader's
    zone; sacct runs here with TZ=UTC, slurmrestd hosts keep UTC (deployments/README.md)."""
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def _run(src: SlurmSource, args: list[str]) -> str:
    """sacct's output; -S/-E are read as UTC wall clock (run in UTC, whatever this host's zone)."""
    return run_tool(
        [src.sacct, *args], timeout_s=src.timeout_s, error=SlurmError, connector=CONNECTOR, transient=SLURM_DOWN
    )


def _raw_exit_cli(src: SlurmSource, job_id: str) -> str | None:
    text = _run(src, ["-P", "-n", "-X", "-j", job_id, "-o", "ExitCode"])
    line = text.strip().splitlines()
    return line[0].strip() if line else None


def job_document(
    src: SlurmSource, job_id: str, transport: httpx.BaseTransport | None = None
) -> tuple[dict, str | None]:
    """The job's accounting record (sacct --json shape) and its true exit code 'rc:signal'."""
    job_id = _job_id_ok(job_id)
    if src.rest_url:
        rest = Rest(src, transport)
        doc = rest.db_job(job_id)
        ctl = rest.ctl_job(job_id)
        raw = ctl.get("exit_code") if ctl else None
        exit_code = f"{raw >> 8}:{raw & 0x7F}" if isinstance(raw, int) else _try_cli_exit(src, job_id)
        return doc, exit_code
    doc = json.loads(_run(src, ["--json", "-j", job_id]))
    return doc, _raw_exit_cli(src, job_id)


def _try_cli_exit(src: SlurmSource, job_id: str) -> str | None:
    try:
        return _raw_exit_cli(src, job_id)
    except (SlurmError, TransientSourceError):
        return None


def scope_job(
    src: SlurmSource,
    cluster: str,
    job_id: str,
    transport: httpx.BaseTransport | None = None,
    require_ended: bool = False,
) -> AttemptScope:
    """The attempt's scope from accounting. `require_ended` (set by completion triggers): a job that
    accounting does not show ended yet (slurm_states.csv) is not yet recorded, so the caller retries
    instead of scoping a half-known attempt."""
    doc, exit_code = job_document(src, job_id, transport)
    if isinstance(doc, dict) and not [j for j in doc.get("jobs") or [] if str(j.get("job_id")) == str(job_id)]:
        raise NotYetRecorded(f"job {job_id} is not in Slurm accounting (yet)")
    job_rec = sr.latest_record([j for j in doc["jobs"] if str(j.get("job_id")) == str(job_id)])
    if require_ended and not STATES.ended(sr._state(job_rec.get("state"))):
        raise NotYetRecorded(
            f"job {job_id} has not ended in Slurm accounting yet (state {sr._state(job_rec.get('state'))})"
        )
    obs, facts = sr.sacct_observations(doc, job_id, "slurm", CONNECTOR)
    facts["nodes"] = _allocated(job_id, obs, facts.get("nodes") or [], require_ended)
    if not facts["nodes"]:
        raise SlurmError(f"job {job_id} never ran on a node (state {facts.get('state')})")
    job = next(o for o in obs if o.kind == "sacct_job").attrs
    end = facts.get("end") or datetime.now(timezone.utc)
    return AttemptScope(
        cluster=cluster,
        scheduler="slurm",
        job_id=str(job_id),
        attempt=int(job.get("restarts") or 0),
        name=job.get("name"),
        nodes=facts["nodes"],
        start=facts.get("start") or end,
        end=end,
        state=facts["state"],
        exit_code=exit_code,
    )


def _allocated(job_id: str, obs: list[Observation], nodes: list[str], require_ended: bool) -> list[str]:
    """The job's nodes with its steps'. Right after a job ends, its accounting record can list only
    the nodes still completing while its steps' records name the whole allocation (seen with Slurm
    22.05 a second after the end): a completion trigger waits for the record to settle; the steps'
    nodes belong to the attempt anyway."""
    step_nodes = sorted({n for o in obs if o.kind == "sacct_step" for n in o.attrs.get("nodes") or []})
    outside = sorted(set(step_nodes) - set(nodes))
    if outside and require_ended:
        raise NotYetRecorded(
            f"job {job_id}: accounting lists nodes {nodes} but its steps ran on {outside} too (record not settled yet)"
        )
    return sorted(set(nodes) | set(outside)) if outside else nodes


class SlurmDetails(Details):
    slurm_release: str | None
    exit_code: str | None
    via: Literal["slurmrestd", "sacct"]


def _in_accounting(doc: Any, job_id: str) -> bool:
    """False only for a well-formed answer without the job (an empty answer, not a broken one)."""
    if not (isinstance(doc, dict) and isinstance(doc.get("jobs"), list)):
        return True
    return any(isinstance(j, dict) and str(j.get("job_id")) == str(job_id) for j in doc["jobs"])


def _raw_exit(obs: list[Observation], exit_code: str | None) -> None:
    """The true exit code ('rc:signal', from the raw wait status) replaces the one sacct --json parsed."""
    for o in obs:
        if o.kind == "sacct_job" and exit_code:
            rc, _, sig = exit_code.partition(":")
            o.attrs["exit_code_parsed"] = o.attrs.get("exit_code")
            o.attrs["exit_code"] = {"status": "RAW", "return_code": int(rc or 0), "signal": int(sig or 0)}
            o.attrs["exit_code_text"] = exit_code


@register(CONNECTOR, SlurmSource, kind="scheduler")
def collect(ctx: CollectContext[SlurmSource]) -> Collected:
    """The job's accounting record (source `sacct`)."""
    cover = Cover(ctx.source, CONNECTOR)
    src, scope = ctx.config, ctx.scope
    try:
        doc, exit_code = job_document(src, scope.job_id, ctx.transport)
        if not _in_accounting(doc, scope.job_id):
            return cover.outcome(CoverageStatus.empty, f"job {scope.job_id} is not in Slurm accounting")
        obs, facts = sr.sacct_observations(doc, scope.job_id, f"slurm:{'rest' if src.rest_url else 'sacct'}", CONNECTOR)
    except (SlurmError, NotASlurmJob, sr.RecordError, json.JSONDecodeError) as exc:
        return cover.outcome(CoverageStatus.error, first_line(exc))
    _raw_exit(obs, exit_code)
    with connected(ctx.staging) as con:
        insert_observations(con, obs)
    via: Literal["slurmrestd", "sacct"] = "slurmrestd" if src.rest_url else "sacct"
    return cover.judged(
        Tally(observations=len(obs)),
        nodes=facts.get("nodes") or [],
        details=SlurmDetails(slurm_release=facts.get("slurm_release"), exit_code=exit_code, via=via),
    )


def discover_failed(
    src: SlurmSource, start: datetime, end: datetime, transport: httpx.BaseTransport | None = None
) -> list[dict[str, Any]]:
    """Attempts that ended in a failure state (slurm_states.csv) inside [start, end): for backfills."""
    if src.rest_url:
        doc = Rest(src, transport).db_jobs(start, end)
    else:
        window = ["-S", _slurm_time(start), "-E", _slurm_time(end)]
        doc = json.loads(_run(src, ["--json", "-X", *window, "--state", ",".join(STATES.failure_states())]))
    out = []
    for job in doc.get("jobs") or []:
        state = sr._state(job.get("state"))
        warn_unknown(STATES, state, f"job {job.get('job_id')} in Slurm accounting")
        ended = sr._epoch((job.get("time") or {}).get("end"))
        if STATES.failed(state) and ended and start <= ended < end:
            out.append(
                {
                    "job_id": str(job.get("job_id")),
                    "state": state,
                    "end": ended,
                    "nodes": expand_hostlist(job.get("nodes")),
                    "restarts": job.get("restart_cnt") or 0,
                }
            )
    return sorted(out, key=lambda j: j["end"])


# ------------------------------------------------------------------------------ as a scheduler


def scope(src: SlurmSource, target: Target) -> AttemptScope:
    return scope_job(src, target.cluster or "", target.job_id or "", require_ended=target.trigger == "completion")


def discover(src: SlurmSource, cluster: str, since: datetime, until: datetime) -> list[EndedAttempt]:
    return [
        EndedAttempt.recorded(
            AttemptId(cluster=cluster, scheduler="slurm", job_id=j["job_id"], attempt=int(j["restarts"] or 0)),
            j["end"],
        )
        for j in discover_failed(src, since, until)
    ]


def read_bundle(files: dict[str, str], scope: AttemptScope) -> JobRecord:
    """A bundle's scheduler/sacct.json: the job's record and its steps; the steps' nodes belong to
    the attempt too (a record read right after the end may list fewer)."""
    doc = sr.load_json(files["sacct.json"], "sacct.json")
    obs, facts = sr.sacct_observations(doc, scope.job_id, "scheduler/sacct.json")
    step_nodes = [n for o in obs if o.kind == "sacct_step" for n in o.attrs.get("nodes") or []]
    facts["nodes"] = list(dict.fromkeys([*(facts.get("nodes") or []), *step_nodes]))
    return JobRecord(obs, facts, facts.get("problems") or [])


class SlurmJobEvent(BaseModel):
    """What deployments/slurm/attribution-hook sends when a job ends (jobcomp/script)."""

    # its validator built when a notice first arrives: a process diagnosing a bundle never needs it
    model_config = ConfigDict(extra="forbid", str_max_length=4096, defer_build=True)

    cluster: str = Field(pattern=NAME_PATTERN)
    job_id: str = Field(pattern=f"^{SLURM_JOB_ID.pattern}$")
    state: str = Field(pattern=r"^[A-Z_]{3,32}(?: by \d{1,10})?$", description="JOBSTATE, e.g. FAILED, NODE_FAIL")
    attempt: int = Field(0, ge=0, le=100000, description="the job's restart count when known")
    nodes: str | None = Field(None, max_length=65536, description="Slurm hostlist expression")
    exit_code: str | None = Field(None, pattern=r"^-?\d{1,5}(?::-?\d{1,5})?$")
    start: datetime | None = None
    end: datetime | None = None
    partition: str | None = Field(None, pattern=NAME_PATTERN)
    user: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]{1,64}$")
    diagnose: bool = Field(False, description="diagnose even if the job completed")


def read_notice(event: SlurmJobEvent) -> Notice:
    attempt = AttemptId(cluster=event.cluster, scheduler="slurm", job_id=event.job_id, attempt=event.attempt)
    warn_unknown(STATES, event.state, f"job {event.job_id}'s completion notice")  # diagnosed: not completed
    return Notice(
        Target.completed(attempt), not STATES.completed(event.state), f"job {event.state}", asked=event.diagnose
    )


SLURM = register_scheduler(
    Scheduler(
        name="slurm",
        scope=scope,
        states=STATES,
        config=SlurmSource,
        records=(Source.sacct.value, CONNECTOR),
        bundle=BundleRecord(("sacct.json",), read_bundle),
        job_id=check_job_id,
        discover=discover,
        webhook=Webhook(
            "slurm",
            SlurmJobEvent,
            read_notice,
            "a Slurm job",
            "A Slurm job ended (sent by deployments/slurm/attribution-hook). Failed -> diagnosed.",
        ),
    )
)
