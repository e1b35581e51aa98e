"""Run the attribution story without Prefect: same steps, a thread pool, the same retry policy."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor

from attribution.models import Diagnosis
from flows.pipeline import RETRY_DELAYS_S, Request, attribute_story, failed_collect
from rules.pack import Pack
from tasks import steps


def _with_retries(fn, *args):
    for delay in (*RETRY_DELAYS_S, None):
        try:
            return fn(*args)
        except steps.TransientSourceError:
            if delay is None:
                raise
            time.sleep(delay)


class InlineRunner:
    def __init__(self, pool: ThreadPoolExecutor):
        self.pool = pool

    def scope(self, request):
        return steps.scope_live(request.live) if request.live else steps.scope_attempt(request.bundle)

    def collect(self, scoped, source, pack) -> Future:
        return self.pool.submit(_with_retries, steps.collect_source, scoped, source, pack)

    def store(self, scoped, results):
        return steps.store_observations(scoped, results)

    def attribute(self, scoped, coverage, pack, settings, notes):
        return steps.attribute(scoped, coverage, pack, settings, notes)

    def publish(self, diagnosis, warehouse, scoped):
        return steps.publish(diagnosis, warehouse, scoped)


def attribute_inline(request: Request, pack: Pack) -> Diagnosis:
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="collect") as pool:
        return attribute_story(InlineRunner(pool), request, pack, failed_collect)
