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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import duckdb
import yaml
from pydantic import ValidationError

from workload_attribution.connectors import scheduler_records as sr
from workload_attribution.connectors.coverage import Cover, Tally
from workload_attribution.connectors.registry import CollectContext, Collected, SourceConfig, register
from workload_attribution.connectors.schedulers import Scheduler, find_scheduler, schedulers
from workload_attribution.connectors.text import SQL_DIR, LogFileDetails, ScanStats, TextFile, scan_files
from workload_attribution.connectors.topology import (
    MAX_TOPOLOGY_BYTES,
    Link,
    TopologyError,
    check_size,
    links_from_yaml,
)
from workload_attribution.contracts.errors import BadInput
from workload_attribution.contracts.identity import allocated_spelling
from workload_attribution.contracts.models import HOST_NAME, MAX_HOST, TEXT, AttemptScope, CoverageStatus, Details
from workload_attribution.contracts.vocabulary import Source
from workload_attribution.staging.database import connected, one, render, scalar
from workload_attribution.staging.files import file_kind, printable_name, read_pieces, read_regular
from workload_attribution.staging.observations import insert_observations

# libyaml's C loader when present: the same safe subset, ~15x faster than the pure-Python one.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

CONNECTOR = "bundle"

# source -> bundle directory holding per-host text logs
TEXT_SOURCES = {
    Source.app.value: "logs/app",
    Source.syslog.value: "logs/syslog",
    Source.fabricmanager.value: "logs/fabricmanager",
    Source.scheduler_log.value: "logs/scheduler",
}
# every source but the scope (attempt.yaml): the bundle format holds each, in the vocabulary's order
SOURCES = tuple(s.value for s in Source if s is not Source.scope)
SACCT_FILE = "scheduler/sacct.json"
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
    """Whether `path` lies inside the bundle once links are followed. A path the bundle's own path
    leads to with no link and no '..' on the way (one lstat a part, ~3) is; only one that passes a
    link is resolved, and compared with the bundle resolved. Resolving every file and the bundle
    each time cost ~10 lstat calls and a getcwd a file: the 2,048 files of a 1,024-host bundle took
    124 ms to check that way, 62 ms this way (one thread)."""
    try:
        parts = path.relative_to(bundle).parts
    except ValueError:  # not under the bundle's path as written: resolved
        parts = ("..",)
    here = bundle
    for part in parts:
        here = here / part
        if part == ".." or os.path.islink(here):
            try:
                return path.resolve().is_relative_to(bundle.resolve())
            except OSError:
                return False
    return True


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
    """The bundle's attempt.yaml as a scope, or BundleError naming the file, and the field at fault."""
    spec = _scope_file(Path(bundle))
    text, doc = _yaml_mapping(spec)
    return _checked_scope(spec, doc, text)


def _scope_file(bundle: Path) -> Path:
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
    return spec


def _yaml_mapping(spec: Path) -> tuple[str, dict[str, Any]]:
    try:
        text = read_regular(spec, MAX_SCOPE_BYTES).decode("utf-8")
    except OSError as exc:
        raise BundleError(f"{spec}: {exc.strerror or exc}") from None
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
    return text, doc


# YAML 1.1 (PyYAML) reads digits joined by colons, the first not 0, as one base-60 number:
# `exit_code: 1:0` is 60 (`0:0` stays text)
BASE_60 = re.compile(r"^exit_code:[ \t]*([-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)[ \t]*(?:#.*)?$", re.M)
# a model-level check's message names its fields (pydantic gives such an error no location)
_MODEL_FIELDS = {"is before start": "start/end", "nodes contains duplicates": "nodes"}


def _checked_exit_code(spec: Path, text: str, doc: dict[str, Any]) -> None:
    sexagesimal = BASE_60.search(text)
    if sexagesimal:
        raw = sexagesimal.group(1)
        raise BundleError(
            f"{spec}: field 'exit_code': {raw} is read by YAML 1.1 as the base-60 number {doc.get('exit_code')!r}: "
            f'quote it (exit_code: "{raw}")'
        )
    value = doc.get("exit_code")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (str, int))):
        raise BundleError(f"{spec}: field 'exit_code': {value!r} is a {type(value).__name__}: a string or an integer")


