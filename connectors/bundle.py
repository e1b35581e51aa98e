"""The offline attempt bundle (../shared/spec/bundle.md, documented in docs/contracts.md).

`load_scope` reads attempt.yaml; `collect(source, ...)` loads one source into the staging
database and returns its coverage record. A missing directory is `unavailable` (never read as
health); a file that cannot be parsed is `error`/`partial` with the reason; nothing here stops
the rest of the diagnosis.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import duckdb
import yaml
from pydantic import ValidationError

from workload_attribution.connectors import scheduler_records as sr
from workload_attribution.connectors.registry import CollectContext, Collected, SourceConfig, register
from workload_attribution.connectors.text import SQL_DIR, TextFile, scan_files
from workload_attribution.connectors.topology import MAX_TOPOLOGY_BYTES, TopologyError, check_size, links_from_yaml
from workload_attribution.contracts.errors import BadInput
from workload_attribution.contracts.models import HOST_NAME, MAX_HOST, TEXT, AttemptScope, Coverage, CoverageStatus
from workload_attribution.staging.database import connected, one, render, scalar
from workload_attribution.staging.files import file_kind, printable_name, read_pieces, read_regular
from workload_attribution.staging.observations import insert_observations

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
# Bounds on what is read whole (the logs and metrics are streamed, whatever their size).
MAX_SCOPE_BYTES = 4 << 20  # attempt.yaml: 65,536 nodes of 60 characters fit
MAX_RECORD_BYTES = 64 << 20  # each scheduler JSON document


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


def _problem(bundle: Path, path: Path) -> str | None:
    """Why a file of the bundle is not read: a link out of the bundle, not a regular file."""
    if not _inside(bundle, path):
        return "a symlink outside the bundle, not read"
    kind = file_kind(path)
    return f"{kind}, not a regular file: not read" if kind else None


def _dir_problem(bundle: Path, rel_dir: str) -> str | None:
    """Why a folder of the bundle is not read (nothing inside it is listed then): it, or a folder
    above it in the bundle, is a link out of the bundle or not a directory."""
    parts = rel_dir.split("/")
    for i in range(1, len(parts) + 1):
        rel = "/".join(parts[:i])
        base = bundle / rel
        if not _inside(bundle, base):
            return f"{rel}/: a symlink outside the bundle, not read"
        kind = file_kind(base)
        if kind != "a directory":
            return f"{rel}: {'missing' if kind == 'missing' else kind or 'a file'}, not a directory: not read"
    return None


def load_scope(bundle: Path) -> AttemptScope:
    bundle = Path(bundle)
    if not bundle.is_dir():
        raise BundleError(f"{bundle}: not a directory")
    spec = bundle / "attempt.yaml"
    if not os.path.lexists(spec):
        raise BundleError(f"{bundle}: no attempt.yaml (the bundle's scope is required)")
    if not _inside(bundle, spec):
        raise BundleError(f"{spec}: points outside the bundle")
    kind = file_kind(spec)
    if kind:
        raise BundleError(f"{spec}: {kind}, not a regular file")
    try:
        data = read_regular(spec, MAX_SCOPE_BYTES)
    except OSError as exc:
        raise BundleError(f"{spec}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(f"{spec}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        doc = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise BundleError(
            f"{spec}: not valid YAML{where}: {str(getattr(exc, 'problem', None) or exc).splitlines()[0]}"
        ) from None
    if not isinstance(doc, dict):
        raise BundleError(f"{spec}: expected a mapping of fields, got {type(doc).__name__}")
    try:
        scope = AttemptScope.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "attempt"
        raise BundleError(f"{spec}: field '{loc}': {err['msg']}") from None
    # names an attempt.yaml gives reach every output and every query: plain names only
    for i, host in enumerate(scope.nodes):
        if not re.match(HOST_NAME, host):
            shown = printable_name(host, 40)
            raise BundleError(
                f"{spec}: field 'nodes.{i}': {shown!r} is not a host name (1..{MAX_HOST} characters, "
                "no whitespace or control character)"
            )
    if not re.match(HOST_NAME, scope.cluster):
        raise BundleError(f"{spec}: field 'cluster': {printable_name(scope.cluster, 40)!r} is not a cluster name")
    for name in ("job_id", "name", "user", "state", "exit_code", "reason"):
        value = getattr(scope, name)
        if value is not None and not re.match(TEXT, value):
            raise BundleError(f"{spec}: field '{name}': holds control characters")
    return scope


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
    sub-directories (so a directory loop cannot trap the scan); special files (FIFO, socket,
    device) are named, never opened. Names are shown escaped and capped (printable_name)."""
    base = bundle / rel_dir
    files, refused, not_read = [], [], []
    for p in sorted(base.iterdir()):
        if p.name.startswith("."):
            continue
        name = f"{rel_dir}/{printable_name(p.name)}"
        if not _inside(bundle, p):
            refused.append(f"{name}: symlink outside the bundle, not read")
            continue
        kind = file_kind(p)
        if kind:
            not_read.append(f"{name}/: a directory, not read" if kind == "a directory" else f"{name}: {kind}, not read")
            continue
        files.append(TextFile(path=p, ref=name, node=printable_name(_node_of(p)) if per_node else None))
    return files, refused, not_read


