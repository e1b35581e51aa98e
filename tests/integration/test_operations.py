"""Operated as operators operate it: the production shape (a real Prefect server, `attribution
deploy`, worker and serve from the wheel in a fresh venv started from /, the real Slurm) while its
parts are stopped and killed. Nothing accepted is ever lost, nothing is diagnosed twice, no run
stays Running.

- Prefect down: serve answers 503 + Retry-After; the shipped Slurm hook answers slurmctld at once,
  keeps the event spooled, and `attribution-hook --flush` delivers it once Prefect is back.
- serve stopped with SIGTERM in the middle of a webhook storm (duplicates and invalid calls
  among them), then started again: invalid calls are refused naming the field; every attempt
  answered 202 has exactly one flow run and one diagnosis (what was queued is in the outbox on
  disk and drained at start; what was refused is re-sent, as senders do).
- the worker killed with SIGKILL in the middle of a run (its metrics source hung behind
  tests/services/stall_proxy.py): the automation `attribution deploy` applies marks the run Crashed
  when its heartbeats stop, the other one runs it again once a worker is back, and the nightly
  backfill, discovering through slurmrestd, finds exactly the failed jobs and diagnoses the one
  never triggered; each failed job is diagnosed once.
- a worker killed with SIGKILL in the middle of a storm (Kueue webhooks and static-cluster
  attempts), another worker host still up: every accepted attempt diagnosed once, its runs that
  crashed run again by the automation, with no new trigger and no backfill.
- a worker dying right after it claimed a run (Pending, no heartbeat yet): crashed by the same
  automation and run again on the live worker, diagnosed once.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest

from tests.services.prefect_stack import SECRET, TOKEN, diagnoses, wait_diagnosis
from tests.services.prometheus import free_port
from tests.waiting import wait_until
from workload_attribution.service.auth import sign

# a long operational proof: the slow tier (`pytest -m slow`, run by .ci/run after the default tier)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "deployments" / "slurm" / "attribution-hook"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(autouse=True)
def whole_stack(stack):
    """Each test here stops parts of the stack; each begins with all of them up."""
    stack.restore()


def needs_slurm(stack) -> None:
    if not stack.slurm:
        pytest.skip("real Slurm needs root")


def hook_config(stack, where: Path, url: str) -> Path:
    """The hook's config and secret as its docstring installs them (readable by SlurmUser only)."""
    secret, conf = where / "webhook.secret", where / "attribution-hook.conf"
    secret.write_text(SECRET + "\n")
    conf.write_text(
        f"url = {url}\nsecret_file = {secret}\nslurm_conf = {stack.slurm['SLURM_CONF']}\n"
        f"spool_dir = {where / 'spool'}\n"
    )
    for f in (secret, conf):
        shutil.chown(f, "slurm")
        os.chmod(f, 0o600)
    return conf


def spooled(spool: Path) -> list[Path]:
    return sorted(spool.glob("*.json")) if spool.is_dir() else []


