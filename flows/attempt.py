"""Prefect flow `attribute-attempt`: one failed attempt -> one diagnosis in the warehouse.

The story (flows/pipeline.py): scope -> collect (every source in parallel) -> normalise -> attribute
-> publish. A step is a Prefect task run where Prefect adds something to it: scoping a job and each
source's collection talk to schedulers and services that fail transiently, so each is a task run,
retried on transient errors only (TransientSourceError: transport errors, 429, 5xx), the sources
submitted in parallel, each with its own state. A bundle or an explicit window is scoped from what
is on disk or in the target, asking no scheduler: a plain logged call. A source with nothing to
collect (not in the bundle, no file for any host) is not a task run: its coverage record says so,
made by the same connector code. Normalise, attribute and publish work on this process's own staging database and
warehouse connection, with nothing to retry: they are plain calls, each one line of the flow run's
log with what it did and how long it took (a task run is three events and a log line on the Prefect
server for each step of each attempt; on a fleet's storm of failures that is the server's load).
Act, the cluster's action sinks, is a plain call too: it retries its sinks itself and records each
outcome.

Task parameters are quoted: Prefect would otherwise walk every argument (the rules pack, the
scope's node list) looking for futures: ~30% of the worker's CPU samples. Tasks take and return
small values (paths, models), never DuckDB connections, and cache nothing. The flow's one
parameter is the Target; everything else (the cluster's scheduler and sources, the warehouse, the
rules) comes from the configuration of the process that runs it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefect import flow, task
from prefect.cache_policies import NONE
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import quote

from workload_attribution.contracts.actions import ActionRecord
from workload_attribution.contracts.errors import TransientSourceError
from workload_attribution.contracts.identity import Target
from workload_attribution.flows.config import load_config
from workload_attribution.flows.pipeline import RETRY_DELAYS_S, Future, Options, act, attribute_story, resolve
from workload_attribution.tasks import steps

if TYPE_CHECKING:
    from workload_attribution.connectors.clusters import Cluster
    from workload_attribution.connectors.registry import Collected
    from workload_attribution.contracts.models import Coverage, Diagnosis
    from workload_attribution.rules.engine import Settings
    from workload_attribution.rules.pack import Pack
    from workload_attribution.tasks.keeping import Keeping
    from workload_attribution.tasks.steps import ScopedAttempt


def _retry_transient(task: Any, task_run: Any, state: Any) -> bool:
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


def nothing_to_collect(scoped: ScopedAttempt, source: str) -> bool:
    """True when a source has no input at all: a bundle without the source's files or folder, a
    files source with no file for any host. Its collection only writes the coverage record that
    says so (unavailable, skipped): no retry can change that, so it needs no task run."""
    connector, sourced = scoped.sources[source]
    config: Any = sourced  # bundle and files configs both carry a path
    if connector == "bundle":
        from workload_attribution.connectors.bundle import source_paths

        paths = source_paths(Path(config.path), source)
        return bool(paths) and not any(os.path.lexists(p) for p in paths)
    if connector == "files":
        return not any(os.path.lexists(config.path.replace("{host}", h)) for h in scoped.scope.nodes)
    return False


class _Done:
    """The result of a step run in the flow's thread, as a future."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self.value: Any = None
        self.error: Exception | None = None
        try:
            self.value = fn(*args)
        except Exception as exc:  # what a failed task's future would raise
            self.error = exc

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def _logged(step: str, fn: Callable[..., Any], *args: Any, said: Callable[[Any], str] = lambda r: "") -> Any:
    """A step run in the flow run itself: one log line with what it did and its seconds."""
    from prefect.logging import get_run_logger

    started = time.monotonic()
    result = fn(*args)
    get_run_logger().info("%s%s in %.2f s", step, said(result), time.monotonic() - started)
    return result


def _coverage_said(coverage: list[Coverage]) -> str:
    return ": " + ", ".join(f"{c.source} {c.status.value} ({c.observations} observations)" for c in coverage)


def _verdict_said(d: Diagnosis) -> str:
    root = f"root {d.root_cause.symptom} on {d.root_cause.node or '-'}" if d.root_cause else "no root"
    return f": {d.terminal_state.value}/{d.sub_domain.value}, {root}"


def _actions_said(records: list[ActionRecord]) -> str:
    return ": " + (", ".join(f"{r.sink} {r.operation} {r.node or '-'} {r.outcome.value}" for r in records) or "nothing")


def _as_is(value: Any) -> Any:
    """A task argument Prefect hands over as it is, never walked for futures (quote)."""
    return quote(value)


