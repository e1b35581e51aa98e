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
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, create_model

from workload_attribution.contracts.errors import BadInput
from workload_attribution.contracts.models import empty_dict  # as contracts/models.py's own
from workload_attribution.rules.engine import Settings as RuleSettings
from workload_attribution.tasks.memory import MemoryPolicy
from workload_attribution.warehouse.archive import ArchiveSettings


def default_warehouse() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "workload-attribution", "warehouse.duckdb")


__all__ = ["BackfillConfig", "ClusterConfig", "Config", "ConfigError", "RuleSettings", "ServiceConfig", "load_config"]


@cache
def cluster_config() -> type[ClusterConfig]:
    """The model of a configured cluster, built on first use (`ClusterConfig`). Its shape is
    whatever registered: every source connector, scheduler and action sink is imported and their
    models joined (~0.1 s), which a process whose configuration names no cluster (a bundle
    diagnosed from the command line) never needs."""
    from workload_attribution.actions.config import ActionsConfig
    from workload_attribution.connectors import clusters

    base: Any = clusters.ClusterConfig  # statically the same class (TYPE_CHECKING below)
    model: Any = create_model(
        "ClusterConfig",  # pickled by name: this module's __getattr__ gives it
        __base__=base,
        __module__=__name__,
        __doc__="A cluster as the configuration holds it: how to scope its attempts and where its evidence "
        "lives (connectors/clusters.py), and what to do with its diagnoses once stored (actions/config.py; "
        "no block: nothing beyond the warehouse).",
        actions=(ActionsConfig | None, None),
    )
    return cast("type[ClusterConfig]", model)


def __getattr__(name: str) -> Any:
    if name == "ClusterConfig":
        return cluster_config()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _cluster(value: Any) -> Any:
    """One entry of `clusters`, validated by the cluster model (its errors keep their locations:
    clusters.<name>.<key>)."""
    return cluster_config().model_validate(value)


if TYPE_CHECKING:
    from workload_attribution.actions.config import ActionsConfig
    from workload_attribution.connectors import clusters

    class ClusterConfig(clusters.ClusterConfig):
        actions: ActionsConfig | None = None

    AnyCluster = ClusterConfig
else:  # validated by the model built on first use: a configuration without clusters never builds it
    AnyCluster = Annotated[Any, BeforeValidator(_cluster)]


