"""Raw log lines into staging (`stage_lines`): every text source ends here, whoever collected it.
Normalising them is staging/normalize.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import duckdb

from workload_attribution.staging.database import MAX_TEXT, naive_utc, scalar


@dataclass(frozen=True)
class Line:
    """One raw line as a connector got it. `collector_time` is the time the collector stamped
    (Loki, journald), used when the line itself carries none."""

    text: str
    lineno: int
    collector_time: datetime | None = None


def stage_lines(
    con: duckdb.DuckDBPyConnection,
    source: str,
    connector: str,
    node: str | None,
    ref: str,
    lines: Sequence[Line],
    total_lines: int | None = None,
) -> int:
    """Store one stream's lines (a file, a host's stream) as raw lines; returns the file id.
    `ref` is how evidence names the stream (a path, a query); `total_lines` how many lines the
    stream had before any pre-filter (for coverage), default len(lines)."""
    file_id = scalar(con, "SELECT nextval('file_seq')")
    con.execute(
        "INSERT INTO source_files VALUES (?, ?, ?, ?, ?, ?, 0, 0, NULL, NULL)",
        [file_id, source, connector, node, ref, len(lines) if total_lines is None else total_lines],
    )
    if lines:
        con.execute(
            "INSERT INTO raw_lines SELECT $f, unnest($n), unnest($l), NULL, unnest($t)",
            {
                "f": file_id,
                "n": [x.lineno for x in lines],
                "l": [x.text[:MAX_TEXT] for x in lines],
                "t": [naive_utc(x.collector_time) for x in lines],
            },
        )
    return file_id
