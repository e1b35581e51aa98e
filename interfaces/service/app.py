"""The application: the routers of the service, what they share, and its life (the outbox drainer).

triggers.py  POST /v1/webhooks/slurm, /v1/webhooks/kubernetes (HMAC or trigger), /v1/attempts (trigger)
diagnose.py  POST /v1/diagnose (read): an attempt's evidence in, its diagnosis out
reads.py     GET /v1/diagnoses, /v1/diagnoses/{id} (read)
ui.py        /ui (read: a session opened at /ui/login, or a bearer token)
admin.py     GET /v1/tokens, GET and DELETE /v1/sessions (admin)
here         GET /healthz, GET /metrics (open)
Scopes and tokens: auth.py and credentials.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from workload_attribution import version
from workload_attribution.flows.config import Config
from workload_attribution.service.auth import AuthError
from workload_attribution.service.credentials import Credentials
from workload_attribution.service.intake import RETRY_AFTER_S, Entry, Outbox, Trigger
from workload_attribution.service.metrics import Metrics
from workload_attribution.service.sessions import Sessions

log = logging.getLogger("workload_attribution.service")
access_log = logging.getLogger("workload_attribution.access")


class AnswerWhenCut:
    """A request still running when the service stops is cut short (uvicorn cancels it once its
    graceful shutdown is over): answer 503 with Retry-After, which tells the sender to keep it and
    send it again, not uvicorn's bare 500. A trigger already in the outbox is created at the next
    start all the same; the sender's repeat is then a duplicate of the same idempotency key."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except asyncio.CancelledError:
            if started:  # half an answer cannot be mended: uvicorn closes the connection
                raise
            log.warning("%s %s cut short by the stop: answered 503", scope.get("method"), scope.get("path"))
            body = b'{"detail":"the service is stopping, retry later"}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"retry-after", RETRY_AFTER_S.encode()),
                        (b"connection", b"close"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})


@dataclass
class Services:
    """What every route shares (app.state.svc)."""

    cfg: Config
    credentials: Credentials
    sessions: Sessions
    secret: str | None
    trigger: Trigger
    outbox: Outbox
    metrics: Metrics
    warehouse: Any
    pack: Any = None  # the rules pack POST /v1/diagnose runs (loaded once)
    in_flight: dict[str, asyncio.Future] = field(default_factory=dict)
    diagnose_slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(2))
    stopping: bool = False  # the server began to stop (stop())
    # what requests wait on besides Prefect: resolved by stop(). Futures of the request's own loop,
    # not one asyncio.Event, which would bind the app to the first loop that waits on it.
    stop_waiters: set[asyncio.Future] = field(default_factory=set)

    def stop(self) -> None:
        """The server begins to stop: what waits for Prefect answers now."""
        self.stopping = True
        for waiter in self.stop_waiters:
            if not waiter.done():
                waiter.set_result(None)

    def finish(self, entry: Entry, task: asyncio.Future, source: str, late: bool) -> None:
        """A creation that outlived its request: the entry goes once the run exists; a failure
        leaves it for the drainer."""
        self.in_flight.pop(entry.key, None)
        if task.cancelled() or task.exception() is not None:
            why = "cancelled" if task.cancelled() else f"{type(task.exception()).__name__}: {task.exception()}"
            self.metrics.trigger_failures.inc()
            log.warning("flow run for %s not created yet (%s): the outbox keeps it", entry.key, why)
            return
        self.outbox.remove(entry)
        self.metrics.triggers.labels(source, "started_late").inc()
        if not task.result()[1]:
            self.metrics.runs_started.labels(source).inc()
        log.info("trigger %s %s: started after 'queued' (flow run %s)", source, entry.key, task.result()[0])

    async def drain(self, stop: asyncio.Event, every_s: float = 1.0, older_than_s: float = 2.0) -> None:
        """Create the flow runs of the outbox's entries, oldest first, until stopped. Entries of
        requests still waiting for Prefect are theirs; a failure waits for the next round."""
        backoff = every_s
        while not stop.is_set():
            delay = every_s
            try:
                for entry in await asyncio.to_thread(self.outbox.pending):
                    if stop.is_set() or entry.key in self.in_flight or time.time() - entry.received < older_than_s:
                        continue
                    try:
                        run_id, duplicate = await self.trigger.start(entry.key, entry.parameters, entry.tags)
                    except Exception as exc:
                        log.warning(
                            "outbox: %s still waits for its flow run (%s: %s)",
                            entry.key,
                            type(exc).__name__,
                            str(exc).splitlines()[0] if str(exc) else "",
                        )
                        backoff = min(backoff * 2, 30.0)
                        delay = backoff
                        break  # Prefect is down or busy: in order, later
                    await asyncio.to_thread(self.outbox.remove, entry)
                    self.metrics.triggers.labels(entry.source, "started_from_outbox").inc()
                    if not duplicate:
                        self.metrics.runs_started.labels(entry.source).inc()
                    log.info("trigger %s %s: started from the outbox (flow run %s)", entry.source, entry.key, run_id)
                else:
                    backoff = every_s
            except Exception:
                log.exception("outbox drain failed")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)


def state_dir() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "workload-attribution")


def default_outbox() -> str:
    return os.path.join(state_dir(), "outbox")


