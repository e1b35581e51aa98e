"""Small helpers the tests share: diagnose a bundle in this process, collect one source directly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workload_attribution.contracts.identity import Target
from workload_attribution.contracts.models import AttemptScope, Diagnosis


def diagnose(
    bundle: str | Path,
    warehouse: str | Path | None = None,
    pack: Any = None,
    settings: Any = None,
    archive: bool = False,
    memory: Any = None,
    retry_missing: bool = False,
) -> Diagnosis:
    """The inline story over one bundle (what `attribution diagnose --inline` runs); with
    `archive`, its evidence archived beside the warehouse; `memory`: a tasks.memory.MemoryPolicy."""
    from workload_attribution.flows.inline import attribute_inline
    from workload_attribution.flows.pipeline import Options
    from workload_attribution.rules.engine import Settings
    from workload_attribution.rules.pack import default_pack
    from workload_attribution.tasks.keeping import Keeping
    from workload_attribution.tasks.memory import MemoryPolicy
    from workload_attribution.warehouse.archive import ArchiveSettings, location_for

    pack, settings = pack or default_pack(), settings or Settings()
    location = location_for(str(warehouse), ArchiveSettings()) if archive and warehouse else None
    keeping = Keeping(archive=location, memory=memory or MemoryPolicy(), pack=pack, settings=settings)
    options = Options(pack=pack, settings=settings, warehouse=str(warehouse) if warehouse else None, keeping=keeping)
    options.retry_missing = retry_missing
    return attribute_inline(Target(bundle=str(bundle)), options)


def bundle_copy(bundle: str | Path, to: Path, job_id: str | None = None) -> Path:
    """A copy of a bundle, under another job id (attempt.yaml and the scheduler's record) when given."""
    import shutil

    shutil.copytree(bundle, to)
    if job_id:
        old = next(
            line.split(":", 1)[1].strip().strip('"')
            for line in (to / "attempt.yaml").read_text().splitlines()
            if line.startswith("job_id:")
        )
        for f in [to / "attempt.yaml", *sorted((to / "scheduler").glob("*.json"))]:
            f.write_text(f.read_text().replace(old, job_id))
    return to


def collect(
    config: Any,
    scope: AttemptScope,
    staging: str,
    source: str | None = None,
    prefilter: Any = (),
    transport: Any = None,
) -> Any:
    """One source collected through its registered connector; returns the Collected (coverage, notes, files)."""
    from workload_attribution.connectors import registry

    name = (
        getattr(config, "connector", None)
        or {"SlurmSource": "slurm", "KueueSource": "kubernetes"}[type(config).__name__]
    )
    source = (
        source
        or getattr(config, "source", None)
        or {"prometheus": "metrics", "slurm": "sacct", "kubernetes": "kueue"}.get(name, name)
    )
    return registry.get(name).collect(
        registry.CollectContext(
            source=source, scope=scope, staging=staging, config=config, prefilter=tuple(prefilter), transport=transport
        )
    )


def collect_bundle(bundle: str | Path, scope: AttemptScope, source: str, staging: str, prefilter: Any = ()) -> Any:
    from workload_attribution.connectors.bundle import BundleSource

    return collect(BundleSource(path=str(bundle)), scope, staging, source, prefilter)


def coverage_of(config: Any, scope: AttemptScope, staging: str, prefilter: Any = (), transport: Any = None) -> Any:
    """One source collected through its connector: just its coverage record."""
    return collect(config, scope, staging, prefilter=prefilter, transport=transport).coverage


def claims_on_each_engine(pack: Any, rule: str, probes: list[Any], monkeypatch: Any, resolve: bool = False) -> dict:
    """Per pre-filter engine (Hyperscan, DuckDB's RE2), the events of `claims` over `probes` and
    each app probe again behind a Docker json-file envelope, with the pack's Python `rule`
    ("module:function") told which engine runs: the module as the pack loads it (under a name of
    its own: rules/sandbox.py)."""
    import json

    from workload_attribution.rules.claims import Probe, claims
    from workload_attribution.rules.sandbox import python_rule
    from workload_attribution.staging import prefilter

    probes = probes + [
        Probe("app", json.dumps({"log": p.text + "\n", "stream": "stderr"})) for p in probes if p.source == "app"
    ]
    probes.insert(0, Probe("kueue", "Pod was evicted:\nThe node was low on resource: memory."))
    reader = python_rule(pack, rule).__globals__
    found = {}
    for name in prefilter.ENGINES:
        monkeypatch.setitem(reader, "engine", lambda name=name: name)
        found[name] = claims(pack, probes, resolve=resolve).events
    return found
