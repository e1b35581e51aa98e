"""Scope discipline: where a bundle's attempt.yaml and its scheduler record (scheduler/sacct.json,
`sacct --json` of Slurm 22.05) disagree on the window, the nodes or the state, the record wins and
the diagnosis says so in a note. No record: attempt.yaml as written, no note. A record that cannot be
read: attempt.yaml, its coverage says why.

The bundle is tests/regression/xid79_offbus_cascade-1-0 (XID 79 on node-73 at 12:47:30Z of an attempt
running 11:43:22Z to 13:17:45Z on node-[70-73]); its sacct.json is the real 22.05 shape, edited."""

from __future__ import annotations

import json
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES
from tests.helpers import diagnose
from workload_attribution.contracts.hostlist import expand_hostlist
from workload_attribution.contracts.identity import Target
from workload_attribution.staging.database import connected
from workload_attribution.tasks import steps

SOURCE = EXAMPLES / "xid79_offbus_cascade-1-0"
START, END = "2026-01-13T11:43:22Z", "2026-01-13T13:17:45Z"


def _epoch(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp())


def _utc(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(timezone.utc)


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    dst = tmp_path / "b"
    shutil.copytree(SOURCE, dst)
    return dst


def set_yaml(bundle: Path, **fields: Any) -> None:
    """Rewrite top-level fields of attempt.yaml as an operator would (flow lists, quoted times)."""
    path = bundle / "attempt.yaml"
    text = path.read_text()
    for key, value in fields.items():
        rendered = f"[{', '.join(value)}]" if isinstance(value, list) else f"'{value}'"
        # a block list (nodes:\n- a\n- b) is replaced whole
        text, n = re.subn(rf"^{key}:.*\n(?:- .*\n)*", f"{key}: {rendered}\n", text, count=1, flags=re.M)
        assert n == 1, key
    path.write_text(text)


def set_record(
    bundle: Path, nodes: str | None = None, start: str | None = None, end: str | None = None, state: str | None = None
) -> None:
    """Edit the job record of sacct.json the way Slurm 22.05 writes it: a hostlist string for the job,
    list/range/count for each step, epoch seconds, state.current (steps: a plain string)."""
    path = bundle / "scheduler" / "sacct.json"
    doc = json.loads(path.read_text())
    job = doc["jobs"][0]
    if nodes is not None:
        job["nodes"] = nodes
        job["allocation_nodes"] = len(expand_hostlist(nodes))
        step = next(s for s in job["steps"] if s["step"]["id"] == "0")  # the srun step ran on every node
        step["nodes"] = {"list": expand_hostlist(nodes), "count": len(expand_hostlist(nodes)), "range": nodes}
    if start is not None:
        job["time"]["start"] = job["time"]["eligible"] = _epoch(start)
        job["time"]["elapsed"] = job["time"]["end"] - job["time"]["start"]
    if end is not None:
        job["time"]["end"] = _epoch(end)
        job["time"]["elapsed"] = job["time"]["end"] - job["time"]["start"]
    if state is not None:
        job["state"]["current"] = state
        for s in job["steps"]:
            s["state"] = state
    path.write_text(json.dumps(doc, indent=2))


def scoped(bundle: Path) -> tuple[steps.ScopedAttempt, tuple]:
    """The attempt scoped from the bundle, and the `attempt` row the rules read."""
    sc = steps.scope_attempt(Target(bundle=str(bundle)))
    try:
        with connected(sc.staging) as con:
            row = con.execute("SELECT nodes, start_time, end_time, state FROM attempt").fetchone()
        assert row is not None
        return sc, row
    finally:
        steps.drop_staging(sc)


def test_agreement_leaves_attempt_yaml_and_says_nothing(bundle):
    sc, row = scoped(bundle)
    assert sc.notes == []
    assert sc.scope.nodes == ["node-70", "node-71", "node-72", "node-73"]
    assert (sc.scope.start, sc.scope.end, sc.scope.state) == (_utc(START), _utc(END), "FAILED")
    assert row[0] == sc.scope.nodes and row[3] == "FAILED"


def test_agreement_within_what_each_side_can_say(bundle):
    # sub-second times (accounting keeps whole seconds), the state's detail, a host's FQDN: no disagreement
    set_yaml(
        bundle,
        start="2026-01-13T11:43:22.480Z",
        state="CANCELLED by 0",
        nodes=["node-70.selene.local", "node-71", "node-72", "node-73"],
    )
    set_record(bundle, state="CANCELLED")
    sc, _ = scoped(bundle)
    assert sc.notes == []
    assert sc.scope.state == "CANCELLED by 0"
    assert sc.scope.nodes[0] == "node-70.selene.local"  # the name the logs use stays


def test_window_disagreement_the_record_wins_and_finds_the_fault(bundle):
    # attempt.yaml written an hour off (the exporter's clock in UTC-1 labelled Z): the XID at 12:47:30Z
    # falls after its end, so by attempt.yaml alone it is another attempt's line
    set_yaml(bundle, start="2026-01-13T10:43:22Z", end="2026-01-13T12:17:45Z")
    sc, row = scoped(bundle)
    assert (sc.scope.start, sc.scope.end) == (_utc(START), _utc(END))
    assert (row[1], row[2]) == (_utc(START).replace(tzinfo=None), _utc(END).replace(tzinfo=None))
    assert sc.notes == [
        "window: the scheduler's record (scheduler/sacct.json) says 2026-01-13T11:43:22Z to 2026-01-13T13:17:45Z, "
        "attempt.yaml 2026-01-13T10:43:22Z to 2026-01-13T12:17:45Z: the record wins"
    ]

    d = diagnose(bundle)
    assert (d.terminal_state, d.sub_domain, d.affected_nodes) == ("hardware_failure", "gpu", ["node-73"])
    assert d.root_cause is not None and d.root_cause.symptom == "xid_79"
    assert (d.attempt.start, d.attempt.end) == (_utc(START), _utc(END))
    assert sc.notes[0] in d.notes

    # the same bundle without its record: attempt.yaml's window is all there is, and no note claims otherwise
    (bundle / "scheduler" / "sacct.json").unlink()
    d = diagnose(bundle)
    assert d.affected_nodes == [] and d.attempt.end == _utc("2026-01-13T12:17:45Z")
    assert not [n for n in d.notes if "record" in n]
    assert {c.source: c.status.value for c in d.coverage}["sacct"] == "unavailable"


def test_nodes_disagreement_the_record_wins_and_a_host_it_never_allocated_is_not_blamed(bundle):
    # attempt.yaml names node-73 (whose log in the bundle holds an XID 79); the scheduler ran the job on node-75
    set_record(bundle, nodes="node-[70-72],node-75")
    sc, row = scoped(bundle)
    assert sc.scope.nodes == ["node-70", "node-71", "node-72", "node-75"] == row[0]
    assert sc.notes == [
        "nodes: the scheduler's record (scheduler/sacct.json) allocated 4 node(s), attempt.yaml lists 4; "
        "only in attempt.yaml: node-73; only in the record: node-75: the record wins"
    ]

    d = diagnose(bundle)
    # node-75 ran the job but left no logs in the bundle: nothing can be ruled out there
    assert (d.terminal_state, d.sub_domain) == ("unknown", "insufficient_evidence")
    assert "node-73" not in d.affected_nodes
    assert d.root_cause is None or d.root_cause.node != "node-73"
    assert d.attempt.nodes == sc.scope.nodes
    assert sc.notes[0] in d.notes


def test_state_disagreement_the_record_wins(bundle):
    set_yaml(bundle, state="COMPLETED", exit_code="0:0")
    sc = steps.scope_attempt(Target(bundle=str(bundle)))
    try:
        with connected(sc.staging) as con:
            state = con.execute("SELECT state FROM attempt").fetchone()
            written = con.execute("SELECT text, attrs->>'state' FROM records WHERE kind = 'attempt_scope'").fetchone()
    finally:
        steps.drop_staging(sc)
    assert sc.scope.state == "FAILED" and state == ("FAILED",)
    assert sc.notes == [
        "state: the scheduler's record (scheduler/sacct.json) says FAILED, attempt.yaml COMPLETED: the record wins"
    ]
    # attempt.yaml's line stays evidence as written (the sacct record outranks it in the rules); the exit
    # code is not taken from the record (Slurm 22.05's sacct --json says SUCCESS for failed jobs)
    assert written == ("state: 'COMPLETED'", "COMPLETED")
    assert sc.scope.exit_code == "0:0"


def test_a_record_exported_before_the_job_ended_does_not_end_it(bundle):
    set_record(bundle, state="COMPLETING")
    sc, _ = scoped(bundle)
    assert (sc.scope.state, sc.scope.end) == ("FAILED", _utc(END))
    assert sc.notes == [
        "scheduler/sacct.json was taken before the job ended (state COMPLETING): attempt.yaml's state FAILED "
        "and end stand"
    ]


def test_no_record_attempt_yaml_as_written_no_note(bundle):
    (bundle / "scheduler" / "sacct.json").unlink()
    set_yaml(bundle, state="TIMEOUT")
    sc, row = scoped(bundle)
    assert sc.notes == []
    assert (sc.scope.state, sc.scope.start, sc.scope.end) == ("TIMEOUT", _utc(START), _utc(END))


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b'{"meta": {"Slurm": {"release": "22.05.8"}}, "jobs": [ {"job_id": 688169,', "invalid JSON"),
        (b'{"jobs": [{"job_id": 688169, "nodes": "node-\xff70"}]}', "not UTF-8"),
        (b'{"meta": {}, "errors": [], "jobs": [{"job_id": 688170, "nodes": "node-9"}]}', "not job 688169"),
    ],
    ids=["truncated", "bad-bytes", "another-job"],
)
def test_unreadable_record_attempt_yaml_used_and_coverage_says_so(bundle, content, reason):
    set_yaml(bundle, state="TIMEOUT")
    (bundle / "scheduler" / "sacct.json").write_bytes(content)
    sc, _ = scoped(bundle)
    assert (sc.scope.state, sc.scope.start, sc.scope.end) == ("TIMEOUT", _utc(START), _utc(END))
    assert len(sc.notes) == 1 and sc.notes[0].startswith("scheduler/sacct.json could not be read (")
    assert sc.notes[0].endswith("the scope is attempt.yaml's, unchecked against the scheduler's record")

    if reason == "invalid JSON":  # and once through the whole story: the coverage record names the fault
        d = diagnose(bundle)
        cov = {c.source: c for c in d.coverage}["sacct"]
        assert cov.status.value == "error" and "invalid JSON" in (cov.error or "")
        assert d.attempt.state == "TIMEOUT" and sc.notes[0] in d.notes


