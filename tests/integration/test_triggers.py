"""Triggers end to end, on the production shape: a real Prefect server, the deployments applied by
`attribution deploy`, a process worker (`attribution worker`), `attribution serve`, each a process.

- an explicit attempt (POST /v1/attempts) -> flow run on the worker -> diagnosis in the warehouse,
  read back through GET /v1/diagnoses;
- a Kueue Workload failure posted 10 times at once (plus once more straight to Prefect, as a second
  service replica would) -> one flow run, one diagnosis; the Kubernetes API is the stand-in of
  tests/services/kube_standin.py (no kube-apiserver runs here);
- a real Slurm job fails, the shipped jobcomp hook (deployments/slurm/attribution-hook) calls the
  webhook, and the diagnosis appears;
- the nightly backfill deployment over bundles: done, stale-rules and new attempts.

The webhook storm, with the services stopped and killed under it: test_operations.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import EXAMPLES
from tests.services.prefect_stack import SECRET, TOKEN, diagnoses, metrics, wait_diagnosis
from tests.waiting import wait_until
from workload_attribution.service.auth import sign

OOM = EXAMPLES / "host_oom_kueue-1-0"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_explicit_attempt_is_diagnosed_by_the_worker(stack):
    started = time.monotonic()
    body = {
        "cluster": "lab",
        "nodes": [f"gb-r12-n0{i}" for i in range(1, 7)],
        "start": "2026-11-20T10:00:00Z",
        "end": "2026-11-20T12:13:07Z",
    }
    r = httpx.post(f"{stack.url}/v1/attempts", json=body, headers=AUTH, timeout=30)
    assert r.status_code == 202, r.text
    accepted = r.json()
    assert accepted["status"] == "accepted" and accepted["flow_run_id"] and not accepted["duplicate"]
    # other tests diagnose `lab` attempts on other days with the same stack: find this one by its window
    item = wait_until(
        lambda: [i for i in diagnoses(stack, cluster="lab") if (i["attempt_end"] or "")[:10] == "2026-11-20"],
        "the diagnosis of the 2026-11-20 attempt",
        180,
        seen=lambda: "worker log:\n" + stack.log("worker")[-4000:],
    )[0]
    latency = time.monotonic() - started
    assert (item["terminal_state"], item["sub_domain"], item["affected_nodes"]) == (
        "hardware_failure",
        "nvlink",
        ["gb-r12-n04"],
    )
    doc = httpx.get(f"{stack.url}/v1/diagnoses/{item['diagnosis_id']}", headers=AUTH, timeout=15).json()
    assert doc["root_cause"]["node"] == "gb-r12-n04" and doc["attempt"]["scheduler"] == "static"
    assert {c["source"]: c["connector"] for c in doc["coverage"]} == {
        "app": "files",
        "syslog": "files",
        "fabricmanager": "files",
    }
    # filters narrow; a host that is not in it finds nothing
    assert httpx.get(f"{stack.url}/v1/diagnoses", params={"node": "gb-r12-n04"}, headers=AUTH).json()["items"]
    assert not httpx.get(f"{stack.url}/v1/diagnoses", params={"node": "gb-r12-n01"}, headers=AUTH).json()["items"]
    print(f"\ntrigger -> diagnosis visible: {latency:.1f}s")


def test_duplicate_webhooks_start_one_run(stack):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.deployments import run_deployment

    before = metrics(stack)
    wl = json.loads((OOM / "scheduler" / "workload.json").read_text())
    body = json.dumps(
        {
            "cluster": "k8s",
            "namespace": "team-a",
            "name": wl["metadata"]["name"],
            "attempt": 1,
            "conditions": wl["status"]["conditions"],
        }
    ).encode()

    async def storm():
        async with httpx.AsyncClient(timeout=60) as c:
            return await asyncio.gather(
                *[
                    c.post(
                        f"{stack.url}/v1/webhooks/kubernetes",
                        content=body,
                        headers={**sign(SECRET, body), "Content-Type": "application/json"},
                    )
                    for _ in range(10)
                ]
            )

    answers = asyncio.run(storm())
    assert [a.status_code for a in answers] == [202] * 10, [a.text for a in answers]
    ids = {a.json()["flow_run_id"] for a in answers}
    assert len(ids) == 1
    assert sorted(a.json()["duplicate"] for a in answers) == [False] + [True] * 9
    key = answers[0].json()["idempotency_key"]
    assert key == f"k8s:kueue:team-a/{wl['metadata']['name']}:1"

    # a second service replica (no shared memory) asking Prefect with the same key gets the same run
    with stack.client_settings():
        again = run_deployment(
            "attribute-attempt/attempt",
            parameters={"target": {"cluster": "k8s", "job_id": f"team-a/{wl['metadata']['name']}"}},
            timeout=0,
            idempotency_key=key,
            as_subflow=False,
        )

        async def runs_with_key():
            async with get_client() as client:
                dep = await client.read_deployment_by_name("attribute-attempt/attempt")
                runs = await client.read_flow_runs(
                    deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[dep.id]))
                )
                return [r for r in runs if r.idempotency_key == key]

        item = wait_diagnosis(stack, cluster="k8s", job_id=f"team-a/{wl['metadata']['name']}")
        # the diagnosis is written just before the run completes
        runs = wait_until(
            lambda: (found := asyncio.run(runs_with_key())) and found[0].state.is_completed() and found,
            "the flow run to complete",
        )
    assert str(again.id) in ids
    assert len(runs) == 1 and runs[0].state.is_completed()
    assert (item["terminal_state"], item["sub_domain"]) == ("application_failure", "host_oom")
    # one diagnosis of the attempt, under the key's job id (the forwarder's test may diagnose another attempt of it)
    job = f"team-a/{wl['metadata']['name']}"
    rows = [i for i in diagnoses(stack, cluster="k8s") if (i["job_id"], i["attempt"]) == (job, item["attempt"])]
    assert len(rows) == 1
    after = metrics(stack)
    assert (
        after['attribution_triggers_total{outcome="duplicate",source="kubernetes"}']
        - before['attribution_triggers_total{outcome="duplicate",source="kubernetes"}']
        == 9
    )
    assert (
        after['attribution_flow_runs_started_total{source="kubernetes"}']
        - before['attribution_flow_runs_started_total{source="kubernetes"}']
        == 1
    )


def test_kubernetes_forwarder_posts_ended_workloads(stack, kube):
    """The shipped forwarder (deployments/kubernetes/forwarder.py, --once: list and catch up) against
    the API stand-in: the failed Workload reaches the service, signed, with its conditions."""
    r = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve().parents[2] / "deployments/kubernetes/forwarder.py"),
            "--once",
            "--since-minutes",
            "10000000",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "KUBE_URL": kube.url,
            "NAMESPACE": "team-a",
            "ATTRIBUTION_CLUSTER": "k8s",
            "ATTRIBUTION_URL": f"{stack.url}/v1/webhooks/kubernetes",
            "ATTRIBUTION_SECRET": SECRET,
        },
    )
    assert r.returncode == 0, r.stderr
    posted = {p["answer"]["idempotency_key"]: p for p in map(json.loads, r.stdout.splitlines())}
    # the stand-in is shared: other tests add failed Workloads (clones of this one); each is posted once
    assert sorted(posted) == sorted(f"k8s:kueue:team-a/{name}:0" for name in kube.workloads)
    ours = posted["k8s:kueue:team-a/pytorchjob-moe-8x22b-b9d4b:0"]
    assert (ours["http"], ours["condition"], ours["reason"]) == (202, "Finished", "Failed")
    assert ours["answer"]["status"] == "accepted" and ours["answer"]["flow_run_id"]


def test_failed_slurm_job_fires_the_hook_and_is_diagnosed(stack):
    if not stack.slurm:
        pytest.skip("real Slurm needs root")
    from tests.integration.test_slurm import sbatch

    before = metrics(stack)
    # installed as the hook's docstring says: config and secret readable by SlurmUser only
    hook_dir = Path(stack.slurm["SLURM_HOOK_DIR"])
    secret, conf = hook_dir / "webhook.secret", hook_dir / "attribution-hook.conf"
    secret.write_text(SECRET + "\n")
    conf.write_text(
        f"url = {stack.url}/v1/webhooks/slurm\nsecret_file = {secret}\n"
        f"slurm_conf = {stack.slurm['SLURM_CONF']}\nspool_dir = {hook_dir / 'spool'}\n"
    )
    for f in (secret, conf):
        shutil.chown(f, "slurm")
        os.chmod(f, 0o600)
    try:
        started = time.monotonic()
        job = sbatch(
            stack.slurm,
            "-N2",
            "--no-requeue",
            "--wrap",
            "srun bash -c 'if [ $SLURM_PROCID = 1 ]; then exit 9; fi; sleep 2'",
        )
        item = wait_diagnosis(stack, cluster="ci", job_id=job, timeout=240)
        latency = time.monotonic() - started
    finally:
        conf.unlink()
        secret.unlink()
    assert item["job_id"] == job and item["scheduler"] == "slurm"
    doc = httpx.get(f"{stack.url}/v1/diagnoses/{item['diagnosis_id']}", headers=AUTH).json()
    assert doc["attempt"]["state"] == "FAILED" and len(doc["attempt"]["nodes"]) == 2
    assert {c["source"]: c["status"] for c in doc["coverage"]} == {"sacct": "ok"}
    started_key = 'attribution_triggers_total{outcome="started",source="slurm"}'
    assert metrics(stack)[started_key] - before[started_key] == 1
    print(f"\nsbatch -> hook -> diagnosis visible: {latency:.1f}s")


def test_nightly_backfill_deployment_mixes_done_stale_and_new(stack, tmp_path):
    """The nightly deployment on the worker, over a bundle tree: attempts already diagnosed by the
    current rules are skipped, those of an older rules version redone, the new ones diagnosed."""
    import duckdb
    from prefect.deployments import run_deployment

    tree = tmp_path / "bundles"
    picks = [
        "xid79_offbus_cascade-1-0",
        "ib_link_down_one_host-1-0",
        "watchdog_no_syslog-1-0",
        "cuda_oom_one_rank-1-0",
        "slurm_time_limit-1-0",
    ]
    for p in picks:
        shutil.copytree(EXAMPLES / p, tree / p)
    wh = stack.base / "backfill.duckdb"
    # first pass: the first two only (later: "done" and "stale")
    first = tmp_path / "first"
    for p in picks[:2]:
        shutil.copytree(EXAMPLES / p, first / p)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "workload_attribution",
            "backfill",
            "--inline",
            "--bundles",
            str(first),
            "--since",
            "3650d",
            "--warehouse",
            str(wh),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ATTRIBUTION_CONFIG": str(stack.config)},
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["diagnosed"] == 2
    with duckdb.connect(str(wh)) as con:  # the second one was diagnosed by an older rules pack
        job = con.execute("SELECT job_id FROM diagnoses ORDER BY job_id").fetchall()
        stale_job = job[1][0]
        con.execute("UPDATE diagnoses SET rules_version = '2026.01.1+oldrules' WHERE job_id = ?", [stale_job])

    with stack.client_settings():
        run = run_deployment(
            "backfill/nightly",
            parameters={"bundles_dir": str(tree), "since": "3650d", "warehouse": str(wh)},
            timeout=240,
            poll_interval=1,
            as_subflow=False,
        )
    assert run.state.is_completed(), stack.log("worker")[-3000:]
    with duckdb.connect(str(wh), read_only=True) as con:
        versions = dict(con.execute("SELECT job_id, rules_version FROM diagnoses").fetchall())
    assert len(versions) == len(picks) and "2026.01.1+oldrules" not in versions.values()
    # the run is completed once its state is; its log lines reach the worker's log file after
    said = f"{len(picks)} found, 1 already diagnosed"

    def logged() -> bool:
        text = stack.log("worker")
        return said in text and "(rules changed)" in text

    wait_until(
        logged, f"the worker's log to say {said!r} and '(rules changed)'", seen=lambda: stack.log("worker")[-2000:]
    )
