"""A process that diagnoses again collects its sources on the threads it kept (flows/inline.py)."""

from __future__ import annotations

import threading

from tests.conftest import WORKED


def test_attempts_collect_on_the_same_threads():
    from tests.helpers import diagnose

    def collecting() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("collect")}

    diagnose(WORKED)
    before = collecting()
    diagnose(WORKED)
    assert before and before <= collecting()  # a pool per attempt would have ended its threads
