"""The scenario corpus: every class, wide variation, each bundle with its expected diagnosis.

A fresh corpus is generated per run (seeded); `attribution eval` must match every bundle exactly.
The closing notes report larger corpora (python -m tests.scenarios.generator OUT --per-class 15).
"""

import pytest

from tests.scenarios.generator import CLASSES, generate
from workload_attribution.flows.evaluation import evaluate
from workload_attribution.rules.pack import default_pack

PER_CLASS = 3


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus")
    paths = generate(out, per_class=PER_CLASS, seed=2026)
    assert len(paths) == PER_CLASS * len(CLASSES)
    return evaluate(out, default_pack())


def test_every_class_is_covered(report):
    classes = {o.cls for o in report.outcomes}
    assert len(classes) == len(CLASSES)


def test_exact_match_on_every_bundle(report):
    misses = [(o.bundle, o.expected["sub_domain"], o.got, o.error) for o in report.misses()]
    assert misses == [], report.table()


def test_no_healthy_host_blamed_outside_hardware_and_infrastructure(report):
    for o in report.outcomes:
        if o.expected["terminal_state"] in ("application_failure", "scheduler_action", "unknown", "completed"):
            assert o.got["affected_nodes"] == [], o.bundle


def test_no_rule_fails_at_run_time(report):
    assert [o.bundle for o in report.outcomes if o.got and o.got["failed_rules"]] == []


def test_every_undecided_verdict_names_what_would_settle_it(report):
    undecided = [o for o in report.outcomes if o.got and o.got["sub_domain"] in ("ambiguous", "insufficient_evidence")]
    assert {o.got["sub_domain"] for o in undecided} == {"ambiguous", "insufficient_evidence"}
    assert [o.bundle for o in undecided if not o.got["would_settle"]] == []
