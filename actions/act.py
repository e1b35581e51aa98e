"""Acting on a stored diagnosis, and undoing it.

    act_on: the cluster's sinks built -> the scheduler's partitions read (an isolating sink's)
      -> in one warehouse transaction: the history read, every decision made (the guard's per
         node, each sink's per node, a re-diagnosis' reversals) and recorded
      -> carried out, unless a dry run: reversals first, then isolations, then notifications
         (which say what the isolations did) -> each outcome recorded

Nothing here raises for a sink's failure: it is the action's recorded outcome. A sink's transient
failures (ActionError.transient) are tried again `retries` times, after RETRY_DELAYS_S.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any

from workload_attribution.actions import guard, registry
from workload_attribution.actions.config import ActionsConfig
from workload_attribution.actions.registry import Fleet, Request, SinkConfig, SinkKind
from workload_attribution.contracts.actions import ActionHistory, ActionRecord, Outcome
from workload_attribution.contracts.errors import ActionError, ActionSkipped, BadInput, first_line
from workload_attribution.contracts.models import Diagnosis
from workload_attribution.warehouse.store import Warehouse

log = logging.getLogger("workload_attribution.actions")
RETRY_DELAYS_S = (0.5, 2.0, 5.0)
WINDOW = timedelta(hours=1)  # max_nodes_per_hour's hour


@dataclass
class Bound:
    """A configured sink, built for its cluster (or why it could not be)."""

    config: SinkConfig
    kind: SinkKind
    sink: Any = None  # a registry.Sink; None when building failed
    error: str = ""

    @property
    def label(self) -> str:
        return self.config.label


def build_sinks(cfg: ActionsConfig, cluster: Any) -> list[Bound]:
    bound = []
    for config in cfg.sinks:
        kind = registry.get(str(getattr(config, "kind", "")))
        try:
            bound.append(Bound(config, kind, kind.build(config, cluster)))
        except Exception as exc:  # a sink that cannot be built fails its own actions, not the others'
            bound.append(Bound(config, kind, error=f"{type(exc).__name__}: {first_line(exc)}"))
    return bound


def _fleet(bound: list[Bound], d: Diagnosis, cfg: ActionsConfig) -> tuple[Fleet | None, str]:
    """The first isolating sink's view of its partitions, when the verdict may isolate at all."""
    isolating = [b for b in bound if b.kind.isolates and b.sink is not None]
    if not isolating or guard.refusal(d, cfg) is not None:
        return None, ""
    try:
        return isolating[0].sink.fleet(), ""
    except Exception as exc:
        return None, f"{isolating[0].label}: {first_line(exc)}"


def _record(d: Diagnosis, b: Bound, now: datetime, dry_run: bool, **fields: Any) -> ActionRecord:
    """A new decision of sink `b` about diagnosis `d`."""
    base: dict[str, Any] = {
        "action_id": str(uuid.uuid4()),
        "decided_at": now,
        "cluster": d.attempt.cluster,
        "scheduler": str(d.attempt.scheduler),
        "job_id": d.attempt.job_id,
        "attempt": d.attempt.attempt,
        "diagnosis_id": d.diagnosis_id,
        "rules_version": d.rules.version,
        "terminal_state": d.terminal_state.value,
        "sub_domain": d.sub_domain.value,
        "confidence": d.confidence.value,
        "recommended_action": d.recommended_action.value,
        "root_symptom": d.root_cause.symptom if d.root_cause else None,
        "sink": b.label,
        "operation": b.kind.operation,
        "isolates": b.kind.isolates,
        "dry_run": dry_run,
    }
    record = ActionRecord.model_validate(base | fields)
    return record if record.outcome == Outcome.pending else record.model_copy(update={"finished_at": now})


def _to_do(b: Bound, dry_run: bool) -> dict[str, Any]:
    """What a decision to act records: failed when its sink could not be built, else pending (a dry run's: dry_run)."""
    if b.sink is None:
        return {"outcome": Outcome.failed, "reason": f"the sink could not be built: {b.error}"}
    return {"outcome": Outcome.dry_run if dry_run else Outcome.pending}


