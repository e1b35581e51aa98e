"""Failures of a fleet end to end: webhook -> flow run -> diagnosis in the warehouse (a program that prints numbers).

    python -m tests.bench.trigger_storm                    # the matrix of docs/benchmarks.md's table, each setup twice
    python -m tests.bench.trigger_storm --db postgres --workers 2 --runs 1
    python -m tests.bench.trigger_storm --db sqlite --workers 1 -n 100 --copies 3 --idle 10 --csv storm.csv
    python -m tests.bench.trigger_storm --db postgres --workers 1 --runs 1 --held 1000   # into a fleet's warehouse

For each setup it starts the production shape on this machine: a real `prefect server start` on
SQLite (its default) or on PostgreSQL (a private instance, tests/services/postgres.py, given to the
server as PREFECT_SERVER_DATABASE_CONNECTION_URL=postgresql+asyncpg://...), `attribution deploy`,
one or two `attribution worker --limit L`, each on its own "host" (its own PREFECT_HOME and working
directory), and `attribution serve`. The warehouse is a DuckDB file for one worker and a DuckLake
on the same PostgreSQL (data path on disk) for two: one DuckDB file takes one writing process.

Attempts are failed Kueue Workloads held by the Kubernetes API stand-in (the Kueue example's,
cloned under new names). Then:

  warm-up   one attempt per flow-run slot, waited for (the workers' first runs load the rules)
  idle      --idle attempts one at a time: webhook -> run Completed, the latency of a quiet fleet
  storm     -n attempts each sent --copies times as signed POST /v1/webhooks/kubernetes, shuffled,
            --concurrency in flight (the scheduler's retries and forwarders' repeats are the copies)

and waits until every run has ended (Prefect's count, once a second), then checks that the warehouse
(GET /v1/diagnoses) has every storm attempt. It reads each attempt's flow run back from Prefect
(created, started, ended: ended is after the diagnosis was written) and
prints, per setup: attempts/h (storm attempts over first webhook -> last diagnosis), p50 / p90 of
webhook -> diagnosis in the storm and when idle, runs per idempotency key and runs done twice
(two workers: none may be), the workers' Prefect API calls per attempt (REST calls by route and
events, counted in the workers by tests/bench/apicount.py), the server's requests per attempt
from every client (workers, serve's run creations, this bench's count once a second) and its
"database is locked" lines (from its access log), CPU seconds by process, and the load average.
A markdown table of all setups ends the output (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

import httpx
import yaml

from tests.services.prefect_stack import SECRET, TOKEN, PrefectStack, _wait, flow_runs, server_settings

ROOT = Path(__file__).resolve().parents[2]
OOM = ROOT / "tests" / "regression" / "host_oom_kueue-1-0"
CLUSTER, NAMESPACE = "k8s", "team-a"
POLL_ROUTE = "POST /work_pools/attribution/get_scheduled_flow_runs"


@dataclass
class Setup:
    db: str  # sqlite | postgres
    workers: int
    limit: int
    warehouse: str  # duckdb | ducklake

    @property
    def label(self) -> str:
        workers = f"{self.workers} worker{'s' if self.workers > 1 else ''}"
        return f"{self.db}, {workers} --limit {self.limit}, {self.warehouse}"


@dataclass
class Result:
    setup: str
    run: int
    attempts: int
    webhooks: int
    answers: dict[str, int]
    wall_s: float
    per_hour: float
    lat_p50: float
    lat_p90: float
    lat_max: float
    intake_p50: float  # webhook -> flow run created
    queue_p50: float  # created -> started
    run_p50: float  # started -> ended
    idle_p50: float | None
    idle_p90: float | None
    runs_per_key: dict[str, int]
    run_twice: int
    not_completed: int
    missing: int
    per_worker: list[int]
    rest_per_attempt: float
    rest_no_poll_per_attempt: float
    events_per_attempt: float
    rest_routes: dict[str, float]
    event_kinds: dict[str, float]
    server_requests_per_attempt: float | None
    db_locked: int
    cpu_s: dict[str, float]
    load: tuple[float, float]
    db_per_attempt: dict[str, float] = field(default_factory=dict)  # Prefect's PostgreSQL
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- the stack, with workers on "hosts"


class Stack(PrefectStack):
    """PrefectStack with the server's database chosen, N workers each on its own host directory,
    every worker counting its Prefect API calls (tests/bench/apicount.py)."""

    def __init__(self, base: Path, config: Path, setup: Setup, server_env: dict[str, str], env: dict[str, str]):
        super().__init__(base, config, extra_env=env, worker_args=["--limit", str(setup.limit)])
        self.setup, self.server_env = setup, server_env
        self.hosts = [base / f"host-{i + 1}" for i in range(setup.workers)]

    def start_server(self) -> subprocess.Popen:
        server = self._spawn(
            "server",
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1"]
            + ["--port", str(self.server_port), "--no-ui"],
            # deployments/prefect-server.env (--server-defaults: Prefect's own); INFO: uvicorn's access log
            env={**self.server_env, "PREFECT_SERVER_LOGGING_LEVEL": "INFO"},
        )
        _wait(f"{self.prefect_url}/health", "prefect server", server, self.base / "server.log", 180)
        return server

    def start_worker(self, name: str = "worker", env: dict[str, str] | None = None) -> subprocess.Popen:
        procs = []
        for i, host in enumerate(self.hosts):
            (host / "prefect-home").mkdir(parents=True, exist_ok=True)
            name = f"worker-{i + 1}"
            log = self.base / f"{name}.log"
            p = subprocess.Popen(
                [sys.executable, "-m", "tests.bench.apicount", str(self.counts(i)), "worker", *self.worker_args],
                cwd=host,
                env={**self.env, "PREFECT_HOME": str(host / "prefect-home"), "PYTHONPATH": str(ROOT)},
                stdout=open(log, "ab"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.procs[name] = p
            procs.append(p)
        return procs[0]

    def counts(self, i: int) -> Path:
        return self.base / f"worker-{i + 1}-api.json"

    def read_counts(self) -> tuple[Counter, Counter]:
        http: Counter = Counter()
        events: Counter = Counter()
        for i in range(len(self.hosts)):
            try:
                doc = json.loads(self.counts(i).read_text())
            except (OSError, ValueError):
                continue
            http.update(doc["http"])
            events.update(doc["events"])
        return http, events


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def postgres_cpu(pg) -> float:
    """CPU seconds of the private PostgreSQL: its postmaster and every backend it forked."""
    if pg is None:
        return 0.0
    try:
        root = int((pg.base / "data" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    total = cpu_seconds(root)
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == root:
                total += cpu_seconds(int(d.name))  # ended backends are not counted: a lower bound
    return total


def db_activity(pg, db: str | None) -> dict[str, int]:
    """Prefect's database's transactions and rows written so far (pg_stat_database): what the
    server asked of PostgreSQL, counted by PostgreSQL, whatever the machine's load."""
    if pg is None or db is None:
        return {}
    sql = (
        "SELECT xact_commit + xact_rollback, tup_inserted + tup_updated + tup_deleted"
        f" FROM pg_stat_database WHERE datname = '{db}'"
    )
    r = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-At", "-F", " ", "-c", sql],
        capture_output=True,
        text=True,
        env={**os.environ, "PGPASSWORD": "postgres-admin"},
        timeout=60,
    )
    try:
        xacts, rows = r.stdout.split()
    except ValueError:
        return {}
    return {"transactions": int(xacts), "rows written": int(rows)}