def _status(observations: int, unparsed: int, gaps: bool) -> CoverageStatus:
    if observations == 0 and unparsed == 0:
        return CoverageStatus.empty
    if unparsed or gaps:
        return CoverageStatus.partial
    return CoverageStatus.ok


def _missing(source: str, rel_dir: str) -> Collected:
    return Collected(
        Coverage(
            source=source, connector=CONNECTOR, status=CoverageStatus.unavailable, error=f"{rel_dir}/ not in bundle"
        )
    )


def _refused(source: str, problem: str, files: int = 0) -> Collected:
    return Collected(
        Coverage(source=source, connector=CONNECTOR, status=CoverageStatus.error, error=problem, files=files)
    )


def _names(items: list[str], most: int = 10) -> str:
    return ", ".join(items[:most]) + (f" (+{len(items) - most} more)" if len(items) > most else "")


def collect_text(bundle: Path, scope: AttemptScope, source: str, staging: str, prefilter: list[str]) -> Collected:
    rel_dir = TEXT_SOURCES[source]
    parent = rel_dir.split("/")[0]
    if not os.path.lexists(bundle / rel_dir) and not (
        os.path.lexists(bundle / parent) and _dir_problem(bundle, parent)
    ):
        return _missing(source, rel_dir)
    problem = _dir_problem(bundle, rel_dir)
    if problem:
        return _refused(source, problem)
    per_node = source != "scheduler_log"
    files, refused, not_read = _text_files(bundle, rel_dir, per_node)
    with connected(staging) as con:
        stats = scan_files(con, files, source, CONNECTOR, prefilter)
    missing = sorted(set(scope.nodes) - stats.nodes) if per_node else []
    unparsed = stats.bad_lines + len(refused) + len(stats.corrupt) + len(stats.errors)
    gaps = bool(missing or not_read or stats.blank)
    if stats.files and not stats.usable:  # something was read, nothing of it about the attempt
        status = CoverageStatus.empty
    elif not stats.files and stats.errors:
        status = CoverageStatus.error
    else:
        status = _status(stats.lines, unparsed, gaps)
    cov = Coverage(
        source=source,
        connector=CONNECTOR,
        status=status,
        observations=stats.lines,
        nodes=sorted(stats.nodes),
        unparsed=unparsed,
        files=stats.files,
        details={
            "matched_lines": stats.hits,
            "lines_with_bad_bytes": stats.bad_lines,
            "long_lines": stats.long_lines,
            "truncated_bytes": stats.truncated_bytes,
            "missing_nodes": missing,
            "refused": refused,
            "not_read": not_read + stats.errors,
            "corrupt_archives": stats.corrupt,
            "blank_files": stats.blank,
            "outside_window": [],  # filled once the lines' times are parsed (text.apply_spans)
        },
    )
    why = []
    if stats.blank:
        why.append(f"{len(stats.blank)} file(s) with only blank lines: {_names(stats.blank)}")
    if stats.errors:
        why.append(f"{len(stats.errors)} file(s) not readable: {_names(stats.errors)}")
    if not_read:
        why.append(f"{len(not_read)} entry(ies) not read: {_names(not_read)}")
    if missing and stats.usable:
        why.append(f"no {source} for node(s): {_names(missing)}")
    cov.error = "; ".join(why) or None
    return Collected(cov, files={f.ref: f.path for f in files})