def _reversal(r: ActionRecord, b: Bound | None, now: datetime, dry_run: bool, reason: str) -> ActionRecord:
    """A record reversing `r` (an undo, a re-diagnosis): what `r` was about, the sink's reversal."""
    if b is None:
        to_do: dict[str, Any] = {"outcome": Outcome.failed, "reason": f"sink {r.sink} is not configured any more"}
    else:
        to_do = _to_do(b, dry_run)
    return r.model_copy(
        update={
            "action_id": str(uuid.uuid4()),
            "decided_at": now,
            "finished_at": None,
            "operation": b.kind.reversal if b is not None else "revert",
            "isolates": False,
            "dry_run": dry_run,
            "reverts": r.action_id,
            "tries": 0,
            "details": {},
            "reason": reason,
        }
        | to_do
        | ({} if to_do["outcome"] == Outcome.pending else {"finished_at": now})
    )


# ------------------------------------------------------------------------------------------ decide


@dataclass
class Context:
    """What one diagnosis' decisions are made from, besides the history read in their transaction."""

    d: Diagnosis
    cfg: ActionsConfig
    bound: list[Bound]
    fleet: Fleet | None
    fleet_error: str
    now: datetime


def targets(d: Diagnosis) -> list[str | None]:
    """What a diagnosis' actions are about: each affected node, else the attempt (None)."""
    return [*d.affected_nodes] or [None]


def plan(ctx: Context, history: ActionHistory) -> list[ActionRecord]:
    """Every decision about the diagnosis: reversals of what a re-diagnosis no longer backs, each
    isolating sink's per node (the guard's verdicts), each notifier's per node."""
    if any(b.kind.isolates for b in ctx.bound):
        verdicts = guard.decide(ctx.d, ctx.cfg, history, ctx.fleet, ctx.fleet_error)
    else:
        why = f"no sink of cluster {ctx.d.attempt.cluster} isolates nodes"
        verdicts = [guard.NodeVerdict(n, False, why) for n in targets(ctx.d)]
    return superseded(ctx, history, verdicts) + isolations(ctx, verdicts) + notifications(ctx, history)


def isolations(ctx: Context, verdicts: list[guard.NodeVerdict]) -> list[ActionRecord]:
    out = []
    for b in (b for b in ctx.bound if b.kind.isolates):
        for v in verdicts:
            fields = _to_do(b, ctx.cfg.dry_run) if v.isolate else {"outcome": Outcome.skipped, "reason": v.reason}
            out.append(_record(ctx.d, b, ctx.now, ctx.cfg.dry_run, node=v.node, **fields))
    return out


def _told(r: ActionRecord, d: Diagnosis) -> bool:
    """Whether notification `r` said what `d` says (the same verdict and action)."""
    said = (r.terminal_state, r.sub_domain, r.recommended_action)
    return said == (d.terminal_state.value, d.sub_domain.value, d.recommended_action.value)


def notifications(ctx: Context, history: ActionHistory) -> list[ActionRecord]:
    d, out = ctx.d, []
    for b in (b for b in ctx.bound if not b.kind.isolates):
        on = getattr(b.config, "on_actions", [])
        if d.recommended_action not in on:
            why = f"recommended action {d.recommended_action.value} is not among this sink's on_actions"
            out.append(_record(d, b, ctx.now, ctx.cfg.dry_run, outcome=Outcome.skipped, reason=why))
            continue
        standing = [r for r in history.standing if r.sink == b.label and r.diagnosis_id == d.diagnosis_id]
        for node in targets(d):
            if any(r.node == node and _told(r, d) for r in standing):
                fields: dict[str, Any] = {"outcome": Outcome.skipped, "reason": "already told for this diagnosis"}
            else:
                fields = _to_do(b, ctx.cfg.dry_run)
            out.append(_record(d, b, ctx.now, ctx.cfg.dry_run, node=node, **fields))
    return out


