"""A webhook storm against the real stack (a program that prints numbers).

    python -m tests.bench.webhook_burst                  # 1,000 calls: 30 % duplicates, 5 % invalid
    python -m tests.bench.webhook_burst -n 200 --concurrency 50

It starts the production shape on this machine (a real `prefect server start`, `attribution
deploy`, one warm `attribution worker`, `attribution serve`) with a Kubernetes API stand-in holding
one failed Kueue Workload per unique attempt (no kube-apiserver runs here), fires N signed
POST /v1/webhooks/kubernetes calls at once (bounded client concurrency), then waits until every
valid attempt has a diagnosis, and prints: the answers by status, p50 / p99 / max of the webhook
answer time, whether each valid attempt got exactly one flow run and one diagnosis, that every
invalid call was refused with the field named, and the time until the last diagnosis.

tests/integration/test_operations.py runs the same storm, smaller, as a test (and stops serve under it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[2]
OOM = ROOT / "tests" / "regression" / "host_oom_kueue-1-0"


@dataclass
class Storm:
    bodies: list[tuple[str, bytes]]  # (kind: valid / duplicate / invalid, body)
    unique: list[str]  # workload names that must each be diagnosed once
    answers: list[tuple[str, int, float, dict]] = field(default_factory=list)  # kind, status, seconds, json
    resent: int = 0  # calls re-sent after a dropped connection


def plan(
    n: int,
    kube,
    cluster: str,
    namespace: str,
    dup_share: float = 0.3,
    invalid_share: float = 0.05,
    seed: int = 5,
    prefix: str = "burst",
) -> Storm:
    rng = random.Random(seed)
    template = json.loads((OOM / "scheduler" / "workload.json").read_text())
    n_invalid = int(n * invalid_share)
    n_dup = int(n * dup_share)
    n_unique = n - n_invalid - n_dup
    unique = [f"{prefix}-{i:05d}" for i in range(n_unique)]
    for name in unique:
        kube.clone_workload(template["metadata"]["name"], name)

    def body(workload: str, **over) -> bytes:
        doc = {
            "cluster": cluster,
            "namespace": namespace,
            "name": workload,
            "attempt": 0,
            "conditions": template["status"]["conditions"],
            **over,
        }
        return json.dumps(doc).encode()

    bodies = [("valid", body(name)) for name in unique]
    bodies += [("duplicate", body(rng.choice(unique))) for _ in range(n_dup)]
    broken = [
        dict(name="Not_A_Name!"),
        dict(namespace="../etc"),
        dict(attempt=-1),
        dict(attempt="many"),
        dict(conditions="nope"),
        dict(cluster="a b"),
    ]
    bodies += [("invalid", body(f"{prefix}-x{i}", **broken[i % len(broken)])) for i in range(n_invalid)]
    rng.shuffle(bodies)
    return Storm(bodies, unique)


async def fire(url: str, secret: str, storm: Storm, concurrency: int) -> list[float]:
    """Send the storm; meanwhile probe /healthz every 0.2 s (its answer times are returned)."""
    from workload_attribution.service.auth import sign

    gate = asyncio.Semaphore(concurrency)
    probes: list[float] = []
    stop = asyncio.Event()

    async def probe():
        async with httpx.AsyncClient(timeout=60) as c:
            while not stop.is_set():
                t = time.perf_counter()
                await c.get(f"{url}/healthz")
                probes.append(time.perf_counter() - t)
                await asyncio.sleep(0.2)

    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=concurrency)) as client:

        async def one(kind: str, body: bytes):
            async with gate:
                t = time.perf_counter()
                for attempt in range(3):  # as a real sender (deployments/*) does: a dropped connection is re-sent
                    try:
                        r = await client.post(
                            f"{url}/v1/webhooks/kubernetes",
                            content=body,
                            headers={**sign(secret, body), "Content-Type": "application/json"},
                        )
                        break
                    except httpx.TransportError:
                        storm.resent += 1
                        if attempt == 2:
                            raise
                storm.answers.append((kind, r.status_code, time.perf_counter() - t, r.json()))

        prober = asyncio.ensure_future(probe())
        await asyncio.gather(*[one(k, b) for k, b in storm.bodies])
        stop.set()
        await prober
    return probes


def wait_all_diagnosed(url: str, token: str, cluster: str, want: int, timeout_s: float) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        items, offset = [], 0
        while True:
            r = httpx.get(
                f"{url}/v1/diagnoses",
                params={"cluster": cluster, "limit": 1000, "offset": offset},
                headers={"Authorization": f"Bearer {token}"},
                timeout=60,
            )
            page = r.json()["items"] if r.status_code == 200 else []
            items += page
            if len(page) < 1000:
                break
            offset += 1000
        if len(items) >= want or time.monotonic() > deadline:
            return items
        time.sleep(1)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def runs_per_key(stack) -> Counter:
    """Flow runs of the attempt deployment per idempotency key, as Prefect has them."""
    from tests.services.prefect_stack import flow_runs

    return Counter(r.idempotency_key for r in flow_runs(stack))


def check(storm: Storm, items: list[dict], runs: Counter) -> list[str]:
    """What must hold; returns the violations (empty when all is well)."""
    problems = []
    by_kind = Counter(k for k, *_ in storm.answers)
    keys = set()
    for kind, status, _, doc in storm.answers:
        if kind == "invalid":
            if status != 422 or not doc.get("detail"):
                problems.append(f"invalid call answered {status}: {doc}")
        elif status != 202 or doc.get("status") not in ("accepted", "queued"):
            problems.append(f"{kind} call answered {status}: {doc}")
        else:
            keys.add(doc["idempotency_key"])
    if any(runs[k] != 1 for k in keys):
        problems.append(f"attempts without exactly one flow run: {[k for k in keys if runs[k] != 1][:3]}")
    if len(keys) != len(storm.unique):
        problems.append(f"{len(keys)} attempts accepted, {len(storm.unique)} expected")
    names = Counter(i["job_id"].rpartition("/")[2] for i in items)  # Kueue job ids are namespace/name
    want, got = set(storm.unique), set(names)
    if got != want:
        problems.append(f"diagnosed {len(got)} attempts, {len(want)} expected (missing e.g. {sorted(want - got)[:3]})")
    if any(c != 1 for c in names.values()):
        problems.append("an attempt was diagnosed more than once")
    if by_kind["valid"] != len(storm.unique):
        problems.append("not every valid call was sent")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=1000, help="webhook calls in the storm")
    ap.add_argument("--concurrency", type=int, default=100, help="calls in flight at once")
    ap.add_argument("--limit", type=int, default=3, help="flow runs at once on the worker")
    ap.add_argument("--keep", metavar="DIR")
    a = ap.parse_args(argv)

    from tests.services.kube_standin import KubeStandIn
    from tests.services.prefect_stack import SECRET, TOKEN, PrefectStack

    base = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="burst-"))
    base.mkdir(parents=True, exist_ok=True)
    kube = KubeStandIn(namespace="team-a").start()
    kube.load_bundle(
        OOM / "scheduler",
        {
            "kueue.x-k8s.io/workload-name": json.loads((OOM / "scheduler" / "workload.json").read_text())["metadata"][
                "name"
            ]
        },
    )
    storm = plan(a.n, kube, "k8s", "team-a")
    files = {s: {"connector": "files", "path": str(OOM / "logs" / s / "{host}.log")} for s in ("app", "syslog")}
    (base / "attribution.yaml").write_text(
        yaml.safe_dump(
            {
                "warehouse": str(base / "warehouse.duckdb"),
                "clusters": {
                    "k8s": {
                        "scheduler": "kueue",
                        "kueue": {"url": kube.url, "namespace": "team-a", "token_env": None},
                        "sources": files,
                    }
                },
            }
        )
    )
    stack = PrefectStack(base, base / "attribution.yaml", worker_args=["--limit", str(a.limit)])
    try:
        stack.start()
        t0 = time.monotonic()
        probes = asyncio.run(fire(stack.url, SECRET, storm, a.concurrency))
        answered = time.monotonic() - t0
        lat = [s for _, _, s, _ in storm.answers]
        outcomes = Counter(f"{code} {doc.get('status') or 'refused'}" for _, code, _, doc in storm.answers)
        print(
            f"{a.n} webhook calls ({len(storm.unique)} unique attempts, "
            f"{sum(1 for k, *_ in storm.bodies if k == 'duplicate')} duplicates, "
            f"{sum(1 for k, *_ in storm.bodies if k == 'invalid')} invalid), {a.concurrency} in flight"
        )
        print(
            f"  answers: {dict(outcomes)}; all answered in {answered:.1f} s; re-sent after a dropped "
            f"connection: {storm.resent}"
        )
        print(
            f"  webhook answer: p50 {pct(lat, 0.5) * 1000:.0f} ms, p99 {pct(lat, 0.99) * 1000:.0f} ms, "
            f"max {max(lat) * 1000:.0f} ms"
        )
        print(
            f"  /healthz during the storm: p50 {pct(probes, 0.5) * 1000:.0f} ms, p99 {pct(probes, 0.99) * 1000:.0f} ms "
            f"({len(probes)} probes)",
            flush=True,
        )
        items = wait_all_diagnosed(stack.url, TOKEN, "k8s", len(storm.unique), timeout_s=60 + 10 * len(storm.unique))
        done = time.monotonic() - t0
        health = httpx.get(f"{stack.url}/healthz", timeout=10).status_code
        runs = runs_per_key(stack)
    finally:
        stack.stop()
        kube.stop()
    print(
        f"  diagnoses: {len(items)} in {done:.1f} s after the first call "
        f"({len(storm.unique) / done * 3600:,.0f} attempts/hour); /healthz after: {health}"
    )
    problems = check(storm, items, runs)
    print("  exactly once, invalid refused: " + ("yes" if not problems else "NO: " + "; ".join(problems)))
    kinds = Counter(k for k, *_ in storm.bodies)
    answers = ", ".join(f"{n} x {k}" for k, n in sorted(outcomes.items()))
    health = f"{pct(probes, 0.5) * 1000:.0f} / {pct(probes, 0.99) * 1000:.0f} ms"
    print(
        "\n| calls (unique, duplicate, invalid) | in flight | answers | all answered | answer p50 / p99 "
        "| /healthz p50 / p99 | diagnosed | attempts/h | exactly once |\n"
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |\n"
        f"| {a.n} ({len(storm.unique)}, {kinds['duplicate']}, {kinds['invalid']}) | {a.concurrency} | {answers} "
        f"| {answered:.0f} s | {pct(lat, 0.5):.1f} / {pct(lat, 0.99):.1f} s | {health} "
        f"| {len(items)} in {done / 60:.0f} min | {len(storm.unique) / done * 3600:,.0f} "
        f"| {'yes' if not problems else 'NO'} |"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
