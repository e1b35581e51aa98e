"""Backfill: find the failed attempts of a window, diagnose those the warehouse lacks or holds
under an older rules version, with a concurrency limit; finish with a summary.

    discover (each cluster's scheduler: Slurm accounting, Kueue workloads ...; or a directory tree of bundles)
      -> plan (skip: already diagnosed by these rules; redo: older rules; new)
      -> diagnose each (at most `concurrency` at once) -> maintain the warehouse -> summary

The same story runs inline here (`attribution backfill --inline`, no Prefect import) and as the
Prefect flow `backfill` in flows/backfill_flow.py (the nightly deployment, `attribution backfill`).
Each attempt is diagnosed in-process by
the inline steps inside one task, not as a flow run of its own: a flow run per attempt costs a
Python process and seconds of start-up, which would cap a nightly backfill far below what one
worker can do.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from workload_attribution.contracts.errors import BadInput, SourceError, first_line
from workload_attribution.contracts.identity import AttemptId, EndedAttempt, Target
from workload_attribution.contracts.times import parse_when
from workload_attribution.flows.config import ClusterConfig, Config, load_config
from workload_attribution.flows.inline import attribute_inline
from workload_attribution.flows.pipeline import load_rules, resolve
from workload_attribution.rules.pack import Pack
from workload_attribution.warehouse.precedence import may_replace


@dataclass
class Plan:
    todo: list[tuple[EndedAttempt, str]] = field(default_factory=list)  # (attempt, why: new | stale_rules | forced)
    skipped: list[EndedAttempt] = field(default_factory=list)  # diagnosed by the current rules already
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (where, why) found but not diagnosable


@dataclass
class Summary:
    since: datetime | None = None
    until: datetime | None = None
    source: str = ""  # where attempts were looked for
    found: int = 0
    skipped: int = 0
    diagnosed: int = 0
    failed: int = 0
    redone_stale: int = 0
    by_terminal_state: Counter[str] = field(default_factory=Counter)
    failures: list[dict[str, str]] = field(default_factory=list)
    discovery_failures: list[dict[str, str]] = field(default_factory=list)  # a cluster that could not be asked
    maintenance: dict[str, Any] | None = None  # Warehouse.maintain's counts, or {"error": ...}
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
            "source": self.source,
            "found": self.found,
            "skipped": self.skipped,
            "diagnosed": self.diagnosed,
            "failed": self.failed,
            "discovery_failures": self.discovery_failures,
            "redone_stale": self.redone_stale,
            "by_terminal_state": dict(sorted(self.by_terminal_state.items())),
            "failures": self.failures,
            "warehouse_maintenance": self.maintenance,
            "seconds": round(self.seconds, 2),
        }


# ---------------------------------------------------------------------------------------- discover


def discover_bundles(root: Path, since: datetime, until: datetime) -> tuple[list[EndedAttempt], list[tuple[str, str]]]:
    """Every bundle (a directory with attempt.yaml) under root whose attempt ended in [since, until)
    other than completed (its scheduler's table reads attempt.yaml's exit code, reason and state)."""
    from workload_attribution.connectors.bundle import BundleError, load_scope
    from workload_attribution.connectors.schedulers import get_scheduler, scope_facts, warn_unknown

    found, bad = [], []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        if "attempt.yaml" not in filenames:
            continue
        dirnames[:] = []  # a bundle's own folders hold logs, not bundles
        try:
            s = load_scope(Path(dirpath))
        except (BundleError, ValueError) as exc:
            bad.append((dirpath, str(exc).splitlines()[0]))
            continue
        states = get_scheduler(s.scheduler).states
        if since <= s.end < until and not states.read(scope_facts(s)).completed:
            warn_unknown(states, s.state, f"{dirpath}/attempt.yaml")  # diagnosed, its note says the same
            found.append(EndedAttempt(s.id, Target(bundle=dirpath), s.end))
    return sorted(found, key=lambda a: (a.end, a.key)), bad


def discover_cluster(name: str, cluster: ClusterConfig, since: datetime, until: datetime) -> list[EndedAttempt]:
    """The attempts the cluster's scheduler recorded as failed in [since, until); none for a
    scheduler that keeps no record (static)."""
    scheduler = cluster.scheduling
    if scheduler.discover is None:
        return []
    return scheduler.discover(cluster.settings_of(scheduler), name, since, until)


class DiscoveryFailed(SourceError):
    """A cluster's scheduler could not be asked for its failed attempts; `summary` holds the rest."""

    def __init__(self, summary: dict[str, Any]):
        self.summary = summary
        where = ", ".join(f"{f['where']} ({f['error']})" for f in summary.get("discovery_failures") or [])
        super().__init__(f"discovery failed: {where}")


