"""The action sinks against the real things: Slurm 22.05 (drains seen by `scontrol show node`), a
real Alertmanager (alerts read back from /api/v2/alerts), the Kubernetes API stand-in (the PATCH
requests as the API server takes them) and a webhook receiver (CloudEvents, checked with the
service's own signature check).

The XID and user-code attempts are regression bundles with their hosts renamed to the Slurm
nodes (node01..node04), diagnosed by `attribution diagnose BUNDLE` with a configuration whose
cluster has an `actions` block: the command an operator runs."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import EXAMPLES
from tests.services.alertmanager import Alertmanager
from tests.services.kube_standin import KubeStandIn
from tests.waiting import wait_until

XID48 = EXAMPLES / "xid48_dbe-1-0"  # XID 48 (double-bit ECC) on trn-169: hardware_failure/gpu_memory, high
USER_CODE = EXAMPLES / "python_exception_one_rank_cascade-1-0"  # application_failure/user_code
SLURM_NODES = ["node01", "node02", "node03", "node04"]


def retarget(src: Path, dst: Path, hosts: dict[str, str], job_id: str, cluster: str = "eos") -> Path:
    """A copy of a bundle whose hosts are `hosts`' values (names in every file and file name), as
    attempt `job_id` of `cluster`. Its sacct record goes: its hostlists name the old hosts."""
    shutil.copytree(src, dst)
    (dst / "scheduler" / "sacct.json").unlink(missing_ok=True)
    order = sorted(hosts, key=len, reverse=True)
    for path in sorted(p for p in dst.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for old in order:
            data = data.replace(old.encode(), hosts[old].encode())
        path.write_bytes(data)
        name = path.name
        for old in order:
            name = name.replace(old, hosts[old])
        path.rename(path.with_name(name))
    scope = dst / "attempt.yaml"
    text = re.sub(r"(?m)^cluster:.*$", f"cluster: {cluster}", scope.read_text())
    scope.write_text(re.sub(r"(?m)^job_id:.*$", f"job_id: '{job_id}'", text))
    return dst


def xid_on(node: str, dst: Path, job_id: str) -> Path:
    """The XID 48 attempt with its failing GPU on `node` (its other hosts on the other Slurm nodes)."""
    others = [n for n in SLURM_NODES if n != node]
    return retarget(XID48, dst, dict(zip(["trn-169", "trn-167", "trn-168", "trn-170"], [node, *others])), job_id)


def attribution(*args: str, config: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [sys.executable, "-m", "workload_attribution", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert not check or r.returncode == 0, f"attribution {' '.join(args)} exited {r.returncode}: {r.stderr[-2000:]}"
    return r


def scontrol_node(slurm: dict[str, str], node: str) -> tuple[str, str]:
    """(State, Reason) as `scontrol show node` says them."""
    out = subprocess.run(
        ["scontrol", "show", "node", node, "-o"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "SLURM_CONF": slurm["SLURM_CONF"]},
    ).stdout
    state = re.search(r"\bState=(\S+)", out)
    reason = re.search(r"\bReason=(.*?)(?:\s+\[[^\]]*\])?\s*$", out)
    return (state.group(1) if state else "", reason.group(1) if reason else "")


def drained(slurm: dict[str, str]) -> dict[str, str]:
    """The Slurm nodes drained now, with their reasons."""
    return {n: reason for n in SLURM_NODES for state, reason in [scontrol_node(slurm, n)] if "DRAIN" in state}


@pytest.fixture(autouse=True)
def config_file_restored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """load_config(path) sets $ATTRIBUTION_CONFIG for the process: put back after each test."""
    monkeypatch.setenv("ATTRIBUTION_CONFIG", str(tmp_path / "absent.yaml"))


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Alertmanager]:
    am = Alertmanager(tmp_path_factory.mktemp("alertmanager")).start()
    yield am
    am.stop()


@pytest.fixture
def nodes_back(slurm: dict[str, str]) -> Iterator[None]:
    """Every node this test drained is resumed after it: the Slurm is the other tests' too."""
    yield
    for node, reason in drained(slurm).items():
        if reason.startswith("attribution "):
            subprocess.run(
                ["scontrol", "update", f"nodename={node}", "state=resume"],
                env={**os.environ, "SLURM_CONF": slurm["SLURM_CONF"]},
                check=False,
            )


