"""What every command shares: exit codes, flags accepted anywhere, messages, progress, configuration."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from typing import TYPE_CHECKING, Any

from workload_attribution.contracts.errors import (
    BadInput,
    NotStored,
    SourceError,
    TransientSourceError,
    Unreachable,
    first_line,
)

if TYPE_CHECKING:  # the configuration is imported when a command reads it, not for --version
    from workload_attribution.flows.config import Config

# The one exit-code contract of every command (README's table, `attribution --help`):
EXIT_OK = 0  # done: diagnosed (whatever the verdict), valid, answered
EXIT_BUG = 1  # a bug: `internal error: ...` (--debug shows the traceback)
EXIT_BAD_INPUT = 2  # bad input or configuration: one line naming what and where
EXIT_NOT_STORED = 3  # diagnosed and printed, but not stored
EXIT_CHECKS_FAILED = 4  # checks ran and some failed: rule tests, eval under its threshold, config check, backfill
EXIT_UNREACHABLE = 5  # a dependency did not answer: Prefect, a scheduler, a remote service
EXIT_CODES = """exit codes (every command):
  0  done: diagnosed (whatever the verdict), valid, answered
  1  a bug: "internal error" on stderr (--debug shows the traceback)
  2  bad input or configuration: one line on stderr naming what and where
  3  diagnosed and printed, but not stored (warehouse locked, disk full)
  4  checks ran and failed: a rule test, eval under --min-exact, an endpoint in config check,
     a backfill attempt not diagnosed, an action undo that failed, rules impact
     past --max-changed
  5  a dependency did not answer: the Prefect server, a scheduler, a remote service"""

__all__ = [
    "BadInput",
    "EXIT_BAD_INPUT",
    "EXIT_BUG",
    "EXIT_CHECKS_FAILED",
    "EXIT_CODES",
    "EXIT_NOT_STORED",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "Exit",
    "first_line",
]


class Exit(Exception):
    """Leave the command with this exit code (after its output)."""

    def __init__(self, code: int):
        self.code = code


def exit_code(exc: BaseException) -> int:
    """The one mapping from an error to the exit code."""
    import httpx

    if isinstance(exc, NotStored):
        return EXIT_NOT_STORED
    if isinstance(exc, (Unreachable, TransientSourceError, httpx.TransportError)):
        return EXIT_UNREACHABLE
    if isinstance(exc, (BadInput, SourceError)):  # a source that cannot scope the attempt: the setup's fault
        return EXIT_BAD_INPUT
    return EXIT_BUG


def add_global_flags(parser: argparse.ArgumentParser, top: bool = True) -> None:
    """--debug, -q and --config, accepted before or after the command."""
    default: Any = argparse.SUPPRESS
    parser.add_argument(
        "--debug",
        action="store_true",
        default=False if top else default,
        help="show the traceback of an internal error",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", default=False if top else default, help="no progress on stderr"
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None if top else default,
        help="YAML configuration (default: $ATTRIBUTION_CONFIG, else ./attribution.yaml)",
    )


def command(sub: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A command's parser; its --help ends with the exit codes."""
    kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
    kwargs.setdefault("epilog", EXIT_CODES)
    p = sub.add_parser(name, **kwargs)
    add_global_flags(p, top=False)
    return p


# Whether hold_gc stopped the cyclic garbage collector, for `started` to restart it.
_gc_held = False


def hold_gc() -> None:
    """No cyclic garbage collection while a new process starts: its imports, its configuration and
    its rules pack make objects that live as long as it does, and each of the ~100 collections they
    set off (pydantic's schemas most) looks through them for nothing (~15% of the start's CPU).
    `started` ends it."""
    global _gc_held
    if gc.isenabled():
        gc.disable()
        _gc_held = True


def started() -> None:
    """The start is over: what it made is frozen out of later collections (it lives as long as the
    process), and collection goes on as before. Nothing when hold_gc did not stop it."""
    global _gc_held
    if _gc_held:
        _gc_held = False
        gc.freeze()
        gc.enable()


def say(message: str) -> None:
    print(f"attribution: {message}", file=sys.stderr, flush=True)


def silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


class Progress:
    """One line per step on stderr when it is a terminal (or when forced), nothing with -q."""

    def __init__(self, args: argparse.Namespace, force: bool = False):
        self.on = not getattr(args, "quiet", False) and (force or sys.stderr.isatty())
        self.tty = sys.stderr.isatty()

    def __call__(self, message: str, final: bool = True) -> None:
        if not self.on:
            return
        if self.tty and not final:
            print(f"\r\033[K{message}", end="", file=sys.stderr, flush=True)
        else:
            print(("\r\033[K" if self.tty else "") + message, file=sys.stderr, flush=True)


def load_config(args: argparse.Namespace, **overrides: Any) -> Config:
    """The configuration: defaults < file (--config, $ATTRIBUTION_CONFIG, ./attribution.yaml) < environment
    (ATTRIBUTION_*) < these flags."""
    from workload_attribution.flows.config import load_config as load

    return load(getattr(args, "config", None), **{k: v for k, v in overrides.items() if v is not None})


def rules_dir(args: argparse.Namespace, cfg: Any = None) -> str | None:
    """The rules pack every command uses: --rules-dir > $ATTRIBUTION_RULES_DIR > config > shipped (None)."""
    flag = getattr(args, "rules_dir", None)
    if flag:
        return str(flag)
    if cfg is None:
        cfg = load_config(args)
    return cfg.rules_dir or None


def writable_dir(path: str, what: str) -> None:
    """Refuse, before any work, a place to write that cannot be written: `what` a directory (--out)
    or a file (--warehouse) to be created inside existing or creatable directories."""
    from pathlib import Path

    p = Path(path)
    if what.endswith("directory") and p.exists() and not p.is_dir():
        raise BadInput(f"{what} {path}: exists and is not a directory")
    if not what.endswith("directory") and p.is_dir():
        raise BadInput(f"{what} {path}: is a directory, not a file")
    probe = p if what.endswith("directory") else p.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise BadInput(f"{what} {path}: {probe} is not a directory")
    if not os.access(probe, os.W_OK):
        raise BadInput(f"{what} {path}: {probe} is not writable")
