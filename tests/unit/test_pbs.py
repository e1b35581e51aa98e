"""OpenPBS / PBS Pro (connectors/pbs.py, data/pbs_states.csv, deployments/pbs/attribution_end.py),
replayed from what real installations printed (tests/recorded/SOURCES.md): ALCF Aurora's
`qstat -x -f -F json` (two walltime kills, Exit_status -29; a job that finished; a held one) and an
OpenPBS `tracejob`. qstat and tracejob are stand-ins on PATH that answer only the real command lines."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.fake_commands import fake_commands
from tests.helpers import diagnose
from tests.triggers import notify_config, service, spooled
from tests.waiting import wait_until
from workload_attribution.connectors import pbs
from workload_attribution.connectors.registry import CollectContext
from workload_attribution.connectors.schedulers import Fact
from workload_attribution.contracts.identity import Target
from workload_attribution.contracts.models import AttemptScope
from workload_attribution.staging.attempt import create_staging
from workload_attribution.staging.database import connected, release_staging

RECORDED = ROOT / "tests" / "recorded" / "pbs"
QSTAT = RECORDED / "qstat-x-f-F-json_aurora_walltime-29.json"
TRACEJOB = RECORDED / "tracejob_openpbs_110.n001.txt"
WALLTIME = "6617175.aurora-pbs-0001.hostmgmt.cm.aurora.alcf.anl.gov"  # run 15, killed at its walltime
HELD = "4905472.aurora-pbs-0001.hostmgmt.cm.aurora.alcf.anl.gov"
HOOK = ROOT / "deployments" / "pbs" / "attribution_end.py"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


def src_for(tmp_path: Path) -> tuple[pbs.PbsSource, object]:
    bin_ = fake_commands(tmp_path)
    return pbs.PbsSource(qstat=str(bin_.path / "qstat"), tracejob=str(bin_.path / "tracejob")), bin_


@pytest.mark.parametrize(
    "facts, meaning",
    [
        ([Fact("exit", -29), Fact("substate", 93), Fact("state", "F")], ("scheduler_action", "time_limit")),
        (
            [Fact("exit", 271), Fact("reason", "Job run at ... on (n1:ncpus=1) and terminated")],
            ("scheduler_action", "cancelled"),
        ),
        (
            [
                Fact("exit", 271),
                Fact("reason", "... and failed"),
                Fact("message", "mem 38427376kb exceeded limit 33554432kb"),
            ],
            ("application_failure", "host_oom"),
        ),
        ([Fact("exit", 271), Fact("message", "walltime 152 exceeded limit 120")], ("scheduler_action", "time_limit")),
        ([Fact("exit", -14), Fact("message", "node EOF 1 (gn-a02)")], ("infrastructure_failure", "node_unreachable")),
        ([Fact("exit", 0), Fact("substate", 92), Fact("state", "F")], ("completed", "none")),
        ([Fact("exit", 1), Fact("reason", "... and failed"), Fact("substate", 93)], ("", "")),
        ([Fact("exit", 265)], ("", "")),  # 256 + SIGKILL: who sent it, the evidence says
    ],
)
def test_exit_status_comment_and_the_moms_words_read_through_the_table(facts, meaning):
    got = pbs.STATES.read(facts, ["n1", "gn-a01", "gn-a02"])
    assert (got.terminal_state, got.sub_domain) == meaning
    assert got.failed is (meaning[0] != "completed")
    if meaning[1] == "node_unreachable":
        assert got.blamed == ("gn-a02",)


def test_states_say_when_the_record_is_the_last_word():
    assert [s for s in "QHWTRESUBMFX" if pbs.STATES.unended(s)] == list("QHWTRESUB")
    assert pbs.STATES.ended("F") and pbs.STATES.ended("X")
    assert pbs.check_job_id(WALLTIME) == WALLTIME and pbs.check_job_id("1234[7].pbs01") == "1234[7].pbs01"
    with pytest.raises(ValueError, match="not a PBS job id"):
        pbs.check_job_id("1234; rm -rf /")


def test_a_job_is_scoped_from_qstat_with_its_real_flags(tmp_path):
    src, bin_ = src_for(tmp_path)
    bin_.add("qstat", ["-x", "-f", "-F", "json", WALLTIME], QSTAT)
    bin_.add("qstat", ["-x", "-f", "-F", "json", HELD], QSTAT)
    scope = pbs.scope(src, Target(cluster="aurora", job_id=WALLTIME, trigger="completion"))
    assert (scope.scheduler, scope.job_id, scope.attempt, scope.state, scope.exit_code) == (
        "pbs",
        WALLTIME,
        14,
        "F",
        "-29",
    )
    assert len(scope.nodes) == 40 and scope.nodes[:2] == ["x4618c0s0b0n0", "x4618c0s1b0n0"]
    assert scope.reason.endswith("and exceeded resource walltime")
    # the stand-in prints the recorded text; qstat run with TZ=UTC prints UTC: stime .. obittime
    assert (scope.start, scope.end) == (utc("2025-07-23T15:35:36"), utc("2025-07-23T21:37:59"))
    with pytest.raises(pbs.NotYetRecorded, match="job_state H"):  # a completion trigger waits for F
        pbs.scope(src, Target(cluster="aurora", job_id=HELD, trigger="completion"))
    assert [c["argv"][1:] for c in bin_.calls()] == [["-x", "-f", "-F", "json", j] for j in (WALLTIME, HELD)]
    assert {c["tz"] for c in bin_.calls()} == {"UTC"}


def test_the_backfill_finds_the_failed_runs_of_the_window(tmp_path):
    src, bin_ = src_for(tmp_path)
    bin_.add("qstat", ["-x", "-f", "-F", "json"], QSTAT)
    found = pbs.discover(src, "aurora", utc("2025-07-23T00:00:00"), utc("2025-07-25T00:00:00"))
    # the two walltime kills (Exit_status -29); not the job that finished, nor the held one
    assert [(a.id.job_id.split(".")[0], a.id.attempt) for a in found] == [("6617175", 14), ("6617182", 0)]
    assert [a.end for a in found] == [utc("2025-07-23T21:37:59"), utc("2025-07-24T03:42:17")]
    assert pbs.discover(src, "aurora", utc("2025-07-24T00:00:00"), utc("2025-07-24T03:00:00")) == []


def test_the_record_and_its_history_are_collected(tmp_path):
    src, bin_ = src_for(tmp_path)
    bin_.add("qstat", ["-x", "-f", "-F", "json", WALLTIME], QSTAT)
    # the recorded tracejob is another job's (OpenPBS 110.n001): its lines as this job's history
    bin_.add("tracejob", ["-n", "7", WALLTIME], TRACEJOB)
    scope = AttemptScope(
        cluster="aurora",
        scheduler="pbs",
        job_id=WALLTIME,
        attempt=14,
        nodes=["x4618c0s0b0n0"],
        start=utc("2025-07-23T15:35:36"),
        end=utc("2025-07-23T21:37:59"),
        state="F",
        timezone="America/Chicago",
    )
    staging = create_staging(scope)
    try:
        got = pbs.collect(CollectContext(source="scheduler_record", scope=scope, staging=staging, config=src))
        with connected(staging) as con:
            rows = con.execute("SELECT kind, time, text, attrs FROM records ORDER BY obs_id").fetchall()
    finally:
        release_staging(staging)
    assert got.coverage.status.value == "ok" and got.coverage.observations == len(rows) == 24
    job = json.loads(rows[0][3])
    assert (rows[0][0], job["terminal_state"], job["sub_domain"], job["meaning_by"]) == (
        "scheduler_job",
        "scheduler_action",
        "time_limit",
        "exit=-29",
    )
    assert job["walltime"] == {"used": "06:01:24", "limit": "06:00:00"} and job["attempt"] == 14
    exit_line = next(r for r in rows if r[2].startswith("Exit_status=0"))
    assert exit_line[2].endswith("resources_used.walltime=00:00:04")  # the wrapped line is one entry
    assert exit_line[1] == datetime(2024, 12, 26, 4, 27, 52)  # 22:27:52 Chicago time, staged as UTC
    assert [c["argv"][0] for c in bin_.calls()] == ["qstat", "tracejob"]


def test_without_tracejob_the_record_alone_is_collected_and_the_gap_said(tmp_path):
    src, bin_ = src_for(tmp_path)
    bin_.add("qstat", ["-x", "-f", "-F", "json", WALLTIME], QSTAT)
    bin_.add("tracejob", ["-n", "7", WALLTIME], None, stderr="tracejob: cannot open server log directory\n", exit=1)
    scope = AttemptScope(
        cluster="aurora",
        scheduler="pbs",
        job_id=WALLTIME,
        attempt=14,
        nodes=["x4618c0s0b0n0"],
        start=utc("2025-07-23T15:35:36"),
        end=utc("2025-07-23T21:37:59"),
        state="F",
    )
    staging = create_staging(scope)
    try:
        got = pbs.collect(CollectContext(source="scheduler_record", scope=scope, staging=staging, config=src))
    finally:
        release_staging(staging)
    assert (got.coverage.status.value, got.coverage.observations) == ("partial", 1)
    assert "cannot open server log directory" in (got.coverage.error or "")


def test_a_bundle_is_read_through_the_same_module_its_record_winning(tmp_path):
    bundle = tmp_path / "aurora-6617175"
    (bundle / "scheduler").mkdir(parents=True)
    shutil.copy(QSTAT, bundle / "scheduler" / "qstat.json")  # as exported on the server: Chicago time
    (bundle / "attempt.yaml").write_text(
        "cluster: aurora\nscheduler: pbs\njob_id: '6617175'\nattempt: 14\nnodes: [x4618c0s0b0n0]\n"
        "start: '2025-07-23T20:00:00Z'\nend: '2025-07-24T02:00:00Z'\nstate: R\ntimezone: America/Chicago\n"
    )
    d = diagnose(bundle)
    assert (d.terminal_state, d.sub_domain, d.affected_nodes) == ("scheduler_action", "time_limit", [])
    assert (d.attempt.state, len(d.attempt.nodes)) == ("F", 40)
    assert (d.attempt.start, d.attempt.end) == (utc("2025-07-23T20:35:36"), utc("2025-07-24T02:37:59"))
    assert {c.source: c.status.value for c in d.coverage}["scheduler_record"] == "partial"  # no tracejob.txt
    assert sum("the record wins" in n for n in d.notes) == 3  # state, window, nodes
    assert d.root_cause is not None and any("exit=-29" in e.text for e in d.evidence)


FAKE_PBS = '''
"""The hook's `pbs` module as pbs_python gives it, holding one job as the MoM sees it at execjob_end."""
import json, os, sys

