"""Every word the schedulers' tools print (connectors/data/<scheduler>_states.csv): each table holds
them with the page that documents them, each word reads end to end (a bundle diagnosed, its verdict
asserted), and a word no table holds is diagnosed, not refused: a warning on stderr and a note in
the diagnosis naming the word and the table's words, the record and the evidence deciding; the
backfill's discovery and the webhooks read such a word the same way (warned, diagnosed)."""

from __future__ import annotations

import csv
import json
import logging
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.conftest import ROOT, WORKED
from tests.fake_commands import fake_commands
from tests.helpers import diagnose
from workload_attribution.connectors import pbs, slurm
from workload_attribution.connectors.schedulers import DATA, UNKNOWN_STATE, get_scheduler, schedulers
from workload_attribution.flows.backfill import discover_bundles

TABLES = sorted(DATA.glob("*_states.csv"))
REAL = ROOT / "tests" / "real"
TRACEBACK = (
    "2026-01-01T00:59:00Z Traceback (most recent call last):\n"
    '2026-01-01T00:59:00Z   File "/opt/train/train.py", line 12, in <module>\n'
    "2026-01-01T00:59:00Z     main()\n"
    "2026-01-01T00:59:01Z ValueError: could not convert string to float: 'lr'\n"
)
WALLTIME = "2026-01-01T00:59:58Z =>> PBS: job killed: walltime 3610 exceeded limit 3600\n"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("path", TABLES, ids=[p.stem for p in TABLES])
def test_every_row_names_its_page_and_no_word_is_there_twice(path):
    rows = _rows(path)
    assert rows and all(r["reference"].startswith("https://") for r in rows), path.name
    seen: dict[tuple[str, str], int] = {}
    for line, r in enumerate(rows, 2):  # a word twice in a field: one of its rows is never read
        key = (r["field"], r["value"].casefold())
        assert key not in seen, f"{path.name} line {line}: {r['field']} {r['value']!r} already on line {seen[key]}"
        seen[key] = line
    name = path.stem.removesuffix("_states")
    assert get_scheduler(name).states.name == name and get_scheduler(name).states.words()


def test_each_scheduler_holds_the_words_its_tools_print():
    words = {name: {w.casefold() for w in s.states.words()} for name, s in schedulers().items()}
    expected = {
        "slurm": "BF CA CD CF CG DL F NF OOM PD PR R RD RF RH RQ RS RV SI SE SO ST S TO COMPLETED TIMEOUT",
        "pbs": "B C E F H M Q R S T U W X",  # PBS Pro's qstat letters, and Torque's C (completed) and E (exiting)
        "flux": "NEW DEPEND PRIORITY SCHED RUN CLEANUP INACTIVE N D P S R C I PENDING PD RUNNING RU "
        "COMPLETED CD FAILED F CANCELED CA TIMEOUT TO",  # states, flux jobs' STATUS and its abbreviations
        "lsf": "PEND PROV PSUSP RUN SSUSP USUSP DONE EXIT UNKWN WAIT ZOMBI PDONE PERR POST_DONE POST_ERR",
        "kueue": "Pending QuotaReserved Admitted PodsReady Finished Evicted Preempted Requeued DeactivationTarget "
        "Running Complete Failed Suspended FailureTarget",
    }
    for name, want in expected.items():
        assert {w.casefold() for w in want.split()} <= words[name], name


def _bundle(root: Path, scheduler: str, job_id: str, state: str, exit_code: str | None, log: str) -> Path:
    root.mkdir()
    (root / "attempt.yaml").write_text(
        f"cluster: c1\nscheduler: {scheduler}\njob_id: '{job_id}'\nattempt: 0\nnodes: [n1, n2]\n"
        "start: 2026-01-01T00:00:00Z\nend: 2026-01-01T01:00:00Z\n"
        f"state: '{state}'\n" + (f"exit_code: '{exit_code}'\n" if exit_code is not None else "")
    )
    if log:
        (root / "logs" / "app").mkdir(parents=True)
        (root / "logs" / "app" / "n1.log").write_text(log)
    return root


