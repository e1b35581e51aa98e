"""A process that diagnoses again: its next attempt's staging database made meanwhile, its collect
threads kept, its attempts' databases released off their way (staging/attempt.py, flows/inline.py)."""

from __future__ import annotations

import threading

import duckdb

from tests.conftest import WORKED
from tests.waiting import wait_until


def test_a_later_attempt_takes_the_database_made_while_the_one_before_ran():
    from workload_attribution.connectors.bundle import load_scope
    from workload_attribution.staging import ahead, database
    from workload_attribution.staging.attempt import create_staging

    scope = load_scope(WORKED)
    first, second = create_staging(scope), create_staging(scope)  # at least a second of this process
    try:
        thread = ahead._ahead_thread
        assert thread is not None
        thread.join()
        made = list(ahead._ahead)
        assert len(made) == 1 and made[0] not in (first, second)
        third = create_staging(scope)
        assert third == made[0]
        with database.connected(third) as con:  # a database of its own: only its attempt's row
            assert con.execute("SELECT count(*) FROM attempt").fetchone() == (1,)
            assert con.execute("SELECT current_setting('memory_limit')").fetchone() != (None,)
        database.release_staging(third)
    finally:
        database.release_staging(first)
        database.release_staging(second)


def test_an_attempts_database_is_released_after_its_diagnosis():
    from workload_attribution.connectors.bundle import load_scope
    from workload_attribution.staging import database
    from workload_attribution.staging.attempt import create_staging
    from workload_attribution.tasks.steps import ScopedAttempt, drop_staging

    path = create_staging(load_scope(WORKED))
    drop_staging(ScopedAttempt(scope=load_scope(WORKED), staging=path))
    wait_until(lambda: path not in database._holders, f"{path} released")
    with duckdb.connect(path) as con:  # the name makes a new, empty database: the old one is gone
        assert not con.execute("SELECT * FROM duckdb_tables()").fetchall()


def test_attempts_collect_on_the_same_threads():
    from tests.helpers import diagnose

    def collecting() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("collect")}

    diagnose(WORKED)
    before = collecting()
    diagnose(WORKED)
    assert before and before <= collecting()  # a pool per attempt would have ended its threads
