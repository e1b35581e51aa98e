"""Writing to the warehouse: one diagnosis, and topology snapshots.

An attempt's diagnosis replaces whatever was written for that attempt before, rows of every table,
in one transaction: delete then insert, unless what is stored outranks it (a newer rules pack's,
warehouse/precedence.py), when nothing is written. DuckLake has no PRIMARY KEY/UNIQUE constraints,
and a DuckDB file's `diagnoses` has none since schema v9 (its index made every checkpoint rewrite
the table), so this is what keeps the key (cluster, scheduler, job_id, attempt) in both backends, provided no
other writer of the attempt runs meanwhile: one process writes a DuckDB file at a time, and a lake
writer holds the attempt's turn (warehouse/turns.py). Callers hold backends.WRITE_LOCK and run
these under conflicts.retry.
"""

from __future__ import annotations

import json
from datetime import datetime

import duckdb

from workload_attribution.contracts.models import Diagnosis
from workload_attribution.staging.database import scalar
from workload_attribution.warehouse.conflicts import rollback
from workload_attribution.warehouse.memory import blames, insert_blames
from workload_attribution.warehouse.precedence import rank
from workload_attribution.warehouse.templates import AttemptTemplates, insert_templates

# the tables holding a diagnosis's parts, by diagnosis_id
PART_TABLES = (
    "diagnosis_symptoms",
    "diagnosis_xids",
    "diagnosis_affected_nodes",
    "diagnosis_affected_components",
    "diagnosis_coverage",
    "diagnosis_evidence",
    "blame_history",
    "attempt_templates",
)
_ATTEMPT = "cluster=? AND scheduler=? AND job_id=? AND attempt=?"


def write_diagnosis(
    con: duckdb.DuckDBPyConnection,
    d: Diagnosis,
    topology: list[tuple] | None,
    templates: AttemptTemplates | None = None,
) -> bool:
    """Replace this attempt's diagnosis and its parts in one transaction; `topology` (switch, port,
    peer, peer_kind, hca) rows seen with the attempt are recorded as of its start; `templates` (a
    doubtful or completed attempt's log templates, tasks/novelty.py) are its attempt_templates
    rows, replaced with the rest (a retry writes the same rows again, never twice). False when the
    stored diagnosis outranks this one (warehouse/precedence.py): then only what was observed (the
    topology, the rules version's use) is recorded, so what lands does not depend on write order."""
    a = d.attempt
    doc = d.model_dump_json()
    con.execute("BEGIN TRANSACTION")
    try:
        _record_rules_version(con, d)
        if topology:
            insert_topology(con, a.cluster, topology, a.start, f"bundle {a.job_id}")
        stored = _stored(con, d)
        if _outranked(stored, d):
            con.execute("COMMIT")
            return False
        if stored:  # parts are only ever written with their diagnoses row, in its transaction
            _delete_attempt(con, d, [r[0] for r in stored])
        _insert_diagnosis_row(con, d, doc)
        doc = json.dumps(json.loads(doc))
        _insert_symptoms(con, d.diagnosis_id, doc)
        _insert_affected(con, d)
        _insert_coverage(con, d.diagnosis_id, doc)
        _insert_evidence(con, d.diagnosis_id, doc)
        insert_blames(con, d, blames(d, topology))
        insert_templates(con, d, templates)
        con.execute("COMMIT")
    except Exception:
        rollback(con)
        raise
    return True


def _attempt_key(d: Diagnosis) -> list:
    a = d.attempt
    return [a.cluster, a.scheduler, a.job_id, a.attempt]


def _stored(con: duckdb.DuckDBPyConnection, d: Diagnosis) -> list[tuple]:
    """(diagnosis_id, rules_version, created_at) of each diagnosis stored for the attempt."""
    query = f"SELECT diagnosis_id, rules_version, created_at FROM diagnoses WHERE {_ATTEMPT}"
    return con.execute(query, _attempt_key(d)).fetchall()


def _outranked(stored: list[tuple], d: Diagnosis) -> bool:
    """Whether a diagnosis stored for the attempt outranks `d`."""
    mine = rank(d.rules.version, d.created_at)
    return any(rank(v, t) > mine for _, v, t in stored)


def _delete_attempt(con: duckdb.DuckDBPyConnection, d: Diagnosis, old: list[str]) -> None:
    """Every row of the attempt's earlier diagnoses (`old`, their ids) and of this one's id. A new
    attempt (none stored) skips the eight DELETEs, each a scan of its table (~9 ms a write)."""
    for table in PART_TABLES:
        con.execute(f"DELETE FROM {table} WHERE diagnosis_id IN (SELECT unnest($ids))", {"ids": old + [d.diagnosis_id]})
    con.execute(f"DELETE FROM diagnoses WHERE {_ATTEMPT}", _attempt_key(d))


def _insert_diagnosis_row(con: duckdb.DuckDBPyConnection, d: Diagnosis, doc: str) -> None:
    """The diagnoses row: the attempt, the verdict, its root cause, and the whole diagnosis as JSON."""
    a, rc = d.attempt, d.root_cause
    row = [
        *_attempt_key(d),
        d.diagnosis_id,
        a.name,
        a.user,
        a.state,
        a.exit_code,
        a.start,
        a.end,
        a.nodes,
        d.terminal_state,
        d.sub_domain,
        d.confidence,
        rc.symptom if rc else None,
        rc.node if rc else None,
        rc.component if rc else None,
        rc.first_seen if rc else None,
        d.recommended_action,
        d.explanation,
        d.rules.version,
        len(d.rules.failed),
        d.created_at,
        doc,
    ]
    con.execute(f"INSERT INTO diagnoses VALUES ({', '.join('?' * len(row))})", row)


