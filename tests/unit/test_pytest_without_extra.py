"""`python -m pytest` after a plain install (no test extra, so no pytest-xdist) says what to install
instead of stopping at addopts' "-n" (tests/xdist_needed.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

# an interpreter on which pytest-xdist cannot be found, as after `pip install -e .`
NO_XDIST = """
import importlib.abc, sys
class NoXdist(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "xdist" or name.startswith("xdist."):
            raise ModuleNotFoundError("No module named 'xdist'", name=name)
        return None
sys.meta_path.insert(0, NoXdist())
"""


def run_pytest(tmp_path: Path, hide_xdist: bool) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if hide_xdist:  # nor does pytest find its entry point: plugins are not loaded by entry point
        (tmp_path / "sitecustomize.py").write_text(NO_XDIST)
        env |= {"PYTHONPATH": str(tmp_path), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    args = [sys.executable, "-m", "pytest", "--collect-only", "-q", "tests/unit/test_layers.py"]
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_without_xdist_pytest_names_the_extra(tmp_path):
    done = run_pytest(tmp_path, hide_xdist=True)
    assert done.returncode == 4, done.stderr  # pytest's usage error, not a crash
    assert "pip install -e '.[test]'" in done.stderr
    assert "unrecognized arguments" not in done.stderr


def test_with_xdist_the_suite_collects(tmp_path):
    done = run_pytest(tmp_path, hide_xdist=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "test_layers.py" in done.stdout
