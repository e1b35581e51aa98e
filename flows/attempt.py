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
collect_task = task(steps.collect_source, name="collect", task_run_name="collect-{source}", cache_policy=NONE,
                    retries=len(RETRY_DELAYS_S),
                    retry_delay_seconds=list(RETRY_DELAYS_S), retry_jitter_factor=0.5, retry_condition_fn=_retry_transient)
store_task = task(steps.store_observations, name="store", cache_policy=NONE)
attribute_task = task(steps.attribute, name="attribute", cache_policy=NONE)
publish_task = task(steps.publish, name="publish", cache_policy=NONE)


class PrefectRunner:
    def scope(self, request):
        return scope_live_task(request.live) if request.live else scope_task(request.bundle)

    def collect(self, scoped, source, pack):
        return collect_task.submit(scoped, source, pack)

    def store(self, scoped, results):
        return store_task(scoped, results)

    def attribute(self, scoped, coverage, pack, settings, notes):
        return attribute_task(scoped, coverage, pack, settings, notes)

    def publish(self, diagnosis, warehouse, scoped):
        return publish_task(diagnosis, warehouse, scoped)


def _run_name() -> str:
    from prefect.runtime import flow_run

    p = flow_run.parameters
    if p.get("bundle"):
        return f"bundle:{str(p['bundle']).rstrip('/').rsplit('/', 1)[-1]}"
    what = p.get("job_id") or ",".join(p.get("nodes") or [])[:60]
    return f"{p.get('cluster') or 'default'}:{what}" + (f":{p['attempt']}" if p.get("attempt") is not None else "")


@flow(name="attribute-attempt", flow_run_name=_run_name, task_runner=ThreadPoolTaskRunner(max_workers=8),
      log_prints=False, validate_parameters=False)
def attribute_attempt(bundle: str | None = None, cluster: str | None = None, job_id: str | None = None,
                      attempt: int | None = None, nodes: list[str] | None = None, start: str | None = None,
                      end: str | None = None, trigger: str | None = None, warehouse: str | None = None,
                      store: bool = True, rules_dir: str | None = None, settings: dict[str, Any] | None = None,
                      cluster_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Diagnose one attempt and publish the diagnosis; returns the diagnosis JSON.

    The attempt is a bundle directory, or a job on a configured cluster (`job_id`; Kueue:
    "namespace/name"), or an explicit scope (`nodes` + `start` + `end`). What is not given comes
    from the worker's configuration (attribution.yaml / ATTRIBUTION_*): the cluster's scheduler and
    sources, the warehouse, the rules. `trigger="completion"` (webhooks) waits, with retries, until
    the scheduler has recorded the attempt's end. `attempt` is what the trigger reported; the
    scheduler's own restart count is what the diagnosis records.
    """
    from attribution.config import ClusterConfig, load_config

    cfg = load_config()
    rules_dir = rules_dir or cfg.rules_dir
    pack: Pack = load_pack(rules_dir, skip_broken=True) if rules_dir else default_pack()
    if store and warehouse is None:
        warehouse = cfg.warehouse
    live = None
    if bundle is None:
        if cluster_config is not None:
            cluster_name, cluster_cfg = cluster or "default", ClusterConfig.model_validate(cluster_config)
        else:
            cluster_name, cluster_cfg = cfg.cluster(cluster)
        live = steps.LiveScope(cluster_name=cluster_name, cluster=cluster_cfg, job_id=job_id, nodes=nodes,
                               start=start, end=end, require_ended=trigger == "completion")
    request = Request(bundle=bundle, live=live, warehouse=warehouse if store else None,
                      settings=Settings(**(settings if settings is not None else cfg.rules.model_dump())))
    diagnosis: Diagnosis = attribute_story(PrefectRunner(), request, pack, failed_collect)
    return diagnosis.model_dump(mode="json")
