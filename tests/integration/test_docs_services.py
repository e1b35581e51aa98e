"""The documentation's blocks that need Prefect and the service (tests/doc_blocks.py has the
convention): the one `services, start` block (deployments/README.md, "One machine") run as written
in a sandbox, with the ports 4200 and 8080 replaced by free ones and its last command (the service,
in the foreground for an operator) in the background; then every `services` block, in the
documents' order, against what it started, with its exported environment, outputs compared."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.doc_blocks import DOCS, Sandbox, all_blocks, blocks, failure, output_diff, output_matches
from tests.services.prefect_stack import _stop
from tests.services.prometheus import free_port
from tests.waiting import wait_file, wait_http

# the documented ports and what answers on each once it is up
HEALTH = {4200: "/api/health", 8080: "/healthz"}


@dataclass
class Started:
    sandbox: Sandbox
    ports: dict[int, int]
    env_file: Path

    def with_ports(self, text: str) -> str:
        return re.sub(r"\b(4200|8080)\b", lambda m: str(self.ports[int(m[1])]), text)

    def run(self, text: str) -> subprocess.CompletedProcess[str]:
        return self.sandbox.run(f'source "{self.env_file}"\n' + self.with_ports(text))


def in_background(script: str) -> str:
    """The script with its last command ended by `&` (before its comment, if any)."""
    lines = script.rstrip("\n").splitlines()
    last = max(i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#"))
    command, _, comment = lines[last].partition("  #")
    lines[last] = f"{command.rstrip()} &" + (f"  #{comment}" if comment else "")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    missing = [tool for tool in ("curl", "openssl") if shutil.which(tool) is None]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"the documented commands need {' and '.join(missing)}")
        pytest.skip(f"not installed: {' '.join(missing)}")
    (start,) = [b for b in all_blocks() if b.kind == "services" and b.arg == "start"]
    base = tmp_path_factory.mktemp("docs-services")
    s = Started(Sandbox(base), {port: free_port() for port in HEALTH}, base / "started.env")
    log = base / "start.log"
    script = in_background(s.with_ports(start.text)) + f'export -p > "{s.env_file}"\nwait\n'
    proc = subprocess.Popen(
        ["bash", "-c", "set -eo pipefail\n" + script],
        cwd=s.sandbox.cwd,
        env=s.sandbox.env,
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        for port, path in HEALTH.items():
            wait_http(f"http://127.0.0.1:{s.ports[port]}{path}", f"{start.where}: port {port}", 180, proc, log)
        wait_file(s.env_file, 30, f"{start.where} to end")
        yield s
    finally:
        _stop(proc)


def test_blocks_run_against_the_services_the_start_block_started(started: Started) -> None:
    problems: list[str] = []
    ran = 0
    for doc in DOCS:
        printed: subprocess.CompletedProcess[str] | None = None
        for b in blocks(doc):
            if b.kind == "services" and b.arg != "start":
                printed = started.run(b.text)
                ran += 1
                if printed.returncode != 0:
                    problems.append(failure(b, f"exited {printed.returncode}", printed))
            elif b.kind == "output" and printed is not None and not output_matches(b.text, printed.stdout):
                problems.append(f"{b.where}: the output differs\n{output_diff(b.text, printed.stdout)}")
            else:
                printed = None
    assert ran >= 2 and problems == [], "\n\n".join(problems)
