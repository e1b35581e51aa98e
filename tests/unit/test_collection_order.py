"""The connectors collect in parallel threads and take file ids in whatever order they finish; the
diagnosis must not depend on it. A GPU's XID 31 in the kernel log and the application's illegal
memory access fall in the same second: the kernel's report of the fault is the root whichever
source was collected first (staging/sql/normalize_lines.sql numbers lines by layer and path)."""

from __future__ import annotations

import threading

import pytest

from tests.conftest import ROOT
from tests.helpers import diagnose

BUNDLE = ROOT / "tests" / "real" / "gpu-xid31-mmu-fault-illegal-access-ikllama425"


def _collected_in_order(monkeypatch: pytest.MonkeyPatch, first: str, then: str) -> None:
    """`then` is collected only once `first` has been (a deadline, not a sleep: 60 s)."""
    from workload_attribution.tasks import steps

    real = steps.collect_source
    done = threading.Event()

    def collect_source(scoped, source, pack):
        if source == then:
            assert done.wait(timeout=60), f"{first} was never collected"
        try:
            return real(scoped, source, pack)
        finally:
            if source == first:
                done.set()

    monkeypatch.setattr(steps, "collect_source", collect_source)


@pytest.mark.parametrize("first, then", [("app", "syslog"), ("syslog", "app")])
def test_which_source_is_collected_first_changes_no_diagnosis(monkeypatch, first, then) -> None:
    _collected_in_order(monkeypatch, first, then)
    d = diagnose(BUNDLE)
    assert (d.terminal_state.value, d.sub_domain.value, d.confidence.value) == (
        "application_failure",
        "gpu_app_error",
        "high",
    )
    assert d.root_cause is not None and d.root_cause.symptom == "xid_31"


def test_lines_are_stored_in_the_order_of_their_ids_on_several_threads() -> None:
    """normalize_lines.sql inserts with no ORDER BY of its own, trusting its numbering's sort and
    DuckDB's insertion order; over more lines than a row group, on four threads, from files whose
    ids run against their place (the kernel's last), the stored order is still the ids' order:
    layer, then path, then line number."""
    from datetime import datetime

    from workload_attribution.contracts.models import AttemptScope
    from workload_attribution.staging.attempt import create_staging
    from workload_attribution.staging.database import connected, release_staging
    from workload_attribution.staging.normalize import normalize

    scope = AttemptScope(
        cluster="c",
        scheduler="slurm",
        job_id="1",
        attempt=0,
        nodes=["n1", "n2"],
        start=datetime(2026, 11, 24, 10),
        end=datetime(2026, 11, 25, 10),
        state="FAILED",
    )
    staging = create_staging(scope)
    files = [
        (1, "app", "n2", "logs/n2/app.log"),
        (2, "app", "n1", "logs/n1/app.log"),
        (3, "syslog", "n1", "logs/n1/syslog"),
    ]
    try:
        with connected(staging) as con:
            con.execute("SET threads = 4")
            for file_id, source, node, path in files:
                con.execute(
                    "INSERT INTO source_files VALUES (?, ?, 'bundle', ?, ?, 70000, 0, 0, NULL, NULL)",
                    [file_id, source, node, path],
                )
            con.execute(
                """INSERT INTO raw_lines
                   SELECT f, i, strftime(TIMESTAMP '2026-11-24 10:00:00' + to_seconds(i), '%Y-%m-%dT%H:%M:%S')
                             || ' NCCL WARN line ' || i, NULL, NULL
                   FROM range(1, 4) a(f), range(1, 70001) b(i)
                   ORDER BY hash(f, i)"""  # the connectors' pieces arrive interleaved
            )
            normalize(con, "UTC", datetime(2026, 11, 24), {})
            stored = con.execute("SELECT obs_id, source, path, lineno FROM log_lines ORDER BY rowid").fetchall()
    finally:
        release_staging(staging)
    assert len(stored) == 210_000
    assert [r[0] for r in stored] == sorted(r[0] for r in stored)
    place = {"logs/n1/syslog": 0, "logs/n1/app.log": 1, "logs/n2/app.log": 2}  # layer, then path
    assert [(place[r[2]], r[3]) for r in stored] == sorted((place[r[2]], r[3]) for r in stored)
