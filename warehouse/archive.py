"""The evidence archive: what each diagnosed attempt was diagnosed from, kept beside the warehouse so
that a rules change can be replayed on it (`attribution rules impact`) and a diagnosis can be
completed with only what it lacked (`attribution diagnose --retry-missing`).

Per attempt, two objects (warehouse/objects.py: a local folder, or S3 when the lake is there):

    evidence/<d[:2]>/<d>.jsonl.zst              the staged evidence (staging/snapshot.py), zstd;
                                                named by the SHA-256 <d> of its text, so a
                                                re-diagnosis of unchanged evidence stores nothing new
    attempts/<diagnosis_id>/<d>.json.zst        the manifest: the scope, the coverage, the notes, the
                                                rules settings and version, the verdict, and the
                                                events as each phase began (replays start there)

Everything the archive holds can be found by listing: no index to keep in step. Retention
(`prune`): attempts archived longer ago than max_age_days go, then the oldest until the total is
within max_total_gib; evidence no manifest names any more goes with them.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from workload_attribution.contracts.errors import BadInput
from workload_attribution.contracts.models import AttemptScope, Coverage, Diagnosis

# ArchiveSettings is part of every configuration, and location_for of every diagnosis' options: the
# stores the archive is written to, zstd (~7 ms) and a lake's address are imported when it is.
if TYPE_CHECKING:
    from workload_attribution.warehouse.objects import ObjectInfo, ObjectStore

FORMAT = 1
ZSTD_LEVEL = 6  # measured: within 5% of level 19's size on staged logs, at a tenth of its time


class ArchiveSettings(BaseModel):
    """`archive:` in the configuration."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="keep each diagnosed attempt's evidence (needs a warehouse)")
    location: str | None = Field(
        None,
        description="a folder or s3://bucket/prefix (default: beside the warehouse: <file>-archive/ "
        "next to a DuckDB file, archive/ under a lake's data_path)",
    )
    max_age_days: float = Field(90.0, gt=0, description="archive prune: attempts archived longer ago go")
    max_total_gib: float = Field(50.0, gt=0, description="archive prune: then the oldest, until the total fits")
    max_attempt_mib: float = Field(
        256.0, gt=0, description="an attempt whose staged evidence is larger than this (uncompressed) is not archived"
    )


def location_for(warehouse: str, settings: ArchiveSettings) -> str | None:
    """Where the archive of this warehouse lives; None when nothing is archived."""
    if not settings.enabled or not warehouse:
        return None
    if settings.location:
        return settings.location
    from workload_attribution.warehouse.backends import parse_lake

    lake = parse_lake(warehouse)
    if lake is not None:
        return lake.data_path.rstrip("/") + "/archive"
    path = Path(warehouse)
    return str(path.with_name(f"{path.stem}-archive"))


# The archive's models build their validators when first used (defer_build), not at import: every
# configuration imports this module for ArchiveSettings, and an attempt with no warehouse archives nothing.
class Outcome(BaseModel):
    """What a rules impact compares: the verdict, its root, the hosts blamed and the action."""

    model_config = ConfigDict(defer_build=True)

    terminal_state: str
    sub_domain: str
    confidence: str
    root_symptom: str | None = None
    root_node: str | None = None
    affected_nodes: list[str] = Field(default_factory=list)
    action: str

    @classmethod
    def of(cls, d: Diagnosis) -> Outcome:
        rc = d.root_cause
        return cls(
            terminal_state=d.terminal_state.value,
            sub_domain=d.sub_domain.value,
            confidence=d.confidence.value,
            root_symptom=rc.symptom if rc else None,
            root_node=rc.node if rc else None,
            affected_nodes=sorted(d.affected_nodes),
            action=d.recommended_action.value,
        )

    @property
    def verdict(self) -> str:
        return f"{self.terminal_state}/{self.sub_domain}"

    def decides_as(self, other: Outcome) -> bool:
        """The same verdict, root, blamed hosts and action (confidence aside)."""
        return not self.differences(other)

    def differences(self, other: Outcome) -> list[str]:
        """What differs: verdict, root, blamed, action (in that order)."""
        a, b = self.model_dump(), other.model_dump()
        parts = {
            "verdict": ("terminal_state", "sub_domain"),
            "root": ("root_symptom", "root_node"),
            "blamed": ("affected_nodes",),
            "action": ("action",),
        }
        return [name for name, keys in parts.items() if any(a[k] != b[k] for k in keys)]