def cpu_snapshot(stack: Stack, pg) -> dict[str, float]:
    out = {name: cpu_seconds(p.pid) for name, p in stack.procs.items()}
    out["postgres"] = postgres_cpu(pg)
    out["bench"] = cpu_seconds(os.getpid())
    return out


# ---------------------------------------------------------------- webhooks


def body(name: str, conditions: list) -> bytes:
    doc = {"cluster": CLUSTER, "namespace": NAMESPACE, "name": name, "attempt": 0, "conditions": conditions}
    return json.dumps(doc).encode()


def key_of(name: str) -> str:
    return f"{CLUSTER}:kueue:{NAMESPACE}/{name}:0"


async def fire(url: str, calls: list[tuple[str, bytes]], concurrency: int) -> tuple[dict[str, float], Counter]:
    """Send the calls, `concurrency` in flight; (first send time of each name, answers by status)."""
    from workload_attribution.service.auth import sign

    gate = asyncio.Semaphore(concurrency)
    first: dict[str, float] = {}
    answers: Counter = Counter()
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=concurrency)) as client:

        async def one(name: str, payload: bytes):
            async with gate:
                first.setdefault(name, time.time())
                for attempt in range(3):  # as a real sender does: a dropped connection is sent again
                    try:
                        r = await client.post(
                            f"{url}/v1/webhooks/kubernetes",
                            content=payload,
                            headers={**sign(SECRET, payload), "Content-Type": "application/json"},
                        )
                        break
                    except httpx.TransportError:
                        if attempt == 2:
                            answers["dropped"] += 1
                            return
                answers[f"{r.status_code} {(r.json() or {}).get('status', 'refused')}"] += 1

        await asyncio.gather(*[one(n, b) for n, b in calls])
    return first, answers


