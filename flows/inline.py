"""Run the attribution story without Prefect: same steps, a thread pool, the same retry policy."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from workload_attribution.contracts.errors import TransientSourceError
from workload_attribution.contracts.identity import Target
from workload_attribution.contracts.models import Diagnosis
from workload_attribution.flows.pipeline import RETRY_DELAYS_S, Options, attribute_story
from workload_attribution.tasks import steps


def _with_retries(fn: Callable[..., Any], *args: Any) -> Any:
    for delay in (*RETRY_DELAYS_S, None):
        try:
            return fn(*args)
        except TransientSourceError:
            if delay is None:
                raise
            time.sleep(delay)


class InlineRunner:
    def __init__(self, pool: ThreadPoolExecutor):
        self.pool = pool

    def scope(self, target, cluster):
        return _with_retries(steps.scope_attempt, target, cluster)

    def collect(self, scoped, source, pack) -> Future:
        return self.pool.submit(_with_retries, steps.collect_source, scoped, source, pack)

    def store(self, scoped, results):
        return steps.store_observations(scoped, results)

    def attribute(self, scoped, coverage, pack, settings, notes):
        return steps.attribute(scoped, coverage, pack, settings, notes)

    def publish(self, diagnosis, warehouse, scoped, keeping):
        return steps.publish(diagnosis, warehouse, scoped, keeping)


def attribute_inline(target: Target, options: Options) -> Diagnosis:
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="collect") as pool:
        return attribute_story(InlineRunner(pool), target, options)
