"""End to end (inline runner) on the example bundles: verdicts, blame, evidence that resolves."""

import json

import pytest

from tests.conftest import EXAMPLES, WORKED
from tests.helpers import diagnose
from workload_attribution.rules.pack import default_pack

BUNDLES = sorted(p for p in EXAMPLES.iterdir() if (p / "expected.json").is_file()) + [WORKED]


@pytest.fixture(scope="module")
def diagnoses():
    from concurrent.futures import ThreadPoolExecutor

    pack = default_pack()
    with ThreadPoolExecutor(max_workers=2) as pool:  # two at a time: the run is what it measures, not the wait
        return dict(zip((b.name for b in BUNDLES), pool.map(lambda b: diagnose(b, pack=pack), BUNDLES)))


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda b: b.name)
def test_matches_expected(diagnoses, bundle):
    exp = json.loads((bundle / "expected.json").read_text())
    d = diagnoses[bundle.name]
    got = (d.terminal_state, d.sub_domain, sorted(d.affected_nodes))
    want = (exp["terminal_state"], exp["sub_domain"], sorted(exp["affected_nodes"]))
    assert got == want
    assert not d.rules.failed


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda b: b.name)
def test_every_claim_points_at_a_real_line(diagnoses, bundle):
    d = diagnoses[bundle.name]
    ev = {e.id: e for e in d.evidence}
    cited = [i for s in d.symptoms for i in s.evidence] + (d.root_cause.evidence if d.root_cause else [])
    assert set(cited) <= set(ev)
    for s in d.symptoms:
        assert s.evidence, f"symptom {s.symptom} without evidence"
    for e in ev.values():
        assert e.path, e
        if e.line:
            raw = (bundle / e.path).read_bytes().split(b"\n")[e.line - 1].decode("utf-8", "replace").rstrip("\r")
            assert raw.replace("\x00", "\ufffd")[:200] == e.text[:200]


def test_worked_example_reads_as_the_product_promises(diagnoses):
    d = diagnoses[WORKED.name]
    assert (d.terminal_state, d.sub_domain, d.affected_nodes) == ("hardware_failure", "nvlink", ["gb-r12-n04"])
    assert d.root_cause.symptom == "xid_149" and d.root_cause.component == "GPU 0018:01:00 NVLink 03"
    assert d.root_cause.details["decode"]["investigatory_action"] == "INVESTIGATE_LINK_SI"
    roots = [s for s in d.symptoms if s.role == "root"]
    # two kernel lines (links 03 and 04) and the DCGM XID gauge turning to 149 corroborate one root
    assert [(s.symptom, s.node, s.count) for s in roots] == [("xid_149", "gb-r12-n04", 3)]
    cited = {e.id: e for e in d.evidence}
    assert {cited[i].source for i in roots[0].evidence} == {"syslog", "metrics"}
    watchdogs = [s for s in d.symptoms if s.symptom == "nccl_watchdog_timeout"]
    assert len(watchdogs) == 6 and all(s.role == "cascade" and s.interesting for s in watchdogs)
    assert all(s.demoted_by == "demote-cascade-after-root" for s in watchdogs)
    meta = {s.symptom: s.role for s in d.symptoms if s.symptom in ("xid_45", "xid_154")}
    assert meta == {"xid_45": "cascade", "xid_154": "cascade"}
    assert d.recommended_action == "drain_and_reset_gpu"
    cov = {c.source: c.status.value for c in d.coverage}
    assert cov["syslog"] == "ok" and cov["scheduler_log"] == "unavailable" and cov["kueue"] == "skipped"
    assert d.rules.version.startswith("2026.12.1+")


def test_no_healthy_host_blamed_for_application_scheduler_or_unknown(diagnoses):
    for name, d in diagnoses.items():
        if d.terminal_state in ("application_failure", "scheduler_action", "unknown", "completed"):
            assert d.affected_nodes == [], name
