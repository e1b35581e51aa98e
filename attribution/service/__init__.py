"""`attribution serve`: the HTTP face of the project (FastAPI, which Prefect already ships).

Triggers (each starts the attempt deployment, fire-and-forget, under the idempotency key
`<cluster>:<scheduler>:<job_id>:<attempt>`, so a repeat of the same attempt returns the same run):
    POST /v1/webhooks/slurm        a Slurm completion hook (deployments/slurm/)      HMAC-signed
    POST /v1/webhooks/kubernetes   a Kueue Workload finished/evicted (deployments/kubernetes/)  HMAC-signed
    POST /v1/attempts              an explicit scope                                 bearer token
Reads (bearer token): GET /v1/diagnoses/{id}, GET /v1/diagnoses?cluster=&since=&until=&terminal_state=&node=
Open: GET /healthz, GET /metrics (Prometheus text).

Webhook signature: X-Attribution-Timestamp: <unix seconds>, X-Attribution-Signature:
sha256=<hex HMAC-SHA256(secret, "<timestamp>." + body)>; timestamps outside the replay window are
refused. Secrets come from the environment (names in the config). Refusals say 401 or 403 and
nothing else; the reason goes to the log and to /metrics.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import re
import time
from collections import OrderedDict
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import GaugeMetricFamily
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from attribution.config import Config

log = logging.getLogger("attribution.service")

NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"                 # cluster names, hosts: what the rest of the system accepts
SLURM_JOB_ID = r"^\d{1,12}(?:_\d{1,9})?(?:\+\d{1,6})?$"
K8S_NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"        # RFC 1123 subdomain
SUCCESS_STATES = {"COMPLETED"}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_max_length=4096)


class SlurmJobEvent(Strict):
    """What deployments/slurm/attribution-hook sends when a job ends (jobcomp/script)."""

    cluster: str = Field(pattern=NAME)
    job_id: str = Field(pattern=SLURM_JOB_ID)
    state: str = Field(pattern=r"^[A-Z_]{3,32}(?: by \d{1,10})?$", description="JOBSTATE, e.g. FAILED, NODE_FAIL")
    attempt: int = Field(0, ge=0, le=100000, description="the job's restart count when known")
    nodes: str | None = Field(None, max_length=65536, description="Slurm hostlist expression")
    exit_code: str | None = Field(None, pattern=r"^-?\d{1,5}(?::-?\d{1,5})?$")
    start: datetime | None = None
    end: datetime | None = None
    partition: str | None = Field(None, pattern=NAME)
    user: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]{1,64}$")
    diagnose: bool = Field(False, description="diagnose even if the job completed")


class KubernetesWorkloadEvent(Strict):
    """A Kueue Workload whose Finished or Evicted condition changed (deployments/kubernetes/forwarder.py)."""

    cluster: str = Field(pattern=NAME)
    namespace: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    name: str = Field(pattern=K8S_NAME)
    uid: str | None = Field(None, pattern=r"^[0-9a-fA-F-]{1,64}$")
    attempt: int = Field(0, ge=0, le=100000, description="status.requeueState.count")
    conditions: list[dict[str, Any]] = Field(max_length=64, description="the Workload's status.conditions")
    diagnose: bool = False


class AttemptRequest(Strict):
    """An explicit request: a job on a configured cluster, or nodes + a window."""

    cluster: str = Field(pattern=NAME)
    job_id: str | None = Field(None, max_length=300, pattern=r"^[A-Za-z0-9._/+-]+$")
    attempt: int = Field(0, ge=0, le=100000)
    nodes: list[Annotated[str, Field(pattern=NAME)]] | None = Field(None, min_length=1, max_length=100000)
    start: datetime | None = None
    end: datetime | None = None

    @model_validator(mode="after")
    def _one_scope(self) -> "AttemptRequest":
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


def _json_body(model: type[BaseModel]) -> dict[str, Any]:
    """The request body's schema for OpenAPI (bodies are read raw: signatures cover the bytes)."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


class AuthError(Exception):
    def __init__(self, status: int, reason: str):
        self.status, self.reason = status, reason


# -------------------------------------------------------------------------------------------- auth