def _number(text: str) -> int | float:
    """A JSON integer; one of thousands of digits (past Python's int parsing limit) as a float."""
    return int(text) if len(text) < 1000 else float(text)


def _load_json(path: Path) -> Any:
    try:
        return json.loads(read_regular(path, MAX_RECORD_BYTES).decode("utf-8", errors="strict"), parse_int=_number)
    except OSError as exc:
        raise sr.RecordError(f"{path.name}: {exc.strerror or exc}") from None
    except RecursionError:
        raise sr.RecordError(f"{path.name}: nested too deeply to read") from None
    except UnicodeDecodeError as exc:
        raise sr.RecordError(f"{path.name}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise sr.RecordError(f"{path.name}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


def read_sacct_record(bundle: Path) -> Any | None:
    """The bundle's scheduler/sacct.json as JSON, read under the same rules as the sacct source (inside
    the bundle, a regular file, at most MAX_RECORD_BYTES); None when there is none. RecordError says why
    it cannot be read."""
    path = bundle / "scheduler" / "sacct.json"
    if not os.path.lexists(path):
        return None
    problem = _dir_problem(bundle, "scheduler") or _problem(bundle, path)
    if problem:
        raise sr.RecordError(problem)
    return _load_json(path)


def collect_sacct(bundle: Path, scope: AttemptScope, staging: str) -> Collected:
    path = bundle / "scheduler" / "sacct.json"
    if os.path.lexists(path):
        problem = _dir_problem(bundle, "scheduler") or _problem(bundle, path)
        if problem:
            return _refused("sacct", f"scheduler/sacct.json: {problem}")
    elif os.path.lexists(bundle / "scheduler") and _dir_problem(bundle, "scheduler"):
        return _refused("sacct", str(_dir_problem(bundle, "scheduler")))
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
    problems = facts.get("problems") or []  # records or times that could not be read: each costs itself
    return Collected(
        Coverage(
            source="sacct",
            connector=CONNECTOR,
            status=CoverageStatus.partial if problems else CoverageStatus.ok,
            observations=len(obs),
            unparsed=len(problems),
            files=1,
            error="; ".join(problems[:5]) or None,
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
    if os.path.lexists(bundle / "scheduler") and _dir_problem(bundle, "scheduler"):
        return _refused("kueue", str(_dir_problem(bundle, "scheduler")))
    present = [n for n in KUEUE_FILES if os.path.lexists(bundle / "scheduler" / n)]
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
    obs: list = []
    errors: list[str] = []
    skipped: list[str] = []
    for name in present:
        problem = _problem(bundle, bundle / "scheduler" / name)
        if problem:
            errors.append(f"scheduler/{name}: {problem}")
            continue
        try:
            obs.extend(readers[name](_load_json(bundle / "scheduler" / name), f"scheduler/{name}", problems=skipped))
        except sr.RecordError as exc:
            errors.append(str(exc))
    with connected(staging) as con:
        insert_observations(con, obs)
    missing = [n for n in KUEUE_FILES if n not in present]
    if errors and not obs:
        status = CoverageStatus.error
    else:
        status = CoverageStatus.partial if errors or skipped or missing else CoverageStatus.ok
    return Collected(
        Coverage(
            source="kueue",
            connector=CONNECTOR,
            status=status,
            observations=len(obs),
            files=len(present),
            unparsed=len(errors) + len(skipped),
            error="; ".join(errors + skipped[:5]) or None,
            details={"missing_files": missing, "records_not_read": len(skipped)},
        )
    )


def collect_metrics(bundle: Path, scope: AttemptScope, staging: str) -> Collected:
    base = bundle / "metrics"
    if not os.path.lexists(base):
        return _missing("metrics", "metrics")
    problem = _dir_problem(bundle, "metrics")
    if problem:
        return _refused("metrics", problem)
    files, errors = [], []
    for p in sorted(base.glob("*.prom")):
        why = _problem(bundle, p)
        if why:
            errors.append(f"metrics/{printable_name(p.name)}: {why}")
        else:
            files.append(p)
    data_lines = duplicates = bad_lines = 0
    with connected(staging) as con:
        before = scalar(con, "SELECT count(*) FROM samples")
        parse = render("parse_prom.sql", SQL_DIR)
        insert = render("insert_samples.sql", SQL_DIR)
        for p in files:
            ref = f"metrics/{printable_name(p.name)}"
            pieces = 0
            try:  # a file in pieces of whole lines (streamed); a bad line costs that line
                for piece in read_pieces(p):
                    pieces += 1
                    con.execute(parse, {"content": piece.text, "first": piece.first, "lenient": piece.lenient})
                    con.execute(insert, {"ref": ref, "connector": CONNECTOR})
                    n_data, n_bad, dupes = one(
                        con,
                        "SELECT coalesce(max(n_data), 0), coalesce(max(n_bad), 0), "
                        "count(*) FILTER (WHERE ok) - count(DISTINCT (metric, label_text, time)) FILTER (WHERE ok) "
                        "FROM (SELECT *, value IS NOT NULL AND time IS NOT NULL AND labels IS NOT NULL AS ok "
                        "FROM prom_parsed)",
                    )
                    data_lines += n_data
                    bad_lines += n_bad
                    duplicates += dupes
            except (OSError, duckdb.Error) as exc:  # unreadable, or DuckDB cannot parse: report, keep going
                errors.append(f"{ref}: {(str(exc).splitlines() or [type(exc).__name__])[0]}")
                continue
            if pieces > 1:  # a sample repeated across pieces is stored once too
                duplicates += scalar(  # DELETE answers the number of rows it deleted
                    con,
                    """
                    DELETE FROM samples WHERE path = $ref AND obs_id IN (
                        SELECT obs_id FROM samples WHERE path = $ref
                        QUALIFY row_number() OVER (PARTITION BY metric, series, time ORDER BY lineno) > 1)
                    """,
                    {"ref": ref},
                )
        stored = scalar(con, "SELECT count(*) FROM samples") - before
        nodes = [
            r[0] for r in con.execute("SELECT DISTINCT node FROM samples WHERE node IS NOT NULL ORDER BY 1").fetchall()
        ]
    not_stored = max(0, data_lines - stored - duplicates)
    unparsed = not_stored + len(errors) + bad_lines
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
                "samples_without_value_or_time": not_stored,
                "duplicate_samples": duplicates,
                "lines_with_bad_bytes": bad_lines,
            },
        )
    )


