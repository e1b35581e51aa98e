"""`attribution diagnose --retry-missing`: diagnose an attempt again collecting only what its stored
diagnosis says would settle it (its `would_settle` sources); every other source's evidence is the
archived one (warehouse/archive.py), restored into the attempt's staging database as it was."""

from __future__ import annotations

import json

from workload_attribution.staging.database import connected
from workload_attribution.staging.snapshot import restore_evidence
from workload_attribution.tasks.steps import ScopedAttempt
from workload_attribution.warehouse.archive import Archive
from workload_attribution.warehouse.store import Warehouse


def restore_archived(scoped: ScopedAttempt, warehouse: str | None, archive: str | None) -> None:
    """Narrow the attempt to the sources its stored diagnosis names as missing, the others'
    evidence and coverage restored from the archive. Without a stored diagnosis or archived
    evidence, every source is collected (a note says why)."""
    if not warehouse or not archive:
        scoped.notes.append("--retry-missing: no warehouse or evidence archive: every source collected")
        return
    a = scoped.scope.id
    stored = Warehouse(warehouse).rows(
        "SELECT diagnosis -> 'would_settle' FROM diagnoses WHERE cluster=? AND scheduler=? AND job_id=? AND attempt=?",
        [a.cluster, a.scheduler, a.job_id, a.attempt],
    )
    manifest = Archive(archive).manifest(a.diagnosis_id)
    if not stored or manifest is None:
        scoped.notes.append("--retry-missing: no earlier diagnosis with archived evidence: every source collected")
        return
    wanted = {m["source"] for m in json.loads(stored[0][0] or "[]")} & set(scoped.sources)
    with connected(scoped.staging) as con:
        restore_evidence(con, Archive(archive).evidence(manifest).splitlines(), wanted)
    scoped.kept = list(manifest.coverage)
    scoped.sources = {s: v for s, v in scoped.sources.items() if s in wanted}
    scoped.notes.append(
        f"--retry-missing: collected again: {', '.join(sorted(wanted)) or 'nothing (nothing was named missing)'}; "
        f"the other sources' evidence as archived {manifest.archived_at:%Y-%m-%d %H:%M} UTC"
    )
