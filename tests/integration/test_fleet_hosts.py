"""Several worker hosts, one lake. Two `attribution worker` processes, each on a "host" of its own
(tests/services/netns.py: its own network namespace, HOME, temp, working directory and Prefect
home), share nothing but what a fleet's hosts share: the Prefect server (on PostgreSQL), the
DuckLake catalog (the same PostgreSQL) and the bucket (a real S3 server, SeaweedFS), each reached
at the machine's address on the host's link, never at 127.0.0.1. A storm of failed Kueue
Workloads, each sent twice as signed webhooks, is diagnosed by both: every attempt once, no run
twice, both hosts at work, and the lake's every table count and analyst view equal to a single
host's run over the same attempts (`attribution backfill --inline` into a DuckDB file).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from tests.bench.trigger_storm import Setup, Stack, body, fire, wait_final
from tests.bench.webhook_burst import runs_per_key
from tests.services.netns import Host
from workload_attribution.warehouse.store import Warehouse, views

# a long operational proof: the slow tier (`pytest -m slow`, run by .ci/run after the default tier)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
OOM = ROOT / "tests" / "regression" / "host_oom_kueue-1-0"
CLUSTER, NAMESPACE = "k8s", "team-a"  # trigger_storm.body names these
STORM = 8


class HostsStack(Stack):
    """trigger_storm's stack (Prefect on PostgreSQL, workers counting their API calls), its
    workers each started inside a Host with that host's environment (its directories, its
    configuration, the services at its link's address)."""

    def __init__(self, base: Path, config: Path, server_env: dict, env: dict, hosts: list[Host], envs: list[dict]):
        super().__init__(base, config, Setup("postgres", len(hosts), 4, "ducklake"), server_env, env)
        self.machines = hosts
        self.host_envs = [
            {**h.env, **e, "PREFECT_API_URL": f"http://{h.root_side}:{self.server_port}/api"}
            for h, e in zip(hosts, envs)
        ]

    def counts(self, i: int) -> Path:
        return self.machines[i].dir / "work" / "api-counts.json"

    def start_worker(self, name: str = "worker", env: dict[str, str] | None = None) -> subprocess.Popen:
        procs = []
        for i, host in enumerate(self.machines):
            cmd = [sys.executable, "-m", "tests.bench.apicount", str(self.counts(i)), "worker", *self.worker_args]
            log = self.base / f"worker-{i + 1}.log"
            procs.append(
                subprocess.Popen(
                    host.command(cmd),
                    cwd=host.dir / "work",
                    env={**self.env, **self.host_envs[i], "PYTHONPATH": str(ROOT)},
                    stdout=log.open("ab"),
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            self.procs[f"worker-{i + 1}"] = procs[-1]
        return procs[0]


def _config(path: Path, warehouse: str, kube_url: str) -> Path:
    files = {s: {"connector": "files", "path": str(OOM / "logs" / s / "{host}.log")} for s in ("app", "syslog")}
    cluster = {
        "scheduler": "kueue",
        "kueue": {"url": kube_url, "namespace": NAMESPACE, "token_env": None},
        "sources": files,
    }
    path.write_text(yaml.safe_dump({"warehouse": warehouse, "clusters": {CLUSTER: cluster}}))
    return path


@pytest.fixture(scope="module")
def kube():
    from tests.services.kube_standin import KubeStandIn

    server = KubeStandIn(namespace=NAMESPACE).start()
    template = json.loads((OOM / "scheduler" / "workload.json").read_text())["metadata"]["name"]
    server.load_bundle(OOM / "scheduler", {"kueue.x-k8s.io/workload-name": template})
    server.template = template
    yield server
    server.stop()


def test_two_worker_hosts_diagnose_a_storm_into_one_lake_as_one_host_would(postgres, s3, kube, tmp_path, monkeypatch):
    db = postgres.create_database("fleet_lake")
    prefect_db = postgres.create_database("fleet_prefect")
    kube_port = urlparse(kube.url).port
    ports = [postgres.port, s3.s3, kube_port]
    hosts = [Host(tmp_path, i, ports) for i in (1, 2)]
    lake = "ducklake+postgres://{user}@{addr}:{port}/{db}?data_path=s3://{bucket}/fleet/"

    def warehouse(addr: str) -> str:
        return lake.format(user=postgres.user, addr=addr, port=postgres.port, db=db, bucket=s3.bucket)

    env = {"PGPASSWORD": postgres.password, **s3.env, "ATTRIBUTION_HEARTBEAT_S": "30"}
    server_env = {"PREFECT_SERVER_DATABASE_CONNECTION_URL": postgres.sqlalchemy_url(prefect_db)}
    here = _config(tmp_path / "attribution.yaml", warehouse("127.0.0.1"), kube.url)
    names = [kube.template] + [f"storm-{i:03d}" for i in range(STORM - 1)]
    for name in names[1:]:
        kube.clone_workload(kube.template, name)
    conditions = json.loads((OOM / "scheduler" / "workload.json").read_text())["status"]["conditions"]
    # the single host's backfill finds the Workloads by when they ended (the example's time, not now)
    ended = min(datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00")) for c in conditions)
    since = (ended - timedelta(hours=1)).isoformat()
    stack = None
    try:
        host_envs = []
        for h in hosts:
            h.start()
            # the host's own view of the services: the machine's address on its link
            cfg = _config(h.dir / "attribution.yaml", warehouse(h.root_side), f"http://{h.root_side}:{kube_port}")
            host_envs.append({"ATTRIBUTION_CONFIG": str(cfg), "AWS_ENDPOINT_URL_S3": f"http://{h.root_side}:{s3.s3}"})
        (tmp_path / "stack").mkdir()
        stack = HostsStack(tmp_path / "stack", here, server_env, env, hosts, host_envs)
        for h in hosts:
            h.forward(stack.server_port)
        stack.start()
        calls = [(n, body(n, conditions)) for n in names for _ in range(2)]
        random.Random(7).shuffle(calls)
        _, answers = asyncio.run(fire(stack.url, calls, 12))
        assert set(answers) <= {"202 accepted", "202 queued"}, answers
        assert wait_final(stack, len(names), 600) == len(names)
        runs = runs_per_key(stack)
        logs = [stack.log(f"worker-{i + 1}") for i in range(len(hosts))]
    finally:
        if stack is not None:
            stack.stop()
        for h in hosts:
            h.stop()

    done = [len(re.findall(r"flow run \S+ .*done in", text)) for text in logs]
    assert all(n > 0 for n in done) and sum(done) == len(names), done  # both hosts worked, no run twice
    assert all(runs[f"{CLUSTER}:kueue:{NAMESPACE}/{n}:0"] == 1 for n in names), runs

    for k, v in {"PGPASSWORD": postgres.password, **s3.env}.items():
        monkeypatch.setenv(k, v)
    single = tmp_path / "single.duckdb"
    alone = subprocess.run(
        [sys.executable, "-m", "workload_attribution", "backfill", "--inline", "--cluster", CLUSTER, "--since", since]
        + ["--warehouse", str(single), "--config", str(here)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert alone.returncode == 0, alone.stdout[-2000:] + alone.stderr[-2000:]
    _same_as_one_host(Warehouse(warehouse("127.0.0.1")), Warehouse(single), names)


def _same_as_one_host(lake: Warehouse, single: Warehouse, names: list[str]) -> None:
    with lake.reader() as a, single.reader() as b:  # one connection each: attaching a lake takes seconds
        per_job = Counter(r[0].rpartition("/")[2] for r in a.execute("SELECT job_id FROM diagnoses").fetchall())
        assert per_job == {n: 1 for n in names}, per_job
        for table in ("diagnoses", "diagnosis_symptoms", "diagnosis_affected_nodes", "diagnosis_coverage"):
            q = f"SELECT count(*) FROM {table}"
            assert a.execute(q).fetchall() == b.execute(q).fetchall(), table
        for name in views():
            got, want = a.execute(f'SELECT * FROM "{name}"'), b.execute(f'SELECT * FROM "{name}"')
            cols = [d[0] for d in got.description]
            assert cols == [d[0] for d in want.description], name
            # when a rules version was used, an example error: each run's own
            keep = [i for i, c in enumerate(cols) if c not in ("example_error", "first_used", "last_used")]
            norm = lambda rows, keep=keep: sorted(tuple(str(r[i]) for i in keep) for r in rows)  # noqa: E731
            assert norm(got.fetchall()) == norm(want.fetchall()), name
