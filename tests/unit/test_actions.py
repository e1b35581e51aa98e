"""The action sinks' guard and plan (actions/), on the worked example's diagnosis and a real
warehouse file, with recording sinks in place of the real ones (tests/integration/test_actions.py
runs the real ones against Slurm, Alertmanager, the Kubernetes stand-in and a webhook receiver)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from tests.conftest import WORKED
from tests.helpers import diagnose
from workload_attribution.actions import guard, registry
from workload_attribution.actions.act import act_on, undo
from workload_attribution.actions.config import ActionsConfig
from workload_attribution.actions.registry import Fleet, Request
from workload_attribution.contracts.actions import ActionHistory, ActionRecord, Outcome
from workload_attribution.contracts.errors import ActionError, ActionSkipped, BadInput
from workload_attribution.contracts.models import Diagnosis
from workload_attribution.flows.config import ClusterConfig, ConfigError, load_config
from workload_attribution.warehouse.store import Warehouse

NODES = [f"gb-r12-n{i:02d}" for i in range(1, 13)]


@pytest.fixture(autouse=True)
def config_file_restored(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """load_config(path) sets $ATTRIBUTION_CONFIG for the process: put back after each test."""
    monkeypatch.setenv("ATTRIBUTION_CONFIG", str(tmp_path / "absent.yaml"))


@pytest.fixture(scope="module")
def xid() -> Diagnosis:
    """The worked example: XID 149 on gb-r12-n04, drain_and_reset_gpu, confidence high."""
    d = diagnose(WORKED)
    assert (d.terminal_state.value, d.affected_nodes, d.confidence.value) == (
        "hardware_failure",
        ["gb-r12-n04"],
        "high",
    )
    return d


def changed(d: Diagnosis, **change: Any) -> Diagnosis:
    """The diagnosis with these fields changed, validated as a diagnosis is."""
    return Diagnosis.model_validate(d.model_dump() | change)


def burst(d: Diagnosis, nodes: list[str], job: str = "9000") -> Diagnosis:
    """The same failure on other nodes, as another attempt (another diagnosis id)."""
    scope = d.attempt.model_copy(update={"job_id": job, "nodes": sorted(set(d.attempt.nodes) | set(nodes))})
    return changed(d, attempt=scope.model_dump(), diagnosis_id=scope.id.diagnosis_id, affected_nodes=nodes)


def user_code(d: Diagnosis) -> Diagnosis:
    return changed(
        d,
        terminal_state="application_failure",
        sub_domain="user_code",
        recommended_action="fix_code",
        affected_nodes=[],
        root_cause=None,
    )


class Recorder:
    """A sink that records what it was asked and answers as told."""

    def __init__(self, fleet: Fleet | None = None, fail: list[Exception] | None = None):
        self.acts: list[Request] = []
        self.reverts: list[tuple[ActionRecord, str]] = []
        self._fleet = fleet or Fleet({"gpu": frozenset(NODES)}, frozenset())
        self.fail = list(fail or [])

    def fleet(self) -> Fleet:
        return self._fleet

    def act(self, request: Request) -> dict[str, Any]:
        self.acts.append(request)
        if self.fail:
            raise self.fail.pop(0)
        return {"sent": request.node, "isolation": request.isolation}

    def revert(self, record: ActionRecord, why: str) -> dict[str, Any]:
        self.reverts.append((record, why))
        return {"reverted": record.action_id}


@pytest.fixture
def sinks(monkeypatch) -> dict[str, Recorder]:
    """The slurm and alertmanager kinds built as recorders."""
    made = {"slurm": Recorder(), "alertmanager": Recorder()}
    for kind, sink in made.items():
        known = registry.kinds()[kind]
        monkeypatch.setitem(registry._REGISTRY, kind, dataclasses.replace(known, build=lambda c, cl, s=sink: s))
    return made


def cluster(dry_run: bool = False, **limits: Any) -> ClusterConfig:
    actions = {
        "dry_run": dry_run,
        "sinks": [{"kind": "slurm"}, {"kind": "alertmanager", "url": "http://alertmanager:9093"}],
        "dashboard_url": "https://attribution.example/",
        "max_partition_percent": 100,
    } | limits
    return ClusterConfig.model_validate({"scheduler": "slurm", "actions": actions})


def outcomes(records: list[ActionRecord]) -> list[tuple[str, str | None, str]]:
    return [(r.sink, r.node, r.outcome.value) for r in records]


# ---------------------------------------------------------------------------------------- the guard


def _history(**kw: Any) -> ActionHistory:
    return ActionHistory(**kw)


@pytest.mark.parametrize(
    "change, said",
    [
        ({"terminal_state": "application_failure", "sub_domain": "user_code"}, "the workload's own failure"),
        ({"terminal_state": "application_failure", "sub_domain": "gpu_oom"}, "the workload's own failure"),
        ({"sub_domain": "ambiguous"}, "an ambiguous verdict never isolates"),
        ({"terminal_state": "unknown", "sub_domain": "insufficient_evidence"}, "insufficient_evidence verdict never"),
        ({"recommended_action": "investigate"}, "investigate does not isolate"),
        ({"confidence": "medium"}, "confidence medium is below min_confidence high"),
    ],
)
def test_verdicts_that_never_isolate(xid, change, said):
    d = changed(xid, **change)
    verdicts = guard.decide(d, ActionsConfig(), _history(), Fleet({"gpu": frozenset(NODES)}, frozenset()))
    assert [v.isolate for v in verdicts] == [False] and said in verdicts[0].reason


@pytest.mark.parametrize(
    "key, value",
    [
        ("lines_with_time_out_of_range", 1),
        ("lines_with_impossible_time", 2),
        ("non_finite_samples", 3),
    ],
)
def test_evidence_that_lies_never_isolates(xid, key, value):
    d = xid.model_copy(deep=True)
    c = next(c for c in d.coverage if c.source == "syslog")
    setattr(c.details, key, value)
    verdicts = guard.decide(d, ActionsConfig(), _history(), Fleet({"gpu": frozenset(NODES)}, frozenset()))
    assert [v.isolate for v in verdicts] == [False]
    assert verdicts[0].reason == f"evidence that lies (syslog {key} {value}): never isolates a node"


def test_a_verdict_that_passes_isolates_its_node(xid):
    verdicts = guard.decide(xid, ActionsConfig(), _history(), Fleet({"gpu": frozenset(NODES)}, frozenset()))
    assert [(v.node, v.isolate) for v in verdicts] == [("gb-r12-n04", True)]


def test_the_hourly_limit_counts_distinct_nodes_of_the_cluster(xid):
    d = burst(xid, ["gb-r12-n05", "gb-r12-n06", "gb-r12-n07"])
    cfg = ActionsConfig(max_nodes_per_hour=3, max_partition_percent=100)
    verdicts = guard.decide(d, cfg, _history(recent={"gb-r12-n01"}), Fleet({"gpu": frozenset(NODES)}, frozenset()))
    assert [v.isolate for v in verdicts] == [True, True, False]
    assert "limit: 3 node(s) isolated in cluster eos within the last hour, max_nodes_per_hour 3" in verdicts[2].reason


def test_the_blast_radius_counts_what_is_down_already(xid):
    # 10 nodes, one down: 20% lets one more go (2 of 10), not a second (3 of 10)
    fleet = Fleet({"gpu": frozenset(NODES[:10])}, frozenset({"gb-r12-n01"}))
    d = burst(xid, ["gb-r12-n05", "gb-r12-n06"])
    verdicts = guard.decide(d, ActionsConfig(max_partition_percent=20), _history(), fleet)
    assert [v.isolate for v in verdicts] == [True, False]
    assert "blast radius: partition gpu would have 3 of 10 node(s) out of service (30% > max_partition_percent 20)" in (
        verdicts[1].reason
    )


def test_no_second_isolation_and_no_blind_one(xid):
    fleet = Fleet({"gpu": frozenset(NODES)}, frozenset())
    mine = _drained(xid, "gb-r12-n04")
    (v,) = guard.decide(xid, ActionsConfig(), _history(standing=[mine]), fleet)
    assert (v.isolate, v.already) == (False, mine.action_id)
    other = burst(xid, ["gb-r12-n04"], job="77")
    (v,) = guard.decide(other, ActionsConfig(), _history(standing=[mine]), fleet)
    assert not v.isolate and v.reason == f"already isolated for diagnosis {xid.diagnosis_id}"
    (v,) = guard.decide(xid, ActionsConfig(), _history(), None, "slurm: scontrol failed")
    assert not v.isolate and "could not be read (slurm: scontrol failed): nothing is isolated blind" in v.reason
    odd = burst(xid, ["../../apis/x"])
    (v,) = guard.decide(odd, ActionsConfig(), _history(), fleet)
    assert not v.isolate and "is not a host name" in v.reason


def _drained(d: Diagnosis, node: str) -> ActionRecord:
    now = datetime.now(timezone.utc)
    return ActionRecord(
        action_id="a1",
        decided_at=now,
        cluster=d.attempt.cluster,
        scheduler="slurm",
        job_id=d.attempt.job_id,
        attempt=0,
        diagnosis_id=d.diagnosis_id,
        rules_version=d.rules.version,
        terminal_state=d.terminal_state.value,
        sub_domain=d.sub_domain.value,
        confidence="high",
        recommended_action=d.recommended_action.value,
        sink="slurm",
        operation="drain",
        isolates=True,
        node=node,
        dry_run=False,
        outcome=Outcome.done,
    )


# ------------------------------------------------------------------------------ acting and recording


def test_a_dry_run_calls_no_sink_and_records_every_decision(xid, sinks, tmp_path):
    wh = str(tmp_path / "w.duckdb")
    records = act_on(xid, cluster(dry_run=True), wh)
    assert sinks["slurm"].acts == [] and sinks["alertmanager"].acts == []
    assert outcomes(records) == [("slurm", "gb-r12-n04", "dry_run"), ("alertmanager", "gb-r12-n04", "dry_run")]
    assert outcomes(Warehouse(wh).actions()) == outcomes(records)
    assert all(r.dry_run for r in Warehouse(wh).actions())


def test_a_user_code_failure_isolates_nothing_and_says_why(xid, sinks, tmp_path):
    wh = str(tmp_path / "w.duckdb")
    records = act_on(user_code(xid), cluster(), wh)
    assert sinks["slurm"].acts == [] and sinks["alertmanager"].acts == []
    assert outcomes(records) == [("slurm", None, "skipped"), ("alertmanager", None, "skipped")]
    assert "the workload's own failure never isolates a node" in records[0].reason
    assert "fix_code is not among this sink's on_actions" in records[1].reason


def test_isolation_then_the_alert_that_says_so(xid, sinks, tmp_path):
    wh = str(tmp_path / "w.duckdb")
    records = act_on(xid, cluster(), wh)
    assert outcomes(records) == [("slurm", "gb-r12-n04", "done"), ("alertmanager", "gb-r12-n04", "done")]
    (drain,) = sinks["slurm"].acts
    (alert,) = sinks["alertmanager"].acts
    assert drain.node == alert.node == "gb-r12-n04" and alert.isolation == "slurm drain done"
    assert alert.dashboard_url == "https://attribution.example/"
    stored = Warehouse(wh).actions()
    assert [(r.outcome, r.tries, r.details["sent"]) for r in stored] == [("done", 1, "gb-r12-n04")] * 2
    # the same diagnosis again (a retried flow run, a re-run of diagnose): nothing is done twice
    again = act_on(xid, cluster(), wh)
    assert outcomes(again) == [("slurm", "gb-r12-n04", "skipped"), ("alertmanager", "gb-r12-n04", "skipped")]
    assert len(sinks["slurm"].acts) == 1 and len(sinks["alertmanager"].acts) == 1
    assert again[0].reason == "already isolated for this diagnosis (slurm drain)"


def test_a_burst_isolates_up_to_the_limit_and_alerts_for_the_rest(xid, sinks, tmp_path):
    wh = str(tmp_path / "w.duckdb")
    for i, node in enumerate(["gb-r12-n01", "gb-r12-n02", "gb-r12-n03"]):
        act_on(burst(xid, [node], job=str(100 + i)), cluster(max_nodes_per_hour=2), wh)
    assert [r.node for r in sinks["slurm"].acts] == ["gb-r12-n01", "gb-r12-n02"]
    told = {r.node: r.isolation for r in sinks["alertmanager"].acts}
    assert told["gb-r12-n01"] == "slurm drain done"
    assert told["gb-r12-n03"].startswith("not isolated: slurm drain skipped: limit: 2 node(s) isolated in cluster eos")
    # an hour later the limit has room again
    later = datetime.now(timezone.utc) + timedelta(hours=1, minutes=1)
    act_on(burst(xid, ["gb-r12-n05"], job="200"), cluster(max_nodes_per_hour=2), wh, now=later)
    assert sinks["slurm"].acts[-1].node == "gb-r12-n05"


def test_transient_failures_are_retried_and_the_last_error_recorded(xid, sinks, tmp_path, monkeypatch):
    monkeypatch.setattr("workload_attribution.actions.act.RETRY_DELAYS_S", (0.0,))
    sinks["slurm"].fail = [ActionError("scontrol: Socket timed out", transient=True)]
    sinks["alertmanager"].fail = [ActionError("alertmanager: HTTP 400: bad alert")]
    records = act_on(xid, cluster(retries=2), str(tmp_path / "w.duckdb"))
    assert [(r.outcome.value, r.tries) for r in records] == [("done", 2), ("failed", 1)]
    assert records[1].reason == "alertmanager: HTTP 400: bad alert"
    assert sinks["alertmanager"].acts[0].isolation == "slurm drain done"


def test_a_sink_that_declines_is_recorded_skipped(xid, sinks, tmp_path):
    sinks["slurm"].fail = [ActionSkipped("gb-r12-n04 is drained already (maintenance): that drain stands")]
    records = act_on(xid, cluster(), str(tmp_path / "w.duckdb"))
    assert (records[0].outcome, records[0].reason) == (
        "skipped",
        "gb-r12-n04 is drained already (maintenance): that drain stands",
    )
    assert (
        sinks["alertmanager"].acts[0].isolation.startswith("not isolated: slurm drain skipped: gb-r12-n04 is drained")
    )


def test_a_re_diagnosis_resolves_the_alert_and_flags_the_drain(xid, sinks, tmp_path):
    wh = str(tmp_path / "w.duckdb")
    first = act_on(xid, cluster(), wh)
    newer = changed(user_code(xid), rules=xid.rules.model_dump() | {"version": "2027.1.0"})
    records = act_on(newer, cluster(), wh)
    flag, resolve = records[0], records[1]
    assert (flag.operation, flag.outcome.value, flag.reverts) == ("flag_undo", "flagged", first[0].action_id)
    assert "re-diagnosed by rules 2027.1.0: now application_failure/user_code (action fix_code)" in flag.reason
    assert f"`attribution actions undo {xid.diagnosis_id}`" in flag.reason
    assert (resolve.operation, resolve.outcome.value, resolve.reverts) == ("resolve", "done", first[1].action_id)
    assert [r.action_id for r, _ in sinks["alertmanager"].reverts] == [first[1].action_id]
    assert sinks["slurm"].reverts == []  # a drain is flagged, not undone: a person decides
    in_force = Warehouse(wh).actions(in_force=True)
    assert [(r.sink, r.operation) for r in in_force] == [("slurm", "drain")]
    # the flag is said once
    assert [r.operation for r in act_on(newer, cluster(), wh)] == ["drain", "alert"]


def test_undo_reverses_what_stands_and_records_it(xid, sinks, tmp_path):
    wh = str(tmp_path / "w.duckdb")
    act_on(xid, cluster(), wh)
    with pytest.raises(BadInput, match="no actions are recorded for diagnosis nope"):
        undo("nope", {"eos": cluster()}, wh)
    with pytest.raises(BadInput, match="cluster eos has no actions block here"):
        undo(xid.diagnosis_id, {}, wh)
    preview = undo(xid.diagnosis_id, {"eos": cluster()}, wh, preview=True)
    assert [r.operation for r in preview] == ["resume", "resolve"] and sinks["slurm"].reverts == []
    done = undo(xid.diagnosis_id, {"eos": cluster()}, wh)
    assert [(r.operation, r.outcome.value) for r in done] == [("resume", "done"), ("resolve", "done")]
    assert Warehouse(wh).actions(in_force=True) == []
    assert undo(xid.diagnosis_id, {"eos": cluster()}, wh) == []  # nothing in force: nothing to do
    # undone, the node may be isolated again by a new diagnosis of it
    assert act_on(xid, cluster(), wh)[0].outcome == "done"


def test_a_dry_run_is_undone_as_a_dry_run(xid, sinks, tmp_path):
    wh = str(tmp_path / "w.duckdb")
    act_on(xid, cluster(dry_run=True), wh)
    done = undo(xid.diagnosis_id, {"eos": cluster(dry_run=True)}, wh)
    assert [(r.operation, r.outcome.value, r.dry_run) for r in done] == [
        ("resume", "dry_run", True),
        ("resolve", "dry_run", True),
    ]
    assert sinks["slurm"].reverts == [] and Warehouse(wh).actions(in_force=True) == []


def test_the_flow_step_acts_on_a_bundle_whose_cluster_has_an_actions_block(sinks, tmp_path):
    """`diagnose BUNDLE` (resolve -> the story -> act): the bundle names its cluster, eos."""
    from workload_attribution.contracts.identity import Target
    from workload_attribution.flows.inline import attribute_inline
    from workload_attribution.flows.pipeline import resolve

    wh = str(tmp_path / "w.duckdb")
    actions = "{dry_run: false, max_partition_percent: 100, sinks: [{kind: slurm}]}"
    (tmp_path / "a.yaml").write_text(f"clusters:\n  eos:\n    scheduler: static\n    actions: {actions}\n")
    cfg = load_config(str(tmp_path / "a.yaml"), warehouse=wh)
    d = attribute_inline(*resolve(cfg, Target(bundle=str(WORKED))))
    assert [r.node for r in sinks["slurm"].acts] == ["gb-r12-n04"]
    assert [r.diagnosis_id for r in Warehouse(wh).actions()] == [d.diagnosis_id]
    # not stored, not acted on (nothing to guard with); and POST /v1/diagnose's evidence never acts
    attribute_inline(*resolve(cfg.model_copy(update={"warehouse": ""}), Target(bundle=str(WORKED))))
    attribute_inline(*resolve(cfg, Target(bundle=str(WORKED)), act=False))
    assert len(sinks["slurm"].acts) == 1


# ------------------------------------------------------------------------------------ configuration


def test_the_actions_block_is_checked_like_the_rest(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "clusters:\n  eos:\n    actions:\n      max_nodes_per_hour: -1\n"
        "      sinks: [{kind: pager}, {kind: slurm}, {kind: slurm}]\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(str(bad))
    said = "\n".join(err.value.problems)
    assert "clusters.eos.actions.max_nodes_per_hour = '-1': Input should be greater than or equal to 0" in said
    assert (
        "clusters.eos.actions.sinks.0: Input tag 'pager' found using 'kind' does not match any of the expected tags"
        in said
    )
    defaults = ActionsConfig()
    assert (defaults.dry_run, defaults.min_confidence, defaults.sinks) == (True, "high", [])
    twice = ActionsConfig.model_validate(
        {"sinks": [{"kind": "webhook", "url": "http://a"}, {"kind": "webhook", "url": "http://b", "name": "b"}]}
    )
    assert [s.label for s in twice.sinks] == ["webhook", "b"]


def test_the_backfill_acts_on_what_it_diagnoses(sinks, tmp_path):
    from workload_attribution.flows.backfill import backfill_inline

    wh = str(tmp_path / "w.duckdb")
    actions = "{dry_run: false, max_partition_percent: 100, sinks: [{kind: slurm}]}"
    (tmp_path / "a.yaml").write_text(f"clusters:\n  eos:\n    scheduler: static\n    actions: {actions}\n")
    cfg = load_config(str(tmp_path / "a.yaml"), warehouse=wh)
    summary = backfill_inline(
        since="2026-11-01T00:00:00Z", until="2026-12-01T00:00:00Z", bundles_dir=str(WORKED.parent), cfg=cfg
    )
    assert summary.diagnosed == 1
    assert [(r.sink, r.node, r.outcome.value) for r in Warehouse(wh).actions()] == [("slurm", "gb-r12-n04", "done")]


# ------------------------------------------------------------------------------------- Slurm's ways


SCONTROL_LINE = (
    "NodeName=node02 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=4.05 "
    "OS=Linux 6.18.44-fc-v1252 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=2000 State=IDLE+DRAIN ThreadsPerCore=1 "
    "Partitions=debug,gpu  BootTime=2026-12-04T09:16:39 CfgTRES=cpu=8,mem=2000M,billing=8 AllocTRES= "
    "ExtSensorsTemp=n/s Reason=attribution abc-123 xid_149 hardware_failure/nvlink [root@2026-12-04T11:15:27]"
)


def test_scontrols_one_line_per_node_is_read():
    from workload_attribution.actions.sinks.slurm import parse_scontrol

    (node,) = parse_scontrol(SCONTROL_LINE + "\n")
    assert (node.name, node.partitions, node.reason) == (
        "node02",
        ("debug", "gpu"),
        "attribution abc-123 xid_149 hardware_failure/nvlink",
    )
    assert node.drained and node.out_of_service and node.states == {"IDLE", "DRAIN"}


def test_a_slurmrestd_that_can_update_nodes_is_asked_to(xid):
    """slurmrestd 23.02 on (v0.0.39+) offers POST /slurm/<v>/node/{node_name}: the drain and the
    resume go there, not to scontrol (the real 22.05 cannot: tests/integration/test_actions.py)."""
    import json as _json

    import httpx

    from workload_attribution.actions.sinks.slurm import Slurm, SlurmSinkConfig
    from workload_attribution.connectors.slurm import SlurmSource

    node = {"name": "gb-r12-n04", "state": ["IDLE"], "partitions": ["gpu"], "reason": ""}
    posted: list[dict[str, Any]] = []

    def answer(status: int, doc: dict[str, Any]) -> httpx.Response:  # a body streamed, as a server's is
        return httpx.Response(status, stream=httpx.ByteStream(_json.dumps(doc).encode()))

    def slurmrestd(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/openapi":
            paths = {"/slurm/v0.0.40/node/{node_name}": {"get": {}, "post": {}, "delete": {}}}
            return answer(200, {"paths": paths})
        if request.method == "POST" and path == "/slurm/v0.0.40/node/gb-r12-n04":
            posted.append(_json.loads(request.content))
            drained = "DRAIN" in posted[-1]["state"]
            node.update(state=["IDLE", "DRAIN"] if drained else ["IDLE"], reason=posted[-1].get("reason", ""))
            return answer(200, {"errors": [], "warnings": []})
        if path in ("/slurm/v0.0.40/node/gb-r12-n04", "/slurm/v0.0.40/nodes"):
            return answer(200, {"nodes": [node], "errors": []})
        return answer(404, {"errors": [{"error": f"no {path}"}]})

    sink = Slurm(
        SlurmSinkConfig(scontrol="/nonexistent/scontrol"),
        SlurmSource(rest_url="http://slurmrestd:6820"),
        transport=httpx.MockTransport(slurmrestd),
    )
    assert sink.fleet() == Fleet({"gpu": frozenset({"gb-r12-n04"})}, frozenset())
    done = sink.act(Request(xid, "gb-r12-n04", "a1"))
    reason = f"attribution {xid.diagnosis_id} xid_149 hardware_failure/nvlink"
    assert done == {"reason": reason, "via": "slurmrestd", "state_before": "IDLE"}
    assert posted == [{"state": ["DRAIN"], "reason": reason}]
    assert sink.revert(_drained(xid, "gb-r12-n04"), "undone")["via"] == "slurmrestd"
    assert posted[-1] == {"state": ["RESUME"]}