def _checked_scope(spec: Path, doc: dict[str, Any], text: str = "") -> AttemptScope:
    _checked_exit_code(spec, text, doc)
    try:
        scope = AttemptScope.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        loc = loc or next((f for words, f in _MODEL_FIELDS.items() if words in err["msg"]), "attempt")
        raise BundleError(f"{spec}: field '{loc}': {err['msg'].removeprefix('Value error, ')}") from None
    if find_scheduler(scope.scheduler) is None:
        known = ", ".join(schedulers())
        raise BundleError(f"{spec}: field 'scheduler': {scope.scheduler!r} is not a scheduler ({known})")
    # a state its scheduler's table does not hold is no reason to refuse: the diagnosis notes it and
    # the record and the evidence decide (StateTable.unknown, tasks/steps.py scope_bundle)
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


def _text_files(
    bundle: Path, rel_dir: str, per_node: bool, allocation: list[str] | None = None
) -> tuple[list[TextFile], list[str], list[str]]:
    """(files to read, refused with the reason, entries not read): one level, never followed into
    sub-directories (so a directory loop cannot trap the scan); special files (FIFO, socket,
    device) are named, never opened. Names are shown escaped and capped (printable_name). A file
    named for an allocated host spelt otherwise (GB-R12-N01.log, gb-r12-n01.eos.internal.log) is
    that host's, in the allocation's spelling."""
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
        node = (allocated_spelling(_node_of(p), allocation or []) or printable_name(_node_of(p))) if per_node else None
        files.append(TextFile(path=p, ref=name, node=node))
    return files, refused, not_read


def log_files(bundle: Path, source: str) -> tuple[list[TextFile], list[str]]:
    """A text source's files as a diagnosis reads them (the same folder walk and refusals), and why
    any other entry of its folder is not read; an absent folder has neither."""
    rel_dir = TEXT_SOURCES[source]
    if not os.path.lexists(bundle / rel_dir):
        return [], []
    problem = _dir_problem(bundle, rel_dir)
    if problem:
        return [], [problem]
    files, refused, not_read = _text_files(bundle, rel_dir, per_node=source != Source.scheduler_log)
    return files, refused + not_read


def _absent(cover: Cover, scope: AttemptScope, why: str) -> Collected:
    """A scheduler's records not in the bundle: missing evidence (`unavailable`) when the attempt's
    scheduler keeps its record as this source, else not applicable (`skipped`)."""
    scheduler = find_scheduler(scope.scheduler)
    keeps = scheduler is not None and (scheduler.records is not None or scheduler.bundle is not None)
    if keeps and scheduler is not None and _record_source(scheduler) == cover.source:
        return cover.outcome(CoverageStatus.unavailable, why)
    return cover.outcome(CoverageStatus.skipped)


def _folder_refused(cover: Cover, bundle: Path, rel_dir: str) -> Collected | None:
    """The record of a source whose folder is not there (`unavailable`) or cannot be read (`error`)."""
    parent = rel_dir.split("/")[0]
    if not os.path.lexists(bundle / rel_dir) and not (
        os.path.lexists(bundle / parent) and _dir_problem(bundle, parent)
    ):
        return cover.outcome(CoverageStatus.unavailable, f"{rel_dir}/ not in bundle")
    problem = _dir_problem(bundle, rel_dir)
    return cover.outcome(CoverageStatus.error, problem) if problem else None


def _names(items: list[str], most: int = 10) -> str:
    return ", ".join(items[:most]) + (f" (+{len(items) - most} more)" if len(items) > most else "")


