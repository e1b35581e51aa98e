"""Files connector: per-host log files on a shared filesystem, read with the bundle's parsers.

Configured with a path template, e.g. /shared/logs/{host}/syslog.log; each attempt host's file is
scanned exactly like a bundle's logs/<source>/<host>.log (DuckDB reads it, literal pre-filter,
line numbers, lenient decoding). Hosts whose file does not exist make the coverage partial.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from workload_attribution.connectors.coverage import Cover, Tally
from workload_attribution.connectors.registry import CollectContext, Collected, SourceConfig, register
from workload_attribution.connectors.text import HostFileDetails, ScanStats, TextFile, scan_files
from workload_attribution.staging.database import connected
from workload_attribution.staging.files import file_kind, printable_name

CONNECTOR = "files"


class FilesSource(SourceConfig):
    connector: Literal["files"] = "files"
    path: str = Field(description="path template with {host}, e.g. /shared/logs/{host}/syslog.log")

    def probe(self) -> tuple[str, str, dict[str, str]]:
        return "path", self.path, {}


def _host_files(template: str, hosts: list[str]) -> tuple[list[TextFile], list[str], list[str]]:
    """(each host's file, hosts without one, entries not read: a FIFO, a device, a directory is
    named, never opened)."""
    files, missing, not_read = [], [], []
    for host in hosts:
        p = Path(template.replace("{host}", host))
        kind = file_kind(p)
        if kind is None:
            files.append(TextFile(path=p, ref=printable_name(str(p), most=1024), node=host))
        elif kind == "missing":
            missing.append(host)
        else:
            not_read.append(f"{printable_name(str(p))}: {kind}, not read")
            missing.append(host)
    return files, missing, not_read


def _problems(stats: ScanStats, missing: list[str]) -> str | None:
    why = []
    if missing:
        why.append(f"no file for node(s): {', '.join(missing[:20])}")
    if stats.blank:
        why.append(f"{len(stats.blank)} file(s) with only blank lines")
    if stats.errors:
        why.append(f"{len(stats.errors)} file(s) not readable")
    return "; ".join(why) or None


@register(CONNECTOR, FilesSource)
def collect(ctx: CollectContext[FilesSource]) -> Collected:
    cover = Cover(ctx.source, CONNECTOR)
    files, missing, not_read = _host_files(ctx.config.path, ctx.scope.nodes)
    with connected(ctx.staging) as con:
        stats = scan_files(con, files, ctx.source, CONNECTOR, list(ctx.prefilter))
    tally = Tally(
        absent=not files,
        observations=stats.lines,
        unparsed=stats.bad_lines + len(stats.errors),
        gaps=bool(set(ctx.scope.nodes) - stats.nodes),
        read_nothing=bool(stats.files and not stats.usable),  # read, but nothing of it about the attempt
        none_in_scope=stats.lines == 0,
    )
    details = HostFileDetails(
        matched_lines=stats.hits,
        missing_nodes=missing,
        long_lines=stats.long_lines,
        truncated_bytes=stats.truncated_bytes,
        not_read=not_read + stats.errors,
        blank_files=stats.blank,
    )
    return cover.judged(
        tally,
        nodes=sorted(stats.nodes),
        files=stats.files,
        error=_problems(stats, missing),
        details=details,
        paths={f.ref: f.path for f in files},
    )
