"""Process faults: a diagnosing process killed with SIGKILL in each stage, and a warehouse locked by
an analyst's session. Nothing half-written, nothing lost: the next backfill diagnoses exactly the
attempts that have no diagnosis, once each.

The kill is injected from outside the production code: the process under test is started through
a small launcher that wraps one step function so that it SIGKILLs its own process when called
(mid-transaction for the warehouse write), then runs `attribution backfill --inline` as usual.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from tests.conftest import EXAMPLES, WORKED
from tests.waiting import duckdb_held_by_another_process

# a long operational proof: the slow tier (`pytest -m slow`, run by .ci/run after the default tier)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

LAUNCHER = """
import os, signal, sys
stage = os.environ["KILL_AT"]

def die(*a, **k):
    os.kill(os.getpid(), signal.SIGKILL)

from workload_attribution.tasks import steps
from workload_attribution.warehouse import writer
if stage == "publish-mid-transaction":
    writer.insert_topology = die          # called inside the write transaction, after the main row
else:
    setattr(steps, {"scope": "scope_attempt", "collect": "collect_source", "normalize": "normalize_collected",
                    "attribute": "attribute"}[stage], die)
from workload_attribution.cli import main

sys.exit(main(sys.argv[1:]))
"""

STAGES = ["scope", "collect", "normalize", "attribute", "publish-mid-transaction"]


@pytest.fixture
def tree(tmp_path):
    """Three failed attempts (bundles with attempt ends inside the backfill window)."""
    root = tmp_path / "bundles"
    for src in (WORKED, EXAMPLES / "host_oom_kueue-1-0", EXAMPLES / "cuda_oom_one_rank-1-0"):
        shutil.copytree(src, root / src.name)
    return root


def backfill(tmp_path: Path, tree: Path, env_extra: dict | None = None, launcher: bool = False):
    env = {**os.environ, "ATTRIBUTION_WAREHOUSE": str(tmp_path / "w.duckdb"), **(env_extra or {})}
    env.pop("ATTRIBUTION_CONFIG", None)
    args = ["backfill", "--inline", "--bundles", str(tree), "--since", "3650d", "--concurrency", "1", "--json"]
    if launcher:
        (tmp_path / "launch.py").write_text(LAUNCHER)
        cmd = [sys.executable, str(tmp_path / "launch.py"), *args]
    else:
        cmd = [sys.executable, "-m", "workload_attribution", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def rows(wh: Path) -> list[tuple]:
    if not wh.exists():
        return []
    con = duckdb.connect(str(wh), read_only=True)
    try:
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        if "diagnoses" not in tables:
            return []
        return con.execute("SELECT cluster, job_id, attempt, diagnosis_id FROM diagnoses ORDER BY 1, 2, 3").fetchall()
    finally:
        con.close()


def orphans(wh: Path) -> int:
    """Parts of a diagnosis without its diagnosis row (what a half-written write would leave)."""
    con = duckdb.connect(str(wh), read_only=True)
    try:
        return sum(
            con.execute(
                f"SELECT count(*) FROM {t} WHERE diagnosis_id NOT IN (SELECT diagnosis_id FROM diagnoses)"
            ).fetchone()[0]
            for t in (
                "diagnosis_symptoms",
                "diagnosis_xids",
                "diagnosis_affected_nodes",
                "diagnosis_coverage",
                "diagnosis_evidence",
                "diagnosis_affected_components",
            )
        )
    finally:
        con.close()


@pytest.mark.parametrize("stage", STAGES)
def test_killed_in_any_stage_then_the_next_backfill_diagnoses_each_attempt_once(tmp_path, tree, stage):
    wh = tmp_path / "w.duckdb"
    killed = backfill(tmp_path, tree, {"KILL_AT": stage}, launcher=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    # the attempt in hand when it died left nothing (the kill at publish hits the one bundle with a
    # topology, after others were written), and no part of a diagnosis lies around without its row
    before = rows(wh)
    assert "4191701" not in [r[1] for r in before]
    assert stage.startswith("publish") or before == []
    if wh.exists():
        assert orphans(wh) == 0
    again = backfill(tmp_path, tree)
    assert again.returncode == 0, again.stderr[-2000:]
    summary = json.loads(again.stdout)
    assert summary["diagnosed"] == 3 - len(before) and summary["skipped"] == len(before), summary
    assert summary["failed"] == 0, summary
    got = rows(wh)
    assert len(got) == 3 and len({r[:3] for r in got}) == 3
    assert orphans(wh) == 0
    third = json.loads(backfill(tmp_path, tree).stdout)
    assert third["skipped"] == 3 and third["diagnosed"] == 0
    assert rows(wh) == got


def test_a_locked_warehouse_fails_loudly_and_the_attempts_stay_pending(tmp_path, tree):
    wh = tmp_path / "w.duckdb"
    duckdb.connect(str(wh)).close()
    with duckdb_held_by_another_process(wh):
        started = time.monotonic()
        locked = backfill(tmp_path, tree, {"ATTRIBUTION_WAREHOUSE_LOCK_WAIT_S": "2"})
        elapsed = time.monotonic() - started
    assert locked.returncode != 0 and "still locked by another process" in locked.stdout + locked.stderr
    assert "Traceback" not in locked.stderr
    assert elapsed < 90
    assert rows(wh) == []
    after = backfill(tmp_path, tree)
    assert after.returncode == 0 and json.loads(after.stdout)["diagnosed"] == 3
    assert len(rows(wh)) == 3
