"""A warm Prefect worker: takes flow runs from the work pool and runs them in its own process.

Prefect's process worker starts a Python process per flow run (~4.7 s here, importing Prefect,
DuckDB and the rules each time), which dominates a small attempt. This worker polls the same work
pool, claims a scheduled run the way Prefect's workers do (proposing Pending: the server lets
exactly one worker win it), and runs it with Prefect's own engine (`run_flow`) in a thread of an
already-warm process. States, logs, retries and the UI are Prefect's, unchanged.

Prefect's sync engine gives each run a heartbeat thread and waits up to a second for it to stop
(~0.5 s a run here); this worker turns that thread off for its runs and emits the same
`prefect.flow-run.heartbeat` events itself, for every run in flight, from its polling loop.

The trade: one crash takes the runs in flight with it (a process worker loses one). A run that
was in flight when its worker died is left Running in Prefect; its attempt has no diagnosis in the
warehouse (a diagnosis is written in one transaction, at the end), so the next backfill finds it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any

log = logging.getLogger("attribution.worker")
# How often each run in flight says it is alive (Prefect's flow-run heartbeat event); the deployed
# automation marks a run Crashed when its heartbeats stop (flows/deployments.py).
HEARTBEAT_S = float(os.environ.get("ATTRIBUTION_HEARTBEAT_S", "30"))


class InProcessWorker:
    def __init__(
        self, pool: str, queues: list[str] | None = None, limit: int = 2, poll_s: float = 1.0, name: str | None = None
    ):
        self.pool, self.queues, self.limit, self.poll_s = pool, queues or None, max(1, limit), poll_s
        self.name = name or f"attribution-{socket.gethostname()}-{threading.get_native_id()}"
        self._flows: dict[str, Any] = {}  # entrypoint -> Flow, loaded once: the warmth
        self._entrypoints: dict[str, str] = {}  # deployment id -> entrypoint
        self._running: dict[str, tuple[Future, Any]] = {}  # flow run id -> (future, flow run)
        self._beats: dict[str, float] = {}
        self.stop = threading.Event()

    def _flow_for(self, client, flow_run) -> Any:
        from prefect.flows import load_flow_from_entrypoint

        key = str(flow_run.deployment_id)
        if key not in self._entrypoints:
            self._entrypoints[key] = client.read_deployment(flow_run.deployment_id).entrypoint
        entrypoint = self._entrypoints[key]
        if entrypoint not in self._flows:
            self._flows[entrypoint] = load_flow_from_entrypoint(entrypoint, use_placeholder_flow=False)
        return self._flows[entrypoint]

    def _claim(self, client, flow_run) -> bool:
        from prefect.client.schemas.objects import StateType
        from prefect.states import Pending

        result = client.set_flow_run_state(flow_run.id, Pending())
        return result.state is not None and result.state.type == StateType.PENDING and result.status.value == "ACCEPT"

    def _execute(self, flow, flow_run) -> None:
        from prefect.flow_engine import run_flow
        from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

        started = time.monotonic()
        try:
            with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):  # the worker beats (heartbeat())
                run_flow(flow, flow_run=flow_run, return_type="state")
        except BaseException:  # the engine has already recorded the run's failure in Prefect
            log.exception("flow run %s raised", flow_run.id)
        finally:
            log.info("flow run %s (%s) done in %.2f s", flow_run.id, flow_run.name, time.monotonic() - started)

    def _crash(self, client, flow_run, exc: BaseException) -> None:
        from prefect.states import Crashed

        try:
            client.set_flow_run_state(
                flow_run.id, Crashed(message=f"worker could not start the run: {exc}"), force=True
            )
        except Exception:
            log.exception("could not mark flow run %s crashed", flow_run.id)

    def heartbeat(self, every_s: float = HEARTBEAT_S) -> None:
        """Prefect's flow-run heartbeat event for each run in flight (what its engine would send)."""
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

    def poll_once(self, client, pool: ThreadPoolExecutor) -> int:
        self._running = {k: v for k, v in self._running.items() if not v[0].done()}
        self._beats = {k: v for k, v in self._beats.items() if k in self._running}
        free = self.limit - len(self._running)
        if free <= 0:
            return 0
        responses = client.get_scheduled_flow_runs_for_work_pool(
            work_pool_name=self.pool,
            work_queue_names=self.queues,
            scheduled_before=datetime.now(timezone.utc) + timedelta(seconds=self.poll_s),
        )
        started = 0
        for resp in sorted(
            responses, key=lambda r: r.flow_run.next_scheduled_start_time or r.flow_run.expected_start_time
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
            started += 1
        return started

    def run(self) -> None:
        from prefect.client.orchestration import get_client

        with (
            get_client(sync_client=True) as client,
            ThreadPoolExecutor(max_workers=self.limit, thread_name_prefix="flow-run") as pool,
        ):
            last_beat = 0.0
            while not self.stop.is_set():
                now = time.monotonic()
                try:
                    if now - last_beat > 15:
                        client.send_worker_heartbeat(self.pool, self.name, heartbeat_interval_seconds=15)
                        last_beat = now
                    self.poll_once(client, pool)
                    self.heartbeat()
                except Exception as exc:  # the server restarting must not end the worker
                    log.warning("polling %s failed: %s", self.pool, str(exc).splitlines()[0] if str(exc) else exc)
                self.stop.wait(self.poll_s)
            for fut, _ in list(self._running.values()):
                fut.result()
