"""What the service's senders post: the schemas of the webhooks and requests, and how a body is read."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from workload_attribution.contracts.identity import K8S_NAME, K8S_NAMESPACE, NAME_PATTERN, SLURM_JOB_ID

SUCCESS_STATES = {"COMPLETED"}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_max_length=4096)


class SlurmJobEvent(Strict):
    """What deployments/slurm/attribution-hook sends when a job ends (jobcomp/script)."""

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


class WorkloadCondition(BaseModel):
    """One of a Workload's status.conditions, as Kubernetes writes it (other keys kept as they are)."""

    model_config = ConfigDict(extra="allow", str_max_length=4096)
    type: str = Field(max_length=316)
    status: str = Field(max_length=16)
    reason: str | None = None
    message: str | None = None
    lastTransitionTime: str | None = Field(None, max_length=64)  # Kubernetes spells it so


class KubernetesWorkloadEvent(Strict):
    """A Kueue Workload whose Finished or Evicted condition changed (deployments/kubernetes/forwarder.py)."""

    cluster: str = Field(pattern=NAME_PATTERN)
    namespace: str = Field(pattern=f"^{K8S_NAMESPACE.pattern}$")
    name: str = Field(pattern=f"^{K8S_NAME.pattern}$")
    uid: str | None = Field(None, pattern=r"^[0-9a-fA-F-]{1,64}$")
    attempt: int = Field(0, ge=0, le=100000, description="status.requeueState.count")
    conditions: list[WorkloadCondition] = Field(max_length=64, description="the Workload's status.conditions")
    diagnose: bool = False


class AttemptRequest(Strict):
    """An explicit request: a job on a configured cluster, or nodes + a window."""

    cluster: str = Field(pattern=NAME_PATTERN)
    job_id: str | None = Field(None, max_length=300, pattern=r"^[A-Za-z0-9._/+-]+$")
    attempt: int = Field(0, ge=0, le=100000)
    nodes: list[Annotated[str, Field(pattern=NAME_PATTERN)]] | None = Field(None, min_length=1, max_length=10000)
    start: datetime | None = None
    end: datetime | None = None

    @model_validator(mode="after")
    def _one_scope(self) -> AttemptRequest:
        if bool(self.job_id) == bool(self.nodes):
            raise ValueError("give either job_id or nodes (+ start and end)")
        if self.nodes:
            if not (self.start and self.end):
                raise ValueError("nodes need start and end")
            if self.start.tzinfo is None or self.end.tzinfo is None:
                raise ValueError("start and end need a time zone (RFC 3339)")
            if self.end <= self.start:
                raise ValueError("end must be after start")
        return self


class Accepted(BaseModel):
    status: Literal["accepted", "queued", "recorded"]
    idempotency_key: str
    flow_run_id: str | None = None
    duplicate: bool = False
    reason: str | None = None


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """The request body's schema for OpenAPI (bodies are read raw: signatures cover the bytes)."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


def invalid(field: str, error: str) -> HTTPException:
    return HTTPException(422, [{"field": field, "error": error}])


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The body, refusing more than `limit` bytes whether or not Content-Length tells the truth,
    and a sender slower than `timeout_s` for the whole body (408)."""
    import asyncio

    from starlette.requests import ClientDisconnect

    declared = request.headers.get("content-length")
    if declared and (not declared.isdigit() or int(declared) > limit):
        raise HTTPException(413, f"body larger than {limit} bytes")
    chunks, size = [], 0

    async def collect() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HTTPException(413, f"body larger than {limit} bytes")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(collect(), timeout_s)
    except TimeoutError:  # answered, and the connection closed: the rest of the body is not waited for
        raise HTTPException(408, f"body not received within {timeout_s:g} s", headers={"Connection": "close"}) from None
    except ClientDisconnect:  # the sender gave up mid-body: nothing to act on, no one to answer
        raise HTTPException(400, "client disconnected before sending the whole body") from None
    return b"".join(chunks)


def parse(model: type[BaseModel], body: bytes) -> Any:
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise HTTPException(
            422,
            [
                {"field": ".".join(str(p) for p in e["loc"]) or "body", "error": e["msg"]}
                for e in exc.errors(include_url=False, include_input=False)
            ][:20],
        ) from None
