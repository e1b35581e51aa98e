"""The steps of one attribution, as plain functions (no Prefect import here).

flows/attempt.py wraps them as Prefect tasks; flows/inline.py calls them directly. Both run the
same story: scope -> collect (each source in parallel) -> store -> attribute -> publish.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attribution.models import AttemptScope, Coverage, CoverageStatus, Diagnosis, Observation
from connectors import TransientSourceError
from connectors import bundle as bundle_connector
from connectors.staging import connect, create_staging, insert_observations, release_staging
from connectors.text import normalize
from rules import report
from rules.engine import Settings, prepare, run_phases
from rules.pack import Pack


@dataclass
class Scoped:
    bundle: str | None
    scope: AttemptScope
    staging: str
    sources: list[str]
    cluster: Any = None   # ClusterConfig when collecting from live sources


@dataclass
class LiveScope:
    """An attempt to scope from the scheduler (job_id) or explicitly (nodes + window)."""

    cluster_name: str
    cluster: Any          # attribution.config.ClusterConfig
    job_id: str | None = None
    nodes: list[str] | None = None
    start: Any = None
    end: Any = None
    require_ended: bool = False   # a completion trigger: wait (retry) until the scheduler has recorded the end


@dataclass
class SourceResult:
    coverage: Coverage
    notes: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)


def scope_attempt(bundle: str) -> Scoped:
    """Read the attempt's scope and open its staging database."""
    path = Path(bundle)
    scope = bundle_connector.load_scope(path)
    staging = create_staging(scope)
    con = connect(staging)
    try:
        insert_observations(con, [scope_observation(path, scope)])
    finally:
        con.close()
    return Scoped(bundle=str(path), scope=scope, staging=staging, sources=list(bundle_connector.SOURCES))


def scope_live(live: LiveScope) -> Scoped:
    """Scope from the scheduler (Slurm job / Kueue workload) or from an explicit nodes + window."""
    cluster = live.cluster
    if live.job_id:
        if cluster.scheduler == "slurm":
            from connectors import slurm
            scope = slurm.scope_job(cluster.slurm or slurm.SlurmSource(), live.cluster_name, live.job_id,
                                    require_ended=live.require_ended)
            scheduler_source = ["sacct"]
        elif cluster.scheduler == "kueue":
            from connectors import kueue
            src = cluster.kueue or kueue.KueueSource()
            namespace, _, name = live.job_id.rpartition("/")   # "namespace/name" or a name in the configured namespace
            if namespace:
                src = src.model_copy(update={"namespace": namespace})
                cluster = cluster.model_copy(update={"kueue": src})   # collect reads the same namespace
            scope = kueue.scope_from(kueue.fetch(src, name), live.cluster_name)
            scheduler_source = ["kueue"]
        else:
            raise ValueError(f"cluster {live.cluster_name}: scheduler {cluster.scheduler!r} cannot scope a job id")
    else:
        scope = AttemptScope(cluster=live.cluster_name, scheduler="static",
                             job_id=f"{','.join(live.nodes or [])}@{live.start}", attempt=0, nodes=live.nodes or [],
                             start=live.start, end=live.end, state="UNKNOWN")
        scheduler_source = []
    scope = scope.model_copy(update={"timezone": cluster.timezone})
    staging = create_staging(scope)
    return Scoped(bundle=None, scope=scope, staging=staging, sources=scheduler_source + list(cluster.sources),
                  cluster=cluster)


