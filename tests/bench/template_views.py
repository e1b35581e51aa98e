"""The views over log templates at fleet scale: a warehouse of a million diagnoses, the share of them
that keep templates (attempt_templates: completed and doubtful attempts), and how fast each view
that reads them answers, cold and warm; the warehouse's size per attempt.

    python -m tests.bench.template_views [--diagnoses 1000000] [--hosts 10000] [--days 42] [--runs 5]
    python -m tests.bench.template_views --warehouse /tmp/t.duckdb --keep   # keep the file; reuse it next time

Writes, through the project's schema (a Warehouse's migrations) and in bulk (DuckDB SQL: INSERT ...
SELECT over range(), no Python loop over rows), --diagnoses attempts ending over the --days before
now, on --hosts hosts in four clusters (32 to a leaf switch port, 1% recabled to a spare port
during the window: tests/bench/fleet_lake.py's topology), 250k jobs of four attempts and 5,000 job
names. As the writer keeps them, the attempts that keep templates are those that ended well (8%)
and the doubtful ones (insufficient_evidence 4%, ambiguous 2%, and low confidence: about 17% in
all), each with 20-200 templates (110 on average), drawn from a vocabulary where most are common
(6,000 templates: 50 kinds of workload logging each a skewed choice of them), 1.5% are rare
(150,000 others, a few attempts each) and 0.2% of this week's rows are one of 40 templates no
earlier attempt logged.

Then times, --runs times each, median: every view whose SQL reads attempt_templates (as
`attribution query VIEW --limit 0`: the whole result, through the warehouse's sandboxed reader),
cold (a fresh reader connection's first execution: DuckDB's buffers empty, the file in the page
cache) and warm (the same again on that connection); the novelty lookups `novel` makes for a
doubtful attempt of this week (the job's last good attempt, its rows, the fleet's counts of its
templates in 30 days: tasks/novelty.py); and `rules suggest`'s read of the last 30 days
(tasks/suggest.py). Prints a markdown table, the file's size per attempt, the load average before.
Exit status 1 when a view's median, cold or warm, passes --budget seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

from workload_attribution.contracts.models import AttemptScope
from workload_attribution.tasks import novelty, suggest
from workload_attribution.warehouse.schema import VIEWS_DIR
from workload_attribution.warehouse.store import Warehouse
from workload_attribution.warehouse.templates import fleet_counts, last_good, rows_of

MACROS = [
    "CREATE OR REPLACE TEMP MACRO u(i, salt) AS (hash(i, salt) % 1000003)::DOUBLE / 1000003",
    "CREATE OR REPLACE TEMP MACRO host(h) AS 'gpu-' || lpad(h::VARCHAR, 5, '0')",
]

# One row per attempt, in memory first; $start: the window's first end, $span: its microseconds.
ATTEMPTS = """
CREATE OR REPLACE TEMP TABLE fleet_attempts AS
WITH a AS (
    SELECT i, u(i, 'state') AS s, u(i, 'sub') AS t, u(i, 'conf') AS c,
           [1, 1, 2, 4, 8, 16][1 + (hash(i, 'size') % 6)::INTEGER] AS k, (hash(i, 'host') % $hosts)::BIGINT AS h0
    FROM range($n) r(i)
), states AS (
    SELECT *,
        CASE WHEN s < 0.50 THEN 'application_failure' WHEN s < 0.63 THEN 'hardware_failure'
             WHEN s < 0.75 THEN 'infrastructure_failure' WHEN s < 0.83 THEN 'scheduler_action'
             WHEN s < 0.92 THEN 'unknown' ELSE 'completed' END AS terminal_state
    FROM a
)
SELECT i, 'd' || lpad(i::VARCHAR, 8, '0') AS diagnosis_id, 'fleet-' || (h0 * 4 // $hosts)::VARCHAR AS cluster,
       'job-' || (i // 4)::VARCHAR AS job_id, (i % 4)::INTEGER AS attempt,
       'train-' || (hash(i // 4, 'name') % 5000)::VARCHAR AS job_name, (hash(i // 4, 'name') % 50) AS kind,
       terminal_state,
       CASE terminal_state
           WHEN 'hardware_failure' THEN 'gpu' WHEN 'infrastructure_failure' THEN 'network_link'
           WHEN 'application_failure' THEN 'user_code' WHEN 'scheduler_action' THEN 'time_limit'
           WHEN 'unknown' THEN CASE WHEN t < 0.33 THEN 'hang' WHEN t < 0.78 THEN 'insufficient_evidence'
                               ELSE 'ambiguous' END
           ELSE 'none' END AS sub_domain,
       CASE WHEN terminal_state = 'completed' THEN 'high' WHEN c < 0.04 THEN 'low' WHEN c < 0.3 THEN 'medium'
            ELSE 'high' END AS confidence,
       k, h0, list_transform(range(k), x -> host((h0 + x) % $hosts)) AS nodes,
       $start::TIMESTAMPTZ + to_microseconds(i * ($span // $n)) AS end_time
FROM states
"""

DIAGNOSES = """
INSERT INTO diagnoses
SELECT cluster, 'slurm', job_id, attempt, diagnosis_id, job_name, 'user' || (hash(i, 'user') % 2000)::VARCHAR,
       CASE WHEN terminal_state = 'completed' THEN 'COMPLETED' ELSE 'FAILED' END, '1',
       end_time - to_minutes((10 + hash(i, 'dur') % 2000)::BIGINT), end_time, nodes,
       terminal_state, sub_domain, confidence, NULL,
       CASE WHEN terminal_state IN ('hardware_failure', 'infrastructure_failure') THEN nodes[1] END,
       NULL, end_time - INTERVAL 5 MINUTE, 'none', 'generated by tests/bench/template_views.py',
       '2026.12.1', 0, end_time + INTERVAL 1 MINUTE, json_object('generated', true)
FROM fleet_attempts ORDER BY i
"""

# The writer's rule (tasks/novelty.py keeps_templates): an attempt that ended well, or doubtful.
KEEPS = """
CREATE OR REPLACE TEMP TABLE keeping AS
SELECT *, 20 + hash(i, 'templates') % 181 AS m FROM fleet_attempts
WHERE terminal_state = 'completed' OR sub_domain IN ('insufficient_evidence', 'ambiguous') OR confidence = 'low'
"""

# What a template looks like: a real line's shape, what varies masked, and its number in the vocabulary.
SHAPES = [
    "NCCL INFO Channel <*>/<*> : <*>[<*>] -> <*>[<*>] via P2P/IPC/read",
    "[rank<*>]: Epoch <*> step <*>/<*> loss <*> lr <*> grad_norm <*>",
    "kernel: [<*>] mlx5_core <*>: mlx5_port_module_event: Port module event: module <*>, Cable plugged",
    "systemd[<*>]: Started Session <*> of User <*>.",
    "torch.distributed.elastic: rank <*> reached barrier <*> after <*> s",
    "kernel: [<*>] NVRM: GPU at PCI:<*>: GPU-<*> persistence mode enabled",
    "slurmstepd: task/cgroup: _memcg_initialize: job: alloc=<*>MB mem.limit=<*>MB",
    "INFO:datasets: loading shard <*> of <*> from <*> (<*> MB)",
    "WARNING: checkpoint <*> took <*> s to write <*> bytes to <*>",
    "kernel: [<*>] infiniband mlx5_<*>: ib_port <*> state ACTIVE speed <*> Gb/s",
]
LEVEL = "CASE WHEN {id} % 20 = 0 THEN 'error' WHEN {id} % 10 = 1 THEN 'warning' ELSE 'info' END"

# k-th template of an attempt: one of 40 new ones (this week only, 0.2% of the week's rows), a rare
# one (1.5%), else a common one: its workload kind's k-th (distinct within an attempt; the low k
# every attempt logs, the high k only the chattiest: most rows are the vocabulary's commonest).
TEMPLATES = f"""
INSERT INTO attempt_templates
WITH rows AS (
    SELECT a.*, r.k AS n,
           CASE WHEN a.end_time >= date_trunc('week', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                     AND u(a.i * 1000 + r.k, 'new') < 0.002 THEN 'new'
                WHEN u(a.i * 1000 + r.k, 'rare') < 0.015 THEN 'rare' ELSE 'common' END AS kind_of,
           CASE kind_of WHEN 'new' THEN hash(a.i, r.k, 'new') % 40
                        WHEN 'rare' THEN hash(a.i, r.k, 'rare') % 150000
                        ELSE (r.k * 7919 + a.kind * 997) % 6000 END AS id
    FROM keeping a, range(200) r(k) WHERE r.k < a.m
), shaped AS (
    SELECT *, $shapes[1 + (id % {len(SHAPES)})::INTEGER] || ' #' || kind_of || '-' || id::VARCHAR AS template,
           host((h0 + n % k) % $hosts) AS node
    FROM rows
)
SELECT cluster, 'slurm', job_id, attempt, diagnosis_id, job_name, end_time, terminal_state, template,
       CASE kind_of WHEN 'common' THEN {LEVEL.format(id="id")} WHEN 'rare' THEN {LEVEL.format(id="(id // 4)")}
            ELSE 'error' END,
       1 + hash(i, n, 'count') % (5000 // (1 + n)), 'app', node, 'logs/app/' || node || '.log',
       1 + hash(i, n, 'line') % 100000, end_time - to_seconds((60 + hash(i, n, 'at') % 3600)::BIGINT),
       '2026-12-06T10:00:00.000Z ' || node || ' ' || replace(template, '<*>', (n * 17 + 3)::VARCHAR),
       100000 + hash(i, 'lines') % 900000, m + hash(i, 'more') % 50
FROM shaped ORDER BY i, n
"""

# fleet_lake.py's topology: every host on its leaf's port, 4 uplinks a leaf, 1% of hosts recabled
# to a spare port (p37-p40) in the window
TOPOLOGY = """
INSERT INTO topology_links
SELECT 'fleet-' || (h * 4 // $hosts)::VARCHAR, 'leaf-' || lpad((h // 32)::VARCHAR, 4, '0'),
       'p' || (1 + h % 32)::VARCHAR, host(h), 'host', 'mlx5_0', $start::TIMESTAMPTZ - INTERVAL 30 DAY, 'generated'
FROM range($hosts) r(h)
UNION ALL
SELECT 'fleet-' || (l * 32 * 4 // $hosts)::VARCHAR, 'leaf-' || lpad(l::VARCHAR, 4, '0'),
       'p' || (33 + up)::VARCHAR, 'spine-' || ((l + up) % 64)::VARCHAR, 'switch', NULL,
       $start::TIMESTAMPTZ - INTERVAL 30 DAY, 'generated'
FROM range(($hosts + 31) // 32) r(l), range(4) s(up)
UNION ALL
SELECT 'fleet-' || (h * 4 // $hosts)::VARCHAR, 'leaf-' || lpad((h // 32)::VARCHAR, 4, '0'),
       'p' || (37 + h % 4)::VARCHAR, host(h), 'host', 'mlx5_0',
       $start::TIMESTAMPTZ + to_microseconds((hash(h, 'move') % $span)::BIGINT), 'generated'
FROM range($hosts) r(h) WHERE hash(h, 'moved') % 100 = 0
"""


def checkpointed_size(wh: Warehouse) -> int:
    with wh.connect() as con:
        con.execute("CHECKPOINT")
    return wh.path.stat().st_size


def generate(wh: Warehouse, n: int, hosts: int, days: int) -> dict[str, float]:
    """The fleet, into an empty warehouse file; bytes and counts for the size per attempt."""
    now = datetime.now(timezone.utc)
    span = days * 86_400_000_000
    params = {"n": n, "hosts": hosts, "start": now - timedelta(days=days), "span": span, "shapes": SHAPES}
    with wh.connect() as con:
        if con.execute("SELECT count(*) FROM diagnoses").fetchone()[0]:  # type: ignore[index]
            sys.exit(f"{wh} already holds diagnoses: generate into an empty warehouse (or leave out --warehouse)")
        for macro in MACROS:
            con.execute(macro)
        for name, sql in [
            ("fleet_attempts", ATTEMPTS),
            ("diagnoses", DIAGNOSES),
            ("topology_links", TOPOLOGY),
            ("keeping", KEEPS),
        ]:
            t = time.perf_counter()
            con.execute(sql, {k: v for k, v in params.items() if f"${k}" in sql})
            rows = con.execute(f"SELECT count(*) FROM {name}").fetchone()[0]  # type: ignore[index]
            print(f"  {name:20} {rows:>12,} rows {time.perf_counter() - t:7.1f} s", flush=True)
    out: dict[str, float] = {"without_templates": checkpointed_size(wh)}
    with wh.connect() as con:
        for macro in MACROS:
            con.execute(macro)
        con.execute(ATTEMPTS, {k: v for k, v in params.items() if f"${k}" in ATTEMPTS})
        con.execute(KEEPS)
        t = time.perf_counter()
        con.execute(TEMPLATES, {k: v for k, v in params.items() if f"${k}" in TEMPLATES})
        rows = con.execute("SELECT count(*) FROM attempt_templates").fetchone()[0]  # type: ignore[index]
        print(f"  {'attempt_templates':20} {rows:>12,} rows {time.perf_counter() - t:7.1f} s", flush=True)
        out["keeping"] = con.execute("SELECT count(*) FROM keeping").fetchone()[0]  # type: ignore[index]
        out["rows"] = rows
    out["with_templates"] = checkpointed_size(wh)
    return out


def template_views() -> list[str]:
    """The analyst views whose SQL reads attempt_templates."""
    return sorted(f.stem for f in VIEWS_DIR.glob("*.sql") if "attempt_templates" in f.read_text())


def cold_warm(wh: Warehouse, work: Callable, runs: int) -> tuple[float, float, float, float, int]:
    """Median seconds of `work(con)` on a fresh reader connection (cold) and again on it (warm),
    wall then CPU (user + system of every thread of this process: on a shared machine, wall time
    is the other processes' as much as ours), and what the last run returned (rows)."""
    cold, warm, cold_cpu, warm_cpu, got = [], [], [], [], 0
    for _ in range(runs):
        with wh.reader() as con:
            for wall, cpu in ((cold, cold_cpu), (warm, warm_cpu)):
                t, c = time.perf_counter(), time.process_time()
                got = work(con)
                wall.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
    return (*(statistics.median(x) for x in (cold, warm, cold_cpu, warm_cpu)), got)  # type: ignore[return-value]


def whole(view: str) -> Callable:
    def read(con) -> int:
        con.execute(f'CREATE OR REPLACE TEMP TABLE view_result AS SELECT * FROM "{view}"')
        return con.execute("SELECT count(*) FROM view_result").fetchone()[0]

    return read


def lookups(scope: AttemptScope, diagnosis_id: str) -> Callable:
    """What tasks/novelty.py's `novel` asks the warehouse for a doubtful attempt (its lookup)."""

    def read(con) -> int:
        base = last_good(con, scope, diagnosis_id)
        mine = rows_of(con, diagnosis_id)
        known = {r.template for r in rows_of(con, base.diagnosis_id).rows} if base else set()
        candidates = sorted(r.template for r in mine.rows if r.template not in known)
        key = [scope.cluster, scope.scheduler, scope.job_id, scope.attempt]
        total, counts = fleet_counts(con, candidates, scope.end, novelty.FLEET_DAYS, key)
        return len(counts)

    return read


def doubtful_of_this_week(wh: Warehouse) -> tuple[AttemptScope, str]:
    """A doubtful attempt of the last day whose job has an earlier attempt that ended well, else any."""
    with wh.reader() as con:
        row = con.execute(
            """
            SELECT d.cluster, d.job_id, d.attempt, d.job_name, d.nodes, d.start_time, d.end_time, d.diagnosis_id
            FROM diagnoses d
            WHERE d.sub_domain = 'insufficient_evidence' AND d.end_time > now() - INTERVAL 1 DAY
            ORDER BY EXISTS (SELECT 1 FROM diagnoses g WHERE g.job_id = d.job_id AND g.attempt < d.attempt
                                AND g.terminal_state = 'completed') DESC, d.end_time DESC
            LIMIT 1
            """
        ).fetchone()
    assert row, "no insufficient_evidence attempt in the last day"
    scope = AttemptScope(
        cluster=row[0],
        scheduler="slurm",
        job_id=row[1],
        attempt=row[2],
        name=row[3],
        nodes=row[4],
        start=row[5],
        end=row[6],
        state="FAILED",
    )
    return scope, row[7]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--diagnoses", type=int, default=1_000_000)
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--days", type=int, default=42, help="the attempts' ends spread over the days before now")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--budget", type=float, default=2.0, help="seconds a view may take (the exit status)")
    ap.add_argument("--warehouse", help="a DuckDB file to write (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep --warehouse, and reuse it when it holds a fleet")
    ap.add_argument("--no-suggest", action="store_true", help="leave out `rules suggest`'s read (10 s a run)")
    a = ap.parse_args(argv)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-template-views-") as tmp:
        path = Path(a.warehouse) if a.warehouse else Path(tmp) / "w.duckdb"
        wh = Warehouse(path)
        if a.keep and path.exists():
            print(f"{path}: reused", flush=True)
            sizes = None
        else:
            path.unlink(missing_ok=True)
            print(f"{path}: generating {a.diagnoses:,} diagnoses on {a.hosts:,} hosts over {a.days} days", flush=True)
            t = time.perf_counter()
            sizes = generate(wh, a.diagnoses, a.hosts, a.days)
            print(f"  generated in {time.perf_counter() - t:.0f} s", flush=True)
        with wh.connect():
            pass  # the views brought to this code's version (a reused file from an older one)
        since = datetime.now(timezone.utc) - timedelta(days=30)
        scope, did = doubtful_of_this_week(wh)
        reads = [(f"`{view}` (every row)", whole(view)) for view in template_views()]
        reads.append(("`novel`'s lookups: last good attempt, its rows, fleet counts in 30 days", lookups(scope, did)))
        if not a.no_suggest:
            suggested = lambda con: len(suggest.read(con, since)[0])  # noqa: E731
            reads.append(("`rules suggest --since 30d`: its read (tasks/suggest.py)", suggested))
        results: list[tuple[str, float, float, float, float, int]] = []
        for name, work in reads:
            results.append((name, *cold_warm(wh, work, a.runs)))
            _, cold, warm, cold_cpu, warm_cpu, rows = results[-1]
            print(
                f"  {name[:60]:60} cold {cold:6.2f} s (CPU {cold_cpu:5.2f})  warm {warm:6.2f} s (CPU {warm_cpu:5.2f})"
                f"  {rows:>9,}",
                flush=True,
            )
        size = path.stat().st_size
    print(
        f"\n{a.diagnoses:,} diagnoses, {a.hosts:,} hosts, {a.days} days; median of {a.runs} runs; "
        f"{os.cpu_count()} cores, load average before {load:.2f}"
    )
    if sizes:
        kept, rows = int(sizes["keeping"]), int(sizes["rows"])
        added = sizes["with_templates"] - sizes["without_templates"]
        print(
            f"warehouse file {size / 2**20:,.0f} MiB ({size / a.diagnoses / 1024:.2f} KiB a diagnosis); without "
            f"templates {sizes['without_templates'] / 2**20:,.0f} MiB; attempt_templates: {rows:,} rows of "
            f"{kept:,} attempts ({kept / a.diagnoses:.1%}) add {added / 2**20:,.0f} MiB: "
            f"{added / a.diagnoses / 1024:.2f} KiB a diagnosis, {added / kept / 1024:.1f} KiB an attempt keeping "
            f"templates, {added / rows:.0f} bytes a row\n"
        )
    print("| read | cold s | warm s | cold CPU s | warm CPU s | rows |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, cold, warm, cold_cpu, warm_cpu, rows in results:
        print(f"| {name} | {cold:.2f} | {warm:.2f} | {cold_cpu:.2f} | {warm_cpu:.2f} | {rows:,} |")
    slowest = max(max(r[1], r[2]) for r in results if r[0].endswith("(every row)"))
    return 0 if slowest <= a.budget else 1


if __name__ == "__main__":
    raise SystemExit(main())