def config(tmp_path: Path, slurm: dict[str, str], am: Alertmanager, rest: bool = True, **actions: Any) -> Path:
    path = tmp_path / "attribution.yaml"
    cluster: dict[str, Any] = {
        "scheduler": "slurm",
        "slurm": {"rest_url": slurm["SLURMRESTD_URL"]} if rest else {},
        "actions": {
            "dry_run": False,
            "max_partition_percent": 100,
            "dashboard_url": "http://attribution.example:8080",
            "sinks": [
                {"kind": "slurm", "slurm_conf": slurm["SLURM_CONF"]},
                {"kind": "alertmanager", "url": am.url},
            ],
        }
        | actions,
    }
    path.write_text(yaml.safe_dump({"warehouse": str(tmp_path / "w.duckdb"), "clusters": {"eos": cluster}}))
    return path


def diagnose(bundle: Path, cfg: Path) -> dict[str, Any]:
    return json.loads(attribution("diagnose", str(bundle), "--json", config=cfg).stdout)


def actions_of(cfg: Path, diagnosis_id: str) -> list[dict[str, Any]]:
    out = attribution("actions", "list", diagnosis_id, "--json", config=cfg).stdout
    return [json.loads(line) for line in out.splitlines()]


def active_alerts(am: Alertmanager, diagnosis_id: str) -> list[dict[str, Any]]:
    return [a for a in am.alerts(diagnosis_id=diagnosis_id) if a["status"]["state"] == "active"]


# ------------------------------------------------------------------------------ Slurm and Alertmanager


def test_an_xid_attempt_drains_exactly_its_node_and_undo_resumes_it(slurm, alertmanager, nodes_back, tmp_path):
    cfg = config(tmp_path, slurm, alertmanager)
    d = diagnose(xid_on("node02", tmp_path / "b", "7001"), cfg)
    assert (d["terminal_state"], d["sub_domain"], d["affected_nodes"]) == ("hardware_failure", "gpu_memory", ["node02"])
    reason = f"attribution {d['diagnosis_id']} xid_48 hardware_failure/gpu_memory"
    assert drained(slurm) == {"node02": reason}
    (alert,) = wait_until(lambda: active_alerts(alertmanager, d["diagnosis_id"]), "the alert in Alertmanager", 30)
    assert alert["labels"] == {
        "alertname": "WorkloadAttribution",
        "cluster": "eos",
        "node": "node02",
        "terminal_state": "hardware_failure",
        "sub_domain": "gpu_memory",
        "action": "drain_and_reset_gpu",
        "diagnosis_id": d["diagnosis_id"],
    }
    notes = alert["annotations"]
    assert notes["isolation"] == "slurm drain done"
    assert notes["dashboard"] == f"http://attribution.example:8080/ui/diagnoses/{d['diagnosis_id']}"
    assert "node02" in notes["summary"] and "Xid" in notes["evidence"]
    assert [(a["sink"], a["operation"], a["outcome"]) for a in actions_of(cfg, d["diagnosis_id"])] == [
        ("slurm", "drain", "done"),
        ("alertmanager", "alert", "done"),
    ]
    undo = attribution("actions", "undo", d["diagnosis_id"], config=cfg)
    assert undo.stdout.splitlines() == [
        f"slurm resume: done node02 (undone by `attribution actions undo {d['diagnosis_id']}`)",
        f"alertmanager resolve: done node02 (undone by `attribution actions undo {d['diagnosis_id']}`)",
    ]
    assert drained(slurm) == {} and "DRAIN" not in scontrol_node(slurm, "node02")[0]
    wait_until(lambda: not active_alerts(alertmanager, d["diagnosis_id"]), "the alert resolved", 30)
    in_force = attribution("actions", "list", "--in-force", "--json", config=cfg).stdout
    assert in_force == ""