# ---- a host outside the allocation is never blamed, even for a fault in the attempt's window

XID79 = "NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def test_a_foreign_hosts_earlier_xid_blames_no_foreign_host(tmp_path):
    # the attempt failed on its own (a ValueError in rank 10, untimed); a host that is not in the
    # allocation logged an XID 79 inside the attempt's window, in the same syslog export
    bundle = tmp_path / "b"
    shutil.copytree(EXAMPLES / "python_exception_one_rank_cascade-1-0", bundle)
    foreign = bundle / "logs" / "syslog" / "gb200-t35-2.log"
    foreign.write_text(f"2026-09-28T22:10:00+0000 gb200-t35-2 kernel: [812345.000000] {XID79}\n")
    d = diagnose(bundle)
    assert (d.terminal_state, d.sub_domain, d.affected_nodes) == ("application_failure", "user_code", [])
    assert d.recommended_action == "fix_code"
    xid = [s for s in d.symptoms if s.symptom == "xid_79"]
    assert xid and all(s.role == "context" and s.node == "gb200-t35-2" for s in xid)

    # the same line from a host of the allocation is this attempt's root: the test above is not vacuous
    own = bundle / "logs" / "syslog" / "gb200-t31-2.log.1"  # a rotated file of an allocated host
    own.write_text(foreign.read_text().replace("gb200-t35-2", "gb200-t31-2"))
    foreign.unlink()
    d = diagnose(bundle)
    assert (d.terminal_state, d.sub_domain, d.affected_nodes) == ("hardware_failure", "gpu", ["gb200-t31-2"])


def test_a_record_linked_from_outside_the_bundle_is_not_read(bundle, tmp_path):
    outside = tmp_path / "elsewhere.json"
    (bundle / "scheduler" / "sacct.json").rename(outside)
    (bundle / "scheduler" / "sacct.json").symlink_to(outside)
    set_yaml(bundle, state="TIMEOUT")
    sc, _ = scoped(bundle)
    assert sc.scope.state == "TIMEOUT"
    assert sc.notes == [
        "scheduler/sacct.json could not be read (a symlink outside the bundle, not read): the scope is "
        "attempt.yaml's, "
        "unchecked against the scheduler's record"
    ]