JOBS = {"slurm": "7", "pbs": "7.pbs01", "flux": "f2Ab", "lsf": "77", "kueue": "team-a/train-7"}
TIME_LIMIT, CANCELLED = ("scheduler_action", "time_limit"), ("scheduler_action", "cancelled")
COMPLETED, USER_CODE = ("completed", "none"), ("application_failure", "user_code")
NOT_COMPLETED = ("unknown", "insufficient_evidence")  # the word alone does not say how: no evidence, no verdict


@pytest.mark.parametrize(
    "scheduler, state, exit_code, log, verdict",
    [
        # Slurm's compact codes (squeue %t) read as their names
        ("slurm", "TO", None, "", TIME_LIMIT),
        ("slurm", "CD", "0:0", "", COMPLETED),
        ("slurm", "NF", None, "", ("infrastructure_failure", "node_unreachable")),
        ("slurm", "OOM", None, "", ("application_failure", "host_oom")),
        ("slurm", "CA", None, "", CANCELLED),
        ("slurm", "F", "1:0", TRACEBACK, USER_CODE),
        # Torque's C: completed from the queue's view; the exit status says whether the job failed
        ("pbs", "C", "0", "", COMPLETED),
        ("pbs", "C", "271", WALLTIME, TIME_LIMIT),
        ("pbs", "C", "1", TRACEBACK, USER_CODE),
        ("pbs", "C", "1", "", NOT_COMPLETED),
        # Flux's results as flux jobs prints a job's status, and their abbreviations
        ("flux", "COMPLETED", "0", "", COMPLETED),
        ("flux", "CD", "0", "", COMPLETED),
        ("flux", "FAILED", "1", TRACEBACK, USER_CODE),
        ("flux", "F", "1", "", NOT_COMPLETED),
        ("flux", "TIMEOUT", "142", "", TIME_LIMIT),
        ("flux", "TO", None, "", TIME_LIMIT),
        ("flux", "CANCELED", "-128", "", CANCELLED),
        ("flux", "CA", None, "", CANCELLED),
        # LSF's bjobs states
        ("lsf", "DONE", "0", "", COMPLETED),
        ("lsf", "EXIT", "1", TRACEBACK, USER_CODE),
        ("lsf", "ZOMBI", None, "", NOT_COMPLETED),
        # Kueue's conditions
        ("kueue", "Preempted", None, "", ("scheduler_action", "preemption")),
    ],
)
def test_each_word_reads_end_to_end(tmp_path, scheduler, state, exit_code, log, verdict):
    d = diagnose(_bundle(tmp_path / "b", scheduler, JOBS[scheduler], state, exit_code, log))
    assert (d.terminal_state, d.sub_domain) == verdict
    assert not [n for n in d.notes if n.startswith(UNKNOWN_STATE)]


@pytest.mark.parametrize(
    "bundle, state",
    [  # the words three real bundles were refused for: what flux jobs shows as the job's status
        ("flux-python-traceback-exit1-scipion678-1", "FAILED"),
        ("flux-timeout-exception-sched805-1", "TIMEOUT"),
        ("flux-cancel-pending-ctrlc-joblist-1", "CANCELED"),
    ],
)
def test_real_flux_bundles_with_the_status_flux_jobs_prints(tmp_path, bundle, state):
    copy = shutil.copytree(REAL / bundle, tmp_path / bundle)
    yaml = (copy / "attempt.yaml").read_text()
    assert "state: 'INACTIVE'" in yaml
    (copy / "attempt.yaml").write_text(yaml.replace("state: 'INACTIVE'", f"state: '{state}'"))
    expected = json.loads((copy / "expected.json").read_text())
    d = diagnose(copy)
    assert (d.terminal_state, d.sub_domain) == (expected["terminal_state"], expected["sub_domain"])
    assert not [n for n in d.notes if n.startswith(UNKNOWN_STATE)]
    # the record (INACTIVE, its result the same word) agrees with attempt.yaml: no disagreement noted
    assert not [n for n in d.notes if n.startswith("state:")], d.notes