_job = json.loads(os.environ["FAKE_PBS_JOB"])
LOG_ERROR = 3


class _Job:
    def __init__(self, attrs):
        self.__dict__.update(attrs)


class _Event:
    job = _Job(_job)

    def accept(self):
        print("accepted")


def event():
    return _Event()


def logmsg(level, message):
    print(f"log {level}: {message}", file=sys.stderr)
'''


def run_hook(tmp_path: Path, env: dict[str, str], job: dict) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pbsmod").mkdir(exist_ok=True)
    (tmp_path / "pbsmod" / "pbs.py").write_text(FAKE_PBS)
    env = {**os.environ, **env, "PYTHONPATH": str(tmp_path / "pbsmod"), "FAKE_PBS_JOB": json.dumps(job)}
    return subprocess.run([sys.executable, str(HOOK)], capture_output=True, text=True, env=env, timeout=60)


def test_the_execjob_end_hook_sends_the_signed_notice_to_the_pbs_webhook(tmp_path):
    job = {
        "id": "88412.pbs01",
        "Exit_status": -14,
        "run_count": 1,
        "queue": "gpu",
        "exec_host": "gn-a01/0*64+gn-a02/0*64+gn-a03/0*64+gn-a04/0*64",
    }
    with service(tmp_path, {"gpu-pbs": {"scheduler": "pbs"}}) as svc:
        env = notify_config(tmp_path, f"{svc.url}/v1/webhooks/pbs", cluster="gpu-pbs")
        r = run_hook(tmp_path, env, job)
        assert r.returncode == 0 and r.stdout.strip() == "accepted", r.stderr
        wait_until(lambda: svc.keys() == ["gpu-pbs:pbs:88412.pbs01:0"], "the failed run's notice to start a diagnosis")
        [(_, parameters)] = svc.recorder.runs
        assert parameters["target"] == {
            "cluster": "gpu-pbs",
            "job_id": "88412.pbs01",
            "attempt": 0,
            "trigger": "completion",
        }
        # a run that finished (Exit_status 0) is recorded, not diagnosed: delivered, nothing started
        r = run_hook(tmp_path, env, {**job, "id": "88413.pbs01", "Exit_status": 0})
        assert r.returncode == 0
        wait_until(lambda: not spooled(tmp_path), "the finished run's notice to be delivered")
        assert svc.keys() == ["gpu-pbs:pbs:88412.pbs01:0"]


def test_the_hook_accepts_the_event_whatever_happens_to_the_notice(tmp_path):
    env = {"ATTRIBUTION_NOTIFY": str(tmp_path / "missing-notifier")}
    r = run_hook(tmp_path, env, {"id": "1.pbs", "Exit_status": 1, "run_count": 1, "queue": None, "exec_host": None})
    assert r.returncode == 0 and r.stdout.strip() == "accepted"
    assert "attribution_end: FileNotFoundError" in r.stderr
