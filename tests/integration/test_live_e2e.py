"""End to end on live sources: a real multi-node Slurm job fails; `attribution diagnose --job --inline` scopes
it from Slurm (slurmrestd), collects metrics from the real Prometheus and logs from the Loki
stand-in (no Loki can run here), and writes a diagnosis with every coverage record filled."""

import json
import os
import subprocess
import sys
import time

import yaml

from tests.conftest import ROOT
from tests.integration.test_slurm import sbatch, wait_for
from tests.services.loki_standin import LokiStandIn


def test_failed_slurm_job_diagnosed_from_live_sources(slurm, prometheus, tmp_path):
    job = sbatch(
        slurm,
        "-N2",
        "--no-requeue",
        "--wrap",
        'srun --label bash -c \'if [ $SLURM_PROCID = 1 ]; then python3 -c "raise ValueError(\\"bad batch 42\\")"; '
        "exit 1; fi; sleep 4'",
    )
    assert wait_for(slurm, job, ["FAILED"]) == "FAILED"
    nodes = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-j", job, "-o", "NodeList"], capture_output=True, text=True, env=os.environ
    ).stdout.strip()
    out = (  # what the job printed, as a log shipper would have sent it to Loki: stamped, per host
        open(f"{slurm['SLURM_TEST_JOBDIR']}/{job}.out").read().splitlines()
    )
    assert any("ValueError: bad batch 42" in x for x in out)
    loki = LokiStandIn().start()
    try:
        now = time.time_ns()
        from workload_attribution.contracts.hostlist import expand_hostlist

        hosts = expand_hostlist(nodes)
        loki.streams[tuple(sorted({"job": "app", "host": hosts[1]}.items()))] = [
            (now - 1000 + i, x) for i, x in enumerate(out)
        ]
        cfg = {
            "warehouse": str(tmp_path / "w.duckdb"),
            "clusters": {
                "ci": {
                    "scheduler": "slurm",
                    "slurm": {"rest_url": slurm["SLURMRESTD_URL"]},
                    "sources": {
                        "metrics": {"connector": "prometheus", "url": prometheus.url},
                        "app": {"connector": "loki", "url": loki.url, "selector": '{job="app", host=~"{hosts}"}'},
                        "syslog": {"connector": "loki", "url": loki.url, "selector": '{job="syslog", host=~"{hosts}"}'},
                    },
                }
            },
        }
        (tmp_path / "attribution.yaml").write_text(yaml.safe_dump(cfg))
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "workload_attribution",
                "diagnose",
                "--job",
                job,
                "--cluster",
                "ci",
                "--config",
                str(tmp_path / "attribution.yaml"),
                "--json",
                "--inline",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
            env={**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")},
        )
        assert r.returncode == 0, r.stderr[-3000:]
        d = json.loads(r.stdout)
    finally:
        loki.stop()
    assert d["attempt"]["job_id"] == job and d["attempt"]["nodes"] == hosts and d["attempt"]["state"] == "FAILED"
    assert (d["terminal_state"], d["sub_domain"], d["affected_nodes"]) == ("application_failure", "user_code", [])
    assert "ValueError: bad batch 42" in d["evidence"][0]["text"] or any(
        "ValueError" in e["text"] for e in d["evidence"]
    )
    cov = {c["source"]: (c["connector"], c["status"]) for c in d["coverage"]}
    assert cov == {
        "sacct": ("slurm", "ok"),
        "metrics": ("prometheus", "empty"),
        "app": ("loki", "ok"),
        "syslog": ("loki", "empty"),
    }
    assert any(c["details"].get("exit_code") == "1:0" for c in d["coverage"] if c["source"] == "sacct")
