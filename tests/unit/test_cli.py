"""The command line: exit codes, one-line reasons, JSON and --out for several attempts."""

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import EXAMPLES, ROOT, WORKED


def run(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "workload_attribution", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_help_everywhere():
    for args in ([], ["diagnose"], ["rules"]):
        r = run(*args, "--help")
        assert r.returncode == 0 and "usage:" in r.stdout


def test_bad_bundle_is_exit_2_with_one_line_and_no_traceback(tmp_path):
    (tmp_path / "attempt.yaml").write_text("cluster: c\nscheduler: slurm\n")
    r = run("diagnose", str(tmp_path), "--inline", "--no-warehouse")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "field 'job_id'" in r.stderr
    r = run("diagnose", str(tmp_path / "nope"), "--inline", "--no-warehouse")
    assert r.returncode == 2 and "no such bundle directory" in r.stderr


def test_json_output_is_the_diagnosis_contract(tmp_path):
    r = run("diagnose", str(WORKED), "--inline", "--json", "--warehouse", str(tmp_path / "w.duckdb"))
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    for key in (
        "diagnosis_id",
        "attempt",
        "terminal_state",
        "sub_domain",
        "confidence",
        "root_cause",
        "affected_nodes",
        "affected_components",
        "candidates",
        "symptoms",
        "recommended_action",
        "coverage",
        "rules",
        "evidence",
    ):
        assert key in d
    assert (tmp_path / "w.duckdb").exists()


def test_several_bundles_in_one_process_with_out(tmp_path):
    bundles = [str(WORKED), str(EXAMPLES / "slurm_time_limit-1-0"), str(EXAMPLES / "completed_clean-1-0")]
    r = run("diagnose", *bundles, "--inline", "--no-warehouse", "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["completed_clean-1-0.json", "slurm_time_limit-1-0.json", "xid149-worked.json"]
    assert "[3/3]" in r.stderr
    assert json.loads((tmp_path / "out" / "slurm_time_limit-1-0.json").read_text())["sub_domain"] == "time_limit"


def test_rules_commands(tmp_path):
    assert run("rules", "validate").returncode == 0
    listed = json.loads(run("rules", "list", "--json").stdout)
    assert {"id", "version", "phase", "description", "tests"} <= set(listed[0])
    # one rule's cases through the command (every rule's cases: test_rules.py, in this process)
    r = run("rules", "test", "--rule", "xid-driver-report")
    assert r.returncode == 0 and " 0 failed" in r.stdout


def test_only_the_named_commands_parser_is_built():
    from workload_attribution.cli import _named_command

    assert _named_command(["diagnose", "b"]) == "diagnose"
    assert _named_command(["-q", "--debug", "eval", "x"]) == "eval"
    # --config's value (or an abbreviation's) is not the command, whatever it is called
    assert _named_command(["--config", "diagnose", "rules", "list"]) == "rules"
    assert _named_command(["--conf", "rules", "diagnose"]) == "diagnose"
    assert _named_command(["--config=a.yaml", "query", "x"]) == "query"
    for unsure in ([], ["--version"], ["-h"], ["bogus"], ["--", "diagnose"], ["--config", "a.yaml"]):
        assert _named_command(unsure) is None  # every command's parser, as argparse then needs


def test_a_staging_database_made_ahead_is_the_next_attempts():
    from workload_attribution.connectors.bundle import load_scope
    from workload_attribution.rules import engine
    from workload_attribution.staging import ahead, database
    from workload_attribution.staging.attempt import create_staging

    def catalog(path):
        with database.connected(path) as con:
            return con.execute(
                "SELECT 'table', table_name, column_name, data_type FROM information_schema.columns UNION ALL "
                "SELECT 'macro', function_name, parameters::VARCHAR, macro_definition FROM duckdb_functions() "
                "WHERE function_type LIKE '%macro' AND NOT internal UNION ALL "
                "SELECT 'row', cluster, job_id, nodes::VARCHAR FROM attempt UNION ALL "
                "SELECT 'setting', name, value, NULL FROM duckdb_settings() "
                "WHERE name IN ('TimeZone', 'memory_limit', 'threads') ORDER BY ALL"
            ).fetchall()

    scope = load_scope(WORKED)
    usual = create_staging(scope)
    engine._CSV_TABLES.clear()
    ahead.stage_ahead(engine.read_data_ahead)
    made_ahead = create_staging(scope)
    try:
        assert made_ahead != usual and not ahead._ahead
        assert catalog(made_ahead) == catalog(usual)
        # the shipped pack's data read into the cache, its tables gone with the connection that read them
        assert {Path(p).name for p, _ in engine._CSV_TABLES} == {
            "xid_catalog.csv",
            "nvlink5_decode.csv",
            "evidence_sources.csv",
        }
        with database.connected(made_ahead) as con:
            assert not con.execute("SELECT * FROM duckdb_tables() WHERE temporary").fetchall()
    finally:
        database.release_staging(usual)
        database.release_staging(made_ahead)
