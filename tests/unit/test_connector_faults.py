"""The connector fault matrix: every HTTP connector x every way a source fails on the worst day.

Each case runs the whole inline story (scope -> collect with the retry policy -> store -> rules ->
diagnosis) for an attempt whose one live source misbehaves, and asserts: the coverage status and
its reason, a bound on the time spent, and that a diagnosis came out. The faults are played on a
real socket by tests/services/fault_server.py (real Prometheus and Slurm run in the connector
tests, but cannot be told to answer 503 or drip a byte a second); refused and DNS failures are real.
Retry delays are shortened here; the number of attempts is the production one.
"""

from __future__ import annotations

import socket
import time
from datetime import datetime, timezone

import pytest

from tests.services.fault_server import FaultServer
from workload_attribution.connectors.clusters import ClusterConfig
from workload_attribution.connectors.kueue import KueueSource, discover_failed
from workload_attribution.connectors.loki import LokiSource
from workload_attribution.connectors.prometheus import PrometheusSource
from workload_attribution.connectors.slurm import SlurmSource
from workload_attribution.contracts.identity import Target
from workload_attribution.contracts.models import AttemptScope
from workload_attribution.flows import inline
from workload_attribution.flows.pipeline import Options, attribute_story
from workload_attribution.rules.pack import default_pack
from workload_attribution.staging.attempt import create_staging
from workload_attribution.tasks import steps

NODES = ["gpu-a01", "gpu-a02"]
START = datetime(2026, 11, 20, 10, 0, tzinfo=timezone.utc)
END = datetime(2026, 11, 20, 10, 40, tzinfo=timezone.utc)
TIMEOUT_S = 0.5
ATTEMPTS = 1 + len(inline.RETRY_DELAYS_S)


def _answer(connector: str, endless: bool):
    """What each API answers when it works: empty results, or pages that never end."""

    def answer(path: str, query: dict):
        if connector == "prometheus":
            return 200, {"status": "success", "data": {"resultType": "matrix", "result": []}}
        if connector == "loki":
            if path.endswith("/series"):
                return 200, {"status": "success", "data": [{"host": h} for h in NODES] if endless else []}
            if not endless:
                return 200, {"status": "success", "data": {"resultType": "streams", "result": []}}
            start, limit = int(query["start"][0]), int(query["limit"][0])
            values = [[str(start + i + 1), f"kernel: line {start + i}"] for i in range(limit)]
            return 200, {
                "status": "success",
                "data": {"resultType": "streams", "result": [{"stream": {"host": NODES[0]}, "values": values}]},
            }
        if connector == "slurm":
            if path == "/openapi":
                return 200, {"paths": {"/slurm/v0.0.39/job/{job_id}": {}, "/slurmdb/v0.0.39/job/{job_id}": {}}}
            return 200, {"jobs": [], "errors": []}
        if connector == "kueue":
            return 404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}
        raise AssertionError(connector)

    return answer


def _cluster(connector: str, url: str) -> tuple[ClusterConfig, str, str]:
    """(cluster config, scheduler, the source name whose coverage the case checks)"""
    if connector == "prometheus":
        return (
            ClusterConfig(scheduler="static", sources={"metrics": PrometheusSource(url=url, timeout_s=TIMEOUT_S)}),
            "static",
            "metrics",
        )
    if connector == "loki":
        return (
            ClusterConfig(
                scheduler="static",
                sources={
                    "syslog": LokiSource(
                        url=url,
                        selector='{job="syslog", host=~"{hosts}"}',
                        timeout_s=TIMEOUT_S,
                        limit=100,
                        max_pages=25,
                    )
                },
            ),
            "static",
            "syslog",
        )
    if connector == "slurm":
        return ClusterConfig(scheduler="slurm", slurm=SlurmSource(rest_url=url, timeout_s=TIMEOUT_S)), "slurm", "sacct"
    if connector == "kueue":
        return (
            ClusterConfig(
                scheduler="kueue", kueue=KueueSource(url=url, namespace="team-a", token_env=None, timeout_s=TIMEOUT_S)
            ),
            "kueue",
            "kueue",
        )
    raise AssertionError(connector)


class PreScoped(inline.InlineRunner):
    """The attempt is already scoped (the fault is in collecting, not in scoping)."""

    def __init__(self, pool, scoped):
        super().__init__(pool)
        self.scoped = scoped

    def scope(self, target, cluster):
        return self.scoped


def diagnose_with(connector: str, url: str):
    from concurrent.futures import ThreadPoolExecutor

    cluster, scheduler, source = _cluster(connector, url)
    scope = AttemptScope(
        cluster="lab",
        scheduler=scheduler,
        job_id="4242" if scheduler != "kueue" else "train-7",
        attempt=0,
        nodes=NODES,
        start=START,
        end=END,
        state="FAILED",
    )
    sources = {"slurm": {"sacct": ("slurm", cluster.slurm)}, "kueue": {"kueue": ("kubernetes", cluster.kueue)}}.get(
        scheduler, {}
    ) | {name: (cfg.connector, cfg) for name, cfg in cluster.sources.items()}
    scoped = steps.ScopedAttempt(scope=scope, staging=create_staging(scope), sources=sources)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=4) as pool:
        d = attribute_story(
            PreScoped(pool, scoped), Target(cluster="lab", job_id=scope.job_id), Options(pack=default_pack())
        )
    cov = {c.source: c for c in d.coverage}[source]
    return d, cov, time.monotonic() - started


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


