"""The offline attempt bundle (../shared/spec/bundle.md, documented in README.md).

`load_scope` reads attempt.yaml; `collect(source, ...)` loads one source into the staging
database and returns its coverage record. A missing directory is `unavailable` (never read as
health); a file that cannot be parsed is `error`/`partial` with the reason; nothing here stops
the rest of the diagnosis.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from workload_attribution.connectors import scheduler_records as sr
from workload_attribution.connectors.registry import CollectContext, Collected, SourceConfig, register
from workload_attribution.connectors.text import SQL_DIR, TextFile, scan_files
from workload_attribution.connectors.topology import TopologyError, links_from_yaml
from workload_attribution.contracts.errors import BadInput
from workload_attribution.contracts.models import AttemptScope, Coverage, CoverageStatus
from workload_attribution.contracts.staging import connected, insert_observations, one, render, scalar

# libyaml's C loader when present: the same safe subset, ~15x faster than the pure-Python one.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

CONNECTOR = "bundle"

# source -> bundle directory holding per-host text logs
TEXT_SOURCES = {
    "app": "logs/app",
    "syslog": "logs/syslog",
    "fabricmanager": "logs/fabricmanager",
    "scheduler_log": "logs/scheduler",
}
SOURCES = ("app", "syslog", "fabricmanager", "scheduler_log", "sacct", "kueue", "metrics", "topology")
KUEUE_FILES = ("workload.json", "pods.json", "events.json", "nodes.json")


class BundleError(BadInput):
    """The bundle cannot be diagnosed at all (bad attempt.yaml, not a directory). One-line message."""


class BundleSource(SourceConfig):
    """An attempt bundle on disk: every source of the bundle format is read from it."""

    connector: Literal["bundle"] = "bundle"
    path: str


def _inside(bundle: Path, path: Path) -> bool:
    try:
        return path.resolve().is_relative_to(bundle.resolve())
    except OSError:
        return False


def load_scope(bundle: Path) -> AttemptScope:
    bundle = Path(bundle)
    if not bundle.is_dir():
        raise BundleError(f"{bundle}: not a directory")
    spec = bundle / "attempt.yaml"
    if not spec.is_file():
        raise BundleError(f"{bundle}: no attempt.yaml (the bundle's scope is required)")
    if not _inside(bundle, spec):
        raise BundleError(f"{spec}: points outside the bundle")
    try:
        doc = yaml.load(spec.read_text(encoding="utf-8", errors="replace"), Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise BundleError(
            f"{spec}: not valid YAML{where}: {str(getattr(exc, 'problem', None) or exc).splitlines()[0]}"
        ) from None
    if not isinstance(doc, dict):
        raise BundleError(f"{spec}: expected a mapping of fields, got {type(doc).__name__}")
    try:
        return AttemptScope.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "attempt"
        raise BundleError(f"{spec}: field '{loc}': {err['msg']}") from None


# A host's log file name: <host>.log or <host>.txt, rotated (logrotate's ".1" or dateext
# "-20261120"), compressed (".gz", ".zst"); all of it but the host name is dropped.
COMPRESSION_SUFFIX = re.compile(r"\.(?:gz|zst|zstd)$", re.IGNORECASE)
LOG_SUFFIX = re.compile(r"^(.+?)\.(?:log|txt)(?:\.\d+|-\d{8}(?:\d{2})?)?$")


def _node_of(path: Path) -> str:
    """The host a log file belongs to: several files (rotations) of one host are that host's lines."""
    name = path.name
    bare = COMPRESSION_SUFFIX.sub("", name)
    m = LOG_SUFFIX.match(bare)
    if m:
        return m.group(1)
    return bare if bare != name else path.stem


def _text_files(bundle: Path, rel_dir: str, per_node: bool) -> tuple[list[TextFile], list[str], list[str]]:
    """(files to read, refused with the reason, entries not read): one level, never followed into
    sub-directories (so a directory loop cannot trap the scan)."""
    base = bundle / rel_dir
    files, refused, not_read = [], [], []
    for p in sorted(base.iterdir()):
        if p.name.startswith("."):
            continue
        if not p.is_file():
            not_read.append(
                f"{rel_dir}/{p.name}/: a directory, not read"
                if p.is_dir()
                else f"{rel_dir}/{p.name}: not a regular file, not read"
            )
            continue
        if not _inside(bundle, p):
            refused.append(f"{rel_dir}/{p.name}: symlink outside the bundle, not read")
            continue
        files.append(TextFile(path=p, ref=f"{rel_dir}/{p.name}", node=_node_of(p) if per_node else None))
    return files, refused, not_read


