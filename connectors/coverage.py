"""The one way a coverage record is made: what a connector found goes in (a `Tally`), the status
comes out of one ladder, the same for every connector.

    cover = Cover(ctx.source, CONNECTOR)              # at the start: it times the collection
    ...
    return cover.judged(Tally(observations=n, unparsed=bad, gaps=bool(missing)), nodes=..., details=...)
    return cover.outcome(CoverageStatus.unavailable, "no journal export at ...")   # nothing to judge

The ladder (README, "Honest coverage"): `unavailable` when the source is not there at all; `error`
when nothing could be read and something went wrong; `empty` when there was nothing to read;
`partial` when something was lost (unparsed) or a part of the attempt is not covered (gaps: nodes
without data, files not read, windows cut short); `empty` again when what was read says nothing
about the attempt; else `ok`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from workload_attribution.connectors.registry import Collected
from workload_attribution.contracts.models import Coverage, CoverageDetails, CoverageStatus


@dataclass(frozen=True)
class Tally:
    """What a connector found for one source, in the words of the status ladder."""

    absent: bool = False  # the source is not there at all: nothing to read (unavailable)
    observations: int = 0  # delivered: lines, records or samples kept
    unparsed: int = 0  # could not be read faithfully: counted, never silently dropped
    gaps: bool = False  # a part of the attempt is not covered: nodes, files, windows, queries
    failed: bool = False  # nothing could be read, and something went wrong
    read_nothing: bool = False  # there was nothing to read (empty, whatever else is missing)
    none_in_scope: bool = False  # what was read says nothing about the attempt (empty, unless lost or gaps)

    @property
    def status(self) -> CoverageStatus:
        if self.absent:
            return CoverageStatus.unavailable
        if self.failed:
            return CoverageStatus.error
        if self.read_nothing:
            return CoverageStatus.empty
        if self.unparsed or self.gaps:
            return CoverageStatus.partial
        if self.none_in_scope:
            return CoverageStatus.empty
        return CoverageStatus.ok


class Cover:
    """Builds one source's coverage record; made when its collection starts, so it knows how long
    the collection took."""

    def __init__(self, source: str, connector: str) -> None:
        self.source, self.connector = source, connector
        self.started = time.monotonic()

    def _ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    def judged(
        self,
        tally: Tally,
        *,
        nodes: list[str] | None = None,
        files: int = 0,
        error: str | None = None,
        details: CoverageDetails | None = None,
        paths: dict[str, Path] | None = None,
        notes: list[str] | None = None,
    ) -> Collected:
        """The record of a source that was read: its status from the tally. `paths`: each evidence
        ref's file on disk (normalisation reads them again around continuation lines)."""
        coverage = Coverage(
            source=self.source,
            connector=self.connector,
            status=tally.status,
            observations=tally.observations,
            nodes=nodes or [],
            unparsed=tally.unparsed,
            files=files,
            error=error,
            duration_ms=self._ms(),
            details=details or CoverageDetails(),
        )
        return Collected(coverage, notes=notes or [], files=paths or {})

    def outcome(self, status: CoverageStatus | str, error: str | None = None, files: int = 0) -> Collected:
        """The record of a source with nothing to judge: not there (`unavailable`), not applicable
        (`skipped`), refused or failed (`error`, `timeout`), or answered with nothing (`empty`)."""
        coverage = Coverage(
            source=self.source,
            connector=self.connector,
            status=CoverageStatus(status),
            files=files,
            error=error,
            duration_ms=self._ms(),
        )
        return Collected(coverage)


def lose(coverage: Coverage, lines: int, impossible: int = 0) -> None:
    """Lines found unreadable after the record was made (normalisation quarantines a line stamped
    outside 1970..2200, `lines`, or stamped with fields that make no time, `impossible`): counted,
    and a record that said `ok` or `empty` is `partial` now."""
    if lines:
        coverage.details.lines_with_time_out_of_range = lines
    if impossible:
        coverage.details.lines_with_impossible_time = impossible
    coverage.unparsed += lines + impossible
    if coverage.status in (CoverageStatus.ok, CoverageStatus.empty):
        coverage.status = CoverageStatus.partial


def distrust_values(coverage: Coverage, samples: int, series: list[str]) -> None:
    """Samples of NaN or +/-Inf (a gauge no exporter should give): kept, never evidence (no rule
    threshold holds for them), counted and their series named; a record that said `ok` is
    `partial` now."""
    coverage.details.non_finite_samples = samples
    coverage.details.non_finite_series = series
    if coverage.status in (CoverageStatus.ok, CoverageStatus.empty):
        coverage.status = CoverageStatus.partial