def sign(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """The headers a sender adds (the hooks in deployments/ do the same in a few lines)."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    mac = hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"X-Attribution-Timestamp": ts, "X-Attribution-Signature": f"sha256={mac}"}


def check_signature(secret: str | None, headers, body: bytes, window_s: float, now: float | None = None) -> None:
    if secret is None:
        return
    ts, sig = headers.get("x-attribution-timestamp"), headers.get("x-attribution-signature")
    if not ts or not sig:
        raise AuthError(401, "signature missing")
    if not re.fullmatch(r"\d{1,12}", ts):
        raise AuthError(403, "timestamp malformed")
    if abs((now or time.time()) - int(ts)) > window_s:
        raise AuthError(403, "timestamp outside the replay window")
    want = sign(secret, body, int(ts))["X-Attribution-Signature"]
    if not hmac.compare_digest(want.encode(), sig.strip().encode()):
        raise AuthError(403, "signature mismatch")


def check_bearer(token: str | None, headers) -> None:
    if token is None:
        return
    auth = headers.get("authorization") or ""
    if not auth:
        raise AuthError(401, "token missing")
    scheme, _, given = auth.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise AuthError(403, "token mismatch")


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing more than `limit` bytes whether or not Content-Length tells the truth."""
    declared = request.headers.get("content-length")
    if declared and (not declared.isdigit() or int(declared) > limit):
        raise HTTPException(413, f"body larger than {limit} bytes")
    from starlette.requests import ClientDisconnect

    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HTTPException(413, f"body larger than {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:   # the sender gave up mid-body: nothing to act on, no one to answer
        raise HTTPException(400, "client disconnected before sending the whole body") from None
    return b"".join(chunks)


def parse(model: type[BaseModel], body: bytes) -> Any:
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise HTTPException(422, [{"field": ".".join(str(p) for p in e["loc"]) or "body", "error": e["msg"]}
                                  for e in exc.errors(include_url=False, include_input=False)][:20]) from None


# ----------------------------------------------------------------------------------------- trigger

class Trigger:
    """Starts the attempt deployment once per idempotency key.

    Prefect's idempotency key is the truth (any number of service replicas agree through it); the
    per-key lock and the small memory only spare the server the duplicates of a webhook storm."""

    def __init__(self, deployment: str, memory: int = 100_000):
        self.deployment = deployment
        self.memory: OrderedDict[str, str] = OrderedDict()
        self.locks: dict[str, asyncio.Lock] = {}
        self.memory_size = memory
        # One client and the deployment's id for the service's life: a trigger is then one API call
        # (create the run), not a new client + a deployment lookup + the call (run_deployment).
        self._client = None
        self._deployment_id = None
        self._setup = asyncio.Lock()
        # A storm of webhooks must not become a storm of concurrent writes on the Prefect server
        # (with SQLite it answers "database is locked"): one create at a time, a busy answer retried.
        self._gate = asyncio.Semaphore(1)

    async def _connected(self):
        async with self._setup:
            if self._client is None:
                from prefect.client.orchestration import get_client

                client = get_client()
                await client.__aenter__()
                try:
                    self._deployment_id = (await client.read_deployment_by_name(self.deployment)).id
                except BaseException:
                    await client.__aexit__(None, None, None)
                    raise
                self._client = client
            return self._client, self._deployment_id

    async def _reset(self) -> None:
        async with self._setup:
            client, self._client = self._client, None
            if client is not None:
                try:
                    await client.__aexit__(None, None, None)
                except Exception:
                    pass

    async def start(self, key: str, parameters: dict[str, Any], tags: list[str]) -> tuple[str, bool]:
        """(flow run id, whether the run existed already)."""
        if len(self.locks) > 10_000:
            self.locks = {k: v for k, v in self.locks.items() if v.locked()}
        async with self.locks.setdefault(key, asyncio.Lock()):
            if key in self.memory:
                self.memory.move_to_end(key)
                return self.memory[key], True
            asked = datetime.now(timezone.utc)
            client, deployment_id = await self._connected()
            for delay in (0.2, 0.5, 1.0, 2.0, None):
                try:
                    async with self._gate:
                        t0 = time.perf_counter()
                        run = await client.create_flow_run_from_deployment(
                            deployment_id, parameters=parameters, idempotency_key=key, tags=tags,
                            name=key.replace(":", "-")[:200])
                        log.info("flow run %s for %s created in %.3f s", run.id, key, time.perf_counter() - t0)
                    break
                except Exception as exc:
                    busy = getattr(getattr(exc, "response", None), "status_code", None) in (429, 503)
                    if busy and delay is not None:   # the server is busy, not gone: the same key is safe to repeat
                        await asyncio.sleep(delay)
                        continue
                    await self._reset()   # the server restarted or the deployment was re-applied: reconnect next time
                    raise
            # Prefect answers a known key with the existing run: one created before we asked is a repeat
            duplicate = run.created is not None and (asked - run.created).total_seconds() > 1.0
            self.memory[key] = str(run.id)
            while len(self.memory) > self.memory_size:
                self.memory.popitem(last=False)
            return str(run.id), duplicate


# ---------------------------------------------------------------------------------------- the app

def create_app(cfg: Config, trigger: Trigger | None = None) -> FastAPI:
    svc = cfg.service
    token = os.environ.get(svc.token_env) or None
    secret = os.environ.get(svc.webhook_secret_env) or None
    trigger = trigger or Trigger(svc.deployment)
    disable_created_metrics()   # *_created series only double the scrape
    registry = CollectorRegistry()
    requests_total = Counter("attribution_http_requests", "HTTP requests answered", ["endpoint", "code"],
                             registry=registry)
    latency = Histogram("attribution_http_request_seconds", "time to answer", ["endpoint"], registry=registry,
                        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
    triggers = Counter("attribution_triggers", "triggers by outcome", ["source", "outcome"], registry=registry)
    runs_started = Counter("attribution_flow_runs_started", "flow runs started (not counting duplicates)",
                           ["source"], registry=registry)
    auth_failures = Counter("attribution_auth_failures", "refused requests by reason", ["reason"], registry=registry)
    trigger_failures = Counter("attribution_trigger_failures", "triggers that could not reach Prefect",
                               registry=registry)

    class DiagnosesByState:
        def collect(self):
            g = GaugeMetricFamily("attribution_diagnoses", "diagnoses in the warehouse by terminal_state",
                                  labels=["terminal_state"])
            for state, n in _warehouse_rows(cfg, "SELECT terminal_state, count(*) FROM diagnoses GROUP BY 1", [],
                                            quiet=True):
                g.add_metric([state], n)
            yield g

    registry.register(DiagnosesByState())

    app = FastAPI(title="workload-attribution", version="1", description=__doc__.split("\n\n")[0])

    @app.middleware("http")
    async def _measure(request: Request, call_next):
        started = time.perf_counter()
        route = request.scope.get("route")
        try:
            response = await call_next(request)
        except Exception:
            log.exception("unhandled error on %s", request.url.path)
            response = JSONResponse({"detail": "internal error"}, status_code=500)
        route = request.scope.get("route") or route
        endpoint = getattr(route, "path", "unmatched")
        requests_total.labels(endpoint, str(response.status_code)).inc()
        latency.labels(endpoint).observe(time.perf_counter() - started)
        return response

    def refuse(exc: AuthError) -> JSONResponse:
        auth_failures.labels(exc.reason).inc()
        log.warning("refused: %s", exc.reason)
        return JSONResponse({"detail": "authentication required" if exc.status == 401 else "forbidden"},
                            status_code=exc.status,
                            headers={"WWW-Authenticate": "Bearer"} if exc.status == 401 else None)

    async def signed_body(request: Request) -> bytes:
        body = await read_body(request, svc.max_body_bytes)
        check_signature(secret, request.headers, body, svc.replay_window_s)
        return body

    async def bearer_body(request: Request) -> bytes:
        check_bearer(token, request.headers)
        return await read_body(request, svc.max_body_bytes)

    def known_cluster(name: str) -> None:
        if cfg.clusters and name not in cfg.clusters:
            raise HTTPException(422, [{"field": "cluster", "error": f"cluster {name!r} is not configured"}])

    in_flight: set[asyncio.Task] = set()   # creations still running after their caller was answered

    def failed(source: str, key: str, why: str) -> None:
        trigger_failures.inc()
        triggers.labels(source, "error").inc()
        log.error("could not start %s for %s: %s", svc.deployment, key, why)

    def finished_late(task: asyncio.Task, source: str, key: str) -> None:
        in_flight.discard(task)
        if task.cancelled() or task.exception() is not None:
            failed(source, key, f"{task.exception() if not task.cancelled() else 'cancelled'} (after answering "
                                "'queued'; the next backfill will find the attempt)")
        else:
            triggers.labels(source, "started_late").inc()
            if not task.result()[1]:
                runs_started.labels(source).inc()

    async def start(source: str, key: str, params: dict[str, Any]) -> JSONResponse:
        # Prefect answers slowly when it is busy (a storm, its database contended): the caller gets
        # an answer within answer_within_s either way, and the run is still created.
        task = asyncio.ensure_future(trigger.start(key, params, tags=[f"trigger:{source}",
                                                                      f"cluster:{params.get('cluster')}"]))
        done, _ = await asyncio.wait({task}, timeout=svc.answer_within_s)
        if not done:
            in_flight.add(task)
            task.add_done_callback(lambda t: finished_late(t, source, key))
            triggers.labels(source, "queued").inc()
            return JSONResponse(Accepted(status="queued", idempotency_key=key).model_dump(), status_code=202)
        try:
            run_id, duplicate = task.result()
        except Exception as exc:
            failed(source, key, f"{type(exc).__name__}: {exc}")
            return JSONResponse({"detail": "orchestrator unavailable, retry later"}, status_code=503,
                                headers={"Retry-After": "10"})
        triggers.labels(source, "duplicate" if duplicate else "started").inc()
        if not duplicate:
            runs_started.labels(source).inc()
        return JSONResponse(Accepted(status="accepted", idempotency_key=key, flow_run_id=run_id,
                                     duplicate=duplicate).model_dump(), status_code=202)

    def recorded(source: str, key: str, why: str) -> JSONResponse:
        triggers.labels(source, "recorded").inc()
        log.info("recorded, not diagnosed: %s (%s)", key, why)
        return JSONResponse(Accepted(status="recorded", idempotency_key=key, reason=why).model_dump(), status_code=200)

    from fastapi.exceptions import RequestValidationError

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        # the same shape as body errors, and never the offending input echoed back
        return JSONResponse({"detail": [{"field": ".".join(str(p) for p in e["loc"][1:]) or str(e["loc"][0]),
                                         "error": e["msg"]} for e in exc.errors()][:20]}, status_code=422)

    @app.exception_handler(AuthError)
    async def _auth(request: Request, exc: AuthError):
        return refuse(exc)

    @app.post("/v1/webhooks/slurm", status_code=202, response_model=Accepted,
              openapi_extra=_json_body(SlurmJobEvent))
    async def slurm_webhook(request: Request):
        """A Slurm job ended (sent by deployments/slurm/attribution-hook). Failed -> diagnosed."""
        ev = parse(SlurmJobEvent, await signed_body(request))
        known_cluster(ev.cluster)
        key = f"{ev.cluster}:slurm:{ev.job_id}:{ev.attempt}"
        if ev.state.split()[0] in SUCCESS_STATES and not (ev.diagnose or svc.diagnose_completed):
            return recorded("slurm", key, f"job {ev.state}")
        return await start("slurm", key, {"cluster": ev.cluster, "job_id": ev.job_id, "attempt": ev.attempt,
                                          "trigger": "completion"})

    @app.post("/v1/webhooks/kubernetes", status_code=202, response_model=Accepted,
              openapi_extra=_json_body(KubernetesWorkloadEvent))
    async def kubernetes_webhook(request: Request):
        """A Kueue Workload finished or was evicted. Evicted, or Finished but not Succeeded -> diagnosed."""
        from connectors.kueue import ended_badly

        ev = parse(KubernetesWorkloadEvent, await signed_body(request))
        known_cluster(ev.cluster)
        key = f"{ev.cluster}:kueue:{ev.namespace}/{ev.name}:{ev.attempt}"
        cond = ended_badly(ev.conditions)
        if cond is None and not (ev.diagnose or svc.diagnose_completed):
            return recorded("kubernetes", key, "workload did not end in failure or eviction")
        return await start("kubernetes", key, {"cluster": ev.cluster, "job_id": f"{ev.namespace}/{ev.name}",
                                               "attempt": ev.attempt, "trigger": "completion"})

    @app.post("/v1/attempts", status_code=202, response_model=Accepted,
              openapi_extra=_json_body(AttemptRequest))
    async def attempts(request: Request):
        """Diagnose an explicit attempt: a job on a configured cluster, or nodes + window."""
        req = parse(AttemptRequest, await bearer_body(request))
        known_cluster(req.cluster)
        sched = cfg.clusters[req.cluster].scheduler if req.cluster in cfg.clusters else "static"
        if req.job_id:
            key = f"{req.cluster}:{sched}:{req.job_id}:{req.attempt}"
            params = {"cluster": req.cluster, "job_id": req.job_id, "attempt": req.attempt}
        else:
            key = f"{req.cluster}:static:{','.join(req.nodes)}@{req.start.isoformat()}:{req.attempt}"
            params = {"cluster": req.cluster, "nodes": req.nodes, "start": req.start.isoformat(),
                      "end": req.end.isoformat()}
        return await start("api", key[:2000], params)

    @app.get("/v1/diagnoses/{diagnosis_id}")
    def get_diagnosis(diagnosis_id: str, request: Request) -> dict[str, Any]:
        """One diagnosis, the full document."""
        check_bearer(token, request.headers)
        if not re.fullmatch(r"[0-9a-fA-F-]{32,36}", diagnosis_id):
            raise HTTPException(422, [{"field": "diagnosis_id", "error": "not a diagnosis id (UUID)"}])
        rows = _warehouse_rows(cfg, "SELECT diagnosis FROM diagnoses WHERE diagnosis_id = ?", [diagnosis_id.lower()])
        if not rows:
            raise HTTPException(404, "no such diagnosis")
        return json.loads(rows[0][0])

    @app.get("/v1/diagnoses")
    def list_diagnoses(request: Request,
                       cluster: Annotated[str | None, Query(pattern=NAME)] = None,
                       since: datetime | None = None, until: datetime | None = None,
                       terminal_state: Annotated[str | None, Query(pattern=r"^[a-z_]{1,40}$")] = None,
                       node: Annotated[str | None, Query(pattern=NAME)] = None,
                       limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                       offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0) -> dict[str, Any]:
        """Diagnoses, newest attempt end first, filtered; `node` matches affected nodes and the root's node."""
        check_bearer(token, request.headers)
        items = _list(cfg, cluster, since, until, terminal_state, node, limit, offset)
        return {"items": items, "limit": limit, "offset": offset}

    # ---- the dashboard (read-only, same data; see attribution/dashboard.py)
    from fastapi.responses import HTMLResponse, RedirectResponse

    from attribution import dashboard

    def html(body: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(body, status_code=status, headers={
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                                       "frame-ancestors 'none'", "X-Content-Type-Options": "nosniff",
            "Cache-Control": "no-store"})

    @app.get("/ui", response_class=HTMLResponse, include_in_schema=False)
    def ui_list(request: Request, cluster: Annotated[str | None, Query(pattern=r"^$|" + NAME)] = None,
                since: Annotated[str | None, Query(max_length=40)] = None,
                until: Annotated[str | None, Query(max_length=40)] = None,
                terminal_state: Annotated[str | None, Query(pattern=r"^[a-z_]{0,40}$")] = None,
                node: Annotated[str | None, Query(pattern=r"^$|" + NAME)] = None,
                limit: Annotated[int, Query(ge=1, le=1000)] = 200):
        if not dashboard.token_ok(token, request):
            return RedirectResponse("/ui/login", status_code=303)
        try:
            since_t, until_t = (datetime.fromisoformat(v.replace("Z", "+00:00")) if v else None for v in (since, until))
        except ValueError:
            return html(dashboard.page("Bad filter", "<h1>since / until must be RFC 3339 times</h1>"), 422)
        rows = _list(cfg, cluster or None, since_t, until_t, terminal_state or None, node or None, limit, 0)
        trends = dashboard.trends(lambda sql, args: _warehouse_rows(cfg, sql, args), cluster or None)
        return html(dashboard.list_page(rows, {"cluster": cluster, "terminal_state": terminal_state, "node": node,
                                               "since": since, "until": until}, trends))

    @app.get("/ui/diagnoses/{diagnosis_id}", response_class=HTMLResponse, include_in_schema=False)
    def ui_diagnosis(diagnosis_id: str, request: Request):
        if not dashboard.token_ok(token, request):
            return RedirectResponse("/ui/login", status_code=303)
        if not re.fullmatch(r"[0-9a-fA-F-]{32,36}", diagnosis_id):
            return html(dashboard.page("Not found", "<h1>No such diagnosis</h1>"), 404)
        rows = _warehouse_rows(cfg, "SELECT diagnosis FROM diagnoses WHERE diagnosis_id = ?", [diagnosis_id.lower()])
        if not rows:
            return html(dashboard.page("Not found", "<h1>No such diagnosis</h1>"), 404)
        return html(dashboard.diagnosis_page(json.loads(rows[0][0])))

    @app.get("/ui/login", response_class=HTMLResponse, include_in_schema=False)
    def ui_login_form():
        return html(dashboard.login_page())

    @app.post("/ui/login", include_in_schema=False)
    async def ui_login(request: Request):
        from urllib.parse import parse_qs

        given = (parse_qs((await read_body(request, 4096)).decode(errors="replace")).get("token") or [""])[0]
        if token is not None and not hmac.compare_digest(given.encode(), token.encode()):
            auth_failures.labels("dashboard token mismatch").inc()
            return html(dashboard.login_page(failed=True), 403)
        response = RedirectResponse("/ui", status_code=303)
        response.set_cookie("attribution_token", given, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", max_age=12 * 3600)
        return response

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "deployment": svc.deployment, "auth": {"bearer": token is not None,
                                                                       "webhook_hmac": secret is not None}}

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(registry), media_type="text/plain; version=0.0.4")

    return app


def _list(cfg: Config, cluster, since, until, terminal_state, node, limit: int, offset: int) -> list[dict[str, Any]]:
    where, args = [], []
    for cond, value in (("cluster = ?", cluster), ("attempt_end >= ?", since), ("attempt_end < ?", until),
                        ("terminal_state = ?", terminal_state)):
        if value is not None:
            where.append(cond)
            args.append(value)
    if node:
        where.append("(root_node = ? OR list_contains(affected_nodes, ?))")
        args += [node, node]
    sql = ("SELECT diagnosis_id, cluster, scheduler, job_id, attempt, attempt_end, terminal_state, sub_domain, "
           "confidence, root_node, affected_nodes, recommended_action, rules_version FROM diagnoses_api "
           + ("WHERE " + " AND ".join(where) if where else "")
           + " ORDER BY attempt_end DESC NULLS LAST, diagnosis_id LIMIT ? OFFSET ?")
    cols = ["diagnosis_id", "cluster", "scheduler", "job_id", "attempt", "attempt_end", "terminal_state",
            "sub_domain", "confidence", "root_node", "affected_nodes", "recommended_action", "rules_version"]
    items = [dict(zip(cols, r)) for r in _warehouse_rows(cfg, sql, args + [limit, offset])]
    for it in items:
        it["attempt_end"] = it["attempt_end"].isoformat() if it["attempt_end"] else None
    return items


_DIAGNOSES_API = """
WITH diagnoses_api AS (
SELECT d.diagnosis_id, d.cluster, d.scheduler, d.job_id, d.attempt, d.end_time AS attempt_end, d.terminal_state,
       d.sub_domain, d.confidence, d.root_node, list(a.node ORDER BY a.node) FILTER (WHERE a.node IS NOT NULL)
       AS affected_nodes, d.recommended_action, d.rules_version
FROM diagnoses d LEFT JOIN diagnosis_affected_nodes a USING (diagnosis_id)
GROUP BY ALL)
"""


def _warehouse_rows(cfg: Config, sql: str, args: list, quiet: bool = False) -> list[tuple]:
    """Read the warehouse briefly (writers are other processes: hold the file as little as possible)."""
    from warehouse.store import Warehouse, WarehouseLocked

    try:
        return Warehouse(cfg.warehouse, lock_wait_s=10).rows((_DIAGNOSES_API if "diagnoses_api" in sql else "") + sql, args)
    except WarehouseLocked:
        if quiet:
            return []
        raise HTTPException(503, "warehouse busy, retry", headers={"Retry-After": "2"}) from None
