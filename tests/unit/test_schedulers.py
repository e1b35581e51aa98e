"""Schedulers behind a registry (connectors/schedulers.py): each scheduler's states table says what
its states mean, and a new scheduler is one module and its table. The proof: a toy scheduler module,
dropped beside the shipped ones and nowhere else named, is configured, scopes and diagnoses a job
(`attribution diagnose --job`), has its failed jobs found and diagnosed by the backfill, and takes
its own completion notices on its own webhook."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from workload_attribution.connectors.kueue import STATES as KUEUE
from workload_attribution.connectors.kueue import ended_badly
from workload_attribution.connectors.schedulers import Fact, StateTable, get_scheduler, schedulers
from workload_attribution.connectors.slurm import STATES as SLURM

# Slurm's job state codes (squeue(1), JOB STATE CODES): the compact code and the name, as squeue lists them
SLURM_DOCUMENTED = dict(
    pair.split(":")
    for pair in (
        "BF:BOOT_FAIL CA:CANCELLED CD:COMPLETED CF:CONFIGURING CG:COMPLETING DL:DEADLINE F:FAILED NF:NODE_FAIL "
        "OOM:OUT_OF_MEMORY PD:PENDING PR:PREEMPTED R:RUNNING RD:RESV_DEL_HOLD RF:REQUEUE_FED RH:REQUEUE_HOLD "
        "RQ:REQUEUED RS:RESIZING RV:REVOKED SI:SIGNALING SE:SPECIAL_EXIT SO:STAGE_OUT ST:STOPPED S:SUSPENDED TO:TIMEOUT"
    ).split()
)
SLURM_NAMES = list(SLURM_DOCUMENTED.values())


def test_the_slurm_table_holds_every_documented_state_and_the_lists_it_replaced():
    assert sorted(r.state for r in SLURM.rows) == sorted([*SLURM_DOCUMENTED, *SLURM_NAMES])
    for code, name in SLURM_DOCUMENTED.items():  # a compact code reads as its name
        short, long = SLURM.of(code), SLURM.of(name)
        assert (short.ended, short.failed, short.terminal_state, short.sub_domain) == (
            long.ended,
            long.failed,
            long.terminal_state,
            long.sub_domain,
        ), code
    # what backfills looked for, what a record taken before the end is, what a webhook records
    failing = {"FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
    assert set(SLURM.failure_states()) == failing | {c for c, n in SLURM_DOCUMENTED.items() if n in failing}
    unended = {s for s in SLURM_NAMES if SLURM.unended(s)}
    assert unended == {"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "RESIZING", "SIGNALING"} | {
        "STAGE_OUT",
        "STOPPED",
    }
    assert [s for s in SLURM_NAMES if SLURM.completed(s)] == ["COMPLETED"] and SLURM.completed("cd")
    assert not SLURM.ended("REQUEUED") and not SLURM.unended("REQUEUED")  # over for this attempt, runs again
    assert SLURM.failed("CANCELLED by 0") and SLURM.of("CANCELLED by 0").sub_domain == "cancelled"
    assert SLURM.of("TIMEOUT").terminal_state == "scheduler_action" and SLURM.of("FAILED").terminal_state == ""
    # a state a later Slurm adds: over, failed (a backfill and a webhook diagnose it), meaning nothing alone
    later = SLURM.of("LAUNCH_FAILED")
    assert (later.ended, later.failed, later.terminal_state) == ("yes", True, "")
    assert not SLURM.completed("LAUNCH_FAILED") and not SLURM.unended("LAUNCH_FAILED")
    note = SLURM.unknown("LAUNCH_FAILED", "job 7's notice")
    assert note.startswith("unknown state 'LAUNCH_FAILED' (job 7's notice): not a word of the slurm states table")
    assert "BOOT_FAIL, CANCELLED" in note and ", TO)" in note and "\n" not in note
    assert SLURM.unknown("CD", "x") == SLURM.unknown(None, "x") == SLURM.unknown("", "x") == ""
    # what a scope says when no record gave a state: no word, nothing noted, no failure
    assert SLURM.unknown("UNKNOWN", "x") == "" and not SLURM.failed("UNKNOWN") and SLURM.ended("UNKNOWN")
    assert not SLURM.read([Fact("state", "UNKNOWN")]).failed


@pytest.mark.parametrize(
    "conditions, failed",
    [
        ([{"type": "Finished", "status": "True", "reason": "Succeeded"}], False),
        ([{"type": "Finished", "status": "True", "reason": "Failed"}], True),
        ([{"type": "Finished", "status": "True"}], True),
        ([{"type": "Finished", "status": "False", "reason": "Failed"}], False),
        ([{"type": "Evicted", "status": "True", "reason": "Preempted"}], True),
        (
            [
                {"type": "Evicted", "status": "True", "reason": "PodsReadyTimeout"},
                {"type": "Finished", "status": "True", "reason": "Succeeded"},
            ],
            True,
        ),
        ([{"type": "Admitted", "status": "True"}], False),
        (["not a condition"], False),
    ],
)
def test_a_workload_ended_badly_as_the_kueue_table_says(conditions, failed):
    assert (ended_badly(conditions) is not None) is failed
    assert KUEUE.completed("Finished:Succeeded") and KUEUE.failed("Finished:Failed") and KUEUE.unended("Running")


HEADER = "field,value,ended,failed,terminal_state,sub_domain,blame,meaning,reference"


@pytest.mark.parametrize(
    "row, error",
    [
        ("state,X,yes,yes,,,,m,", "reference"),
        ("state,X,maybe,yes,,,,m,https://example.org", "ended"),
        ("state,X,,,,,,m,https://example.org", "a state row's ended"),  # a state says whether it is over
        ("exit,-29,maybe,,,,,m,https://example.org", "or both empty"),
        ("state,X,yes,yes,completed,gpu,,m,https://example.org", "does not belong"),
        ("state,X,yes,yes,,gpu,,m,https://example.org", "without its terminal_state"),
        ("state,X,yes,yes,broken,,,m,https://example.org", "broken"),
        ("exit,1,,,,,peer,m,https://example.org", "blame"),
        (",X,yes,yes,,,,m,https://example.org", "field and value"),
    ],
)
def test_a_table_row_is_checked_and_named_by_its_line(tmp_path, row, error):
    path = tmp_path / "t_states.csv"
    path.write_text(f"{HEADER}\n{row}\n")
    with pytest.raises(ValueError, match=error) as got:
        StateTable.load(path)
    assert "t_states.csv line 2" in str(got.value)


TABLE = f"""{HEADER}
state,F,yes,no,,,,finished (history),https://example.org/pbs#states
state,R,no,no,,,,running,https://example.org/pbs#states
substate,93,yes,yes,,,,failed,https://example.org/pbs#substates
substate,91,yes,yes,scheduler_action,cancelled,,deleted while running,https://example.org/pbs#substates
exit,0,,no,completed,none,,exited 0,https://example.org/pbs#exit
exit,-29,,,scheduler_action,time_limit,,walltime,https://example.org/pbs#exit
exit,-14,,,infrastructure_failure,node_unreachable,,a sister lost,https://example.org/pbs#exit
exit,*,,yes,,,,any other exit: the job failed,https://example.org/pbs#exit
message,node EOF *,,,infrastructure_failure,node_unreachable,named,the MoM lost a sister,https://example.org/pbs#log
reason,*and exceeded resource walltime,,,scheduler_action,time_limit,,walltime (comment),https://example.org/pbs#comment
"""


def test_a_record_reads_as_facts_the_first_that_says_each_thing_decides(tmp_path):
    (tmp_path / "t_states.csv").write_text(TABLE)
    table = StateTable.load(tmp_path / "t_states.csv")
    walltime = [Fact("exit", -29), Fact("reason", "Job run at ... on (n1:ncpus=8) and exceeded resource walltime")]
    got = table.read([*walltime, Fact("substate", 93), Fact("state", "F")], ["n1"])
    assert (got.ended, got.failed, got.terminal_state, got.sub_domain, got.by) == (
        "yes",
        True,
        "scheduler_action",
        "time_limit",
        "exit=-29",
    )
    assert got.blamed == ()  # the comment names n1, but its row blames nobody
    # a fact the record leaves empty says nothing; a pattern matches what no exact row holds
    facts = [Fact("exit", "-14"), Fact("reason", None), Fact("message", "node EOF 1 (n2)")]
    lost = table.read(facts, ["n1", "n2", "n"])
    assert (lost.sub_domain, lost.by, lost.blamed) == ("node_unreachable", "exit=-14", ("n2",))
    plain = table.read([Fact("exit", "1"), Fact("substate", "93"), Fact("state", "F")])
    assert (plain.failed, plain.terminal_state) == (True, "")
    running = table.read([Fact("substate", "42"), Fact("state", "R")])
    assert (running.ended, running.failed) == ("no", False)
    assert table.read([Fact("exit", "0"), Fact("state", "f")]).completed  # case aside
    # a state the table does not hold is over and failed unless another fact says otherwise
    unknown = table.read([Fact("state", "Z")])
    assert (unknown.ended, unknown.failed, unknown.terminal_state) == ("yes", True, "")
    exited_0 = table.read([Fact("exit", "0"), Fact("state", "Z")])
    assert (exited_0.failed, exited_0.terminal_state) == (False, "completed")  # the record decides
    assert not table.read([Fact("substate", "42"), Fact("state", "F")]).failed  # a value of another field: nothing
    assert table.name == "t" and table.words() == ["F", "R"] and table.unknown("Z", "x").startswith("unknown state")


def test_the_scope_of_an_attempt_reads_through_its_schedulers_table():
    # attempt.yaml's exit code, reason and state: a static bundle's Slurm words mean what they did
    static, slurm = get_scheduler("static").states, get_scheduler("slurm").states
    assert static.read([Fact("state", "TIMEOUT")]).sub_domain == "time_limit"
    assert static.read([Fact("state", "Completed")]).completed and not static.read([Fact("state", "FAILED")]).completed
    assert slurm.read([Fact("exit", "0:9"), Fact("reason", None), Fact("state", "CANCELLED by 0")]).sub_domain == (
        "cancelled"
    )


def test_the_shipped_schedulers():
    found = schedulers()
    assert {"slurm", "kueue", "static"} <= set(found)
    assert [found[s].webhook.path for s in ("slurm", "kueue")] == ["slurm", "kubernetes"]
    assert found["static"].discover is None and not found["static"].jobs
    with pytest.raises(ValueError, match="not a Slurm job id"):
        get_scheduler("slurm").job_id("../etc/passwd")
    assert get_scheduler("kueue").job_id("team-a/train-7") == "team-a/train-7"


# ----------------------------------------------------------------------- a new scheduler, one module

TOY = '''
"""A toy scheduler: its jobs are JSON files in a folder (<folder>/<job id>.json)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from workload_attribution.connectors import scheduler_records as sr
from workload_attribution.connectors.registry import SourceConfig
from workload_attribution.connectors.schedulers import (
    BundleRecord, Fact, JobRecord, Notice, Scheduler, StateTable, Webhook, register_scheduler,
)
from workload_attribution.contracts.errors import TransientSourceError
from workload_attribution.contracts.identity import AttemptId, EndedAttempt, Target
from workload_attribution.contracts.models import AttemptScope

