"""An extract rule reading only log lines runs only where a line holds one of its own pre-filter
literals (rules/held.py): the rest would find nothing, and each costs its statement's binding."""

from __future__ import annotations

import duckdb
import pytest

from workload_attribution.rules.engine import Settings, prepare, run_phases
from workload_attribution.rules.held import Held
from workload_attribution.rules.pack import Rule, default_pack
from workload_attribution.staging import prefilter
from workload_attribution.staging.lines import Line, Stream, stage_streams
from workload_attribution.staging.normalize import normalize

pytestmark = pytest.mark.skipif(
    prefilter._hyperscan() is None, reason="the hyperscan wheel is not installed here (every rule runs)"
)

XID = "Nov 20 10:05:01 n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."


def _stage(con: duckdb.DuckDBPyConnection, source: str, *texts: str) -> None:
    stage_streams(
        con, [Stream(source, "test", "n1", f"logs/{source}/n1.log", [Line(t, i) for i, t in enumerate(texts, 1)])]
    )
    normalize(con, "Europe/Berlin", con.execute("SELECT start_time FROM attempt").fetchone()[0], {})


def _ran(con: duckdb.DuckDBPyConnection) -> set[str]:
    pack = default_pack()
    prepare(con, pack, Settings())
    return set(run_phases(con, pack, Settings(), prepared=True).timings_ms)


def test_only_the_rules_whose_literals_a_line_holds_run(staging: duckdb.DuckDBPyConnection) -> None:
    _stage(staging, "syslog", XID, "Nov 20 10:05:02 n1 systemd[1]: Started Session 4 of user root.")
    ran = _ran(staging)
    assert {"xid-driver-report", "gpu-driver-lost", "pcie-aer-errors"} <= ran  # "NVRM: Xid", "fallen off the bus"
    assert not {"hung-task", "storage-errors", "python-exception", "nccl-communication-errors"} & ran
    assert {"catalog-messages", "scheduler-records", "metric-evidence"} <= ran  # they read more than lines


def test_without_hyperscan_every_rule_runs(staging: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(prefilter.ENV, "duckdb")
    _stage(staging, "syslog", XID)
    assert {"xid-driver-report", "pcie-aer-errors", "hung-task", "python-exception"} <= _ran(staging)


def _reader(literal: str) -> Rule:
    return Rule.model_validate(
        {
            "id": "reads-a-head",
            "version": 1,
            "phase": "extract",
            "description": "a literal the grammar's body holds, not the line as written",
            "output": "events",
            "sources": ["syslog"],
            "prefilter": [literal],
            "sql": f"SELECT obs_id, 'x' AS symptom FROM log_lines WHERE contains(body, '{literal}')",
            "tests": [{"name": "t"}],
        }
    )


def test_a_literal_in_the_body_alone_runs_the_rule(staging: duckdb.DuckDBPyConnection) -> None:
    """RFC 5424's header is reshaped in the body ("n1 kernel: ..."): a literal across it is the
    body's alone, and runs the rule as one in the line as written does."""
    _stage(staging, "syslog", "<4>1 2026-11-20T10:05:01Z n1 kernel - - - NVRM: something odd")
    assert "kernel: NVRM" in staging.execute("SELECT body FROM log_lines").fetchone()[0]
    pack = default_pack().model_copy(update={"rules": [_reader("kernel: NVRM"), _reader("never said")]})
    held = Held(pack)
    assert not held.reads_nothing(staging, pack.rules[0])
    assert held.reads_nothing(staging, pack.rules[1])
    assert held.found == {"kernel: NVRM"}