@dataclass
class Discovered:
    attempts: list[EndedAttempt] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (bundle, why): found, cannot be diagnosed
    failures: list[tuple[str, str]] = field(default_factory=list)  # (cluster, why): could not be asked at all
    source: str = ""


def discover(
    cfg: Config, since: datetime, until: datetime, cluster: str | None = None, bundles_dir: str | None = None
) -> Discovered:
    if bundles_dir:
        found, bad = discover_bundles(Path(bundles_dir), since, until)
        return Discovered(
            [a for a in found if cluster is None or a.id.cluster == cluster], bad, source=f"bundles under {bundles_dir}"
        )
    names = [cfg.cluster(cluster)[0]] if cluster else list(cfg.clusters)
    out = Discovered(source="cluster(s) " + ", ".join(names))
    for name in names:
        try:
            out.attempts += discover_cluster(name, cfg.clusters[name], since, until)
        except Exception as exc:  # one cluster's scheduler down must not hide the others' attempts
            out.failures.append((f"cluster {name}", f"{type(exc).__name__}: {first_line(exc)}"))
    return out


# -------------------------------------------------------------------------------------------- plan


def diagnosed_versions(warehouse: str | None, attempts: list[EndedAttempt]) -> dict[str, str]:
    """attempt key -> rules version of its stored diagnosis."""
    from workload_attribution.warehouse.store import Warehouse

    if not warehouse or not attempts:
        return {}
    ids = [a.id for a in attempts]
    rows = Warehouse(warehouse).rows(
        """
        SELECT d.cluster, d.scheduler, d.job_id, d.attempt, d.rules_version
        FROM diagnoses d JOIN (SELECT unnest($c) AS cluster, unnest($s) AS scheduler, unnest($j) AS job_id,
                                      unnest($a) AS attempt) w USING (cluster, scheduler, job_id, attempt)
    """,
        {
            "c": [i.cluster for i in ids],
            "s": [i.scheduler for i in ids],
            "j": [i.job_id for i in ids],
            "a": [i.attempt for i in ids],
        },
    )
    return {AttemptId(cluster=c, scheduler=s, job_id=j, attempt=n).key: v for c, s, j, n, v in rows}


def plan(attempts: Iterable[EndedAttempt], done: dict[str, str], rules_version: str, force: bool = False) -> Plan:
    p = Plan()
    seen = set()
    for a in attempts:
        if a.key in seen:  # the same attempt found twice (e.g. two bundles of it): diagnose once
            continue
        seen.add(a.key)
        have = done.get(a.key)
        if force:
            p.todo.append((a, "forced"))
        elif have is None:
            p.todo.append((a, "new"))
        elif have != rules_version and may_replace(rules_version, have):
            p.todo.append((a, "stale_rules"))  # not when a newer pack decided: it would be kept
        else:
            p.skipped.append(a)
    return p


# ----------------------------------------------------------------------------------------- diagnose


def diagnose_one(a: EndedAttempt, cfg: Config, pack: Pack, warehouse: str | None) -> dict[str, str]:
    """One attempt, the inline steps; returns what the summary needs."""
    target, options = resolve(cfg.model_copy(update={"warehouse": warehouse or ""}), a.target, pack)
    d = attribute_inline(target, options)
    return {"terminal_state": d.terminal_state, "sub_domain": d.sub_domain, "diagnosis_id": d.diagnosis_id}


def run_all(
    todo: list[tuple[EndedAttempt, str]],
    submit: Callable[[EndedAttempt], Any],
    wait_any: Callable[[set[Any]], Any],
    concurrency: int,
    summary: Summary,
    progress: Callable[[int, int, EndedAttempt, str], None] | None = None,
) -> None:
    """Keep at most `concurrency` attempts in flight; record each outcome as it lands."""
    queue = list(todo)
    inflight: dict[Any, tuple[EndedAttempt, str]] = {}
    n, i = len(todo), 0
    while queue or inflight:
        while queue and len(inflight) < concurrency:
            a, why = queue.pop(0)
            inflight[submit(a)] = (a, why)
        fut = wait_any(set(inflight))
        a, why = inflight.pop(fut)
        i += 1
        try:
            out = fut.result()
        except Exception as exc:
            summary.failed += 1
            msg = f"{type(exc).__name__}: {first_line(exc)}"
            summary.failures.append({"attempt": a.key, "error": msg})
            if progress:
                progress(i, n, a, f"FAILED {msg}")
            continue
        summary.diagnosed += 1
        summary.redone_stale += why == "stale_rules"
        summary.by_terminal_state[out["terminal_state"]] += 1
        if progress:
            progress(
                i,
                n,
                a,
                f"{out['terminal_state']}/{out['sub_domain']}" + (" (rules changed)" if why == "stale_rules" else ""),
            )


