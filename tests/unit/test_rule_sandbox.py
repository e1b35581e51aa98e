"""A rules pack is code; what it can do is bounded. Each hostile rule below, added to a copy of the
shipped pack, fails inside the sandbox: the diagnosis completes (exit 0), names the rule in
rules.failed and in a note, writes no file, and every diagnosis already in the warehouse stays."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from tests.conftest import ROOT, WORKED

RULE = """id: {id}
version: 1
phase: extract
description: a hostile rule that tries to reach outside the attempt
output: events
sources: [syslog]
prefilter: ["NVRM"]
{body}
tests:
  - name: t
    lines: [{{source: syslog, node: n1, text: "NVRM: x"}}]
"""


def hostile_cases(tmp: Path) -> dict[str, tuple[str, str]]:
    """rule id -> (rule body, file that must never appear)"""
    leak, exported = tmp / "leak.csv", tmp / "exported"
    return {
        "reads-passwd": ("sql: \"SELECT obs_id, content AS symptom FROM log_lines, read_text('/etc/passwd')\"", ""),
        "copies-out": (
            f"sql: \"SELECT 1 AS obs_id, 'x' AS symptom; COPY (SELECT * FROM log_lines) TO '{leak}'\"",
            str(leak),
        ),
        "copies-in-select": (
            f"sql: \"SELECT obs_id, 'x' AS symptom FROM log_lines WHERE (SELECT count(*) FROM "
            f"read_csv('{ROOT / 'pyproject.toml'}')) > 0\"",
            "",
        ),
        "attaches-the-warehouse": (
            "sql: \"SELECT 1 AS obs_id, 'x' AS symptom; ATTACH '{wh}' AS w; DELETE FROM w.diagnoses\"",
            "",
        ),
        "exports-the-database": (f"sql: \"EXPORT DATABASE '{exported}'\"", str(exported)),
        "installs-an-extension": ('sql: "INSTALL httpfs"', ""),
        "loads-an-extension": ("sql: \"SELECT obs_id, 'x' AS symptom FROM log_lines; LOAD httpfs\"", ""),
        "imports-os": ("python: os:system", ""),
    }


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    """A warehouse with one diagnosis in it (which no rule may remove)."""
    from tests.helpers import diagnose

    wh = tmp_path_factory.mktemp("wh") / "w.duckdb"
    diagnose(ROOT / "tests" / "regression" / "xid48_dbe-1-0", warehouse=wh)
    return wh


@pytest.mark.parametrize("rule_id", list(hostile_cases(Path("/x"))))
def test_hostile_rule_fails_inside_the_sandbox(tmp_path, warehouse, rule_id):
    pack = tmp_path / "pack"
    shutil.copytree(ROOT / "rules", pack, ignore=shutil.ignore_patterns("__pycache__", "*.py", "*.sql"))
    shutil.copytree(ROOT / "rules" / "python", pack / "python", dirs_exist_ok=True)
    body, must_not_exist = hostile_cases(tmp_path)[rule_id]
    (pack / "extract" / f"{rule_id}.yaml").write_text(
        RULE.format(id=rule_id, body=body.replace("{wh}", str(warehouse)))
    )
    before = duckdb.connect(str(warehouse), read_only=True).execute("SELECT count(*) FROM diagnoses").fetchone()[0]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "workload_attribution",
            "diagnose",
            str(WORKED),
            "--json",
            "--rules-dir",
            str(pack),
            "--warehouse",
            str(tmp_path / "own.duckdb"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    failed = {f["rule"]: f["error"] for f in d["rules"]["failed"]}
    assert rule_id in failed, d["rules"]
    assert any(rule_id in n for n in d["notes"])
    assert (d["terminal_state"], d["sub_domain"], d["affected_nodes"]) == ("hardware_failure", "nvlink", ["gb-r12-n04"])
    assert "root:" not in r.stdout and "/bin/bash" not in r.stdout  # nothing of /etc/passwd reached the diagnosis
    if must_not_exist:
        assert not Path(must_not_exist).exists()
    con = duckdb.connect(str(warehouse), read_only=True)
    assert con.execute("SELECT count(*) FROM diagnoses").fetchone()[0] == before == 1
    con.close()


def test_validate_refuses_what_the_sandbox_would_stop(tmp_path):
    from workload_attribution.rules.validation import validate

    for rule_id, (body, _) in hostile_cases(tmp_path).items():
        pack = tmp_path / rule_id
        shutil.copytree(ROOT / "rules", pack, ignore=shutil.ignore_patterns("__pycache__"))
        (pack / "extract" / f"{rule_id}.yaml").write_text(RULE.format(id=rule_id, body=body.replace("{wh}", "w")))
        _, errors = validate(pack)
        if rule_id in ("reads-passwd", "copies-in-select"):
            continue  # a single SELECT that compiles; it is stopped when it runs (above)
        assert errors and errors[0].rule == rule_id, (rule_id, errors)


def test_query_cannot_reach_the_machine(tmp_path, warehouse, capsys):
    from workload_attribution.cli import main

    for sql in (
        "SELECT * FROM read_csv('/etc/passwd')",
        f"COPY diagnoses TO '{tmp_path / 'x.csv'}'",
        f"EXPORT DATABASE '{tmp_path / 'exp'}'",
        "ATTACH '/tmp/other.duckdb' AS o",
        "SELECT 1; DELETE FROM diagnoses",
        "INSTALL httpfs",
    ):
        assert main(["query", sql, "--warehouse", str(warehouse)]) == 2, sql
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
    assert not (tmp_path / "x.csv").exists() and not (tmp_path / "exp").exists()
    assert main(["query", "nope_view", "--warehouse", str(warehouse)]) == 2
    err = capsys.readouterr().err
    assert "no view 'nope_view'" in err and "failures_per_host" in err
