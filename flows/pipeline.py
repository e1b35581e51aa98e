"""The story of one attribution, written once for both runners (Prefect and inline).

    scope -> collect (every source in parallel, retried, each with a coverage record)
          -> store -> attribute -> publish
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from attribution.models import Diagnosis
from rules.engine import Settings
from rules.pack import Pack
from tasks import steps


# Delays between retries of a source's collection (transient errors only), for both runners.
RETRY_DELAYS_S = (0.5, 2.0, 5.0)


class Future(Protocol):
    def result(self) -> Any: ...


class Runner(Protocol):
    """How steps run: Prefect tasks (flows/attempt.py) or plain calls (flows/inline.py)."""

    def scope(self, request: "Request") -> steps.Scoped: ...
    def collect(self, scoped: steps.Scoped, source: str, pack: Pack) -> Future: ...
    def store(self, scoped: steps.Scoped, results: list[steps.SourceResult]) -> list: ...
    def attribute(self, scoped: steps.Scoped, coverage: list, pack: Pack, settings: Settings, notes: list[str]) -> Diagnosis: ...
    def publish(self, diagnosis: Diagnosis, warehouse: str | None, scoped: steps.Scoped) -> Diagnosis: ...


@dataclass
class Request:
    bundle: str | None = None                 # an offline attempt bundle, or
    live: steps.LiveScope | None = None       # an attempt scoped from a configured cluster
    warehouse: str | None = None
    settings: Settings = field(default_factory=Settings)


def attribute_story(run: Runner, request: Request, pack: Pack,
                    on_failed_collect: Callable[[str, BaseException], steps.SourceResult]) -> Diagnosis:
    scoped = run.scope(request)
    try:
        futures = {source: run.collect(scoped, source, pack) for source in scoped.sources}
        results = []
        for source, fut in futures.items():
            try:
                results.append(fut.result())
            except Exception as exc:  # retries exhausted: the source is an error, the diagnosis goes on
                results.append(on_failed_collect(source, exc))
        coverage = run.store(scoped, results)
        notes = [n for r in results for n in r.notes]
        diagnosis = run.attribute(scoped, coverage, pack, request.settings, notes)
        return run.publish(diagnosis, request.warehouse, scoped)
    finally:
        steps.drop_staging(scoped)


def failed_collect(source: str, exc: BaseException) -> steps.SourceResult:
    from attribution.models import Coverage, CoverageStatus

    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    status = CoverageStatus(getattr(exc, "status", "error"))
    return steps.SourceResult(Coverage(source=source, connector=getattr(exc, "connector", "bundle"), status=status,
                                       error=f"failed after retries: {reason}"))
