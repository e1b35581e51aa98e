"""Triggers: the schedulers' webhooks and explicit requests, each turned into one flow run of the
attempt deployment (see intake.py for how an accepted trigger is never lost).

Each registered scheduler with a completion notice has its webhook, `POST /v1/webhooks/<path>`
(connectors/schedulers.py: Slurm's `slurm`, Kueue's `kubernetes`): the notice becomes a Target,
diagnosed when the attempt failed, recorded when it did not."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from workload_attribution.connectors.schedulers import Scheduler, Webhook, get_scheduler, schedulers
from workload_attribution.contracts.identity import STATIC, Target
from workload_attribution.service.auth import Scope, authorize, check_signature, require
from workload_attribution.service.intake import RETRY_AFTER_S, Unreachable
from workload_attribution.service.payloads import (
    Accepted,
    AttemptRequest,
    invalid,
    json_body,
    parse,
    read_body,
)

log = logging.getLogger("workload_attribution.service")
router = APIRouter()


async def signed_body(request: Request) -> bytes:
    """A webhook's body, signed; or sent with a bearer token of the trigger scope instead."""
    svc = request.app.state.svc
    if request.headers.get("authorization"):
        authorize(request, Scope.trigger)
    body = await read_body(request, svc.cfg.service.max_body_bytes, svc.cfg.service.body_timeout_s)
    if not request.headers.get("authorization"):
        check_signature(svc.secret, request.headers, body, svc.cfg.service.replay_window_s)
    return body


def _cluster(svc: Any, name: str, needs: str | None, what: str) -> Scheduler:
    """The cluster's scheduler; 422 naming why when the cluster is unknown or cannot scope `what`."""
    cluster = svc.cfg.clusters.get(name)
    if cluster is None:
        known = ", ".join(svc.cfg.clusters) or "none"
        raise invalid("cluster", f"cluster {name!r} is not configured (configured: {known})")
    if needs is not None and cluster.scheduler != needs:
        raise invalid(
            "cluster", f"cluster {name!r} is scheduled by {cluster.scheduler}, not {needs}: it cannot scope {what}"
        )
    return get_scheduler(cluster.scheduler)


def _outcome(svc: Any, source: str, outcome: str, key: str, detail: str = "") -> None:
    svc.metrics.triggers.labels(source, outcome).inc()
    log.info("trigger %s %s: %s%s", source, key, outcome, f" ({detail})" if detail else "")