def superseded(ctx: Context, history: ActionHistory, verdicts: list[guard.NodeVerdict]) -> list[ActionRecord]:
    """What this diagnosis' earlier actions (an earlier verdict's, by older rules) no longer stand
    behind: a notification is reversed (the alert resolved, the event withdrawn); an isolation is
    flagged for undo, not undone (a person decides whether the node goes back into service)."""
    d, by_label = ctx.d, {b.label: b for b in ctx.bound}
    kept = {v.already for v in verdicts if v.already}
    nodes = set(targets(d))
    now_verdict = f"{d.terminal_state.value}/{d.sub_domain.value} (action {d.recommended_action.value})"
    why = f"re-diagnosed by rules {d.rules.version}: now {now_verdict}"
    out = []
    for r in (r for r in history.standing if r.diagnosis_id == d.diagnosis_id):
        b = by_label.get(r.sink)
        if r.isolates and r.action_id not in kept and r.action_id not in history.flagged:
            flag = f"{why}; the {r.operation} of {r.node} no longer stands: `attribution actions undo {d.diagnosis_id}`"
            out.append(r.model_copy(update=_flag(r, ctx.now, flag)))
        elif not r.isolates and not (_told(r, d) and r.node in nodes and b is not None and _wants(b, d)):
            out.append(_reversal(r, b, ctx.now, ctx.cfg.dry_run, why))
    return out


def _wants(b: Bound, d: Diagnosis) -> bool:
    return d.recommended_action in getattr(b.config, "on_actions", [])


def _flag(r: ActionRecord, now: datetime, reason: str) -> dict[str, Any]:
    return {
        "action_id": str(uuid.uuid4()),
        "decided_at": now,
        "finished_at": now,
        "operation": "flag_undo",
        "isolates": False,
        "outcome": Outcome.flagged,
        "reason": reason,
        "reverts": r.action_id,
        "tries": 0,
        "details": {},
    }


# ----------------------------------------------------------------------------------------- execute


def _try(fn: Callable[[], dict[str, Any]], retries: int) -> dict[str, Any]:
    """One sink call under the retry policy, as the fields of its outcome."""
    delays = [RETRY_DELAYS_S[min(i, len(RETRY_DELAYS_S) - 1)] for i in range(retries)]
    tries = 0
    while True:
        tries += 1
        try:
            return {"outcome": Outcome.done, "details": fn(), "tries": tries}
        except ActionSkipped as exc:
            return {"outcome": Outcome.skipped, "reason": first_line(exc), "tries": tries}
        except ActionError as exc:
            if exc.transient and delays:
                time.sleep(delays.pop(0))
                continue
            return {"outcome": Outcome.failed, "reason": first_line(exc), "tries": tries}
        except Exception as exc:  # a sink's bug fails its action, never the diagnosis or the other sinks
            return {"outcome": Outcome.failed, "reason": f"{type(exc).__name__}: {first_line(exc)}", "tries": tries}


def _finished(r: ActionRecord, fields: dict[str, Any]) -> ActionRecord:
    done = r.model_copy(update=fields | {"finished_at": datetime.now(timezone.utc)})
    level = logging.WARNING if done.outcome == Outcome.failed else logging.INFO
    log.log(
        level,
        "%s %s %s: %s%s",
        done.sink,
        done.operation,
        done.node or "-",
        done.outcome.value,
        f" ({done.reason})" if done.reason else "",
    )
    return done


def isolation_said(records: list[ActionRecord], node: str | None) -> str:
    """What was done to isolate `node`, or why nothing was: what a notification says."""
    said = []
    for r in (r for r in records if r.isolates and r.node == node):
        if r.outcome == Outcome.done:
            said.append(f"{r.sink} {r.operation} done")
        elif r.outcome == Outcome.dry_run:
            said.append(f"dry run: {r.sink} would {r.operation}")
        else:
            said.append(f"not isolated: {r.sink} {r.operation} {r.outcome.value}: {r.reason}")
    return "; ".join(said) or "no sink of this cluster isolates nodes"


