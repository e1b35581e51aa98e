"""journald connector: exports written by `journalctl -o json` (one JSON object per line), a format
sites keep for kernel and daemon logs.

    sources:
      syslog: {connector: journald, path: "/shared/journal/{host}.json"}   # one export per host
      syslog: {connector: journald, path: "/shared/journal/fleet.json"}    # or one for many hosts

DuckDB reads each file whole and parses every line as JSON; a line that is not a journal entry
is counted (coverage `partial`), never fatal. Each entry becomes a line `IDENTIFIER[PID]: MESSAGE`
(`kernel: MESSAGE` for the kernel's transport) stamped with the entry's own `__REALTIME_TIMESTAMP`
(microseconds since the epoch), attributed to `_HOSTNAME`; only the attempt's hosts, inside its
window widened by `lookback_s` / `margin_s`, and lines with one of the rules' literals are kept.
A `MESSAGE` journald stored as a byte array (not UTF-8) is decoded byte by byte and counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import duckdb
from pydantic import Field

from workload_attribution.connectors.coverage import Cover, Tally
from workload_attribution.connectors.registry import CollectContext, Collected, SourceConfig, register
from workload_attribution.contracts.models import CoverageStatus, Details
from workload_attribution.staging.database import connected, contains_any, naive_utc, one
from workload_attribution.staging.lines import Line, stage_lines

CONNECTOR = "journald"


class JournaldSource(SourceConfig):
    connector: Literal["journald"] = "journald"
    path: str = Field(description="a journalctl -o json export; {host} in the path: one file per host")
    lookback_s: float = Field(3600.0, ge=0, description="keep entries this long before the attempt started")
    margin_s: float = Field(300.0, ge=0, description="and this long after it ended")

    def probe(self) -> tuple[str, str, dict[str, str]]:
        return "path", self.path, {}


_ENTRIES = """
WITH raw AS (
    SELECT f.filename, l.lineno, l.line
    FROM read_text($paths) f,
         unnest(string_split(f.content, chr(10))) WITH ORDINALITY AS l(line, lineno)
    WHERE trim(l.line) <> ''
), valid AS (
    -- CASE evaluates its branch only where its condition holds; AND would parse every line
    SELECT filename, lineno, line, CASE WHEN json_valid(line) THEN json_type(line) = 'OBJECT' ELSE false END AS ok
    FROM raw
), parsed AS (
    SELECT filename, lineno, ok, CASE WHEN ok THEN line::JSON END AS j FROM valid
), entries AS (
    SELECT filename, lineno, ok,
           json_extract_string(j, '$._HOSTNAME') AS host,
           TRY_CAST(json_extract_string(j, '$.__REALTIME_TIMESTAMP') AS BIGINT) AS us,
           json_extract_string(j, '$._TRANSPORT') AS transport,
           coalesce(json_extract_string(j, '$.SYSLOG_IDENTIFIER'), json_extract_string(j, '$._COMM')) AS ident,
           json_extract_string(j, '$._PID') AS pid,
           json_type(j, '$.MESSAGE') = 'ARRAY' AND json_type(j, '$.MESSAGE[0]') <> 'VARCHAR' AS binary_message,
           -- journald writes a non-UTF-8 field as an array of byte values, a field given twice as an
           -- array of strings (systemd's JOURNAL_EXPORT_FORMATS, "Journal JSON Format")
           CASE WHEN json_type(j, '$.MESSAGE') = 'ARRAY'
                THEN coalesce(array_to_string(
                         list_transform(TRY_CAST(json_extract(j, '$.MESSAGE') AS INTEGER[]), b -> chr(b)), ''),
                     array_to_string(json_extract_string(j, '$.MESSAGE[*]'), ' '))
                ELSE json_extract_string(j, '$.MESSAGE') END AS message
    FROM parsed
), lines AS (
    SELECT *, CASE WHEN transport = 'kernel' OR ident = 'kernel' THEN 'kernel: ' || coalesce(message, '')
                   ELSE coalesce(ident, '?') || coalesce('[' || pid || ']', '') || ': ' || coalesce(message, '')
              END AS text
    FROM entries
)
SELECT l.filename, l.lineno, l.host, make_timestamp(l.us) AS t, l.text, l.ok, l.binary_message,
       l.ok AND l.us IS NOT NULL AND l.message IS NOT NULL AS usable, f.file_host
FROM lines l LEFT JOIN (SELECT unnest($file_names) AS filename, unnest($file_hosts) AS file_host) f USING (filename)
"""


class JournalDetails(Details):
    entries: int
    matched_lines: int
    not_entries: int
    binary_messages: int
    outside_window: int
    other_hosts: int
    missing_nodes: list[str]


@dataclass(frozen=True)
class _Counts:
    """The exports' lines: entries, lines that are not entries, byte-array messages, and entries
    outside the window or of hosts not in the allocation."""

    entries: int
    bad: int
    binary: int
    outside: int
    foreign: int

    @property
    def in_scope(self) -> int:
        return self.entries - self.bad - self.outside - self.foreign


def _exports(template: str, nodes: list[str]) -> tuple[dict[Path, str | None], list[str]]:
    """(each export present -> its host, or None for one export of many hosts; the paths missing)."""
    per_host = "{host}" in template
    wanted = {Path(template.replace("{host}", h)): h for h in nodes} if per_host else {Path(template): None}
    present = {p: h for p, h in wanted.items() if p.is_file()}
    return present, sorted(str(p) for p in wanted if p not in present)


def _scan(con: duckdb.DuckDBPyConnection, present: dict[Path, str | None], window: dict[str, Any]) -> _Counts:
    """Every line of the exports parsed into the journal_scan table; counted."""
    per_file = {str(p): h for p, h in present.items() if h}
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE journal_scan AS {_ENTRIES}",
        {
            "paths": [str(p) for p in present],
            "file_names": list(per_file) or [""],
            "file_hosts": list(per_file.values()) or [""],
        },
    )
    return _Counts(
        *one(
            con,
            """
            SELECT count(*), count(*) FILTER (WHERE NOT usable), count(*) FILTER (WHERE binary_message),
                   count(*) FILTER (WHERE usable AND (t < $since OR t > $until)),
                   count(*) FILTER (WHERE usable AND file_host IS NULL
                                    AND NOT list_contains($nodes, host)
                                    AND NOT list_contains($nodes, split_part(host, '.', 1)))
            FROM journal_scan""",
            window,
        )
    )


def _kept(con: duckdb.DuckDBPyConnection, window: dict[str, Any], keep: str) -> list[tuple[Any, ...]]:
    """(file, node, line number, time, text) of the entries kept: the attempt's hosts, inside the
    window, with one of the rules' literals."""
    rows = con.execute(
        f"""
        SELECT filename, node, lineno, t, text FROM (
            SELECT *, coalesce(file_host, CASE WHEN list_contains($nodes, host) THEN host
                                               ELSE split_part(host, '.', 1) END) AS node
            FROM journal_scan)
        WHERE usable AND t BETWEEN $since AND $until AND ({keep}) AND list_contains($nodes, node)
        ORDER BY filename, lineno""",
        window,
    ).fetchall()
    con.execute("DROP TABLE journal_scan")
    return rows


def _stage(con: duckdb.DuckDBPyConnection, source: str, rows: list[tuple[Any, ...]]) -> set[str]:
    """One stream per file and node; returns the nodes staged."""
    streams: dict[tuple[str, str], list[Line]] = {}
    for filename, node, lineno, t, text in rows:
        streams.setdefault((filename, node), []).append(Line(text, lineno, t))
    for (filename, node), lines in sorted(streams.items()):
        stage_lines(con, source, CONNECTOR, node, filename, lines)
    return {n for _, n in streams}


def _why(counts: _Counts, missing_files: list[str], missing_nodes: list[str], empty: bool) -> str | None:
    if counts.bad:
        return f"{counts.bad} line(s) are not journal entries (JSON objects with __REALTIME_TIMESTAMP and MESSAGE)"
    if missing_files:
        return f"no journal export for node(s): {', '.join(missing_nodes)}"
    if empty and counts.entries:
        return "no entry of the attempt's hosts inside its window"
    return None


@register(CONNECTOR, JournaldSource)
def collect(ctx: CollectContext[JournaldSource]) -> Collected:
    cover = Cover(ctx.source, CONNECTOR)
    cfg, scope = ctx.config, ctx.scope
    present, missing_files = _exports(cfg.path, scope.nodes)
    if not present:
        return cover.outcome(CoverageStatus.unavailable, f"no journal export at {', '.join(missing_files)}"[:500])
    since: datetime | None = naive_utc(scope.start - timedelta(seconds=cfg.lookback_s))
    until = naive_utc(scope.end + timedelta(seconds=cfg.margin_s))
    window = {"since": since, "until": until, "nodes": scope.nodes}
    with connected(ctx.staging) as con:
        counts = _scan(con, present, window)
        rows = _kept(con, window, contains_any("text", ctx.prefilter))
        staged = _stage(con, ctx.source, rows)
    nodes = sorted(staged | {h for h in present.values() if h})
    missing_nodes = sorted(set(scope.nodes) - set(nodes)) if "{host}" in cfg.path else []
    tally = Tally(
        observations=max(0, counts.in_scope),
        unparsed=counts.bad,
        gaps=bool(missing_files),
        read_nothing=counts.entries == 0,
        none_in_scope=counts.in_scope <= 0,
    )
    details = JournalDetails(
        entries=counts.entries,
        matched_lines=len(rows),
        not_entries=counts.bad,
        binary_messages=counts.binary,
        outside_window=counts.outside,
        other_hosts=counts.foreign,
        missing_nodes=missing_nodes,
    )
    error = _why(counts, missing_files, missing_nodes, tally.status is CoverageStatus.empty)
    return cover.judged(tally, nodes=nodes, files=len(present), error=error, details=details)
