"""The wheel, installed in a fresh virtualenv outside the checkout and started from `/`, does what
the checkout does: the worked example, the rules' tests, an eval; it carries every file the code
reads (a missing one would surface here as a FileNotFoundError)."""

from __future__ import annotations

import json
import subprocess
import tomllib
import zipfile

import pytest

from tests.conftest import EXAMPLES, ROOT, WORKED


@pytest.fixture(scope="module")
def venv(wheel_bin):
    return wheel_bin


def run(venv, *args, **kw):
    return subprocess.run(
        [str(venv / "attribution"), *map(str, args)], capture_output=True, text=True, cwd="/", timeout=600, **kw
    )


def test_the_package_comes_from_the_wheel(venv):
    r = subprocess.run(
        [str(venv / "python"), "-c", "import workload_attribution as w; print(w.__file__)"],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert r.returncode == 0 and str(venv.parent) in r.stdout and str(ROOT) not in r.stdout, r


def test_the_wheel_holds_every_data_file_of_the_packages(venv):
    wheel = next((venv.parent.parent / "dist").glob("*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    installed_as = {folder: package.replace(".", "/") for package, folder in mapping.items()}
    tracked = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT).stdout.split()
    missing = []
    for f in tracked:
        top, _, rest = f.partition("/")
        if top in installed_as and f"{installed_as[top]}/{rest}" not in names:
            missing.append(f)
    assert missing == []


def test_worked_example_rules_and_eval_from_the_wheel(venv, tmp_path):
    r = run(venv, "diagnose", WORKED, "--json", "--warehouse", tmp_path / "w.duckdb")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["terminal_state"], d["sub_domain"], d["affected_nodes"]) == ("hardware_failure", "nvlink", ["gb-r12-n04"])
    # validate reads every rule file and compiles its SQL: the wheel carries the whole pack; one
    # rule's cases run through `rules test` (every rule's cases: tests/unit/test_rules.py)
    r = run(venv, "rules", "validate")
    assert r.returncode == 0, r.stdout + r.stderr
    r = run(venv, "rules", "test", "--rule", "xid-driver-report")
    assert r.returncode == 0 and " 0 failed" in r.stdout, r.stdout[-2000:]
    r = run(venv, "eval", EXAMPLES, "-q")
    assert r.returncode == 0, r.stdout[-2000:]
    assert "100.0%" in r.stdout
    r = run(venv, "query", "failures_per_host", "--warehouse", tmp_path / "w.duckdb", "--format", "json")
    assert r.returncode == 0, r.stderr
    r = run(venv, "--version")
    assert r.stdout.startswith("workload-attribution 0.") and "rules 20" in r.stdout


def test_config_from_attribution_config_and_from_flag(venv, tmp_path):
    cfg = tmp_path / "site.yaml"
    cfg.write_text(f"warehouse: {tmp_path / 'site.duckdb'}\n")
    r = run(venv, "diagnose", WORKED, "-q", env={"ATTRIBUTION_CONFIG": str(cfg), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and (tmp_path / "site.duckdb").exists(), r.stderr
    r = run(venv, "config", "check", "--config", cfg)
    assert r.returncode == 0 and str(tmp_path / "site.duckdb") in r.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("servce: {}\n")
    r = run(venv, "config", "check", "--config", bad)
    assert r.returncode == 2 and "servce: unknown key" in r.stdout