def _scope_said(scoped: ScopedAttempt) -> str:
    scope = scoped.scope
    return f": {len(scope.nodes)} node(s), {len(scoped.sources)} source(s)"


def scope_is_local(target: Target) -> bool:
    """A bundle (its attempt.yaml and scheduler record, on disk) or an explicit window (taken as
    given) is scoped without asking any scheduler: nothing transient to retry, so no task run."""
    return bool(target.bundle or target.window)


class PrefectRunner:
    def scope(self, target: Target, cluster: Cluster | None) -> ScopedAttempt:
        if scope_is_local(target):
            return _logged("scope", steps.scope_attempt, target, cluster, said=_scope_said)
        return scope_task(_as_is(target), _as_is(cluster))

    def collect(self, scoped: ScopedAttempt, source: str, pack: Pack) -> Future:
        if nothing_to_collect(scoped, source):
            return _Done(steps.collect_source, scoped, source, pack)
        return collect_task.submit(_as_is(scoped), source, _as_is(pack))

    def normalize(self, scoped: ScopedAttempt, results: list[Collected]) -> list[Coverage]:
        return _logged("normalize", steps.normalize_collected, scoped, results, said=_coverage_said)

    def attribute(
        self,
        scoped: ScopedAttempt,
        coverage: list[Coverage],
        pack: Pack,
        settings: Settings,
        notes: list[str],
        archived: bool,
    ) -> Diagnosis:
        return _logged(
            "attribute", steps.attribute, scoped, coverage, pack, settings, notes, archived, said=_verdict_said
        )

    def publish(
        self, diagnosis: Diagnosis, warehouse: str | None, scoped: ScopedAttempt, keeping: Keeping | None
    ) -> Diagnosis:
        def said(d: Diagnosis) -> str:
            return f": diagnosis {d.diagnosis_id} to the warehouse" if warehouse else ": not stored"

        return _logged("publish", steps.publish, diagnosis, warehouse, scoped, keeping, said=said)

    def act(self, diagnosis: Diagnosis, options: Options) -> list[ActionRecord]:
        if diagnosis.attempt.cluster not in options.acting:
            return []
        return _logged("act", act, diagnosis, options, said=_actions_said)


def _named(target: Target) -> None:
    """The run named after its target (Target.describe), unless it is already: `attribution serve`
    creates its runs so named, and a run created otherwise (the UI, the API) is renamed here.
    Prefect's flow_run_name renames every run, one more request a run for the server (and a
    PATCH of the run in its database) for a name the run already has."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None or ctx.client is None:
        return
    name = target.describe()
    if ctx.flow_run.name != name:
        ctx.client.set_flow_run_name(ctx.flow_run.id, name)
        ctx.flow_run.name = name


def run_story(target: Target, options: Options) -> dict[str, Any]:
    """The story on Prefect's task runner, inside a flow run (the flow below, or a caller's)."""
    return attribute_story(PrefectRunner(), target, options).model_dump(mode="json")


@flow(
    name="attribute-attempt",
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
    _named(target)
    _not_crashed_too_often()
    target, options = resolve(load_config(), target)
    return run_story(target, options)


class CrashedTooOften(RuntimeError):
    """The attempt's run crashed more often than it is run again (flows/deployments.py)."""


def _not_crashed_too_often() -> None:
    """A crashed run is scheduled again by the automation `attribution deploy` applies; this run's
    count bounds that (crash_retry_note). A run again after a crash says so in its log."""
    from prefect.logging import get_run_logger
    from prefect.runtime import flow_run

    runs = int(flow_run.run_count or 1)
    if runs > 1:
        get_run_logger().warning(crash_retry_note(runs, _crash_reasons(str(flow_run.id))))


def crash_retry_note(runs: int, crashes: list[str]) -> str:
    """What run `runs` of an attempt after `crashes` (their reasons, oldest first) says; past
    1 + CRASH_RETRIES runs, CrashedTooOften: the run fails, naming why, and is not run again."""
    from workload_attribution.flows.deployments import CRASH_RETRIES

    last = crashes[-1] if crashes else "crashed"
    if runs > 1 + CRASH_RETRIES:
        raise CrashedTooOften(f"run {runs} of this attempt, after {len(crashes)} crash(es) (last: {last}): not again")
    return f"run {runs} of this attempt, after a crash: {last}"


def _crash_reasons(run_id: str) -> list[str]:
    """The messages of this run's Crashed states, oldest first."""
    from uuid import UUID

    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        states = client.read_flow_run_states(UUID(run_id))
    return [s.message or "crashed" for s in sorted(states, key=lambda s: s.timestamp) if s.type.value == "CRASHED"]
