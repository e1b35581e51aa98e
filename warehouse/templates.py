"""An attempt's log templates in the warehouse (`attempt_templates`, schema v8): written with its
diagnosis and replaced with it (writer.py), read back as a baseline (the job's last good attempt),
as the fleet's record of how many attempts logged a template, and by `attribution diff`.

The rows are plain data here: tasks/templates.py reads the bundle, tasks/novelty.py decides which
attempts keep them and what is novel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import duckdb

from workload_attribution.contracts.models import AttemptScope, Diagnosis

_COLUMNS = (
    "template, level, count, source, node, first_ref, first_line, first_time, first_text, lines_read, templates_total"
)


@dataclass(frozen=True)
class TemplateRow:
    template: str
    level: str
    count: int
    source: str | None
    node: str | None
    first_ref: str
    first_line: int
    first_time: datetime | None
    first_text: str


@dataclass
class AttemptTemplates:
    """What one attempt keeps: its rows (at most the cap), and what they were taken from."""

    rows: list[TemplateRow] = field(default_factory=list)
    lines_read: int = 0
    templates_total: int = 0


@dataclass(frozen=True)
class StoredAttempt:
    """An attempt whose templates the warehouse holds."""

    cluster: str
    scheduler: str
    job_id: str
    attempt: int
    diagnosis_id: str
    end_time: datetime | None
    terminal_state: str

    def describe(self) -> str:
        return f"{self.cluster}/{self.scheduler} job {self.job_id} attempt {self.attempt}"


def insert_templates(con: duckdb.DuckDBPyConnection, d: Diagnosis, kept: AttemptTemplates | None) -> None:
    """The attempt's template rows, in the diagnosis' transaction (its delete removed the old ones)."""
    if kept is None or not kept.rows:
        return
    a, rows = d.attempt, kept.rows
    con.execute(
        """
        INSERT INTO attempt_templates
        SELECT $cluster, $scheduler, $job, $attempt, $id, $name, $end, $state,
               unnest($template), unnest($level), unnest($count), unnest($source), unnest($node), unnest($ref),
               unnest($line), unnest($time)::TIMESTAMPTZ, unnest($text), $lines, $total
        """,
        {
            "cluster": a.cluster,
            "scheduler": a.scheduler,
            "job": a.job_id,
            "attempt": a.attempt,
            "id": d.diagnosis_id,
            "name": a.name,
            "end": a.end,
            "state": d.terminal_state.value,
            "template": [r.template for r in rows],
            "level": [r.level for r in rows],
            "count": [r.count for r in rows],
            "source": [r.source for r in rows],
            "node": [r.node for r in rows],
            "ref": [r.first_ref for r in rows],
            "line": [r.first_line for r in rows],
            "time": [r.first_time for r in rows],
            "text": [r.first_text for r in rows],
            "lines": kept.lines_read,
            "total": kept.templates_total,
        },
    )


def last_good(
    con: duckdb.DuckDBPyConnection, scope: AttemptScope, exclude_diagnosis: str | None = None
) -> StoredAttempt | None:
    """The job's last attempt that ended well (terminal state completed) with templates kept, ending
    no later than this one: the same job id first, else the same job name in the same cluster (a job
    resubmitted under a new id); this attempt itself never."""
    row = con.execute(
        """
        SELECT DISTINCT cluster, scheduler, job_id, attempt, diagnosis_id, end_time, terminal_state,
               job_id = $job AND scheduler = $scheduler AS same_job
        FROM attempt_templates
        WHERE cluster = $cluster AND terminal_state = 'completed'
          AND (job_id = $job AND scheduler = $scheduler OR ($name IS NOT NULL AND job_name = $name))
          AND NOT (job_id = $job AND scheduler = $scheduler AND attempt = $attempt)
          AND diagnosis_id <> $exclude
          AND (end_time IS NULL OR end_time <= $end::TIMESTAMPTZ)
        ORDER BY same_job DESC, end_time DESC NULLS LAST, attempt DESC, diagnosis_id
        LIMIT 1
        """,
        {
            "cluster": scope.cluster,
            "scheduler": scope.scheduler,
            "job": scope.job_id,
            "attempt": scope.attempt,
            "name": scope.name,
            "end": scope.end,
            "exclude": exclude_diagnosis or "",
        },
    ).fetchone()
    return StoredAttempt(*row[:7]) if row else None


def rows_of(con: duckdb.DuckDBPyConnection, diagnosis_id: str) -> AttemptTemplates:
    """An attempt's stored templates, the most frequent first."""
    found = con.execute(
        f"SELECT {_COLUMNS} FROM attempt_templates WHERE diagnosis_id = ? ORDER BY count DESC, template",
        [diagnosis_id],
    ).fetchall()
    out = AttemptTemplates()
    for r in found:
        out.rows.append(TemplateRow(*r[:9]))
        out.lines_read, out.templates_total = int(r[9] or 0), int(r[10] or 0)
    return out


