"""Prefect flow `attribute-attempt`: one failed attempt -> one diagnosis in the warehouse.

The story (flows/pipeline.py): scope -> collect (every source in parallel) -> store -> attribute
-> publish. A step is a Prefect task run where Prefect adds something to it: scoping and each
source's collection talk to schedulers and services that fail transiently, so each is a task run,
retried on transient errors only (TransientSourceError: transport errors, 429, 5xx), the sources
submitted in parallel, each with its own state. A source with nothing to collect (not in the
bundle, no file for any host) is not a task run: its coverage record says so, made by the same
connector code. Store, attribute and publish work on this process's own staging database and
warehouse connection, with nothing to retry: they are plain calls, each one line of the flow run's
log with what it did and how long it took (a task run is three events and a log line on the Prefect
server for each step of each attempt; on a fleet's storm of failures that is the server's load).

Task parameters are quoted: Prefect would otherwise walk every argument (the rules pack, the
scope's node list) looking for futures: ~30% of the worker's CPU samples. Tasks take and return
small values (paths, models), never DuckDB connections, and cache nothing. The flow's one
parameter is the Target; everything else (the cluster's scheduler and sources, the warehouse, the
rules) comes from the configuration of the process that runs it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NONE
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import quote

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


def nothing_to_collect(scoped: steps.Scoped, source: str) -> bool:
    """True when a source has no input at all: a bundle without the source's files or folder, a
    files source with no file for any host. Its collection only writes the coverage record that
    says so (unavailable, skipped): no retry can change that, so it needs no task run."""
    connector, sourced = scoped.sources[source]
    config: Any = sourced  # bundle and files configs both carry a path
    if connector == "bundle":
        from workload_attribution.connectors import bundle as b

        root = Path(config.path)
        paths = {
            "sacct": [root / "scheduler" / "sacct.json"],
            "kueue": [root / "scheduler" / name for name in b.KUEUE_FILES],
            "metrics": [root / "metrics"],
            "topology": [root / "topology.yaml"],
        }.get(source) or ([root / b.TEXT_SOURCES[source]] if source in b.TEXT_SOURCES else [])
        return bool(paths) and not any(os.path.lexists(p) for p in paths)
    if connector == "files":
        return not any(os.path.lexists(config.path.replace("{host}", h)) for h in scoped.scope.nodes)
    return False


class _Done:
    """The result of a step run in the flow's thread, as a future."""

    def __init__(self, fn, *args):
        try:
            self.value, self.error = fn(*args), None
        except Exception as exc:  # what a failed task's future would raise
            self.value, self.error = None, exc

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def _logged(step: str, fn, *args, said=lambda r: ""):
    """A step run in the flow run itself: one log line with what it did and its seconds."""
    from prefect.logging import get_run_logger

    started = time.monotonic()
    result = fn(*args)
    get_run_logger().info("%s%s in %.2f s", step, said(result), time.monotonic() - started)
    return result


class PrefectRunner:
    def scope(self, target, cluster):
        return scope_task(quote(target), quote(cluster))

    def collect(self, scoped, source, pack):
        if nothing_to_collect(scoped, source):
            return _Done(steps.collect_source, scoped, source, pack)
        return collect_task.submit(quote(scoped), source, quote(pack))

    def store(self, scoped, results):
        return _logged(
            "store",
            steps.store_observations,
            scoped,
            results,
            said=lambda cov: (
                ": " + ", ".join(f"{c.source} {c.status.value} ({c.observations} observations)" for c in cov)
            ),
        )

    def attribute(self, scoped, coverage, pack, settings, notes):
        return _logged(
            "attribute",
            steps.attribute,
            scoped,
            coverage,
            pack,
            settings,
            notes,
            said=lambda d: (
                f": {d.terminal_state.value}/{d.sub_domain.value}, "
                + (f"root {d.root_cause.symptom} on {d.root_cause.node or '-'}" if d.root_cause else "no root")
            ),
        )

    def publish(self, diagnosis, warehouse, scoped, keeping):
        return _logged(
            "publish",
            steps.publish,
            diagnosis,
            warehouse,
            scoped,
            keeping,
            said=lambda d: f": diagnosis {d.diagnosis_id} to the warehouse" if warehouse else ": not stored",
        )


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