def maintain_warehouse(warehouse: str | None, summary: Summary) -> None:
    """The night's last step: keep the warehouse quick to read (Warehouse.maintain: a DuckLake's
    rows the day's writers left in its catalog go to Parquet files, old snapshots expire). A
    failure is the summary's (and the exit code's); the diagnoses written before it stay."""
    from workload_attribution.warehouse.store import Warehouse

    if not warehouse:
        return
    try:
        summary.maintenance = Warehouse(warehouse).maintain()
    except Exception as exc:
        summary.maintenance = {"error": f"{type(exc).__name__}: {first_line(exc)}"}


def _window(since: str | None, until: str | None, cfg: Config) -> tuple[datetime, datetime]:
    until_t = parse_when(until) if until else datetime.now(timezone.utc)
    since_t = parse_when(since) if since else until_t - timedelta(hours=cfg.backfill.lookback_hours)
    if since_t >= until_t:
        raise BadInput(f"--since ({since_t.isoformat()}) must be before --until ({until_t.isoformat()})")
    return since_t, until_t


@dataclass
class Prepared:
    """Everything a backfill run needs once the window is discovered and planned."""

    cfg: Config
    pack: Pack
    warehouse: str
    since: datetime
    until: datetime
    plan: Plan
    summary: Summary


def prepare(
    cfg: Config,
    since: str | None,
    until: str | None,
    cluster: str | None,
    bundles_dir: str | None,
    force: bool,
    warehouse: str | None,
    rules_dir: str | None,
    discover_fn: Callable[..., Discovered] = discover,
) -> Prepared:
    since_t, until_t = _window(since, until, cfg)
    warehouse = warehouse or cfg.warehouse
    pack = load_rules(rules_dir or cfg.rules_dir)
    d = discover_fn(cfg, since_t, until_t, cluster, bundles_dir or cfg.backfill.bundles_dir)
    p = plan(d.attempts, diagnosed_versions(warehouse, d.attempts), pack.version, force)
    p.unreadable += d.unreadable
    summary = Summary(
        since=since_t,
        until=until_t,
        source=d.source,
        found=len(d.attempts) + len(p.unreadable),
        skipped=len(p.skipped),
        failed=len(p.unreadable),
        failures=[{"attempt": where, "error": why} for where, why in p.unreadable],
        discovery_failures=[{"where": where, "error": why} for where, why in d.failures],
    )
    return Prepared(cfg, pack, warehouse, since_t, until_t, p, summary)


def backfill_inline(
    since: str | None = None,
    until: str | None = None,
    cluster: str | None = None,
    bundles_dir: str | None = None,
    force: bool = False,
    concurrency: int | None = None,
    warehouse: str | None = None,
    rules_dir: str | None = None,
    progress: Callable[[int, int, EndedAttempt, str], None] | None = None,
    on_window: Callable[[datetime, datetime, int, int, int], None] | None = None,
    cfg: Config | None = None,
) -> Summary:
    started = time.monotonic()
    r = prepare(cfg or load_config(), since, until, cluster, bundles_dir, force, warehouse, rules_dir)
    summary = r.summary
    if on_window:
        on_window(r.since, r.until, summary.found, summary.skipped, len(r.plan.todo))
    n = concurrency or r.cfg.backfill.concurrency
    from workload_attribution.warehouse.backends import writes_coming

    # more writes to come until the loop ends: a warehouse file is kept attached between them
    with writes_coming(), ThreadPoolExecutor(max_workers=n, thread_name_prefix="backfill") as pool:
        run_all(
            r.plan.todo,
            lambda a: pool.submit(diagnose_one, a, r.cfg, r.pack, r.warehouse),
            lambda fs: next(iter(wait_futures(fs, return_when=FIRST_COMPLETED).done)),
            n,
            summary,
            progress,
        )
    maintain_warehouse(r.warehouse, summary)
    summary.seconds = time.monotonic() - started
    return summary