STATES = StateTable.load(Path(__file__).parent / "data" / "toy_states.csv")


class ToySource(SourceConfig):
    folder: str


def _job(src: ToySource, job_id: str) -> dict:
    return json.loads((Path(src.folder) / f"{job_id}.json").read_text())


def scope(src: ToySource, target: Target) -> AttemptScope:
    job = _job(src, target.job_id or "")
    if target.trigger == "completion" and not STATES.ended(job["state"]):
        raise TransientSourceError(f"toy job {target.job_id} has not ended")
    return AttemptScope(cluster=target.cluster, scheduler="toy", job_id=target.job_id, attempt=job["attempt"],
                        nodes=job["nodes"], start=job["start"], end=job["end"], state=job["state"])


def discover(src: ToySource, cluster: str, since: datetime, until: datetime) -> list[EndedAttempt]:
    found = []
    for path in sorted(Path(src.folder).glob("*.json")):
        job = json.loads(path.read_text())
        end = datetime.fromisoformat(job["end"])
        if STATES.failed(job["state"]) and since <= end < until:
            attempt = AttemptId(cluster=cluster, scheduler="toy", job_id=path.stem, attempt=job["attempt"])
            found.append(EndedAttempt.recorded(attempt, end))
    return found


def read_bundle(files: dict[str, str], scope: AttemptScope) -> JobRecord:
    """A bundle's scheduler/toy.json: the job as the toy keeps it."""
    job = json.loads(files["toy.json"])
    when = {k: datetime.fromisoformat(job[k]) for k in ("start", "end")}
    attrs = {"job_id": scope.job_id, "state": job["state"], "nodes": job["nodes"], **when}
    reading = STATES.read([Fact("state", job["state"])], job["nodes"])
    record = sr.job_observation("toy", attrs, reading, "scheduler/toy.json", "toy")
    return JobRecord([record], {"state": job["state"], "nodes": job["nodes"], **when})


