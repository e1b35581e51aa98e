"""Fleet memory: each diagnosis says how often its blamed nodes and switch ports were root (and
cascade) of other attempts in the 7 and 30 days before its end, and a subject that keeps failing
escalates the action, the diagnosis saying why."""

import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from tests.conftest import WORKED
from tests.helpers import bundle_copy, diagnose
from workload_attribution.contracts.models import Symptom
from workload_attribution.tasks.memory import MemoryPolicy
from workload_attribution.warehouse.memory import Blame, blames, is_switch_port
from workload_attribution.warehouse.store import Warehouse


@pytest.fixture(scope="module")
def three_failures(tmp_path_factory):
    """The worked example's host failing in three jobs, diagnosed one after the other."""
    tmp = tmp_path_factory.mktemp("memory")
    wh = tmp / "w.duckdb"
    jobs = ("4191701", "4191702", "4191703")
    return wh, [diagnose(bundle_copy(WORKED, tmp / job, job), warehouse=wh) for job in jobs]


def test_the_first_failure_has_no_history_and_keeps_its_action(three_failures):
    _, (first, _, _) = three_failures
    host = first.history.subjects[0]
    assert (host.kind, host.subject, host.root_7d, host.root_30d, host.attempts) == ("node", "gb-r12-n04", 0, 0, [])
    assert first.history.escalation is None and first.recommended_action == "drain_and_reset_gpu"


def test_the_third_failure_of_a_host_escalates_with_its_history(three_failures):
    wh, (_, second, third) = three_failures
    assert second.history.subjects[0].root_30d == 1 and second.history.escalation is None
    host = next(h for h in third.history.subjects if h.subject == "gb-r12-n04")
    assert (host.root_7d, host.root_30d, host.cascade_30d, host.more) == (2, 2, 0, 0)
    listed = [(p.cluster, p.job_id, p.role) for p in host.attempts]
    assert listed == [("eos", "4191701", "root"), ("eos", "4191702", "root")]
    assert host.last_root == third.attempt.end  # the copies ended when the worked example did
    esc = third.history.escalation
    assert (esc.from_action, esc.to_action, esc.ticket) == ("drain_and_reset_gpu", "drain_node", "hardware")
    assert third.recommended_action == "drain_node" and third.affected_nodes == ["gb-r12-n04"]
    assert "gb-r12-n04 is root for the 3rd time in 30 days" in esc.reason and "open a hardware ticket" in esc.reason
    assert esc.reason in third.notes and f"Escalated: {esc.reason}" in third.explanation
    stored = Warehouse(wh).get("eos", "slurm", "4191703", 0)  # what the API and the dashboard read
    assert stored["history"]["escalation"]["to_action"] == "drain_node" and stored["recommended_action"] == "drain_node"


def test_the_switch_port_of_the_blamed_host_is_remembered_too(three_failures):
    _, (_, _, third) = three_failures
    port = next(h for h in third.history.subjects if h.kind == "switch_port")
    assert (port.subject, port.root_30d) == ("leaf-12:20", 2)  # topology.yaml cables gb-r12-n04 to leaf-12 port 20


def own_copy(wh: Path, tmp_path: Path) -> Path:
    """The module's warehouse for one test that writes to it: the others, in any order, read it as
    the three failures left it."""
    copy = tmp_path / wh.name
    for f in wh.parent.glob(f"{wh.name}*"):  # the file and its write-ahead log, if any
        shutil.copy(f, tmp_path / f.name)
    return copy


def test_a_re_diagnosis_does_not_count_itself(three_failures, tmp_path):
    wh = own_copy(three_failures[0], tmp_path)
    again = diagnose(bundle_copy(WORKED, tmp_path / "again", "4191702"), warehouse=wh)
    assert next(h for h in again.history.subjects if h.kind == "node").root_30d == 2  # 4191701 and 4191703


def test_the_threshold_and_the_policy_are_the_configurations(three_failures, tmp_path):
    wh = own_copy(three_failures[0], tmp_path)
    patient = MemoryPolicy(escalate_at=5)
    d = diagnose(bundle_copy(WORKED, tmp_path / "fourth", "4191704"), warehouse=wh, memory=patient)
    assert d.history.subjects[0].root_30d == 3 and d.history.escalation is None
    off = diagnose(bundle_copy(WORKED, tmp_path / "fifth", "4191705"), warehouse=wh, memory=MemoryPolicy(enabled=False))
    assert off.history is None and off.recommended_action == "drain_and_reset_gpu"
    with pytest.raises(ValueError, match="one of 7, 30"):
        MemoryPolicy(escalate_within_days=14)