def test_a_user_code_failure_drains_nothing(slurm, alertmanager, nodes_back, tmp_path):
    cfg = config(tmp_path, slurm, alertmanager)
    hosts = dict(zip(["gb200-t30-3", "gb200-t31-0", "gb200-t31-1", "gb200-t31-2"], SLURM_NODES))
    d = diagnose(retarget(USER_CODE, tmp_path / "b", hosts, "7002"), cfg)
    assert (d["terminal_state"], d["sub_domain"]) == ("application_failure", "user_code")
    assert drained(slurm) == {} and active_alerts(alertmanager, d["diagnosis_id"]) == []
    recorded = actions_of(cfg, d["diagnosis_id"])
    assert [(a["sink"], a["outcome"]) for a in recorded] == [("slurm", "skipped"), ("alertmanager", "skipped")]
    assert recorded[0]["reason"] == "application_failure/user_code: the workload's own failure never isolates a node"


def test_a_burst_drains_up_to_the_limit_and_alerts_for_the_rest(slurm, alertmanager, nodes_back, tmp_path):
    """Three attempts, each an XID on another node, with max_nodes_per_hour 2; the nodes are read
    with scontrol here (no slurmrestd in the cluster's block)."""
    cfg = config(tmp_path, slurm, alertmanager, rest=False, max_nodes_per_hour=2)
    ids = [diagnose(xid_on(n, tmp_path / n, f"71{i}"), cfg)["diagnosis_id"] for i, n in enumerate(SLURM_NODES[:3])]
    assert sorted(drained(slurm)) == ["node01", "node02"]
    (third,) = wait_until(lambda: active_alerts(alertmanager, ids[2]), "the third node's alert", 30)
    assert third["labels"]["node"] == "node03"
    assert third["annotations"]["isolation"] == (
        "not isolated: slurm drain skipped: limit: 2 node(s) isolated in cluster eos within the last hour, "
        "max_nodes_per_hour 2"
    )
    for i in ids:
        attribution("actions", "undo", i, config=cfg)
    assert drained(slurm) == {}


def test_a_dry_run_acts_on_nothing_and_records_everything(slurm, alertmanager, nodes_back, tmp_path):
    cfg = config(tmp_path, slurm, alertmanager, dry_run=True)
    d = diagnose(xid_on("node01", tmp_path / "b", "7003"), cfg)
    assert drained(slurm) == {} and active_alerts(alertmanager, d["diagnosis_id"]) == []
    recorded = actions_of(cfg, d["diagnosis_id"])
    assert [(a["sink"], a["node"], a["outcome"], a["dry_run"]) for a in recorded] == [
        ("slurm", "node01", "dry_run", True),
        ("alertmanager", "node01", "dry_run", True),
    ]


def test_a_re_diagnosis_resolves_the_alert_and_flags_the_drain(slurm, alertmanager, nodes_back, tmp_path):
    """The same attempt decided again by newer rules, now the workload's own failure: the alert of
    the old verdict is resolved, the drain stays and is flagged for undo."""
    from workload_attribution.actions.act import act_on
    from workload_attribution.contracts.models import Diagnosis
    from workload_attribution.flows.config import load_config

    cfg = config(tmp_path, slurm, alertmanager)
    first = Diagnosis.model_validate(diagnose(xid_on("node04", tmp_path / "b", "7004"), cfg))
    assert sorted(drained(slurm)) == ["node04"]
    wait_until(lambda: active_alerts(alertmanager, first.diagnosis_id), "the alert", 30)
    newer = Diagnosis.model_validate(
        first.model_dump()
        | {"terminal_state": "application_failure", "sub_domain": "user_code", "recommended_action": "fix_code"}
        | {"affected_nodes": [], "root_cause": None, "rules": first.rules.model_dump() | {"version": "2099.1.0"}}
    )
    loaded = load_config(str(cfg))
    records = act_on(newer, loaded.clusters["eos"], loaded.warehouse)
    assert [(r.sink, r.operation, r.outcome.value) for r in records[:2]] == [
        ("slurm", "flag_undo", "flagged"),
        ("alertmanager", "resolve", "done"),
    ]
    wait_until(lambda: not active_alerts(alertmanager, first.diagnosis_id), "the old verdict's alert resolved", 30)
    assert sorted(drained(slurm)) == ["node04"]  # a person decides: `actions undo`
    listed = attribution("actions", "list", "--in-force", config=cfg).stdout
    assert "node04" in listed and "drain" in listed
    attribution("actions", "undo", first.diagnosis_id, config=cfg)
    assert drained(slurm) == {}