def _insert_symptoms(con: duckdb.DuckDBPyConnection, diagnosis_id: str, doc: str) -> None:
    con.execute(
        """
        INSERT INTO diagnosis_symptoms
        SELECT $id, s.symptom, s.role, s.node, s.rank, s.component, s.first_seen::TIMESTAMPTZ,
               s.last_seen::TIMESTAMPTZ, s.count, s.demoted_by, s.interesting, s.rule
        FROM (SELECT unnest(from_json($doc::JSON -> 'symptoms',
            '[{"symptom":"VARCHAR","role":"VARCHAR","node":"VARCHAR","rank":"INTEGER","component":"VARCHAR",
               "first_seen":"VARCHAR","last_seen":"VARCHAR","count":"INTEGER","demoted_by":"VARCHAR",
               "interesting":"BOOLEAN","rule":"VARCHAR"}]'), recursive := true)) s
        """,
        {"id": diagnosis_id, "doc": doc},
    )
    # its XID symptoms again, by code (schema v7): from the document, not by reading the table back
    # (a lake would scan every file of it for one diagnosis)
    con.execute(
        r"""
        INSERT INTO diagnosis_xids
        SELECT $id, CAST(regexp_extract(s.symptom, '^xid_(\d+)$', 1) AS INTEGER), s.node, s.role,
               s.first_seen::TIMESTAMPTZ, s.count
        FROM (SELECT unnest(from_json($doc::JSON -> 'symptoms',
            '[{"symptom":"VARCHAR","role":"VARCHAR","node":"VARCHAR","first_seen":"VARCHAR","count":"INTEGER"}]'),
            recursive := true)) s
        WHERE regexp_full_match(s.symptom, 'xid_\d+')
        """,
        {"id": diagnosis_id, "doc": doc},
    )


def _insert_affected(con: duckdb.DuckDBPyConnection, d: Diagnosis) -> None:
    """The nodes and the components the diagnosis names as affected."""
    if d.affected_nodes:
        con.execute(
            "INSERT INTO diagnosis_affected_nodes SELECT $id, unnest($n)",
            {"id": d.diagnosis_id, "n": d.affected_nodes},
        )
    if d.affected_components:
        con.execute(
            "INSERT INTO diagnosis_affected_components SELECT $id, unnest($c)",
            {"id": d.diagnosis_id, "c": d.affected_components},
        )


def _record_rules_version(con: duckdb.DuckDBPyConnection, d: Diagnosis) -> None:
    """The rules version that made the diagnosis, and when, whether or not the diagnosis becomes
    the current one (an append: concurrent writers never conflict on it; so what it records does
    not depend on the order writes land in; the rules_versions view answers first and last use)."""
    con.execute("INSERT INTO rules_version_uses VALUES (?, ?)", [d.rules.version, d.created_at])


def _insert_coverage(con: duckdb.DuckDBPyConnection, diagnosis_id: str, doc: str) -> None:
    con.execute(
        """
        INSERT INTO diagnosis_coverage
        SELECT $id, c.source, c.connector, c.status, c.observations, c.unparsed, c.error, c.duration_ms
        FROM (SELECT unnest(from_json($doc::JSON -> 'coverage',
            '[{"source":"VARCHAR","connector":"VARCHAR","status":"VARCHAR","observations":"BIGINT",
               "unparsed":"BIGINT","error":"VARCHAR","duration_ms":"BIGINT"}]'), recursive := true)) c
        """,
        {"id": diagnosis_id, "doc": doc},
    )


def _insert_evidence(con: duckdb.DuckDBPyConnection, diagnosis_id: str, doc: str) -> None:
    con.execute(
        """
        INSERT INTO diagnosis_evidence
        SELECT $id, e.id, e.source, e.node, e.time::TIMESTAMPTZ, e.ref, e.text
        FROM (SELECT unnest(from_json($doc::JSON -> 'evidence',
            '[{"id":"VARCHAR","source":"VARCHAR","node":"VARCHAR","time":"VARCHAR","ref":"VARCHAR",
               "text":"VARCHAR"}]'), recursive := true)) e
        """,
        {"id": diagnosis_id, "doc": doc},
    )


def insert_topology(
    con: duckdb.DuckDBPyConnection, cluster: str, rows: list[tuple], valid_from: datetime, source: str
) -> int:
    """Record (switch, port, peer, peer_kind, hca) links as of `valid_from`; a port already recorded
    at that time is kept. Returns the links added."""
    before = scalar(con, "SELECT count(*) FROM topology_links")
    con.execute(
        """
        INSERT INTO topology_links
        SELECT $cluster, n.s, n.p, n.peer, n.k, n.h, $t, $src
        FROM (SELECT DISTINCT ON (s, p) unnest($s) AS s, unnest($p) AS p, unnest($peer) AS peer, unnest($k) AS k,
                     unnest($h) AS h) n
        WHERE NOT EXISTS (SELECT 1 FROM topology_links o WHERE o.cluster = $cluster AND o.switch = n.s
                          AND o.port = n.p AND o.valid_from = $t)
        """,
        {
            "cluster": cluster,
            "s": [r[0] for r in rows],
            "p": [str(r[1]) for r in rows],
            "peer": [r[2] for r in rows],
            "k": [r[3] for r in rows],
            "h": [r[4] for r in rows],
            "t": valid_from,
            "src": source,
        },
    )
    return int(scalar(con, "SELECT count(*) FROM topology_links") - before)
