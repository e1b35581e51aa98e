"""The action sink protocol and its registry.

A sink carries out one kind of action on a stored diagnosis, one node at a time, and can reverse
what it did. It is one module in actions/sinks/ that registers its configuration model beside the
function that builds it from that configuration and its cluster's:

    class PagerConfig(NotifierConfig):
        kind: Literal["pager"] = "pager"
        url: str

    @register("pager", PagerConfig, operation="page", reversal="unpage")
    def build(config: PagerConfig, cluster: Any) -> Pager:
        return Pager(config)

    class Pager:
        def act(self, request: Request) -> dict[str, Any]: ...    # what was sent: kept for the undo
        def revert(self, record: ActionRecord, why: str) -> dict[str, Any]: ...

A sink that isolates nodes (`isolates=True`: a drain, a cordon) also answers `fleet()`: its
scheduler's partitions and the nodes out of service now, for the guard's blast radius. A sink
raises contracts.errors.ActionError when it fails (transient ones are tried again) and
ActionSkipped when it finds a reason not to act; it never decides whether to act: the guard
(guard.py) and the plan (act.py) do. The configuration schema (`clusters.<name>.actions.sinks`) is
built from what registered here.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, Union

from pydantic import BaseModel, ConfigDict, Field

from workload_attribution.contracts.actions import ActionRecord
from workload_attribution.contracts.models import Diagnosis
from workload_attribution.contracts.vocabulary import ISOLATING_ACTIONS, Action

# what a notifier tells operators about, unless configured otherwise: a node to isolate, or one to look at
NOTIFY_ON = sorted([*ISOLATING_ACTIONS, Action.investigate])


class SinkConfig(BaseModel):
    """Base of every sink's configuration: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, description="tells two sinks of one kind apart (default: the kind)")

    @property
    def label(self) -> str:
        """The sink as records name it: its name, else its kind."""
        return self.name or str(getattr(self, "kind", "?"))

    def probe(self) -> tuple[str, str, dict[str, str]] | None:
        """What `attribution config check` tries, as a source's probe does; None: nothing."""
        return None


class NotifierConfig(SinkConfig):
    """A sink that tells (an alert, an event) rather than isolates."""

    on_actions: list[Action] = Field(
        default_factory=lambda: list(NOTIFY_ON), description="the recommended actions worth telling operators about"
    )


@dataclass(frozen=True)
class Request:
    """One operation a sink is asked to carry out about one node of a diagnosis (node None: the
    attempt as a whole)."""

    diagnosis: Diagnosis
    node: str | None
    action_id: str
    isolation: str = ""  # for a notifier: what was done to isolate the node, or why nothing was
    dashboard_url: str | None = None


@dataclass(frozen=True)
class Fleet:
    """An isolating sink's view of its scheduler: each partition's nodes, and the nodes out of
    service now (drained, down, cordoned, not ready)."""

    partitions: dict[str, frozenset[str]]
    unavailable: frozenset[str]

    def of(self, node: str) -> list[str]:
        return sorted(name for name, members in self.partitions.items() if node in members)


class Sink(Protocol):
    def act(self, request: Request) -> dict[str, Any]: ...
    def revert(self, record: ActionRecord, why: str) -> dict[str, Any]: ...


class IsolatingSink(Sink, Protocol):
    def fleet(self) -> Fleet: ...


Build = Callable[[Any, Any], Sink]  # (the sink's configuration, its cluster's configuration) -> the sink


@dataclass(frozen=True)
class SinkKind:
    kind: str
    config: type[SinkConfig]
    build: Build
    isolates: bool
    operation: str  # what its act is called in the actions table: drain, cordon, alert, notify
    reversal: str  # and its revert: resume, uncordon, resolve, withdraw


_REGISTRY: dict[str, SinkKind] = {}
_loaded = False


def register(
    kind: str, config: type[SinkConfig], operation: str, reversal: str, isolates: bool = False
) -> Callable[[Build], Build]:
    if not isolates and not issubclass(config, NotifierConfig):
        raise TypeError(f"sink {kind!r}: a sink that does not isolate is configured as a NotifierConfig")

    def add(build: Build) -> Build:
        known = _REGISTRY.get(kind)
        if known is not None and known.build.__module__ != build.__module__:
            raise ValueError(f"sink {kind!r} is registered twice ({known.build.__module__}, {build.__module__})")
        _REGISTRY[kind] = SinkKind(kind, config, build, isolates, operation, reversal)
        return build

    return add


def _load() -> None:
    global _loaded
    if _loaded:
        return
    package = importlib.import_module("workload_attribution.actions.sinks")
    for mod in pkgutil.iter_modules(package.__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"workload_attribution.actions.sinks.{mod.name}")
    _loaded = True


def kinds() -> dict[str, SinkKind]:
    _load()
    return dict(_REGISTRY)


def get(kind: str) -> SinkKind:
    found = kinds().get(kind)
    if found is None:
        raise KeyError(f"no action sink {kind!r} (known: {', '.join(sorted(_REGISTRY))})")
    return found


def sink_config_type() -> Any:
    """The type of one configured sink: the registered sink configs, told apart by `kind`."""
    models = tuple(k.config for k in kinds().values())
    return Annotated[Union[models], Field(discriminator="kind")]  # noqa: UP007