class Checkpoint(BaseModel):
    """The state at one point of the run (rules/phases.py RESUMABLE), valid for any pack whose
    prefix_digest for that point is `prefix`."""

    model_config = ConfigDict(defer_build=True)  # as Outcome

    prefix: str
    events: str = Field(description="staging/snapshot.py text of the events table")
    tables: dict[str, str] = Field(
        default_factory=dict, description="the other tables the rules made by then (the verdicts): table -> text"
    )


class Manifest(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)  # as Outcome

    format: int = FORMAT
    diagnosis_id: str
    attempt: AttemptScope
    digest: str = Field(description="SHA-256 of the evidence text: the evidence object's name")
    evidence_bytes: int = Field(description="the evidence text, uncompressed")
    stored_bytes: int = Field(0, description="the evidence object, compressed")
    rows: dict[str, int] = Field(default_factory=dict)
    coverage: list[Coverage] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="the collection's notes")
    settings: dict[str, Any] = Field(default_factory=dict, description="the rules settings it was diagnosed with")
    rules_version: str
    outcome: Outcome
    checkpoints: dict[str, Checkpoint] = Field(default_factory=dict, description="point -> the state there")
    archived_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))


class Packed:
    """Evidence text being written: compressed as it comes, hashed, counted, refused past a size."""

    def __init__(self, limit_bytes: int):
        self.limit = limit_bytes
        self.size = 0
        self._hash = hashlib.sha256()
        import zstandard

        self._out = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compressobj()
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise EvidenceTooLarge(f"its staged evidence passes {self.limit / 2**20:g} MiB (archive.max_attempt_mib)")
        self._hash.update(data)
        self._parts.append(self._out.compress(data))

    def finish(self) -> tuple[str, bytes]:
        """(digest, compressed bytes)."""
        self._parts.append(self._out.flush())
        return self._hash.hexdigest(), b"".join(self._parts)


class EvidenceTooLarge(Exception):
    """The attempt's staged evidence is past archive.max_attempt_mib."""


class ArchiveCorrupt(BadInput):
    """An archived object is not what its name says (a digest mismatch, a truncated file)."""


@dataclass
class Entry:
    """One archived attempt as listing shows it."""

    diagnosis_id: str
    digest: str
    key: str
    manifest_bytes: int
    archived_at: datetime


@dataclass
class PruneReport:
    removed: list[Entry] = field(default_factory=list)
    evidence_removed: int = 0
    bytes_freed: int = 0
    kept: int = 0
    bytes_kept: int = 0


def evidence_key(digest: str) -> str:
    return f"evidence/{digest[:2]}/{digest}.jsonl.zst"


def manifest_key(diagnosis_id: str, digest: str) -> str:
    return f"attempts/{diagnosis_id}/{digest}.json.zst"


