"""`attribution`: diagnose attempts, manage the rules pack, query the warehouse, run production.

Exit codes (every command, every mode; common.EXIT_CODES, shown by every --help):
    0  done (diagnosed, valid, answered)
    1  a bug
    2  bad input or configuration: one line on stderr naming what and where
    3  a diagnosis was computed but not stored (it is still printed)
    4  checks ran and failed: a rule test, eval under --min-exact, config check's endpoints, a backfill attempt,
       an action undo that failed
    5  a dependency did not answer: the Prefect server, a scheduler, a remote service
Each command lives in its own module beside its parser (`add(subparsers)`).
"""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import sys
import traceback
from typing import Any

from workload_attribution.cli import common
from workload_attribution.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_BUG,
    EXIT_CHECKS_FAILED,
    EXIT_NOT_STORED,
    EXIT_OK,
    EXIT_UNREACHABLE,
)

COMMANDS = (
    "diagnose",
    "rules",
    "eval",
    "diff",
    "query",
    "actions",
    "backfill",
    "topology",
    "archive",
    "config",
    "serve",
    "deploy",
    "worker",
    "token",
)

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BUG",
    "EXIT_CHECKS_FAILED",
    "EXIT_NOT_STORED",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "build_parser",
    "main",
]


class _Version(argparse.Action):
    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        from workload_attribution import version
        from workload_attribution.flows.pipeline import load_rules

        try:
            rules = load_rules(os.environ.get("ATTRIBUTION_RULES_DIR")).version
        except Exception as exc:  # the version must print even when the pack is broken
            rules = f"unreadable ({common.first_line(exc)})"
        print(f"workload-attribution {version()}\nrules {rules}")
        parser.exit()


def build_parser(commands: tuple[str, ...] = COMMANDS) -> argparse.ArgumentParser:
    import importlib

    p = argparse.ArgumentParser(
        prog="attribution",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Why did this GPU training attempt die, and whom should we isolate? Scopes an attempt, "
        "collects its evidence, runs versioned rules and writes a diagnosis.",
        epilog=common.EXIT_CODES,
    )
    p.add_argument("--version", action=_Version, nargs=0, help="print the version and the rules pack's version")
    common.add_global_flags(p)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in commands:
        importlib.import_module(f"workload_attribution.cli.{name}").add(sub)
    return p


def _named_command(argv: list[str]) -> str | None:
    """The command a command line names, when it can be told without parsing: the first word that
    is neither a global flag nor --config's value. Only its parser is then built: each command's
    module is imported to build its own (~15 ms for all of them)."""
    words = iter(argv)
    for word in words:
        if word.startswith("--") and len(word) > 2 and "=" not in word and "--config".startswith(word):
            next(words, None)  # --config FILE, or argparse's abbreviation of it
        elif word == "--":
            return None
        elif not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the process's own command line: the process ends when this returns
        # At exit the interpreter searches every object for reference cycles before freeing it (~70 ms
        # after a diagnosis), memory the OS takes back anyway: frozen, the search skips them. Runs after
        # the exit callbacks registered later (Prefect's, temporary directories'), which still run.
        atexit.register(gc.freeze)
        common.hold_gc()  # until the command has started (common.started), at the latest when it returns
        # pydantic looks for plugins among every installed package's entry points when it builds its
        # first model (~25 ms of each new process, Prefect's dependencies installed): none is ours
        # to load. Set to '' (docs/configuration.md) to load them; a library user's process is theirs.
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    try:
        return _command(argv)
    finally:
        common.started()


def _command(argv: list[str] | None) -> int:
    named = _named_command(sys.argv[1:] if argv is None else argv)
    args = build_parser((named,) if named else COMMANDS).parse_args(argv)
    if not getattr(args, "says_started", False):  # a command that does says when its start is over
        common.started()
    try:
        return args.func(args)
    except common.Exit as done:
        return done.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader closed the pipe (`| head`): what was asked is done; say nothing more
        common.silence_stdout()
        return EXIT_OK
    except Exception as exc:
        code = common.exit_code(exc)
        if code == EXIT_BUG:
            if args.debug:
                traceback.print_exc()
            common.say(
                f"internal error: {type(exc).__name__}: {common.first_line(exc)} (run with --debug for the traceback)"
            )
        else:
            common.say(common.first_line(exc))
        return code


if __name__ == "__main__":
    sys.exit(main())