def carry_out(records: list[ActionRecord], ctx: Context, reversed_: dict[str, ActionRecord]) -> list[ActionRecord]:
    """The pending decisions carried out, in order: reversals, isolations, notifications."""
    by_label = {b.label: b for b in ctx.bound}
    out = {r.action_id: r for r in records}
    order = sorted(records, key=lambda r: (r.reverts is None, not r.isolates))
    for r in (r for r in order if r.outcome == Outcome.pending):
        sink = by_label[r.sink].sink
        if r.reverts is not None:
            call = partial(sink.revert, reversed_[r.reverts], r.reason)
        else:
            isolation = "" if r.isolates else isolation_said(list(out.values()), r.node)
            call = partial(sink.act, Request(ctx.d, r.node, r.action_id, isolation, ctx.cfg.dashboard_url))
        out[r.action_id] = _finished(r, _try(call, ctx.cfg.retries))
    return [out[r.action_id] for r in records]


# ------------------------------------------------------------------------------------ act and undo


def act_on(d: Diagnosis, cluster: Any, warehouse: str, now: datetime | None = None) -> list[ActionRecord]:
    """The cluster's `actions` on a diagnosis stored in `warehouse`: decided, recorded, carried out
    (unless a dry run), each outcome recorded. Returns the records."""
    cfg: ActionsConfig = cluster.actions
    bound = build_sinks(cfg, cluster)
    fleet, fleet_error = _fleet(bound, d, cfg)
    ctx = Context(d, cfg, bound, fleet, fleet_error, now or datetime.now(timezone.utc))
    wh = Warehouse(warehouse)
    reversed_: dict[str, ActionRecord] = {}

    def decide(history: ActionHistory) -> list[ActionRecord]:
        reversed_.update({r.action_id: r for r in history.standing})
        return plan(ctx, history)

    records = wh.decide_actions(d.attempt.cluster, d.diagnosis_id, cfg.dry_run, ctx.now - WINDOW, decide)
    if cfg.dry_run:
        return [_finished(r, {}) for r in records]  # logged: what a dry run decided
    pending = {r.action_id for r in records if r.outcome == Outcome.pending}
    done = carry_out(records, ctx, reversed_)
    wh.finish_actions([r for r in done if r.action_id in pending])
    return done


def undo(diagnosis_id: str, clusters: dict[str, Any], warehouse: str, preview: bool = False) -> list[ActionRecord]:
    """Reverse every action of a diagnosis still in force (resume, remove the taint, resolve the
    alert, withdraw the event), each reversal recorded; a dry run's actions are reversed as a dry
    run. `preview`: the reversals as they would be, nothing recorded or sent."""
    wh = Warehouse(warehouse)
    if not wh.actions(diagnosis_id=diagnosis_id, limit=1):
        raise BadInput(f"no actions are recorded for diagnosis {diagnosis_id} in {wh}")
    standing = wh.actions(diagnosis_id=diagnosis_id, in_force=True)
    if not standing:
        return []
    name = standing[0].cluster
    cluster = clusters.get(name)
    if cluster is None or getattr(cluster, "actions", None) is None:
        raise BadInput(f"cluster {name} has no actions block here: its sinks (where to undo) are not configured")
    bound = {b.label: b for b in build_sinks(cluster.actions, cluster)}
    now = datetime.now(timezone.utc)
    order = sorted(standing, key=lambda r: not r.isolates)  # a node back in service before its alert is resolved
    why = f"undone by `attribution actions undo {diagnosis_id}`"
    records = [_reversal(r, bound.get(r.sink), now, r.dry_run, why) for r in order]
    if preview:
        return records
    records = wh.record_actions(records)
    pending = {r.action_id for r in records if r.outcome == Outcome.pending}
    retries = cluster.actions.retries
    done = [
        _finished(r, _try(partial(bound[r.sink].sink.revert, original, why), retries)) if r.action_id in pending else r
        for r, original in zip(records, order)
    ]
    wh.finish_actions([r for r in done if r.action_id in pending])
    return done
