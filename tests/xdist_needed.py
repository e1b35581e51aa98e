"""A pytest plugin (pyproject's addopts loads it): the suite runs on pytest-xdist (`-n 2` in addopts),
and a plain install (`pip install -e .`, without the test extra) has none; then pytest would stop at
"unrecognized arguments: -n". Without xdist this plugin accepts -n and says what to install."""

from __future__ import annotations

import importlib

import pytest

INSTALL = "pip install -e '.[test]'"
MISSING = f"the test suite needs the test extra (pytest-xdist, hypothesis, ...): {INSTALL}"


def have_xdist() -> bool:
    try:
        importlib.import_module("xdist")
    except ImportError:
        return False
    return True


def pytest_addoption(parser: pytest.Parser) -> None:
    if not have_xdist():  # xdist itself declares -n when it is there
        group = parser.getgroup("xdist", "distributed testing (needs pytest-xdist)")
        # xdist declares -n through the same private call: short lowercase options are pytest's own
        group._addoption("-n", "--numprocesses", dest="numprocesses", help=f"needs pytest-xdist: {INSTALL}")


def pytest_configure(config: pytest.Config) -> None:
    if not have_xdist():
        raise pytest.UsageError(MISSING)
