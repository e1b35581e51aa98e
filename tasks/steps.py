"""The steps of one attribution, as plain functions (no Prefect import here).

flows/attempt.py wraps them as Prefect tasks; flows/inline.py calls them directly. Both run the
same story (flows/pipeline.py): scope -> collect (each source in parallel) -> normalise -> attribute
-> publish.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from workload_attribution.connectors import registry
from workload_attribution.connectors.bundle import SOURCES as BUNDLE_SOURCES
from workload_attribution.connectors.bundle import BundleSource, load_scope, read_record_files
from workload_attribution.connectors.coverage import Cover, distrust_values, lose
from workload_attribution.connectors.registry import CollectContext, Collected, SourceConfig
from workload_attribution.connectors.schedulers import StateTable, get_scheduler, scope_facts
from workload_attribution.connectors.text import apply_spans
from workload_attribution.contracts.errors import BadInput, SourceError, first_line
from workload_attribution.contracts.identity import STATIC, Target
from workload_attribution.contracts.models import (
    EARLIEST,
    LATEST,
    AttemptScope,
    Coverage,
    CoverageStatus,
    Diagnosis,
    Observation,
)
from workload_attribution.contracts.vocabulary import Confidence, Source
from workload_attribution.rules import report
from workload_attribution.rules.engine import Settings, prepare, run_phases
from workload_attribution.rules.pack import Pack
from workload_attribution.staging.attempt import create_staging
from workload_attribution.staging.clocks import ClockOffset, check_clocks
from workload_attribution.staging.database import connected, observed, plainly, release_staging
from workload_attribution.staging.hosts import spell_as_allocated
from workload_attribution.staging.normalize import normalize
from workload_attribution.staging.observations import insert_observations, non_finite
from workload_attribution.tasks import novelty
from workload_attribution.tasks.archiving import keep_checkpoint

if TYPE_CHECKING:  # a cluster's model joins every registered source's (~0.1 s to build): a bundle needs none
    from workload_attribution.connectors.clusters import Cluster
    from workload_attribution.tasks.keeping import Keeping  # what is kept beside a warehouse: imported with it


@dataclass
class ScopedAttempt:
    """The attempt being diagnosed: its scope, its staging database, and for each source the
    connector and configuration that collect it."""

    scope: AttemptScope
    staging: str
    sources: dict[str, tuple[str, SourceConfig]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # --retry-missing: the archived coverage, whose sources' evidence was restored, not collected
    kept: list[Coverage] = field(default_factory=list)


def scope_attempt(target: Target, cluster: Cluster | None = None) -> ScopedAttempt:
    """Resolve the target to an attempt's scope and open its staging database.

    A bundle's scope is its attempt.yaml (where its scheduler record disagrees, the record wins:
    `record_wins`); a job's comes from the cluster's scheduler (connectors/schedulers.py: Slurm
    accounting, the Kueue Workload ...), waiting for the recorded end when the trigger is a
    completion; a window is taken as given (the static scheduler), on any cluster."""
    if target.bundle:
        return scope_bundle(Path(target.bundle))
    if cluster is None or target.cluster is None:
        raise BadInput("a job or a window is scoped on a configured cluster: name one")
    scheduler = get_scheduler(STATIC if target.window else cluster.scheduler)
    settings = cluster.settings_of(scheduler)
    scope = scheduler.scope(settings, target).model_copy(update={"timezone": cluster.timezone})
    sources: dict[str, tuple[str, SourceConfig]] = {}
    if scheduler.records is not None and settings is not None:  # the scheduler's own record of the job is a source
        source, connector = scheduler.records
        sources[source] = (connector, settings)
    sources.update({name: (cfg.connector, cfg) for name, cfg in cluster.sources.items()})
    notes = _unknown_state(scheduler.states, scope.state, f"the {scheduler.name} record")
    return ScopedAttempt(scope=scope, staging=create_staging(scope), sources=sources, notes=notes)


def scope_bundle(path: Path) -> ScopedAttempt:
    """A bundle's attempt: attempt.yaml, checked against the scheduler record the bundle holds;
    every source of the bundle format is read from the bundle; attempt.yaml's state line is staged
    as the scope's own record."""
    written = load_scope(path)
    scope, notes = bundle_record_wins(path, written)
    notes = _unknown_state(get_scheduler(written.scheduler).states, written.state, "attempt.yaml") + notes
    bundle = BundleSource(path=str(path))
    scoped = ScopedAttempt(
        scope=scope,
        staging=create_staging(scope),
        sources={s: ("bundle", bundle) for s in BUNDLE_SOURCES},
        notes=notes,
    )
    with connected(scoped.staging) as con:
        insert_observations(con, [scope_observation(path, written)])
    return scoped