# ------------------------------------------------------------------------------ Kubernetes and webhooks


@pytest.fixture
def kube_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeStandIn]:
    """Four GPU nodes in two pools (k01, k02: a; k03, k04: b); k02 carries an operator's taint. The
    token is in $ACTIONS_TEST_KUBE_TOKEN, as a cluster's kueue block names it."""
    monkeypatch.setenv("ACTIONS_TEST_KUBE_TOKEN", "t0ken")
    server = KubeStandIn(token="t0ken").start()
    for i in range(1, 5):
        server.add_node(f"k0{i}", labels={"pool": "a" if i <= 2 else "b"})
    server.nodes["k02"]["spec"]["taints"] = [{"key": "gpu.example/maintenance", "effect": "NoSchedule"}]
    yield server
    server.stop()


def kube_cluster(kube_api: KubeStandIn, **actions: Any) -> Any:
    from workload_attribution.flows.config import ClusterConfig

    block = {
        "dry_run": False,
        "max_partition_percent": 50,
        "sinks": [{"kind": "kubernetes", "partition_label": "pool"}],
    }
    return ClusterConfig.model_validate(
        {
            "scheduler": "kueue",
            "kueue": {"url": kube_api.url, "token_env": "ACTIONS_TEST_KUBE_TOKEN"},
            "actions": block | actions,
        }
    )


def test_kubernetes_cordons_and_taints_with_the_api_servers_shapes(kube_api, tmp_path):
    from workload_attribution.actions.act import act_on, undo

    d = _xid_diagnosis(["k02"])
    cluster = kube_cluster(kube_api)
    wh = str(tmp_path / "w.duckdb")
    (record,) = act_on(d, cluster, wh)
    assert (record.operation, record.node, record.outcome.value) == ("cordon", "k02", "done")
    (patch,) = kube_api.patches
    taint = {"key": "attribution.io/diagnosis", "value": d.diagnosis_id, "effect": "NoSchedule"}
    assert patch == (
        "/api/v1/nodes/k02",
        "application/strategic-merge-patch+json",
        {
            "metadata": {"resourceVersion": "1"},
            "spec": {
                "unschedulable": True,
                "taints": [{"key": "gpu.example/maintenance", "effect": "NoSchedule"}, taint],
            },
        },
    )
    node = kube_api.nodes["k02"]
    assert node["spec"]["unschedulable"] is True and taint in node["spec"]["taints"]
    assert node["metadata"]["resourceVersion"] == "2"
    # pool a has k02 out now: another of its nodes would be 2 of 2 (100% > 50%): refused
    (second,) = act_on(_xid_diagnosis(["k01"], job="8002"), cluster, wh)
    assert second.outcome == "skipped" and "blast radius: partition a would have 2 of 2" in second.reason
    (done,) = undo(d.diagnosis_id, {"eos": cluster}, wh)
    assert (done.operation, done.outcome.value, done.details) == ("uncordon", "done", {"uncordoned": True})
    assert kube_api.patches[-1][2]["spec"] == {
        "taints": [{"key": "gpu.example/maintenance", "effect": "NoSchedule"}],
        "unschedulable": None,
    }
    assert "unschedulable" not in kube_api.nodes["k02"]["spec"]
    assert kube_api.nodes["k02"]["spec"]["taints"] == [{"key": "gpu.example/maintenance", "effect": "NoSchedule"}]