class ToyEnded(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cluster: str
    job: str
    state: str


def read_notice(ended: ToyEnded) -> Notice:
    attempt = AttemptId(cluster=ended.cluster, scheduler="toy", job_id=ended.job)
    return Notice(Target.completed(attempt), STATES.failed(ended.state), f"toy job {ended.state}")


register_scheduler(Scheduler(name="toy", scope=scope, states=STATES, config=ToySource, discover=discover,
                             bundle=BundleRecord(("toy.json",), read_bundle),
                             webhook=Webhook("toy", ToyEnded, read_notice, "a toy job", "A toy job ended.")))
'''

TOY_STATES = """field,value,ended,failed,terminal_state,sub_domain,blame,meaning,reference
state,DONE,yes,no,completed,none,,every task exited 0,https://example.org/toy#states
state,CRASHED,yes,yes,,,,a task failed: the evidence decides,https://example.org/toy#states
state,RUNNING,no,no,,,,running,https://example.org/toy#states
state,KILLED,yes,yes,scheduler_action,time_limit,,killed at its time limit,https://example.org/toy#states
"""

LAUNCH = """
import sys

import workload_attribution.connectors as connectors

connectors.__path__.append(sys.argv[1])  # the toy module, beside the shipped ones
if sys.argv[2] == "webhook":
    import json, os
    from fastapi.testclient import TestClient
    from workload_attribution.flows.config import load_config
    from workload_attribution.service.app import create_app
    from workload_attribution.service.auth import sign

    class Recorder:
        runs = []
        async def start(self, key, parameters, tags):
            self.runs.append(key)
            return "run-1", False
        async def reset(self):
            pass

    os.environ["ATTRIBUTION_WEBHOOK_SECRET"] = "s3cret"
    app, out = create_app(load_config(sys.argv[3]), Recorder()), {}
    with TestClient(app) as client:
        for state in ("CRASHED", "DONE"):
            body = json.dumps({"cluster": "lab", "job": "42", "state": state}).encode()
            headers = {**sign("s3cret", body), "Content-Type": "application/json"}
            r = client.post("/v1/webhooks/toy", content=body, headers=headers)
            out[state] = [r.status_code, r.json()]
    print(json.dumps({**out, "runs": Recorder.runs, "paths": list(app.openapi()["paths"])}))
else:
    from workload_attribution.cli import main

    sys.exit(main(sys.argv[2:]))
"""

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


@pytest.fixture
def toy(tmp_path: Path) -> tuple[Path, Path]:
    """(the launcher, the configuration): the toy module and its table in a folder of their own; a
    cluster `lab` scheduled by it, with two jobs (42 crashed, its host t2 logged an XID 79 just
    before; 43 done) and per-host syslog files."""
    module = tmp_path / "toy"
    (module / "data").mkdir(parents=True)
    (module / "toy.py").write_text(TOY)
    (module / "data" / "toy_states.csv").write_text(TOY_STATES)
    jobs, logs = tmp_path / "jobs", tmp_path / "logs"
    jobs.mkdir()
    logs.mkdir()
    window = {"start": "2026-11-20T10:00:00+00:00", "end": "2026-11-20T12:00:00+00:00"}
    (jobs / "42.json").write_text(json.dumps({"attempt": 1, "nodes": ["t1", "t2"], "state": "CRASHED", **window}))
    (jobs / "43.json").write_text(json.dumps({"attempt": 0, "nodes": ["t3"], "state": "DONE", **window}))
    (logs / "t2.log").write_text(f"2026-11-20T11:57:05.000000+00:00 t2 kernel: {XID}\n")
    config = tmp_path / "attribution.yaml"
    config.write_text(
        f"warehouse: ''\nservice: {{outbox_dir: '{tmp_path / 'outbox'}'}}\n"
        f"clusters:\n  lab:\n    scheduler: toy\n    toy: {{folder: '{jobs}'}}\n"
        f"    sources:\n      syslog: {{connector: files, path: '{logs}/{{host}}.log'}}\n"
    )
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCH)
    return launcher, config


def launch(toy: tuple[Path, Path], *args: str) -> subprocess.CompletedProcess[str]:
    launcher, config = toy
    argv = [sys.executable, str(launcher), str(launcher.parent / "toy"), *args]
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_a_new_scheduler_is_one_module_and_its_table(toy, tmp_path):
    _, config = toy
    r = launch(toy, "diagnose", "--config", str(config), "--cluster", "lab", "--job", "42", "--json", "--inline")
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    assert {k: d["attempt"][k] for k in ("scheduler", "job_id", "attempt", "nodes", "state")} == {
        "scheduler": "toy",
        "job_id": "42",
        "attempt": 1,
        "nodes": ["t1", "t2"],
        "state": "CRASHED",
    }
    assert (d["terminal_state"], d["sub_domain"], d["affected_nodes"]) == ("hardware_failure", "gpu", ["t2"])

    warehouse = tmp_path / "w.duckdb"
    window = ["--since", "2026-11-20T00:00:00Z", "--until", "2026-11-21T00:00:00Z"]
    r = launch(toy, "backfill", "--config", str(config), "--inline", *window, "--warehouse", str(warehouse), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(r.stdout)
    assert (summary["found"], summary["diagnosed"], summary["failed"]) == (1, 1, 0), summary
    assert summary["by_terminal_state"] == {"hardware_failure": 1}

    r = launch(toy, "webhook", str(config))
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    assert "/v1/webhooks/toy" in got["paths"]
    assert got["CRASHED"] == [202, {**got["CRASHED"][1], "status": "accepted", "idempotency_key": "lab:toy:42:0"}]
    assert got["DONE"][0] == 200 and got["DONE"][1]["status"] == "recorded"
    assert got["runs"] == ["lab:toy:42:0"]

    # a bundle of its attempt: its record (scheduler/toy.json) read by its module wins over
    # attempt.yaml, and what its table says the state means is the verdict's
    bundle = tmp_path / "bundle"
    (bundle / "scheduler").mkdir(parents=True)
    window = {"start": "2026-11-20T10:00:00+00:00", "end": "2026-11-20T12:00:00+00:00"}
    (bundle / "scheduler" / "toy.json").write_text(json.dumps({"state": "KILLED", "nodes": ["t1", "t2"], **window}))
    (bundle / "attempt.yaml").write_text(
        "cluster: lab\nscheduler: toy\njob_id: '44'\nattempt: 0\nnodes: [t1, t2]\n"
        f"start: '{window['start']}'\nend: '{window['end']}'\nstate: CRASHED\n"
    )
    r = launch(toy, "diagnose", str(bundle), "--json", "--no-warehouse")
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    assert (d["terminal_state"], d["sub_domain"], d["attempt"]["state"]) == ("scheduler_action", "time_limit", "KILLED")
    assert {c["source"]: c["status"] for c in d["coverage"]}["scheduler_record"] == "ok"
    assert any("the record wins" in n for n in d["notes"])
