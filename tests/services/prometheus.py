"""A real Prometheus (Debian's 2.42 package, installed by .ci/run) with backfilled history.

Bundle metrics (.prom with millisecond timestamps) become OpenMetrics with second timestamps and
"# EOF", promtool writes TSDB blocks before the server starts (blocks written into a running
server only appear at the next reload), and retention is 100y (retention counts from the newest
block). Outside CI a missing binary skips the tests; in CI it fails them.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tests.waiting import wait_http

SAMPLE = re.compile(r"^(\S+?(?:\{.*\})?)\s+(\S+)\s+(\d+)\s*$")


def need(binary: str) -> str:
    path = shutil.which(binary)
    if path:
        return path
    if os.environ.get("CI"):
        pytest.fail(f"{binary} is not installed: .ci/run must install it")
    pytest.skip(f"{binary} not installed (apt-get install prometheus)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def to_openmetrics(prom_files: list[Path], out: Path) -> int:
    """Group samples by family (OpenMetrics wants families contiguous), ms -> s, end with # EOF."""
    families: dict[str, list[str]] = {}
    for f in prom_files:
        for line in f.read_text().splitlines():
            m = SAMPLE.match(line)
            if not m or line.startswith("#"):
                continue
            name = m.group(1).split("{", 1)[0]
            families.setdefault(name, []).append(f"{m.group(1)} {m.group(2)} {int(m.group(3)) / 1000:.3f}")
    n = 0
    with out.open("w") as o:
        for name, lines in families.items():
            o.write(f"# TYPE {name} gauge\n")
            o.write("\n".join(lines) + "\n")
            n += len(lines)
        o.write("# EOF\n")
    return n


class Prometheus:
    def __init__(self, base: Path, prom_files: list[Path]):
        self.base = base
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.prom_files = prom_files

    def start(self) -> Prometheus:
        prometheus, promtool = need("prometheus"), need("promtool")
        data = self.base / "data"
        data.mkdir(parents=True, exist_ok=True)
        om = self.base / "history.om"
        to_openmetrics(self.prom_files, om)
        subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        cfg = self.base / "prometheus.yml"
        cfg.write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
        self.log = (self.base / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [
                prometheus,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={data}",
                "--storage.tsdb.retention.time=100y",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_http(f"{self.url}/-/ready", "Prometheus to be ready", 60, self.proc, self.base / "prometheus.log")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
