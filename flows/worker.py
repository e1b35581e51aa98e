"""A warm Prefect worker: takes flow runs from the work pool and runs them in its own process.

Prefect's process worker starts a Python process per flow run (~4.7 s here, importing Prefect,
DuckDB and the rules each time), which dominates a small attempt. This worker polls the same work
pool, claims a scheduled run the way Prefect's workers do (proposing Pending: the server lets
exactly one worker win it), and runs it with Prefect's own engine (`run_flow`) in a thread of an
already-warm process. States, logs, retries and the UI are Prefect's, unchanged.

What Prefect's engine does per run that buys nothing in a warm process, and is done once instead
(each measured with tests/bench/trigger_storm.py, which counts the API calls):

- a heartbeat thread per run, joined for up to a second at its end: off for this worker's runs;
  the worker emits the same `prefect.flow-run.heartbeat` events itself, for every run in flight,
  from its polling loop, the first one a heartbeat interval after the claim (a run of seconds
  sends none: its Pending and Running events already say it is alive);
- a new API client per run (an SSL context, a connection, a CSRF token: a GET): each flow-run
  thread keeps one client and the run's settings for its whole life;
- the server's default result storage, read three times a run (GET /admin/storage) for results
  these flows never persist: read once a minute;
- a suspension observer per run (a thread with its own event loop, a client, a GET of the run and an
  events subscription, joined at the run's end) that notices a run suspended from outside: these
  flows never suspend (they run for seconds and wait for no input), so the watch is left out.

The trade: one crash takes the runs in flight with it (a process worker loses one). A run that
was in flight when its worker died stops sending heartbeats: the automations `attribution deploy`
applies mark it Crashed and schedule it again for any worker (flows/deployments.py); its attempt
had no diagnosis yet (a diagnosis is written in one transaction, at the end), or is diagnosed
again, which replaces it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # Prefect is imported when the worker starts, not when this module is
    from prefect.client.orchestration import SyncPrefectClient as PrefectClient
    from prefect.client.schemas.objects import FlowRun

log = logging.getLogger("attribution.worker")
# How often each run in flight says it is alive (Prefect's flow-run heartbeat event); the deployed
# automation marks a run Crashed when its heartbeats stop (flows/deployments.py).
HEARTBEAT_S = float(os.environ.get("ATTRIBUTION_HEARTBEAT_S", "30"))
# The longest wait between polls of an idle worker (the shortest is --poll): what an idle fleet
# adds to a new attempt's latency at most.
IDLE_POLL_S = float(os.environ.get("ATTRIBUTION_IDLE_POLL_S", "1"))
# the start time of a run scheduled without one: after every run that has one
NEVER = datetime.max.replace(tzinfo=timezone.utc)


class InProcessWorker:
    def __init__(
        self,
        pool: str,
        queues: list[str] | None = None,
        limit: int = 2,
        poll_s: float = 1.0,
        name: str | None = None,
        idle_poll_s: float = IDLE_POLL_S,
    ):
        self.pool, self.queues, self.limit, self.poll_s = pool, queues or None, max(1, limit), poll_s
        # Polls that find nothing wait twice as long each time, up to idle_poll_s: a poll is a write
        # on the Prefect server (the queue's last poll), which an idle fleet of workers polling every
        # 0.25 s turns into the server's main load (on SQLite: "database is locked" for the triggers).
        self.idle_poll_s = max(poll_s, idle_poll_s)
        self.name = name or f"attribution-{socket.gethostname()}-{threading.get_native_id()}"
        self._flows: dict[str, Any] = {}  # entrypoint -> Flow, loaded once: the warmth
        self._entrypoints: dict[str, str] = {}  # deployment id -> entrypoint
        self._running: dict[str, tuple[Future, Any]] = {}  # flow run id -> (future, flow run)
        self._beats: dict[str, float] = {}
        self.stop = threading.Event()

    def _flow_for(self, client: PrefectClient, flow_run: FlowRun) -> Any:
        from prefect.flows import load_flow_from_entrypoint

        if flow_run.deployment_id is None:  # only deployments' runs are scheduled on a work pool
            raise ValueError(f"flow run {flow_run.id} has no deployment")
        key = str(flow_run.deployment_id)
        if key not in self._entrypoints:
            entrypoint = client.read_deployment(flow_run.deployment_id).entrypoint
            if entrypoint is None:
                raise ValueError(f"deployment {key} has no entrypoint")
            self._entrypoints[key] = entrypoint
        entrypoint = self._entrypoints[key]
        if entrypoint not in self._flows:
            self._flows[entrypoint] = load_flow_from_entrypoint(entrypoint, use_placeholder_flow=False)
        return self._flows[entrypoint]

    def _claim(self, client: PrefectClient, flow_run: FlowRun) -> bool:
        from prefect.client.schemas import OrchestrationResult
        from prefect.client.schemas.objects import StateType
        from prefect.states import Pending

        result: OrchestrationResult[Any] = client.set_flow_run_state(flow_run.id, Pending())
        return result.state is not None and result.state.type == StateType.PENDING and result.status.value == "ACCEPT"

    def _execute(self, flow: Any, flow_run: FlowRun) -> None:
        from prefect.flow_engine import run_flow

        from workload_attribution.warehouse.backends import writes_coming

        started = time.monotonic()
        try:
            _thread_client()
            # while other runs are in flight, a warehouse file this run writes is kept attached for theirs
            with writes_coming():
                run_flow(flow, flow_run=flow_run, return_type="state")
        except BaseException:  # the engine has already recorded the run's failure in Prefect
            log.exception("flow run %s raised", flow_run.id)
        finally:
            log.info("flow run %s (%s) done in %.2f s", flow_run.id, flow_run.name, time.monotonic() - started)

    def _crash(self, client: PrefectClient, flow_run: FlowRun, exc: BaseException) -> None:
        from prefect.states import Crashed

        log.error("flow run %s could not start: %s: %s", flow_run.id, type(exc).__name__, exc)
        try:
            client.set_flow_run_state(
                flow_run.id, Crashed(message=f"worker could not start the run: {exc}"), force=True
            )
        except Exception:
            log.exception("could not mark flow run %s crashed", flow_run.id)

    def heartbeat(self, every_s: float = HEARTBEAT_S) -> None:
        """Prefect's flow-run heartbeat event for each run in flight (what its engine would send),
        `every_s` after its claim and then every `every_s`: the claim's Pending event and the run's
        Running event already start the automation's window (flows/deployments.py ALIVE), so a beat
        at once would be one more event for the server a run (most runs end within seconds)."""
        from prefect.events import emit_event

        now = time.monotonic()
        for run_id, (_, flow_run) in self._running.items():
            if now - self._beats.get(run_id, 0.0) >= every_s:
                emit_event(
                    event="prefect.flow-run.heartbeat",
                    resource={
                        "prefect.resource.id": f"prefect.flow-run.{run_id}",
                        "prefect.resource.name": flow_run.name or "",
                    },
                )
                self._beats[run_id] = now

    def poll_once(self, client: PrefectClient, pool: ThreadPoolExecutor) -> int | None:
        """Claim and start what the pool has for the free slots: how many started (None: no slot free, not polled)."""
        self._running = {k: v for k, v in self._running.items() if not v[0].done()}
        self._beats = {k: v for k, v in self._beats.items() if k in self._running}
        free = self.limit - len(self._running)
        if free <= 0:
            return None
        responses = self._scheduled(client, free)
        started = 0
        for resp in sorted(
            responses, key=lambda r: r.flow_run.next_scheduled_start_time or r.flow_run.expected_start_time or NEVER
        )[:free]:
            flow_run = resp.flow_run
            if str(flow_run.id) in self._running:
                continue
            try:
                if not self._claim(client, flow_run):
                    continue  # another worker won it
                flow = self._flow_for(client, flow_run)
            except Exception as exc:
                self._crash(client, flow_run, exc)
                continue
            self._running[str(flow_run.id)] = (pool.submit(self._execute, flow, flow_run), flow_run)
            self._beats[str(flow_run.id)] = time.monotonic()  # the claim's Pending event said it is alive
            started += 1
        return started

    def _scheduled(self, client: PrefectClient, free: int) -> list[Any]:
        """The pool's scheduled runs, the earliest first, at most `2 * free` of them (the server's
        order: queue priority, then scheduled start). Prefect's client asks for every scheduled
        run, up to 1,000: in a storm of 100 queued attempts each poll read, sent and validated all
        100 flow runs for the 1-4 slots free (~2% of the worker's busy samples, and a query and 100
        rows serialised on the server per poll). Twice the free slots leaves this worker runs to
        claim when another worker won the first ones."""
        from prefect.client.schemas.responses import WorkerFlowRunResponse

        body: dict[str, Any] = {
            "scheduled_before": str(datetime.now(timezone.utc) + timedelta(seconds=self.poll_s)),
            "limit": 2 * free,
        }
        if self.queues is not None:
            body["work_queue_names"] = list(self.queues)
        response = client.request(
            "POST", "/work_pools/{name}/get_scheduled_flow_runs", path_params={"name": self.pool}, json=body
        )
        response.raise_for_status()
        return WorkerFlowRunResponse.model_validate_list(response.json())

    def run(self) -> None:
        from prefect.client.orchestration import get_client

        _no_suspension_observer()
        _storage_lookup_cached()
        with (
            get_client(sync_client=True) as client,
            ThreadPoolExecutor(max_workers=self.limit, thread_name_prefix="flow-run", initializer=_warm_thread) as pool,
        ):
            last_beat, wait = 0.0, self.poll_s
            while not self.stop.is_set():
                now = time.monotonic()
                try:
                    if now - last_beat > 15:
                        client.send_worker_heartbeat(self.pool, self.name, heartbeat_interval_seconds=15)
                        last_beat = now
                    started = self.poll_once(client, pool)
                    wait = min(self.idle_poll_s, wait * 2) if started == 0 else self.poll_s
                    self.heartbeat()
                except Exception as exc:  # the server restarting must not end the worker
                    log.warning("polling %s failed: %s", self.pool, str(exc).splitlines()[0] if str(exc) else exc)
                self.stop.wait(wait)
            for fut, _ in list(self._running.values()):
                fut.result()


_THREAD_CONTEXTS: list[Any] = []  # kept: a context manager collected would exit


def _warm_thread() -> None:
    """Each flow-run thread, once: the settings its runs use (no engine heartbeat thread: the
    worker beats), for the thread's life."""
    from prefect.context import SettingsContext, get_settings_context
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY

    ctx = get_settings_context()  # what temporary_settings does, kept open
    settings = ctx.settings.copy_with_update(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None})
    kept = SettingsContext(profile=ctx.profile, settings=settings)
    kept.__enter__()
    _THREAD_CONTEXTS.append(kept)


