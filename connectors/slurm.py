"""Slurm connector: scope a job attempt and collect its scheduler record.

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
import subprocess
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from pydantic import Field

from workload_attribution.connectors import scheduler_records as sr
from workload_attribution.connectors.http import http_get
from workload_attribution.connectors.registry import CollectContext, Collected, SourceConfig, register
from workload_attribution.contracts.errors import BadInput, SourceError, TransientSourceError, first_line
from workload_attribution.contracts.hostlist import expand_hostlist
from workload_attribution.contracts.identity import SLURM_JOB_ID
from workload_attribution.contracts.models import AttemptScope, Coverage, CoverageStatus
from workload_attribution.staging.database import connected
from workload_attribution.staging.observations import insert_observations

if TYPE_CHECKING:  # at run time httpx is imported where a request is made: the offline path never pays for it
    import httpx

CONNECTOR = "slurm"
KNOWN_VERSIONS = ["v0.0.41", "v0.0.40", "v0.0.39", "v0.0.38"]
FAILED_STATES = ["FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED", "PREEMPTED", "BOOT_FAIL", "DEADLINE"]


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
    try:
        # TZ=UTC: the times given (-S/-E) are UTC wall clock, whatever this host's zone
        out = subprocess.run(
            [src.sacct, *args], capture_output=True, text=True, timeout=src.timeout_s, env={**os.environ, "TZ": "UTC"}
        )
    except subprocess.TimeoutExpired:
        raise TransientSourceError(f"sacct did not answer within {src.timeout_s:g}s", "timeout") from None
    except FileNotFoundError:
        raise SlurmError(f"{src.sacct}: not installed", connector=CONNECTOR) from None
    if out.returncode != 0:
        msg = (out.stderr or out.stdout).strip().splitlines()
        raise (TransientSourceError if "Connection refused" in (out.stderr or "") else SlurmError)(
            f"sacct failed: {msg[0] if msg else out.returncode}"
        )
    return out.stdout


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
    accounting still shows running is not yet recorded, so the caller retries instead of scoping a
    half-known attempt."""
    doc, exit_code = job_document(src, job_id, transport)
    if isinstance(doc, dict) and not [j for j in doc.get("jobs") or [] if str(j.get("job_id")) == str(job_id)]:
        raise NotYetRecorded(f"job {job_id} is not in Slurm accounting (yet)")
    job_rec = sr.latest_record([j for j in doc["jobs"] if str(j.get("job_id")) == str(job_id)])
    if require_ended and sr._state(job_rec.get("state")).split()[0] in ("RUNNING", "PENDING", "COMPLETING", "REQUEUED"):
        raise NotYetRecorded(
            f"job {job_id} has not ended in Slurm accounting yet (state {sr._state(job_rec.get('state'))})"
        )
    obs, facts = sr.sacct_observations(doc, job_id, "slurm", CONNECTOR)
    # Right after a job ends, its accounting record can list only the nodes still completing while
    # its steps' records name the whole allocation (seen with Slurm 22.05 a second after the end):
    # a completion trigger waits for the record to settle; the steps' nodes belong to the attempt anyway.
    step_nodes = sorted({n for o in obs if o.kind == "sacct_step" for n in o.attrs.get("nodes") or []})
    outside = sorted(set(step_nodes) - set(facts.get("nodes") or []))
    if outside and require_ended:
        raise NotYetRecorded(
            f"job {job_id}: accounting lists nodes {facts.get('nodes')} but its steps ran on "
            f"{outside} too (record not settled yet)"
        )
    if outside:
        facts["nodes"] = sorted(set(facts.get("nodes") or []) | set(outside))
    if not facts.get("nodes"):
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


@register(CONNECTOR, SlurmSource, kind="scheduler")
def collect(ctx: CollectContext[SlurmSource]) -> Collected:
    """The job's accounting record (source `sacct`)."""
    started = time.monotonic()
    src, scope, transport = ctx.config, ctx.scope, ctx.transport
    try:
        doc, exit_code = job_document(src, scope.job_id, transport)
        if (
            isinstance(doc, dict)
            and isinstance(doc.get("jobs"), list)
            and not [j for j in doc["jobs"] if isinstance(j, dict) and str(j.get("job_id")) == str(scope.job_id)]
        ):
            return Collected(
                Coverage(
                    source=ctx.source,
                    connector=CONNECTOR,
                    status=CoverageStatus.empty,
                    error=f"job {scope.job_id} is not in Slurm accounting",
                    duration_ms=int((time.monotonic() - started) * 1000),
                )
            )
        obs, facts = sr.sacct_observations(doc, scope.job_id, f"slurm:{'rest' if src.rest_url else 'sacct'}", CONNECTOR)
    except (SlurmError, NotASlurmJob, sr.RecordError, json.JSONDecodeError) as exc:
        return Collected(
            Coverage(
                source=ctx.source,
                connector=CONNECTOR,
                status=CoverageStatus.error,
                error=first_line(exc),
                duration_ms=int((time.monotonic() - started) * 1000),
            )
        )
    for o in obs:
        if o.kind == "sacct_job" and exit_code:
            rc, _, sig = exit_code.partition(":")
            o.attrs["exit_code_parsed"] = o.attrs.get("exit_code")
            o.attrs["exit_code"] = {"status": "RAW", "return_code": int(rc or 0), "signal": int(sig or 0)}
            o.attrs["exit_code_text"] = exit_code
    with connected(ctx.staging) as con:
        insert_observations(con, obs)
    return Collected(
        Coverage(
            source=ctx.source,
            connector=CONNECTOR,
            status=CoverageStatus.ok,
            observations=len(obs),
            nodes=facts.get("nodes") or [],
            duration_ms=int((time.monotonic() - started) * 1000),
            details={
                "slurm_release": facts.get("slurm_release"),
                "exit_code": exit_code,
                "via": "slurmrestd" if src.rest_url else "sacct",
            },
        )
    )


def discover_failed(
    src: SlurmSource, start: datetime, end: datetime, transport: httpx.BaseTransport | None = None
) -> list[dict[str, Any]]:
    """Attempts that ended in a failure state inside [start, end): for backfills."""
    if src.rest_url:
        doc = Rest(src, transport).db_jobs(start, end)
    else:
        doc = json.loads(
            _run(
                src,
                [
                    "--json",
                    "-X",
                    "-S",
                    _slurm_time(start),
                    "-E",
                    _slurm_time(end),
                    "--state",
                    ",".join(FAILED_STATES),
                ],
            )
        )
    out = []
    for job in doc.get("jobs") or []:
        state = sr._state(job.get("state"))
        ended = sr._epoch((job.get("time") or {}).get("end"))
        if state.split()[0] in FAILED_STATES and ended and start <= ended < end:
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
