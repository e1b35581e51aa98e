"""Backfill: find the failed attempts of a window, diagnose those the warehouse lacks or holds
under an older rules version, with a concurrency limit; finish with a summary.

    discover (Slurm accounting, Kueue workloads, or a directory tree of bundles)
      -> plan (skip: already diagnosed by these rules; redo: older rules; new)
      -> diagnose each (at most `concurrency` at once) -> summary

The same story runs inline here (`attribution backfill --inline`, no Prefect import) and as the
Prefect flow `backfill` in flows/backfill_flow.py (the nightly deployment, `attribution backfill`). Each attempt is diagnosed in-process by
the inline steps inside one task, not as a flow run of its own: a flow run per attempt costs a
Python process and seconds of start-up, which would cap a nightly backfill far below what one
worker can do.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from attribution.config import Config, load_config
from flows.inline import attribute_inline
from flows.pipeline import Request
from rules.engine import Settings
from rules.pack import Pack, default_pack, load_pack
from tasks import steps


@dataclass(frozen=True)
class Attempt:
    cluster: str
    scheduler: str
    job_id: str
    attempt: int
    end: datetime | None = None
    bundle: str | None = None    # offline: the bundle directory

    @property
    def key(self) -> str:
        return f"{self.cluster}:{self.scheduler}:{self.job_id}:{self.attempt}"


@dataclass
class Plan:
    todo: list[tuple[Attempt, str]] = field(default_factory=list)    # (attempt, why: new | stale_rules | forced)
    skipped: list[Attempt] = field(default_factory=list)             # diagnosed by the current rules already
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (where, why) found but not diagnosable


@dataclass
class Summary:
    found: int = 0
    skipped: int = 0
    diagnosed: int = 0
    failed: int = 0
    redone_stale: int = 0
    by_terminal_state: Counter = field(default_factory=Counter)
    failures: list[dict[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"found": self.found, "skipped": self.skipped, "diagnosed": self.diagnosed, "failed": self.failed,
                "redone_stale": self.redone_stale, "by_terminal_state": dict(sorted(self.by_terminal_state.items())),
                "failures": self.failures, "seconds": round(self.seconds, 2)}


_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_when(text: str, now: datetime | None = None) -> datetime:
    """An RFC 3339 time (no zone = UTC), 'now', or a span ago: '90m', '26h', '7d'."""
    now = now or datetime.now(timezone.utc)
    text = text.strip()
    if text == "now":
        return now
    m = _RELATIVE.match(text)
    if m:
        return now - timedelta(**{_UNITS[m.group(2)]: float(m.group(1))})
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not a time: use RFC 3339 (2026-12-01T00:00:00Z), 'now' or a span ago (26h, 7d)") from None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


# ---------------------------------------------------------------------------------------- discover

def discover_bundles(root: Path, since: datetime, until: datetime) -> tuple[list[Attempt], list[tuple[str, str]]]:
    """Every bundle (a directory with attempt.yaml) under root whose attempt ended in [since, until)."""
    from connectors.bundle import BundleError, load_scope

    found, bad = [], []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        if "attempt.yaml" not in filenames:
            continue
        dirnames[:] = []    # a bundle's own folders hold logs, not bundles
        try:
            s = load_scope(Path(dirpath))
        except (BundleError, ValueError) as exc:
            bad.append((dirpath, str(exc).splitlines()[0]))
            continue
        if since <= s.end < until and s.state.split()[0].upper() != "COMPLETED":
            found.append(Attempt(s.cluster, s.scheduler, s.job_id, s.attempt, s.end, bundle=dirpath))
    return sorted(found, key=lambda a: (a.end, a.key)), bad


def discover_cluster(name: str, cluster: Any, since: datetime, until: datetime) -> list[Attempt]:
    if cluster.scheduler == "slurm":
        from connectors import slurm

        return [Attempt(name, "slurm", j["job_id"], int(j["restarts"] or 0), j["end"])
                for j in slurm.discover_failed(cluster.slurm or slurm.SlurmSource(), since, until)]
    if cluster.scheduler == "kueue":
        from connectors import kueue

        return [Attempt(name, "kueue", w["job_id"], w["attempt"], w["end"])
                for w in kueue.discover_failed(cluster.kueue or kueue.KueueSource(), since, until)]
    return []   # a static cluster has no scheduler to ask


def discover(cfg: Config, since: datetime, until: datetime, cluster: str | None = None,
             bundles_dir: str | None = None) -> tuple[list[Attempt], list[tuple[str, str]]]:
    if bundles_dir:
        found, bad = discover_bundles(Path(bundles_dir), since, until)
        return [a for a in found if cluster is None or a.cluster == cluster], bad
    names = [cfg.cluster(cluster)[0]] if cluster else list(cfg.clusters)
    found: list[Attempt] = []
    bad: list[tuple[str, str]] = []
    for name in names:
        try:
            found += discover_cluster(name, cfg.clusters[name], since, until)
        except Exception as exc:  # one cluster's scheduler down must not hide the others' attempts
            bad.append((f"cluster {name}", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"))
    return found, bad


# -------------------------------------------------------------------------------------------- plan

def diagnosed_versions(warehouse: str | None, attempts: list[Attempt]) -> dict[str, str]:
    """attempt key -> rules version of its stored diagnosis."""
    from warehouse.store import Warehouse

    if not warehouse or not attempts:
        return {}
    return dict(Warehouse(warehouse).rows("""
        SELECT d.cluster || ':' || d.scheduler || ':' || d.job_id || ':' || d.attempt, d.rules_version
        FROM diagnoses d JOIN (SELECT unnest($keys) AS k) w
          ON w.k = d.cluster || ':' || d.scheduler || ':' || d.job_id || ':' || d.attempt
    """, {"keys": [a.key for a in attempts]}))


def plan(attempts: Iterable[Attempt], done: dict[str, str], rules_version: str, force: bool = False) -> Plan:
    p = Plan()
    seen = set()
    for a in attempts:
        if a.key in seen:   # the same attempt found twice (e.g. two bundles of it): diagnose once
            continue
        seen.add(a.key)
        have = done.get(a.key)
        if force:
            p.todo.append((a, "forced"))
        elif have is None:
            p.todo.append((a, "new"))
        elif have != rules_version:
            p.todo.append((a, "stale_rules"))
        else:
            p.skipped.append(a)
    return p


# ----------------------------------------------------------------------------------------- diagnose

def diagnose_one(a: Attempt, cfg: Config, pack: Pack, settings: Settings, warehouse: str | None) -> dict[str, str]:
    """One attempt, the inline steps; returns what the summary needs."""
    if a.bundle:
        request = Request(bundle=a.bundle, warehouse=warehouse, settings=settings)
    else:
        request = Request(live=steps.LiveScope(cluster_name=a.cluster, cluster=cfg.clusters[a.cluster], job_id=a.job_id,
                                               require_ended=True),
                          warehouse=warehouse, settings=settings)
    d = attribute_inline(request, pack)
    return {"terminal_state": d.terminal_state, "sub_domain": d.sub_domain, "diagnosis_id": d.diagnosis_id}


def run_all(todo: list[tuple[Attempt, str]], submit: Callable[[Attempt], Any], wait_any: Callable[[set], Any],
            concurrency: int, summary: Summary, progress: Callable[[int, int, Attempt, str], None] | None = None) -> None:
    """Keep at most `concurrency` attempts in flight; record each outcome as it lands."""
    queue = list(todo)
    inflight: dict[Any, tuple[Attempt, str]] = {}
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
            msg = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            summary.failures.append({"attempt": a.key, "error": msg})
            if progress:
                progress(i, n, a, f"FAILED {msg}")
            continue
        summary.diagnosed += 1
        summary.redone_stale += why == "stale_rules"
        summary.by_terminal_state[out["terminal_state"]] += 1
        if progress:
            progress(i, n, a, f"{out['terminal_state']}/{out['sub_domain']}" + (" (rules changed)" if why == "stale_rules" else ""))


def _window(since: str | None, until: str | None, cfg: Config) -> tuple[datetime, datetime]:
    until_t = parse_when(until) if until else datetime.now(timezone.utc)
    since_t = parse_when(since) if since else until_t - timedelta(hours=cfg.backfill.lookback_hours)
    if since_t >= until_t:
        raise ValueError(f"--since ({since_t.isoformat()}) must be before --until ({until_t.isoformat()})")
    return since_t, until_t


@dataclass
class Prepared:
    """Everything a backfill run needs once the window is discovered and planned."""

    cfg: Config
    pack: Pack
    settings: Settings
    warehouse: str
    since: datetime
    until: datetime
    plan: Plan
    summary: Summary


def prepare(cfg: Config, since: str | None, until: str | None, cluster: str | None, bundles_dir: str | None,
            force: bool, warehouse: str | None, rules_dir: str | None, discover_fn: Callable = discover) -> Prepared:
    since_t, until_t = _window(since, until, cfg)
    warehouse = warehouse or cfg.warehouse
    pack = load_pack(rules_dir or cfg.rules_dir, skip_broken=True) if (rules_dir or cfg.rules_dir) else default_pack()
    found, bad = discover_fn(cfg, since_t, until_t, cluster, bundles_dir or cfg.backfill.bundles_dir)
    p = plan(found, diagnosed_versions(warehouse, found), pack.version, force)
    p.unreadable += bad
    summary = Summary(found=len(found) + len(p.unreadable), skipped=len(p.skipped), failed=len(p.unreadable),
                      failures=[{"attempt": where, "error": why} for where, why in p.unreadable])
    return Prepared(cfg, pack, Settings(**cfg.rules.model_dump()), warehouse, since_t, until_t, p, summary)


def backfill_inline(since: str | None = None, until: str | None = None, cluster: str | None = None,
                    bundles_dir: str | None = None, force: bool = False, concurrency: int | None = None,
                    warehouse: str | None = None, rules_dir: str | None = None,
                    progress: Callable[[int, int, Attempt, str], None] | None = None,
                    cfg: Config | None = None) -> Summary:
    started = time.monotonic()
    r = prepare(cfg or load_config(), since, until, cluster, bundles_dir, force, warehouse, rules_dir)
    summary = r.summary
    n = concurrency or r.cfg.backfill.concurrency
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="backfill") as pool:
        run_all(r.plan.todo, lambda a: pool.submit(diagnose_one, a, r.cfg, r.pack, r.settings, r.warehouse),
                lambda fs: next(iter(wait_futures(fs, return_when=FIRST_COMPLETED).done)), n, summary, progress)
    summary.seconds = time.monotonic() - started
    return summary
