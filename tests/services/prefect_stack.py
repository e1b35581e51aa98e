"""The production shape on one machine: a real `prefect server start` on 127.0.0.1, the project's
deployments applied with `attribution deploy`, one `attribution worker` (warm, runs flow runs in its own process) and
`attribution serve`, each its own process, the way deployments/README.md tells operators to run them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.services.prometheus import free_port

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-token-7f3a"
SECRET = "test-webhook-secret-91c2"


def _wait(url: str, what: str, proc: subprocess.Popen, log: Path, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{what} not ready after {seconds}s: {log.read_text()[-2000:]}")


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
        self, base: Path, config: Path, extra_env: dict[str, str] | None = None, worker_args: list[str] | None = None
    ):
        self.base, self.config = base, config
        self.worker_args = worker_args or ["--limit", "4"]
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

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        log = self.base / f"{name}.log"
        p = subprocess.Popen(
            args, cwd=ROOT, env=self.env, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True
        )
        self.procs[name] = p
        return p

    def log(self, name: str) -> str:
        return (self.base / f"{name}.log").read_text(errors="replace")

    def start(self) -> PrefectStack:
        attribution = [sys.executable, "-m", "workload_attribution"]
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
        )
        _wait(f"{self.prefect_url}/health", "prefect server", server, self.base / "server.log", 120)
        deploy = subprocess.run(
            [*attribution, "deploy"], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=180
        )
        if deploy.returncode != 0:
            raise RuntimeError(f"attribution deploy failed: {deploy.stdout[-2000:]}{deploy.stderr[-2000:]}")
        self._spawn("worker", [*attribution, "worker", *self.worker_args])
        service = self._spawn("service", [*attribution, "serve", "--port", str(self.api_port)])
        _wait(f"{self.url}/healthz", "attribution serve", service, self.base / "service.log", 60)
        return self

    def client_settings(self):
        """This test process as a Prefect client of the stack's server (settings are cached: the
        environment alone would not switch them)."""
        from prefect.settings import PREFECT_API_URL, temporary_settings

        return temporary_settings({PREFECT_API_URL: self.prefect_url})

    def stop(self) -> None:
        for name in ("service", "worker", "server"):
            _stop(self.procs.get(name))