def collect_text(cover: Cover, bundle: Path, scope: AttemptScope, staging: str, prefilter: list[str]) -> Collected:
    """logs/<source>/: every file of the folder scanned (one host's lines per file, but the
    scheduler's logs, which name their hosts in the lines)."""
    rel_dir = TEXT_SOURCES[cover.source]
    refused_folder = _folder_refused(cover, bundle, rel_dir)
    if refused_folder is not None:
        return refused_folder
    per_node = cover.source != Source.scheduler_log
    files, refused, not_read = _text_files(bundle, rel_dir, per_node, scope.nodes)
    with connected(staging) as con:
        stats = scan_files(con, files, cover.source, CONNECTOR, prefilter)
    missing = sorted(set(scope.nodes) - stats.nodes) if per_node else []
    unparsed = stats.bad_lines + len(refused) + len(stats.corrupt) + len(stats.errors)
    tally = Tally(
        observations=stats.lines,
        unparsed=unparsed,
        gaps=bool(missing or not_read or stats.blank),
        failed=not stats.files and bool(stats.errors),
        # something read, nothing of it about the attempt (blank files); or nothing there at all
        read_nothing=bool(stats.files and not stats.usable) or (stats.lines == 0 and unparsed == 0),
    )
    details = LogFileDetails(
        matched_lines=stats.hits,
        lines_with_bad_bytes=stats.bad_lines,
        long_lines=stats.long_lines,
        truncated_bytes=stats.truncated_bytes,
        missing_nodes=missing,
        refused=refused,
        not_read=not_read + stats.errors,
        corrupt_archives=stats.corrupt,
        blank_files=stats.blank,
    )
    error = _text_problems(cover.source, stats, not_read, missing)
    paths = {f.ref: f.path for f in files}
    return cover.judged(tally, nodes=sorted(stats.nodes), files=stats.files, error=error, details=details, paths=paths)


def _text_problems(source: str, stats: ScanStats, not_read: list[str], missing: list[str]) -> str | None:
    why = []
    if stats.blank:
        why.append(f"{len(stats.blank)} file(s) with only blank lines: {_names(stats.blank)}")
    if stats.errors:
        why.append(f"{len(stats.errors)} file(s) not readable: {_names(stats.errors)}")
    if not_read:
        why.append(f"{len(not_read)} entry(ies) not read: {_names(not_read)}")
    if missing and stats.usable:
        why.append(f"no {source} for node(s): {_names(missing)}")
    return "; ".join(why) or None


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


def _record_problem(bundle: Path, path: Path) -> str | None:
    """Why a scheduler record of the bundle is not read: it, or the scheduler/ folder, refused."""
    if os.path.lexists(path):
        problem = _dir_problem(bundle, "scheduler") or _problem(bundle, path)
        return f"{path.relative_to(bundle)}: {problem}" if problem else None
    if os.path.lexists(bundle / "scheduler"):
        return _dir_problem(bundle, "scheduler")
    return None


def read_sacct_record(bundle: Path) -> Any | None:
    """The bundle's scheduler/sacct.json as JSON, read under the same rules as the sacct source (inside
    the bundle, a regular file, at most MAX_RECORD_BYTES); None when there is none. RecordError says why
    it cannot be read."""
    path = bundle / SACCT_FILE
    if not os.path.lexists(path):
        return None
    problem = _dir_problem(bundle, "scheduler") or _problem(bundle, path)
    if problem:
        raise sr.RecordError(problem)
    return _load_json(path)