def fleet_counts(
    con: duckdb.DuckDBPyConnection, templates: list[str], end: datetime, days: int, exclude: list
) -> tuple[int, dict[str, int]]:
    """Of the other attempts with templates kept whose end falls in the `days` before `end` (any
    cluster): how many there are, and how many logged each of `templates`. `exclude`: this attempt's
    key (cluster, scheduler, job_id, attempt)."""
    args = {
        "since": end - timedelta(days=days),
        "end": end,
        "c": exclude[0],
        "s": exclude[1],
        "j": exclude[2],
        "a": exclude[3],
    }
    window = (
        "end_time > $since::TIMESTAMPTZ AND end_time <= $end::TIMESTAMPTZ "
        "AND NOT (cluster = $c AND scheduler = $s AND job_id = $j AND attempt = $a)"
    )
    total = con.execute(
        f"SELECT count(*) FROM (SELECT DISTINCT diagnosis_id FROM attempt_templates WHERE {window})", args
    ).fetchone()
    if not total or not total[0] or not templates:
        return int(total[0]) if total else 0, {}
    counts = con.execute(
        f"""
        SELECT t.template, count(DISTINCT t.diagnosis_id)
        FROM attempt_templates t SEMI JOIN (SELECT unnest($templates) AS template) w USING (template)
        WHERE {window.replace("end_time", "t.end_time")}
        GROUP BY t.template
        """,
        {**args, "templates": templates},
    ).fetchall()
    return int(total[0]), {t: int(n) for t, n in counts}


def find_attempt(con: duckdb.DuckDBPyConnection, name: str) -> StoredAttempt | None:
    """An attempt with templates kept, named by its diagnosis id or as [CLUSTER/]JOB_ID[#ATTEMPT]
    (the latest attempt of the job when no #ATTEMPT; the latest end when several clusters match)."""
    query = """
        SELECT DISTINCT cluster, scheduler, job_id, attempt, diagnosis_id, end_time, terminal_state
        FROM attempt_templates WHERE {where}
        ORDER BY end_time DESC NULLS LAST, attempt DESC, cluster LIMIT 1
    """
    row = con.execute(query.format(where="diagnosis_id = ?"), [name]).fetchone()
    if row:
        return StoredAttempt(*row)
    job, _, attempt = name.partition("#")
    if attempt and not attempt.isdigit():
        return None
    # a Kueue job id holds a slash (namespace/name): the whole first, then CLUSTER/JOB_ID
    readings = [("", job)] + ([tuple(job.split("/", 1))] if "/" in job else [])
    for cluster, job_id in readings:
        where = ["job_id = ?"]
        args: list = [job_id]
        if cluster:
            where.append("cluster = ?")
            args.append(cluster)
        if attempt:
            where.append("attempt = ?")
            args.append(int(attempt))
        row = con.execute(query.format(where=" AND ".join(where)), args).fetchone()
        if row:
            return StoredAttempt(*row)
    return None


def has_table(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether this warehouse has attempt_templates (a writer of schema v8 or later opened it)."""
    found = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'attempt_templates'").fetchone()
    return bool(found and found[0])
