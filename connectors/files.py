"""Files connector: per-host log files on a shared filesystem, read with the bundle's parsers.

Configured with a path template, e.g. /shared/logs/{host}/syslog.log; each attempt host's file is
scanned exactly like a bundle's logs/<source>/<host>.log (DuckDB reads it, literal pre-filter,
line numbers, lenient decoding). Hosts whose file does not exist make the coverage partial.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

from pydantic import Field

from workload_attribution.connectors.registry import CollectContext, Collected, SourceConfig, register
from workload_attribution.connectors.text import TextFile, scan_files
from workload_attribution.contracts.models import Coverage, CoverageStatus
from workload_attribution.staging.database import connected
from workload_attribution.staging.files import file_kind, printable_name

CONNECTOR = "files"


class FilesSource(SourceConfig):
    connector: Literal["files"] = "files"
    path: str = Field(description="path template with {host}, e.g. /shared/logs/{host}/syslog.log")

    def probe(self) -> tuple[str, str, dict[str, str]]:
        return "path", self.path, {}


@register(CONNECTOR, FilesSource)
def collect(ctx: CollectContext[FilesSource]) -> Collected:
    started = time.monotonic()
    files, missing, not_read = [], [], []
    for host in ctx.scope.nodes:
        p = Path(ctx.config.path.replace("{host}", host))
        kind = file_kind(p)
        if kind is None:
            files.append(TextFile(path=p, ref=printable_name(str(p), most=1024), node=host))
        elif kind == "missing":
            missing.append(host)
        else:  # a FIFO, a device, a directory: named, never opened
            not_read.append(f"{printable_name(str(p))}: {kind}, not read")
            missing.append(host)
    with connected(ctx.staging) as con:
        stats = scan_files(con, files, ctx.source, CONNECTOR, list(ctx.prefilter))
    no_data = sorted(set(ctx.scope.nodes) - stats.nodes)
    if not files:
        status = CoverageStatus.unavailable
    elif stats.files and not stats.usable:  # read, but nothing of it about the attempt
        status = CoverageStatus.empty
    elif no_data or stats.bad_lines or stats.errors:
        status = CoverageStatus.partial
    elif stats.lines == 0:
        status = CoverageStatus.empty
    else:
        status = CoverageStatus.ok
    why = []
    if missing:
        why.append(f"no file for node(s): {', '.join(missing[:20])}")
    if stats.blank:
        why.append(f"{len(stats.blank)} file(s) with only blank lines")
    if stats.errors:
        why.append(f"{len(stats.errors)} file(s) not readable")
    cov = Coverage(
        source=ctx.source,
        connector=CONNECTOR,
        status=status,
        observations=stats.lines,
        nodes=sorted(stats.nodes),
        unparsed=stats.bad_lines + len(stats.errors),
        files=stats.files,
        duration_ms=int((time.monotonic() - started) * 1000),
        error="; ".join(why) or None,
        details={
            "matched_lines": stats.hits,
            "missing_nodes": missing,
            "long_lines": stats.long_lines,
            "truncated_bytes": stats.truncated_bytes,
            "not_read": not_read + stats.errors,
            "blank_files": stats.blank,
            "outside_window": [],  # filled once the lines' times are parsed (text.apply_spans)
        },
    )
    return Collected(cov, files={f.ref: f.path for f in files})
