"""A cluster as the configuration describes it: how to scope its attempts (its scheduler, and the
scheduler's block: `slurm:`, `kueue:` ...) and where each source of evidence lives. Both shapes
are whatever registered: the schedulers (schedulers.py) and the sources (registry.py).

    clusters:
      eos:
        scheduler: slurm
        slurm: {rest_url: "http://slurmrestd:6820"}
        sources: {syslog: {connector: loki, url: ..., selector: ...}}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from workload_attribution.connectors.registry import SourceConfig, source_config_type
from workload_attribution.connectors.schedulers import Scheduler, get_scheduler, schedulers

if TYPE_CHECKING:  # the union is built at run time from what registered; statically, any source config
    SourceConfigType = Any
else:
    SourceConfigType = source_config_type()


class Cluster(BaseModel):
    """One cluster: how to scope attempts (its scheduler) and where its evidence lives. The
    configuration's model adds one optional block per scheduler that has settings (`ClusterConfig`)."""

    model_config = ConfigDict(extra="forbid")

    scheduler: str = "slurm"
    timezone: str = Field("UTC", description="zone of log timestamps that carry none")
    sources: dict[str, SourceConfigType] = Field(
        default_factory=dict, description="source name (app, syslog, metrics, ...) -> where to read it"
    )

    @property
    def scheduling(self) -> Scheduler:
        """The cluster's scheduler, from the registry."""
        return get_scheduler(self.scheduler)

    def block(self, scheduler: str) -> SourceConfig | None:
        """The cluster's own block for a scheduler (`slurm:`), when it has one."""
        return getattr(self, scheduler, None)

    def settings_of(self, scheduler: Scheduler) -> SourceConfig | None:
        """How this cluster reaches a scheduler: its block (`slurm:`), else the scheduler's defaults."""
        return scheduler.settings(self.block(scheduler.name))


def cluster_model() -> type[Cluster]:
    """The configuration's cluster: `scheduler` one of the registered names, and a block for each
    registered scheduler with settings."""
    known = schedulers()
    taken = sorted(set(known) & set(Cluster.model_fields))
    if taken:
        raise ValueError(f"scheduler(s) {', '.join(taken)}: the name of a cluster's own key")
    blocks: dict[str, Any] = {name: (s.config | None, None) for name, s in known.items() if s.config is not None}
    names: Any = Literal[tuple(known)]  # the registered names, known at run time
    return create_model(
        "ClusterConfig",
        __base__=Cluster,
        __doc__=Cluster.__doc__,
        scheduler=(names, "slurm"),
        **blocks,
    )


if TYPE_CHECKING:
    ClusterConfig = Cluster
else:
    ClusterConfig = cluster_model()
