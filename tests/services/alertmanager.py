"""A real Alertmanager (Debian's prometheus-alertmanager 0.25, installed by .ci/run) on loopback,
with its own storage and cluster port, routing every alert to a receiver that drops it (the test
reads alerts back from its API, as an operator's tooling would)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx

from tests.services.prometheus import free_port, need
from tests.waiting import wait_http

CONFIG = """\
route:
  receiver: "null"
  group_by: ["cluster", "node"]
  group_wait: 1s
receivers:
  - name: "null"
"""


class Alertmanager:
    def __init__(self, base: Path):
        self.base = base
        self.port, self.cluster_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Alertmanager:
        binary = need("prometheus-alertmanager")
        self.base.mkdir(parents=True, exist_ok=True)
        config = self.base / "alertmanager.yml"
        config.write_text(CONFIG)
        log = self.base / "alertmanager.log"
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.path={self.base / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--cluster.listen-address=127.0.0.1:{self.cluster_port}",
            ],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        try:
            wait_http(f"{self.url}/-/ready", "Alertmanager to be ready", 60, self.proc, log)
        except BaseException:
            self.stop()
            raise
        return self

    def alerts(self, **filters: str) -> list[dict[str, Any]]:
        """GET /api/v2/alerts (active and resolved-but-not-yet-gone), filtered by label=value."""
        params = [("filter", f'{k}="{v}"') for k, v in filters.items()]
        r = httpx.get(f"{self.url}/api/v2/alerts", params=params, timeout=10)
        r.raise_for_status()
        return list(r.json())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
