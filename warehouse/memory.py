"""Fleet memory: every diagnosis leaves one row per blamed node and switch port (role root) and per
host that only showed the cascade (role cascade) in `blame_history`; a new diagnosis asks it how
often its own blamed subjects were root and cascade of other attempts in the 7 and 30 days ending at
its end (tasks/memory.py decides what that changes).

What a lookup costs is bounded: it reads the rows of its subjects in those 30 days only. Rows land
in about the order attempts end, so the time filter skips the row groups of older months (DuckDB's
min/max per row group), and `sort_history` (the nightly maintenance of a DuckDB file) orders the
table by subject, so a subject's rows sit together; the attempts listed are at most `listed` per
subject. tests/bench/memory_query.py measures it on a warehouse of a million diagnoses.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import duckdb

from workload_attribution.contracts.models import Diagnosis, PastAttempt, SubjectHistory
from workload_attribution.contracts.vocabulary import Role

DAYS = (7, 30)
MAX_SUBJECTS = 64
SORTED_BY = "cluster, subject, end_time"  # a diagnosis blames a few hosts or ports; more are not looked up


@dataclass(frozen=True)
class Blame:
    kind: str  # node | switch_port
    subject: str
    role: str  # root | cascade


def is_switch_port(component: str) -> bool:
    """`leaf-07:17` is a switch port; `leaf-07` a switch; `GPU 0018:01:00 NVLink 03` neither."""
    switch, _, port = component.partition(":")
    return bool(switch and port) and ":" not in port and not any(c.isspace() for c in component)


def blames(d: Diagnosis, topology: list[tuple] | None) -> list[Blame]:
    """The subjects a diagnosis blames (root: its affected hosts, their switch ports in the
    attempt's topology, the switch ports its verdict names) and those that only showed its
    cascade (the other hosts with cascade symptoms, and their ports)."""
    ports: dict[str, set[str]] = {}
    for switch, port, peer, peer_kind, _hca in topology or []:
        if peer_kind == "host":
            ports.setdefault(peer, set()).add(f"{switch}:{port}")
    root_nodes = set(d.affected_nodes)
    cascade_nodes = {s.node for s in d.symptoms if s.role == Role.cascade and s.node} - root_nodes
    root_ports = {c for c in d.affected_components if is_switch_port(c)}
    root_ports |= {p for n in root_nodes for p in ports.get(n, ())}
    cascade_ports = {p for n in cascade_nodes for p in ports.get(n, ())} - root_ports
    return [
        *(Blame("node", n, "root") for n in sorted(root_nodes)),
        *(Blame("switch_port", p, "root") for p in sorted(root_ports)),
        *(Blame("node", n, "cascade") for n in sorted(cascade_nodes)),
        *(Blame("switch_port", p, "cascade") for p in sorted(cascade_ports)),
    ]


def insert_blames(con: duckdb.DuckDBPyConnection, d: Diagnosis, rows: list[Blame]) -> None:
    if not rows:
        return
    a = d.attempt
    symptom = d.root_cause.symptom if d.root_cause else None
    con.execute(
        """INSERT INTO blame_history
           SELECT $cluster, unnest($kind), unnest($subject), unnest($role), $end, $scheduler, $job, $attempt, $id,
                  $symptom""",
        {
            "cluster": a.cluster,
            "kind": [r.kind for r in rows],
            "subject": [r.subject for r in rows],
            "role": [r.role for r in rows],
            "end": a.end,
            "scheduler": a.scheduler,
            "job": a.job_id,
            "attempt": a.attempt,
            "id": d.diagnosis_id,
            "symptom": symptom,
        },
    )


def recall(con: duckdb.DuckDBPyConnection, d: Diagnosis, subjects: list[Blame], listed: int) -> list[SubjectHistory]:
    """What the warehouse holds of each subject in the 30 days ending at the attempt's end, other
    attempts only: counts as root and cascade in 7 and 30 days, when last, the latest `listed`."""
    subjects = subjects[:MAX_SUBJECTS]
    if not subjects:
        return []
    end = d.attempt.end
    where, args = _where(d, subjects, end)
    counts = con.execute(
        f"""SELECT kind, subject, role, count(*) FILTER (WHERE end_time > ?::TIMESTAMPTZ), count(*), max(end_time)
            FROM blame_history WHERE {where} GROUP BY ALL""",
        [end - timedelta(days=DAYS[0]), *args],
    ).fetchall()
    rows = con.execute(
        f"""SELECT kind, subject, cluster, job_id, attempt, role, end_time, symptom, diagnosis_id
            FROM blame_history WHERE {where}
            QUALIFY row_number() OVER (PARTITION BY kind, subject ORDER BY end_time DESC, role DESC, job_id) <= ?
            ORDER BY kind, subject, end_time DESC, role DESC, job_id""",
        [*args, listed],
    ).fetchall()
    return [_history(s, counts, rows) for s in subjects]


def _where(d: Diagnosis, subjects: list[Blame], end: datetime) -> tuple[str, list]:
    """Rows of these subjects in (end - 30 days, end], of other diagnoses. The time filter first:
    it is what skips the row groups of other months."""
    marks = ", ".join("?" for _ in subjects)
    where = (
        f"end_time > ?::TIMESTAMPTZ AND end_time <= ?::TIMESTAMPTZ AND cluster = ? AND subject IN ({marks}) "
        "AND diagnosis_id <> ?"
    )
    return where, [
        end - timedelta(days=DAYS[1]),
        end,
        d.attempt.cluster,
        *(s.subject for s in subjects),
        d.diagnosis_id,
    ]


def _history(s: Blame, counts: list[tuple], rows: list[tuple]) -> SubjectHistory:
    mine = {r[2]: r[3:] for r in counts if (r[0], r[1]) == (s.kind, s.subject)}
    root, cascade = mine.get("root", (0, 0, None)), mine.get("cascade", (0, 0, None))
    listed = [
        PastAttempt(cluster=r[2], job_id=r[3], attempt=r[4], role=r[5], end=r[6], symptom=r[7], diagnosis_id=r[8])
        for r in rows
        if (r[0], r[1]) == (s.kind, s.subject)
    ]
    return SubjectHistory(
        kind=s.kind,
        subject=s.subject,
        root_7d=root[0],
        root_30d=root[1],
        cascade_7d=cascade[0],
        cascade_30d=cascade[1],
        last_root=root[2],
        last_cascade=cascade[2],
        attempts=listed,
        more=root[1] + cascade[1] - len(listed),
    )


def sort_history(con: duckdb.DuckDBPyConnection) -> int:
    """Rewrite blame_history ordered by subject (a DuckDB file's nightly maintenance): a subject's
    rows then sit in a few row groups, which its lookups alone read. Rows rewritten."""
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(
            "CREATE TEMP TABLE sorted_history AS SELECT * FROM blame_history ORDER BY cluster, subject, end_time"
        )
        con.execute("DELETE FROM blame_history")
        con.execute("INSERT INTO blame_history SELECT * FROM sorted_history ORDER BY cluster, subject, end_time")
        n = con.execute("SELECT count(*) FROM sorted_history").fetchone()
        con.execute("DROP TABLE sorted_history")
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return int(n[0]) if n else 0