class Archive:
    def __init__(self, store: ObjectStore | str):
        from workload_attribution.warehouse.objects import open_store

        self.store = open_store(store) if isinstance(store, str) else store

    def __str__(self) -> str:
        return str(self.store)

    def put(self, manifest: Manifest, evidence: bytes) -> None:
        """Keep one attempt: its evidence (unless already kept), then its manifest, then drop the
        attempt's earlier manifests (a re-diagnosis replaces, as in the warehouse)."""
        key = evidence_key(manifest.digest)
        if not any(o.key == key for o in self.store.list(key)):
            self.store.put(key, evidence)
        mine = manifest_key(manifest.diagnosis_id, manifest.digest)
        import zstandard

        body = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(manifest.model_dump_json().encode())
        self.store.put(mine, body)
        for old in self.store.list(f"attempts/{manifest.diagnosis_id}/"):
            if old.key != mine:
                self.store.delete(old.key)

    def entries(self) -> Iterator[Entry]:
        for o in self.store.list("attempts/"):
            parts = o.key.split("/")
            if len(parts) == 3 and parts[2].endswith(".json.zst"):
                yield Entry(parts[1], parts[2].removesuffix(".json.zst"), o.key, o.size, o.modified)

    def manifest(self, diagnosis_id: str) -> Manifest | None:
        for o in self.store.list(f"attempts/{diagnosis_id}/"):
            return self.read_manifest(o.key)
        return None

    def read_manifest(self, key: str) -> Manifest:
        return Manifest.model_validate_json(_unzstd(self.store.get(key), key))

    def evidence(self, manifest: Manifest) -> bytes:
        """The attempt's evidence text, checked against its digest."""
        key = evidence_key(manifest.digest)
        text = _unzstd(self.store.get(key), key)
        if hashlib.sha256(text).hexdigest() != manifest.digest:
            raise ArchiveCorrupt(f"{self}: {key} does not match its digest")
        return text

    def prune(self, max_age: timedelta, max_total_bytes: int, now: datetime | None = None) -> PruneReport:
        """Attempts archived before now - max_age go; then the oldest until what is left (evidence
        and manifests) is within max_total_bytes; then evidence no manifest names."""
        now = now or datetime.now(timezone.utc)
        entries = sorted(self.entries(), key=lambda e: (e.archived_at, e.key))
        blobs = {o.key: o for o in self.store.list("evidence/")}
        report = PruneReport()
        kept = [e for e in entries if e.archived_at >= now - max_age]
        report.removed = [e for e in entries if e.archived_at < now - max_age]
        refs = Counter(evidence_key(e.digest) for e in kept)
        total = _total(kept, blobs)
        while kept and total > max_total_bytes:  # the oldest first; evidence goes with its last manifest
            e = kept.pop(0)
            report.removed.append(e)
            total -= e.manifest_bytes
            refs[evidence_key(e.digest)] -= 1
            if not refs[evidence_key(e.digest)]:
                total -= blobs[evidence_key(e.digest)].size if evidence_key(e.digest) in blobs else 0
        for e in report.removed:
            self.store.delete(e.key)
            report.bytes_freed += e.manifest_bytes
        named = {evidence_key(e.digest) for e in kept}
        for key, o in blobs.items():
            if key not in named:
                self.store.delete(key)
                report.evidence_removed += 1
                report.bytes_freed += o.size
        report.kept, report.bytes_kept = len(kept), total
        return report

    def usage(self) -> tuple[int, int, int]:
        """(attempts, evidence objects, bytes of both)."""
        entries = list(self.entries())
        blobs = list(self.store.list("evidence/"))
        return len(entries), len(blobs), sum(e.manifest_bytes for e in entries) + sum(b.size for b in blobs)


def _total(entries: list[Entry], blobs: dict[str, ObjectInfo]) -> int:
    named = {evidence_key(e.digest) for e in entries}
    return sum(e.manifest_bytes for e in entries) + sum(blobs[k].size for k in named if k in blobs)


def _unzstd(data: bytes, key: str) -> bytes:
    import zstandard

    try:
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    except zstandard.ZstdError as exc:
        raise ArchiveCorrupt(f"{key}: not a zstd object ({exc})") from None


def settings_dict(settings: Any) -> dict[str, Any]:
    """Rules settings as the manifest keeps them (a pydantic model or a dict)."""
    return json.loads(settings.model_dump_json()) if hasattr(settings, "model_dump_json") else dict(settings)
