"""IBM Spectrum LSF (connectors/lsf.py, data/lsf_states.csv, deployments/lsf/attribution-post-exec),
replayed from what real installations printed (tests/recorded/SOURCES.md): BatchEuphoria's
`bjobs -a -hms -json -o ...` records (DKFZ), Gábor Samu's `bjobs -json` of a running job and
`bhist -l` outputs (a TERM_CHKPNT exit; an 8xH100 job, printed with LSB_DISPLAY_YEAR). bjobs and
bhist are stand-ins on PATH that answer only the real command lines."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from tests.conftest import ROOT
from tests.fake_commands import fake_commands
from tests.helpers import diagnose
from tests.triggers import notify_config, service, spooled
from tests.waiting import wait_until
from workload_attribution.connectors import lsf
from workload_attribution.connectors.registry import CollectContext
from workload_attribution.connectors.schedulers import Fact
from workload_attribution.contracts.identity import Target
from workload_attribution.contracts.models import AttemptScope
from workload_attribution.staging.attempt import create_staging
from workload_attribution.staging.database import connected, release_staging

RECORDED = ROOT / "tests" / "recorded" / "lsf"
DONE_EXTENDED = RECORDED / "bjobs-json_done_extended_batcheuphoria.json"  # job 22005, DONE
EXIT_CODE_1 = RECORDED / "bjobs-json_done_exitcode1_batcheuphoria.json"  # job 22005, EXIT_CODE 1
RUNNING = RECORDED / "bjobs-json_run_gsamu-24520.json"
FINISHED = RECORDED / "bjobs-json_exit-done_batcheuphoria.json"  # 3 EXIT, 3 DONE
CHKPNT = RECORDED / "bhist-l_exit137_term-chkpnt_gsamu-12995.txt"
GPU = RECORDED / "bhist-l-gpu_done_8xH100_gsamu-1131.txt"
HOOK = ROOT / "deployments" / "lsf" / "attribution-post-exec"
UTC = ZoneInfo("UTC")


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


def src_for(tmp_path: Path) -> tuple[lsf.LsfSource, object]:
    bin_ = fake_commands(tmp_path)
    return lsf.LsfSource(bjobs=str(bin_.path / "bjobs"), bhist=str(bin_.path / "bhist")), bin_


def bjobs_argv(job: str) -> list[str]:
    return ["-a", "-hms", "-json", "-o", lsf.FIELDS, job]


@pytest.mark.parametrize(
    "facts, meaning",
    [
        (
            [Fact("reason", "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit"), Fact("exit", "1")],
            ("application_failure", "host_oom"),
        ),
        (
            [Fact("reason", "TERM_RUNLIMIT: job killed after reaching LSF run time limit"), Fact("exit", "140")],
            ("scheduler_action", "time_limit"),
        ),
        ([Fact("reason", "TERM_OWNER: job killed by owner"), Fact("exit", "130")], ("scheduler_action", "cancelled")),
        ([Fact("reason", "TERM_PREEMPT: job killed after preemption")], ("scheduler_action", "preemption")),
        ([Fact("reason", "TERM_ZOMBIE"), Fact("state", "EXIT")], ("infrastructure_failure", "node_unreachable")),
        ([Fact("reason", "TERM_CHKPNT: job killed after checkpointing"), Fact("exit", "137")], ("", "")),
        ([Fact("exit", "139"), Fact("state", "EXIT")], ("", "")),  # a segfault: the evidence says whose
        ([Fact("exit", "0"), Fact("state", "DONE")], ("completed", "none")),
    ],
)
def test_term_reasons_exit_codes_and_states_read_through_the_table(facts, meaning):
    got = lsf.STATES.read([*facts, Fact("state", "EXIT")])
    assert (got.terminal_state, got.sub_domain) == meaning
    assert got.failed is (meaning[0] != "completed")


def test_states_say_when_the_record_is_the_last_word():
    unended = ["PEND", "PROV", "PSUSP", "RUN", "SSUSP", "USUSP", "WAIT", "UNKWN"]
    assert all(lsf.STATES.unended(s) for s in unended)
    over = ["DONE", "EXIT", "ZOMBI", "PDONE", "PERR", "POST_DONE", "POST_ERR"]
    assert [s for s in over if lsf.STATES.ended(s)] == over
    assert lsf.STATES.failure_states() == ["EXIT", "ZOMBI"]  # ZOMBI: killed while its host was unreachable
    assert lsf.check_job_id("4718921[3]") == "4718921[3]"
    with pytest.raises(ValueError, match="not an LSF job id"):
        lsf.check_job_id("12995 -u all")


def test_bhist_reads_the_exit_its_reason_and_the_window_of_the_last_dispatch():
    past = lsf.history(CHKPNT.read_text(), UTC, utc("2022-05-01T00:00:00"))
    assert (past.exit_code, past.reason, past.dispatches, past.hosts) == (
        "137",
        "TERM_CHKPNT: job killed after checkpointing",  # wrapped at 80 columns mid-word, joined
        1,
        ["kilenc"],
    )
    assert (past.start, past.end) == (utc("2022-04-12T08:48:29"), utc("2022-04-12T08:54:15"))  # no year: 2022's
    submitted = past.events[0][1]
    assert submitted.endswith(
        "to Queue <normal>, CWD <$HOME>, Checkpoint directory </home/gsamu/checkpoint_data/12995>;"
    )
    # with LSB_DISPLAY_YEAR the text starts 26 columns in: a space at the wrap is kept
    gpu = lsf.history(GPU.read_text(), UTC, utc("2030-01-01T00:00:00"))
    assert (gpu.exit_code, gpu.reason, gpu.hosts) == ("0", None, ["p1-r01-n4"])
    assert (gpu.start, gpu.end) == (utc("2025-01-02T14:51:24"), utc("2025-01-02T16:08:05"))
    assert any(e[1].startswith("Running with execution home </u/gsamu>, Execution CWD </u/gsamu>") for e in gpu.events)


def test_a_job_is_scoped_from_bjobs_and_bhist_with_their_real_flags(tmp_path):
    src, bin_ = src_for(tmp_path)
    bin_.add("bjobs", bjobs_argv("22005"), DONE_EXTENDED)
    bin_.add("bhist", ["-l", "22005"], GPU)  # the recorded history is another job's (1131): as this one's
    bin_.add("bjobs", bjobs_argv("24520"), RUNNING)
    scope = lsf.scope(src, Target(cluster="dkfz", job_id="22005", trigger="completion"))
    assert (scope.scheduler, scope.job_id, scope.attempt, scope.state, scope.exit_code) == (
        "lsf",
        "22005",
        0,
        "DONE",
        "0",
    )
    assert scope.nodes == ["exec-host"]  # EXEC_HOST exec-host:exec-host
    assert (scope.start, scope.end) == (utc("2025-01-02T14:51:24"), utc("2025-01-02T16:08:05"))  # bhist's seconds
    with pytest.raises(lsf.NotYetRecorded, match="STAT RUN"):  # a completion trigger waits for DONE/EXIT
        lsf.scope(src, Target(cluster="dkfz", job_id="24520", trigger="completion"))
    assert [c["argv"] for c in bin_.calls()] == [
        ["bjobs", *bjobs_argv("22005")],
        ["bhist", "-l", "22005"],
        ["bjobs", *bjobs_argv("24520")],
    ]
    assert {c["tz"] for c in bin_.calls()} == {"UTC"}


def test_without_bhist_the_scope_takes_bjobs_minutes(tmp_path):
    src, bin_ = src_for(tmp_path)
    bin_.add("bjobs", bjobs_argv("22005"), EXIT_CODE_1)
    bin_.add("bhist", ["-l", "22005"], None, stderr="No matching job found\n", exit=255)
    scope = lsf.scope(src, Target(cluster="dkfz", job_id="22005"))
    assert (scope.exit_code, scope.nodes) == ("1", ["exec-host"])
    assert (scope.start.month, scope.start.day, scope.start.hour, scope.start.minute) == (12, 28, 19, 56)
    assert scope.start <= datetime.now(timezone.utc)  # no year printed: the latest Dec 28 not in the future


def test_the_backfill_finds_the_jobs_that_exited_in_the_window(tmp_path):
    src, bin_ = src_for(tmp_path)
    bin_.add("bjobs", ["-d", "-u", "all", "-hms", "-json", "-o", lsf.FIELDS], FINISHED)
    found = lsf.discover(src, "dkfz", utc("2021-01-07T00:00:00"), utc("2021-01-10T00:00:00"))
    # the three EXIT records; not the three DONE ones
    assert [(a.id.job_id, a.id.attempt) for a in found] == [("487641", 0), ("487642", 0), ("488155", 0)]
    assert {a.end for a in found} == {utc("2021-01-07T09:59:00")}
    assert lsf.discover(src, "dkfz", utc("2021-01-08T00:00:00"), utc("2021-01-10T00:00:00")) == []


def collect(tmp_path: Path, src: lsf.LsfSource) -> tuple[object, list[tuple]]:
    scope = AttemptScope(
        cluster="dkfz",
        scheduler="lsf",
        job_id="22005",
        attempt=0,
        nodes=["exec-host"],
        start=utc("2025-01-02T14:51:24"),
        end=utc("2025-01-02T16:08:05"),
        state="DONE",
    )
    staging = create_staging(scope)
    try:
        got = lsf.collect(CollectContext(source="scheduler_record", scope=scope, staging=staging, config=src))
        with connected(staging) as con:
            rows = con.execute("SELECT kind, time, text, attrs FROM records ORDER BY obs_id").fetchall()
    finally:
        release_staging(staging)
    return got, rows


def test_the_record_and_its_history_are_collected(tmp_path):
    src, bin_ = src_for(tmp_path)
    bin_.add("bjobs", bjobs_argv("22005"), DONE_EXTENDED)
    bin_.add("bhist", ["-l", "22005"], CHKPNT)  # another job's history (12995) as this one's
    got, rows = collect(tmp_path, src)
    assert got.coverage.status.value == "ok" and got.coverage.observations == len(rows) == 9
    job = json.loads(rows[0][3])
    assert (rows[0][0], job["state"], job["reason"], job["max_mem"]) == (
        "scheduler_job",
        "DONE",
        "TERM_CHKPNT: job killed after checkpointing",
        "5.2 Gbytes",
    )
    assert {r[0] for r in rows[1:]} == {"scheduler_event"}
    assert rows[-1][2].startswith("Completed <exit>; TERM_CHKPNT") and rows[-1][1] is not None


def test_without_bhist_the_record_alone_is_collected_and_the_gap_said(tmp_path):
    src, bin_ = src_for(tmp_path)
    bin_.add("bjobs", bjobs_argv("22005"), EXIT_CODE_1)
    bin_.add("bhist", ["-l", "22005"], None, stderr="bhist: lsb.events: Permission denied\n", exit=255)
    got, rows = collect(tmp_path, src)
    assert (got.coverage.status.value, got.coverage.observations, len(rows)) == ("partial", 1, 1)
    assert "Permission denied" in (got.coverage.error or "")


def run_hook(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HOOK)], capture_output=True, text=True, env={**os.environ, **env}, timeout=60
    )


def test_the_post_exec_script_sends_the_signed_notice_to_the_lsf_webhook(tmp_path):
    job = {"LSB_JOBID": "4718921", "LSB_JOBINDEX": "3", "LSB_JOBEXIT_STAT": "35840", "LSB_HOSTS": "bc-n0421"}
    with service(tmp_path, {"bc-lsf": {"scheduler": "lsf"}}) as svc:
        env = notify_config(tmp_path, f"{svc.url}/v1/webhooks/lsf", cluster="bc-lsf")
        r = run_hook({**env, **job})  # exit 140 (wait status 140 << 8): failed
        assert r.returncode == 0 and r.stderr == "", r.stderr
        wait_until(lambda: svc.keys() == ["bc-lsf:lsf:4718921[3]:0"], "the failed job's notice to start a diagnosis")
        [(_, parameters)] = svc.recorder.runs
        assert parameters["target"] == {
            "cluster": "bc-lsf",
            "job_id": "4718921[3]",
            "attempt": 0,
            "trigger": "completion",
        }
        # a job that exited 0 is recorded, not diagnosed: delivered, nothing started
        r = run_hook({**env, "LSB_JOBID": "4718930", "LSB_JOBINDEX": "0", "LSB_JOBEXIT_STAT": "0"})
        assert r.returncode == 0
        wait_until(lambda: not spooled(tmp_path), "the finished job's notice to be delivered")
        assert svc.keys() == ["bc-lsf:lsf:4718921[3]:0"]


def test_the_post_exec_script_never_fails_the_job():
    r = run_hook({"ATTRIBUTION_NOTIFY": "/nonexistent/attribution-notify", "LSB_JOBID": "1", "LSB_JOBEXIT_STAT": "9"})
    assert r.returncode == 0 and "attribution-post-exec: FileNotFoundError" in r.stderr


@pytest.mark.parametrize("status, code", [(0, 0), (256, 1), (35840, 140), (9, 137), (15, 143)])
def test_a_wait_status_is_lsfs_exit_code(status, code):
    assert lsf.exit_code(status) == code


def test_a_bundle_is_read_through_the_same_module_its_record_winning(tmp_path):
    """tests/real's TERM_MEMLIMIT case (its bjobs.json and bhist.txt printed in New York time, without
    a year), its attempt.yaml's window and node made wrong: the record's win, to bhist's second."""
    bundle = tmp_path / "cromwell-6284289"
    shutil.copytree(ROOT / "tests" / "real" / "lsf-term-memlimit-exit1-genepattern-1", bundle)
    yaml = (bundle / "attempt.yaml").read_text()
    (bundle / "attempt.yaml").write_text(
        yaml.replace("nodes: [node1459]", "nodes: [node1460]")
        .replace("'2018-11-02T15:00:20Z'", "'2018-11-02T14:00:00Z'")
        .replace("state: 'EXIT'", "state: 'RUN'")
    )
    d = diagnose(bundle)
    assert (d.terminal_state, d.sub_domain, d.affected_nodes) == ("application_failure", "host_oom", [])
    assert (d.attempt.state, d.attempt.nodes) == ("EXIT", ["node1459"])
    assert (d.attempt.start, d.attempt.end) == (utc("2018-11-02T15:00:20"), utc("2018-11-02T15:07:57"))
    assert sum("the record wins" in n for n in d.notes) == 3  # state, window, nodes
    assert {c.source: c.status.value for c in d.coverage}["scheduler_record"] == "ok"
    assert any("TERM_MEMLIMIT" in e.text for e in d.evidence)


