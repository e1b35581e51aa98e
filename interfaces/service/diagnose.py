"""POST /v1/diagnose: an attempt's evidence in, its diagnosis out, in the same call.

The body is an attempt bundle (the bundle format, unchanged) as .tar.gz, .tar.zst or .zip, or a
JSON document holding the attempt's scope and its observations per source. Either way it becomes
a bundle in a private temporary directory and is diagnosed by the same story as `attribution
diagnose --inline`; `?store=true` also writes the diagnosis to the warehouse (idempotent per
attempt). Nothing of a request stays on disk after its answer.

Bounded: the body (compressed) at most service.diagnose_max_bytes (413), members expanded at most
diagnose_max_expanded_bytes and diagnose_max_members (413), no line longer than
diagnose_max_line_bytes (413); a member that is a link, a device, absolute or climbing out with
`..` is refused (422 naming it); at most diagnose_concurrency diagnoses at once (429 +
Retry-After); each answered within diagnose_timeout_s (504).
"""

from __future__ import annotations

import asyncio
import json
import lzma
import os
import shutil
import stat
import tarfile
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import IO, Annotated, Any, Literal

import zstandard
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema

from workload_attribution.connectors.bundle import SOURCES as BUNDLE_SOURCES
from workload_attribution.connectors.bundle import TEXT_SOURCES
from workload_attribution.connectors.schedulers import schedulers
from workload_attribution.contracts.errors import BadInput, NotStored, first_line
from workload_attribution.contracts.models import AttemptScope
from workload_attribution.service.auth import Scope, require

router = APIRouter()
CHUNK = 1 << 20


class Limit(Exception):
    """A request past one of the endpoint's bounds: 413, naming the bound."""


class Refused(Exception):
    """A request that cannot be a bundle: 422, naming why."""


# --------------------------------------------------------------------------------- the JSON form


# a host as a posted line or sample names it: it becomes a file name of the bundle (`<host>.log`)
HOST_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$"


class Line(BaseModel):
    model_config = ConfigDict(extra="forbid")
    node: str | None = Field(
        None, pattern=HOST_PATTERN, description="the host it was logged on (not for scheduler logs)"
    )
    text: str
    time: datetime | None = Field(None, description="when it was logged, if the text does not say")
    rank: int | None = Field(None, ge=0, description="the rank that printed it, if the text does not say")


