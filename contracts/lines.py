"""Log lines in staging: how raw lines enter (`stage_lines`) and how they are normalised
(`normalize`: line prefixes, timestamps of every form, ranks; continuation lines inherit the time
of the line before them). Every text source ends here, whoever collected it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb

from workload_attribution.contracts.staging import MAX_TEXT, naive_utc, render, scalar

# How many earlier lines a continuation line may look back for a timestamp.
CONTEXT_LINES = 48


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
        "INSERT INTO source_files VALUES (?, ?, ?, ?, ?, ?, 0, 0, NULL)",
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


def read_lenient(path: Path) -> tuple[str, int]:
    """Decode a file that is not valid UTF-8; returns (text, number of lines with bad bytes)."""
    data = path.read_bytes().replace(b"\x00", b"\xef\xbf\xbd")
    text = data.decode("utf-8", errors="replace")
    bad = sum(1 for line in text.split("\n") if "\ufffd" in line) if "\ufffd" in text else 0
    return text, bad


def normalize(con: duckdb.DuckDBPyConnection, tz: str, ref, files_by_ref: dict[str, Path]) -> None:
    """raw_lines -> log_lines, then inherit times for continuation lines from their file."""
    con.execute(render("normalize_lines.sql", max_text=MAX_TEXT), {"tz": tz, "ref": ref})
    needing = con.execute(
        "SELECT path, list(lineno ORDER BY lineno) FROM log_lines "
        "WHERE time_quality = 'none' AND path IS NOT NULL GROUP BY path"
    ).fetchall()
    contexts: list[tuple[str, int, list[str]]] = []
    for ref_path, linenos in needing:
        real = files_by_ref.get(ref_path)
        if real is None:
            continue
        lines = read_lenient(real)[0].split("\n")
        for n in linenos:
            ctx = [x.rstrip("\r")[:MAX_TEXT] for x in lines[max(0, n - 1 - CONTEXT_LINES) : n - 1]]
            contexts.append((ref_path, n, ctx))
    if not contexts:
        return
    con.execute("CREATE OR REPLACE TEMP TABLE line_context (path VARCHAR, lineno BIGINT, ctx VARCHAR[])")
    con.execute(
        "INSERT INTO line_context SELECT unnest($p), unnest($n), unnest($c)",
        {"p": [c[0] for c in contexts], "n": [c[1] for c in contexts], "c": [c[2] for c in contexts]},
    )
    con.execute(render("inherit_time.sql"), {"tz": tz, "ref": ref})
