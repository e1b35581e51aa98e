"""A cluster's `actions` block: whether its diagnoses are acted on for real, the guard's limits, and
its sinks (their shapes are whatever registered in actions/registry.py).

    clusters:
      eos:
        actions:
          dry_run: false              # the default, true, decides and records but does nothing
          max_nodes_per_hour: 2
          max_partition_percent: 10
          sinks:
            - {kind: slurm}
            - {kind: alertmanager, url: "http://alertmanager:9093"}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from workload_attribution.actions.registry import sink_config_type
from workload_attribution.contracts.vocabulary import Confidence

if TYPE_CHECKING:  # the union is built at run time from what registered; statically, any sink config
    SinkConfigType = Any
else:
    SinkConfigType = sink_config_type()


class ActionsConfig(BaseModel):
    """What to do with a cluster's diagnoses once they are stored."""

    model_config = ConfigDict(extra="forbid")

    dry_run: bool = Field(True, description="decide and record every action, carry out none")
    min_confidence: Confidence = Field(Confidence.high, description="isolate a node only at this confidence or more")
    max_nodes_per_hour: int = Field(2, ge=0, description="nodes isolated in the cluster within any hour, at most")
    max_partition_percent: float = Field(
        10.0, ge=0, le=100, description="share of a partition's nodes out of service, at most, counting the new one"
    )
    retries: int = Field(3, ge=0, le=10, description="a sink's transient failures tried again this often")
    dashboard_url: str | None = Field(None, description="the dashboard's base URL, for links in alerts and events")
    sinks: list[SinkConfigType] = Field(default_factory=list, description="the sinks, acted on in this order")

    @model_validator(mode="after")
    def _sinks_told_apart(self) -> ActionsConfig:
        labels = [s.label for s in self.sinks]
        twice = sorted({label for label in labels if labels.count(label) > 1})
        if twice:
            raise ValueError(f"sinks named alike: {', '.join(twice)} (give each a distinct `name`)")
        return self
