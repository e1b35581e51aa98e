"""Prefect flow `attribute-attempt`: one failed attempt -> one diagnosis in the warehouse.

Each step is a Prefect task; every source's collection is its own task, submitted in parallel,
retried on transient errors only (TransientSourceError: transport errors, 429, 5xx). Tasks take
and return small values (paths, models), never DuckDB connections, and cache nothing. The flow's
one parameter is the Target; everything else (the cluster's scheduler and sources, the
warehouse, the rules) comes from the configuration of the process that runs it.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, task
from prefect.cache_policies import NONE
from prefect.task_runners import ThreadPoolTaskRunner

from workload_attribution.contracts.errors import TransientSourceError
from workload_attribution.contracts.identity import Target
from workload_attribution.flows.config import load_config
from workload_attribution.flows.pipeline import RETRY_DELAYS_S, Options, attribute_story, resolve
from workload_attribution.tasks import steps


def _retry_transient(task, task_run, state) -> bool:
    try:
        state.result()
    except TransientSourceError:
        return True
    except Exception:
        return False
    return False


scope_task = task(
    name="scope", cache_policy=NONE, retries=2, retry_delay_seconds=[1, 5], retry_condition_fn=_retry_transient
)(steps.scope_attempt)
collect_task = task(
    name="collect",
    task_run_name="collect-{source}",
    cache_policy=NONE,
    retries=len(RETRY_DELAYS_S),
    retry_delay_seconds=list(RETRY_DELAYS_S),
    retry_jitter_factor=0.5,
    retry_condition_fn=_retry_transient,
)(steps.collect_source)
store_task = task(name="store", cache_policy=NONE)(steps.store_observations)
attribute_task = task(name="attribute", cache_policy=NONE)(steps.attribute)
publish_task = task(name="publish", cache_policy=NONE)(steps.publish)


class PrefectRunner:
    def scope(self, target, cluster):
        return scope_task(target, cluster)

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

    raw = flow_run.parameters.get("target")
    try:
        return (raw if isinstance(raw, Target) else Target.model_validate(raw)).describe()
    except Exception:
        return "attempt"


def run_story(target: Target, options: Options) -> dict[str, Any]:
    """The story on Prefect's task runner, inside a flow run (the flow below, or a caller's)."""
    return attribute_story(PrefectRunner(), target, options).model_dump(mode="json")


@flow(
    name="attribute-attempt",
    flow_run_name=_run_name,
    task_runner=ThreadPoolTaskRunner(max_workers=8),  # type: ignore[arg-type]  # Prefect's generic, not ours
    log_prints=False,
)
def attribute_attempt(target: Target) -> dict[str, Any]:
    """Diagnose one attempt and publish the diagnosis; returns the diagnosis JSON.

    The target is a job on a configured cluster (`job_id`; Kueue: "namespace/name"), an explicit
    window (`nodes` + `start` + `end`), or a bundle directory. What the target does not say comes
    from this process's configuration (attribution.yaml / ATTRIBUTION_CONFIG / ATTRIBUTION_*): the
    cluster's scheduler and sources, the warehouse, the rules. `trigger="completion"` (webhooks)
    waits, with retries, until the scheduler has recorded the attempt's end. `attempt` is what the
    trigger reported; the scheduler's own restart count is what the diagnosis records.
    """
    target, options = resolve(load_config(), target)
    return run_story(target, options)
