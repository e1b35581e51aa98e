"""The `actions` table (schema/005_actions.sql): the action sinks' decisions, recorded, updated
with their outcome, and read back for the guard, `attribution actions list` and `undo`.

Deciding is one transaction: the cluster's history is read, the new decisions made from it and
inserted, so two deciders never both take the last node a limit allows. A file has one writer at a
time; on a lake, each decision also rewrites the cluster's row of warehouse_meta, so two
concurrent decisions for one cluster conflict and the loser is retried (conflicts.retry) against
the winner's rows. Callers hold backends.WRITE_LOCK, as for every write.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import duckdb

from workload_attribution.contracts.actions import IN_FORCE, ActionHistory, ActionRecord
from workload_attribution.warehouse.conflicts import rollback

COLUMNS = list(ActionRecord.model_fields)
_IN_FORCE = ", ".join(f"'{o.value}'" for o in sorted(IN_FORCE))
_FIELDS = ", ".join(f"a.{c}" for c in COLUMNS)


def _row(record: ActionRecord) -> list[Any]:
    doc = record.model_dump(mode="python")
    doc["details"] = json.dumps(doc["details"], default=str)
    doc["outcome"] = record.outcome.value
    return [doc[c] for c in COLUMNS]


def _record(values: tuple[Any, ...]) -> ActionRecord:
    doc = dict(zip(COLUMNS, values))
    doc["details"] = json.loads(doc["details"]) if doc["details"] else {}
    doc["reason"] = doc["reason"] or ""
    doc["tries"] = doc["tries"] or 0
    return ActionRecord.model_validate(doc)


def numbered(records: list[ActionRecord]) -> list[ActionRecord]:
    """The records with `seq` their place in the list: the order they were decided in."""
    return [r.model_copy(update={"seq": i}) for i, r in enumerate(records)]


def insert_actions(con: duckdb.DuckDBPyConnection, records: list[ActionRecord]) -> None:
    if records:
        con.executemany(
            f"INSERT INTO actions ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
            [_row(r) for r in records],
        )


def history(
    con: duckdb.DuckDBPyConnection, cluster: str, diagnosis_id: str, dry_run: bool, since: datetime
) -> ActionHistory:
    """The cluster's nodes isolated since `since`, what stands (the cluster's isolations and every
    record of this diagnosis in force, in this mode: dry-run records for a dry run), and which of
    this diagnosis' isolations are flagged for undo already."""
    recent = con.execute(
        f"""SELECT DISTINCT node FROM actions a WHERE cluster = $c AND isolates AND node IS NOT NULL
            AND dry_run = $dry AND decided_at >= $since AND a.outcome IN ({_IN_FORCE})""",
        {"c": cluster, "dry": dry_run, "since": since},
    ).fetchall()
    standing = con.execute(  # what stands: views/actions_in_force.sql
        f"""SELECT {_FIELDS} FROM actions_in_force a
            WHERE a.cluster = $c AND a.dry_run = $dry AND (a.isolates OR a.diagnosis_id = $d)
            ORDER BY a.decided_at, a.seq""",
        {"c": cluster, "dry": dry_run, "d": diagnosis_id},
    ).fetchall()
    flagged = con.execute(
        "SELECT reverts FROM actions WHERE cluster = $c AND diagnosis_id = $d AND outcome = 'flagged'",
        {"c": cluster, "d": diagnosis_id},
    ).fetchall()
    return ActionHistory(
        recent={r[0] for r in recent}, standing=[_record(r) for r in standing], flagged={r[0] for r in flagged}
    )


def decide(
    con: duckdb.DuckDBPyConnection,
    cluster: str,
    diagnosis_id: str,
    dry_run: bool,
    since: datetime,
    plan: Callable[[ActionHistory], list[ActionRecord]],
) -> list[ActionRecord]:
    """Read the history, make the decisions from it (`plan`), record them: one transaction."""
    con.execute("BEGIN TRANSACTION")
    try:
        records = numbered(plan(history(con, cluster, diagnosis_id, dry_run, since)))
        insert_actions(con, records)
        key = f"actions:{cluster}"  # the row two concurrent deciders of one cluster both rewrite (a lake's conflict)
        con.execute("DELETE FROM warehouse_meta WHERE key = ?", [key])
        con.execute("INSERT INTO warehouse_meta VALUES (?, ?)", [key, diagnosis_id])
        con.execute("COMMIT")
    except Exception:
        rollback(con)
        raise
    return records


def finish(con: duckdb.DuckDBPyConnection, records: list[ActionRecord]) -> None:
    """Each record's outcome, reason, tries, details and end, once the sink has answered."""
    con.execute("BEGIN TRANSACTION")
    try:
        for r in records:
            con.execute(
                """UPDATE actions SET outcome = ?, reason = ?, tries = ?, details = ?, finished_at = ?
                   WHERE action_id = ?""",
                [r.outcome.value, r.reason, r.tries, json.dumps(r.details, default=str), r.finished_at, r.action_id],
            )
        con.execute("COMMIT")
    except Exception:
        rollback(con)
        raise


def select(
    con: duckdb.DuckDBPyConnection,
    cluster: str | None = None,
    diagnosis_id: str | None = None,
    since: datetime | None = None,
    in_force: bool = False,
    limit: int | None = None,
) -> list[ActionRecord]:
    """Records, newest last, filtered: a cluster, a diagnosis, decided since, in force only."""
    where = "($cluster IS NULL OR a.cluster = $cluster) AND ($d IS NULL OR a.diagnosis_id = $d)"
    where += " AND ($since IS NULL OR a.decided_at >= $since)"
    table = "actions_in_force" if in_force else "actions"
    sql = f"SELECT {_FIELDS} FROM {table} a WHERE {where}"
    sql += " ORDER BY a.decided_at DESC, a.seq DESC" + (f" LIMIT {int(limit)}" if limit else "")
    rows = con.execute(sql, {"cluster": cluster, "d": diagnosis_id, "since": since}).fetchall()
    return [_record(r) for r in reversed(rows)]