def test_a_node_cordoned_before_stays_cordoned_after_undo(kube_api, tmp_path):
    from workload_attribution.actions.act import act_on, undo

    kube_api.nodes["k03"]["spec"]["unschedulable"] = True  # an operator's cordon
    d = _xid_diagnosis(["k04"])
    cluster = kube_cluster(kube_api, max_partition_percent=100)
    wh = str(tmp_path / "w.duckdb")
    act_on(d.model_copy(update={"affected_nodes": ["k03"]}), cluster, wh)
    assert kube_api.patches[-1][2]["spec"]["unschedulable"] is True
    undo(d.diagnosis_id, {"eos": cluster}, wh)
    assert kube_api.nodes["k03"]["spec"]["unschedulable"] is True
    assert kube_api.nodes["k03"]["spec"]["taints"] == []


def test_the_stand_in_refuses_a_stale_patch_and_a_plain_json_one(kube_api):
    import httpx

    headers = {"Authorization": "Bearer t0ken"}
    stale = {"metadata": {"resourceVersion": "0"}, "spec": {"unschedulable": True}}
    smp = {"Content-Type": "application/strategic-merge-patch+json", **headers}
    r = httpx.patch(f"{kube_api.url}/api/v1/nodes/k01", content=json.dumps(stale), headers=smp)
    assert (r.status_code, r.json()["reason"]) == (409, "Conflict")
    r = httpx.patch(f"{kube_api.url}/api/v1/nodes/k01", json={"spec": {}}, headers=headers)
    assert (r.status_code, r.json()["reason"]) == (415, "UnsupportedMediaType")


@functools.cache
def _xid48() -> Any:
    from tests.helpers import diagnose as diagnose_here

    return diagnose_here(XID48)


def _xid_diagnosis(nodes: list[str], job: str = "8001") -> Any:
    """The XID 48 diagnosis as if it were of these nodes (cluster eos)."""
    from workload_attribution.contracts.models import Diagnosis

    d = _xid48()
    scope = d.attempt.model_copy(update={"cluster": "eos", "job_id": job, "nodes": nodes})
    return Diagnosis.model_validate(
        d.model_dump() | {"attempt": scope.model_dump(), "diagnosis_id": scope.id.diagnosis_id, "affected_nodes": nodes}
    )


class Receiver:
    """An incident tool's webhook endpoint: keeps each request's headers and body."""

    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/attribution"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_the_webhook_sends_signed_cloudevents(tmp_path, monkeypatch):
    from workload_attribution.actions.act import act_on, undo
    from workload_attribution.flows.config import ClusterConfig
    from workload_attribution.service.auth import check_signature

    receiver = Receiver()
    monkeypatch.setenv("INCIDENT_HMAC", "s3cret")
    cluster = ClusterConfig.model_validate(
        {
            "actions": {
                "dry_run": False,
                "sinks": [{"kind": "webhook", "url": receiver.url, "secret_env": "INCIDENT_HMAC"}],
            }
        }
    )
    d = _xid_diagnosis(["node03"])
    wh = str(tmp_path / "w.duckdb")
    (record,) = act_on(d, cluster, wh)
    ((headers, body),) = receiver.got
    check_signature("s3cret", headers, body, window_s=300)  # the service's own check: raises when wrong
    assert headers["content-type"] == "application/cloudevents+json; charset=utf-8"
    event = json.loads(body)
    assert {k: event[k] for k in ("specversion", "id", "source", "type", "subject")} == {
        "specversion": "1.0",
        "id": record.action_id,
        "source": "/workload-attribution/eos",
        "type": "io.attribution.diagnosis.raised",
        "subject": "node03",
    }
    assert datetime.fromisoformat(event["time"]) <= datetime.now(timezone.utc)
    data = event["data"]
    assert (data["diagnosis_id"], data["node"], data["root_cause"]["symptom"]) == (d.diagnosis_id, "node03", "xid_48")
    assert data["isolation"] == "no sink of this cluster isolates nodes"
    undo(d.diagnosis_id, {"eos": cluster}, wh)
    withdrawn = json.loads(receiver.got[-1][1])
    assert (withdrawn["type"], withdrawn["data"]["withdraws"]) == (
        "io.attribution.diagnosis.withdrawn",
        record.action_id,
    )
    # no secret: nothing is sent unsigned, and the record says why
    monkeypatch.delenv("INCIDENT_HMAC")
    (unsigned,) = act_on(_xid_diagnosis(["node04"], job="8009"), cluster, wh)
    assert unsigned.outcome == "failed" and "$INCIDENT_HMAC is not set: nothing is sent unsigned" in unsigned.reason
    assert len(receiver.got) == 2