class ServiceConfig(BaseModel):
    """`attribution serve`: the trigger API. Secrets are never in the file: only the names of the
    environment variables that hold them."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    deployment: str = Field("attribute-attempt/attempt", description="Prefect deployment each trigger starts")
    token_env: str = Field(
        "ATTRIBUTION_API_TOKEN", description="env var: one bearer token with every scope (admin), kept as it was"
    )
    tokens_env: str = Field(
        "ATTRIBUTION_API_TOKENS",
        description="env var: hashed tokens with their scopes, one 'NAME SCOPES HASH' per line or ';' "
        "(attribution token create prints one)",
    )
    tokens_file: str | None = Field(
        None, description="a file of the same lines, read again when it changes (rotation without a restart)"
    )
    session_ttl_s: float = Field(
        12 * 3600.0, gt=0, le=30 * 86400, description="a dashboard session ends this long after sign-in"
    )
    sessions_file: str | None = Field(
        None, description="where sessions live (default $XDG_STATE_HOME/workload-attribution/sessions.sqlite3)"
    )
    webhook_secret_env: str = Field(
        "ATTRIBUTION_WEBHOOK_SECRET", description="env var: HMAC-SHA256 key of the webhooks"
    )
    replay_window_s: float = Field(300.0, gt=0, description="signed timestamps older/newer than this are refused")
    max_body_bytes: int = Field(65536, gt=0, description="a webhook's body at most")
    attempts_max_bytes: int = Field(
        2**20, gt=0, description="POST /v1/attempts body at most (10,000 hosts of 63 characters fit)"
    )
    diagnose_completed: bool = Field(False, description="also diagnose attempts that completed successfully")
    answer_within_s: float = Field(
        1.0,
        gt=0,
        le=60,
        description="answer a trigger within this; a run Prefect has "
        "not created by then is answered 'queued' (it is on disk) and created after",
    )
    outbox_dir: str | None = Field(
        None,
        description="where accepted triggers wait for their flow run (default "
        "$XDG_STATE_HOME/workload-attribution/outbox)",
    )
    header_timeout_s: float = Field(
        10.0, gt=0, le=600, description="a connection must send its request head within this"
    )
    body_timeout_s: float = Field(30.0, gt=0, le=3600, description="and its body within this")
    max_connections: int = Field(
        1024,
        ge=1,
        le=1_000_000,
        description="connections held at most; one more closes the one idle longest (503 when all are busy)",
    )
    diagnose_concurrency: int = Field(2, ge=1, le=64, description="POST /v1/diagnose computed at once; more: 429")
    diagnose_timeout_s: float = Field(120.0, gt=0, le=3600, description="POST /v1/diagnose deadline; past it: 504")
    diagnose_max_bytes: int = Field(256 * 2**20, gt=0, description="POST /v1/diagnose body (compressed) at most")
    diagnose_max_expanded_bytes: int = Field(2**30, gt=0, description="an archive's members, expanded, at most")
    diagnose_max_members: int = Field(5000, gt=0, description="an archive's members at most")
    diagnose_max_line_bytes: int = Field(16 * 2**20, gt=0, description="a line of a posted log at most")


class BackfillConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    concurrency: int = Field(2, ge=1, le=64, description="attempts diagnosed at once by one backfill")
    lookback_hours: float = Field(26.0, gt=0, description="the nightly window: now - this .. now")
    bundles_dir: str | None = Field(None, description="offline: a directory tree of attempt bundles to backfill")


ENV_PREFIX = "ATTRIBUTION_"


class Config(BaseModel):
    """The configuration, as load_config reads it (settings_config: the file and the environment)."""

    model_config = ConfigDict(extra="forbid", validate_default=True)  # as pydantic-settings' BaseSettings

    warehouse: str = Field(
        default_factory=default_warehouse,
        description="a DuckDB file, or ducklake+postgres://...; empty: diagnoses are not stored",
    )
    rules_dir: str | None = None
    rules: RuleSettings = Field(default_factory=RuleSettings)
    clusters: dict[str, AnyCluster] = Field(default_factory=empty_dict)
    service: ServiceConfig = Field(default_factory=ServiceConfig)
    backfill: BackfillConfig = Field(default_factory=BackfillConfig)
    archive: ArchiveSettings = Field(default_factory=ArchiveSettings)
    memory: MemoryPolicy = Field(default_factory=MemoryPolicy)

    def cluster(self, name: str | None) -> tuple[str, ClusterConfig]:
        if name is None:
            if len(self.clusters) != 1:
                raise BadInput(f"name a cluster (configured: {', '.join(self.clusters) or 'none'})")
            name = next(iter(self.clusters))
        if name not in self.clusters:
            raise BadInput(f"cluster {name!r} is not configured (configured: {', '.join(self.clusters) or 'none'})")
        return name, self.clusters[name]


def _config_file() -> str:
    return os.environ.get("ATTRIBUTION_CONFIG") or "attribution.yaml"


def said_elsewhere() -> bool:
    """Whether a file or the environment says anything of the configuration: a variable named for
    one of its keys (ATTRIBUTION_WAREHOUSE, ATTRIBUTION_RULES__..., any case, as pydantic-settings
    matches them), or the file. Otherwise it is the defaults and the flags, and reading it needs no
    settings source."""
    keys = tuple(ENV_PREFIX + name.upper() for name in Config.model_fields)
    return any(name.upper().startswith(keys) for name in os.environ) or Path(_config_file()).is_file()


@cache
def settings_config() -> type[Config]:
    """Config read by pydantic-settings: defaults < file < environment < init values. Built when a
    file or the environment says something (said_elsewhere): importing pydantic-settings costs a new
    process ~40 ms (asyncio, every provider of settings), which a bundle diagnosed with the defaults
    and flags never needs."""
    from pydantic_settings import (
        BaseSettings,
        EnvSettingsSource,
        PydanticBaseSettingsSource,
        SettingsConfigDict,
        YamlConfigSettingsSource,
    )

    class SettingsConfig(Config, BaseSettings):
        model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid")

        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            path = _config_file()
            if any(name.upper().startswith(ENV_PREFIX + "CLUSTERS") for name in os.environ):
                # ATTRIBUTION_CLUSTERS__<name>__... are parsed by what the cluster model says each key
                # holds (JSON for a block, text for a value): read them as the typed model declares them
                env_settings = EnvSettingsSource(cast("type[BaseSettings]", typed_config()))
            sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
            if Path(path).is_file():
                sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
            return tuple(sources)

    return SettingsConfig


@cache
def typed_config() -> type[Config]:
    """Config with the cluster model in the annotation of `clusters` (built on first use): what
    reading ATTRIBUTION_CLUSTERS__... variables and naming the keys allowed beside a typo walk."""
    typed: Any = dict[str, cluster_config()]  # type: ignore[misc]
    model: Any = create_model("Config", __base__=settings_config(), clusters=(typed, Field(default_factory=empty_dict)))
    return cast("type[Config]", model)


class ConfigError(BadInput):
    """The configuration is not valid. `problems` lists every one (`attribution config check`)."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        more = f" (and {len(problems) - 1} more: attribution config check lists them)" if len(problems) > 1 else ""
        super().__init__(f"configuration: {problems[0]}{more}")


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys the model at `loc` (a pydantic error location) accepts: to name them beside a typo."""
    import typing

    model: Any = typed_config()
    steps = list(loc[:-1])
    while steps and isinstance(model, type) and issubclass(model, BaseModel):
        name = steps.pop(0)
        field = model.model_fields.get(str(name))
        if field is None:
            return []
        ann = field.annotation
        for _ in range(4):  # unwrap Optional[...], dict[str, X], Annotated[Union[...]]
            args = [a for a in typing.get_args(ann) if a is not type(None)]
            origin = typing.get_origin(ann)
            if origin is dict and steps:
                steps.pop(0)  # the user's key (a cluster or source name)
                ann = args[1]
            elif origin is typing.Annotated:
                ann = args[0]
            elif origin in (typing.Union, getattr(__import__("types"), "UnionType", None)) and args:
                tag = steps.pop(0) if steps and len(args) > 1 else None
                members = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
                pick = [
                    m
                    for m in members
                    if tag is not None and getattr(m.model_fields.get("connector"), "default", None) == tag
                ]
                ann = (pick or members)[0] if (pick or members) else None
            else:
                break
        model = ann
    if isinstance(model, type) and issubclass(model, BaseModel):
        return sorted(model.model_fields)
    return []


def config_problems(exc: ValidationError) -> list[str]:
    """Each validation error as `dotted.path: value: reason` (unknown keys with the keys allowed there)."""
    out = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        path = ".".join(str(p) for p in loc) or "config"
        if err["type"] == "extra_forbidden":
            allowed = _allowed_keys(loc)
            out.append(f"{path}: unknown key" + (f" (allowed here: {', '.join(allowed)})" if allowed else ""))
        else:
            value = err.get("input")
            shown = "" if isinstance(value, (dict, list)) or value is None else f" = {str(value)[:80]!r}"
            out.append(f"{path}{shown}: {err['msg']}")
    return out


def load_config(path: str | None = None, **overrides: Any) -> Config:
    """The configuration: defaults < file (`path`, $ATTRIBUTION_CONFIG, ./attribution.yaml) < ATTRIBUTION_*
    environment < `overrides`. Every problem is a ConfigError naming the dotted key."""
    if path:
        if not Path(path).is_file():
            raise ConfigError([f"config file {path} does not exist"])
        os.environ["ATTRIBUTION_CONFIG"] = str(Path(path).resolve())
    elif os.environ.get("ATTRIBUTION_CONFIG") and not Path(os.environ["ATTRIBUTION_CONFIG"]).is_file():
        # named, so meant: a file that is not there is an error, as with --config (not the defaults)
        raise ConfigError([f"config file {os.environ['ATTRIBUTION_CONFIG']} (ATTRIBUTION_CONFIG) does not exist"])
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        if not said_elsewhere():
            return Config(**given)
        read = settings_config()(**given)
        # as a Config (what is pickled to a flow run, compared, copied), its values as validated
        return Config.model_construct(read.model_fields_set, **dict(read))
    except ValidationError as exc:
        raise ConfigError(config_problems(exc)) from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        where = _config_file()
        raise ConfigError([f"{where}: not valid YAML: {str(exc).splitlines()[0]}"]) from None