def bundle_record_wins(bundle: Path, scope: AttemptScope) -> tuple[AttemptScope, list[str]]:
    """The bundle's scope, with the scheduler's record (its files in scheduler/: sacct.json, qstat.json
    ...) winning over attempt.yaml on the window, the nodes and the state, and a note for each
    disagreement. No record: attempt.yaml as written, silently. A record that cannot be read (its
    coverage says why): attempt.yaml, noted."""
    scheduler = get_scheduler(scope.scheduler)
    if scheduler.bundle is None:
        return scope, []
    files = ", ".join(f"scheduler/{name}" for name in scheduler.bundle.files)
    try:
        # read under the record source's own rules: inside the bundle, regular files, bounded in size
        found = read_record_files(bundle, scheduler.bundle.files)
        if not found:
            return scope, []
        record = scheduler.bundle.read(found, scope)
        where = ", ".join(f"scheduler/{name}" for name in found)
        return record_wins(scope, record.facts, where, scheduler.states)
    except Exception as exc:  # a broken record never sinks the diagnosis; its source reports the error
        return scope, [
            f"{files} could not be read ({first_line(exc)[:200]}): the scope is "
            "attempt.yaml's, unchecked against the scheduler's record"
        ]


def _unknown_state(states: StateTable, state: str | None, where: str) -> list[str]:
    """The note on a state its scheduler's table does not hold (StateTable.unknown): the attempt is
    diagnosed all the same, the note says which word and what the table holds."""
    note = states.unknown(state, where)
    return [note] if note else []


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


def record_wins(
    scope: AttemptScope, facts: dict[str, Any], record: str, states: StateTable
) -> tuple[AttemptScope, list[str]]:
    """Where attempt.yaml and the scheduler's record disagree, the record wins; a note says so.

    facts: the record's `state`, `nodes`, `start`, `end` (JobRecord.facts). What the record leaves
    empty (no start for a job that never started, no nodes) does not override; times agree within a
    second (accounting keeps whole seconds); nodes agree when their hosts do (short names); states
    agree on their first word (attempt.yaml's `CANCELLED by 0` is sacct's `CANCELLED`), or with the
    record's `status` (attempt.yaml's FAILED is Flux's INACTIVE job whose result is FAILED). A record
    exported before the job ended (RUNNING, COMPLETING, ...) does not override the state and the end."""
    update: dict[str, Any] = {}
    notes: list[str] = []
    state = str(facts.get("state") or "").strip()
    unended = states.unended(state)  # a record exported before the job ended (the scheduler's table)
    if unended:
        notes.append(
            f"{record} was taken before the job ended (state {state}): attempt.yaml's state {scope.state} and end stand"
        )
    elif state and _word(scope.state) not in {_word(state), _word(str(facts.get("status") or ""))}:
        update["state"] = state
        notes.append(
            f"state: the scheduler's record ({record}) says {state}, attempt.yaml {scope.state}: the record wins"
        )
        notes += _unknown_state(states, state, record)
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
        source=Source.scope,
        connector="bundle",
        kind="attempt_scope",
        time=scope.end,
        text=raw,
        path="attempt.yaml",
        line=line,
        attrs={
            "state": scope.state,
            "exit_code_text": scope.exit_code,
            "reason": scope.reason,
            **get_scheduler(scope.scheduler).states.read(scope_facts(scope), scope.nodes).attrs(),
        },
    )


def collect_source(scoped: ScopedAttempt, source: str, pack: Pack) -> Collected:
    """Load one source into staging. Transient failures raise (the runner retries them); anything
    else becomes the source's coverage record: bad data never sinks the diagnosis."""
    connector_name, config = scoped.sources[source]
    cover = Cover(source, connector_name)
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
        return cover.outcome(exc.status, first_line(exc))
    except Exception as exc:  # a connector bug or an unreadable file must not sink the diagnosis
        return cover.outcome(CoverageStatus.error, f"{type(exc).__name__}: {first_line(exc)}")


def failed_collect(scoped: ScopedAttempt, source: str, exc: BaseException) -> Collected:
    """The coverage record of a source whose retries were all spent."""
    connector_name = scoped.sources[source][0] if source in scoped.sources else "?"
    cover = Cover(source, getattr(exc, "connector", None) or connector_name)
    return cover.outcome(getattr(exc, "status", "error"), f"failed after retries: {first_line(exc)}")