def _thread_client() -> None:
    """One API client per flow-run thread, entered on its first run and kept (closed when the process
    ends): Prefect's engine takes the client in context (SyncClientContext.get_or_create) instead of
    opening one per run. Server unreachable now: this run's engine opens its own, as it would."""
    from prefect.context import SyncClientContext

    if SyncClientContext.get() is not None:
        return
    try:
        ctx = SyncClientContext()
        ctx.__enter__()
    except Exception as exc:
        log.warning("no API client kept for this thread yet: %s", str(exc).splitlines()[0] if str(exc) else exc)
        return
    _THREAD_CONTEXTS.append(ctx)


def _storage_lookup_cached(ttl_s: float = 60.0) -> None:
    """Prefect's engine asks the server for its default result storage three times a run (GET
    /admin/storage), for results these flows never persist; the answer is kept for ttl_s in this
    process, so a default an operator sets is still followed within a minute."""
    import prefect.results as results

    read = getattr(results, "_read_server_default_result_storage_block_id", None)
    if read is None or getattr(read, "cached", False):
        return
    lock = threading.Lock()
    kept: list[tuple[float, Any]] = []

    def cached() -> Any:
        with lock:
            if kept and time.monotonic() - kept[0][0] < ttl_s:
                return kept[0][1]
        value = read()
        with lock:
            kept[:] = [(time.monotonic(), value)]
        return value

    cached.cached = True  # type: ignore[attr-defined]
    results._read_server_default_result_storage_block_id = cached


def _no_suspension_observer() -> None:
    """Prefect's engine watches every deployment run for a suspension requested from outside (a
    thread, an event loop, a client, a read of the run and an events subscription, per run). The
    flows this worker runs never suspend; the watch is left out of this process."""
    from contextlib import nullcontext

    import prefect.flow_engine as engine

    if hasattr(engine, "observe_flow_run_suspension"):
        engine.observe_flow_run_suspension = lambda *a, **k: nullcontext()  # type: ignore[assignment]