def _status(observations: int, unparsed: int, gaps: bool) -> CoverageStatus:
    if observations == 0 and unparsed == 0:
        return CoverageStatus.empty
    if unparsed or gaps:
        return CoverageStatus.partial
    return CoverageStatus.ok


def collect_text(bundle: Path, scope: AttemptScope, source: str, staging: str, prefilter: list[str]) -> Collected:
    rel_dir = TEXT_SOURCES[source]
    if not (bundle / rel_dir).is_dir():
        return Collected(
            Coverage(
                source=source, connector=CONNECTOR, status=CoverageStatus.unavailable, error=f"{rel_dir}/ not in bundle"
            )
        )
    per_node = source != "scheduler_log"
    files, refused, not_read = _text_files(bundle, rel_dir, per_node)
    with connected(staging) as con:
        stats = scan_files(con, files, source, CONNECTOR, prefilter)
    missing = sorted(set(scope.nodes) - stats.nodes) if per_node else []
    unparsed = stats.bad_lines + len(refused) + len(stats.corrupt)
    cov = Coverage(
        source=source,
        connector=CONNECTOR,
        status=_status(stats.lines, unparsed, bool(missing)),
        observations=stats.lines,
        nodes=sorted(stats.nodes),
        unparsed=unparsed,
        files=stats.files,
        details={
            "matched_lines": stats.hits,
            "lines_with_bad_bytes": stats.bad_lines,
            "long_lines": stats.long_lines,
            "missing_nodes": missing,
            "refused": refused,
            "not_read": not_read,
            "corrupt_archives": stats.corrupt,
        },
    )
    if missing and stats.lines:
        cov.error = f"no {source} for node(s): {', '.join(missing)}"
    return Collected(cov, files={f.ref: f.path for f in files})


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes().decode("utf-8", errors="strict"))
    except UnicodeDecodeError as exc:
        raise sr.RecordError(f"{path.name}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise sr.RecordError(f"{path.name}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


def collect_sacct(bundle: Path, scope: AttemptScope, staging: str) -> Collected:
    path = bundle / "scheduler" / "sacct.json"
    if not path.is_file():
        status = CoverageStatus.unavailable if scope.scheduler == "slurm" else CoverageStatus.skipped
        return Collected(
            Coverage(
                source="sacct",
                connector=CONNECTOR,
                status=status,
                error="scheduler/sacct.json not in bundle" if status == "unavailable" else None,
            )
        )
    try:
        obs, facts = sr.sacct_observations(_load_json(path), scope.job_id, "scheduler/sacct.json")
    except sr.RecordError as exc:
        return Collected(
            Coverage(source="sacct", connector=CONNECTOR, status=CoverageStatus.error, error=str(exc), files=1)
        )
    with connected(staging) as con:
        insert_observations(con, obs)
    # where attempt.yaml disagrees with this record, the record won when the attempt was scoped
    # (tasks/steps.py record_wins, with the notes): the scope here is already the record's
    return Collected(
        Coverage(
            source="sacct",
            connector=CONNECTOR,
            status=CoverageStatus.ok,
            observations=len(obs),
            files=1,
            details={"slurm_release": facts.get("slurm_release")},
        ),
    )


def collect_kueue(bundle: Path, scope: AttemptScope, staging: str) -> Collected:
    readers: dict[str, Callable[..., list]] = {
        "workload.json": sr.workload_observations,
        "pods.json": sr.pod_observations,
        "events.json": sr.event_observations,
        "nodes.json": sr.node_observations,
    }
    present = [n for n in KUEUE_FILES if (bundle / "scheduler" / n).is_file()]
    if not present:
        status = CoverageStatus.unavailable if scope.scheduler == "kueue" else CoverageStatus.skipped
        return Collected(
            Coverage(
                source="kueue",
                connector=CONNECTOR,
                status=status,
                error="no Kueue/Kubernetes objects in bundle" if status == "unavailable" else None,
            )
        )
    obs, errors = [], []
    for name in present:
        try:
            obs.extend(readers[name](_load_json(bundle / "scheduler" / name), f"scheduler/{name}"))
        except sr.RecordError as exc:
            errors.append(str(exc))
    with connected(staging) as con:
        insert_observations(con, obs)
    missing = [n for n in KUEUE_FILES if n not in present]
    status = (
        CoverageStatus.error
        if len(errors) == len(present)
        else (CoverageStatus.partial if errors or missing else CoverageStatus.ok)
    )
    return Collected(
        Coverage(
            source="kueue",
            connector=CONNECTOR,
            status=status,
            observations=len(obs),
            files=len(present),
            unparsed=len(errors),
            error="; ".join(errors) or None,
            details={"missing_files": missing},
        )
    )


def collect_metrics(bundle: Path, scope: AttemptScope, staging: str) -> Collected:
    base = bundle / "metrics"
    if not base.is_dir():
        return Collected(
            Coverage(
                source="metrics", connector=CONNECTOR, status=CoverageStatus.unavailable, error="metrics/ not in bundle"
            )
        )
    files = [p for p in sorted(base.glob("*.prom")) if p.is_file() and _inside(bundle, p)]
    with connected(staging) as con:
        before = scalar(con, "SELECT count(*) FROM samples")
        data_lines = duplicates = 0
        errors = []
        for p in files:
            try:
                con.execute(render("parse_prom.sql", SQL_DIR, files="read_text($paths)"), {"paths": [str(p)]})
                con.execute(
                    render("insert_samples.sql", SQL_DIR),
                    {"paths": [str(p)], "refs": [f"metrics/{p.name}"], "connector": CONNECTOR},
                )
            except Exception as exc:  # not UTF-8, or DuckDB cannot parse: report, keep going
                errors.append(f"metrics/{p.name}: {str(exc).splitlines()[0]}")
                continue
            n_data, dupes = one(
                con,
                "SELECT coalesce(max(n_data), 0), count(*) - count(DISTINCT (metric, label_text, time)) "
                "FROM prom_parsed WHERE value IS NOT NULL AND time IS NOT NULL",
            )
            data_lines += n_data
            duplicates += dupes
        stored = scalar(con, "SELECT count(*) FROM samples") - before
        nodes = [
            r[0] for r in con.execute("SELECT DISTINCT node FROM samples WHERE node IS NOT NULL ORDER BY 1").fetchall()
        ]
    unparsed = max(0, data_lines - stored - duplicates) + len(errors)
    status = CoverageStatus.error if errors and not stored else _status(stored, unparsed, False)
    return Collected(
        Coverage(
            source="metrics",
            connector=CONNECTOR,
            status=status,
            observations=stored,
            nodes=nodes,
            unparsed=unparsed,
            files=len(files),
            error="; ".join(errors) or None,
            details={
                "samples_without_value_or_time": max(0, data_lines - stored - duplicates),
                "duplicate_samples": duplicates,
            },
        )
    )


def collect_topology(bundle: Path, scope: AttemptScope, staging: str) -> Collected:
    path = bundle / "topology.yaml"
    if not path.is_file():
        return Collected(
            Coverage(
                source="topology",
                connector=CONNECTOR,
                status=CoverageStatus.unavailable,
                error="topology.yaml not in bundle",
            )
        )
    try:
        doc = yaml.load(path.read_text(encoding="utf-8", errors="replace"), Loader=SAFE_LOADER) or {}
        rows = links_from_yaml(doc)
    except (yaml.YAMLError, TopologyError, AttributeError) as exc:
        return Collected(
            Coverage(
                source="topology",
                connector=CONNECTOR,
                status=CoverageStatus.error,
                error=f"topology.yaml: {str(exc).splitlines()[0]}",
                files=1,
            )
        )
    if rows:
        with connected(staging) as con:
            con.execute(
                "INSERT INTO topology SELECT unnest($s), unnest($p), unnest($h), unnest($k), unnest($c)",
                {
                    "s": [r[0] for r in rows],
                    "p": [r[1] for r in rows],
                    "h": [r[2] for r in rows],
                    "k": [r[3] for r in rows],
                    "c": [r[4] for r in rows],
                },
            )
    unknown = sorted({r[2] for r in rows if r[3] == "host"} - set(scope.nodes))
    return Collected(
        Coverage(
            source="topology",
            connector=CONNECTOR,
            status=_status(len(rows), 0, False),
            observations=len(rows),
            files=1,
            details={"hosts_outside_allocation": len(unknown)},
        )
    )


@register(CONNECTOR, BundleSource, kind="bundle")
def collect(ctx: CollectContext[BundleSource]) -> Collected:
    """Load one source of the bundle into staging; the coverage record says what happened."""
    started = time.monotonic()
    bundle, scope, source, staging, prefilter = (
        Path(ctx.config.path),
        ctx.scope,
        ctx.source,
        ctx.staging,
        list(ctx.prefilter),
    )
    if source in TEXT_SOURCES:
        result = collect_text(bundle, scope, source, staging, prefilter)
    elif source == "sacct":
        result = collect_sacct(bundle, scope, staging)
    elif source == "kueue":
        result = collect_kueue(bundle, scope, staging)
    elif source == "metrics":
        result = collect_metrics(bundle, scope, staging)
    elif source == "topology":
        result = collect_topology(bundle, scope, staging)
    else:
        raise ValueError(f"unknown bundle source {source!r}")
    result.coverage.duration_ms = int((time.monotonic() - started) * 1000)
    return result