# Exempt from the length checks: FastAPI's routes are closures over this one app's state (warehouse, rules, trigger,
# tokens, metrics); each route's work is in its own module (diagnose, attempts, webhooks, auth).
def create_app(  # noqa: C901, PLR0915
    cfg: Config, trigger: Trigger | None = None, dashboard_only: bool = False, insecure: bool = False
) -> FastAPI:
    """The service. Secrets come from the environment variables the configuration names; `attribution
    serve` refuses to start without them unless --insecure-no-auth (a trusted network)."""
    from workload_attribution.flows.pipeline import load_rules
    from workload_attribution.warehouse.reads import counts_by_terminal_state
    from workload_attribution.warehouse.store import Warehouse

    svc_cfg = cfg.service
    credentials = Credentials.from_environment(svc_cfg.token_env, svc_cfg.tokens_env, svc_cfg.tokens_file)
    secret = os.environ.get(svc_cfg.webhook_secret_env) or None
    warehouse = Warehouse(cfg.warehouse, lock_wait_s=10) if cfg.warehouse else None
    outbox = None if dashboard_only else Outbox(svc_cfg.outbox_dir or default_outbox())
    svc = Services(
        cfg=cfg,
        credentials=credentials,
        sessions=Sessions(
            svc_cfg.sessions_file or os.path.join(state_dir(), "sessions.sqlite3"), svc_cfg.session_ttl_s
        ),
        secret=secret,
        trigger=trigger or Trigger(svc_cfg.deployment),
        outbox=outbox,  # type: ignore[arg-type]
        metrics=Metrics(
            lambda: counts_by_terminal_state(warehouse) if warehouse else [], outbox.stats if outbox else None
        ),
        warehouse=warehouse,
        pack=load_rules(cfg.rules_dir),
        diagnose_slots=asyncio.Semaphore(svc_cfg.diagnose_concurrency),
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        stop = asyncio.Event()
        drainer = asyncio.create_task(svc.drain(stop)) if outbox is not None else None
        if outbox is not None:
            depth, oldest = outbox.stats()
            if depth:
                log.info(
                    "outbox: %d trigger(s) from before this start (oldest %.0f s): creating their runs", depth, oldest
                )
        yield
        stop.set()
        if drainer is not None:
            try:
                await asyncio.wait_for(drainer, 5)
            except Exception as exc:  # stopping anyway: what is left stays in the outbox
                log.warning("outbox drainer did not stop cleanly: %s", exc)
        await svc.trigger.reset()
        if outbox is not None:
            depth, oldest = outbox.stats()
            log.info(
                "stopped: %d trigger(s) left in the outbox (oldest %.0f s), their runs are created at the next start",
                depth,
                oldest,
            )
        else:
            log.info("stopped")

    app = FastAPI(
        title="workload-attribution",
        version=version(),
        lifespan=lifespan,
        description="Triggers (scheduler webhooks, explicit attempts), synchronous diagnosis of posted "
        "evidence, and reads of the diagnosis warehouse.",
    )
    app.state.svc = svc

    @app.middleware("http")
    async def measure(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        route = request.scope.get("route")
        try:
            response = await call_next(request)
        except Exception:
            log.exception("unhandled error on %s", request.url.path)
            response = JSONResponse({"detail": "internal error"}, status_code=500)
        route = request.scope.get("route") or route
        endpoint = getattr(route, "path", "unmatched")
        took = time.perf_counter() - started
        svc.metrics.requests.labels(endpoint, str(response.status_code)).inc()
        svc.metrics.latency.labels(endpoint).observe(took)
        client = request.client.host if request.client else "-"
        access_log.info('%s "%s %s" %d %.3fs', client, request.method, endpoint, response.status_code, took)
        return response

    app.add_middleware(AnswerWhenCut)  # added last: outside `measure`, it sees every request

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # the same shape as body errors, and never the offending input echoed back
        return JSONResponse(
            {
                "detail": [
                    {"field": ".".join(str(p) for p in e["loc"][1:]) or str(e["loc"][0]), "error": e["msg"]}
                    for e in exc.errors()
                ][:20]
            },
            status_code=422,
        )

    @app.exception_handler(AuthError)
    async def _auth(request: Request, exc: AuthError) -> JSONResponse:
        svc.metrics.auth_failures.labels(exc.scope.value, exc.reason).inc()
        who = f" ({exc.who})" if exc.who else ""
        log.warning("refused %s %s: %s%s, needs scope %s", request.method, request.url.path, exc.reason, who, exc.scope)
        return JSONResponse(
            {"detail": exc.detail, "scope": exc.scope.value},
            status_code=exc.status,
            headers={"WWW-Authenticate": f'Bearer scope="{exc.scope}"'} if exc.status == 401 else None,
        )

    from workload_attribution.service import admin, diagnose, reads, triggers, ui

    if not dashboard_only:
        app.include_router(triggers.router)
    else:  # a trigger sent here by mistake is told so, not a bare 404 (the sender keeps it)

        @app.post("/v1/webhooks/{kind}", include_in_schema=False)
        @app.post("/v1/attempts", include_in_schema=False)
        def no_triggers(request: Request) -> JSONResponse:
            return JSONResponse(
                {"detail": "this service runs --dashboard-only: it takes no triggers (send them to the trigger one)"},
                status_code=404,
            )

    app.include_router(diagnose.router)  # computes here, needs no orchestrator
    app.include_router(reads.router)
    app.include_router(ui.router)
    app.include_router(admin.router)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:  # on the event loop: never queued behind reads in the thread pool
        return {
            "status": "ok",
            "version": version(),
            "dashboard_only": dashboard_only,
            "deployment": None if dashboard_only else svc_cfg.deployment,
            "auth": {"bearer": credentials.configured, "webhook_hmac": secret is not None},
        }

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> PlainTextResponse:
        return PlainTextResponse(svc.metrics.text(), media_type="text/plain; version=0.0.4")

    if not insecure and not credentials.configured:
        log.warning(
            "no API token ($%s, $%s, service.tokens_file): reads and requests are open",
            svc_cfg.token_env,
            svc_cfg.tokens_env,
        )
    return app
