"""Clocks are checked, not trusted: each host's offset estimated from anchors the attempt already
has, moments every host logs at once, and a host beyond the skew tolerance named and, where the
estimate is firm, its lines' times corrected.

The anchor used: PyTorch's watchdog timing out one collective (`Watchdog caught collective
operation timeout: WorkNCCL(SeqNum=N, ...)`). Every rank waits on the same collective and times
out the same `Timeout(ms)` after it began, so every host prints the same SeqNum within seconds.
A host's offset, for one collective, is its first such line minus the median of every host's; its
estimate is the median over the collectives it printed. It is firm when the collective was seen by
at least MIN_HOSTS hosts and the host's offsets agree with each other within AGREE_S.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

import duckdb

MIN_HOSTS = 3  # a median of fewer hosts cannot tell which one is off
AGREE_S = 5.0  # a host's offsets from several collectives agree within this: the estimate is firm


@dataclass(frozen=True)
class ClockOffset:
    node: str
    offset_s: float  # the host's clock minus the others': positive = ahead
    anchors: int  # collectives it rests on
    firm: bool

    def describe(self) -> str:
        how = "corrected" if self.firm else "not corrected: the estimate is not firm"
        return f"{self.node} {self.offset_s:+.1f} s ({how}; {self.anchors} collective timeout(s) seen across hosts)"


def estimate_offsets(con: duckdb.DuckDBPyConnection) -> list[ClockOffset]:
    """Each host's clock offset from the others', by the collectives every host saw time out."""
    rows = con.execute(
        r"""
        WITH a AS (
            SELECT node, min(time) AS t,
                   TRY_CAST(regexp_extract(body, 'operation timeout: WorkNCCL\(SeqNum=(\d+)', 1) AS BIGINT) AS seq
            FROM log_lines
            WHERE node IS NOT NULL AND time IS NOT NULL AND time_quality = 'own'
              AND contains(body, 'collective operation timeout: WorkNCCL(SeqNum=')
            GROUP BY ALL
        ), seen AS (
            SELECT seq, median(epoch(t)) AS mid, count(*) AS hosts FROM a WHERE seq IS NOT NULL GROUP BY seq
        )
        SELECT a.node, list(epoch(a.t) - seen.mid ORDER BY a.seq) AS offsets
        FROM a JOIN seen USING (seq) WHERE seen.hosts >= $min GROUP BY a.node ORDER BY a.node
        """,
        {"min": MIN_HOSTS},
    ).fetchall()
    return [_offset(node, [float(x) for x in offsets]) for node, offsets in rows]


def _offset(node: str, offsets: list[float]) -> ClockOffset:
    return ClockOffset(node, median(offsets), len(offsets), firm=max(offsets) - min(offsets) <= AGREE_S)


def check_clocks(con: duckdb.DuckDBPyConnection, tolerance_s: float) -> list[ClockOffset]:
    """The hosts whose clock is off by more than the tolerance; the lines of those whose estimate
    is firm are moved back by it (their time and interval), so faults across hosts are ordered on
    one clock. Samples and scheduler records keep their times: their stamps are the collector's
    and the scheduler's, not the host's."""
    off = [c for c in estimate_offsets(con) if abs(c.offset_s) > tolerance_s]
    for c in off:
        if c.firm:
            con.execute(
                "UPDATE log_lines SET time = time - to_microseconds($us), time_lo = time_lo - to_microseconds($us), "
                "time_hi = time_hi - to_microseconds($us) WHERE node = $node",
                {"us": round(c.offset_s * 1e6), "node": c.node},
            )
    return off