def run_states(stack, cluster: str) -> Counter:
    """State of every flow run of the attempt deployment whose target is on `cluster`."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    async def read():
        async with get_client() as client:
            dep = await client.read_deployment_by_name("attribute-attempt/attempt")
            runs = await client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[dep.id])), limit=200
            )
            return Counter(
                r.state.type.value for r in runs if (r.parameters.get("target") or {}).get("cluster") == cluster
            )

    with stack.client_settings():
        return asyncio.run(read())


def test_prefect_down_refuses_with_503_and_the_hook_spools_then_flush_delivers(stack):
    needs_slurm(stack)
    from tests.integration.test_slurm import sbatch

    hook_dir = Path(stack.slurm["SLURM_HOOK_DIR"])
    conf = hook_config(stack, hook_dir, f"{stack.url}/v1/webhooks/slurm")
    spool = hook_dir / "spool"
    stack.kill("server", signal.SIGTERM)
    try:
        # the service cannot record a trigger without Prefect: 503 + Retry-After, so the sender keeps it
        body = json.dumps({"cluster": "ci", "job_id": "424242", "state": "FAILED", "nodes": "node1"}).encode()
        r = httpx.post(
            f"{stack.url}/v1/webhooks/slurm",
            content=body,
            headers={**sign(SECRET, body), "Content-Type": "application/json"},
            timeout=30,
        )
        assert r.status_code == 503 and int(r.headers["Retry-After"]) > 0, r.text

        # a job fails; slurmctld runs the hook, which spools the event and keeps it
        job = sbatch(stack.slurm, "-N2", "--no-requeue", "--wrap", "srun bash -c 'exit 3'")
        wait_until(
            lambda: any(job in p.name for p in spooled(spool)),
            f"the hook to spool job {job}",
            90,
            seen=lambda: list(spool.iterdir()),
        )

        # the hook as slurmctld runs it (its environment), timed, with no service at all: it never
        # makes slurmctld wait
        alone = hook_dir / "alone"
        alone.mkdir(exist_ok=True)
        env = {
            **os.environ,
            "ATTRIBUTION_HOOK_CONFIG": str(
                hook_config(stack, alone, f"http://127.0.0.1:{free_port()}/v1/webhooks/slurm")
            ),
            "JOBID": "424243",
            "JOBSTATE": "FAILED",
            "NODES": "node[1-2]",
            "START": str(int(time.time()) - 60),
            "END": str(int(time.time())),
        }
        t = time.monotonic()
        hook = subprocess.run(["python3", str(HOOK)], env=env, capture_output=True, text=True, timeout=30)
        took = time.monotonic() - t
        # it returned while its sender was still trying (0.5 + 2 + 4 s of retries): the event is
        # spooled and the delivery is not waited for; the time is printed, a figure, not a bound
        assert hook.returncode == 0 and took < 5.0, (took, hook.stderr)
        assert [p.name for p in spooled(alone / "spool")][0].endswith("-ci-424243.json")
        print(f"\nhook answered slurmctld in {took * 1000:.0f} ms with no service")

        # the background senders give up (the service keeps answering 503: 0.5 + 2 + 4 s of retries)
        # and leave the events spooled
        wait_until(
            lambda: not senders_of(spool),
            "the hook's background senders to give up",
            60,
            seen=lambda: senders_of(spool),
        )
        names = [p.name for p in spooled(spool)]
        assert [n for n in names if job in n], names
        assert not (spool / "rejected").exists() or not list((spool / "rejected").iterdir())
    finally:
        stack.start_server()

    # Prefect is back: the timer's --flush delivers, oldest first; the events leave the spool
    flush = subprocess.run(
        ["python3", str(HOOK), "--flush"],
        env={**os.environ, "ATTRIBUTION_HOOK_CONFIG": str(conf)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    conf.unlink()
    assert flush.returncode == 0, flush.stdout + flush.stderr
    assert spooled(spool) == []
    item = wait_diagnosis(stack, cluster="ci", job_id=job, timeout=240)
    doc = httpx.get(f"{stack.url}/v1/diagnoses/{item['diagnosis_id']}", headers=AUTH, timeout=30).json()
    assert doc["attempt"]["state"] == "FAILED" and len(doc["attempt"]["nodes"]) == 2
    assert [i["job_id"] for i in diagnoses(stack, cluster="ci")].count(job) == 1


def test_serve_stopped_mid_storm_then_restarted_loses_no_accepted_attempt(stack, kube):
    from tests.bench.webhook_burst import plan, runs_per_key

    # the storm of tests/bench/webhook_burst.py, small: 25 calls, 20 % duplicates, 3 invalid
    storm = plan(25, kube, "k8s", "team-a", dup_share=0.2, invalid_share=0.12, seed=23, prefix="sigterm")
    accepted: dict[str, str] = {}  # workload -> idempotency key of a 202
    refused: list[bytes] = []  # 503 or no answer: the sender keeps it and re-sends later
    invalid: list[dict] = []  # 422s

    async def send(client: httpx.AsyncClient, body: bytes) -> None:
        try:
            r = await client.post(
                f"{stack.url}/v1/webhooks/kubernetes",
                content=body,
                headers={**sign(SECRET, body), "Content-Type": "application/json"},
            )
        except httpx.TransportError:
            refused.append(body)
            return
        if r.status_code == 202:
            accepted[json.loads(body)["name"]] = r.json()["idempotency_key"]
        elif r.status_code == 422:
            invalid.append(r.json())
        else:
            assert r.status_code == 503, r.text
            refused.append(body)

    async def storm_with_a_stop():
        async with httpx.AsyncClient(timeout=60) as client:
            first = [asyncio.ensure_future(send(client, b)) for _, b in storm.bodies[:12]]
            await asyncio.to_thread(wait_until, lambda: len(accepted) >= 3, "three accepted triggers")
            await asyncio.to_thread(stack.kill, "service", signal.SIGTERM)  # others still in flight
            rest = [asyncio.ensure_future(send(client, b)) for _, b in storm.bodies[12:]]  # nobody listens
            await asyncio.gather(*first, *rest)

    asyncio.run(storm_with_a_stop())
    assert accepted and refused, (len(accepted), len(refused))  # the stop really was mid-storm
    log = stack.log("service")
    assert "trigger(s) left in the outbox" in log, log[-2000:]  # a stop is never silent

    stack.start_service()  # the outbox left on disk is drained first
    pending, refused[:] = list(refused), []
    asyncio.run(_resend(pending, send))
    assert not refused, f"{len(refused)} still refused after the restart"

    def diagnosed() -> Counter:
        return Counter(
            i["job_id"].rpartition("/")[2] for i in diagnoses(stack, cluster="k8s") if "/sigterm-" in i["job_id"]
        )

    names = wait_until(
        lambda: set(found := diagnosed()) >= set(storm.unique) and found,
        "every accepted attempt of the storm to be diagnosed",
        300,
        seen=lambda: sorted(set(storm.unique) - set(diagnosed()))[:5],
    )
    assert set(accepted) == set(storm.unique)
    # each invalid call refused with the field named, never accepted
    assert len(invalid) == 3 and all(d["detail"][0]["field"] for d in invalid), invalid
    assert set(names) == set(storm.unique), sorted(set(storm.unique) - set(names))[:5]
    assert all(c == 1 for c in names.values()), [n for n, c in names.items() if c != 1]
    runs = runs_per_key(stack)
    assert all(runs[k] == 1 for k in accepted.values()), {k: runs[k] for k in accepted.values() if runs[k] != 1}


def senders_of(spool: Path) -> list[int]:
    """The hook's background senders (`attribution-hook --send <spooled file>`) still running for `spool`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:  # the process ended meanwhile
            continue
        if b"--send" in args and any(a.startswith(str(spool).encode()) for a in args):
            found.append(int(cmdline.parent.name))
    return found


