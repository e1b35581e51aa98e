"""`attribution ...` with its Prefect API calls counted (a bench helper, never used in production).

    python -m tests.bench.apicount OUT.json worker --limit 4
    APICOUNT_FLOWS_FROM=/tmp/old-flows python -m tests.bench.apicount OUT.json worker   # other flows/*.py

Runs the CLI in this process after wrapping httpx's send (sync and async: every REST call the
Prefect client makes) and Prefect's events worker (every event, the task runs' state changes
among them: they travel on one websocket, not as REST calls). Every second, and at exit, OUT.json
holds the counts so far: {"http": {"POST /flow_runs/{id}/set_state": n, ...}, "events": {...}}.
A bench reads it before and after a storm and divides the difference by the attempts diagnosed.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import sys
import threading
from collections import Counter
from pathlib import Path

ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_http: Counter[str] = Counter()
_events: Counter[str] = Counter()
_lock = threading.Lock()


API = os.environ.get("PREFECT_API_URL", "").rstrip("/")


def route(method: str, url: str) -> str | None:
    """`METHOD /path` of a call to the Prefect API (ids as {id}); None for any other host's."""
    if not API or not url.startswith(API + "/"):
        return None
    return f"{method} {ID.sub('{id}', url[len(API) :].split('?', 1)[0])}"


def install() -> None:
    import httpx
    from prefect.events.worker import EventsWorker

    sync_send, async_send = httpx.Client.send, httpx.AsyncClient.send

    def count(request) -> None:
        r = route(request.method, str(request.url))
        if r:
            with _lock:
                _http[r] += 1

    def send(self, request, *args, **kw):
        count(request)
        return sync_send(self, request, *args, **kw)

    async def asend(self, request, *args, **kw):
        count(request)
        return await async_send(self, request, *args, **kw)

    httpx.Client.send = send  # type: ignore[method-assign]
    httpx.AsyncClient.send = asend  # type: ignore[method-assign]
    ev_send = EventsWorker.send

    def send_event(self, item, *args, **kw):
        with _lock:
            _events[getattr(item, "event", "?")] += 1
        return ev_send(self, item, *args, **kw)

    EventsWorker.send = send_event  # type: ignore[method-assign]


def dump(out: Path) -> None:
    with _lock:
        doc = {"pid": os.getpid(), "http": dict(_http), "events": dict(_events)}
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
    tmp.replace(out)


def load_flows_from(directory: str) -> None:
    """Modules of workload_attribution.flows taken from another directory (e.g. an older commit's
    flows/worker.py and flows/attempt.py, for a before/after measurement on one installation)."""
    import importlib.util

    import workload_attribution.flows

    for path in sorted(Path(directory).glob("*.py")):
        name = f"workload_attribution.flows.{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        setattr(workload_attribution.flows, path.stem, module)


def main() -> int:
    out = Path(sys.argv[1])
    if os.environ.get("APICOUNT_FLOWS_FROM"):
        load_flows_from(os.environ["APICOUNT_FLOWS_FROM"])
    install()
    atexit.register(dump, out)
    stop = threading.Event()

    def every_second():
        while not stop.wait(1.0):
            dump(out)

    threading.Thread(target=every_second, daemon=True).start()
    from workload_attribution.cli import main as cli

    try:
        return cli(sys.argv[2:]) or 0
    finally:
        stop.set()
        dump(out)


if __name__ == "__main__":
    sys.exit(main())
