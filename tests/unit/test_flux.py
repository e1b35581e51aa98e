"""Flux (connectors/flux.py, data/flux_states.csv, deployments/flux/attribution-epilog), replayed from
what flux-core recorded (tests/recorded/SOURCES.md): job-list records of its returncode tests (a
running job, a job shell killed by SIGTERM, a ctrl-C cancel before it ran, exits 42, 1 and 0, with
flux jobs' returncodes for them), a job eventlog from a flux-core 0.46 dump (LLNL catalyst160), and
the text eventlog of the Flux FAQ. `flux` is a stand-in on PATH that answers only the real command
lines; the one-job answers are single records of the job-list file as `flux jobs --json <job>`
prints one object, the backfill's the file's records in the `{"jobs": [...]}` it prints for many."""

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
from workload_attribution.connectors import flux
from workload_attribution.connectors.registry import CollectContext
from workload_attribution.connectors.schedulers import Fact
from workload_attribution.contracts.identity import Target
from workload_attribution.contracts.models import AttemptScope
from workload_attribution.staging.attempt import create_staging
from workload_attribution.staging.database import connected, release_staging

RECORDED = ROOT / "tests" / "recorded" / "flux"
JOB_LIST = RECORDED / "job-list_returncode_flux-core-t.jsonl"
RETURNCODES = RECORDED / "job-list_returncode_flux-core-t.expected-returncode.txt"
EVENTLOG = RECORDED / "job-eventlog_completed_0-46-0-queues-named-v1.jsonl"
TEXT_EVENTLOG = RECORDED / "flux-job-eventlog_offset_sched-pending_flux-docs-faq.txt"
HOOK = ROOT / "deployments" / "flux" / "attribution-epilog"
EXIT_42 = "96775562067968"  # `sh -c 'exit 42'` on asp: FAILED, waitstatus 10752
RUNNING = "106958577205248"


def jobs() -> list[dict]:
    return [json.loads(line) for line in JOB_LIST.read_text().splitlines()]


def one(tmp_path: Path, job_id: str) -> Path:
    """`flux jobs --json <job>`'s answer: the job's record, one object."""
    path = tmp_path / f"job-{job_id}.json"
    path.write_text(json.dumps(next(j for j in jobs() if str(j["id"]) == job_id)) + "\n")
    return path


def src_for(tmp_path: Path) -> tuple[flux.FluxSource, object]:
    bin_ = fake_commands(tmp_path)
    return flux.FluxSource(flux=str(bin_.path / "flux")), bin_


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "facts, meaning",
    [
        (
            [Fact("exception", "node-failure", "node failure on elcap8659 (shell rank 83)"), Fact("result", "FAILED")],
            ("infrastructure_failure", "node_unreachable"),
        ),
        (
            [Fact("exception", "timeout", "resource allocation expired"), Fact("exit", 142)],
            ("scheduler_action", "time_limit"),
        ),
        ([Fact("exception", "cancel", "interrupted by ctrl-C"), Fact("exit", -128)], ("scheduler_action", "cancelled")),
        ([Fact("result", "TIMEOUT")], ("scheduler_action", "time_limit")),
        ([Fact("exception", "exec", "job shell exec error on broker n1 (rank 1)"), Fact("exit", 1)], ("", "")),
        ([Fact("result", "FAILED"), Fact("exit", 143)], ("", "")),  # SIGTERM: the evidence says who sent it
        ([Fact("result", "COMPLETED"), Fact("exit", 0)], ("completed", "none")),
        (
            [Fact("reason", "CANCELED (exception type=cancel: interrupted by ctrl-C)")],
            ("scheduler_action", "cancelled"),
        ),
    ],
)
def test_exceptions_results_and_returncodes_read_through_the_table(facts, meaning):
    got = flux.STATES.read([*facts, Fact("state", "INACTIVE")], ["elcap8658", "elcap8659"])
    assert (got.terminal_state, got.sub_domain) == meaning
    assert got.failed is (meaning[0] != "completed")
    assert got.blamed == (("elcap8659",) if meaning[1] == "node_unreachable" else ())


def test_returncodes_are_flux_jobs_own():
    expected = [line.strip() for line in RETURNCODES.read_text().splitlines()]
    got = [flux.returncode(j) for j in jobs()]
    assert ["-" if c is None else str(c) for c in got] == expected
    assert [flux.reason(j) for j in jobs()][2] == "CANCELED (exception type=cancel: interrupted by ctrl-C)"