async def _resend(bodies: list[bytes], send) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        await asyncio.gather(*[send(client, b) for b in bodies])


def test_worker_killed_mid_run_is_crashed_and_the_nightly_diagnoses_each_attempt_once(stack, hung_prometheus):
    needs_slurm(stack)
    from prefect.deployments import run_deployment

    from tests.integration.test_slurm import sbatch, wait_for

    since = datetime.now(timezone.utc).replace(microsecond=0)
    # three failed jobs (one killed mid-run, one diagnosed before the night, one never triggered)
    # and one that completed; the nightly discovers them through slurmrestd
    jobs = [sbatch(stack.slurm, "-N1", "--no-requeue", "--wrap", f"srun bash -c 'exit {c}'") for c in (4, 5, 6)]
    ok = sbatch(stack.slurm, "-N1", "--wrap", "true")
    for j in jobs:
        wait_for(stack.slurm, j, ["FAILED"], timeout=120)
    wait_for(stack.slurm, ok, ["COMPLETED"], timeout=120)
    r = httpx.post(f"{stack.url}/v1/attempts", json={"cluster": "ci-hung", "job_id": jobs[1]}, headers=AUTH, timeout=30)
    assert r.status_code == 202, r.text
    wait_diagnosis(stack, cluster="ci-hung", job_id=jobs[1], timeout=180)

    hung_prometheus.stall()
    held = hung_prometheus.held
    r = httpx.post(f"{stack.url}/v1/attempts", json={"cluster": "ci-hung", "job_id": jobs[0]}, headers=AUTH, timeout=30)
    assert r.status_code == 202, r.text
    run_id = r.json()["flow_run_id"]
    wait_until(  # the run is collecting, stuck
        lambda: hung_prometheus.held > held,
        "the run to be stuck collecting from the hung Prometheus",
        120,
        seen=lambda: stack.log("worker")[-3000:],
    )
    stack.kill("worker", signal.SIGKILL)

    # no heartbeat: the automation crashes the run (zombie-after 15 s in this stack), the other
    # schedules it again (AwaitingRetry), waiting for a worker
    with stack.client_settings():
        wait_until(lambda: "CRASHED" in history(run_id), "the run to be Crashed", 120)
        wait_until(lambda: history(run_id)[-1] == "SCHEDULED", "the crashed run to be scheduled again", 60)

    hung_prometheus.release()
    stack.start_worker()
    wait_diagnosis(stack, cluster="ci-hung", job_id=jobs[0], timeout=180)  # the same run, run again
    with stack.client_settings():
        # the diagnosis is written before the run reports Completed: wait for the state, not assume it
        wait_until(
            lambda: history(run_id)[-1] in ("COMPLETED", "FAILED", "CRASHED"),
            "the run run again to finish",
            60,
        )
        assert history(run_id)[-1] == "COMPLETED", history(run_id)
        nightly = run_deployment(
            "backfill/nightly",
            parameters={"cluster": "ci-hung", "since": since.isoformat()},
            timeout=300,
            poll_interval=1,
            as_subflow=False,
        )
    assert nightly.state.is_completed(), stack.log("worker")[-3000:]
    assert "3 found, 2 already diagnosed" in stack.log("worker"), stack.log("worker")[-3000:]
    per_job = Counter(i["job_id"] for i in diagnoses(stack, cluster="ci-hung"))
    assert per_job == {j: 1 for j in jobs}, per_job  # each failed attempt once, the completed one never
    assert {"RUNNING", "PENDING", "SCHEDULED"}.isdisjoint(run_states(stack, "ci-hung"))


