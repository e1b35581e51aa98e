"""Prefect flow `attribute_attempt`: one failed attempt -> one diagnosis in the warehouse.

Each step is a Prefect task; every source's collection is its own task, submitted in parallel,
retried on transient errors only (TransientSourceError: transport errors, 429, 5xx). Tasks take
and return small values (paths, models), never DuckDB connections, and cache nothing.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, task
from prefect.cache_policies import NONE
from prefect.task_runners import ThreadPoolTaskRunner

from attribution.models import Diagnosis
from flows.pipeline import RETRY_DELAYS_S, Request, attribute_story, failed_collect
from rules.engine import Settings
from rules.pack import Pack, default_pack, load_pack
from tasks import steps


def _retry_transient(task, task_run, state) -> bool:
    try:
        state.result()
    except steps.TransientSourceError:
        return True
    except Exception:
        return False
    return False


scope_task = task(steps.scope_attempt, name="scope", cache_policy=NONE)
scope_live_task = task(steps.scope_live, name="scope", cache_policy=NONE, retries=2, retry_delay_seconds=[1, 5],
                       retry_condition_fn=_retry_transient)
collect_task = task(steps.collect_source, name="collect", cache_policy=NONE, retries=len(RETRY_DELAYS_S),
                    retry_delay_seconds=list(RETRY_DELAYS_S), retry_jitter_factor=0.5, retry_condition_fn=_retry_transient)
store_task = task(steps.store_observations, name="store", cache_policy=NONE)
attribute_task = task(steps.attribute, name="attribute", cache_policy=NONE)
publish_task = task(steps.publish, name="publish", cache_policy=NONE)


class PrefectRunner:
    def scope(self, request):
        return scope_live_task(request.live) if request.live else scope_task(request.bundle)

    def collect(self, scoped, source, pack):
        return collect_task.with_options(task_run_name=f"collect-{source}").submit(scoped, source, pack)

    def store(self, scoped, results):
        return store_task(scoped, results)

    def attribute(self, scoped, coverage, pack, settings, notes):
        return attribute_task(scoped, coverage, pack, settings, notes)

    def publish(self, diagnosis, warehouse):
        return publish_task(diagnosis, warehouse)


@flow(name="attribute-attempt", task_runner=ThreadPoolTaskRunner(max_workers=8), log_prints=False,
      validate_parameters=False)
def attribute_attempt(bundle: str | None = None, warehouse: str | None = None, rules_dir: str | None = None,
                      settings: dict[str, Any] | None = None, cluster: str | None = None,
                      cluster_config: dict[str, Any] | None = None, job_id: str | None = None,
                      nodes: list[str] | None = None, start: str | None = None, end: str | None = None) -> dict[str, Any]:
    """Diagnose one attempt (a bundle, or a job / explicit window on a configured cluster) and publish
    the diagnosis; returns the diagnosis JSON."""
    from attribution.config import ClusterConfig

    pack: Pack = load_pack(rules_dir) if rules_dir else default_pack()
    live = None
    if bundle is None:
        live = steps.LiveScope(cluster_name=cluster or "default", cluster=ClusterConfig.model_validate(cluster_config or {}),
                               job_id=job_id, nodes=nodes, start=start, end=end)
    request = Request(bundle=bundle, live=live, warehouse=warehouse, settings=Settings(**(settings or {})))
    diagnosis: Diagnosis = attribute_story(PrefectRunner(), request, pack, failed_collect)
    return diagnosis.model_dump(mode="json")