def test_states_and_job_ids():
    assert [s for s in ("NEW", "DEPEND", "PRIORITY", "SCHED", "RUN", "CLEANUP") if flux.STATES.unended(s)] == [
        "NEW",
        "DEPEND",
        "PRIORITY",
        "SCHED",
        "RUN",
        "CLEANUP",
    ]
    assert flux.STATES.ended("INACTIVE")
    for job_id in ("ƒNNzkJm7", "fNNzkJm7", "813879525386", "0x3fe"):
        assert flux.check_job_id(job_id) == job_id
    with pytest.raises(ValueError, match="not a Flux job id"):
        flux.check_job_id("ƒNNz; rm")


def test_eventlogs_read_in_both_forms():
    js = flux.read_eventlog(EVENTLOG.read_text(), "eventlog")
    assert [e[1] for e in js.entries][-5:] == ["start", "finish", "release", "free", "clean"]
    assert js.entries[6][2] == {"status": 0} and js.first("start") == datetime.fromtimestamp(
        1669766565.7269967, timezone.utc
    )
    text = flux.read_eventlog(TEXT_EVENTLOG.read_text(), "eventlog")  # offsets from submit: times near 1970, none
    assert [(e[1], e[2]) for e in text.entries] == [
        ("submit", {"userid": 5588, "urgency": 16, "flags": 0, "version": 1}),
        ("validate", {}),
        ("depend", {}),
        ("priority", {"priority": 16}),
    ]
    line = '1611769351.058977 exception type="timeout" severity=0 userid=-1 note="resource allocation expired"'
    [(_, name, context, _)] = flux.read_eventlog(line, "eventlog").entries
    assert (name, context) == (
        "exception",
        {"type": "timeout", "severity": 0, "userid": -1, "note": "resource allocation expired"},
    )
    assert flux.read_eventlog("not an event\n", "x").bad == ["x line 1: not an eventlog entry"]


def test_a_job_is_scoped_from_flux_jobs_and_its_eventlog_with_the_real_flags(tmp_path):
    src, bin_ = src_for(tmp_path)
    bin_.add("flux", ["jobs", "--json", EXIT_42], one(tmp_path, EXIT_42))
    bin_.add(
        "flux",
        ["job", "eventlog", "--format=json", EXIT_42],
        None,
        stderr="flux-job: job eventlog: Permission denied\n",
        exit=1,
    )
    bin_.add("flux", ["jobs", "--json", RUNNING], one(tmp_path, RUNNING))
    scope = flux.scope(src, Target(cluster="asp", job_id=EXIT_42, trigger="completion"))
    assert (scope.scheduler, scope.attempt, scope.state, scope.exit_code, scope.nodes) == (
        "flux",
        0,
        "INACTIVE",
        "42",
        ["asp"],
    )
    assert scope.reason == "FAILED"
    # no eventlog: from t_run (the allocation) to t_inactive
    assert (scope.start, scope.end) == (utc("2020-12-14T18:58:21.499297"), utc("2020-12-14T18:58:21.547437"))
    with pytest.raises(flux.NotYetRecorded, match="state RUN"):  # a completion trigger waits for INACTIVE
        flux.scope(src, Target(cluster="asp", job_id=RUNNING, trigger="completion"))
    assert [c["argv"][1:] for c in bin_.calls()] == [
        ["jobs", "--json", EXIT_42],
        ["job", "eventlog", "--format=json", EXIT_42],
        ["jobs", "--json", RUNNING],
    ]


def test_the_backfill_finds_the_jobs_that_failed_in_the_window(tmp_path):
    src, bin_ = src_for(tmp_path)
    answer = tmp_path / "jobs.json"
    answer.write_text(json.dumps({"jobs": jobs()}))
    since = utc("2020-12-14T18:58:00")
    argv = ["jobs", "--json", "--user=all", "--filter=failed,timeout,canceled", "--since=2020-12-14 18:58:00"]
    bin_.add("flux", argv, answer)
    found = flux.discover(src, "asp", since, utc("2020-12-15T00:00:00"))
    # sh (exit 42), false (exit 1), the ctrl-C cancel; not the running job, the SIGTERMed sleep whose
    # result is COMPLETED, nor true
    assert [(a.id.job_id, a.id.attempt) for a in found] == [
        ("96619970166784", 0),
        ("96775562067968", 0),
        ("98083329277952", 0),
    ]
    assert {c["tz"] for c in bin_.calls()} == {"UTC"}


