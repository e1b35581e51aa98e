"""Which allocation host a name means (rules/python/hosts.py, the one place the rules ask), and a
node-level verdict naming no host saying why (rules/settle.py) (issue 41, item 3)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.helpers import diagnose
from workload_attribution.contracts.models import AttemptScope, Coverage, Diagnosis
from workload_attribution.contracts.vocabulary import node_level
from workload_attribution.rules.python.hosts import host_key, only_one, resolve
from workload_attribution.rules.settle import unnamed_host_note

ALLOCATION = ["ip-10-15-20-11.ec2.internal", "ip-10-15-20-17.ec2.internal", "gpu-w05.cluster.local", "n7", "10.0.3.4"]


@pytest.mark.parametrize(
    ("name", "host"),
    [
        ("ip-10-15-20-17.ec2.internal", "ip-10-15-20-17.ec2.internal"),  # as written
        ("10.15.20.17", "ip-10-15-20-17.ec2.internal"),  # the address an EC2 name is named after
        ("IP-10-15-20-17", "ip-10-15-20-17.ec2.internal"),  # short, upper case: DNS ignores case
        ("gpu-w05", "gpu-w05.cluster.local"),  # a short name is its FQDN
        ("GPU-W05.Cluster.Local.", "gpu-w05.cluster.local"),  # a trailing root dot
        ("n7.cluster.local", "n7"),
        ("ip-10-0-3-4.us-west-2.compute.internal", "10.0.3.4"),  # and the other way round
    ],
)
def test_a_name_means_the_allocation_host_dns_would_give(name: str, host: str) -> None:
    assert resolve(name, ALLOCATION) == host


@pytest.mark.parametrize("name", ["10.15.20.99", "ip-10-15-20-99", "gpu-w06", "n77", "", None, "10.0.3"])
def test_a_name_no_allocation_host_answers_to_names_nobody(name: str | None) -> None:
    assert resolve(name, ALLOCATION) is None


def test_a_name_two_hosts_answer_to_names_neither() -> None:
    assert resolve("n3", ["n3.a.example", "n3.b.example"]) is None
    assert resolve("10.1.2.3", ["ip-10-1-2-3", "10.1.2.3.example"]) == "ip-10-1-2-3"  # an address is whole


def test_an_address_the_bundle_ties_to_a_host_is_that_host() -> None:
    addresses = {"10.0.139.13": {"h4"}}
    assert resolve("10.0.139.13", ["h3", "h4"], addresses) == "h4"
    assert resolve("10.0.139.13", ["h3"], addresses) is None  # a host outside the allocation stays out
    assert resolve("10.0.139.13", ["h3", "h4"], {"10.0.139.13": {"h3", "h4"}}) is None


def test_host_keys() -> None:
    assert host_key("ip-10-15-20-17.ec2.internal") == host_key("10.15.20.17") == "10.15.20.17"
    assert host_key("Node-07.Example.Org") == "node-07"
    assert host_key("ip-10-15-20") == "ip-10-15-20"  # not an address: a name


def test_only_one_never_guesses() -> None:
    assert only_one(["a", None, "a"]) == "a"
    assert only_one(["a", "b"]) is None and only_one([None]) is None


@pytest.mark.parametrize(
    ("terminal_state", "sub_domain", "level"),
    [
        ("hardware_failure", "host", True),
        ("hardware_failure", "gpu", True),
        ("infrastructure_failure", "node_unreachable", True),
        ("infrastructure_failure", "network_link", True),
        ("hardware_failure", "ambiguous", False),
        ("infrastructure_failure", "storage", False),
        ("scheduler_action", "time_limit", False),
        ("scheduler_action", "preemption", False),
        (None, None, False),
        ("nonsense", "host", False),
    ],
)
def test_which_verdicts_are_node_level(terminal_state: str | None, sub_domain: str | None, level: bool) -> None:
    assert node_level(terminal_state, sub_domain) is level


def _diagnosis(terminal_state: str, sub_domain: str, affected: list[str]) -> Diagnosis:
    t = datetime(2026, 5, 20, tzinfo=timezone.utc)
    scope = AttemptScope(
        cluster="c",
        scheduler="slurm",
        job_id="1",
        attempt=0,
        nodes=[f"n{i}" for i in range(8)],
        start=t,
        end=t,
        state="NODE_FAIL",
    )
    return Diagnosis(
        diagnosis_id="d",
        attempt=scope,
        terminal_state=terminal_state,
        sub_domain=sub_domain,
        confidence="medium",
        affected_nodes=affected,
        recommended_action="investigate",
        coverage=[Coverage(source="sacct", connector="test", status="ok")],
        rules={"version": "v"},
    )


def test_a_node_level_verdict_naming_no_host_says_why() -> None:
    d = _diagnosis("infrastructure_failure", "node_unreachable", [])
    note = unnamed_host_note(d, None)
    assert note == (
        "node_unreachable: the evidence names no host of the 8 allocated; "
        "would settle: nothing left uncollected would name it"
    )
    assert unnamed_host_note(_diagnosis("infrastructure_failure", "node_unreachable", ["n1"]), None) is None
    assert unnamed_host_note(_diagnosis("scheduler_action", "time_limit", []), None) is None


def test_a_lost_node_nothing_names_notes_why_and_what_would_name_it(tmp_path) -> None:
    """NODE_FAIL of a 2-host job with no slurmctld log collected: no host named, the note says
    why, and the slurmctld log is what would name it (would_settle, --retry-missing)."""
    bundle = tmp_path / "node-fail"
    (bundle / "logs" / "app").mkdir(parents=True)
    (bundle / "attempt.yaml").write_text(
        "cluster: c\nscheduler: slurm\njob_id: '78'\nattempt: 0\nnodes: [gpu08, gpu09]\n"
        "start: 2026-05-20T00:10:00Z\nend: 2026-05-20T03:14:40Z\nstate: NODE_FAIL\n"
    )
    (bundle / "logs" / "app" / "gpu08.log").write_text("2026-05-20T01:00:00Z step 100 loss 2.31\n")
    d = diagnose(bundle)
    assert (d.terminal_state.value, d.sub_domain.value, d.affected_nodes) == (
        "infrastructure_failure",
        "node_unreachable",
        [],
    )
    why = [n for n in d.notes if n.startswith("node_unreachable: the evidence names no host of the 2 allocated")]
    assert why == [
        "node_unreachable: the evidence names no host of the 2 allocated; the scheduler's record gives no node; "
        "would settle: syslog (gpu08, gpu09), sacct, scheduler_log"
    ]
    assert [m.source for m in d.would_settle] == ["syslog", "sacct", "scheduler_log"]
    assert all(m.reason.endswith("would name the host") for m in d.would_settle)
