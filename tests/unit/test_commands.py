"""connectors/commands.py: every scheduler tool's failure becomes the error its coverage record needs."""

from __future__ import annotations

import re
import sys

import pytest

from workload_attribution.connectors.commands import run_tool
from workload_attribution.contracts.errors import SourceError, TransientSourceError


class ToolError(SourceError):
    pass


DOWN = re.compile(r"Connection refused|LSF is down", re.I)


def run(script: str, timeout_s: float = 30, **kw) -> str:
    argv = [sys.executable, "-c", script]
    return run_tool(argv, timeout_s=timeout_s, error=ToolError, connector="test", transient=DOWN, **kw)


def test_stdout_is_returned_and_times_are_utc():
    assert run("import os, time; print(os.environ['TZ'], time.strftime('%Z'))").split() == ["UTC", "UTC"]


def test_a_refusal_names_the_tool_and_its_first_message_line():
    with pytest.raises(ToolError, match=r"^python[0-9.]* failed: qstat: Unknown Job Id 1234\.pbs01$") as e:
        run("import sys; sys.stderr.write('qstat: Unknown Job Id 1234.pbs01\\nsecond line\\n'); sys.exit(153)")
    assert not e.value.transient


def test_a_daemon_that_is_down_is_transient_even_below_the_first_line():
    with pytest.raises(TransientSourceError, match="failed: sacct: error: slurmdbd"):
        run("import sys; sys.stderr.write('sacct: error: slurmdbd\\nConnection refused\\n'); sys.exit(1)")


def test_silent_failure_names_the_exit_code():
    with pytest.raises(ToolError, match="failed: exit 3$"):
        run("import sys; sys.exit(3)")


def test_a_message_picker_finds_the_line_that_names_the_failure():
    def not_found(stdout: str, stderr: str) -> str | None:
        return next((line for line in stdout.splitlines() if "is not found" in line), None)

    script = "import sys; print('{\"RECORDS\": []}'); print('Job <42> is not found'); sys.exit(255)"
    with pytest.raises(ToolError, match=r"failed: Job <42> is not found$"):
        run(script, message=not_found)


def test_a_missing_tool_is_a_configuration_error_of_the_connector():
    with pytest.raises(ToolError, match="not installed") as e:
        run_tool(["/nonexistent/sacct"], timeout_s=5, error=ToolError, connector="slurm", transient=DOWN)
    assert e.value.connector == "slurm" and not e.value.transient


def test_a_tool_that_does_not_answer_is_a_retried_timeout():
    # the sleep is the thing under test: a tool that hangs past the source's timeout
    with pytest.raises(TransientSourceError, match=r"did not answer within 0\.5s") as e:
        run("import time; time.sleep(30)", timeout_s=0.5)
    assert e.value.status == "timeout"
