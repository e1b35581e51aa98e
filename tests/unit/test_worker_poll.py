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
