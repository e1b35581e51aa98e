"""An explicit scope (nodes + window, no scheduler) of any size: its job id is a digest of the sorted
hosts and the window, the hosts stay in the scope as data, and 5,000 hosts are diagnosed through the
CLI and accepted by the API (150 hosts were a ValidationError, exit 1, and a 500: the job id was
the joined host list)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient

from tests.conftest import ROOT
from workload_attribution.contracts.identity import Target, Window
from workload_attribution.flows.config import Config
from workload_attribution.service.app import create_app

START = datetime(2026, 11, 20, 10, 0, tzinfo=timezone.utc)
END = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)
HOSTS = [f"gpu-r{r:03d}-n{n:02d}" for r in range(1, 101) for n in range(1, 51)]  # 5,000 hosts of 14 characters
FAULTY = "gpu-r042-n17"
TOKEN = "tok-123"


def test_the_job_id_is_a_digest_of_the_sorted_hosts_and_the_window():
    window = Window(nodes=HOSTS, start=START, end=END)
    reordered = Window(nodes=list(reversed(HOSTS)), start=START, end=END)
    elsewhere = timezone(timedelta(hours=2))  # the same instants, written in another zone
    zoned = Window(nodes=HOSTS, start=START.astimezone(elsewhere), end=END.astimezone(elsewhere))
    assert window.job_id == reordered.job_id == zoned.job_id
    assert window.job_id.startswith("nodes-") and len(window.job_id) == 30
    assert Window(nodes=HOSTS[:-1], start=START, end=END).job_id != window.job_id
    assert Window(nodes=HOSTS, start=START, end=END + timedelta(seconds=1)).job_id != window.job_id
    key = Target(cluster="lab", window=window).attempt_id("slurm").key  # a window is static whatever the cluster
    assert key == f"lab:static:{window.job_id}:0"


@pytest.fixture
def lab(tmp_path):
    """A static cluster whose syslogs are per-host files; one host logged an XID 79 minutes before
    the window's end (no scheduler record: the end is when the attempt failed)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / f"{FAULTY}.log").write_text(
        "2026-11-20T11:57:05.000000+00:00 gpu-r042-n17 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
        "name=<unknown>, GPU has fallen off the bus.\n"
    )
    (logs / "gpu-r001-n01.log").write_text("2026-11-20T10:05:00.000000+00:00 gpu-r001-n01 kernel: eth0: link up\n")
    config = tmp_path / "attribution.yaml"
    config.write_text(
        "warehouse: ''\nclusters:\n  lab:\n    scheduler: static\n"
        f"    sources:\n      syslog: {{connector: files, path: '{logs}/{{host}}.log'}}\n"
    )
    return config


def test_the_cli_diagnoses_5000_hosts(lab):
    args = ["diagnose", "--config", str(lab), "--cluster", "lab", "--nodes", ",".join(HOSTS)]
    args += ["--start", START.isoformat(), "--end", END.isoformat(), "--json", "--inline"]
    r = subprocess.run([sys.executable, "-m", "workload_attribution", *args], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    assert d["attempt"]["scheduler"] == "static" and d["attempt"]["nodes"] == HOSTS
    assert d["attempt"]["job_id"] == Window(nodes=HOSTS, start=START, end=END).job_id
    assert (d["terminal_state"], d["sub_domain"], d["affected_nodes"]) == ("hardware_failure", "gpu", [FAULTY])


class Recorder:
    """Prefect stand-in: records each flow run asked for."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, dict]] = []

    async def start(self, key, parameters, tags):
        self.runs.append((key, parameters))
        return f"run-{len(self.runs)}", False

    async def reset(self):
        pass


def test_the_api_takes_5000_hosts(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTRIBUTION_API_TOKEN", TOKEN)
    cfg = Config(
        warehouse="", clusters={"lab": {"scheduler": "slurm"}}, service={"outbox_dir": str(tmp_path / "outbox")}
    )
    recorder = Recorder()
    body = {"cluster": "lab", "nodes": HOSTS, "start": START.isoformat(), "end": END.isoformat()}
    assert len(json.dumps(body)) > cfg.service.max_body_bytes  # more than a webhook's body: its own bound
    with TestClient(create_app(cfg, recorder)) as client:
        r = client.post("/v1/attempts", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 202, r.text
    job_id = Window(nodes=HOSTS, start=START, end=END).job_id
    assert r.json()["idempotency_key"] == f"lab:static:{job_id}:0"
    [(key, parameters)] = recorder.runs
    assert key == f"lab:static:{job_id}:0" and parameters["target"]["window"]["nodes"] == HOSTS


def test_nodes_take_a_slurm_hostlist_too():
    """`--nodes gpu-r[001-100]-n[01-50]` is the same 5,000 hosts as their list, the same attempt."""
    import argparse

    from workload_attribution.cli.diagnose import targets

    def target(nodes: str) -> Target:
        args = argparse.Namespace(
            bundles=[], job=None, cluster="lab", nodes=nodes, start=START.isoformat(), end=END.isoformat()
        )
        [one] = targets(args)
        return one

    listed, ranged = target(",".join(HOSTS)), target("gpu-r[001-100]-n[01-50]")
    assert ranged.window == listed.window and ranged.window.nodes == HOSTS