def _cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workload_attribution", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_a_typo_is_a_warning_and_a_note_and_the_evidence_decides(tmp_path):
    bundle = shutil.copytree(WORKED, tmp_path / "typo")
    yaml = (bundle / "attempt.yaml").read_text()
    (bundle / "attempt.yaml").write_text(yaml.replace("state: FAILED", "state: FAILD"))
    r = _cli("diagnose", bundle, "--json", "--no-warehouse", "-q")
    assert r.returncode == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if "warning:" in line]
    words = ", ".join(get_scheduler("slurm").states.words())
    assert len(warnings) == 1 and warnings[0].startswith("attribution: warning: unknown state 'FAILD' (attempt.yaml)")
    assert f"not a word of the slurm states table ({words})" in warnings[0]
    d = json.loads(r.stdout)
    assert [n for n in d["notes"] if n.startswith(UNKNOWN_STATE)] == [
        warnings[0].removeprefix("attribution: warning: ")
    ]
    expected = json.loads((WORKED / "expected.json").read_text())  # the evidence's verdict, as with FAILED
    assert (d["terminal_state"], d["sub_domain"]) == (expected["terminal_state"], expected["sub_domain"])


@pytest.mark.parametrize("exit_code, log, verdict", [(None, TRACEBACK, USER_CODE), ("0:0", "", NOT_COMPLETED)])
def test_an_unknown_word_never_reads_as_completed(tmp_path, exit_code, log, verdict):
    d = diagnose(_bundle(tmp_path / "b", "slurm", "7", "FAILD", exit_code, log))
    assert (d.terminal_state, d.sub_domain) == verdict  # the evidence decides; exit 0 alone is no success
    assert [n[:48] for n in d.notes if n.startswith(UNKNOWN_STATE)] == [
        "unknown state 'FAILD' (attempt.yaml): not a word"
    ]


def test_the_backfill_finds_a_bundle_whose_word_no_table_holds(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="workload_attribution.schedulers")
    _bundle(tmp_path / "typo", "slurm", "7", "FAILD", None, "")
    _bundle(tmp_path / "done", "slurm", "8", "CD", "0:0", "")
    _bundle(tmp_path / "torque", "pbs", "9.pbs01", "C", "1", "")
    found, unreadable = discover_bundles(
        tmp_path, datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 1, 2, tzinfo=timezone.utc)
    )
    assert unreadable == []  # once refused as unreadable: now diagnosed
    assert sorted(Path(a.target.bundle).name for a in found) == ["torque", "typo"]  # CD completed: not looked at
    assert caplog.text.count("unknown state") == 1 and "unknown state 'FAILD' (" in caplog.text


def test_discovery_and_webhooks_warn_of_a_word_and_diagnose_it(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="workload_attribution.schedulers")
    notice = slurm.read_notice(slurm.SlurmJobEvent(cluster="c1", job_id="7", state="LAUNCH_FAILED"))
    assert notice.failed  # not completed: diagnosed
    assert "unknown state 'LAUNCH_FAILED' (job 7's completion notice)" in caplog.text
    # qstat's record with a job_state no table holds: its Exit_status decides, a warning names the word
    doc = json.loads((ROOT / "tests" / "recorded" / "pbs" / "qstat-x-f-F-json_aurora_walltime-29.json").read_text())
    for job in doc["Jobs"].values():
        if job["job_state"] == "F":
            job["job_state"] = "Z"
    (tmp_path / "qstat.json").write_text(json.dumps(doc))
    bin_ = fake_commands(tmp_path)
    bin_.add("qstat", ["-x", "-f", "-F", "json"], tmp_path / "qstat.json")
    src = pbs.PbsSource(qstat=str(bin_.path / "qstat"), tracejob=str(bin_.path / "tracejob"))
    utc = timezone.utc
    found = pbs.discover(src, "aurora", datetime(2025, 7, 23, tzinfo=utc), datetime(2025, 7, 25, tzinfo=utc))
    # the two walltime kills (Exit_status -29) as before; not the job that exited 0
    assert [a.id.job_id.split(".")[0] for a in found] == ["6617175", "6617182"]
    assert caplog.text.count("unknown state 'Z' (job ") == 3
