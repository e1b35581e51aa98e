"""One writer process of the warehouse stress test (tests/integration/test_lake_stress.py):

    python -m tests.integration.lake_writer WAREHOUSE PLAN GO [--maintain]

PLAN is a JSON list of {"diagnosis": ..., "topology": [[switch, port, peer, peer_kind, hca], ...]}.
The process opens nothing until GO (a file) exists, so that every writer starts at once; then it
writes the plan's diagnoses in order (Warehouse.write, as a worker does), or with --maintain runs
the lake's maintenance over and over until the writers are done (PLAN then names a file whose
existence means they are). Prints one line: what it did.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def _wait_for(path: Path, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{path} never appeared")
        time.sleep(0.005)


def write(url: str, plan: Path, go: Path) -> str:
    from workload_attribution.contracts.models import Diagnosis
    from workload_attribution.warehouse.store import Warehouse

    items = [
        (Diagnosis.model_validate_json(i["diagnosis"]), [tuple(r) for r in i["topology"] or []] or None)
        for i in json.loads(plan.read_text())
    ]
    wh = Warehouse(url)
    print("ready", flush=True)
    _wait_for(go)
    started = time.monotonic()
    kept = sum(0 if wh.write(d, topology) else 1 for d, topology in items)
    took = time.monotonic() - started
    return f"wrote {len(items)} in {took:.1f} s, {kept} outranked by what was stored"


def maintain(url: str, done: Path, go: Path) -> str:
    from workload_attribution.warehouse.store import Warehouse

    wh = Warehouse(url)
    print("ready", flush=True)
    _wait_for(go)
    runs = 0
    while not done.exists() or runs == 0:
        wh.maintain()
        runs += 1
    return f"maintained {runs} times"


if __name__ == "__main__":
    url, plan_or_done, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    print(maintain(url, plan_or_done, go) if "--maintain" in sys.argv else write(url, plan_or_done, go), flush=True)
