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
