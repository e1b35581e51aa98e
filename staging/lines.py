"""Raw log lines into staging (`stage_lines`): every text source ends here, whoever collected it.
Normalising them is staging/normalize.py."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import duckdb

from workload_attribution.staging.database import MAX_TEXT, naive_utc


@dataclass(frozen=True)
class Line:
    """One raw line as a connector got it. `collector_time` is the time the collector stamped
    (Loki, journald), used when the line itself carries none."""

    text: str
    lineno: int
    collector_time: datetime | None = None


@dataclass(frozen=True)
class Stream:
    """One stream's lines (a file, a host's stream): `ref` is how evidence names it (a path, a
    query); `total_lines` how many lines it had before any pre-filter (for coverage), default all."""

    source: str
    connector: str
    node: str | None
    ref: str
    lines: Sequence[Line]
    total_lines: int | None = None


def stage_lines(
    con: duckdb.DuckDBPyConnection,
    source: str,
    connector: str,
    node: str | None,
    ref: str,
    lines: Sequence[Line],
    total_lines: int | None = None,
) -> int:
    """Store one stream's lines as raw lines; returns the file id."""
    return stage_streams(con, [Stream(source, connector, node, ref, lines, total_lines)])[0]


def stage_streams(con: duckdb.DuckDBPyConnection, streams: Sequence[Stream]) -> list[int]:
    """Store streams' lines as raw lines, in three statements however many streams there are (a
    pack's test lines are thousands of one-line streams); returns their file ids, in order."""
    if not streams:
        return []
    ids = [int(r[0]) for r in con.execute("SELECT nextval('file_seq') FROM range(?)", [len(streams)]).fetchall()]
    con.execute(
        "INSERT INTO source_files SELECT unnest($i), unnest($s), unnest($c), unnest($n), unnest($r), unnest($t), "
        "0, 0, NULL, NULL",
        {
            "i": ids,
            "s": [x.source for x in streams],
            "c": [x.connector for x in streams],
            "n": [x.node for x in streams],
            "r": [x.ref for x in streams],
            "t": [len(x.lines) if x.total_lines is None else x.total_lines for x in streams],
        },
    )
    owned = [(file_id, line) for file_id, x in zip(ids, streams) for line in x.lines]
    if owned:
        # one JSON document, not four Python lists: DuckDB converts a list's items one by one (~6 us
        # each, ~25 us a line), JSON text at once
        rows = [
            [f, x.lineno, x.text[:MAX_TEXT], t.isoformat() if (t := naive_utc(x.collector_time)) else None]
            for f, x in owned
        ]
        con.execute(
            "INSERT INTO raw_lines SELECT r[1]::INTEGER, r[2]::BIGINT, r[3], NULL, r[4]::TIMESTAMP "
            "FROM (SELECT unnest(from_json($rows, '[[\"VARCHAR\"]]')) AS r)",
            {"rows": json.dumps(rows)},
        )
    return ids
