"""What the service's senders post: the schemas of the webhooks and requests, and how a body is read."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from workload_attribution.contracts.identity import NAME_PATTERN, Name, Target, Window

# The schedulers' own completion notices (the webhooks' bodies) are their modules' (connectors/
# slurm.py SlurmJobEvent, connectors/kueue.py KubernetesWorkloadEvent): the service routes each to
# POST /v1/webhooks/<path> from the scheduler registry.


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_max_length=4096)


# The flat form of a Target (`target()`), as /v1/attempts takes it; the job id's own form is its
# scheduler's to check. (The docstring is the request's description in the OpenAPI document.)
class AttemptRequest(Strict):
    """An explicit request: a job on a configured cluster, or nodes + a window."""

    cluster: str = Field(pattern=NAME_PATTERN)
    job_id: str | None = Field(None, max_length=300, pattern=r"^[A-Za-z0-9._/+-]+$")
    attempt: int = Field(0, ge=0, le=100000)
    nodes: list[Name] | None = Field(None, min_length=1, max_length=10000)
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

    def target(self) -> Target:
        """What is asked: the job, or the window (ValueError, ValidationError when it cannot be one)."""
        if self.job_id:
            return Target(cluster=self.cluster, job_id=self.job_id, attempt=self.attempt)
        assert self.nodes and self.start and self.end  # _one_scope
        return Target(cluster=self.cluster, window=Window(nodes=self.nodes, start=self.start, end=self.end))


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
