"""A year of a large fleet in the warehouse, and how fast every analyst view answers over it.

    python -m tests.bench.fleet_lake --warehouse /tmp/fleet.duckdb
    python -m tests.bench.fleet_lake --services disk,s3          # a private PostgreSQL (+ SeaweedFS): the lake twice
    python -m tests.bench.fleet_lake --warehouse 'ducklake+postgres://u@h:5432/db?data_path=s3://b/p/' \
        --diagnoses 1000000 --hosts 50000 --symptoms 20 --repeat 3

Writes, in bulk (DuckDB SQL: INSERT ... SELECT over range(), no Python loop over rows), a year of
diagnoses of a fleet of --hosts GPU hosts in four clusters, 32 hosts to a leaf switch:

  diagnoses                 --diagnoses rows over 2025, one per attempt, in the order attempts end
                            (half user code, 15% hardware, 12% infrastructure, ...; 1-16 nodes each)
  diagnosis_symptoms        --symptoms per diagnosis: the root (an XID for a GPU fault), contributing
                            and cascade symptoms, then context (ECC, NCCL, link flaps, the epilog)
  diagnosis_xids            the XID symptoms again, by code (as the writer writes them)
  diagnosis_affected_nodes  the blamed host of hardware and node faults
  diagnosis_affected_components   the switch port of a network_link failure
  diagnosis_coverage        four sources per attempt, ~6% of them not delivered
  rules_version_uses        one per diagnosis, a rules version a month
  topology_links            every host's leaf port, the leaves' uplinks, 1% of hosts recabled mid-year

with the skew a fleet has: 50 bad hosts carry 30% of the hardware failures, 20 bad switch ports 40%
of the link failures. Then it runs the warehouse's maintenance (a lake: flush, rewrite, merge,
expire, clean up) and times each analyst view (warehouse/views/) as `attribution query VIEW --limit
0` answers it: every row fetched through the warehouse's sandboxed reader, best of --repeat.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import duckdb

from workload_attribution.warehouse.store import Warehouse, views

PAGE = 1000  # interfaces/cli/query.py's DEFAULT_LIMIT
YEAR = "TIMESTAMPTZ '2025-01-01 00:00:00+00'"

# u(i, salt): a uniform number in [0, 1) that depends only on (i, salt): the same fleet every run
MACROS = [
    "CREATE OR REPLACE TEMP MACRO u(i, salt) AS (hash(i, salt) % 1000003)::DOUBLE / 1000003",
    "CREATE OR REPLACE TEMP MACRO host(h) AS 'gpu-' || lpad(h::VARCHAR, 5, '0')",
]

# One row per attempt, in memory first: every table is then written from it.
ATTEMPTS = f"""
CREATE OR REPLACE TEMP TABLE fleet_attempts AS
WITH a AS (
    SELECT i, u(i, 'state') AS s, u(i, 'sub') AS t, u(i, 'bad') AS b,
           [1, 1, 2, 4, 8, 16][1 + (hash(i, 'size') % 6)::INTEGER] AS k
    FROM range($n) r(i)
), placed AS (
    SELECT *,
        CASE WHEN s < 0.50 THEN 'application_failure' WHEN s < 0.65 THEN 'hardware_failure'
             WHEN s < 0.77 THEN 'infrastructure_failure' WHEN s < 0.87 THEN 'scheduler_action'
             WHEN s < 0.95 THEN 'unknown' ELSE 'completed' END AS terminal_state
    FROM a
), with_sub AS (
    SELECT *,
        CASE terminal_state
            WHEN 'hardware_failure' THEN CASE WHEN t < 0.45 THEN 'gpu' WHEN t < 0.70 THEN 'gpu_memory'
                 WHEN t < 0.80 THEN 'nvlink' WHEN t < 0.90 THEN 'nic' ELSE 'host' END
            WHEN 'infrastructure_failure' THEN CASE WHEN t < 0.40 THEN 'network_link' WHEN t < 0.60
                 THEN 'network_fabric' WHEN t < 0.85 THEN 'storage' ELSE 'node_unreachable' END
            WHEN 'application_failure' THEN CASE WHEN t < 0.55 THEN 'user_code' WHEN t < 0.75 THEN 'gpu_oom'
                 WHEN t < 0.85 THEN 'host_oom' WHEN t < 0.93 THEN 'numerical' ELSE 'gpu_app_error' END
            WHEN 'scheduler_action' THEN CASE WHEN t < 0.5 THEN 'time_limit' WHEN t < 0.8 THEN 'preemption'
                 ELSE 'cancelled' END
            WHEN 'unknown' THEN CASE WHEN t < 0.4 THEN 'hang' WHEN t < 0.8 THEN 'insufficient_evidence'
                 ELSE 'ambiguous' END
            ELSE 'none' END AS sub_domain
    FROM placed
), started AS (  -- the job's first host: a bad one for 30% of the hardware failures
    SELECT *,
        CASE WHEN terminal_state = 'hardware_failure' AND b < 0.30
             THEN (hash(i, 'badhost') % 50 * 997 % $hosts)::BIGINT
             ELSE (hash(i, 'host') % $hosts)::BIGINT END AS h0
    FROM with_sub
)
SELECT i, 'd' || lpad(i::VARCHAR, 8, '0') AS diagnosis_id, terminal_state, sub_domain, k,
       'fleet-' || (h0 * 4 // $hosts)::VARCHAR AS cluster,
       list_transform(range(k), x -> host((h0 + x) % $hosts)) AS nodes,
       h0,
       {YEAR} + to_microseconds(i * (31536000000000 // $n)) AS end_time,
       u(i, 'port') AS p,
       CASE sub_domain WHEN 'gpu' THEN 'xid_79' WHEN 'gpu_memory' THEN 'xid_48' WHEN 'nvlink' THEN 'xid_74'
            WHEN 'nic' THEN 'hca_error' WHEN 'network_link' THEN 'ib_link_down' WHEN 'user_code'
            THEN 'python_traceback' ELSE sub_domain END AS root_symptom
FROM started
"""

DIAGNOSES = """
INSERT INTO diagnoses
SELECT cluster, 'slurm', 'job-' || i::VARCHAR, 0, diagnosis_id,
       'train-' || (hash(i, 'name') % 500)::VARCHAR, 'user' || (hash(i, 'user') % 2000)::VARCHAR,
       CASE WHEN terminal_state = 'completed' THEN 'COMPLETED' ELSE 'FAILED' END, '1',
       end_time - to_minutes((10 + hash(i, 'dur') % 2000)::BIGINT), end_time, nodes,
       terminal_state, sub_domain, ['high', 'medium', 'low'][1 + (hash(i, 'conf') % 3)::INTEGER],
       root_symptom,
       CASE WHEN terminal_state IN ('hardware_failure', 'infrastructure_failure', 'application_failure')
            THEN nodes[1] END,
       CASE WHEN terminal_state = 'hardware_failure' THEN 'gpu0' END,
       end_time - INTERVAL 5 MINUTE,
       CASE WHEN terminal_state = 'hardware_failure' THEN 'drain the node' ELSE 'none' END,
       'generated by tests/bench/fleet_lake.py', '2025.' || month(end_time)::VARCHAR, 0,
       end_time + INTERVAL 1 MINUTE,
       json_object('generated', true, 'sub_domain', sub_domain)
FROM fleet_attempts ORDER BY i
"""

# Symptom names by rank: the root; then contributing and cascade symptoms (XIDs after a GPU fault,
# the cascade a job's failure leaves elsewhere); then a host's usual noise. XIDs come from faulting
# GPUs only, as on a real fleet: most attempts' logs have none.
SYMPTOMS = """
INSERT INTO diagnosis_symptoms
SELECT a.diagnosis_id,
       CASE WHEN r.j = 0 THEN a.root_symptom
            WHEN r.j <= 5 AND a.sub_domain IN ('gpu', 'gpu_memory', 'nvlink', 'gpu_app_error')
            THEN ['xid_13', 'xid_43', 'xid_31', 'xid_45', 'xid_94'][1 + ((r.j + hash(a.i, 'sym')) % 5)::INTEGER]
            WHEN r.j <= 5
            THEN ['nccl_timeout', 'cuda_error', 'ib_port_flap', 'oom_killer', 'nfs_timeout'][
                 1 + ((r.j + hash(a.i, 'sym')) % 5)::INTEGER]
            ELSE ['ecc_corrected', 'slurm_epilog', 'kernel_warning', 'dmesg_hung_task', 'pcie_aer', 'thermal',
                  'fabric_manager', 'watchdog', 'disk_io_error', 'link_retrain', 'ntp_step', 'sshd_session',
                  'container_pull', 'nvidia_persistenced', 'lustre_reconnect'][
                  1 + ((r.j + hash(a.i, 'sym')) % 15)::INTEGER] END,
       CASE WHEN r.j = 0 THEN 'root' WHEN r.j <= 2 THEN 'contributing' WHEN r.j <= 5 THEN 'cascade'
            ELSE 'context' END,
       a.nodes[1 + (r.j % a.k)::INTEGER], r.j, 'gpu' || (r.j % 8)::VARCHAR,
       a.end_time - to_minutes((5 + r.j * 3)::BIGINT), a.end_time - to_minutes(r.j::BIGINT),
       (1 + hash(a.i, r.j) % 40)::INTEGER, NULL, r.j < 6, 'rule_' || (r.j % 40)::VARCHAR
FROM fleet_attempts a, range($symptoms) r(j)
"""

# the XID symptoms again, by code (schema v7), as the writer writes them
XIDS = r"""
INSERT INTO diagnosis_xids
SELECT diagnosis_id, CAST(regexp_extract(symptom, '^xid_(\d+)$', 1) AS INTEGER), node, role, first_seen, count
FROM diagnosis_symptoms WHERE regexp_full_match(symptom, 'xid_\d+')
"""

AFFECTED_NODES = """
INSERT INTO diagnosis_affected_nodes
SELECT diagnosis_id, nodes[1] FROM fleet_attempts
WHERE terminal_state = 'hardware_failure' OR sub_domain IN ('node_unreachable', 'network_link')
ORDER BY i
"""

# The port a link failure blames: one of 20 bad ports for 40% of them, else the blamed host's own.
AFFECTED_COMPONENTS = """
INSERT INTO diagnosis_affected_components
SELECT diagnosis_id,
       CASE WHEN p < 0.40 THEN 'leaf-' || lpad((hash(i, 'badport') % 20 * 61 % ($hosts // 32))::VARCHAR, 4, '0')
                               || ':p' || (1 + hash(i, 'badport') % 20)::VARCHAR
            ELSE 'leaf-' || lpad((h0 // 32)::VARCHAR, 4, '0') || ':p' || (1 + h0 % 32)::VARCHAR END
FROM fleet_attempts WHERE sub_domain = 'network_link' ORDER BY i
"""

COVERAGE = """
INSERT INTO diagnosis_coverage
SELECT a.diagnosis_id, s.source, s.connector, st.status,
       CASE WHEN st.status = 'ok' THEN 100 + hash(a.i, s.source) % 5000 ELSE 0 END, 0,
       CASE WHEN st.status IN ('error', 'timeout') THEN s.source || ': ' || st.status || ' after 30 s' END,
       (20 + hash(a.i, s.source, 'ms') % 3000)::BIGINT
FROM fleet_attempts a,
     (VALUES ('app', 'files'), ('syslog', 'journald'), ('metrics', 'prometheus'), ('fabric', 'ufm'))
         s(source, connector),
     LATERAL (SELECT CASE WHEN u(a.i, s.source) < 0.94 THEN 'ok' WHEN u(a.i, s.source) < 0.97 THEN 'empty'
                          WHEN u(a.i, s.source) < 0.985 THEN 'error' WHEN u(a.i, s.source) < 0.995 THEN 'timeout'
                          ELSE 'unavailable' END AS status) st
"""

RULES_USES = """
INSERT INTO rules_version_uses SELECT '2025.' || month(end_time)::VARCHAR, end_time + INTERVAL 1 MINUTE
FROM fleet_attempts ORDER BY i
"""

# Every host on its leaf's port (32 to a leaf), 4 uplinks a leaf, and 1% of hosts recabled to a
# spare port (p37-p40) during the year: the view places each failure by the topology of its time.
TOPOLOGY = f"""
INSERT INTO topology_links
SELECT 'fleet-' || (h * 4 // $hosts)::VARCHAR, 'leaf-' || lpad((h // 32)::VARCHAR, 4, '0'),
       'p' || (1 + h % 32)::VARCHAR, host(h), 'host', 'mlx5_0', {YEAR}, 'generated'
FROM range($hosts) r(h)
UNION ALL
SELECT 'fleet-' || (l * 32 * 4 // $hosts)::VARCHAR, 'leaf-' || lpad(l::VARCHAR, 4, '0'),
       'p' || (33 + up)::VARCHAR, 'spine-' || ((l + up) % 64)::VARCHAR, 'switch', NULL, {YEAR}, 'generated'
FROM range(($hosts + 31) // 32) r(l), range(4) s(up)
UNION ALL
SELECT 'fleet-' || (h * 4 // $hosts)::VARCHAR, 'leaf-' || lpad((h // 32)::VARCHAR, 4, '0'),
       'p' || (37 + h % 4)::VARCHAR, host(h), 'host', 'mlx5_0',
       {YEAR} + to_days((30 + hash(h, 'move') % 300)::INTEGER) + to_minutes((h % 32)::INTEGER), 'generated'
FROM range($hosts) r(h) WHERE hash(h, 'moved') % 100 = 0
"""

TABLES = [
    ("diagnoses", DIAGNOSES),
    ("diagnosis_symptoms", SYMPTOMS),
    ("diagnosis_xids", XIDS),
    ("diagnosis_affected_nodes", AFFECTED_NODES),
    ("diagnosis_affected_components", AFFECTED_COMPONENTS),
    ("diagnosis_coverage", COVERAGE),
    ("rules_version_uses", RULES_USES),
    ("topology_links", TOPOLOGY),
]


def generate(wh: Warehouse, diagnoses: int, hosts: int, symptoms: int) -> dict[str, tuple[int, float]]:
    """Write the fleet's year (into an empty warehouse); rows and seconds per table."""
    params = {"n": diagnoses, "hosts": hosts, "symptoms": symptoms}
    out: dict[str, tuple[int, float]] = {}
    with wh.connect() as con:
        if con.execute("SELECT count(*) FROM diagnoses").fetchone()[0]:
            sys.exit(f"{wh} already holds diagnoses: generate into an empty warehouse")
        for macro in MACROS:
            con.execute(macro)
        t = time.perf_counter()
        con.execute(ATTEMPTS, {k: v for k, v in params.items() if k in ("n", "hosts")})
        out["(attempts, in memory)"] = (diagnoses, time.perf_counter() - t)
        for table, sql in TABLES:
            t = time.perf_counter()
            used = {k: v for k, v in params.items() if f"${k}" in sql}
            con.execute("BEGIN")
            con.execute(sql, used)
            con.execute("COMMIT")
            rows = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            out[table] = (rows, time.perf_counter() - t)
            print(f"  {table:32} {rows:>12,} rows {out[table][1]:8.1f} s", flush=True)
    return out


CHILDREN = [
    "diagnosis_symptoms",
    "diagnosis_xids",
    "diagnosis_affected_nodes",
    "diagnosis_affected_components",
    "diagnosis_coverage",
]


def rediagnose(wh: Warehouse, count: int, diagnoses: int) -> float:
    """`count` attempts spread over the year diagnosed again, one transaction each, as a writer does
    (its rows deleted and written anew: inlined in a lake's catalog, deletions in its files), so the
    maintenance that follows has a day's work: seconds taken."""
    t = time.perf_counter()
    with wh.connect() as con:
        for k in range(count):
            did = f"d{(k * 7919 * 104729) % diagnoses:08d}"
            con.execute("BEGIN")
            for table in ["diagnoses", *CHILDREN]:
                con.execute(
                    f"CREATE OR REPLACE TEMP TABLE again AS SELECT * FROM {table} WHERE diagnosis_id = ?", [did]
                )
                con.execute(f"DELETE FROM {table} WHERE diagnosis_id = ?", [did])
                if table == "diagnoses":
                    con.execute("UPDATE again SET created_at = now()")
                con.execute(f"INSERT INTO {table} SELECT * FROM again")
            con.execute("COMMIT")
    return time.perf_counter() - t


def time_views(wh: Warehouse, repeat: int) -> dict[str, tuple[float, float, int]]:
    """Each view read through the warehouse's sandboxed reader, best seconds of `repeat`: its whole
    result (every row, into a temporary table: the query's cost without Python's per-row objects) and its first
    page as `attribution query VIEW` shows it (the first 1000 rows, fetched as Python rows); rows.
    CPU seconds (every thread of this process) are printed too: on a shared machine, wall time is
    the other processes' as much as the view's."""
    out = {}
    for name in views():
        whole, cpu, page, rows = float("inf"), float("inf"), float("inf"), 0
        for _ in range(repeat):
            with wh.reader() as con:
                t, c = time.perf_counter(), time.process_time()
                con.execute(f'CREATE OR REPLACE TEMP TABLE view_result AS SELECT * FROM "{name}"')
                whole, cpu = min(whole, time.perf_counter() - t), min(cpu, time.process_time() - c)
                rows = con.execute("SELECT count(*) FROM view_result").fetchone()[0]
                t = time.perf_counter()
                con.execute(f'SELECT * FROM "{name}"').fetchmany(PAGE)
                page = min(page, time.perf_counter() - t)
        out[name] = (whole, page, rows)
        print(
            f"  {name:24} all rows {whole:6.2f} s (CPU {cpu:5.2f} s)  first page {page:6.2f} s {rows:>10,} rows",
            flush=True,
        )
    return out


def run(url: str, a: argparse.Namespace) -> dict[str, dict]:
    wh = Warehouse(url)
    print(f"{wh}: generating {a.diagnoses:,} diagnoses on {a.hosts:,} hosts", flush=True)
    written = generate(wh, a.diagnoses, a.hosts, a.symptoms)
    again = rediagnose(wh, a.rediagnose, a.diagnoses)
    print(f"  {a.rediagnose} attempts diagnosed again, one transaction each: {again:.1f} s", flush=True)
    t = time.perf_counter()
    done = wh.maintain()
    maintained = time.perf_counter() - t
    print(f"  maintenance {maintained:.1f} s: {done}", flush=True)
    print(f"views (best of {a.repeat}):", flush=True)
    return {
        "written": written,
        "rediagnosed_s": again,
        "maintenance": {"s": maintained, **done},
        "views": time_views(wh, a.repeat),
    }


def _service_urls(kinds: list[str], stack: ExitStack, base: Path) -> list[str]:
    """Private PostgreSQL (and SeaweedFS) started for the run: a lake URL per kind (disk, s3)."""
    import os

    from tests.services.postgres import Postgres
    from tests.services.seaweedfs import SeaweedS3

    pg_base = Path(tempfile.mkdtemp(prefix="fleet-pg-"))  # not 0700: the server runs as postgres
    pg_base.chmod(0o755)
    pg = Postgres(pg_base / "pg").start()
    stack.callback(shutil.rmtree, pg_base, True)
    stack.callback(pg.stop)
    os.environ["PGPASSWORD"] = pg.password
    urls = []
    for kind in kinds:
        db = pg.create_database(f"fleet_{kind}")
        lake = f"ducklake+postgres://{pg.user}@127.0.0.1:{pg.port}/{db}?data_path="
        if kind == "s3":
            s3 = SeaweedS3(base / "s3").start()
            stack.callback(s3.stop)
            os.environ.update(s3.env)
            urls.append(f"{lake}s3://{s3.bucket}/fleet/")
        else:
            (base / "lake").mkdir()
            urls.append(f"{lake}{base / 'lake'}/")
    return urls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warehouse", action="append", default=[], help="a warehouse URL or DuckDB file (repeatable)")
    ap.add_argument("--services", default="", help="start a private PostgreSQL (+ SeaweedFS): disk,s3")
    ap.add_argument("--diagnoses", type=int, default=1_000_000)
    ap.add_argument("--hosts", type=int, default=50_000)
    ap.add_argument("--symptoms", type=int, default=20, help="symptoms per diagnosis")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rediagnose", type=int, default=200, help="attempts diagnosed again before maintenance")
    a = ap.parse_args(argv)
    with ExitStack() as stack:
        base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fleet-lake-")))
        kinds = [k for k in a.services.split(",") if k]
        urls = a.warehouse + (_service_urls(kinds, stack, base) if kinds else [])
        if not urls:
            ap.error("--warehouse or --services")
        results = {url.split("?")[-1]: run(url, a) for url in urls}
    slowest = max(s for r in results.values() for s, _, _ in r["views"].values())
    print(f"slowest view: {slowest:.2f} s")
    return 0 if slowest <= 2.0 else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except duckdb.Error as exc:
        sys.exit(f"failed: {exc}")
