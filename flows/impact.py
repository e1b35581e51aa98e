"""`attribution rules impact`: what a candidate rules pack would change in the verdicts of archived
attempts, before it lands. Every archived attempt in the window is replayed under the shipped pack
and the candidate (tasks/replay.py: no collection, nothing written), on this machine's cores (one
process each); the report says how many changed, the transitions between verdicts, and each
changed attempt with its old and new root, node and action.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from workload_attribution.contracts.errors import BadInput
from workload_attribution.rules.engine import Settings
from workload_attribution.rules.pack import Pack, RuleFileError, load_pack
from workload_attribution.warehouse.archive import Archive, Outcome

BATCH = 16  # attempts handed to a process at a time


class Changed(BaseModel):
    diagnosis_id: str
    cluster: str
    job_id: str
    attempt: int
    end: datetime
    old: Outcome
    new: Outcome


class Transition(BaseModel):
    old: str = Field(description="terminal_state/sub_domain under the shipped pack")
    new: str
    attempts: int
    changes: list[str] = Field(default_factory=list, description="what changed in them: verdict, root, blamed, action")


class ImpactReport(BaseModel):
    archive: str
    shipped: str = Field(description="the shipped pack's version")
    candidate: str
    differences: list[str] = Field(default_factory=list, description="what differs between the packs")
    unseen: list[str] = Field(
        default_factory=list,
        description="source: literal, for each prefilter literal of the candidate's extract rules whose lines "
        "the shipped pack did not stage (so the archive lacks them, and no replay can see them)",
    )
    since: datetime | None = None
    cluster: str | None = None
    attempts: int = Field(0, description="archived attempts in the window, replayed")
    changed: list[Changed] = Field(default_factory=list)
    transitions: list[Transition] = Field(default_factory=list)
    failed: dict[str, str] = Field(default_factory=dict, description="diagnosis_id -> why it was not replayed")
    how: dict[str, int] = Field(default_factory=dict, description="what the replays took: alike, screened, ...")
    seconds: float = 0.0

    @property
    def per_minute(self) -> float:
        return self.attempts / self.seconds * 60 if self.seconds else 0.0

    @property
    def changed_percent(self) -> float:
        return 100.0 * len(self.changed) / self.attempts if self.attempts else 0.0


def load_candidate(path: str) -> Pack:
    try:
        return load_pack(path)
    except RuleFileError as exc:
        raise BadInput(f"--candidate: {exc}") from None


# ------------------------------------------------------------------------------- one process' work

_worker: dict[str, Any] = {}


def _start(shipped_dir: str | None, candidate_dir: str, settings: dict[str, Any], archive: str) -> None:
    """A replaying process: both packs loaded and their databases prepared once."""
    from workload_attribution.flows.pipeline import load_rules
    from workload_attribution.tasks.replay import Replayer

    _worker["replayer"] = Replayer(load_rules(shipped_dir), load_pack(candidate_dir), Settings(**settings))
    _worker["archive"] = Archive(archive)


def _replay_batch(keys: list[str], since: datetime | None, cluster: str | None) -> list[dict[str, Any]]:
    """Each attempt of the batch in the window: its replay, as a plain dict (the result crosses processes)."""
    archive, replayer = _worker["archive"], _worker["replayer"]
    out = []
    for key in keys:
        try:
            m = archive.read_manifest(key)
        except Exception as exc:  # an unreadable manifest is reported, not fatal
            out.append({"key": key, "error": f"manifest: {exc}"})
            continue
        if (cluster and m.attempt.cluster != cluster) or (since and m.attempt.end < since):
            continue
        r = replayer.replay(m, archive.evidence(m))
        out.append(
            {
                "key": key,
                "diagnosis_id": m.diagnosis_id,
                "cluster": m.attempt.cluster,
                "job_id": m.attempt.job_id,
                "attempt": m.attempt.attempt,
                "end": m.attempt.end,
                "old": r.old,
                "new": r.new,
                "changed": r.changed,
                "how": r.how,
                "error": r.error,
            }
        )
    return out


# ------------------------------------------------------------------------------------ the command


def impact(
    archive: Archive,
    shipped_dir: str | None,
    candidate_dir: str,
    settings: Settings,
    since: datetime | None = None,
    cluster: str | None = None,
    jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ImpactReport:
    from workload_attribution.flows.pipeline import load_rules
    from workload_attribution.rules.diff import diff

    shipped, candidate = load_rules(shipped_dir), load_candidate(candidate_dir)
    report = ImpactReport(
        archive=str(archive),
        shipped=shipped.version,
        candidate=candidate.version,
        differences=diff(shipped, candidate).describe(),
        unseen=unseen(shipped, candidate),
        since=since,
        cluster=cluster,
    )
    started = time.monotonic()
    keys = [e.key for e in archive.entries()]
    init = (shipped_dir, candidate_dir, settings.model_dump(), str(archive))
    for r in _replays(keys, init, since, cluster, jobs, progress):
        _add(report, r)
    report.seconds = round(time.monotonic() - started, 3)
    report.transitions = transitions(report.changed)
    report.changed.sort(key=lambda c: (c.end, c.cluster, c.job_id, c.attempt))
    return report


def unseen(shipped: Pack, candidate: Pack) -> list[str]:
    """The candidate's extract rules' prefilter literals (per source) that the archive kept no line
    of: a log line is staged, and so archived, only when it holds a literal of the pack that read
    it, so a line holding a new literal is archived only if it also holds a shipped one (a shipped
    literal inside the new one). Judged against the shipped pack: the one that archived the most."""
    sources = sorted({s for r in candidate.rules if r.phase == "extract" and r.prefilter for s in r.sources})
    out = []
    for source in sources:
        kept = shipped.prefilter(source)
        out += [f"{source}: {lit}" for lit in candidate.prefilter(source) if not any(k in lit for k in kept)]
    return out


def transitions(changed: list[Changed]) -> list[Transition]:
    """Changed attempts counted by (old verdict, new verdict), with what changed in them."""
    counts = Counter((c.old.verdict, c.new.verdict) for c in changed)
    what: dict[tuple[str, str], set[str]] = {}
    for c in changed:
        what.setdefault((c.old.verdict, c.new.verdict), set()).update(c.old.differences(c.new))
    order = ["verdict", "root", "blamed", "action"]
    return [
        Transition(old=a, new=b, attempts=n, changes=[w for w in order if w in what[(a, b)]])
        for (a, b), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]


def _replays(
    keys: list[str],
    init: tuple[Any, ...],
    since: datetime | None,
    cluster: str | None,
    jobs: int | None,
    progress: Callable[[int, int], None] | None,
) -> Iterator[dict[str, Any]]:
    """Every attempt's replay: in this process for a few, else on `jobs` processes (default: one a core)."""
    jobs = jobs or os.cpu_count() or 1
    batches = [keys[i : i + BATCH] for i in range(0, len(keys), BATCH)]
    done = 0
    if jobs == 1 or len(batches) <= 2:
        _start(*init)
        for batch in batches:
            yield from _replay_batch(batch, since, cluster)
            done += len(batch)
            if progress:
                progress(done, len(keys))
        _worker.pop("replayer").close()
        return
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no thread or DuckDB state forked
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_start, initargs=init) as pool:
        for batch, rows in zip(batches, pool.map(_replay_batch, batches, *_repeat(len(batches), since, cluster))):
            yield from rows
            done += len(batch)
            if progress:
                progress(done, len(keys))


def _repeat(n: int, *values: Any) -> list[list[Any]]:
    return [[v] * n for v in values]


def _add(report: ImpactReport, r: dict[str, Any]) -> None:
    if r.get("error"):
        report.failed[r.get("diagnosis_id") or r["key"]] = r["error"]
        return
    report.attempts += 1
    report.how[r["how"]] = report.how.get(r["how"], 0) + 1
    if r["changed"]:
        report.changed.append(Changed.model_validate({k: r[k] for k in Changed.model_fields}))
