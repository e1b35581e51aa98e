"""Files connector: per-host log files on a shared filesystem, read with the bundle's parsers.

Configured with a path template, e.g. /shared/logs/{host}/syslog.log; each attempt host's file is
scanned exactly like a bundle's logs/<source>/<host>.log (DuckDB reads it, literal pre-filter,
line numbers, lenient decoding). Hosts whose file does not exist make the coverage partial.
"""

from __future__ import annotations

import time
from pathlib import Path

from typing import Literal

from pydantic import BaseModel, Field

from attribution.models import AttemptScope, Coverage, CoverageStatus
from connectors.staging import connect
from connectors.text import TextFile, scan_files

CONNECTOR = "files"


class FilesSource(BaseModel):
    connector: Literal["files"] = "files"
    path: str = Field(description="path template with {host}, e.g. /shared/logs/{host}/syslog.log")


def collect(src: FilesSource, source: str, scope: AttemptScope, staging: str, prefilter: list[str]) -> tuple[Coverage, dict[str, Path]]:
    started = time.monotonic()
    files, missing = [], []
    for host in scope.nodes:
        p = Path(src.path.replace("{host}", host))
        if p.is_file():
            files.append(TextFile(path=p, ref=str(p), node=host))
        else:
            missing.append(host)
    con = connect(staging)
    try:
        stats = scan_files(con, files, source, CONNECTOR, prefilter)
    finally:
        con.close()
    if not files:
        status = CoverageStatus.unavailable
    elif missing or stats.bad_lines:
        status = CoverageStatus.partial
    elif stats.lines == 0:
        status = CoverageStatus.empty
    else:
        status = CoverageStatus.ok
    cov = Coverage(source=source, connector=CONNECTOR, status=status, observations=stats.lines, nodes=sorted(stats.nodes),
                   unparsed=stats.bad_lines, files=stats.files, duration_ms=int((time.monotonic() - started) * 1000),
                   error=f"no file for node(s): {', '.join(missing)}" if missing else None,
                   details={"matched_lines": stats.hits, "missing_nodes": missing})
    return cov, {f.ref: f.path for f in files}