class Sample(BaseModel):
    model_config = ConfigDict(extra="forbid")
    node: str = Field(pattern=HOST_PATTERN)
    metric: str = Field(pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    labels: dict[str, str] = Field(default_factory=dict)
    value: float
    time: datetime


class SourceDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lines: list[Line] = Field(default_factory=list, description="app, syslog, fabricmanager, scheduler_log")
    samples: list[Sample] = Field(default_factory=list, description="metrics")
    document: dict[str, Any] | None = Field(
        None,
        description="sacct: `sacct --json`; kueue: {workload, pods, "
        "events, nodes}; scheduler_record: the attempt's scheduler's files by name ({qstat.json: ..., "
        "tracejob.txt: '...'}: a document or its text); topology: the topology.yaml mapping",
    )


# The bundle's sources (every one but the scope, which is `attempt`): the names a document's sources take.
BundleSource: Any = Literal[BUNDLE_SOURCES]  # the vocabulary's, known at run time


class AttemptDocument(BaseModel):
    """An attempt's scope (attempt.yaml's fields) and its observations per source."""

    model_config = ConfigDict(extra="forbid")
    # attempt.yaml as JSON: an AttemptScope, checked where every bundle's is (load_scope, which
    # names the field at fault); its schema is AttemptScope's
    attempt: Annotated[dict[str, Any], WithJsonSchema(AttemptScope.model_json_schema())]
    sources: dict[BundleSource, SourceDoc] = Field(default_factory=dict)


def write_document(doc: AttemptDocument, root: Path) -> None:  # noqa: C901 (one branch per kind of source)
    """The JSON form as the bundle it describes (the same files `attribution diagnose` reads)."""
    import yaml

    (root / "attempt.yaml").write_text(yaml.safe_dump(doc.attempt, sort_keys=False))
    for source, part in doc.sources.items():
        if source in TEXT_SOURCES:
            by_node: dict[str, list[str]] = {}
            for line in part.lines:
                prefix = (line.time.isoformat().replace("+00:00", "Z") + " " if line.time else "") + (
                    f"[rank{line.rank}]: " if line.rank is not None else ""
                )
                by_node.setdefault(line.node or "scheduler", []).append(prefix + line.text.replace("\n", " "))
            for node, lines in by_node.items():
                if "/" in node or node.startswith("."):
                    raise Refused(f"sources.{source}: node {node!r} is not a host name")
                path = root / TEXT_SOURCES[source] / f"{node}.log"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("\n".join(lines) + "\n")
        elif source == "metrics" and part.samples:
            (root / "metrics").mkdir(exist_ok=True)
            with (root / "metrics" / "posted.prom").open("w") as out:
                for s in part.samples:
                    known = {"Hostname", "hostname", "instance", "host", "node", "nodename"} & set(s.labels)
                    labels = s.labels if known else {"host": s.node, **s.labels}
                    text = ",".join(
                        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
                        for k, v in labels.items()
                    )
                    out.write(f"{s.metric}{{{text}}} {s.value!r} {int(s.time.timestamp() * 1000)}\n")
        elif source == "sacct" and part.document is not None:
            (root / "scheduler").mkdir(exist_ok=True)
            (root / "scheduler" / "sacct.json").write_text(json.dumps(part.document))
        elif source == "kueue" and part.document is not None:
            (root / "scheduler").mkdir(exist_ok=True)
            for name in ("workload", "pods", "events", "nodes"):
                if name in part.document:
                    (root / "scheduler" / f"{name}.json").write_text(json.dumps(part.document[name]))
        elif source == "scheduler_record" and part.document is not None:
            _write_record_files(doc.attempt, part.document, root)
        elif source == "topology" and part.document is not None:
            (root / "topology.yaml").write_text(yaml.safe_dump(part.document))


def _write_record_files(attempt: dict[str, Any], files: dict[str, Any], root: Path) -> None:
    """The attempt's scheduler's own files (its BundleRecord's names), each a document or its text."""
    scheduler = schedulers().get(str(attempt.get("scheduler")))
    known = scheduler.bundle.files if scheduler is not None and scheduler.bundle is not None else ()
    for name, content in files.items():
        if name not in known:
            raise Refused(f"sources.scheduler_record: {name!r} is not a file of a {attempt.get('scheduler')} record")
        (root / "scheduler").mkdir(exist_ok=True)
        text = content if isinstance(content, str) else json.dumps(content)
        (root / "scheduler" / name).write_text(text)


# ------------------------------------------------------------------------------------- archives


def _check_name(name: str) -> PurePosixPath:
    p = PurePosixPath(name)
    if p.is_absolute() or name.startswith("/") or "\\" in name:
        raise Refused(f"member {name!r}: an absolute path")
    if any(part == ".." for part in p.parts):
        raise Refused(f"member {name!r}: climbs out with '..'")
    return p


class Budget:
    def __init__(self, max_bytes: int, max_members: int, max_line: int):
        self.left, self.members_left, self.max_line = max_bytes, max_members, max_line

    def member(self, name: str) -> None:
        self.members_left -= 1
        if self.members_left < 0:
            raise Limit("more members than diagnose_max_members")

    def copy(self, src: IO[bytes], dst: IO[bytes], name: str, declared: int | None = None) -> None:
        """Copy a member while the budget lasts: expanded bytes, and no line over max_line."""
        if declared is not None and declared > self.left:  # an honest header says it now; a liar is caught below
            raise Limit("expanded size over diagnose_max_expanded_bytes")
        run = 0  # bytes since the last newline
        while True:
            chunk = src.read(CHUNK)
            if not chunk:
                return
            self.left -= len(chunk)
            if self.left < 0:
                raise Limit("expanded size over diagnose_max_expanded_bytes")
            parts = chunk.split(b"\n")
            longest = run + len(parts[0])
            if len(parts) > 1:
                longest = max(longest, *(len(p) for p in parts[1:]))
                run = len(parts[-1])
            else:
                run = longest
            if longest > self.max_line:
                raise Limit(f"{name}: a line longer than diagnose_max_line_bytes")
            dst.write(chunk)


def _target(root: Path, rel: PurePosixPath) -> Path:
    dst = (root / Path(*rel.parts)).resolve()
    if not dst.is_relative_to(root.resolve()):
        raise Refused(f"member {str(rel)!r}: outside the bundle")
    return dst


def extract_tar(archive: Path, root: Path, budget: Budget, mode: str) -> None:
    opener = _zstd_reader(archive) if mode == "zst" else None
    try:
        with tarfile.open(fileobj=opener, mode="r|") if opener else tarfile.open(archive, mode="r|gz") as tar:
            for m in tar:
                budget.member(m.name)
                rel = _check_name(m.name)
                if m.issym() or m.islnk():
                    raise Refused(f"member {m.name!r}: a link")
                if m.isdir():
                    _target(root, rel).mkdir(parents=True, exist_ok=True)
                    continue
                if not m.isfile():
                    raise Refused(f"member {m.name!r}: a device, fifo or other special file")
                dst = _target(root, rel)
                dst.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(m)
                if src is None:
                    continue
                with dst.open("wb") as out:
                    budget.copy(src, out, m.name, m.size)
    except (tarfile.TarError, EOFError, OSError, zlib.error, zstandard.ZstdError) as exc:
        raise Refused(f"not a readable tar.{'zst' if mode == 'zst' else 'gz'} archive: {first_line(exc)}") from None
    finally:
        if opener is not None:
            opener.close()


def _zstd_reader(path: Path) -> IO[bytes]:
    import zstandard

    return zstandard.ZstdDecompressor().stream_reader(path.open("rb"), read_across_frames=True)


def extract_zip(archive: Path, root: Path, budget: Budget) -> None:
    try:
        with zipfile.ZipFile(archive) as z:
            members = z.infolist()
            if len(members) > budget.members_left:
                raise Limit("more members than diagnose_max_members")
            if sum(i.file_size for i in members) > budget.left:  # what the directory declares, before any byte
                raise Limit("expanded size over diagnose_max_expanded_bytes")
            for info in members:
                budget.member(info.filename)
                rel = _check_name(info.filename)
                kind = stat.S_IFMT(info.external_attr >> 16)
                if kind == stat.S_IFLNK:
                    raise Refused(f"member {info.filename!r}: a link")
                if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                    raise Refused(f"member {info.filename!r}: a device, fifo or other special file")
                if info.is_dir():
                    _target(root, rel).mkdir(parents=True, exist_ok=True)
                    continue
                dst = _target(root, rel)
                dst.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, dst.open("wb") as out:
                    budget.copy(src, out, info.filename, info.file_size)
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, lzma.LZMAError, NotImplementedError) as exc:
        raise Refused(f"not a readable zip archive: {first_line(exc)}") from None
    except RuntimeError as exc:  # zipfile's word for an encrypted member
        raise Refused(f"not a readable zip archive: {first_line(exc)}") from None


