"""The second pass over a bundle that a doubtful or completed diagnosis pays (tasks/novelty.py).

    python -m tests.bench.novelty [--hosts 64] [--lines 1000000] [--runs 2] [--fleet 10000]

Generates one attempt (tests/bench/bench.py's make_attempt: the scenario generator's GPU fault in
noise), diagnoses it into a fresh warehouse (a confident verdict: no second pass, the reference),
then times what the same attempt costs when its verdict is doubtful, step by step:
  - templates_of: every line read again, masked into templates and counted; then once more on a
    copy whose every line carries a random id (no two lines alike: each masked on its own);
  - as the job's good attempt: its templates kept (read, then the write with its rows);
  - as a doubtful attempt of the same job: templates read, compared with the good attempt's and the
    fleet's (the warehouse lookups), then written with its diagnosis;
  - the same comparison and write once the warehouse holds a fleet's templates: --fleet attempts
    of the last 30 days, 300 templates each (written in bulk, SQL over range()), and a write of
    2,000 rows (the cap).
Prints a markdown table (seconds, wall and CPU, best of --runs), with the load average before.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tests.bench.bench import make_attempt
from tests.helpers import diagnose
from workload_attribution.connectors.bundle import BundleSource
from workload_attribution.contracts.vocabulary import Confidence, SubDomain, TerminalState
from workload_attribution.tasks import novelty
from workload_attribution.tasks.templates import templates_of
from workload_attribution.warehouse.store import Warehouse
from workload_attribution.warehouse.templates import AttemptTemplates


def timed(work: Callable[[], Any], runs: int) -> tuple[float, float, Any]:
    """(wall, CPU) seconds of the best run, and its result."""
    best: tuple[float, float, Any] | None = None
    for _ in range(runs):
        c0, w0 = time.process_time(), time.perf_counter()
        out = work()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        if best is None or wall < best[0]:
            best = (wall, cpu, out)
    assert best is not None
    return best


def with_random_ids(bundle: Path) -> None:
    """Every log line of the bundle given a random 32-hex-digit id: no two lines alike but for their
    digits, so each is masked on its own (tasks/templates.py's worst case)."""
    rng = random.Random(7)
    for path in sorted((bundle / "logs").glob("*/*.log")):
        lines = path.read_bytes().split(b"\n")
        path.write_bytes(b"\n".join(x + b" request %032x" % rng.getrandbits(128) if x else x for x in lines))


def fleet(wh: Warehouse, attempts: int, end: datetime, shared: list[str]) -> int:
    """`attempts` other attempts of the 30 days before `end`, 300 templates each: 30 the attempt's
    own (so its lookups find them), the rest one of 3,000 others or one the attempt alone logged."""
    with wh.connect() as con:
        con.execute(
            """
            INSERT INTO attempt_templates
            SELECT 'fleet', 'slurm', 'f' || a, 0, 'fleet-' || a, 'other', $end - to_seconds(a * 60) - INTERVAL 1 HOUR,
                   CASE WHEN a % 10 = 0 THEN 'completed' ELSE 'unknown' END,
                   CASE WHEN k < 30 AND len($shared) > 0 THEN $shared[1 + k % len($shared)]
                        WHEN k < 290 THEN 'routine template ' || ((a * 7 + k) % 3000)
                        ELSE 'one-off template ' || a || '-' || k END,
                   'info', 1 + k, 'app', 'node-' || (a % 500), 'logs/app/x.log', k, NULL, 'a line', 1000, 300
            FROM range($n) r(a), range(300) s(k)
            """,
            {"n": attempts, "end": end, "shared": shared},
        )
        return int(con.execute("SELECT count(*) FROM attempt_templates").fetchone()[0])  # type: ignore[index]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--fleet", type=int, default=10_000, help="attempts of templates in the warehouse's 30 days")
    args = ap.parse_args(argv)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-novelty-") as tmp:
        bundle = Path(tmp) / "attempt"
        made = make_attempt(bundle, args.hosts, args.lines)
        wh = Warehouse(Path(tmp) / "w.duckdb")
        rows: list[tuple[str, float, float]] = []
        wall, cpu, d = timed(lambda: diagnose(bundle, warehouse=wh.path), args.runs)
        assert not novelty.keeps_templates(d), (d.terminal_state, d.sub_domain, d.confidence)
        rows.append((f"`diagnose`, confident ({d.terminal_state}/{d.sub_domain}): no second pass", wall, cpu))
        sources = {"app": ("bundle", BundleSource(path=str(bundle)))}

        wall, cpu, t = timed(lambda: templates_of(bundle), args.runs)
        rows.append((f"`templates_of`: {t.lines:,} lines read again, {len(t.templates):,} templates", wall, cpu))
        unlike = Path(tmp) / "unlike"
        shutil.copytree(bundle, unlike)
        with_random_ids(unlike)
        wall, cpu, u = timed(lambda: templates_of(unlike), 1)
        rows.append(
            (
                f"`templates_of`, the worst case: every line with a random id (no two alike), "
                f"{u.lines:,} lines, {len(u.templates):,} templates",
                wall,
                cpu,
            )
        )
        shutil.rmtree(unlike)

        a = d.attempt
        good = d.model_copy(
            update={
                "diagnosis_id": "bench-good",
                "terminal_state": TerminalState.completed,
                "sub_domain": SubDomain.none,
                "root_cause": None,
                "attempt": a.model_copy(update={"attempt": a.attempt + 1, "end": a.end - timedelta(days=1)}),
            }
        )
        wall, cpu, (good, kept) = timed(lambda: novelty.read_templates(good, wh, sources), args.runs)
        rows.append((f"completed: templates read and {len(kept.rows):,} kept (`read_templates`)", wall, cpu))
        wall, cpu, _ = timed(lambda: wh.write(good, None, kept), args.runs)
        rows.append(("completed: the write, with its template rows", wall, cpu))

        doubt = d.model_copy(
            update={
                "diagnosis_id": "bench-doubtful",
                "sub_domain": SubDomain.ambiguous,
                "confidence": Confidence.low,
                "attempt": a.model_copy(update={"attempt": a.attempt + 2}),
            }
        )
        wall, cpu, _ = timed(lambda: novelty.novel(doubt.model_copy(deep=True), t, wh), args.runs)
        rows.append(("doubtful: compared with the good attempt and the fleet (`novel`)", wall, cpu))
        wall, cpu, (doubt, kept) = timed(lambda: novelty.read_templates(doubt, wh, sources), args.runs)
        assert doubt.novelty is not None and doubt.novelty.baseline_diagnosis_id == "bench-good", doubt.novelty
        rows.append(("doubtful: the whole second pass (`read_templates`: read, compare)", wall, cpu))
        wall, cpu, _ = timed(lambda: wh.write(doubt, None, None), args.runs)
        rows.append(("doubtful: the write, without template rows", wall, cpu))
        wall, cpu, _ = timed(lambda: wh.write(doubt, None, kept), args.runs)
        rows.append((f"doubtful: the write, with its {len(kept.rows):,} template rows", wall, cpu))

        n = fleet(wh, args.fleet, d.attempt.end, [r.template for r in kept.rows])
        wall, cpu, _ = timed(lambda: novelty.novel(doubt.model_copy(deep=True), t, wh), args.runs)
        rows.append((f"doubtful, {args.fleet:,} fleet attempts ({n:,} rows) kept: `novel`", wall, cpu))
        many = AttemptTemplates(
            rows=[replace(kept.rows[0], template=f"{kept.rows[0].template} #{i}") for i in range(2_000)],
            lines_read=kept.lines_read,
            templates_total=2_000,
        )
        wall, cpu, _ = timed(lambda: wh.write(doubt, None, many), args.runs)
        rows.append((f"doubtful, {args.fleet:,} fleet attempts kept: the write, with 2,000 template rows", wall, cpu))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{made['bytes'] / 2**20:.0f} MiB, {args.hosts} hosts, {t.lines:,} lines; best of {args.runs}; "
        f"{os.cpu_count()} cores, load average before {load:.2f}; peak RSS of the process {peak:.0f} MiB\n"
    )
    print("| step | wall s | CPU s |")
    print("| --- | ---: | ---: |")
    for name, wall, cpu in rows:
        print(f"| {name} | {wall:.2f} | {cpu:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