async def start(request: Request, source: str, target: Target, key: str) -> JSONResponse:
    """Record the trigger durably, then create its flow run within answer_within_s if Prefect allows."""
    svc = request.app.state.svc
    params = {"target": target.model_dump(mode="json", exclude_none=True)}
    tags = [f"trigger:{source}", f"cluster:{target.cluster}"]
    try:
        entry = await asyncio.to_thread(svc.outbox.put, key, params, tags, source)
    except OSError as exc:  # cannot record it: the sender must keep it
        svc.metrics.trigger_failures.inc()
        _outcome(svc, source, "refused", key, f"outbox not writable: {exc}")
        return JSONResponse(
            {"detail": "cannot record the trigger now, retry later"},
            status_code=503,
            headers={"Retry-After": RETRY_AFTER_S},
        )
    task = asyncio.ensure_future(svc.trigger.start(key, params, tags))
    svc.in_flight[key] = task
    stopping = asyncio.get_running_loop().create_future()
    if svc.stopping:
        stopping.set_result(None)
    svc.stop_waiters.add(stopping)
    try:
        done, _ = await asyncio.wait(
            {task, stopping}, timeout=svc.cfg.service.answer_within_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        svc.stop_waiters.discard(stopping)
    if task not in done:  # Prefect is slow or the service stops: the run is made when it answers, or by the drainer
        task.add_done_callback(lambda t: svc.finish(entry, t, source, late=True))
        _outcome(svc, source, "queued", key)
        return JSONResponse(Accepted(status="queued", idempotency_key=key).model_dump(), status_code=202)
    svc.in_flight.pop(key, None)
    try:
        run_id, duplicate = task.result()
    except Exception as exc:
        svc.metrics.trigger_failures.inc()
        await asyncio.to_thread(svc.outbox.remove, entry)  # not taken: the sender keeps it
        _outcome(
            svc,
            source,
            "unavailable",
            key,
            f"{type(exc).__name__}: {exc}" + ("" if isinstance(exc, Unreachable) else " (unexpected)"),
        )
        return JSONResponse(
            {"detail": "orchestrator unavailable, retry later"}, status_code=503, headers={"Retry-After": RETRY_AFTER_S}
        )
    await asyncio.to_thread(svc.outbox.remove, entry)
    _outcome(svc, source, "duplicate" if duplicate else "started", key, f"flow run {run_id}")
    if not duplicate:
        svc.metrics.runs_started.labels(source).inc()
    return JSONResponse(
        Accepted(status="accepted", idempotency_key=key, flow_run_id=run_id, duplicate=duplicate).model_dump(),
        status_code=202,
    )


def recorded(request: Request, source: str, key: str, why: str) -> JSONResponse:
    _outcome(request.app.state.svc, source, "recorded", key, why)
    return JSONResponse(Accepted(status="recorded", idempotency_key=key, reason=why).model_dump(), status_code=200)


def webhook(scheduler: Scheduler, hook: Webhook) -> Callable[[Request, bytes], Awaitable[JSONResponse]]:
    """The endpoint of a scheduler's completion notice: failed -> diagnosed, else recorded."""

    async def receive(request: Request, body: bytes = Depends(signed_body)) -> JSONResponse:
        svc = request.app.state.svc
        notice = hook.read(parse(hook.body, body))
        _cluster(svc, notice.target.cluster or "", scheduler.name, hook.what)
        key = notice.target.attempt_id(scheduler.name).key
        if not notice.failed and not (notice.asked or svc.cfg.service.diagnose_completed):
            return recorded(request, hook.path, key, notice.why)
        return await start(request, hook.path, notice.target, key)

    return receive


def add_webhooks(router: APIRouter) -> None:
    for scheduler in schedulers().values():
        hook = scheduler.webhook
        if hook is not None:
            router.add_api_route(
                f"/v1/webhooks/{hook.path}",
                webhook(scheduler, hook),
                methods=["POST"],
                status_code=202,
                response_model=Accepted,
                openapi_extra=json_body(hook.body),
                name=f"{hook.path}_webhook",
                description=hook.doc,
            )


add_webhooks(router)


@router.post(
    "/v1/attempts",
    status_code=202,
    response_model=Accepted,
    openapi_extra=json_body(AttemptRequest),
    dependencies=[Depends(require(Scope.trigger))],
)
async def attempts(request: Request) -> JSONResponse:
    """Diagnose an explicit attempt: a job on a configured cluster, or nodes + window."""
    from pydantic import ValidationError

    svc = request.app.state.svc
    req = parse(
        AttemptRequest, await read_body(request, svc.cfg.service.attempts_max_bytes, svc.cfg.service.body_timeout_s)
    )
    scheduler = _cluster(svc, req.cluster, None, "")
    if req.job_id and not scheduler.jobs:
        why = f"cluster {req.cluster!r} has no scheduler ({scheduler.name}): give nodes + start + end"
        raise invalid("job_id", why)
    try:
        target = req.target()
        if req.job_id:
            scheduler.job_id(req.job_id)  # the job id in the scheduler's own form, or 422
        key = target.attempt_id(scheduler.name if req.job_id else STATIC).key
    except (ValueError, ValidationError) as exc:
        raise invalid("job_id" if req.job_id else "nodes", str(exc).splitlines()[-1][:200]) from None
    return await start(request, "api", target, key)