def _collect_live(scoped: Scoped, source: str, pack: Pack) -> SourceResult:
    from connectors import files, kueue, loki, prometheus, slurm

    cluster = scoped.cluster
    if source == "sacct":
        return SourceResult(slurm.collect(cluster.slurm or slurm.SlurmSource(), scoped.scope, scoped.staging))
    if source == "kueue":
        return SourceResult(kueue.collect(cluster.kueue or kueue.KueueSource(), scoped.scope, scoped.staging))
    cfg = cluster.sources[source]
    if isinstance(cfg, prometheus.PrometheusSource):
        return SourceResult(prometheus.collect(cfg, scoped.scope, scoped.staging))
    if isinstance(cfg, loki.LokiSource):
        src = cfg.model_copy(update={"source": cfg.source or source})
        return SourceResult(loki.collect(src, scoped.scope, scoped.staging, pack.prefilter(src.source)))
    cov, paths = files.collect(cfg, source, scoped.scope, scoped.staging, pack.prefilter(source))
    return SourceResult(cov, files={k: str(v) for k, v in paths.items()})


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
    return Observation(source="scope", connector="bundle", kind="attempt_scope", time=scope.end,
                       text=raw, path="attempt.yaml", line=line,
                       attrs={"state": scope.state, "exit_code_text": scope.exit_code, "reason": scope.reason})


def collect_source(scoped: Scoped, source: str, pack: Pack) -> SourceResult:
    """Load one source into staging. Never raises for bad data: the coverage record says what happened."""
    started = time.monotonic()
    try:
        if scoped.bundle is None:
            return _collect_live(scoped, source, pack)
        got = bundle_connector.collect(Path(scoped.bundle), scoped.scope, source, scoped.staging,
                                       pack.prefilter(source))
    except TransientSourceError:
        raise
    except Exception as exc:  # a connector bug or unreadable file must not sink the diagnosis
        return SourceResult(Coverage(source=source, connector="bundle" if scoped.bundle else "live",
                                     status=CoverageStatus.error,
                                     error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                                     duration_ms=int((time.monotonic() - started) * 1000)))
    return SourceResult(got.coverage, got.notes, {k: str(v) for k, v in got.files.items()})


def store_observations(scoped: Scoped, results: list[SourceResult]) -> list[Coverage]:
    """Normalise what was collected (timestamps, ranks, continuation lines) and record coverage."""
    files = {ref: Path(p) for r in results for ref, p in r.files.items()}
    con = connect(scoped.staging)
    try:
        ref_time = scoped.scope.start + (scoped.scope.end - scoped.scope.start) / 2
        normalize(con, scoped.scope.timezone, ref_time.replace(tzinfo=None), files)
    finally:
        con.close()
    return [r.coverage for r in results]


def attribute(scoped: Scoped, coverage: list[Coverage], pack: Pack, settings: Settings | None = None,
              notes: list[str] | None = None) -> Diagnosis:
    """Run the rule phases and build the diagnosis."""
    con = connect(scoped.staging)
    try:
        settings = settings or Settings()
        prepare(con, pack, settings)
        con.execute("DELETE FROM coverage")
        con.execute(
            "INSERT INTO coverage SELECT unnest($s), unnest($c), unnest($st), unnest($o), unnest($n), unnest($u), unnest($e)",
            {"s": [c.source for c in coverage], "c": [c.connector for c in coverage],
             "st": [c.status.value for c in coverage], "o": [c.observations for c in coverage],
             "n": [c.nodes for c in coverage], "u": [c.unparsed for c in coverage], "e": [c.error for c in coverage]},
        )
        result = run_phases(con, pack, settings, prepared=True)
        return report.build(con, scoped.scope, coverage, result, pack.version, notes or [])
    finally:
        con.close()


def publish(diagnosis: Diagnosis, warehouse_path: str | None, scoped: Scoped | None = None) -> Diagnosis:
    """Write the diagnosis to the warehouse (idempotent per attempt), with the topology seen with
    the attempt so analysts can place its hosts under their switch ports as of that time."""
    if warehouse_path:
        from warehouse.store import Warehouse

        topology = None
        if scoped is not None:
            con = connect(scoped.staging)
            try:
                topology = con.execute("SELECT switch, port, peer, peer_kind, hca FROM topology").fetchall()
            finally:
                con.close()
        Warehouse(warehouse_path).write(diagnosis, topology)
    return diagnosis


def drop_staging(scoped: Scoped) -> None:
    release_staging(scoped.staging)