def normalize_collected(scoped: ScopedAttempt, results: list[Collected]) -> list[Coverage]:
    """Normalise what was collected (timestamps, ranks, continuation lines) and finish each source's
    coverage with what only normalising can tell: its files wholly outside the attempt's window,
    its lines quarantined (stamped outside 1970..2200, or with a time that cannot be)."""
    files = {ref: Path(p) for r in results for ref, p in r.files.items()}
    with connected(scoped.staging) as con:
        renamed = spell_as_allocated(con, scoped.scope.nodes)  # GB-R12-N01 is gb-r12-n01
        bad_values = non_finite(con)
        ref_time = scoped.scope.start + (scoped.scope.end - scoped.scope.start) / 2
        found = normalize(con, scoped.scope.timezone, ref_time.replace(tzinfo=None), files)
    coverage = [r.coverage for r in results]
    for c in coverage:
        if renamed:
            c.nodes = sorted({renamed.get(n, n) for n in c.nodes})
        apply_spans(c, found.spans, scoped.scope)  # files wholly outside the attempt's window
        if found.far.get(c.source) or found.impossible.get(c.source):  # quarantined lines: no time, counted
            lose(c, found.far.get(c.source, 0), found.impossible.get(c.source, 0))
        if c.source in bad_values:  # NaN / +-Inf samples: never evidence, named
            distrust_values(c, *bad_values[c.source])
    if scoped.kept:  # the archived records of what was not collected again, in their places
        again = {c.source: c for c in coverage}
        coverage = [again.pop(c.source, c) for c in scoped.kept] + list(again.values())
    return coverage


def attribute(
    scoped: ScopedAttempt,
    coverage: list[Coverage],
    pack: Pack,
    settings: Settings | None = None,
    notes: list[str] | None = None,
    archived: bool = True,
) -> Diagnosis:
    """Run the rule phases and build the diagnosis; `archived`: the attempt will be archived, so the
    rules' state at each point of their run is kept for it (tasks/archiving.py), else not made."""
    settings = settings or Settings()
    with connected(scoped.staging) as con:
        observations = observed(con)  # counted once: for the optimizer and the rules' threads
        with plainly(con, observations):
            prepare(con, pack, settings, observations, staging=scoped.staging)
            skewed = check_clocks(con, settings.skew_tolerance_s)  # a host's clock off: named, corrected when firm
            if skewed:
                _note_clocks(con, coverage, skewed)
            record_coverage(con, coverage)
            checkpoint = keep_checkpoint if archived else None
            result = run_phases(con, pack, settings, prepared=True, checkpoint=checkpoint)
            d = report.build(con, scoped.scope, coverage, result, pack.version, scoped.notes + (notes or []))
    return _distrust_ordering(d, skewed) if skewed else d


def _note_clocks(con: duckdb.DuckDBPyConnection, coverage: list[Coverage], skewed: list[ClockOffset]) -> None:
    """Each source holding lines of a host whose clock is off names it (`clock_skew`), `partial`."""
    said = {c.node: c.describe() for c in skewed}
    for source, nodes in con.execute(
        "SELECT source, list(DISTINCT node ORDER BY node) FROM log_lines "
        "WHERE node IN (SELECT unnest($n)) GROUP BY source",
        {"n": list(said)},
    ).fetchall():
        for c in coverage:
            if c.source == source:
                c.details.clock_skew = [said[n] for n in nodes]
                if c.status in (CoverageStatus.ok, CoverageStatus.empty):
                    c.status = CoverageStatus.partial


def _distrust_ordering(d: Diagnosis, skewed: list[ClockOffset]) -> Diagnosis:
    """Faults ordered across hosts on a clock found off are not ordered at high confidence."""
    hosts = ", ".join(c.node for c in skewed)
    d.notes.append(
        f"clock of {hosts} off by more than the skew tolerance: cross-host ordering not trusted at high confidence"
    )
    if d.confidence == Confidence.high:
        d.confidence = Confidence.medium
    return d


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
    diagnosis: Diagnosis,
    warehouse_path: str | None,
    scoped: ScopedAttempt | None = None,
    keeping: Keeping | None = None,
) -> Diagnosis:
    """Write the diagnosis to the warehouse (idempotent per attempt), with the topology seen with
    the attempt so analysts can place its hosts under their switch ports as of that time; before
    that, its blamed subjects' history and its evidence archived (tasks/keeping.py); a doubtful
    verdict's novel log templates, and a doubtful or completed attempt's templates kept with it
    (tasks/novelty.py: a second read of the bundle, for those attempts only)."""
    if warehouse_path:
        from workload_attribution.tasks.keeping import Keeping, keep
        from workload_attribution.warehouse.store import Warehouse

        topology = None
        if scoped is not None:
            with connected(scoped.staging) as con:
                topology = con.execute("SELECT switch, port, peer, peer_kind, hca FROM topology").fetchall()
        wh = Warehouse(warehouse_path)
        with wh.session():  # the file opened once for the three
            diagnosis = keep(diagnosis, wh, topology, scoped.staging if scoped else None, keeping or Keeping())
            diagnosis, templates = novelty.read_templates(diagnosis, wh, scoped.sources if scoped else {})
            wh.write(diagnosis, topology, templates)
    else:
        diagnosis = novelty.without_warehouse(diagnosis)
    return diagnosis


def drop_staging(scoped: ScopedAttempt) -> None:
    release_staging(scoped.staging)
