"""The warm worker's poll asks the server for as many scheduled runs as it can start, not for all."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class _Response:
    def raise_for_status(self) -> None:
        pass

    def json(self) -> list[Any]:
        return []


class _Client:
    """What the poll sends to the Prefect server, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def request(self, method: str, path: str, path_params: dict[str, Any], json: dict[str, Any]) -> _Response:
        self.calls.append((method, path.format(**path_params), dict(json)))
        return _Response()


def _busy(n: int) -> dict[str, tuple[Future, Any]]:
    out: dict[str, tuple[Future, Any]] = {}
    for i in range(n):
        out[f"run-{i}"] = (Future(), None)  # never done: a slot taken
    return out


def test_a_poll_asks_for_twice_the_free_slots_and_no_poll_when_none_is_free():
    from workload_attribution.flows.worker import InProcessWorker

    worker = InProcessWorker("attribution", queues=["triggers"], limit=4)
    client = _Client()
    with ThreadPoolExecutor(1) as pool:
        assert worker.poll_once(client, pool) == 0  # type: ignore[arg-type]
        worker._running = _busy(3)
        assert worker.poll_once(client, pool) == 0  # type: ignore[arg-type]
        worker._running = _busy(4)
        assert worker.poll_once(client, pool) is None  # type: ignore[arg-type]
    assert [(m, p) for m, p, _ in client.calls] == [("POST", "/work_pools/attribution/get_scheduled_flow_runs")] * 2
    assert [body["limit"] for _, _, body in client.calls] == [8, 2]
    assert all(body["work_queue_names"] == ["triggers"] and body["scheduled_before"] for _, _, body in client.calls)


def test_a_claimed_run_beats_a_heartbeat_interval_after_its_claim_not_at_once(monkeypatch):
    """The claim (Pending) and the start (Running) already tell the zombie automation the run is
    alive: its first heartbeat event leaves one interval later, then every interval."""
    import threading
    from types import SimpleNamespace

    from workload_attribution.flows.worker import InProcessWorker

    worker = InProcessWorker("attribution", limit=1)
    run = SimpleNamespace(id="run-1", name="k8s-team-a", next_scheduled_start_time=None, expected_start_time=None)
    ended = threading.Event()
    monkeypatch.setattr(worker, "_scheduled", lambda client, free: [SimpleNamespace(flow_run=run)])
    monkeypatch.setattr(worker, "_claim", lambda client, flow_run: True)
    monkeypatch.setattr(worker, "_flow_for", lambda client, flow_run: object())
    monkeypatch.setattr(worker, "_execute", lambda flow, flow_run: ended.wait(10))
    emitted: list[dict[str, Any]] = []
    monkeypatch.setattr("prefect.events.emit_event", lambda **kw: emitted.append(kw))
    with ThreadPoolExecutor(1) as pool:
        try:
            assert worker.poll_once(None, pool) == 1  # type: ignore[arg-type]
            worker.heartbeat(every_s=30)
            assert emitted == []
            worker._beats["run-1"] -= 31  # an interval later
            worker.heartbeat(every_s=30)
            worker.heartbeat(every_s=30)
        finally:
            ended.set()
    assert [(e["event"], e["resource"]["prefect.resource.id"]) for e in emitted] == [
        ("prefect.flow-run.heartbeat", "prefect.flow-run.run-1")
    ]
