"""What writing one diagnosis costs as a DuckDB-file warehouse grows (a program that prints numbers).

    python -m tests.bench.warehouse_growth [--sizes 14,1400,14000] [-n 5]
    python -m tests.bench.warehouse_growth --one-by-one 2600   # the same, written one at a time
    python -m tests.bench.warehouse_growth --actions 50000     # an acting write beside 50,000 actions

tests/regression's diagnoses are written into a new warehouse, which is then grown to each size
by copying its rows under new attempt keys and diagnosis ids (every table, one statement each: a
fleet's warehouse holds diagnoses much like these). At each size, -n diagnoses of the worked
example are written as a worker writes them (Warehouse.write in a session: one open, the schema
checked, the transaction, then the close, which checkpoints, writing what changed into the file,
only once the write-ahead log has grown past 1 MiB: backends.WAL_KEPT_BYTES), each under a new
attempt key. Printed: the median wall time of the open and write, and of the close, with the
file's size.

With --one-by-one N, N diagnoses of the worked example are written instead, one after another into
a new file, each closed (as a worker writes them, never in bulk), and for each tenth of them the
median close and the mean of a whole write are printed (about 4 minutes for 2,600).

With --actions N, a new warehouse's `actions` table is given N rows (as a year of acting leaves
them: ~0.8 KB of details each), and five decisions of three rows each are recorded and finished
(Warehouse.record_actions, finish_actions) in a session each: the median close is printed.

A checkpoint of a table with a PRIMARY KEY rewrote that table's last row group whole (up to
122,880 rows, each diagnosis' JSON in `diagnoses`): the cost grew with the warehouse until the
row group filled (schema v9, warehouse/schema/009_*.sql).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("job_id", "diagnosis_id", "action_id")


def grow(path: Path, factor: int, tag: str) -> int:
    """Every table's rows copied factor-1 times under new keys; the number of diagnoses after."""
    con = duckdb.connect(str(path))
    try:
        for (table,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'").fetchall():
            cols = [r[0] for r in con.execute(f'DESCRIBE "{table}"').fetchall()]
            renamed = [f"{c} || '-{tag}-' || r.range AS {c}" for c in KEYS if c in cols]
            if renamed and factor > 1:
                con.execute(
                    f'INSERT INTO "{table}" SELECT * EXCLUDE (range) REPLACE ({", ".join(renamed)}) '
                    f'FROM "{table}", range(1, {factor}) r'
                )
        return int(con.execute("SELECT count(*) FROM diagnoses").fetchone()[0])
    finally:
        con.close()


def main(argv: list[str] | None = None) -> int:
    from tests.helpers import diagnose
    from workload_attribution.rules.pack import default_pack
    from workload_attribution.warehouse.store import Warehouse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="14,1400,14000", help="diagnoses in the warehouse, each a multiple of the first")
    ap.add_argument("-n", type=int, default=5, help="diagnoses written at each size")
    ap.add_argument("--one-by-one", type=int, default=0, metavar="N", help="write N diagnoses one at a time instead")
    ap.add_argument("--actions", type=int, default=0, metavar="N", help="time acting writes beside N actions instead")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",")]
    pack = default_pack()
    if a.actions:
        return acting(a.actions)
    if a.one_by_one:
        return one_by_one(diagnose(ROOT / "tests" / "examples" / "xid149-worked", pack=pack), a.one_by_one)
    seeds = [diagnose(b, pack=pack) for b in sorted((ROOT / "tests" / "regression").iterdir()) if b.is_dir()]
    written = diagnose(ROOT / "tests" / "examples" / "xid149-worked", pack=pack)
    rows = []
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; seed {len(seeds)} diagnoses", flush=True)
    with tempfile.TemporaryDirectory(prefix="warehouse-growth-") as tmp:
        path = Path(tmp) / "w.duckdb"
        wh = Warehouse(path)
        for d in seeds:
            wh.write(d)
        have, step = len(seeds), 0
        for size in sizes:
            step += 1
            if size > have:
                have = grow(path, max(1, size // have), f"g{step}")
            writes, wholes = [], []
            for i in range(a.n):
                attempt = written.attempt.model_copy(update={"job_id": f"growth-{step}-{i}"})
                d = written.model_copy(update={"attempt": attempt, "diagnosis_id": f"growth-{step}-{i}"})
                t = time.perf_counter()
                with wh.session():
                    s = time.perf_counter()
                    wh.write(d)
                    writes.append(time.perf_counter() - s)
                wholes.append(time.perf_counter() - t)
            have += a.n
            mib = path.stat().st_size / 2**20
            closes = [whole - write for whole, write in zip(wholes, writes)]
            row = (have, mib, statistics.median(writes) * 1000, statistics.median(closes) * 1000)
            rows.append(row)
            print(
                f"{row[0]:>8,} diagnoses, {row[1]:7.0f} MiB: open and write {row[2]:6.1f} ms, "
                f"close (checkpoint) {row[3]:6.1f} ms",
                flush=True,
            )
    print("\n| diagnoses in the file | file | open and write | close (its checkpoint) |")
    print("| ---: | ---: | ---: | ---: |")
    for have, mib, write, close in rows:
        print(f"| {have:,} | {mib:,.0f} MiB | {write:.0f} ms | {close:.0f} ms |")
    return 0


def acting(n: int) -> int:
    """Five decisions of three actions each, recorded and finished beside n actions; the median close."""
    from datetime import datetime, timezone

    from workload_attribution.contracts.actions import ActionRecord, Outcome
    from workload_attribution.warehouse.store import Warehouse

    closes: list[float] = []
    with tempfile.TemporaryDirectory(prefix="warehouse-growth-") as tmp:
        wh = Warehouse(Path(tmp) / "w.duckdb")
        with wh.connect() as con:
            con.execute(
                "INSERT INTO actions (action_id, decided_at, seq, cluster, scheduler, job_id, attempt, diagnosis_id, "
                "rules_version, terminal_state, sub_domain, confidence, recommended_action, sink, operation, "
                "isolates, node, dry_run, outcome, details) SELECT 'old-' || range, now(), 0, 'c', 'slurm', "
                "'j' || range, 0, 'd' || range, 'v', 'hardware_failure', 'gpu', 'high', 'drain_node', 'slurm', "
                "'drain', true, 'n' || (range % 5000), false, 'done', "
                "('{\"reason\": \"' || repeat('x', 700) || '\"}')::JSON FROM range($n)",
                {"n": n},
            )
        for i in range(5):
            now = datetime.now(timezone.utc)
            records = [
                ActionRecord(
                    action_id=f"new-{i}-{k}",
                    decided_at=now,
                    cluster="c",
                    scheduler="slurm",
                    job_id=f"new-{i}",
                    attempt=0,
                    diagnosis_id=f"new-{i}",
                    rules_version="v",
                    terminal_state="hardware_failure",
                    sub_domain="gpu",
                    confidence="high",
                    recommended_action="drain_node",
                    sink="slurm",
                    operation="drain",
                    isolates=True,
                    node=f"n{k}",
                    dry_run=False,
                    outcome=Outcome.pending,
                    details={"reason": "x" * 700},
                )
                for k in range(3)
            ]
            with wh.session():
                done = wh.record_actions(records)
                wh.finish_actions([r.model_copy(update={"outcome": Outcome.done}) for r in done])
                started = time.perf_counter()
            closes.append(time.perf_counter() - started)
    print("\n| actions in the file | an acting write's close (its checkpoint), median of 5 |")
    print("| ---: | ---: |")
    print(f"| {n:,} | {statistics.median(closes) * 1000:.0f} ms |")
    return 0


def one_by_one(written: Any, n: int) -> int:
    """n diagnoses written one after another into a new file, each in its own session (opened,
    written, closed: a checkpoint when the write-ahead log passed backends.WAL_KEPT_BYTES); for each
    tenth, the median close, the slowest, and the mean of the whole session in wall and CPU time
    (checkpoints come every few writes: the mean is what a worker pays)."""
    from workload_attribution.warehouse.store import Warehouse

    closes: list[float] = []
    wholes: list[float] = []
    cpus: list[float] = []
    with tempfile.TemporaryDirectory(prefix="warehouse-growth-") as tmp:
        wh = Warehouse(Path(tmp) / "w.duckdb")
        for i in range(n):
            attempt = written.attempt.model_copy(update={"job_id": f"one-{i}"})
            began, cpu = time.perf_counter(), time.process_time()
            with wh.session():
                wh.write(written.model_copy(update={"attempt": attempt, "diagnosis_id": f"one-{i}"}))
                started = time.perf_counter()
            closes.append(time.perf_counter() - started)
            wholes.append(time.perf_counter() - began)
            cpus.append(time.process_time() - cpu)
    step = max(1, n // 10)
    print("\n| diagnoses written | close, median | slowest close | open, write and close: mean wall (CPU) |")
    print("| --- | ---: | ---: | ---: |")
    for k in range(0, n, step):
        part = slice(k, k + step)
        print(
            f"| {k + 1:,}-{k + len(closes[part]):,} | {statistics.median(closes[part]) * 1000:.0f} ms "
            f"| {max(closes[part]) * 1000:.0f} ms | {statistics.mean(wholes[part]) * 1000:.0f} ms "
            f"({statistics.mean(cpus[part]) * 1000:.0f} ms) |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
