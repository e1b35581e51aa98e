"""A cluster as the configuration describes it: how to scope its attempts (its scheduler) and where
each source of evidence lives. The shape of `sources` is whatever the connectors registered."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from workload_attribution.connectors.kueue import KueueSource
from workload_attribution.connectors.registry import source_config_type
from workload_attribution.connectors.slurm import SlurmSource
from workload_attribution.contracts.vocabulary import Scheduler

if TYPE_CHECKING:  # the union is built at run time from what registered; statically, any source config
    SourceConfigType = Any
else:
    SourceConfigType = source_config_type()


class ClusterConfig(BaseModel):
    """One cluster: how to scope attempts (its scheduler) and where its evidence lives."""

    model_config = ConfigDict(extra="forbid")

    scheduler: Scheduler = Scheduler.slurm
    timezone: str = Field("UTC", description="zone of log timestamps that carry none")
    slurm: SlurmSource | None = None
    kueue: KueueSource | None = None
    sources: dict[str, SourceConfigType] = Field(
        default_factory=dict, description="source name (app, syslog, metrics, ...) -> where to read it"
    )