CONNECTORS = ["prometheus", "loki", "slurm", "kueue"]
# fault -> (expected status, words the reason must contain, upper bound in seconds)
RETRIED = ATTEMPTS * TIMEOUT_S + 3
FAULTS = {
    "refused": ("error", ["failed after retries", "ConnectError"], 5),
    "dns": ("error", ["failed after retries", "ConnectError"], 15),
    "hang": ("timeout", ["did not answer in time"], RETRIED),
    "drip": ("timeout", ["did not answer in time"], RETRIED),
    "http:500": ("error", ["failed after retries", "HTTP 500"], 5),
    "http:502": ("error", ["HTTP 502"], 5),
    "http:503+retry-after": ("error", ["HTTP 503"], ATTEMPTS * 1 + 5),
    "http:429": ("error", ["HTTP 429"], 5),
    "truncated": ("error", ["not"], 5),
    "not_json": ("error", ["not"], 5),
    "wrong_shape": ("error", ["unexpected"], 5),
    "empty": ("empty", [], 5),
}
# Wrong-shape and truncated bodies are not retried (a retry would get the same answer) ...
NOT_RETRIED = {"truncated", "not_json", "wrong_shape", "empty"}
# ... and Loki keeps what it has when one of its two calls (series, lines) fails: words differ.
REASON_WORDS = {
    ("loki", "truncated"): ["not a Loki"],
    ("loki", "not_json"): ["not a Loki"],
    ("loki", "wrong_shape"): ["not a Loki"],
    ("prometheus", "truncated"): ["not JSON"],
    ("prometheus", "not_json"): ["not JSON"],
    ("slurm", "truncated"): ["not JSON"],
    ("slurm", "not_json"): ["not JSON"],
    ("kueue", "truncated"): ["not JSON"],
    ("kueue", "not_json"): ["not JSON"],
    ("slurm", "empty"): ["not in Slurm accounting"],
    ("kueue", "empty"): ["not found"],
}


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(inline, "RETRY_DELAYS_S", (0.05, 0.05, 0.05))


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("connector", CONNECTORS)
def test_fault_matrix(connector, fault):
    status, words, bound = FAULTS[fault]
    words = REASON_WORDS.get((connector, fault), words)
    server = None
    if fault == "refused":
        url = f"http://127.0.0.1:{closed_port()}"
    elif fault == "dns":
        url = "http://attribution-no-such-host.invalid:9090"
    else:
        mode = fault.split("+")[0]
        server = FaultServer(
            fault="answer" if fault == "empty" else mode,
            answer=_answer(connector, endless=False),
            retry_after="1" if "retry-after" in fault else None,
        ).start()
        url = server.url
    try:
        d, cov, elapsed = diagnose_with(connector, url)
    finally:
        if server:
            server.stop()
    assert cov.status.value == status, (cov.status, cov.error)
    for w in words:
        assert w in (cov.error or ""), (w, cov.error)
    # a bound, not a benchmark: three times the deadlines and retry waits, so a loaded 2-core machine
    # passes and an unbounded wait (a hang or drip without a deadline) still fails
    assert elapsed < 3 * bound, f"{elapsed:.1f} s"
    # the diagnosis completed and is honest about the missing source
    assert (d.terminal_state, d.sub_domain) == ("unknown", "insufficient_evidence"), (d.terminal_state, d.sub_domain)
    assert d.rules.failed == []
    if server:
        asked = [(p, sorted((k, tuple(v)) for k, v in q.items())) for p, q in server.requests]
        # transient faults are retried the production number of times; a bad answer is not retried
        assert asked.count(asked[0]) == (1 if fault in NOT_RETRIED else ATTEMPTS), server.requests


def test_loki_pages_that_never_end_stop_at_the_bound_as_partial():
    server = FaultServer(fault="answer", answer=_answer("loki", endless=True)).start()
    try:
        d, cov, elapsed = diagnose_with("loki", server.url)
    finally:
        server.stop()
    assert cov.status.value == "partial"
    assert cov.details.truncated_windows >= 1
    assert sum(1 for p, _ in server.requests if p.endswith("query_range")) == 25 * 1  # max_pages, one window
    assert cov.observations == 25 * 100
    assert elapsed < 30


def test_kueue_listing_that_never_ends_is_an_error_not_a_hang():
    def answer(path, query):
        return 200, {"kind": "WorkloadList", "items": [], "metadata": {"continue": f"tok-{len(query)}-{time.time()}"}}

    server = FaultServer(fault="answer", answer=answer).start()
    try:
        started = time.monotonic()
        with pytest.raises(Exception) as err:
            discover_failed(
                KueueSource(url=server.url, namespace="team-a", token_env=None, timeout_s=1, max_pages=40), START, END
            )
        assert time.monotonic() - started < 30
    finally:
        server.stop()
    assert "did not stop paging after 40 pages" in str(err.value)
    assert len(server.requests) == 40


def test_kueue_listing_that_repeats_its_token_is_an_error_at_once():
    server = FaultServer(
        fault="answer", answer=lambda p, q: (200, {"items": [], "metadata": {"continue": "same"}})
    ).start()
    try:
        with pytest.raises(Exception) as err:
            discover_failed(KueueSource(url=server.url, namespace="team-a", token_env=None, timeout_s=1), START, END)
    finally:
        server.stop()
    assert "repeated a continue token" in str(err.value) and len(server.requests) == 2
