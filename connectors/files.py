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
from workload_attribution.contracts.staging import connected

CONNECTOR = "files"


class FilesSource(SourceConfig):
    connector: Literal["files"] = "files"
    path: str = Field(description="path template with {host}, e.g. /shared/logs/{host}/syslog.log")

    def probe(self) -> tuple[str, str, dict[str, str]]:
        return "path", self.path, {}


@register(CONNECTOR, FilesSource)
def collect(ctx: CollectContext[FilesSource]) -> Collected:
    started = time.monotonic()
    files, missing = [], []
    for host in ctx.scope.nodes:
        p = Path(ctx.config.path.replace("{host}", host))
        if p.is_file():
            files.append(TextFile(path=p, ref=str(p), node=host))
        else:
            missing.append(host)
    with connected(ctx.staging) as con:
        stats = scan_files(con, files, ctx.source, CONNECTOR, list(ctx.prefilter))
    if not files:
        status = CoverageStatus.unavailable
    elif missing or stats.bad_lines:
        status = CoverageStatus.partial
    elif stats.lines == 0:
        status = CoverageStatus.empty
    else:
        status = CoverageStatus.ok
    cov = Coverage(
        source=ctx.source,
        connector=CONNECTOR,
        status=status,
        observations=stats.lines,
        nodes=sorted(stats.nodes),
        unparsed=stats.bad_lines,
        files=stats.files,
        duration_ms=int((time.monotonic() - started) * 1000),
        error=f"no file for node(s): {', '.join(missing)}" if missing else None,
        details={"matched_lines": stats.hits, "missing_nodes": missing},
    )
    return Collected(cov, files={f.ref: f.path for f in files})
