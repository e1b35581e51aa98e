"""The service a scheduler's trigger talks to, for the triggers' tests: the real app on a free port
(each scheduler's webhook route, its body model, the HMAC check), Prefect stood in by a recorder of
the flow runs asked for; and the configuration deployments/notify/attribution-notify reads."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import ROOT
from tests.services.prometheus import free_port
from tests.waiting import wait_until

NOTIFY = ROOT / "deployments" / "notify" / "attribution-notify"
SECRET = "trigger-test-secret"


@dataclass
class Recorder:
    """Prefect stand-in: the flow runs the service asked for, by idempotency key."""

    runs: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    async def start(self, key: str, parameters: dict[str, Any], tags: list[str]) -> tuple[str, bool]:
        self.runs.append((key, parameters))
        return f"run-{len(self.runs)}", False

    async def reset(self) -> None:
        pass


@dataclass
class Service:
    url: str
    recorder: Recorder
    outbox: Path

    def keys(self) -> list[str]:
        return [key for key, _ in self.recorder.runs]


@contextmanager
def service(tmp_path: Path, clusters: dict[str, Any]) -> Iterator[Service]:
    """`attribution serve` with these clusters, its webhook secret SECRET, until the block ends."""
    import uvicorn

    from workload_attribution.flows.config import Config
    from workload_attribution.service.app import create_app

    outbox = tmp_path / "outbox"
    cfg = Config(warehouse="", clusters=clusters, service={"outbox_dir": str(outbox)})
    saved = os.environ.get("ATTRIBUTION_WEBHOOK_SECRET")
    os.environ["ATTRIBUTION_WEBHOOK_SECRET"] = SECRET
    try:
        recorder = Recorder()
        app = create_app(cfg, recorder)
    finally:
        if saved is None:
            os.environ.pop("ATTRIBUTION_WEBHOOK_SECRET", None)
        else:
            os.environ["ATTRIBUTION_WEBHOOK_SECRET"] = saved
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, "the service to start")
    try:
        yield Service(f"http://127.0.0.1:{port}", recorder, outbox)
    finally:
        server.should_exit = True
        thread.join(10)


def notify_config(tmp_path: Path, url: str, cluster: str = "") -> dict[str, str]:
    """attribution-notify's configuration (its url, the secret in a file, a spool of its own), as the
    environment a trigger runs it with."""
    secret = tmp_path / "webhook.secret"
    secret.write_text(SECRET + "\n")
    conf = tmp_path / "attribution-notify.conf"
    lines = [f"url = {url}", f"secret_file = {secret}", f"spool_dir = {tmp_path / 'spool'}"]
    conf.write_text("\n".join([*lines, *([f"cluster = {cluster}"] if cluster else [])]) + "\n")
    return {"ATTRIBUTION_NOTIFY_CONFIG": str(conf), "ATTRIBUTION_NOTIFY": str(NOTIFY)}


def spooled(tmp_path: Path) -> list[str]:
    """The notices still waiting in the spool (delivered ones are removed, refused ones moved aside)."""
    spool = tmp_path / "spool"
    return sorted(p.name for p in spool.glob("*.json")) if spool.is_dir() else []