def test_the_record_and_its_eventlog_are_collected(tmp_path):
    src, bin_ = src_for(tmp_path)
    bin_.add("flux", ["jobs", "--json", EXIT_42], one(tmp_path, EXIT_42))
    bin_.add("flux", ["job", "eventlog", "--format=json", EXIT_42], EVENTLOG)  # catalyst160's, as this job's
    scope = AttemptScope(
        cluster="asp",
        scheduler="flux",
        job_id=EXIT_42,
        attempt=0,
        nodes=["asp"],
        start=utc("2020-12-14T18:58:21"),
        end=utc("2020-12-14T18:58:22"),
        state="INACTIVE",
    )
    staging = create_staging(scope)
    try:
        got = flux.collect(CollectContext(source="scheduler_record", scope=scope, staging=staging, config=src))
        with connected(staging) as con:
            rows = con.execute("SELECT kind, text, attrs FROM records ORDER BY obs_id").fetchall()
    finally:
        release_staging(staging)
    assert got.coverage.status.value == "ok" and got.coverage.observations == len(rows) == 11
    job = json.loads(rows[0][2])
    assert (rows[0][0], job["result"], job["exit_code"], job["waitstatus"]) == ("scheduler_job", "FAILED", "42", 10752)
    assert rows[7][1] == 'finish {"status":0}'


FAILED_EVENTLOG = [  # what `flux job eventlog --format=json` prints for a job whose broker was lost (RFC 21 events)
    {
        "timestamp": 1740020864.702742,
        "name": "exception",
        "context": {
            "type": "node-failure",
            "severity": 2,
            "userid": 765,
            "note": "node failure on elcap8659 (shell rank 83)",
        },
    },
    {"timestamp": 1740020897.114618, "name": "finish", "context": {"status": 36608}},
]


def run_epilog(tmp_path: Path, env: dict[str, str], job_id: str, eventlog: Path) -> subprocess.CompletedProcess[str]:
    bin_ = fake_commands(tmp_path)
    bin_.add("flux", ["job", "eventlog", "--format=json", job_id], eventlog)
    env = {**os.environ, **env, "FLUX": str(bin_.path / "flux"), "FLUX_JOB_ID": job_id}
    return subprocess.run([sys.executable, str(HOOK)], capture_output=True, text=True, env=env, timeout=60)


def test_the_epilog_sends_the_signed_notice_to_the_flux_webhook(tmp_path):
    failed = tmp_path / "failed.jsonl"
    failed.write_text("".join(json.dumps(e) + "\n" for e in FAILED_EVENTLOG))
    with service(tmp_path, {"elcapitan": {"scheduler": "flux"}}) as svc:
        env = notify_config(tmp_path, f"{svc.url}/v1/webhooks/flux", cluster="elcapitan")
        r = run_epilog(tmp_path, env, "ƒcod73yYa6b", failed)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        wait_until(
            lambda: svc.keys() == ["elcapitan:flux:ƒcod73yYa6b:0"], "the failed job's notice to start a diagnosis"
        )
        # the recorded eventlog of a job that finished with status 0: recorded, not diagnosed
        r = run_epilog(tmp_path, env, "ƒ2jzP5fTY", EVENTLOG)
        assert r.returncode == 0
        wait_until(lambda: not spooled(tmp_path), "the finished job's notice to be delivered")
        assert svc.keys() == ["elcapitan:flux:ƒcod73yYa6b:0"]


def test_the_epilog_never_fails_the_job(tmp_path):
    r = run_epilog(tmp_path, {"ATTRIBUTION_NOTIFY": str(tmp_path / "missing")}, "ƒ2jzP5fTY", EVENTLOG)
    assert r.returncode == 0 and "attribution-epilog: FileNotFoundError" in r.stderr


def test_a_bundle_is_read_through_the_same_module_blaming_the_host_the_exception_names(tmp_path):
    """tests/real's El Capitan node failure (its flux-job.json and text eventlog), attempt.yaml's
    window made wrong: the record's window wins (the shells' start to t_inactive); the broker the
    node-failure exception names is the one blamed, of 128."""
    bundle = tmp_path / "elcap"
    shutil.copytree(ROOT / "tests" / "real" / "flux-node-failure-elcap6653-1", bundle)
    yaml = (bundle / "attempt.yaml").read_text()
    (bundle / "attempt.yaml").write_text(yaml.replace("'2025-02-19T21:07:11Z'", "'2025-02-19T20:00:00Z'"))
    d = diagnose(bundle)
    assert (d.terminal_state, d.sub_domain, d.affected_nodes) == (
        "infrastructure_failure",
        "node_unreachable",
        ["elcap8659"],
    )
    assert len(d.attempt.nodes) == 128
    assert (d.attempt.start, d.attempt.end) == (
        datetime.fromtimestamp(1739999231.825289, timezone.utc),
        datetime.fromtimestamp(1740020939.632635, timezone.utc),
    )
    assert sum("the record wins" in n for n in d.notes) == 1  # the window
