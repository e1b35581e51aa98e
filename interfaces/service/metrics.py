"""/metrics: Prometheus text of what the service does. Scrapes never touch the warehouse: the
diagnoses gauge is a snapshot refreshed in the background at most every `refresh_s` (the first
scrape waits for the first one; scrapes arriving together share it). Each warehouse read made for
it is counted (attribution_diagnoses_snapshots_total)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from workload_attribution.service.bounded import STATS


class Metrics:
    def __init__(
        self,
        diagnoses_by_state: Callable[[], list[tuple[str, int]]],
        outbox_stats: Callable[[], tuple[int, float]] | None,
        refresh_s: float = 15.0,
    ):
        disable_created_metrics()  # *_created series only double the scrape
        self.registry = registry = CollectorRegistry()
        self.requests = Counter(
            "attribution_http_requests", "HTTP requests answered", ["endpoint", "code"], registry=registry
        )
        self.latency = Histogram(
            "attribution_http_request_seconds",
            "time to answer",
            ["endpoint"],
            registry=registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.triggers = Counter("attribution_triggers", "triggers by outcome", ["source", "outcome"], registry=registry)
        self.runs_started = Counter(
            "attribution_flow_runs_started",
            "flow runs started (not counting duplicates)",
            ["source"],
            registry=registry,
        )
        self.auth_failures = Counter(
            "attribution_auth_failures",
            "refused requests by the scope the route needs and the reason",
            ["scope", "reason"],
            registry=registry,
        )
        self.trigger_failures = Counter(
            "attribution_trigger_failures", "triggers that could not reach Prefect", registry=registry
        )
        self.diagnose = Counter(
            "attribution_diagnose_requests", "POST /v1/diagnose by outcome", ["outcome"], registry=registry
        )
        self.diagnose_seconds = Histogram(
            "attribution_diagnose_seconds",
            "POST /v1/diagnose, received to answered",
            registry=registry,
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
        )
        self.snapshots = Counter(
            "attribution_diagnoses_snapshots",
            "warehouse reads made for the attribution_diagnoses snapshot",
            registry=registry,
        )
        self._by_state = diagnoses_by_state
        self._outbox = outbox_stats
        self._snapshot: list[tuple[str, int]] = []
        self._taken = 0.0
        self._refreshing = threading.Lock()
        self.refresh_s = refresh_s
        registry.register(self._Collector(self))

    class _Collector:
        def __init__(self, m: Metrics):
            self.m = m

        def collect(self) -> Iterator[Metric]:
            m = self.m
            m._refresh_later()
            g = GaugeMetricFamily(
                "attribution_diagnoses",
                "diagnoses in the warehouse by terminal_state "
                "(a snapshot, see attribution_diagnoses_snapshot_age_seconds)",
                labels=["terminal_state"],
            )
            for state, n in m._snapshot:
                g.add_metric([state], n)
            yield g
            yield GaugeMetricFamily(
                "attribution_diagnoses_snapshot_age_seconds",
                "age of the diagnoses snapshot",
                value=time.monotonic() - m._taken if m._taken else -1,
            )
            yield GaugeMetricFamily("attribution_connections_open", "HTTP connections held", value=STATS.open)
            yield CounterMetricFamily("attribution_connections_opened", "HTTP connections accepted", value=STATS.opened)
            closed = CounterMetricFamily(
                "attribution_connections_closed",
                "connections closed by the service's bounds (header_timeout, body_timeout, shed: the one idle "
                "longest when over --max-connections, refused: over it with every connection busy)",
                labels=["reason"],
            )
            for reason in ("header_timeout", "body_timeout", "shed", "refused"):
                closed.add_metric([reason], STATS.closed[reason])
            yield closed
            if m._outbox is not None:
                depth, oldest = m._outbox()
                yield GaugeMetricFamily(
                    "attribution_outbox_entries", "accepted triggers whose flow run is not created yet", value=depth
                )
                yield GaugeMetricFamily("attribution_outbox_oldest_seconds", "age of the oldest of them", value=oldest)

    def _fresh(self) -> bool:
        return bool(self._taken) and time.monotonic() - self._taken < self.refresh_s

    def _refresh_later(self) -> None:
        if self._fresh():
            return
        first = not self._taken
        if not self._refreshing.acquire(blocking=first):
            return
        if self._fresh():  # taken while this scrape waited for the lock
            self._refreshing.release()
            return

        def refresh() -> None:
            try:
                self.snapshots.inc()
                self._snapshot = self._by_state()
            except Exception:
                pass  # a busy or missing warehouse: keep the last snapshot
            finally:
                self._taken = time.monotonic()
                self._refreshing.release()

        if first:  # the first scrape waits for the snapshot; later ones never wait for the warehouse
            refresh()
        else:
            threading.Thread(target=refresh, name="metrics-snapshot", daemon=True).start()

    def text(self) -> bytes:
        return generate_latest(self.registry)