def collect_topology(bundle: Path, scope: AttemptScope, staging: str) -> Collected:
    path = bundle / "topology.yaml"
    if not os.path.lexists(path):
        return Collected(
            Coverage(
                source="topology",
                connector=CONNECTOR,
                status=CoverageStatus.unavailable,
                error="topology.yaml not in bundle",
            )
        )
    problem = _problem(bundle, path)
    if problem:
        return _refused("topology", f"topology.yaml: {problem}")
    skipped: list[str] = []
    try:
        text = read_regular(path, MAX_TOPOLOGY_BYTES).decode("utf-8", errors="replace")
        check_size(text, SAFE_LOADER)
        doc = yaml.load(text, Loader=SAFE_LOADER) or {}
        rows = links_from_yaml(doc, skipped=skipped)
    except OSError as exc:
        return _refused("topology", f"topology.yaml: {exc.strerror or exc}", files=1)
    except (yaml.YAMLError, TopologyError, AttributeError, RecursionError) as exc:
        return _refused("topology", f"topology.yaml: {(str(exc).splitlines() or [type(exc).__name__])[0]}", files=1)
    if skipped and not rows:
        return _refused("topology", f"topology.yaml: no link could be read: {'; '.join(skipped[:3])}", files=1)
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
            status=_status(len(rows), len(skipped), False),
            observations=len(rows),
            unparsed=len(skipped),
            files=1,
            error="; ".join(skipped[:5]) or None,
            details={"hosts_outside_allocation": len(unknown), "entries_not_read": len(skipped)},
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
