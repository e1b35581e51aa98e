"""The production shape on one machine: a real `prefect server start` on 127.0.0.1, the project's
deployments applied with `attribution deploy`, one `attribution worker` (warm, runs flow runs in its
own process) and `attribution serve`, each its own process, the way deployments/README.md tells
operators to run them. The project's processes run from the built wheel in a fresh virtualenv
(tests/services/wheel.py), started from `/`: nothing of the checkout is on their path.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.services.prometheus import free_port
from tests.waiting import wait_http, wait_until

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-token-7f3a"
SECRET = "test-webhook-secret-91c2"


def _wait(url: str, what: str, proc: subprocess.Popen, log: Path, seconds: float = 90) -> None:
    wait_http(url, f"{what} to answer {url}", seconds, proc, log)


def server_settings() -> dict[str, str]:
    """The Prefect server's environment operators give it: deployments/prefect-server.env."""
    from workload_attribution.flows.deployments import SERVER_SETTINGS

    return dict(SERVER_SETTINGS)


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGINT, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


class PrefectStack:
    def __init__(
        self,
        base: Path,
        config: Path,
        extra_env: dict[str, str] | None = None,
        worker_args: list[str] | None = None,
        bin_dir: Path | None = None,
        deploy_args: list[str] | None = None,
    ):
        self.base, self.config = base, config
        self.worker_args = worker_args or ["--limit", "4"]
        self.deploy_args = deploy_args or []
        # the project's own processes: the wheel's venv when given, else this interpreter
        self.attribution = [str(bin_dir / "python") if bin_dir else sys.executable, "-m", "workload_attribution"]
        self.cwd = "/" if bin_dir else str(ROOT)
        self.server_port, self.api_port = free_port(), free_port()
        self.prefect_url = f"http://127.0.0.1:{self.server_port}/api"
        self.url = f"http://127.0.0.1:{self.api_port}"
        self.env = {
            **os.environ,
            **(extra_env or {}),
            "PREFECT_HOME": str(base / "prefect-home"),
            "PREFECT_API_URL": self.prefect_url,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_WORKER_QUERY_SECONDS": "1",
            "PREFECT_WORKER_PREFETCH_SECONDS": "5",
            "PREFECT_LOGGING_LEVEL": "INFO",
            "ATTRIBUTION_CONFIG": str(config),
            "ATTRIBUTION_API_TOKEN": TOKEN,
            "ATTRIBUTION_WEBHOOK_SECRET": SECRET,
            "XDG_STATE_HOME": str(base / "state"),
        }
        self.procs: dict[str, subprocess.Popen] = {}

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        log = self.base / f"{name}.log"
        p = subprocess.Popen(
            args,
            cwd=self.cwd,
            env={**self.env, **(env or {})},
            stdout=open(log, "ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs[name] = p
        return p

    def log(self, name: str) -> str:
        return (self.base / f"{name}.log").read_text(errors="replace")

    def start(self) -> PrefectStack:
        self.start_server()
        deploy = subprocess.run(
            [*self.attribution, "deploy", *self.deploy_args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        if deploy.returncode != 0:
            raise RuntimeError(f"attribution deploy failed: {deploy.stdout[-2000:]}{deploy.stderr[-2000:]}")
        self.start_worker()
        self.start_service()
        return self

    def start_server(self) -> subprocess.Popen:
        """`prefect server start` on the stack's port (again: its database is kept in PREFECT_HOME),
        with the settings deployments/prefect-server.env gives it."""
        server = self._spawn(
            "server",
            [
                sys.executable,
                "-m",
                "prefect",
                "server",
                "start",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.server_port),
                "--no-ui",
            ],
            env=server_settings(),
        )
        _wait(f"{self.prefect_url}/health", "prefect server", server, self.base / "server.log", 120)
        return server

    def start_worker(self, name: str = "worker", env: dict[str, str] | None = None) -> subprocess.Popen:
        """`attribution worker` (another one: a name of its own, and its environment)."""
        return self._spawn(name, [*self.attribution, "worker", *self.worker_args], env)

    def start_service(
        self, name: str = "service", port: int | None = None, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        """`attribution serve` (another one: a name, its own port and environment)."""
        port = port or self.api_port
        service = self._spawn(name, [*self.attribution, "serve", "--port", str(port)], env)
        _wait(f"http://127.0.0.1:{port}/healthz", "attribution serve", service, self.base / f"{name}.log", 60)
        return service

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Signal a process of the stack (its whole session) and wait for it to end."""
        proc = self.procs[name]
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        proc.wait(60)

    def pause(self, name: str) -> None:
        """Stop a process of the stack (SIGSTOP, its whole session) where it stands: it changes no
        state until resumed or killed."""
        os.killpg(self.procs[name].pid, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        os.killpg(self.procs[name].pid, signal.SIGCONT)

    def restore(self) -> None:
        """Start again the server, worker or service a test stopped and left down (one that failed
        midway): the next test finds the stack whole, and fails only for its own reasons."""
        for name, start in (
            ("server", self.start_server),
            ("worker", self.start_worker),
            ("service", self.start_service),
        ):
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is not None:
                start()

    def client_settings(self):
        """This test process as a Prefect client of the stack's server (settings are cached: the
        environment alone would not switch them)."""
        from prefect.settings import PREFECT_API_URL, temporary_settings

        return temporary_settings({PREFECT_API_URL: self.prefect_url})

    def stop(self) -> None:
        for name in [n for n in self.procs if n != "server"] + ["server"]:
            _stop(self.procs.get(name))


def diagnoses(stack: PrefectStack, **filters) -> list[dict]:
    """Every diagnosis GET /v1/diagnoses lists for the filters (all pages)."""
    items: list[dict] = []
    while True:
        r = httpx.get(
            f"{stack.url}/v1/diagnoses",
            params={**filters, "limit": 1000, "offset": len(items)},
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=30,
        )
        r.raise_for_status()
        page = r.json()["items"]
        items += page
        if len(page) < 1000:
            return items


def wait_diagnosis(stack: PrefectStack, timeout: float = 180, job_id: str | None = None, **filters) -> dict:
    """The newest diagnosis for the filters (and job id), once there is one."""

    def found() -> list[dict]:
        try:
            return [i for i in diagnoses(stack, **filters) if job_id is None or i["job_id"] == job_id]
        except httpx.HTTPError:
            return []  # the service is restarting

    items = wait_until(
        found,
        f"a diagnosis for {filters} {job_id or ''}",
        timeout,
        seen=lambda: "worker log:\n" + stack.log("worker")[-4000:],
    )
    return items[0]


def metrics(stack: PrefectStack) -> dict[str, float]:
    """GET /metrics as {'name{labels}': value} (a counter never seen reads as 0)."""
    from collections import defaultdict

    out: dict[str, float] = defaultdict(float)
    for line in httpx.get(f"{stack.url}/metrics", timeout=30).text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def flow_runs(stack) -> list:
    """Every flow run of the attempt deployment, as Prefect has them (read in pages; `stack` is any
    stack with `client_settings()`)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    async def read():
        async with get_client() as client:
            dep = await client.read_deployment_by_name("attribute-attempt/attempt")
            out, offset = [], 0
            while True:
                page = await client.read_flow_runs(
                    deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[dep.id])), limit=200, offset=offset
                )
                out += page
                if len(page) < 200:
                    return out
                offset += 200

    with stack.client_settings():
        return asyncio.run(read())
