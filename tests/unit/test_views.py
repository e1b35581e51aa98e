"""Analyst views over a warehouse seeded with scenario diagnoses, and `attribution query`."""

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.helpers import diagnose
from tests.scenarios.generator import generate
from workload_attribution.rules.pack import default_pack
from workload_attribution.warehouse.store import Warehouse, views


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    out = tmp_path_factory.mktemp("seed")
    paths = generate(
        out, per_class=2, seed=99, classes=["gpu", "gpu_memory", "network_link", "user_code", "time_limit"]
    )
    wh = out / "w.duckdb"
    pack = default_pack()
    diagnoses = [diagnose(p, warehouse=wh, pack=pack) for p in paths]
    # the same host failing twice in a week: re-blame one gpu failure's host in another attempt
    d = diagnoses[0]
    again = d.model_copy(
        update={
            "diagnosis_id": d.diagnosis_id + "-again",
            "attempt": d.attempt.model_copy(update={"job_id": "999999", "end": d.attempt.end}),
        }
    )
    Warehouse(wh).write(again)
    return wh, diagnoses, d.affected_nodes[0]


def test_every_view_answers(warehouse):
    wh, diagnoses, _ = warehouse
    for name in views():
        cols, rows = Warehouse(wh).query(name)
        assert cols, name


def test_repeat_offender_is_found(warehouse):
    wh, _, node = warehouse
    cols, rows = Warehouse(wh).query("repeat_offenders")
    assert [r[0] for r in rows] == [node]


def test_failures_per_host_counts_only_blamed_hosts(warehouse):
    wh, diagnoses, _ = warehouse
    cols, rows = Warehouse(wh).query("SELECT sum(attempts) FROM failures_per_host")
    assert rows[0][0] == sum(len(d.affected_nodes) for d in diagnoses) + 1


def test_query_command(warehouse):
    wh, _, node = warehouse
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "workload_attribution",
            "query",
            "repeat_offenders",
            "--format",
            "json",
            "--warehouse",
            str(wh),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 0 and json.loads(r.stdout)[0]["node"] == node
    r = subprocess.run(
        [sys.executable, "-m", "workload_attribution", "query", "--list"], capture_output=True, text=True, cwd=ROOT
    )
    assert "repeat_offenders" in r.stdout and "14 days" in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "workload_attribution", "query", "SELECT * FROM nope", "--warehouse", str(wh)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 2 and "query failed" in r.stderr and "Traceback" not in r.stderr


def test_coverage_gaps_share_is_of_all_attempts(warehouse):
    wh, diagnoses, _ = warehouse
    cols, rows = Warehouse(wh).query(
        "SELECT g.attempts, g.pct_of_source, (SELECT count(*) FROM diagnoses d WHERE d.cluster = g.cluster) AS n "
        "FROM coverage_gaps g WHERE source = 'scheduler_log' AND status = 'unavailable'"
    )
    assert rows and all(abs(pct - round(100.0 * attempts / n, 1)) < 0.11 for attempts, pct, n in rows)
