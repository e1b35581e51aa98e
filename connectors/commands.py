"""Running a scheduler's command-line tool (sacct, qstat, tracejob, bjobs, bhist, flux) the one way
every scheduler module needs: times in UTC, bounded by the source's timeout, and each way of failing
mapped to the error the coverage record needs.

    did not answer in time           TransientSourceError (status `timeout`): retried
    not installed                    the module's error: the source is misconfigured
    non-zero exit, `transient` text  TransientSourceError: the daemon is down or busy, retried
    any other non-zero exit          the module's error, naming the tool and its first message line
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from workload_attribution.contracts.errors import SourceError, TransientSourceError


def run_tool(
    argv: list[str],
    *,
    timeout_s: float,
    error: type[SourceError],
    connector: str,
    transient: re.Pattern[str],
    message: Callable[[str, str], str | None] = lambda out, err: None,
) -> str:
    """The tool's stdout. `message(stdout, stderr)` may pick the line that names the failure when the
    first line of stderr does not (bjobs prints a forgotten job's JSON before its message)."""
    import subprocess  # here: a bundle's diagnosis imports its scheduler's module, never runs a tool (~2 ms)

    try:
        # TZ=UTC: the tools print (and read, for -S/--since) wall-clock times in the reader's zone
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env={**os.environ, "TZ": "UTC"})
    except subprocess.TimeoutExpired:
        raise TransientSourceError(f"{argv[0]} did not answer within {timeout_s:g}s", "timeout") from None
    except FileNotFoundError:
        raise error(f"{argv[0]}: not installed", connector=connector) from None
    if out.returncode == 0:
        return out.stdout
    lines = (out.stderr or out.stdout).strip().splitlines() or [f"exit {out.returncode}"]
    text = message(out.stdout, out.stderr) or lines[0]
    kind = TransientSourceError if transient.search(out.stderr or out.stdout) else error
    raise kind(f"{os.path.basename(argv[0])} failed: {text}")
