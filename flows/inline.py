"""Run the attribution story without Prefect: same steps, a thread pool, the same retry policy."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from workload_attribution.contracts.errors import TransientSourceError
from workload_attribution.contracts.identity import Target
from workload_attribution.contracts.models import Diagnosis
from workload_attribution.flows.pipeline import RETRY_DELAYS_S, Options, act, attribute_story
from workload_attribution.tasks import steps

if TYPE_CHECKING:  # what a bundle's diagnosis never builds (the actions' record: only once stored)
    from workload_attribution.connectors.clusters import Cluster
    from workload_attribution.connectors.registry import Collected
    from workload_attribution.contracts.actions import ActionRecord
    from workload_attribution.contracts.models import Coverage
    from workload_attribution.rules.engine import Settings
    from workload_attribution.rules.pack import Pack
    from workload_attribution.tasks.keeping import Keeping
    from workload_attribution.tasks.steps import ScopedAttempt


def _with_retries(fn: Callable[..., Any], *args: Any) -> Any:
    for delay in (*RETRY_DELAYS_S, None):
        try:
            return fn(*args)
        except TransientSourceError:
            if delay is None:
                raise
            time.sleep(delay)


class InlineRunner:
    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self.pool = pool

    def scope(self, target: Target, cluster: Cluster | None) -> ScopedAttempt:
        return _with_retries(steps.scope_attempt, target, cluster)

    def collect(self, scoped: ScopedAttempt, source: str, pack: Pack) -> Future[Collected]:
        return self.pool.submit(_with_retries, steps.collect_source, scoped, source, pack)

    def normalize(self, scoped: ScopedAttempt, results: list[Collected]) -> list[Coverage]:
        return steps.normalize_collected(scoped, results)

    def attribute(
        self,
        scoped: ScopedAttempt,
        coverage: list[Coverage],
        pack: Pack,
        settings: Settings,
        notes: list[str],
        archived: bool,
    ) -> Diagnosis:
        return steps.attribute(scoped, coverage, pack, settings, notes, archived)

    def publish(
        self, diagnosis: Diagnosis, warehouse: str | None, scoped: ScopedAttempt, keeping: Keeping | None
    ) -> Diagnosis:
        return steps.publish(diagnosis, warehouse, scoped, keeping)

    def act(self, diagnosis: Diagnosis, options: Options) -> list[ActionRecord]:
        return act(diagnosis, options)


# Sources are collected on threads kept for the process: a pool made for each attempt started ~7
# threads every time and waited for each to start (~20 ms of a warm attempt's wall time under
# cProfile). A thread is made only when none is idle, so the bound is not a count: attempts run
# side by side (the HTTP API, backfill) take what they need.
COLLECT_THREADS = 64
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def collect_pool() -> ThreadPoolExecutor:
    """The process' collect threads (made at the first attempt)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=COLLECT_THREADS, thread_name_prefix="collect")
        return _pool


def _forget_pool() -> None:
    """A forked child has none of its parent's threads: it makes its own pool."""
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool)


def attribute_inline(target: Target, options: Options) -> Diagnosis:
    return attribute_story(InlineRunner(collect_pool()), target, options)
