"""Waiting for a state, with a deadline: the one way tests synchronise with other processes and threads.

A test that needs another process or thread to reach a state (holds a lock, listens on a port, has
spooled a file, has started a flow run) waits for that state here, never for a fixed time: on a busy
2-core machine a fixed sleep is either too short (the test fails by chance) or wasted. Each wait has
a deadline and fails naming what it waited for and what it saw last.

Sleeps that stand for the thing under test (a slow server simulated, a time-to-live that must run
out) are not synchronisation and stay where they are, named as such.
"""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TypeVar

import httpx

T = TypeVar("T")

# How long a wait lasts unless told: long enough for a loaded 2-core CI machine, short enough that
# a state that never comes fails the test well inside the suite's budget.
DEFAULT_TIMEOUT_S = float(os.environ.get("ATTRIBUTION_TEST_WAIT_S", "60"))


class WaitTimeout(AssertionError):
    """A state did not come within its deadline (an AssertionError: pytest shows it as a failure)."""


def wait_until(
    check: Callable[[], T],
    what: str,
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float = 0.05,
    seen: Callable[[], object] | None = None,
    gone: subprocess.Popen[bytes] | subprocess.Popen[str] | None = None,
) -> T:
    """Call `check` until it returns something truthy; return that. Past `timeout` seconds raise
    WaitTimeout naming `what` (and `seen()`, what there was instead, when given); at once when the
    process `gone` (the one expected to bring the state about) has exited. The interval grows to
    at most 1 s, so long waits cost little CPU."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if gone is not None and gone.poll() is not None:
            raise WaitTimeout(f"the process exited ({gone.returncode}) before {what}{_seen(seen)}")
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"waited {timeout:.0f} s for {what}{_seen(seen)}")
        time.sleep(interval)
        interval = min(interval * 1.5, 1.0)


def _seen(seen: Callable[[], object] | None) -> str:
    """What there was instead, for a failure message (a failing look is said, not raised)."""
    if seen is None:
        return ""
    try:
        return f"; last seen: {seen()}"
    except Exception as exc:
        return f"; could not look ({type(exc).__name__}: {exc})"


def answers(url: str, status: int = 200, **get: object) -> bool:
    """GET url answers `status` (a refused or reset connection, a timeout: not yet)."""
    try:
        return httpx.get(url, timeout=2, **get).status_code == status  # type: ignore[arg-type]
    except httpx.HTTPError:
        return False


def wait_http(
    url: str,
    what: str = "",
    timeout: float = DEFAULT_TIMEOUT_S,
    proc: subprocess.Popen[bytes] | subprocess.Popen[str] | None = None,
    log: Path | None = None,
) -> None:
    """Until GET url answers 200; failing at once when `proc` (the server) exits, with its log's tail."""
    tail = (lambda: log.read_text(errors="replace")[-2000:]) if log is not None else None
    wait_until(lambda: answers(url), what or f"{url} to answer 200", timeout, interval=0.1, seen=tail, gone=proc)


def wait_port(port: int, host: str = "127.0.0.1", timeout: float = DEFAULT_TIMEOUT_S, what: str = "") -> None:
    """Until something accepts TCP connections on host:port."""

    def accepts() -> bool:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            return False

    wait_until(accepts, what or f"a listener on {host}:{port}", timeout)


def wait_file(path: Path, timeout: float = DEFAULT_TIMEOUT_S, what: str = "") -> Path:
    """Until `path` exists."""
    wait_until(path.exists, what or f"{path} to exist", timeout)
    return path


class LineReader:
    """A child's output read line by line on a thread, so a test can wait for a line with a
    deadline (a plain readline() on a pipe waits for ever when the child never writes)."""

    def __init__(self, stream: IO[str]):
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        try:
            for line in stream:
                self._queue.put(line.rstrip("\n"))
        except (ValueError, OSError):  # closed by its owner (Popen.communicate took the pipe over)
            pass
        self._queue.put(None)

    def wait_for(self, text: str, timeout: float = DEFAULT_TIMEOUT_S) -> str:
        """The first line holding `text`; WaitTimeout past the deadline or when the stream ends."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise WaitTimeout(f"waited {timeout:.0f} s for a line with {text!r}; got {self.lines[-5:]}") from None
            if line is None:
                raise WaitTimeout(f"the output ended before a line with {text!r}; got {self.lines[-5:]}")
            self.lines.append(line)
            if text in line:
                return line


def wait_line(proc: subprocess.Popen[str], text: str, timeout: float = DEFAULT_TIMEOUT_S) -> str:
    """The first line of the child's stdout (opened with stdout=PIPE, text=True) holding `text`."""
    assert proc.stdout is not None, "start the child with stdout=subprocess.PIPE, text=True"
    reader = getattr(proc, "_line_reader", None)
    if reader is None:
        reader = LineReader(proc.stdout)
        proc._line_reader = reader  # type: ignore[attr-defined]
    return reader.wait_for(text, timeout)


@contextmanager
def duckdb_held_by_another_process(path: Path, seconds: float = 300) -> Iterator[subprocess.Popen[str]]:
    """A child process holding the DuckDB file open (as an analyst's session or another writer
    would), for the length of the block: it says 'held' once it has the file, and the block starts
    only then."""
    script = f"import duckdb, time; c = duckdb.connect({str(path)!r}); print('held', flush=True); time.sleep({seconds})"
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        wait_line(proc, "held")
        yield proc
    finally:
        proc.kill()
        proc.wait()