def bundle_root(root: Path) -> Path:
    """attempt.yaml at the top, or in the archive's single top-level folder."""
    if (root / "attempt.yaml").is_file():
        return root
    tops = [p for p in root.iterdir() if not p.name.startswith(".")]
    if len(tops) == 1 and tops[0].is_dir() and (tops[0] / "attempt.yaml").is_file():
        return tops[0]
    raise Refused("no attempt.yaml at the archive's top or in its single top-level folder")


# ------------------------------------------------------------------------------------- the route

KINDS = {b"\x1f\x8b": "tar.gz", b"\x28\xb5\x2f\xfd": "tar.zst", b"PK\x03\x04": "zip", b"PK\x05\x06": "zip"}


def kind_of(head: bytes) -> str:
    for magic, kind in KINDS.items():
        if head.startswith(magic):
            return kind
    if head.lstrip()[:1] == b"{":
        return "json"
    raise Refused("the body is neither a .tar.gz, .tar.zst or .zip bundle nor a JSON attempt document")


class Stalled(Exception):
    """The body stopped arriving for body_timeout_s: 408."""


async def receive(request: Request, path: Path, limit: int, deadline: float, stall_s: float) -> None:
    """The body to `path`: at most `limit` bytes, all of it before `deadline`, never a pause longer
    than `stall_s` between two pieces (a stalled sender must not hold a diagnose slot)."""
    from starlette.requests import ClientDisconnect

    declared = request.headers.get("content-length")
    if declared and (not declared.isdigit() or int(declared) > limit):
        raise Limit(f"body larger than diagnose_max_bytes ({limit} bytes)")
    size = 0
    chunks = request.stream().__aiter__()
    with path.open("wb") as out:
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                try:
                    chunk = await asyncio.wait_for(chunks.__anext__(), min(stall_s, left))
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    if time.monotonic() >= deadline:
                        raise
                    raise Stalled from None
                size += len(chunk)
                if size > limit:
                    raise Limit(f"body larger than diagnose_max_bytes ({limit} bytes)")
                out.write(chunk)
        except ClientDisconnect:
            raise HTTPException(400, "client disconnected before sending the whole body") from None


