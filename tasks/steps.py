"""The steps of one attribution, as plain functions (no Prefect import here).

flows/attempt.py wraps them as Prefect tasks; flows/inline.py calls them directly. Both run the
same story (flows/pipeline.py): scope -> collect (each source in parallel) -> store -> attribute
-> publish.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from workload_attribution.connectors import registry
from workload_attribution.connectors import scheduler_records as sr
from workload_attribution.connectors.bundle import SOURCES as BUNDLE_SOURCES
from workload_attribution.connectors.bundle import BundleSource, load_scope, read_sacct_record
from workload_attribution.connectors.clusters import ClusterConfig
from workload_attribution.connectors.registry import CollectContext, Collected, SourceConfig
from workload_attribution.connectors.text import apply_spans
from workload_attribution.contracts.errors import BadInput, SourceError, first_line
from workload_attribution.contracts.identity import Target
from workload_attribution.contracts.models import (
    EARLIEST,
    LATEST,
    AttemptScope,
    Coverage,
    CoverageStatus,
    Diagnosis,
    Observation,
)
from workload_attribution.contracts.vocabulary import Scheduler
from workload_attribution.rules import report
from workload_attribution.rules.engine import Settings, prepare, run_phases
from workload_attribution.rules.pack import Pack
from workload_attribution.staging.attempt import create_staging
from workload_attribution.staging.database import connected, release_staging
from workload_attribution.staging.normalize import normalize
from workload_attribution.staging.observations import insert_observations
from workload_attribution.tasks.archiving import keep_events
from workload_attribution.tasks.keeping import Keeping, keep


@dataclass
class Scoped:
    """An attempt being diagnosed: its scope, its staging database, and for each source the
    connector and configuration that collect it."""

    scope: AttemptScope
    staging: str
    sources: dict[str, tuple[str, SourceConfig]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # --retry-missing: the archived coverage, whose sources' evidence was restored, not collected
    kept: list[Coverage] = field(default_factory=list)


def scope_attempt(target: Target, cluster: ClusterConfig | None = None) -> Scoped:
    """Resolve the target to an attempt's scope and open its staging database.

    A bundle's scope is its attempt.yaml; a job's comes from the cluster's scheduler (Slurm
    accounting, the Kueue Workload), waiting for the recorded end when the trigger is a completion;
    a window is taken as given. Where a bundle's attempt.yaml and its scheduler record disagree,
    the record wins (`record_wins`): a job or Kueue scope is the scheduler's record already."""
    if target.bundle:
        path = Path(target.bundle)
        written = load_scope(path)
        scope, notes = bundle_record_wins(path, written)
        bundle = BundleSource(path=str(path))
        scoped = Scoped(
            scope=scope,
            staging=create_staging(scope),
            sources={s: ("bundle", bundle) for s in BUNDLE_SOURCES},
            notes=notes,
        )
        with connected(scoped.staging) as con:
            insert_observations(con, [scope_observation(path, written)])
        return scoped
    if cluster is None or target.cluster is None:
        raise BadInput("a job or a window is scoped on a configured cluster: name one")
    sources: dict[str, tuple[str, SourceConfig]] = {}
    if target.job_id:
        if cluster.scheduler == Scheduler.slurm:
            from workload_attribution.connectors import slurm

            src = cluster.slurm or slurm.SlurmSource()
            scope = slurm.scope_job(src, target.cluster, target.job_id, require_ended=target.trigger == "completion")
            sources["sacct"] = ("slurm", src)
        elif cluster.scheduler == Scheduler.kueue:
            from workload_attribution.connectors import kueue

            src_k = cluster.kueue or kueue.KueueSource()
            scope = kueue.scope_from(kueue.fetch(src_k, target.job_id), target.cluster)
            sources["kueue"] = ("kubernetes", src_k)
        else:
            raise BadInput(
                f"cluster {target.cluster}: a {cluster.scheduler.value} cluster has no scheduler to scope "
                f"job {target.job_id!r}; give nodes + start + end"
            )
    else:
        assert target.window is not None
        w = target.window
        scope = AttemptScope(
            cluster=target.cluster,
            scheduler=Scheduler.static,
            job_id=w.job_id,
            attempt=0,
            nodes=list(w.nodes),
            start=w.start,
            end=w.end,
            state="UNKNOWN",
        )
    scope = scope.model_copy(update={"timezone": cluster.timezone})
    for name, cfg in cluster.sources.items():
        sources[name] = (cfg.connector, cfg)
    return Scoped(scope=scope, staging=create_staging(scope), sources=sources)


SACCT_FILE = "scheduler/sacct.json"
# Slurm job states of a job that has not ended: a record exported then is not the attempt's last word.
UNENDED_STATES = frozenset(
    {"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"}
)