def test_a_job_mbatchd_has_forgotten_is_scoped_and_collected_from_bhist_alone(tmp_path):
    """bjobs keeps a finished job for CLEAN_PERIOD (an hour by default); bhist reads lsb.events."""
    src, bin_ = src_for(tmp_path)
    bin_.add("bjobs", bjobs_argv("12995"), None, stderr="Job <12995> is not found\n", exit=255)
    bin_.add("bhist", ["-l", "12995"], CHKPNT)
    scope = lsf.scope(src, Target(cluster="kilenc", job_id="12995", trigger="completion"))
    assert (scope.state, scope.exit_code, scope.nodes, scope.attempt) == ("EXIT", "137", ["kilenc"], 0)
    assert scope.reason == "TERM_CHKPNT: job killed after checkpointing"
    assert (scope.start.month, scope.start.day, scope.end.hour, scope.end.minute, scope.end.second) == (
        4,
        12,
        8,
        54,
        15,
    )
    scope = scope.model_copy(update={"job_id": "12995"})
    staging = create_staging(scope)
    try:
        got = lsf.collect(CollectContext(source="scheduler_record", scope=scope, staging=staging, config=src))
        with connected(staging) as con:
            [job] = con.execute("SELECT attrs FROM records WHERE kind = 'scheduler_job'").fetchall()
    finally:
        release_staging(staging)
    assert got.coverage.status.value == "ok"
    assert json.loads(job[0])["state"] == "EXIT" and json.loads(job[0])["nodes"] == ["kilenc"]
    # neither knows it: an error, not a guess
    bin_.add("bjobs", bjobs_argv("99"), None, stderr="Job <99> is not found\n", exit=255)
    bin_.add("bhist", ["-l", "99"], None, stderr="No matching job found\n", exit=255)
    with pytest.raises(lsf.LsfError, match="No matching job found"):
        lsf.scope(src, Target(cluster="kilenc", job_id="99"))