def test_a_run_whose_worker_died_right_after_claiming_it_is_crashed_and_run_again(stack):
    """A worker claims a run (Pending) and dies before the run starts or any heartbeat leaves: the
    automation `attribution deploy` applies crashes it after --zombie-after (15 s in this stack),
    the other one schedules it again, the live worker runs it, and its attempt is diagnosed once.
    Heartbeats alone (Prefect's documented automation) would leave it Pending forever."""
    from datetime import timedelta

    from prefect.client.orchestration import get_client
    from prefect.states import Pending, Scheduled

    from workload_attribution.contracts.identity import STATIC, Target, Window

    target = Target(
        cluster="lab",
        window=Window(
            nodes=[f"gb-r12-n0{i}" for i in range(1, 7)], start="2026-11-24T10:00:00Z", end="2026-11-24T12:13:07Z"
        ),
    )
    with stack.client_settings(), get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name("attribute-attempt/attempt")
        run = client.create_flow_run_from_deployment(
            deployment.id,
            parameters={"target": target.model_dump(mode="json", exclude_none=True)},
            idempotency_key=target.attempt_id(STATIC).key,
            state=Scheduled(scheduled_time=datetime.now(timezone.utc) + timedelta(days=1)),  # no worker takes it
        )
        claim = client.set_flow_run_state(run.id, Pending())  # the claim of a worker that then dies
        assert claim.status.value == "ACCEPT", claim
        run_id = str(run.id)

        def completed() -> list[str] | None:
            states = history(run_id)
            return states if states[-1] == "COMPLETED" else None

        states = wait_until(
            completed, "the abandoned run to be crashed and run again", 180, seen=lambda: history(run_id)
        )
    assert states[:3] == ["SCHEDULED", "PENDING", "CRASHED"] and states.count("CRASHED") == 1, states
    lab = [i for i in diagnoses(stack, cluster="lab") if (i["attempt_end"] or "")[:10] == "2026-11-24"]
    assert len(lab) == 1, lab


