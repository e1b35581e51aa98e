"""Slurm connector against a real Slurm 22.05: slurmctld, 4 slurmd, slurmdbd + MariaDB, slurmrestd
(JWT), started by tests/services/slurm_up.sh (installed and started for CI by .ci/run's test run)."""

import os
import re
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.helpers import coverage_of
from tests.waiting import wait_until
from workload_attribution.connectors.slurm import NotASlurmJob, SlurmError, SlurmSource, discover_failed, scope_job
from workload_attribution.contracts.errors import TransientSourceError
from workload_attribution.contracts.models import CoverageStatus
from workload_attribution.staging.attempt import create_staging
from workload_attribution.staging.database import connect, release_staging


def sbatch(env, *args) -> str:
    out = subprocess.run(
        ["sbatch", "--parsable", "-o", f"{env['SLURM_TEST_JOBDIR']}/%j.out", *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "SLURM_CONF": env["SLURM_CONF"]},
    )
    return out.stdout.strip().split(";")[0]


def wait_for(env, job_id, states, timeout=150) -> str:
    """The job's state once accounting records it in one of `states`, with its end, and the same
    record twice in a row: slurmdbd fills a record in steps (node list, end time)."""
    last = [""]

    def settled() -> str | None:
        out = subprocess.run(
            ["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,NodeList,End"],
            capture_output=True,
            text=True,
            env={**os.environ, "SLURM_CONF": env["SLURM_CONF"]},
        ).stdout.strip()
        state = out.split("|")[0] if out else ""
        done = any(state.startswith(s) for s in states) and "Unknown" not in out
        same, last[0] = out == last[0], out
        return state if done and same else None

    return wait_until(
        settled, f"job {job_id} to be {'/'.join(states)} in accounting", timeout, 0.5, seen=lambda: last[0]
    )


@pytest.fixture(scope="module")
def jobs(slurm):
    ids = {"timeout": sbatch(slurm, "--time=1", "--wrap", "sleep 300")}  # the 60-90 s one first
    ids["multi_fail"] = sbatch(
        slurm, "-N2", "--no-requeue", "--wrap", 'srun bash -c "if [ \\$SLURM_PROCID = 1 ]; then exit 7; fi; sleep 2"'
    )
    ids["ok"] = sbatch(slurm, "--wrap", "true")
    ids["cancel"] = sbatch(slurm, "--wrap", "sleep 120")
    ids["node_fail"] = sbatch(slurm, "--no-requeue", "--wrap", "sleep 120")
    env = {**os.environ, "SLURM_CONF": slurm["SLURM_CONF"]}

    def squeue() -> str:
        return subprocess.run(
            ["squeue", "-h", "-j", f"{ids['cancel']},{ids['node_fail']}", "-o", "%i %T %R"],
            env=env,
            capture_output=True,
            text=True,
        ).stdout

    # only a RUNNING job fails with its node; a pending one just waits
    wait_until(
        lambda: squeue().count("RUNNING") == 2,
        "the cancel and node-failure jobs to run",
        90,
        seen=lambda: squeue() + subprocess.run(["sinfo", "-N"], env=env, capture_output=True, text=True).stdout,
    )
    node = subprocess.run(
        ["squeue", "-h", "-j", ids["node_fail"], "-o", "%N"], env=env, capture_output=True, text=True
    ).stdout.strip()
    ids["node_fail_node"] = node
    # the next job on the timeout job's node starts as soon as the time limit kills that one, and fails
    # on its own: the node's slurmd log then holds the earlier job's "DUE TO TIME LIMIT" line
    ids["timeout_node"] = subprocess.run(
        ["squeue", "-h", "-j", ids["timeout"], "-o", "%N"], env=env, capture_output=True, text=True
    ).stdout.strip()
    assert ids["timeout_node"], f"the timeout job is not running: {squeue}"
    ids["after_timeout"] = sbatch(
        slurm,
        "-w",
        ids["timeout_node"],
        "--no-requeue",
        f"--dependency=afterany:{ids['timeout']}",
        "--wrap",
        "echo 'RuntimeError: loss is NaN' >&2; exit 3",
    )
    subprocess.run(["scancel", ids["cancel"]], check=True, env=env)
    subprocess.run(
        ["scontrol", "update", f"nodename={node}", "state=down", "reason=Xid 79 GPU fell off the bus"],
        check=True,
        env=env,
    )
    wait_for(slurm, ids["node_fail"], ["NODE_FAIL"])
    subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], env=env)
    for name, state in (("multi_fail", ["FAILED"]), ("ok", ["COMPLETED"]), ("cancel", ["CANCELLED"])):
        wait_for(slurm, ids[name], state)
    return ids


@pytest.mark.parametrize("via", ["rest", "cli"])
def test_scopes_a_failed_multinode_job_with_its_true_exit_code(slurm, jobs, via):
    src = SlurmSource(rest_url=slurm["SLURMRESTD_URL"] if via == "rest" else None)
    scope = scope_job(src, "ci", jobs["multi_fail"])
    from workload_attribution.contracts.hostlist import expand_hostlist

    nodelist = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-j", jobs["multi_fail"], "-o", "NodeList"],
        capture_output=True,
        text=True,
        env={**os.environ, "SLURM_CONF": slurm["SLURM_CONF"]},
    ).stdout.strip()
    assert len(scope.nodes) == 2 and scope.nodes == expand_hostlist(nodelist) and scope.state == "FAILED"
    assert scope.exit_code == "7:0"  # 22.05's sacct --json says SUCCESS here; the raw status says 7
    assert scope.end >= scope.start


