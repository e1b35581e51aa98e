"""Configuration: defaults < YAML file < environment (ATTRIBUTION_*) < command-line flags.

    # attribution.yaml
    warehouse: /var/lib/attribution/warehouse.duckdb
    rules:
      skew_tolerance_s: 30
      default_collective_timeout_s: 600

Environment: ATTRIBUTION_WAREHOUSE, ATTRIBUTION_RULES_DIR, ATTRIBUTION_RULES__SKEW_TOLERANCE_S ...
The file is ./attribution.yaml, or the path in ATTRIBUTION_CONFIG / --config.
"""

from __future__ import annotations

import os
from pathlib import Path

from typing import Annotated, Literal, Union

from pydantic import BaseModel, Field

from connectors.files import FilesSource
from connectors.kueue import KueueSource
from connectors.loki import LokiSource
from connectors.prometheus import PrometheusSource
from connectors.slurm import SlurmSource
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, YamlConfigSettingsSource


def default_warehouse() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "workload-attribution", "warehouse.duckdb")


class RuleSettings(BaseModel):
    skew_tolerance_s: float = Field(30.0, ge=0, description="clock skew between hosts tolerated when ordering events")
    default_collective_timeout_s: float = Field(600.0, gt=0, description="NCCL timeout assumed when none is printed")
    lookback_margin_s: float = Field(120.0, ge=0, description="extra look-back before the first cascade")
    burst_window_s: float = Field(300.0, ge=0, description="repeats of one symptom within this window are one burst")
    rule_timeout_s: float = Field(60.0, gt=0, description="a rule running longer is interrupted and reported failed")


# The connectors' own source models are the configuration schema (one definition each).
SourceConfig = Annotated[Union[PrometheusSource, LokiSource, FilesSource], Field(discriminator="connector")]


class ClusterConfig(BaseModel):
    """One cluster: how to scope attempts (its scheduler) and where its evidence lives."""

    scheduler: Literal["slurm", "kueue", "static"] = "slurm"
    timezone: str = "UTC"
    slurm: SlurmSource | None = None
    kueue: KueueSource | None = None
    sources: dict[str, SourceConfig] = Field(default_factory=dict,
                                             description="source name (app, syslog, metrics, ...) -> where to read it")


class ServiceConfig(BaseModel):
    """`attribution serve`: the trigger API. Secrets are never in the file: only the names of the
    environment variables that hold them."""

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    deployment: str = Field("attribute-attempt/attempt", description="Prefect deployment each trigger starts")
    token_env: str = Field("ATTRIBUTION_API_TOKEN", description="env var: bearer token for /v1/attempts and reads")
    webhook_secret_env: str = Field("ATTRIBUTION_WEBHOOK_SECRET", description="env var: HMAC-SHA256 key of the webhooks")
    replay_window_s: float = Field(300.0, gt=0, description="signed timestamps older/newer than this are refused")
    max_body_bytes: int = Field(65536, gt=0)
    diagnose_completed: bool = Field(False, description="also diagnose attempts that completed successfully")
    answer_within_s: float = Field(1.0, gt=0, description="answer a trigger within this; a run Prefect has not "
                                                           "created by then is answered 'queued' and created after")


class BackfillConfig(BaseModel):
    concurrency: int = Field(2, ge=1, le=64, description="attempts diagnosed at once by one backfill")
    lookback_hours: float = Field(26.0, gt=0, description="the nightly window: now - this .. now")
    bundles_dir: str | None = Field(None, description="offline: a directory tree of attempt bundles to backfill")


class Config(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ATTRIBUTION_", env_nested_delimiter="__", extra="forbid")

    warehouse: str = Field(default_factory=default_warehouse)
    rules_dir: str | None = None
    rules: RuleSettings = Field(default_factory=RuleSettings)
    clusters: dict[str, ClusterConfig] = Field(default_factory=dict)
    service: ServiceConfig = Field(default_factory=ServiceConfig)
    backfill: BackfillConfig = Field(default_factory=BackfillConfig)

    def cluster(self, name: str | None) -> tuple[str, ClusterConfig]:
        if name is None:
            if len(self.clusters) != 1:
                raise ValueError(f"name a cluster with --cluster (configured: {', '.join(self.clusters) or 'none'})")
            name = next(iter(self.clusters))
        if name not in self.clusters:
            raise ValueError(f"cluster {name!r} is not configured (configured: {', '.join(self.clusters) or 'none'})")
        return name, self.clusters[name]

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings) -> tuple[PydanticBaseSettingsSource, ...]:
        path = os.environ.get("ATTRIBUTION_CONFIG") or "attribution.yaml"
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if Path(path).is_file():
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)


def load_config(path: str | None = None, **overrides) -> Config:
    if path:
        if not Path(path).is_file():
            raise FileNotFoundError(f"config file {path} does not exist")
        os.environ["ATTRIBUTION_CONFIG"] = path
    return Config(**{k: v for k, v in overrides.items() if v is not None})