def bundle_record_wins(bundle: Path, scope: AttemptScope) -> tuple[AttemptScope, list[str]]:
    """The bundle's scope, with the scheduler's record (scheduler/sacct.json) winning over attempt.yaml
    on the window, the nodes and the state, and a note for each disagreement. No record: attempt.yaml
    as written, silently. A record that cannot be read (its coverage says why): attempt.yaml, noted."""
    try:
        # read under the sacct source's own rules: inside the bundle, a regular file, bounded in size
        doc = read_sacct_record(bundle)
        if doc is None:
            return scope, []
        obs, facts = sr.sacct_observations(doc, scope.job_id, SACCT_FILE)
        # the steps' nodes belong to the attempt too (a record read right after the end may list fewer)
        step_nodes = [n for o in obs if o.kind == "sacct_step" for n in o.attrs.get("nodes") or []]
        facts["nodes"] = list(dict.fromkeys([*(facts.get("nodes") or []), *step_nodes]))
        return record_wins(scope, facts, SACCT_FILE)
    except Exception as exc:  # a broken record never sinks the diagnosis; the sacct source reports the error
        return scope, [
            f"{SACCT_FILE} could not be read ({first_line(exc)[:200]}): the scope is "
            "attempt.yaml's, unchecked against the scheduler's record"
        ]


def _host(name: str) -> str:
    """A host as scope-attempt compares it: its short name (gpu-w05.cluster.local is gpu-w05), an IP whole."""
    return name if re.fullmatch(r"[0-9.]+", name) else name.split(".")[0].lower()


def _names(hosts: list[str], most: int = 20) -> str:
    more = f" (+{len(hosts) - most} more)" if len(hosts) > most else ""
    return (", ".join(hosts[:most]) or "none") + more


def _word(state: str) -> str:
    """A state's first word: `CANCELLED by 0` is `CANCELLED`."""
    return (state.split() or [""])[0].upper()


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def record_wins(scope: AttemptScope, facts: dict[str, Any], record: str) -> tuple[AttemptScope, list[str]]:
    """Where attempt.yaml and the scheduler's record disagree, the record wins; a note says so.

    facts: the record's `state`, `nodes`, `start`, `end` (sacct_observations). What the record leaves
    empty (no start for a job that never started, no nodes) does not override; times agree within a
    second (accounting keeps whole seconds); nodes agree when their hosts do (short names); states
    agree on their first word (attempt.yaml's `CANCELLED by 0` is sacct's `CANCELLED`). A record
    exported before the job ended (RUNNING, COMPLETING, ...) does not override the state and the end."""
    update: dict[str, Any] = {}
    notes: list[str] = []
    state = str(facts.get("state") or "").strip()
    unended = _word(state) in UNENDED_STATES
    if unended:
        notes.append(
            f"{record} was taken before the job ended (state {state}): attempt.yaml's state {scope.state} and end stand"
        )
    elif state and _word(state) != _word(scope.state):
        update["state"] = state
        notes.append(
            f"state: the scheduler's record ({record}) says {state}, attempt.yaml {scope.state}: the record wins"
        )
    start = facts.get("start") or scope.start
    end = scope.end if unended else facts.get("end") or scope.end
    if abs((start - scope.start).total_seconds()) >= 1 or abs((end - scope.end).total_seconds()) >= 1:
        if EARLIEST <= start <= end <= LATEST:
            update.update(start=start, end=end)
            notes.append(
                f"window: the scheduler's record ({record}) says {_iso(start)} to {_iso(end)}, attempt.yaml "
                f"{_iso(scope.start)} to {_iso(scope.end)}: the record wins"
            )
        else:  # e.g. the record's end before attempt.yaml's start: no window to take
            notes.append(
                f"window: the scheduler's record ({record}) gives no usable window with attempt.yaml's "
                f"({_iso(start)} to {_iso(end)}): attempt.yaml's {_iso(scope.start)} to {_iso(scope.end)} stands"
            )
    nodes = list(facts.get("nodes") or [])
    if nodes and {_host(n) for n in nodes} != {_host(n) for n in scope.nodes}:
        update["nodes"] = nodes
        only_yaml = sorted({_host(n) for n in scope.nodes} - {_host(n) for n in nodes})
        only_record = sorted({_host(n) for n in nodes} - {_host(n) for n in scope.nodes})
        notes.append(
            f"nodes: the scheduler's record ({record}) allocated {len(nodes)} node(s), attempt.yaml lists "
            f"{len(scope.nodes)}; only in attempt.yaml: {_names(only_yaml)}; only in the record: "
            f"{_names(only_record)}: the record wins"
        )
    if not update:
        return scope, notes
    return AttemptScope.model_validate({**scope.model_dump(), **update}), notes


def scope_observation(bundle: Path, scope: AttemptScope) -> Observation:
    """attempt.yaml's state line, so a verdict from it points at a raw line like any other."""
    line, raw = None, f"state: {scope.state}"
    try:
        for i, text in enumerate((bundle / "attempt.yaml").read_text(errors="replace").split("\n"), 1):
            if re.match(r"^state\s*:", text):
                line, raw = i, text.rstrip("\r")
                break
    except OSError:
        pass
    return Observation(
        source="scope",
        connector="bundle",
        kind="attempt_scope",
        time=scope.end,
        text=raw,
        path="attempt.yaml",
        line=line,
        attrs={"state": scope.state, "exit_code_text": scope.exit_code, "reason": scope.reason},
    )