# ------------------------------------------------------------------------------ many deciders, one lake

RACER = """
import sys
from pathlib import Path
from tests.integration.test_actions import race_once
race_once(sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4])
"""


def race_once(url: str, job: str, barrier: Path, me: str) -> None:
    """One process's decision on a lake, held after reading the history until the other process
    has read it too (both then see no isolation in the hour), with recording sinks."""
    import dataclasses
    import time

    from workload_attribution.actions import act, registry
    from workload_attribution.actions.registry import Fleet
    from workload_attribution.flows.config import ClusterConfig

    class Quiet:
        def fleet(self) -> Fleet:
            return Fleet({"gpu": frozenset(SLURM_NODES)}, frozenset())

        def act(self, request: Any) -> dict[str, Any]:
            return {}

    kind = registry.kinds()["slurm"]
    registry._REGISTRY["slurm"] = dataclasses.replace(kind, build=lambda c, cl: Quiet())
    plan = act.plan

    def held(ctx: Any, history: Any) -> Any:
        (barrier / me).touch()
        deadline = time.monotonic() + 60
        while len(list(barrier.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        return plan(ctx, history)

    act.plan = held
    cluster = ClusterConfig.model_validate(
        {
            "actions": {
                "dry_run": False,
                "max_nodes_per_hour": 1,
                "max_partition_percent": 100,
                "sinks": [{"kind": "slurm"}],
            }
        }
    )
    node = "node01" if me == "a" else "node02"
    (record,) = act.act_on(_xid_diagnosis([node], job=job), cluster, url)
    print(record.outcome.value, record.reason)


def test_two_deciders_on_one_lake_never_both_take_the_last_node(tmp_path, monkeypatch):
    """Two processes decide at once, each for another node of one cluster, the limit one node an
    hour: each reads an empty hour before either commits; their commits conflict on the cluster's
    row, the loser decides again on the winner's rows, and exactly one node is isolated."""
    from tests.services.postgres import Postgres
    from workload_attribution.warehouse.store import Warehouse

    base = Path(tempfile.mkdtemp(prefix="attribution-pg-"))
    base.chmod(0o755)
    pg = Postgres(base / "pg").start()
    try:
        url = f"ducklake+postgres://{pg.user}@127.0.0.1:{pg.port}/{pg.db}?data_path={tmp_path / 'lake'}"
        monkeypatch.setenv("PGPASSWORD", pg.password)
        env = {**os.environ}
        Warehouse(url).write(_xid_diagnosis(["node01"], job="9100"))  # the lake and its tables made
        barrier = tmp_path / "barrier"
        barrier.mkdir()
        racers = [
            subprocess.Popen(
                [sys.executable, "-c", RACER, url, job, str(barrier), me],
                cwd=Path(__file__).resolve().parents[2],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for me, job in (("a", "9101"), ("b", "9102"))
        ]
        said = [r.communicate(timeout=300) for r in racers]
        assert all(r.returncode == 0 for r in racers), [err[-2000:] for _, err in said]
        outcomes = sorted(out.split(" ", 1)[0] for out, _ in said)
        assert outcomes == ["done", "skipped"], said
        rows = Warehouse(url).query("SELECT node, outcome FROM actions WHERE outcome = 'done'")[1]
        assert len(rows) == 1
    finally:
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)
