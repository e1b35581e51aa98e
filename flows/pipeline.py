"""The story of one attribution, written once for both runners (Prefect and inline).

scope -> collect (every source in parallel, retried, each with a coverage record)
      -> normalise (and finish the coverage) -> attribute -> publish
      -> act (the cluster's action sinks, when it has an `actions` block)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from workload_attribution.contracts.errors import BadInput, NotStored, first_line
from workload_attribution.rules.pack import Pack, RuleFileError, default_pack, load_pack

# What the story runs (the steps: DuckDB, every connector, the configuration's models) is imported
# when it runs: `attribution --version` needs only the pack, and pays for nothing else.
if TYPE_CHECKING:
    from workload_attribution.connectors.clusters import Cluster
    from workload_attribution.connectors.registry import Collected
    from workload_attribution.contracts.actions import ActionRecord
    from workload_attribution.contracts.identity import Target
    from workload_attribution.contracts.models import Coverage, Diagnosis
    from workload_attribution.flows.config import Config
    from workload_attribution.rules.engine import Settings
    from workload_attribution.tasks import steps
    from workload_attribution.tasks.keeping import Keeping

# Delays between retries of a source's collection (transient errors only), for both runners.
RETRY_DELAYS_S = (0.5, 2.0, 5.0)


class Future(Protocol):
    def result(self) -> Any: ...


class Runner(Protocol):
    """How steps run: Prefect tasks (flows/attempt.py) or plain calls (flows/inline.py)."""

    def scope(self, target: Target, cluster: Cluster | None) -> steps.ScopedAttempt: ...
    def collect(self, scoped: steps.ScopedAttempt, source: str, pack: Pack) -> Future: ...
    def normalize(self, scoped: steps.ScopedAttempt, results: list[Collected]) -> list[Coverage]: ...
    def attribute(
        self,
        scoped: steps.ScopedAttempt,
        coverage: list[Coverage],
        pack: Pack,
        settings: Settings,
        notes: list[str],
        archived: bool,
    ) -> Diagnosis: ...
    def publish(
        self, diagnosis: Diagnosis, warehouse: str | None, scoped: steps.ScopedAttempt, keeping: Keeping | None
    ) -> Diagnosis: ...
    def act(self, diagnosis: Diagnosis, options: Options) -> list[ActionRecord]: ...


@dataclass
class Options:
    """What a diagnosis runs with besides its target, resolved from the configuration."""

    pack: Pack
    settings: Settings = field(default_factory=lambda: _settings())
    cluster: Cluster | None = None  # the target's cluster (None for a bundle)
    warehouse: str | None = None  # None: not stored
    acting: dict[str, Any] = field(default_factory=dict)  # cluster name -> its configuration, for those with actions
    keeping: Keeping | None = None  # the archive and the fleet memory, beside the warehouse
    retry_missing: bool = False  # collect only what the stored diagnosis says would settle it

    @property
    def archives(self) -> bool:
        """Whether the attempt is archived as its diagnosis is published (tasks/keeping.py keep): only
        then does anything read the rules' state kept at each point of their run."""
        return bool(self.warehouse and self.keeping and self.keeping.archives)


def _settings() -> Settings:
    from workload_attribution.rules.engine import Settings

    return Settings()


def load_rules(rules_dir: str | Path | None) -> Pack:
    """The rules pack every command uses: the named one (flag > env > config), else the shipped one.
    A broken rule file is left out and listed in each diagnosis (rules.failed)."""
    try:
        return load_pack(rules_dir, skip_broken=True) if rules_dir else default_pack()
    except RuleFileError as exc:
        raise BadInput(str(exc)) from None


def resolve(
    cfg: Config, target: Target, pack: Pack | None = None, store: bool = True, act: bool = True
) -> tuple[Target, Options]:
    """The target with its cluster named, and the options it runs with. `act`: the action sinks of
    the diagnosis' cluster (a bundle's too: it names its cluster) run once it is stored."""
    cluster = None
    if not target.bundle:
        try:
            name, cluster = cfg.cluster(target.cluster)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
        target = target.model_copy(update={"cluster": name})
    pack = pack or load_rules(cfg.rules_dir)
    warehouse = cfg.warehouse or None if store else None
    return target, Options(
        pack=pack,
        settings=cfg.rules,
        cluster=cluster,
        warehouse=warehouse,
        acting={name: c for name, c in cfg.clusters.items() if c.actions is not None} if act else {},
        keeping=keeping(cfg, warehouse, pack),
    )


def keeping(cfg: Config, warehouse: str | None, pack: Pack) -> Keeping:
    """The archive (beside the warehouse, unless configured elsewhere or off) and the memory policy."""
    from workload_attribution.tasks.keeping import Keeping
    from workload_attribution.warehouse.archive import location_for

    return Keeping(
        archive=location_for(warehouse or "", cfg.archive),
        archive_max_bytes=int(cfg.archive.max_attempt_mib * 2**20),
        memory=cfg.memory,
        pack=pack,
        settings=cfg.rules,
    )


def attribute_story(run: Runner, target: Target, options: Options) -> Diagnosis:
    from workload_attribution.tasks import steps

    scoped = run.scope(target, options.cluster)
    try:
        if options.retry_missing:
            from workload_attribution.tasks.retry import restore_archived

            restore_archived(scoped, options.warehouse, options.keeping.archive if options.keeping else None)
        futures = {source: run.collect(scoped, source, options.pack) for source in scoped.sources}
        results = []
        for source, fut in futures.items():
            try:
                results.append(fut.result())
            except Exception as exc:  # retries exhausted: the source is an error, the diagnosis goes on
                results.append(steps.failed_collect(scoped, source, exc))
        coverage = run.normalize(scoped, results)
        notes = [n for r in results for n in r.notes]
        diagnosis = run.attribute(scoped, coverage, options.pack, options.settings, notes, options.archives)
        try:
            published = run.publish(diagnosis, options.warehouse, scoped, options.keeping)
        except NotStored as exc:
            exc.diagnosis = diagnosis
            raise
        except Exception as exc:  # a full disk, a broken catalog: the diagnosis itself must survive
            raise NotStored(f"warehouse {options.warehouse}: {first_line(exc)}", diagnosis) from exc
    finally:
        steps.drop_staging(scoped)
    run.act(published, options)
    return published


def act(diagnosis: Diagnosis, options: Options) -> list[ActionRecord]:
    """The story's last step: the action sinks of the diagnosis' cluster (actions/), on the stored
    diagnosis. Nothing when the cluster has no `actions` block, or nothing was stored (the guard
    reads its history from the warehouse, and every decision is recorded there). Never raises: the
    diagnosis is stored, and an action's failure is that action's recorded outcome."""
    cluster = options.acting.get(diagnosis.attempt.cluster)
    if cluster is None or not options.warehouse:
        return []
    from workload_attribution.actions.act import act_on, log

    try:
        return act_on(diagnosis, cluster, options.warehouse)
    except Exception as exc:  # the warehouse refused the decisions (locked, full): said, not raised
        log.error(
            "actions on diagnosis %s not taken: %s: %s", diagnosis.diagnosis_id, type(exc).__name__, first_line(exc)
        )
        return []