def diagnosed(url: str) -> set[str]:
    """Names of the Workloads the warehouse has a diagnosis for (GET /v1/diagnoses, every page)."""
    names: set[str] = set()
    offset = 0
    while True:
        r = httpx.get(
            f"{url}/v1/diagnoses",
            params={"cluster": CLUSTER, "limit": 1000, "offset": offset},
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=60,
        )
        if r.status_code != 200:
            return names
        page = r.json()["items"]
        names |= {i["job_id"].rpartition("/")[2] for i in page}
        if len(page) < 1000:
            return names
        offset += 1000


def wait_diagnosed(url: str, names: set[str], timeout_s: float, every_s: float = 1.0) -> set[str]:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            got = diagnosed(url) & names
        except httpx.HTTPError:
            got = set()
        if got == names or time.monotonic() > deadline:
            return got
        time.sleep(every_s)


def wait_final(stack: Stack, want: int, timeout_s: float) -> int:
    """Wait until `want` runs of the attempt deployment have ended (a run ends after its diagnosis is
    written); the count. Asks Prefect (one count a second): reading the warehouse through serve every
    second would load serve and the warehouse under the storm being measured."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    final = [StateType.COMPLETED, StateType.FAILED, StateType.CRASHED, StateType.CANCELLED]
    deadline = time.monotonic() + timeout_s
    with stack.client_settings(), get_client(sync_client=True) as client:
        dep = client.read_deployment_by_name("attribute-attempt/attempt")
        while True:
            n = client.count_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[dep.id])),
                flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=final))),
            )
            if n >= want or time.monotonic() > deadline:
                return n
            time.sleep(1.0)


def idle_latencies(stack: Stack, names: list[str], conditions: list, timeout_s: float = 120) -> list[float]:
    """One attempt at a time: webhook sent -> its flow run Completed (ended after the diagnosis was written)."""
    from prefect.client.orchestration import get_client

    from workload_attribution.service.auth import sign

    out = []
    with stack.client_settings(), get_client(sync_client=True) as client:
        for name in names:
            payload = body(name, conditions)
            sent = time.time()
            r = httpx.post(
                f"{stack.url}/v1/webhooks/kubernetes",
                content=payload,
                headers={**sign(SECRET, payload), "Content-Type": "application/json"},
                timeout=60,
            )
            run_id = r.json().get("flow_run_id")
            deadline = time.monotonic() + timeout_s
            while run_id is None and time.monotonic() < deadline:  # queued: find it by its key
                time.sleep(0.2)
                run_id = next((str(fr.id) for fr in flow_runs(stack) if fr.idempotency_key == key_of(name)), None)
            while time.monotonic() < deadline:
                fr = client.read_flow_run(run_id)
                if fr.state and fr.state.is_final() and fr.end_time:
                    out.append(fr.end_time.timestamp() - sent)
                    break
                time.sleep(0.1)
            else:
                raise SystemExit(f"idle attempt {name} not done after {timeout_s:.0f} s")
    return out


# ---------------------------------------------------------------- one setup


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else float("nan")


DONE = re.compile(r"flow run ([0-9a-f-]{36}) .*done in")


def seed_warehouse(path: Path, n: int) -> None:
    """A DuckDB warehouse holding n diagnoses before the storm, as a fleet's does: the worked
    example's written once, then copied under new keys in one statement a table
    (warehouse_growth.grow), so the newest row group of each table already holds them and every
    checkpoint of the storm's writes merges into it (a file's writes cost more as that group
    fills: docs/warehouse.md, "A file that grows")."""
    from tests.bench.warehouse_growth import grow
    from tests.helpers import diagnose
    from workload_attribution.rules.pack import default_pack
    from workload_attribution.warehouse.store import Warehouse

    Warehouse(path).write(diagnose(ROOT / "tests" / "examples" / "xid149-worked", pack=default_pack()))
    held = grow(path, n, "seed")
    print(f"  warehouse seeded with {held:,} diagnoses", file=sys.stderr, flush=True)


def run_setup(setup: Setup, a: argparse.Namespace, run: int, pg, kube, template: dict, base: Path) -> Result:
    from tests.services.postgres import Postgres

    base.mkdir(parents=True, exist_ok=True)
    server_env: dict[str, str] = {} if a.server_defaults else server_settings()
    env: dict[str, str] = {"ATTRIBUTION_HEARTBEAT_S": "30"}
    if a.flows_from:
        env["APICOUNT_FLOWS_FROM"] = str(Path(a.flows_from).resolve())
    tag = f"r{run}-{setup.db[0]}{setup.workers}-{random.randrange(1 << 20):05x}"  # in Workload names
    db_tag = tag.replace("-", "_")
    prefect_db = None
    if setup.db == "postgres":
        assert isinstance(pg, Postgres)
        prefect_db = pg.create_database(f"prefect_{db_tag}")
        server_env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = pg.sqlalchemy_url(prefect_db)
    if setup.warehouse == "ducklake":
        lake = pg.create_database(f"lake_{db_tag}")
        warehouse = f"ducklake+postgres://{pg.user}@127.0.0.1:{pg.port}/{lake}?data_path={base / 'lake-data'}"
        env["PGPASSWORD"] = pg.password
    else:
        warehouse = str(base / "warehouse.duckdb")
        if a.held:
            seed_warehouse(Path(warehouse), a.held)
    conditions = template["status"]["conditions"]
    files = {s: {"connector": "files", "path": str(OOM / "logs" / s / "{host}.log")} for s in ("app", "syslog")}
    (base / "attribution.yaml").write_text(
        yaml.safe_dump(
            {
                "warehouse": warehouse,
                "clusters": {
                    CLUSTER: {
                        "scheduler": "kueue",
                        "kueue": {"url": kube.url, "namespace": NAMESPACE, "token_env": None},
                        "sources": files,
                    }
                },
            }
        )
    )
    warm = [f"warm-{tag}-{i}" for i in range(setup.workers * setup.limit)]
    idle = [f"idle-{tag}-{i:03d}" for i in range(a.idle)]
    storm = [f"storm-{tag}-{i:04d}" for i in range(a.n)]
    for name in warm + idle + storm:
        kube.clone_workload(template["metadata"]["name"], name)
    rng = random.Random(run)
    calls = [(n, body(n, conditions)) for n in storm for _ in range(a.copies)]
    rng.shuffle(calls)

    stack = Stack(base, base / "attribution.yaml", setup, server_env, env)
    notes: list[str] = []
    try:
        t0 = time.monotonic()
        stack.start()
        print(f"  stack up in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
        asyncio.run(fire(stack.url, [(n, body(n, conditions)) for n in warm], 8))
        if wait_diagnosed(stack.url, set(warm), 300, 0.5) != set(warm):
            raise SystemExit(f"warm-up not diagnosed: see {base}")
        idle_lat = idle_latencies(stack, idle, conditions) if idle else []
        time.sleep(2)  # the last idle run's logs and events reach the server
        http0, ev0 = stack.read_counts()
        server_log = base / "server.log"
        log0 = server_log.stat().st_size
        cpu0 = cpu_snapshot(stack, pg)
        db0 = db_activity(pg, prefect_db)
        load0 = os.getloadavg()[0]
        print(f"  storm: {a.n} attempts as {len(calls)} webhooks (load {load0:.2f})", file=sys.stderr, flush=True)
        spy = None
        if a.profile:  # on-CPU stacks of the first worker during the storm (collapsed: frame;frame;... count)
            spy = subprocess.Popen(
                ["py-spy", "record", "--pid", str(stack.procs["worker-1"].pid), "-f", "raw", "-r", "100"]
                + ["-o", f"{a.profile}.{setup.db}-{setup.workers}-{run}.txt"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        first, answers = asyncio.run(fire(stack.url, calls, a.concurrency))
        wait_final(stack, len(warm) + len(idle) + len(storm), 120 + 20 * a.n)
        got = wait_diagnosed(stack.url, set(storm), 60)  # and the warehouse has every one
        if spy:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        done_wall = time.time()
        time.sleep(1.5)  # the counters are written every second
        http1, ev1 = stack.read_counts()
        cpu1 = cpu_snapshot(stack, pg)
        db1 = db_activity(pg, prefect_db)
        load1 = os.getloadavg()[0]
        log_text = server_log.read_bytes()[log0:].decode(errors="replace")
        runs = flow_runs(stack)
        worker_logs = [stack.log(f"worker-{i + 1}") for i in range(setup.workers)]
    finally:
        stack.stop()
        for i in range(setup.workers):
            shutil.rmtree(stack.hosts[i] / "prefect-home", ignore_errors=True)

    # ---- what happened
    by_key: dict[str, list] = defaultdict(list)
    for fr in runs:
        by_key[(fr.idempotency_key or "").split("#")[0]].append(fr)
    lat, intake, queue, run_s = [], [], [], []
    not_completed = 0
    ended = []
    for name in storm:
        frs = by_key.get(key_of(name), [])
        done = [fr for fr in frs if fr.state and fr.state.is_completed()]
        if not done:
            not_completed += 1
            continue
        fr = done[0]
        ended.append(fr.end_time.timestamp())
        lat.append(fr.end_time.timestamp() - first[name])
        intake.append(fr.created.timestamp() - first[name])
        queue.append((fr.start_time - fr.created).total_seconds())
        run_s.append((fr.end_time - fr.start_time).total_seconds())
    wall = (max(ended) if ended else done_wall) - min(first.values())
    done_ids = [m.group(1) for text in worker_logs for m in DONE.finditer(text)]
    per_worker = [len(DONE.findall(text)) for text in worker_logs]
    twice = sum(1 for _, c in Counter(done_ids).items() if c > 1)
    rpk = Counter(str(len(by_key.get(key_of(n), []))) for n in storm)
    dh, de = http1 - http0, ev1 - ev0
    n = max(1, len(storm))
    rest = sum(dh.values())
    server_reqs = len(re.findall(r'"(?:GET|POST|PATCH|PUT|DELETE) /api/', log_text))
    locked = log_text.count("database is locked")
    if not server_reqs:
        notes.append("the server's access log had no requests: server requests not counted")
    if len(got) != len(storm):
        notes.append(f"{len(storm) - len(got)} storm attempts not in the warehouse")
    return Result(
        setup=setup.label,
        run=run,
        attempts=len(storm),
        webhooks=len(calls),
        answers=dict(answers),
        wall_s=round(wall, 1),
        per_hour=round(len(ended) / wall * 3600) if wall > 0 else 0,
        lat_p50=round(pct(lat, 0.5), 2),
        lat_p90=round(pct(lat, 0.9), 2),
        lat_max=round(max(lat), 2) if lat else float("nan"),
        intake_p50=round(pct(intake, 0.5), 2),
        queue_p50=round(pct(queue, 0.5), 2),
        run_p50=round(pct(run_s, 0.5), 2),
        idle_p50=round(pct(idle_lat, 0.5), 2) if idle_lat else None,
        idle_p90=round(pct(idle_lat, 0.9), 2) if idle_lat else None,
        runs_per_key=dict(rpk),
        run_twice=twice,
        not_completed=not_completed,
        missing=len(storm) - len(got),
        per_worker=per_worker,
        rest_per_attempt=round(rest / n, 1),
        rest_no_poll_per_attempt=round((rest - dh.get(POLL_ROUTE, 0)) / n, 1),
        events_per_attempt=round(sum(de.values()) / n, 1),
        rest_routes={k: round(v / n, 2) for k, v in dh.most_common()},
        event_kinds={k: round(v / n, 2) for k, v in de.most_common()},
        server_requests_per_attempt=round(server_reqs / n, 1) if server_reqs else None,
        db_locked=locked,
        cpu_s={k: round(cpu1.get(k, 0) - cpu0.get(k, 0), 1) for k in cpu1},
        load=(round(load0, 2), round(load1, 2)),
        db_per_attempt={k: round((db1[k] - db0[k]) / n, 1) for k in db1 if k in db0},
        notes=notes,
    )


def show(r: Result) -> None:
    print(f"\n{r.setup} (run {r.run}): {r.attempts} attempts as {r.webhooks} webhooks; answers {r.answers}")
    print(
        f"  all diagnosed {r.wall_s:.1f} s after the first webhook -> {r.per_hour:,.0f} attempts/h; "
        f"per worker {r.per_worker}"
    )
    print(
        f"  webhook -> diagnosis: p50 {r.lat_p50:.2f} s, p90 {r.lat_p90:.2f} s, max {r.lat_max:.2f} s "
        f"(webhook -> run created p50 {r.intake_p50:.2f} s, queued p50 {r.queue_p50:.2f} s, run p50 {r.run_p50:.2f} s)"
    )
    if r.idle_p50 is not None:
        print(f"  idle, one at a time: webhook -> diagnosis p50 {r.idle_p50:.2f} s, p90 {r.idle_p90:.2f} s")
    print(
        f"  exactly once: runs per key {r.runs_per_key}, runs done twice {r.run_twice}, not completed "
        f"{r.not_completed}, missing from the warehouse {r.missing}"
    )
    print(
        f"  worker API calls per attempt: {r.rest_per_attempt} REST ({r.rest_no_poll_per_attempt} without polling), "
        f"{r.events_per_attempt} events; server requests per attempt {r.server_requests_per_attempt}; "
        f"'database is locked' {r.db_locked}"
    )
    print("    REST: " + ", ".join(f"{k} {v}" for k, v in r.rest_routes.items()))
    print("    events: " + ", ".join(f"{k} {v}" for k, v in r.event_kinds.items()))
    print(f"  CPU s during the storm: {r.cpu_s}; load average {r.load[0]} -> {r.load[1]}")
    if r.db_per_attempt:
        print("  Prefect's PostgreSQL per attempt: " + ", ".join(f"{v} {k}" for k, v in r.db_per_attempt.items()))
    for note in r.notes:
        print(f"  NOTE: {note}")
    sys.stdout.flush()


def table(results: list[Result]) -> str:
    rows = [
        "| Prefect on | workers | runs | attempts/h | storm p50 / p90 | idle p50 / p90 | API calls / attempt | "
        "db locked | run twice | load |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    by: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by[r.setup].append(r)
    for label, rs in by.items():
        db, workers = label.split(", ")[0], label.split(", ")[1]
        rng = lambda xs, f="{:,.0f}": " / ".join(f.format(x) for x in xs)  # noqa: E731
        med = lambda attr, rs=rs: statistics.median(getattr(r, attr) or 0 for r in rs)  # noqa: E731
        rows.append(
            f"| {'SQLite' if db == 'sqlite' else 'PostgreSQL'} | {workers} | {len(rs)} "
            f"| {rng([r.per_hour for r in rs])} | {med('lat_p50'):.1f} / {med('lat_p90'):.1f} s "
            f"| {med('idle_p50'):.1f} / {med('idle_p90'):.1f} s "
            f"| {statistics.median(r.rest_no_poll_per_attempt for r in rs):.0f} REST + "
            f"{statistics.median(r.events_per_attempt for r in rs):.0f} events "
            f"| {rng([r.db_locked for r in rs])} | {sum(r.run_twice for r in rs)} "
            f"| {rng([r.load[0] for r in rs], '{:.1f}')} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", choices=["sqlite", "postgres"], action="append", help="Prefect's database (repeatable)")
    ap.add_argument("--workers", type=int, choices=[1, 2], action="append", help="worker hosts (repeatable)")
    ap.add_argument("--limit", type=int, default=4, help="flow runs at once per worker")
    ap.add_argument("--warehouse", choices=["duckdb", "ducklake"], help="default: duckdb for 1 worker, ducklake for 2")
    ap.add_argument("-n", type=int, default=100, help="distinct attempts in the storm")
    ap.add_argument("--copies", type=int, default=3, help="webhooks per attempt")
    ap.add_argument("--concurrency", type=int, default=50, help="webhooks in flight at once")
    ap.add_argument("--idle", type=int, default=10, help="attempts sent one at a time before the storm")
    ap.add_argument("--runs", type=int, default=2, help="each setup this many times")
    ap.add_argument(
        "--held",
        type=int,
        default=0,
        metavar="N",
        help="a DuckDB warehouse already holding N diagnoses (as a fleet's does); default a new one",
    )
    ap.add_argument("--csv", metavar="FILE", help="append one row per setup and run")
    ap.add_argument("--json", metavar="FILE", help="write every result")
    ap.add_argument(
        "--flows-from",
        metavar="DIR",
        help="the workers run these flows/*.py instead (before/after: git show REV:flows/worker.py > DIR/worker.py)",
    )
    ap.add_argument(
        "--server-defaults",
        action="store_true",
        help="Prefect's default server settings, not deployments/prefect-server.env (before/after)",
    )
    ap.add_argument("--profile", metavar="PREFIX", help="py-spy the first worker in each storm (pip install py-spy)")
    ap.add_argument("--keep", metavar="DIR", help="work directory (kept); default a temporary one, removed")
    a = ap.parse_args(argv)

    from tests.services.kube_standin import KubeStandIn
    from tests.services.postgres import Postgres

    setups = [
        Setup(db, w, a.limit, a.warehouse or ("duckdb" if w == 1 else "ducklake"))
        for db in (a.db or ["sqlite", "postgres"])
        for w in (a.workers or [1, 2])
    ]
    base = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="trigger-storm-"))
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)  # PostgreSQL runs as its own user under root
    pg = None
    template = json.loads((OOM / "scheduler" / "workload.json").read_text())
    kube = KubeStandIn(namespace=NAMESPACE).start()
    kube.load_bundle(OOM / "scheduler", {"kueue.x-k8s.io/workload-name": template["metadata"]["name"]})
    results: list[Result] = []
    try:
        if any(s.db == "postgres" or s.warehouse == "ducklake" for s in setups):
            pg = Postgres(base / "pg").start()
        for run in range(1, a.runs + 1):
            for s in setups:
                print(f"{s.label}, run {run}", file=sys.stderr, flush=True)
                r = run_setup(s, a, run, pg, kube, template, base / f"run{run}-{s.db}-{s.workers}")
                show(r)
                results.append(r)
    finally:
        if pg is not None:
            pg.stop()
        kube.stop()
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(f"\n{datetime.now().isoformat(timespec='minutes')}, {os.cpu_count()} cores\n{table(results)}")
    if a.json:
        Path(a.json).write_text(json.dumps([asdict(r) for r in results], indent=1))
    if a.csv:
        new = not Path(a.csv).exists()
        with open(a.csv, "a", newline="") as fh:
            keys = [k for k in asdict(results[0]) if not isinstance(asdict(results[0])[k], (dict, list))]
            w = csv.DictWriter(fh, fieldnames=keys, extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerows(asdict(r) for r in results)
    bad = [r for r in results if r.run_twice or r.missing or r.not_completed]
    return 1 if bad else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
