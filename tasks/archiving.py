"""The evidence archive's ends in the story (warehouse/archive.py holds the archive): the state
kept at each point of the rules' run, while the rules run, and the attempt archived as its
diagnosis is published: the staged evidence of every source, the scope, the coverage, the verdict
the rules gave, and that state (a replay from a later point starts from it).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

import duckdb

from workload_attribution.contracts.errors import first_line
from workload_attribution.staging.database import connected

# Every attempt's rules keep their checkpoints (keep_checkpoint); what archives them (the snapshot,
# the rules' digests, the archive's models) is imported when an attempt is archived: an attempt
# with no warehouse is not, and a new process pays for none of it.
if TYPE_CHECKING:
    from workload_attribution.contracts.models import Diagnosis
    from workload_attribution.rules.engine import Settings
    from workload_attribution.rules.pack import Pack
    from workload_attribution.warehouse.archive import Checkpoint, Outcome

log = logging.getLogger("attribution.archive")

# where the state at each point of the run is kept in the staging database, until the attempt is
# archived: the events, and once the verdict is chosen the verdicts too (table -> its rows' order)
SCHEMA = "archive_checkpoint"
KEPT = {
    "early": {"events": "event_id"},
    "final": {"events": "event_id"},
    "roles": {"events": "event_id", "verdicts": "rule_id", "verdict": "rule_id"},
}


def keep_checkpoint(point: str, con: duckdb.DuckDBPyConnection) -> None:
    """rules.phases.run_phases' checkpoint: the tables the rules have made as `point` begins."""
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    for table in KEPT.get(point, {}):
        con.execute(f"CREATE OR REPLACE TABLE {SCHEMA}.{table}_{point} AS SELECT * FROM {table}")


def _kept_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The tables keep_checkpoint made (one statement for every point, not one a table)."""
    found = con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = ?", [SCHEMA]).fetchall()
    return {r[0] for r in found}


def _kept_text(con: duckdb.DuckDBPyConnection, point: str, table: str, made: set[str]) -> str | None:
    from workload_attribution.staging.snapshot import dump

    kept = f"{table}_{point}"
    if kept not in made:
        return None
    parts: list[bytes] = []
    dump(con, {f"{SCHEMA}.{kept}": KEPT[point][table]}, parts.append)
    return b"".join(parts).decode()


def _checkpoint(con: duckdb.DuckDBPyConnection, point: str, prefix: str, made: set[str]) -> Checkpoint | None:
    from workload_attribution.warehouse.archive import Checkpoint

    texts = {table: _kept_text(con, point, table, made) for table in KEPT[point]}
    if any(text is None for text in texts.values()):  # the run never reached the point
        return None
    events = texts.pop("events") or ""
    return Checkpoint(prefix=prefix, events=events, tables={t: text or "" for t, text in texts.items()})


# (the pack's id, the point, the settings) -> (the pack, its prefix digest): a pack is not changed
# once loaded, and a worker runs every attempt with the one it loaded (rules.pack.default_pack keeps
# it), so its rules are digested once a process, not 4-5 ms each attempt archived
_PREFIXES: dict[tuple[int, str, str], tuple[Pack, str]] = {}


def _prefix(pack: Pack, point: str, given: dict) -> str:
    from workload_attribution.rules.diff import prefix_digest

    key = (id(pack), point, json.dumps(given, sort_keys=True, default=str))
    kept = _PREFIXES.get(key)
    if kept is not None and kept[0] is pack:
        return kept[1]
    digest = prefix_digest(pack, point, given)
    if len(_PREFIXES) > 64:  # packs come and go in a long-lived process
        _PREFIXES.clear()
    _PREFIXES[key] = (pack, digest)
    return digest


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
    from workload_attribution.staging.snapshot import EVIDENCE_TABLES, dump
    from workload_attribution.warehouse.archive import Archive, EvidenceTooLarge, Manifest, Packed, settings_dict

    try:
        packed = Packed(max_bytes)
        with connected(staging) as con:
            # each table's rows read in order and made text: nothing for DuckDB's optimizer to do
            # but plan (~0.3-0.6 ms a statement), and no slower over 200k rows
            con.execute("PRAGMA disable_optimizer")
            rows = dump(con, EVIDENCE_TABLES, packed.write)
            given = settings_dict(settings)
            made = _kept_tables(con)
            kept = {point: _checkpoint(con, point, _prefix(pack, point, given), made) for point in KEPT}
        digest, body = packed.finish()
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
            checkpoints={point: c for point, c in kept.items() if c is not None},
        )
        Archive(location).put(manifest, body)
    except EvidenceTooLarge as exc:
        return f"evidence not archived: {exc}"
    except Exception as exc:  # a full disk, an unreachable bucket: said, never fatal
        log.warning("archive %s: %s", location, first_line(exc))
        return f"evidence not archived ({location}): {first_line(exc)[:200]}"
    return None