def collect_source(scoped: Scoped, source: str, pack: Pack) -> Collected:
    """Load one source into staging. Transient failures raise (the runner retries them); anything
    else becomes the source's coverage record: bad data never sinks the diagnosis."""
    started = time.monotonic()
    connector_name, config = scoped.sources[source]
    lines_of = getattr(config, "source", "") or source  # a Loki stream may be configured under another key
    ctx = CollectContext(
        source=source,
        scope=scoped.scope,
        staging=scoped.staging,
        config=config,
        prefilter=tuple(pack.prefilter(lines_of)),
    )
    try:
        return registry.get(connector_name).collect(ctx)
    except SourceError as exc:
        if exc.transient:
            raise
        error, status = first_line(exc), exc.status
    except Exception as exc:  # a connector bug or an unreadable file must not sink the diagnosis
        error, status = f"{type(exc).__name__}: {first_line(exc)}", "error"
    return Collected(
        Coverage(
            source=source,
            connector=connector_name,
            status=CoverageStatus(status),
            error=error,
            duration_ms=int((time.monotonic() - started) * 1000),
        )
    )


def failed_collect(scoped: Scoped, source: str, exc: BaseException) -> Collected:
    """The coverage record of a source whose retries were all spent."""
    connector_name = scoped.sources[source][0] if source in scoped.sources else "?"
    status = CoverageStatus(getattr(exc, "status", "error"))
    return Collected(
        Coverage(
            source=source,
            connector=getattr(exc, "connector", None) or connector_name,
            status=status,
            error=f"failed after retries: {first_line(exc)}",
        )
    )


def store_observations(scoped: Scoped, results: list[Collected]) -> list[Coverage]:
    """Normalise what was collected (timestamps, ranks, continuation lines) and record coverage."""
    files = {ref: Path(p) for r in results for ref, p in r.files.items()}
    with connected(scoped.staging) as con:
        ref_time = scoped.scope.start + (scoped.scope.end - scoped.scope.start) / 2
        found = normalize(con, scoped.scope.timezone, ref_time.replace(tzinfo=None), files)
    coverage = [r.coverage for r in results]
    for c in coverage:
        apply_spans(c, found.spans, scoped.scope)  # files wholly outside the attempt's window
        if found.far.get(c.source):  # a stamp outside 1970..2200 costs its line (no time), counted
            c.details["lines_with_time_out_of_range"] = found.far[c.source]
            c.unparsed += found.far[c.source]
            if c.status in (CoverageStatus.ok, CoverageStatus.empty):
                c.status = CoverageStatus.partial
    if scoped.kept:  # the archived records of what was not collected again, in their places
        again = {c.source: c for c in coverage}
        coverage = [again.pop(c.source, c) for c in scoped.kept] + list(again.values())
    return coverage


def attribute(
    scoped: Scoped,
    coverage: list[Coverage],
    pack: Pack,
    settings: Settings | None = None,
    notes: list[str] | None = None,
) -> Diagnosis:
    """Run the rule phases and build the diagnosis."""
    settings = settings or Settings()
    with connected(scoped.staging) as con:
        prepare(con, pack, settings)
        record_coverage(con, coverage)
        result = run_phases(con, pack, settings, prepared=True, checkpoint=keep_events)
        return report.build(con, scoped.scope, coverage, result, pack.version, scoped.notes + (notes or []))


def record_coverage(con: duckdb.DuckDBPyConnection, coverage: list[Coverage]) -> None:
    """What each source delivered, as the rules read it (the coverage table)."""
    con.execute("DELETE FROM coverage")
    con.execute(
        "INSERT INTO coverage SELECT unnest($s), unnest($c), unnest($st), unnest($o), unnest($n), unnest($u), "
        "unnest($e)",
        {
            "s": [c.source for c in coverage],
            "c": [c.connector for c in coverage],
            "st": [c.status.value for c in coverage],
            "o": [c.observations for c in coverage],
            "n": [c.nodes for c in coverage],
            "u": [c.unparsed for c in coverage],
            "e": [c.error for c in coverage],
        },
    )


def publish(
    diagnosis: Diagnosis, warehouse_path: str | None, scoped: Scoped | None = None, keeping: Keeping | None = None
) -> Diagnosis:
    """Write the diagnosis to the warehouse (idempotent per attempt), with the topology seen with
    the attempt so analysts can place its hosts under their switch ports as of that time; before
    that, its blamed subjects' history and its evidence archived (tasks/keeping.py)."""
    if warehouse_path:
        from workload_attribution.warehouse.store import Warehouse

        topology = None
        if scoped is not None:
            with connected(scoped.staging) as con:
                topology = con.execute("SELECT switch, port, peer, peer_kind, hca FROM topology").fetchall()
        wh = Warehouse(warehouse_path)
        diagnosis = keep(diagnosis, wh, topology, scoped.staging if scoped else None, keeping or Keeping())
        wh.write(diagnosis, topology)
    return diagnosis


def drop_staging(scoped: Scoped) -> None:
    release_staging(scoped.staging)