def compute(svc: Any, body: Path, work: Path, store: bool) -> Any:
    """In a worker thread: the body as a bundle under work/, diagnosed inline."""
    from workload_attribution.contracts.identity import Target
    from workload_attribution.flows.inline import attribute_inline
    from workload_attribution.flows.pipeline import resolve

    root = work / "bundle"
    root.mkdir()
    with body.open("rb") as f:
        kind = kind_of(f.read(8))
    limits = svc.cfg.service
    budget = Budget(limits.diagnose_max_expanded_bytes, limits.diagnose_max_members, limits.diagnose_max_line_bytes)
    if kind == "json":
        try:
            doc = AttemptDocument.model_validate_json(body.read_bytes())
        except ValidationError as exc:
            err = exc.errors(include_url=False, include_input=False)[0]
            raise Refused(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}") from None
        write_document(doc, root)
    elif kind == "zip":
        extract_zip(body, root, budget)
    else:
        extract_tar(body, root, budget, "zst" if kind == "tar.zst" else "gz")
    body.unlink()
    cfg = svc.cfg if store else svc.cfg.model_copy(update={"warehouse": ""})
    # evidence posted by a client never drains a node: a cluster's actions run on what the cluster's
    # own sources, its triggers and its operators' commands diagnose (docs/actions.md)
    target, options = resolve(cfg, Target(bundle=str(bundle_root(root))), svc.pack, act=False)
    return attribute_inline(target, options)


EXAMPLE = {
    "attempt": {
        "cluster": "eos",
        "scheduler": "slurm",
        "job_id": "4191701",
        "attempt": 0,
        "nodes": ["gb-r12-n01", "gb-r12-n04"],
        "start": "2026-11-20T10:00:00Z",
        "end": "2026-11-20T12:13:07Z",
        "state": "FAILED",
        "timezone": "Europe/Berlin",
    },
    "sources": {
        "syslog": {
            "lines": [
                {
                    "node": "gb-r12-n04",
                    "text": "Nov 20 13:02:41.512000 gb-r12-n04 kernel: [806501.166317] "
                    "NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 03 "
                    "(0x00400011 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
                }
            ]
        },
        "app": {
            "lines": [
                {
                    "node": "gb-r12-n01",
                    "rank": 0,
                    "time": "2026-11-20T12:12:45Z",
                    "text": "[PG ID 0 PG GUID 0(default_pg) Rank 0] Watchdog caught collective operation "
                    "timeout: WorkNCCL(SeqNum=4211, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                    "Timeout(ms)=600000) ran for 600094 milliseconds before timing out.",
                }
            ]
        },
    },
}

OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": AttemptDocument.model_json_schema(), "example": EXAMPLE},
            "application/gzip": {
                "schema": {"type": "string", "format": "binary"},
                "description": "the bundle directory as a .tar.gz (attempt.yaml at the top or in one folder)",
            },
            "application/zstd": {"schema": {"type": "string", "format": "binary"}, "description": "a .tar.zst"},
            "application/zip": {"schema": {"type": "string", "format": "binary"}, "description": "a .zip"},
        },
    },
    "responses": {
        "200": {"description": "the diagnosis (the contract of diagnosis.md); header X-Attribution-Rules-Version"},
        "413": {"description": "over a limit (body, expanded size, members, line length), named"},
        "422": {"description": "not a bundle, or a member refused (absolute, '..', a link, a device), named"},
        "429": {"description": "diagnose_concurrency diagnoses already running; retry after Retry-After"},
        "504": {"description": "not diagnosed within diagnose_timeout_s"},
    },
}