def history(run_id: str) -> list[str]:
    """The state types a flow run went through, oldest first (call within stack.client_settings())."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        states = client.read_flow_run_states(run_id)
    return [st.type.value for st in sorted(states, key=lambda st: st.timestamp)]


def test_a_worker_killed_mid_storm_loses_no_attempt(stack, kube):
    """Two worker hosts; one is killed with SIGKILL while it runs the storm's attempts. Its runs
    are Crashed (no heartbeat) and run again by the automation on the other host: every accepted
    attempt is diagnosed exactly once, within minutes, with no new trigger and no backfill."""
    from tests.bench.webhook_burst import plan, runs_per_key
    from tests.services.prefect_stack import flow_runs

    storm = plan(14, kube, "k8s", "team-a", dup_share=0.0, invalid_share=0.0, seed=31, prefix="killed")
    # one attempt's collection waits on the Kubernetes API until released: the worker is mid-run
    # on it when it is killed, however fast the other runs go (looking for a run in flight, once a
    # second, missed them all when a faster diagnosis ended the storm between two looks)
    held = storm.unique[0]
    kube.hold(held)
    static = [  # static-cluster attempts, which the nightly backfill never discovers
        {
            "cluster": "lab",
            "nodes": [f"gb-r12-n0{i}" for i in range(1, 7)],
            "start": f"2026-11-2{day}T10:00:00Z",
            "end": f"2026-11-2{day}T12:13:07Z",
        }
        for day in (1, 2, 3)
    ]
    with stack.client_settings():
        backfills = _backfill_runs()
    accepted: set[str] = set()  # idempotency keys
    for _, body in storm.bodies:
        r = httpx.post(
            f"{stack.url}/v1/webhooks/kubernetes",
            content=body,
            headers={**sign(SECRET, body), "Content-Type": "application/json"},
            timeout=60,
        )
        assert r.status_code == 202, r.text
        accepted.add(r.json()["idempotency_key"])
    for body in static:
        r = httpx.post(f"{stack.url}/v1/attempts", json=body, headers=AUTH, timeout=60)
        assert r.status_code == 202, r.text
        accepted.add(r.json()["idempotency_key"])

    def running() -> list:
        return [fr for fr in flow_runs(stack) if fr.idempotency_key in accepted and fr.state.type.value == "RUNNING"]

    def frozen_mid_run() -> list:
        """The runs in flight, listed with the worker stopped: none of them can finish before the
        kill (listed while it ran, a fast run could, and then none crashed). None: running again."""
        stack.pause("worker")
        try:
            now = running()
        except BaseException:
            stack.resume("worker")
            raise
        if not now:
            stack.resume("worker")
        return now

    try:
        wait_until(lambda: kube.holding(held), f"the worker to be collecting {held} (held)", 120)
        in_flight = wait_until(frozen_mid_run, "a run in flight with the worker stopped", 120)
        stack.kill("worker", signal.SIGKILL)  # mid-run: its runs in flight are lost with it
    finally:
        kube.release(held)  # the run again on the other host is not held
    assert any(held in str(fr.parameters) for fr in in_flight), in_flight  # the held run among them
    stack.start_worker("worker-2")  # the other host
    try:
        crashed = [fr.id for fr in in_flight]

        def done() -> set[str]:
            runs = {fr.idempotency_key: fr for fr in flow_runs(stack) if fr.idempotency_key in accepted}
            return {k for k, fr in runs.items() if fr.state.type.value == "COMPLETED"}

        wait_until(
            lambda: done() == set(accepted),
            "every accepted attempt's run to complete",
            300,
            seen=lambda: (sorted(set(accepted) - done())[:3], stack.log("worker-2")[-2000:]),
        )
        with stack.client_settings():
            retried = {str(rid): history(str(rid)) for rid in crashed}
            # listed with the worker stopped, every run in flight crashed with it and was run again to
            # completion (the automation may mark a run Crashed more than once before a worker takes it)
            assert all(h[-1] == "COMPLETED" and "CRASHED" in h for h in retried.values()), retried
            assert _backfill_runs() == backfills  # no backfill ran
        runs = runs_per_key(stack)
        assert all(runs[k] == 1 for k in accepted), {k: runs[k] for k in accepted if runs[k] != 1}
        kueue = Counter(i["job_id"].rpartition("/")[2] for i in diagnoses(stack, cluster="k8s"))
        assert {n: kueue[n] for n in storm.unique} == {n: 1 for n in storm.unique}
        days = ("2026-11-21", "2026-11-22", "2026-11-23")
        lab = [i for i in diagnoses(stack, cluster="lab") if (i["attempt_end"] or "")[:10] in days]
        assert len(lab) == len({i["job_id"] for i in lab}) == 3, lab
    finally:
        stack.kill("worker-2")
        stack.start_worker()  # the stack as the other tests expect it


def _backfill_runs() -> int:
    """Flow runs of the nightly backfill deployment that left Scheduled so far (within
    stack.client_settings()): Prefect's scheduler adds the schedule's next runs whenever it passes,
    which is no backfill run."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    with get_client(sync_client=True) as client:
        dep = client.read_deployment_by_name("backfill/nightly")
        return client.count_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[dep.id])),
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(not_any_=[StateType.SCHEDULED]))
            ),
        )