def read_record_files(bundle: Path, names: tuple[str, ...]) -> dict[str, str]:
    """A scheduler's record files the bundle holds (scheduler/<name>), name -> text, read under the
    same rules as the sacct source (inside the bundle, regular files, at most MAX_RECORD_BYTES,
    UTF-8); RecordError says why one cannot be read (naming it when the record has several)."""
    found: dict[str, str] = {}
    for name in names:
        path = bundle / "scheduler" / name
        if not os.path.lexists(path):
            continue
        problem = _dir_problem(bundle, "scheduler") or _problem(bundle, path)
        try:
            if problem:
                raise sr.RecordError(problem)
            found[name] = read_regular(path, MAX_RECORD_BYTES).decode("utf-8", errors="strict")
        except OSError as exc:
            raise sr.RecordError(_named(names, name, exc.strerror or str(exc))) from None
        except UnicodeDecodeError as exc:
            raise sr.RecordError(f"{name}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
        except sr.RecordError as exc:
            raise sr.RecordError(_named(names, name, str(exc))) from None
    return found


def _named(names: tuple[str, ...], name: str, why: str) -> str:
    return why if len(names) == 1 else f"scheduler/{name}: {why}"


class SacctFileDetails(Details):
    slurm_release: str | None


def collect_sacct(cover: Cover, bundle: Path, scope: AttemptScope, staging: str) -> Collected:
    """scheduler/sacct.json. Where attempt.yaml disagrees with it, the record won when the attempt
    was scoped (tasks/steps.py record_wins, with the notes): the scope here is already the record's."""
    path = bundle / SACCT_FILE
    problem = _record_problem(bundle, path)
    if problem:
        return cover.outcome(CoverageStatus.error, problem)
    if not path.is_file():
        return _absent(cover, scope, f"{SACCT_FILE} not in bundle")
    try:
        obs, facts = sr.sacct_observations(_load_json(path), scope.job_id, SACCT_FILE)
    except sr.RecordError as exc:
        return cover.outcome(CoverageStatus.error, str(exc), files=1)
    with connected(staging) as con:
        insert_observations(con, obs)
    problems = facts.get("problems") or []  # records or times that could not be read: each costs itself
    return cover.judged(
        Tally(observations=len(obs), unparsed=len(problems)),
        files=1,
        error="; ".join(problems[:5]) or None,
        details=SacctFileDetails(slurm_release=facts.get("slurm_release")),
    )


class KueueFileDetails(Details):
    missing_files: list[str]
    records_not_read: int


KUEUE_READERS: dict[str, Callable[..., list[Any]]] = {
    "workload.json": sr.workload_observations,
    "pods.json": sr.pod_observations,
    "events.json": sr.event_observations,
    "nodes.json": sr.node_observations,
}


def collect_kueue(cover: Cover, bundle: Path, scope: AttemptScope, staging: str) -> Collected:
    """scheduler/{workload,pods,events,nodes}.json: the Kubernetes objects of a Kueue attempt."""
    if os.path.lexists(bundle / "scheduler") and _dir_problem(bundle, "scheduler"):
        return cover.outcome(CoverageStatus.error, _dir_problem(bundle, "scheduler"))
    present = [n for n in KUEUE_FILES if os.path.lexists(bundle / "scheduler" / n)]
    if not present:
        return _absent(cover, scope, "no Kueue/Kubernetes objects in bundle")
    obs, errors, skipped = _kueue_observations(bundle, present)
    with connected(staging) as con:
        insert_observations(con, obs)
    missing = [n for n in KUEUE_FILES if n not in present]
    return cover.judged(
        Tally(
            observations=len(obs),
            unparsed=len(errors) + len(skipped),
            gaps=bool(missing),
            failed=bool(errors and not obs),
        ),
        files=len(present),
        error="; ".join(errors + skipped[:5]) or None,
        details=KueueFileDetails(missing_files=missing, records_not_read=len(skipped)),
    )


def _kueue_observations(bundle: Path, present: list[str]) -> tuple[list[Any], list[str], list[str]]:
    """(observations, files that could not be read, records that could not be read)."""
    obs: list[Any] = []
    errors: list[str] = []
    skipped: list[str] = []
    for name in present:
        problem = _problem(bundle, bundle / "scheduler" / name)
        if problem:
            errors.append(f"scheduler/{name}: {problem}")
            continue
        try:
            doc = _load_json(bundle / "scheduler" / name)
            obs.extend(KUEUE_READERS[name](doc, f"scheduler/{name}", problems=skipped))
        except sr.RecordError as exc:
            errors.append(str(exc))
    return obs, errors, skipped


def _record_source(scheduler: Scheduler) -> str:
    """The source a scheduler's record is: its own (`sacct`, `kueue`), else `scheduler_record`."""
    return scheduler.records[0] if scheduler.records is not None else Source.scheduler_record.value


class RecordFileDetails(Details):
    missing_files: list[str]
    records_not_read: int


def collect_scheduler_record(cover: Cover, bundle: Path, scope: AttemptScope, staging: str) -> Collected:
    """The attempt's scheduler's own files (scheduler/qstat.json, bjobs.json ...: its BundleRecord),
    read by its module into the same records its connector stages from the live scheduler."""
    scheduler = find_scheduler(scope.scheduler)
    if scheduler is None or scheduler.bundle is None or _record_source(scheduler) != cover.source:
        return cover.outcome(CoverageStatus.skipped)
    reader = scheduler.bundle
    try:
        files = read_record_files(bundle, reader.files)
    except sr.RecordError as exc:
        return cover.outcome(CoverageStatus.error, str(exc))
    if not files:
        return _absent(cover, scope, f"no {scope.scheduler} record in bundle (scheduler/: {', '.join(reader.files)})")
    try:
        record = reader.read(files, scope)
    except sr.RecordError as exc:
        return cover.outcome(CoverageStatus.error, str(exc), files=len(files))
    with connected(staging) as con:
        insert_observations(con, record.observations)
    missing = [n for n in reader.files if n not in files]
    return cover.judged(
        Tally(observations=len(record.observations), unparsed=len(record.problems), gaps=bool(missing)),
        nodes=sorted({o.node for o in record.observations if o.node}),
        files=len(files),
        error="; ".join(record.problems[:5]) or None,
        details=RecordFileDetails(missing_files=missing, records_not_read=len(record.problems)),
    )


class MetricsFileDetails(Details):
    samples_without_value_or_time: int
    duplicate_samples: int
    lines_with_bad_bytes: int


@dataclass
class _PromScan:
    """What the metrics files held: their data lines, lines with bad bytes, samples repeated."""

    data_lines: int = 0
    bad_lines: int = 0
    duplicates: int = 0
    errors: list[str] = field(default_factory=list)  # "<ref>: why" for files not read


def collect_metrics(cover: Cover, bundle: Path, scope: AttemptScope, staging: str) -> Collected:
    """metrics/*.prom: Prometheus text exposition, samples with their timestamps."""
    refused_folder = _folder_refused(cover, bundle, "metrics")
    if refused_folder is not None:
        return refused_folder
    scan, files = _PromScan(), []
    for p in sorted((bundle / "metrics").glob("*.prom")):
        why = _problem(bundle, p)
        if why:
            scan.errors.append(f"metrics/{printable_name(p.name)}: {why}")
        else:
            files.append(p)
    with connected(staging) as con:
        before = scalar(con, "SELECT count(*) FROM samples")
        for p in files:
            _scan_prom(con, p, f"metrics/{printable_name(p.name)}", scan)
        stored = scalar(con, "SELECT count(*) FROM samples") - before
        nodes = [
            r[0] for r in con.execute("SELECT DISTINCT node FROM samples WHERE node IS NOT NULL ORDER BY 1").fetchall()
        ]
    not_stored = max(0, scan.data_lines - stored - scan.duplicates)
    unparsed = not_stored + len(scan.errors) + scan.bad_lines
    return cover.judged(
        Tally(
            observations=stored,
            unparsed=unparsed,
            failed=bool(scan.errors and not stored),
            read_nothing=stored == 0 and unparsed == 0,
        ),
        nodes=nodes,
        files=len(files),
        error="; ".join(scan.errors) or None,
        details=MetricsFileDetails(
            samples_without_value_or_time=not_stored,
            duplicate_samples=scan.duplicates,
            lines_with_bad_bytes=scan.bad_lines,
        ),
    )


def _scan_prom(con: duckdb.DuckDBPyConnection, path: Path, ref: str, scan: _PromScan) -> None:
    """One file, in pieces of whole lines (streamed); a bad line costs that line, a file DuckDB
    cannot parse is named and the others go on."""
    parse = render("parse_prom.sql", SQL_DIR)
    insert = render("insert_samples.sql", SQL_DIR)
    pieces = 0
    try:
        for piece in read_pieces(path):
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
            scan.data_lines += n_data
            scan.bad_lines += n_bad
            scan.duplicates += dupes
    except (OSError, duckdb.Error) as exc:  # unreadable, or DuckDB cannot parse: report, keep going
        scan.errors.append(f"{ref}: {(str(exc).splitlines() or [type(exc).__name__])[0]}")
        return
    if pieces > 1:  # a sample repeated across pieces is stored once too
        scan.duplicates += scalar(  # DELETE answers the number of rows it deleted
            con,
            """
            DELETE FROM samples WHERE path = $ref AND obs_id IN (
                SELECT obs_id FROM samples WHERE path = $ref
                QUALIFY row_number() OVER (PARTITION BY metric, series, time ORDER BY lineno) > 1)
            """,
            {"ref": ref},
        )


class TopologyDetails(Details):
    hosts_outside_allocation: int
    entries_not_read: int


def collect_topology(cover: Cover, bundle: Path, scope: AttemptScope, staging: str) -> Collected:
    """topology.yaml: the fabric's links (connectors/topology.py)."""
    path = bundle / "topology.yaml"
    if not os.path.lexists(path):
        return cover.outcome(CoverageStatus.unavailable, "topology.yaml not in bundle")
    problem = _problem(bundle, path)
    if problem:
        return cover.outcome(CoverageStatus.error, f"topology.yaml: {problem}")
    skipped: list[str] = []
    try:
        rows = _topology_links(path, skipped)
    except OSError as exc:
        return cover.outcome(CoverageStatus.error, f"topology.yaml: {exc.strerror or exc}", files=1)
    except (yaml.YAMLError, TopologyError, AttributeError, RecursionError) as exc:
        why = (str(exc).splitlines() or [type(exc).__name__])[0]
        return cover.outcome(CoverageStatus.error, f"topology.yaml: {why}", files=1)
    if skipped and not rows:
        return cover.outcome(CoverageStatus.error, f"topology.yaml: no link could be read: {'; '.join(skipped[:3])}", 1)
    _stage_links(staging, rows)
    unknown = sorted({r[2] for r in rows if r[3] == "host"} - set(scope.nodes))
    return cover.judged(
        Tally(observations=len(rows), unparsed=len(skipped), read_nothing=not rows and not skipped),
        files=1,
        error="; ".join(skipped[:5]) or None,
        details=TopologyDetails(hosts_outside_allocation=len(unknown), entries_not_read=len(skipped)),
    )


def _topology_links(path: Path, skipped: list[str]) -> list[Link]:
    text = read_regular(path, MAX_TOPOLOGY_BYTES).decode("utf-8", errors="replace")
    check_size(text, SAFE_LOADER)
    doc = yaml.load(text, Loader=SAFE_LOADER) or {}
    return links_from_yaml(doc, skipped=skipped)


def _stage_links(staging: str, rows: list[Link]) -> None:
    if not rows:
        return
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


def source_paths(bundle: Path, source: str) -> list[Path]:
    """Where in a bundle a source is read from: when none of them exists, collecting it only
    records that it is not there (flows/attempt.py skips its task run)."""
    scheduler = bundle / "scheduler"
    records = [
        scheduler / name
        for s in schedulers().values()
        if s.bundle is not None and _record_source(s) == Source.scheduler_record
        for name in s.bundle.files
    ]
    paths = {
        Source.sacct.value: [bundle / SACCT_FILE],
        Source.kueue.value: [scheduler / name for name in KUEUE_FILES],
        Source.scheduler_record.value: records,
        Source.metrics.value: [bundle / "metrics"],
        Source.topology.value: [bundle / "topology.yaml"],
    }
    return paths.get(source) or ([bundle / TEXT_SOURCES[source]] if source in TEXT_SOURCES else [])


Collector = Callable[[Cover, Path, AttemptScope, str], Collected]
COLLECTORS: dict[str, Collector] = {
    Source.sacct.value: collect_sacct,
    Source.kueue.value: collect_kueue,
    Source.scheduler_record.value: collect_scheduler_record,
    Source.metrics.value: collect_metrics,
    Source.topology.value: collect_topology,
}


@register(CONNECTOR, BundleSource, kind="bundle")
def collect(ctx: CollectContext[BundleSource]) -> Collected:
    """Load one source of the bundle into staging; the coverage record says what happened."""
    cover = Cover(ctx.source, CONNECTOR)
    bundle = Path(ctx.config.path)
    if ctx.source in TEXT_SOURCES:
        return collect_text(cover, bundle, ctx.scope, ctx.staging, list(ctx.prefilter))
    if ctx.source in COLLECTORS:
        return COLLECTORS[ctx.source](cover, bundle, ctx.scope, ctx.staging)
    raise ValueError(f"unknown bundle source {ctx.source!r}")
