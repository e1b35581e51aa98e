"""`attribution token create | list | revoke`: the service's API tokens, kept hashed in the tokens file."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from workload_attribution.cli import common
from workload_attribution.cli.common import EXIT_OK, BadInput

DESCRIPTION = """\
The API tokens of `attribution serve`, each with its scopes: read (the reads, POST /v1/diagnose,
the dashboard), trigger (POST /v1/attempts, the webhooks), act (actions and their undo), admin
(everything). The tokens file (--file, else service.tokens_file) holds one line per token, its
secret hashed (scrypt); the service reads it again when it changes, so a token is added, rotated
(create the new one, move the client, revoke the old) or revoked without a restart, and revoking
one ends its dashboard sessions at once.

create prints the token (NAME.SECRET) once, on stdout; --print-line also prints the line to put in
the variable named by service.tokens_env instead of a file."""


def add(sub: Any) -> None:
    t = common.command(sub, "token", help="create, list or revoke the service's API tokens", description=DESCRIPTION)
    t.add_argument("action", choices=["create", "list", "revoke"])
    t.add_argument("name", nargs="?", metavar="NAME", help="the token's name (create, revoke)")
    t.add_argument(
        "--scope", action="append", default=[], choices=["read", "trigger", "act", "admin"], help="repeatable"
    )
    t.add_argument("--file", metavar="PATH", help="the tokens file (default: service.tokens_file)")
    t.add_argument("--print-line", action="store_true", help="create: print the stored line, write no file")
    t.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from workload_attribution.service.credentials import Credentials, Scope, new_token

    if args.action == "create" and args.print_line:
        token, line = new_token(_name(args), [Scope(s) for s in args.scope])
        print(f"{token}\n{line}")
        return EXIT_OK
    cfg = common.load_config(args)
    where = args.file or cfg.service.tokens_file
    if not where:
        raise BadInput("no tokens file: give --file PATH or set service.tokens_file (or create --print-line)")
    path = Path(where)
    if args.action == "create":
        token, line = new_token(_name(args), [Scope(s) for s in args.scope])
        _write(path, _lines(path, drop=None, refuse=args.name) + [line])
        print(token)
        return EXIT_OK
    if args.action == "revoke":
        _write(path, _lines(path, drop=_name(args), refuse=None))
        common.say(f"token {args.name} revoked: refused from the service's next request on, its sessions ended")
        return EXIT_OK
    env = os.environ.get(cfg.service.tokens_env)
    for cred in Credentials(None, "", env, cfg.service.tokens_env, str(path) if path.is_file() else None).all():
        print(f"{cred.name:40} {','.join(sorted(cred.scopes))}")
    return EXIT_OK


def _name(args: argparse.Namespace) -> str:
    if not args.name:
        raise BadInput(f"token {args.action}: give the token's NAME")
    return str(args.name)


def _lines(path: Path, drop: str | None, refuse: str | None) -> list[str]:
    """The file's lines (checked), without the token `drop`; BadInput when `refuse` is already there
    or `drop` is not."""
    from workload_attribution.service.credentials import parse_lines

    text = path.read_text() if path.is_file() else ""
    names = {c.name for c in parse_lines(text, str(path))}
    if refuse and refuse in names:
        raise BadInput(f"{path}: a token {refuse!r} exists (revoke it first, or give the new one another name)")
    if drop and drop not in names:
        raise BadInput(f"{path}: no token {drop!r} (attribution token list)")
    return [line for line in text.splitlines() if not drop or line.split("#", 1)[0].split()[:1] != [drop]]


def _write(path: Path, lines: list[str]) -> None:
    """The file replaced at once (a reader sees the old or the new one), readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as out:
            out.write("".join(f"{line}\n" for line in lines))
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
