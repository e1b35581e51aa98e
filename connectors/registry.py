"""The connector protocol and its registry (the schedulers' is schedulers.py).

A connector turns one source of evidence into staging rows plus exactly one Coverage record, and
never raises for bad data (a bad line, file or answer is counted in the coverage record). It is one
module in this package that registers its configuration model beside its collect function; its
record is made by coverage.py (one status ladder for every connector):

    class JournaldSource(SourceConfig):
        connector: Literal["journald"] = "journald"
        path: str

    @register("journald", JournaldSource)
    def collect(ctx: CollectContext[JournaldSource]) -> Collected:
        cover = Cover(ctx.source, "journald")
        ...   # read, stage (staging.lines.stage_lines / staging.observations.insert_observations)
        return cover.judged(Tally(observations=n, unparsed=bad, gaps=bool(missing)), details=...)

Errors worth retrying (transport errors, timeouts, 429, 5xx) raise
contracts.errors.TransientSourceError: the collect step retries them, then records the source as
`error`/`timeout`. Every module of this package is imported when the registry is first read, so
adding a source is adding its module: the configuration schema (`clusters.<name>.sources`) is built
from what registered here. (`kind="scheduler"`: a scheduler's own record, configured by the
cluster's scheduler block; `kind="bundle"`: offline bundles.)
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Generic, Literal, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field

from workload_attribution.contracts.models import AttemptScope, Coverage


class SourceConfig(BaseModel):
    """Base of every source's configuration: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    def probe(self) -> tuple[str, str, dict[str, str]] | None:
        """What `attribution config check` tries: ("http", url, headers) answered below 400, or
        ("path", path template, {}) existing for some host; None when there is nothing to try."""
        return None


C = TypeVar("C", bound=SourceConfig)


@dataclass(frozen=True)
class CollectContext(Generic[C]):
    """Everything a connector needs to collect one source for one attempt."""

    source: str  # the source's name in this attempt: app, syslog, metrics, sacct ...
    scope: AttemptScope
    staging: str  # the attempt's staging database (staging.database.connected)
    config: C
    prefilter: tuple[str, ...] = ()  # the rules' literals for this source: lines with none are not kept
    transport: Any = None  # an httpx transport to talk through (tests); None: the network


@dataclass
class Collected:
    coverage: Coverage
    notes: list[str] = field(default_factory=list)  # said in the diagnosis (e.g. records disagree)
    files: dict[str, Path] = field(default_factory=dict)  # evidence ref -> file on disk (continuation lines)


Collect = Callable[[CollectContext[Any]], Collected]


@dataclass(frozen=True)
class Connector:
    name: str
    config: type[SourceConfig]
    collect: Collect
    kind: Literal["source", "scheduler", "bundle"] = (
        "source"  # configured as a source, a cluster's scheduler, or offline
    )


_REGISTRY: dict[str, Connector] = {}
_loaded = False


def register(
    name: str, config: type[SourceConfig], kind: Literal["source", "scheduler", "bundle"] = "source"
) -> Callable[[Collect], Collect]:
    def add(collect: Collect) -> Collect:
        known = _REGISTRY.get(name)
        if known is not None and known.collect is not collect and known.collect.__module__ != collect.__module__:
            raise ValueError(
                f"connector {name!r} is registered twice ({known.collect.__module__}, {collect.__module__})"
            )
        _REGISTRY[name] = Connector(name, config, collect, kind)
        return collect

    return add


def _modules() -> list[str]:
    """This package's modules that register something."""
    package = importlib.import_module("workload_attribution.connectors")
    # clusters.py registers nothing: it joins what registered into the configuration's cluster
    # model (~0.1 s to build), which only a configured cluster needs
    return [
        m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_") and m.name != "clusters"
    ]


def load_all() -> None:
    """Import every module of this package once: each registers its sources and schedulers."""
    global _loaded
    if _loaded:
        return
    for name in _modules():
        importlib.import_module(f"workload_attribution.connectors.{name}")
    _loaded = True


def load_named(name: str) -> None:
    """Import the module of this package named `name`, if there is one: a connector or scheduler
    lives in the module of its name (slurm.py, loki.py ...), so looking one up needs only it, not
    every module (~35 ms of imports and models a bundle's diagnosis never uses)."""
    if not _loaded and name in _modules():
        importlib.import_module(f"workload_attribution.connectors.{name}")


def connectors() -> dict[str, Connector]:
    load_all()
    return dict(_REGISTRY)


def get(name: str) -> Connector:
    if name not in _REGISTRY:
        load_named(name)
    found = _REGISTRY.get(name) or connectors().get(name)
    if found is None:
        raise KeyError(f"no connector {name!r} (known: {', '.join(sorted(_REGISTRY))})")
    return found


def source_config_type() -> Any:
    """The type of one configured source: the registered source configs, told apart by `connector`."""
    models = tuple(c.config for c in connectors().values() if c.kind == "source")
    return Annotated[Union[models], Field(discriminator="connector")]  # noqa: UP007