Answer = Callable[..., JSONResponse]  # (outcome, status, body, headers=None): counted in /metrics


@router.post("/v1/diagnose", dependencies=[Depends(require(Scope.read))], openapi_extra=OPENAPI)
async def diagnose(
    request: Request, store: bool = Query(False, description="also write it to the warehouse")
) -> JSONResponse:
    """Diagnose the posted attempt now and answer its diagnosis (the same story as `attribution
    diagnose --inline`)."""
    svc = request.app.state.svc
    limits = svc.cfg.service
    started = time.monotonic()
    slots = svc.diagnose_slots

    def answer(outcome: str, status: int, body: Any, headers: dict[str, str] | None = None) -> JSONResponse:
        svc.metrics.diagnose.labels(outcome).inc()
        svc.metrics.diagnose_seconds.observe(time.monotonic() - started)
        return JSONResponse(body, status_code=status, headers=headers)

    if slots.locked():
        return answer(
            "busy", 429, {"detail": f"{limits.diagnose_concurrency} diagnoses running; retry"}, {"Retry-After": "2"}
        )
    await slots.acquire()
    work = Path(tempfile.mkdtemp(prefix="attribution-diagnose-"))
    os.chmod(work, 0o700)

    def release(_: Any = None) -> None:
        slots.release()
        shutil.rmtree(work, ignore_errors=True)

    deadline = started + limits.diagnose_timeout_s
    try:
        refused = await _body_received(request, work, limits, deadline, answer)
    except BaseException:
        release()
        raise
    if refused is not None:
        release()
        return refused
    return await _computed(svc, work, store, deadline, answer, release)


async def _body_received(request: Request, work: Path, limits: Any, deadline: float, answer: Answer) -> Any:
    """The body into work/body; None, or the answer of a body refused (too large, stalled, late)."""
    try:
        await receive(request, work / "body", limits.diagnose_max_bytes, deadline, limits.body_timeout_s)
    except Limit as exc:
        return answer("too_large", 413, {"detail": str(exc)})
    except Stalled:
        why = f"the body stopped arriving for {limits.body_timeout_s:g} s"
        return answer("stalled", 408, {"detail": why}, {"Connection": "close"})
    except TimeoutError:
        return answer("timeout", 504, {"detail": f"body not received within {limits.diagnose_timeout_s:g} s"})
    return None


async def _computed(
    svc: Any, work: Path, store: bool, deadline: float, answer: Answer, release: Callable[[Any], None]
) -> JSONResponse:
    """The diagnosis computed in a worker thread (its slot freed when the thread ends), answered."""
    limits = svc.cfg.service
    future = asyncio.get_running_loop().run_in_executor(None, compute, svc, work / "body", work, store)
    future.add_done_callback(release)
    try:
        d = await asyncio.wait_for(asyncio.shield(future), max(0.1, deadline - time.monotonic()))
    except TimeoutError:
        shutil.rmtree(work, ignore_errors=True)  # the thread finds its files gone and ends; its slot frees then
        return answer("timeout", 504, {"detail": f"not diagnosed within {limits.diagnose_timeout_s:g} s"})
    except Limit as exc:
        return answer("too_large", 413, {"detail": str(exc)})
    except (Refused, BadInput) as exc:
        return answer("refused", 422, {"detail": str(exc)})
    except NotStored as exc:
        if exc.diagnosis is None:
            raise
        d = exc.diagnosis  # the diagnosis computed before the write failed
        headers = {"X-Attribution-Rules-Version": d.rules.version, "X-Attribution-Stored": "false"}
        return answer("not_stored", 200, json.loads(d.model_dump_json()), headers)
    headers = {"X-Attribution-Rules-Version": d.rules.version, "X-Attribution-Stored": "true" if store else "false"}
    return answer("diagnosed", 200, json.loads(d.model_dump_json()), headers)