def test_only_the_days_ending_at_the_attempts_end_count(three_failures):
    """An attempt diagnosed late (a backfill) sees the attempts before its end, not those after;
    the 7-day count leaves out what is older than a week."""
    wh, (first, _, _) = three_failures
    earlier = first.model_copy(deep=True)
    earlier.attempt.job_id, earlier.diagnosis_id = "4190000", "memory-earlier"
    earlier.attempt = earlier.attempt.model_copy(
        update={"start": first.attempt.start - timedelta(days=10), "end": first.attempt.end - timedelta(days=10)}
    )
    subjects = [b for b in blames(earlier, None) if b.role == "root"]
    [host] = Warehouse(wh).recall(earlier, subjects, listed=10)
    assert (host.root_7d, host.root_30d) == (0, 0)  # the others ended after it
    later = first.model_copy(deep=True)
    later.diagnosis_id = "memory-later"
    later.attempt = later.attempt.model_copy(update={"end": first.attempt.end + timedelta(days=8)})
    [host] = Warehouse(wh).recall(later, subjects, listed=1)
    assert (host.root_7d, host.root_30d) >= (0, 3) and host.root_7d == 0  # all 8+ days before it
    assert len(host.attempts) == 1 and host.more == host.root_30d - 1  # the listing is bounded


def test_what_a_diagnosis_blames_and_what_only_showed_its_cascade(three_failures):
    _, (first, _, _) = three_failures
    topology = [("leaf-12", "20", "gb-r12-n04", "host", "mlx5_0"), ("leaf-12", "17", "gb-r12-n01", "host", "mlx5_0")]
    found = blames(first, topology)
    assert Blame("node", "gb-r12-n04", "root") in found and Blame("switch_port", "leaf-12:20", "root") in found
    assert Blame("node", "gb-r12-n01", "cascade") in found and Blame("switch_port", "leaf-12:17", "cascade") in found
    assert not any(b.subject == "gb-r12-n04" and b.role == "cascade" for b in found)
    fabric = first.model_copy(update={"affected_nodes": [], "affected_components": ["leaf-07", "leaf-07:17"]})
    fabric.symptoms = [Symptom(symptom="nccl_error", role="cascade", node="gb-r12-n02")]
    assert [b for b in blames(fabric, None) if b.role == "root"] == [Blame("switch_port", "leaf-07:17", "root")]
    assert is_switch_port("leaf-07:17") and not is_switch_port("leaf")
    assert not is_switch_port("GPU 0018:01:00 NVLink 03")


def test_remembering_leaves_the_rules_own_verdict_as_it_was(three_failures, tmp_path):
    """remember returns the escalated diagnosis and leaves the one it was given (the rules' own
    verdict, which the archive keeps) as it was: its action, notes and explanation."""
    from workload_attribution.tasks.memory import remember

    wh = own_copy(three_failures[0], tmp_path)
    _, (first, _, _) = three_failures
    verdict = first.model_copy(deep=True)
    verdict.diagnosis_id, verdict.history = "memory-verdict", None
    before = verdict.model_dump(mode="json")
    escalated = remember(verdict, Warehouse(wh), None, MemoryPolicy(escalate_at=2))
    assert escalated.history.escalation is not None and escalated.recommended_action == "drain_node"
    assert escalated.history.escalation.reason in escalated.notes
    assert verdict.model_dump(mode="json") == before


def test_publishing_a_diagnosis_opens_the_warehouse_file_once(three_failures, tmp_path, monkeypatch):
    """Its fleet memory read, its archive and its write share one connection (Warehouse.session):
    the file is opened and checkpointed once, and what the three steps did is all there."""
    import workload_attribution.warehouse.store as store

    wh = own_copy(three_failures[0], tmp_path)
    opened: list[bool] = []
    real = store.open_file

    def counted(path, read_only, lock_wait_s, prepare=None):
        opened.append(read_only)
        return real(path, read_only, lock_wait_s, prepare)

    monkeypatch.setattr(store, "open_file", counted)
    fourth = diagnose(bundle_copy(WORKED, tmp_path / "4191704", "4191704"), warehouse=wh, archive=True)
    assert opened == [False]
    host = next(h for h in fourth.history.subjects if h.subject == "gb-r12-n04")
    assert host.root_30d == 3 and fourth.history.escalation is not None
    assert not [n for n in fourth.notes if "not archived" in n]
    assert Warehouse(wh).get("eos", "slurm", "4191704", 0)["history"]["escalation"]["to_action"] == "drain_node"


def test_a_warehouse_that_cannot_be_closed_keeps_the_diagnosis_as_not_stored(three_failures, tmp_path, monkeypatch):
    """The session's one close is where its checkpoint is written: a failure there (a full disk)
    is the diagnosis computed and not stored (CLI exit 3, the diagnosis printed), never lost."""
    import duckdb

    import workload_attribution.warehouse.store as store
    from workload_attribution.contracts.errors import NotStored

    wh = own_copy(three_failures[0], tmp_path)
    real = store.Warehouse._open

    class Unclosable:
        def __init__(self, con):
            self.con = con

        def __getattr__(self, name):
            return getattr(self.con, name)

        def close(self):
            self.con.close()
            raise duckdb.IOException("IO Error: could not write the checkpoint: No space left on device")

    monkeypatch.setattr(store.Warehouse, "_open", lambda self, read_only: Unclosable(real(self, read_only)))
    with pytest.raises(NotStored, match="No space left on device") as caught:
        diagnose(bundle_copy(WORKED, tmp_path / "4191705", "4191705"), warehouse=wh)
    assert caught.value.diagnosis is not None and caught.value.diagnosis.attempt.id.job_id == "4191705"
