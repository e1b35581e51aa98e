"""Log lines normalised in staging: raw_lines -> log_lines (line prefixes, timestamps of every
form, ranks); continuation lines inherit the time of the stamped lines around them."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import duckdb

from workload_attribution.staging.database import MAX_TEXT, plainly, render, scalar, sql
from workload_attribution.staging.files import plain_text, read_pieces

# How many lines before and after a continuation line are searched for the stamps around it.
CONTEXT_LINES = 48


@dataclass
class Normalized:
    """What normalising found for coverage: per source, lines whose stamp is outside 1970..2200
    (`far`) and lines whose stamp makes no time at all (`impossible`: 11:59:60 on a day with no
    leap second, hour 25, a 15-digit fraction), both quarantined; and each scanned file's first and
    last stamps (of its first and last lines; None when they have none) as (source, path, node,
    first, last) rows: `spans`."""

    far: dict[str, int]
    spans: list[tuple[str, str, str | None, datetime | None, datetime | None]]
    impossible: dict[str, int] = field(default_factory=dict)


def normalize(con: duckdb.DuckDBPyConnection, tz: str, ref: datetime, files_by_ref: dict[str, Path]) -> Normalized:
    """raw_lines -> log_lines, then continuation lines take their time and interval from the
    stamped lines around them in their file (read again, streamed, only around those lines).
    A stamp outside 1970..2200, or one that makes no time, quarantines its line: kept with no time
    (time_quality 'quarantined'), counted, never given its neighbours' time."""
    # a tiny attempt's statements cost more to plan than to run: the grammar (parse_log_line,
    # ~136 KB of plan once its macros are expanded) took ~90 ms a statement optimised on two threads.
    # The lines it parses: the kept ones, and each scanned file's first and last (parse_lines.sql)
    parsed = scalar(
        con,
        "SELECT (SELECT count(*) FROM raw_lines) + (SELECT coalesce(sum(len(head) + coalesce(len(tail), 0)), 0) "
        "FROM source_files WHERE head IS NOT NULL)",
    )
    with plainly(con, parsed, pick_threads=True):
        done, needing = _stamped(con, tz, ref, files_by_ref)
    if not needing:
        return done
    con.execute("CREATE OR REPLACE TEMP TABLE line_window (path VARCHAR, lineno BIGINT, line VARCHAR)")
    for ref_path in needing:  # the file read once, in pieces; only the pieces holding a window go to DuckDB
        with plain_text(files_by_ref[ref_path]) as plain:
            if plain.path is not None:
                _window(con, ref_path, plain.path)
    window = scalar(con, "SELECT count(*) FROM line_window")
    if not window:  # no neighbour read (the files gone, not plain text): the grammar has nothing to parse
        return done
    with plainly(con, window, pick_threads=True):
        con.execute(render("inherit_time.sql", context=CONTEXT_LINES), {"tz": tz, "ref": ref})
    return done


def _stamped(
    con: duckdb.DuckDBPyConnection, tz: str, ref: datetime, files_by_ref: dict[str, Path]
) -> tuple[Normalized, list[str]]:
    """raw_lines parsed into log_lines; what normalising found, and the files holding lines with no
    time of their own (continuation lines), whose neighbours are read next."""
    con.execute(sql("parse_lines.sql"), {"tz": tz, "ref": ref})
    n = scalar(con, "SELECT count(*) FROM parsed_lines WHERE kind = 'raw'")
    # the lines' ids, taken from obs_seq as one block (nothing else draws from it meanwhile) and
    # given in file order: an id says where a line stands, whatever order DuckDB reads them in
    last = scalar(con, "SELECT max(nextval('obs_seq')) FROM range($n)", {"n": n}) if n else 0
    con.execute(render("normalize_lines.sql", max_text=MAX_TEXT), {"base": (last or 0) - n})
    spans = [
        tuple(r)
        for r in con.execute(
            """
            SELECT s.source, s.path, s.node,
                   min(p.stamp) FILTER (WHERE p.kind = 'head' AND p.stamp >= TIMESTAMP '1970-01-02'
                                        AND p.stamp < TIMESTAMP '2200-01-01'),
                   max(p.stamp) FILTER (WHERE p.kind = 'tail' AND p.stamp >= TIMESTAMP '1970-01-02'
                                        AND p.stamp < TIMESTAMP '2200-01-01')
            FROM source_files s LEFT JOIN parsed_lines p ON p.file_id = s.file_id AND p.kind != 'raw'
            WHERE s.head IS NOT NULL
            GROUP BY ALL
            """
        ).fetchall()
    ]
    far, impossible = _quarantined(con)
    con.execute("DROP TABLE IF EXISTS parsed_lines")
    done = Normalized(far, spans, impossible)
    needing = [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT path FROM log_lines WHERE time_quality = 'none' AND path IS NOT NULL ORDER BY path"
        ).fetchall()
        if r[0] in files_by_ref
    ]
    return done, needing


def _quarantined(con: duckdb.DuckDBPyConnection) -> tuple[dict[str, int], dict[str, int]]:
    """Per source, the quarantined lines: stamped outside 1970..2200, and stamped with fields that
    make no time (the grammar's '-infinity')."""
    far: dict[str, int] = {}
    impossible: dict[str, int] = {}
    for source, n_far, n_impossible in con.execute(
        """
        SELECT s.source, count(*) FILTER (WHERE NOT isinf(p.stamp)), count(*) FILTER (WHERE isinf(p.stamp))
        FROM parsed_lines p JOIN source_files s USING (file_id)
        WHERE p.kind = 'raw' AND NOT (p.stamp >= TIMESTAMP '1970-01-02' AND p.stamp < TIMESTAMP '2200-01-01')
        GROUP BY ALL
        """
    ).fetchall():
        if n_far:
            far[source] = n_far
        if n_impossible:
            impossible[source] = n_impossible
    return far, impossible


def _window(con: duckdb.DuckDBPyConnection, ref_path: str, path: Path) -> None:
    """The lines around one file's lines with no time, into line_window."""
    need = [
        r[0]
        for r in con.execute(
            f"""SELECT DISTINCT unnest(range(greatest(1, lineno - {CONTEXT_LINES}), lineno + {CONTEXT_LINES} + 1)) AS n
                FROM log_lines WHERE path = $ref AND time_quality = 'none' ORDER BY n""",
            {"ref": ref_path},
        ).fetchall()
    ]
    if not need:
        return
    query = render("line_window.sql", max_text=MAX_TEXT)
    try:
        for piece in read_pieces(path):
            last = piece.first + piece.lines - 1
            lo = bisect.bisect_left(need, piece.first)
            hi = bisect.bisect_right(need, last)
            if lo < hi:
                con.execute(query, {"ref": ref_path, "content": piece.text, "first": piece.first, "n": need[lo:hi]})
            if hi >= len(need):
                break
    except OSError:  # gone or swapped since the scan: those lines keep no time
        return
