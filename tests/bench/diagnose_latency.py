"""POST /v1/diagnose latency for the worked example, beside a local run.

    python -m tests.bench.diagnose_latency [-n 40]

Starts `attribution serve --dashboard-only` on a free port, posts the worked example (tar.gz built
once) n times one after the other, and prints p50/p99 of the answer time; then times
`attribution diagnose --inline` as a fresh process (what a user waits for) and the same diagnosis
in a warm process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=40)
    a = ap.parse_args(argv)
    from tests.conftest import WORKED
    from tests.helpers import diagnose
    from tests.services.prometheus import free_port
    from workload_attribution.client import pack_bundle

    with tempfile.TemporaryDirectory(prefix="diag-bench-") as tmp:
        body = Path(tmp) / "b.tgz"
        pack_bundle(WORKED, body)
        data = body.read_bytes()
        port = free_port()
        env = {**os.environ, "ATTRIBUTION_WAREHOUSE": str(Path(tmp) / "w.duckdb")}
        env.pop("PREFECT_API_URL", None)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "workload_attribution",
                "serve",
                "--dashboard-only",
                "--insecure-no-auth",
                "--port",
                str(port),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(300):
                try:
                    httpx.get(f"{url}/healthz", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            times = []
            with httpx.Client(timeout=120) as c:
                c.post(f"{url}/v1/diagnose", content=data)  # warm
                for _ in range(a.n):
                    t = time.perf_counter()
                    r = c.post(f"{url}/v1/diagnose", content=data)
                    times.append(time.perf_counter() - t)
                    assert r.status_code == 200, r.text
        finally:
            proc.terminate()
            proc.wait(20)
        cold = []
        for _ in range(5):
            t = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "workload_attribution",
                    "diagnose",
                    str(WORKED),
                    "--inline",
                    "--no-warehouse",
                    "-q",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            cold.append(time.perf_counter() - t)
        diagnose(WORKED)
        warm = []
        for _ in range(a.n):
            t = time.perf_counter()
            diagnose(WORKED)
            warm.append(time.perf_counter() - t)
    print(f"worked example, {a.n} runs each (2 cores)")
    print(
        f"  POST /v1/diagnose (tar.gz {len(data) // 1024} KiB)   p50 {pct(times, 0.5):.3f} s   "
        f"p99 {pct(times, 0.99):.3f} s   mean {statistics.mean(times):.3f} s"
    )
    print(f"  attribution diagnose --inline (new process)  p50 {pct(cold, 0.5):.3f} s   (5 runs)")
    print(f"  the same story in a warm process             p50 {pct(warm, 0.5):.3f} s   p99 {pct(warm, 0.99):.3f} s")
    print(
        "\n| the worked example | runs | p50 | p99 |\n| --- | ---: | ---: | ---: |\n"
        f"| `POST /v1/diagnose` (tar.gz, {len(data) // 1024} KiB) | {len(times)} | **{pct(times, 0.5):.2f} s** "
        f"| {pct(times, 0.99):.2f} s |\n"
        f"| `attribution diagnose --inline`, a new process | {len(cold)} | {pct(cold, 0.5):.2f} s | |\n"
        f"| the same story in a warm process | {len(warm)} | {pct(warm, 0.5):.2f} s | {pct(warm, 0.99):.2f} s |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
