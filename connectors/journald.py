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

import time
from datetime import timedelta
from pathlib import Path
from typing import Literal

from pydantic import Field

from workload_attribution.connectors.registry import CollectContext, Collected, SourceConfig, register
from workload_attribution.contracts.models import Coverage, CoverageStatus
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


@register(CONNECTOR, JournaldSource)
def collect(ctx: CollectContext[JournaldSource]) -> Collected:
    started = time.monotonic()
    cfg, scope = ctx.config, ctx.scope
    per_host = "{host}" in cfg.path
    wanted = {Path(cfg.path.replace("{host}", h)): h for h in scope.nodes} if per_host else {Path(cfg.path): None}
    present = {p: h for p, h in wanted.items() if p.is_file()}
    missing_files = sorted(str(p) for p in wanted if p not in present)
    if not present:
        return Collected(
            Coverage(
                source=ctx.source,
                connector=CONNECTOR,
                status=CoverageStatus.unavailable,
                error=f"no journal export at {', '.join(missing_files)}"[:500],
                duration_ms=int((time.monotonic() - started) * 1000),
            )
        )
    since = naive_utc(scope.start - timedelta(seconds=cfg.lookback_s))
    until = naive_utc(scope.end + timedelta(seconds=cfg.margin_s))
    keep = contains_any("text", ctx.prefilter)
    with connected(ctx.staging) as con:
        per_file = {str(p): h for p, h in present.items() if h}
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE journal_scan AS {_ENTRIES}",
            {
                "paths": [str(p) for p in present],
                "file_names": list(per_file) or [""],
                "file_hosts": list(per_file.values()) or [""],
            },
        )
        entries, bad, binary, outside, foreign = one(
            con,
            """
            SELECT count(*), count(*) FILTER (WHERE NOT usable), count(*) FILTER (WHERE binary_message),
                   count(*) FILTER (WHERE usable AND (t < $since OR t > $until)),
                   count(*) FILTER (WHERE usable AND file_host IS NULL
                                    AND NOT list_contains($nodes, host)
                                    AND NOT list_contains($nodes, split_part(host, '.', 1)))
            FROM journal_scan""",
            {
                "since": since,
                "until": until,
                "nodes": scope.nodes,
            },
        )
        rows = con.execute(
            f"""
            SELECT filename, node, lineno, t, text FROM (
                SELECT *, coalesce(file_host, CASE WHEN list_contains($nodes, host) THEN host
                                                   ELSE split_part(host, '.', 1) END) AS node
                FROM journal_scan)
            WHERE usable AND t BETWEEN $since AND $until AND ({keep}) AND list_contains($nodes, node)
            ORDER BY filename, lineno""",
            {
                "since": since,
                "until": until,
                "nodes": scope.nodes,
            },
        ).fetchall()
        con.execute("DROP TABLE journal_scan")
        streams: dict[tuple[str, str], list[Line]] = {}
        for filename, node, lineno, t, text in rows:
            streams.setdefault((filename, node), []).append(Line(text, lineno, t))
        for (filename, node), lines in sorted(streams.items()):
            stage_lines(con, ctx.source, CONNECTOR, node, filename, lines)
    nodes = sorted({n for _, n in streams} | {h for h in present.values() if h})
    missing_nodes = sorted(set(scope.nodes) - set(nodes)) if per_host else []
    usable_in_scope = entries - bad - outside - foreign
    if entries == 0:
        status = CoverageStatus.empty
    elif bad or missing_files:
        status = CoverageStatus.partial
    elif usable_in_scope <= 0:
        status = CoverageStatus.empty
    else:
        status = CoverageStatus.ok
    error = None
    if bad:
        error = f"{bad} line(s) are not journal entries (JSON objects with __REALTIME_TIMESTAMP and MESSAGE)"
    elif missing_files:
        error = f"no journal export for node(s): {', '.join(missing_nodes)}"
    elif status is CoverageStatus.empty and entries:
        error = "no entry of the attempt's hosts inside its window"
    return Collected(
        Coverage(
            source=ctx.source,
            connector=CONNECTOR,
            status=status,
            observations=max(0, usable_in_scope),
            nodes=nodes,
            unparsed=bad,
            files=len(present),
            error=error,
            duration_ms=int((time.monotonic() - started) * 1000),
            details={
                "entries": entries,
                "matched_lines": len(rows),
                "not_entries": bad,
                "binary_messages": binary,
                "outside_window": outside,
                "other_hosts": foreign,
                "missing_nodes": missing_nodes,
            },
        )
    )