@pytest.mark.parametrize(
    "name,state,exit_code",
    [("ok", "COMPLETED", "0:0"), ("cancel", "CANCELLED", None), ("node_fail", "NODE_FAIL", None)],
)
def test_terminal_states(slurm, jobs, name, state, exit_code):
    scope = scope_job(SlurmSource(rest_url=slurm["SLURMRESTD_URL"]), "ci", jobs[name])
    assert scope.state.startswith(state)
    if exit_code:
        assert scope.exit_code == exit_code
    if name == "node_fail":
        assert scope.nodes == [jobs["node_fail_node"]]


def test_collect_feeds_the_rules(slurm, jobs):
    from workload_attribution.rules.engine import Settings, prepare, run_phases
    from workload_attribution.rules.pack import default_pack

    src = SlurmSource(rest_url=slurm["SLURMRESTD_URL"])
    scope = scope_job(src, "ci", jobs["node_fail"])
    staging = create_staging(scope)
    try:
        cov = coverage_of(src, scope, staging)
        assert cov.status == CoverageStatus.ok and cov.details.via == "slurmrestd"
        con = connect(staging)
        pack = default_pack()
        prepare(con, pack, Settings())
        run_phases(con, pack, Settings(), prepared=True)
        v = con.execute("SELECT terminal_state, sub_domain FROM verdict").fetchone()
        con.close()
        assert v == ("infrastructure_failure", "node_unreachable")
    finally:
        release_staging(staging)


def test_discovers_failed_attempts_in_a_window(slurm, jobs):
    now = datetime.now(timezone.utc)
    found = {
        j["job_id"]: j["state"]
        for j in discover_failed(SlurmSource(), now - timedelta(hours=1), now + timedelta(minutes=1))
    }
    assert found[jobs["multi_fail"]] == "FAILED" and found[jobs["node_fail"]] == "NODE_FAIL"
    assert jobs["ok"] not in found


@pytest.mark.slow  # Slurm ends a job at its limit by the minute: over a minute of waiting
def test_timeout(slurm, jobs):
    wait_for(slurm, jobs["timeout"], ["TIMEOUT"], timeout=180)
    assert scope_job(SlurmSource(rest_url=slurm["SLURMRESTD_URL"]), "ci", jobs["timeout"]).state == "TIMEOUT"


@pytest.mark.slow  # it waits for the earlier job's time limit too
def test_an_earlier_jobs_time_limit_on_the_node_is_not_this_jobs(slurm, jobs):
    """A job failing on a node right after another job hit its time limit there: the node's slurmd log
    (collected as its syslog) holds `*** JOB <earlier> ON <node> CANCELLED AT ... DUE TO TIME LIMIT ***`
    within the clock-skew tolerance of this job's start. It is the other job's, never this one's verdict."""
    from workload_attribution.connectors.clusters import ClusterConfig
    from workload_attribution.connectors.files import FilesSource
    from workload_attribution.contracts.identity import Target
    from workload_attribution.flows.inline import attribute_inline
    from workload_attribution.flows.pipeline import Options
    from workload_attribution.rules.pack import default_pack

    assert wait_for(slurm, jobs["after_timeout"], ["FAILED"], timeout=180) == "FAILED"
    node, earlier = jobs["timeout_node"], jobs["timeout"]
    slurmd_log = Path(slurm["SLURM_CONF"]).parents[1] / "log" / "slurmd-{host}.log"
    line = rf"\*\*\* JOB {earlier} ON {node} CANCELLED AT \S+ DUE TO TIME LIMIT \*\*\*"
    assert re.search(line, Path(str(slurmd_log).replace("{host}", node)).read_text(errors="replace"))
    cluster = ClusterConfig(
        slurm=SlurmSource(rest_url=slurm["SLURMRESTD_URL"]), sources={"syslog": FilesSource(path=str(slurmd_log))}
    )
    pack = default_pack()

    def diagnose(pack):
        return attribute_inline(Target(cluster="ci", job_id=jobs["after_timeout"]), Options(pack=pack, cluster=cluster))

    d = diagnose(pack)
    assert d.attempt.nodes == [node] and d.attempt.state == "FAILED"
    assert {c.source: c.status.value for c in d.coverage}["syslog"] == "ok"
    assert (d.terminal_state, d.sub_domain) != ("scheduler_action", "time_limit"), d.explanation
    assert d.terminal_state != "scheduler_action" and d.affected_nodes == []
    cancels = [s for s in d.symptoms if s.symptom == "slurm_cancelled"]
    assert cancels and all(s.role == "context" and s.details.get("out_of_scope") == "other_job" for s in cancels)
    # without the attempt's scoping the same evidence reads as this job's time limit: the check above bites
    unscoped = pack.model_copy(update={"rules": [r for r in pack.rules if r.id != "scope-attempt"]})
    d = diagnose(unscoped)
    assert (d.terminal_state, d.sub_domain) == ("scheduler_action", "time_limit")


def test_faults(slurm, jobs, monkeypatch):
    monkeypatch.setenv("SLURMRESTD_TOKEN", "not-a-token")
    with pytest.raises(SlurmError):
        scope_job(SlurmSource(rest_url=slurm["SLURMRESTD_URL"]), "ci", jobs["ok"])
    with pytest.raises(TransientSourceError):
        scope_job(SlurmSource(rest_url="http://127.0.0.1:9", timeout_s=1), "ci", jobs["ok"])
    with pytest.raises(NotASlurmJob, match="not a Slurm job id"):
        scope_job(SlurmSource(), "ci", "1; rm -rf /")
    with pytest.raises(SlurmError, match="not installed"):
        scope_job(SlurmSource(sacct="/nonexistent/sacct"), "ci", jobs["ok"])
