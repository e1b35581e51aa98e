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

from attribution.config import load_config
from flows.backfill import Attempt, _prepare, _summary_start, diagnose_one, diagnosed_versions, discover, plan, run_all
from rules.engine import Settings
from rules.pack import default_pack, load_pack


discover_task = task(discover, name="discover", cache_policy=NONE, retries=2, retry_delay_seconds=[5, 30])
diagnose_task = task(diagnose_one, name="diagnose", cache_policy=NONE)


@flow(name="backfill", log_prints=True, validate_parameters=False)
def backfill(since: str | None = None, until: str | None = None, cluster: str | None = None,
             bundles_dir: str | None = None, force: bool = False, concurrency: int | None = None,
             warehouse: str | None = None, rules_dir: str | None = None) -> dict[str, Any]:
    """Diagnose the failed attempts that ended in [since, until) (default: the last
    `backfill.lookback_hours`) and are not yet diagnosed by the current rules; returns the summary."""
    from prefect.logging import get_run_logger

    started = time.monotonic()
    log = get_run_logger()
    cfg = load_config()
    since_t, until_t = _prepare(since, until, cfg)
    warehouse = warehouse or cfg.warehouse
    pack = load_pack(rules_dir or cfg.rules_dir) if (rules_dir or cfg.rules_dir) else default_pack()
    settings = Settings(**cfg.rules.model_dump())
    found, bad = discover_task(cfg, since_t, until_t, cluster, bundles_dir or cfg.backfill.bundles_dir)
    p = plan(found, diagnosed_versions(warehouse, found), pack.version, force)
    p.unreadable += bad
    summary = _summary_start(found, p)
    log.info("window %s .. %s: %d found, %d already diagnosed by rules %s, %d to diagnose",
             since_t.isoformat(), until_t.isoformat(), summary.found, summary.skipped, pack.version, len(p.todo))

    def submit(a: Attempt):
        return diagnose_task.with_options(task_run_name=f"diagnose-{a.key}").submit(a, cfg, pack, settings, warehouse)

    def progress(i: int, n: int, a: Attempt, outcome: str) -> None:
        log.info("[%d/%d] %s: %s", i, n, a.key, outcome)

    run_all(p.todo, submit, lambda fs: next(as_completed(list(fs))), concurrency or cfg.backfill.concurrency,
            summary, progress)
    summary.seconds = time.monotonic() - started
    log.info("backfill summary: %s", summary.as_dict())
    return summary.as_dict()
