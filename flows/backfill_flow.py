"""The backfill as a Prefect flow: the nightly deployment and `attribution backfill`.

Same discover -> plan -> diagnose story as flows/backfill.py; each attempt is a task run, at most
`concurrency` in flight, so the Prefect UI shows every attempt and its outcome.
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NONE
from prefect.futures import as_completed

from workload_attribution.contracts.identity import EndedAttempt
from workload_attribution.flows.backfill import (
    DiscoveryFailed,
    Prepared,
    Summary,
    diagnose_one,
    discover,
    maintain_warehouse,
    prepare,
    run_all,
)
from workload_attribution.flows.config import load_config

discover_task = task(name="discover", cache_policy=NONE, retries=2, retry_delay_seconds=[5, 30])(discover)
diagnose_task = task(name="diagnose", cache_policy=NONE)(diagnose_one)


@flow(name="backfill", log_prints=True, validate_parameters=False)
def backfill(
    since: str | None = None,
    until: str | None = None,
    cluster: str | None = None,
    bundles_dir: str | None = None,
    force: bool = False,
    concurrency: int | None = None,
    warehouse: str | None = None,
    rules_dir: str | None = None,
) -> dict[str, Any]:
    """Diagnose the failed attempts that ended in [since, until) (default: the last
    `backfill.lookback_hours`) and are not yet diagnosed by the current rules; returns the summary."""
    from prefect.logging import get_run_logger

    started = time.monotonic()
    log = get_run_logger()
    r = prepare(load_config(), since, until, cluster, bundles_dir, force, warehouse, rules_dir, discover_task)
    log.info(
        "window %s .. %s: %d found, %d already diagnosed by rules %s, %d to diagnose",
        r.since.isoformat(),
        r.until.isoformat(),
        r.summary.found,
        r.summary.skipped,
        r.pack.version,
        len(r.plan.todo),
    )
    _diagnose_all(r, concurrency or r.cfg.backfill.concurrency, log)
    maintain_warehouse(r.warehouse, r.summary)
    r.summary.seconds = time.monotonic() - started
    return _finish(r.summary, log)


def _diagnose_all(r: Prepared, concurrency: int, log: Any) -> None:
    """Each attempt a task run, at most `concurrency` in flight, each outcome logged as it lands."""

    def submit(a: EndedAttempt) -> Any:
        return diagnose_task.with_options(task_run_name=f"diagnose-{a.key}").submit(a, r.cfg, r.pack, r.warehouse)

    def progress(i: int, n: int, a: EndedAttempt, outcome: str) -> None:
        log.info("[%d/%d] %s: %s", i, n, a.key, outcome)

    run_all(r.plan.todo, submit, lambda fs: next(as_completed(list(fs))), concurrency, r.summary, progress)


def _finish(summary: Summary, log: Any) -> dict[str, Any]:
    """The summary, logged; a night whose discovery or maintenance failed says so, and a scheduler
    that could not be asked fails the run (an unreachable scheduler is a failed night, not a quiet one)."""
    if summary.maintenance and "error" in summary.maintenance:
        log.error("warehouse maintenance failed: %s", summary.maintenance["error"])
    log.info("backfill summary: %s", summary.as_dict())
    if summary.discovery_failures:
        for f in summary.discovery_failures:
            log.error("discovery failed for %s: %s", f["where"], f["error"])
        raise DiscoveryFailed(summary.as_dict())
    return summary.as_dict()
