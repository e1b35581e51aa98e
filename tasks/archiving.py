"""The evidence archive's ends in the story (warehouse/archive.py holds the archive): the events
kept as each rule phase begins, while the rules run, and the attempt archived as its diagnosis is
published: the staged evidence of every source, the scope, the coverage, the verdict the rules
gave, and those events (a replay of a later phase starts from them).
"""

from __future__ import annotations

import logging

import duckdb

from workload_attribution.contracts.errors import first_line
from workload_attribution.contracts.models import Diagnosis
from workload_attribution.rules.diff import prefix_digest
from workload_attribution.rules.engine import Settings
from workload_attribution.rules.pack import Pack
from workload_attribution.staging.database import connected
from workload_attribution.staging.snapshot import EVIDENCE_TABLES, dump
from workload_attribution.warehouse.archive import (
    Archive,
    Checkpoint,
    EvidenceTooLarge,
    Manifest,
    Outcome,
    Packed,
    settings_dict,
)

log = logging.getLogger("attribution.archive")

# where the events as a phase began are kept in the staging database, until the attempt is archived
SCHEMA = "archive_checkpoint"
CHECKPOINT_PHASES = ("early", "final")


def keep_events(phase: str, con: duckdb.DuckDBPyConnection) -> None:
    """rules.phases.run_phases' checkpoint: the events as `phase` begins."""
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    con.execute(f"CREATE OR REPLACE TABLE {SCHEMA}.events_{phase} AS SELECT * FROM events")


def _events_text(con: duckdb.DuckDBPyConnection, phase: str) -> str | None:
    table = f"{SCHEMA}.events_{phase}"
    known = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE schema_name = ? AND table_name = ?", [SCHEMA, f"events_{phase}"]
    ).fetchone()
    if not known or not known[0]:
        return None
    parts: list[bytes] = []
    dump(con, {table: "event_id"}, parts.append)
    return b"".join(parts).decode()


def archive_attempt(
    staging: str,
    diagnosis: Diagnosis,
    outcome: Outcome,
    location: str,
    pack: Pack,
    settings: Settings,
    max_bytes: int,
) -> str | None:
    """Archive one diagnosed attempt; None when done, else the note the diagnosis carries instead
    (an archive that cannot be written never costs the diagnosis)."""
    try:
        packed = Packed(max_bytes)
        with connected(staging) as con:
            rows = dump(con, EVIDENCE_TABLES, packed.write)
            events = {phase: _events_text(con, phase) for phase in CHECKPOINT_PHASES}
        digest, body = packed.finish()
        given = settings_dict(settings)
        manifest = Manifest(
            diagnosis_id=diagnosis.diagnosis_id,
            attempt=diagnosis.attempt,
            digest=digest,
            evidence_bytes=packed.size,
            stored_bytes=len(body),
            rows=rows,
            coverage=diagnosis.coverage,
            notes=diagnosis.notes,
            settings=given,
            rules_version=pack.version,
            outcome=outcome,
            checkpoints={
                phase: Checkpoint(prefix=prefix_digest(pack, phase, given), events=text)
                for phase, text in events.items()
                if text is not None
            },
        )
        Archive(location).put(manifest, body)
    except EvidenceTooLarge as exc:
        return f"evidence not archived: {exc}"
    except Exception as exc:  # a full disk, an unreachable bucket: said, never fatal
        log.warning("archive %s: %s", location, first_line(exc))
        return f"evidence not archived ({location}): {first_line(exc)[:200]}"
    return None
