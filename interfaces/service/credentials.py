"""Who holds which scopes: the service's API tokens, stored hashed, several at once.

A token is `<name>.<secret>` (`attribution token create NAME --scope read` makes one). What the
service keeps of it is one line, in the file `service.tokens_file` and/or the variable named by
`service.tokens_env` (lines separated by newlines or `;`):

    grafana   read           scrypt$16384$8$1$<salt>$<key>
    slurm-ci  read,trigger   scrypt$16384$8$1$<salt>$<key>

`#` starts a comment. The file is read again whenever it changes (a token added, rotated or removed
takes effect at the next request, no restart); the variable is read at start. The single token of
`service.token_env` (the setting from before scopes) is an admin token named by its variable.

The key is scrypt (hashlib, RFC 7914) of the secret with a salt of its own: the file is no key to
the service. A token is verified once per process (then remembered by its SHA-256, for as long as
its line is unchanged); verifications of wrong secrets run two at a time, so guessing costs the
guesser, and the service at most two scrypt's memory.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import re
import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from workload_attribution.contracts.errors import BadInput

log = logging.getLogger("workload_attribution.service")


class Scope(StrEnum):
    """What a token may do. admin may do everything; the others only what they name."""

    read = "read"  # GET /v1/diagnoses, POST /v1/diagnose, the dashboard
    trigger = "trigger"  # POST /v1/attempts, the webhooks (with a bearer token instead of a signature)
    act = "act"  # actions on the fleet and their undo
    admin = "admin"  # everything, and the sessions (GET, DELETE /v1/sessions)


NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
# scrypt's cost: 16 MiB and ~50 ms per verification (RFC 7914's interactive-login parameters)
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
MAX_SCRYPT_N = 2**20  # a line asking for more is refused (a file must not make each check cost a GiB)
_SCRYPT_MEM = 128 * SCRYPT_R * MAX_SCRYPT_N + 2**20
_HASH = re.compile(r"scrypt\$(\d{1,8})\$(\d{1,3})\$(\d{1,3})\$([A-Za-z0-9+/=_-]{8,128})\$([A-Za-z0-9+/=_-]{16,256})")


@dataclass(frozen=True)
class Credential:
    name: str
    scopes: frozenset[Scope]
    digest: str  # the stored scrypt line, or for the single admin token the hash of the token

    def allows(self, scope: Scope) -> bool:
        return Scope.admin in self.scopes or scope in self.scopes

    @property
    def fingerprint(self) -> str:
        """Changes when the credential is rotated or its scopes change (sessions check it)."""
        text = f"{self.name} {','.join(sorted(self.scopes))} {self.digest}"
        return hashlib.sha256(text.encode()).hexdigest()[:32]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text.replace("+", "-").replace("/", "_") + "=" * (-len(text) % 4))


def _scrypt(secret: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(secret.encode(), salt=salt, n=n, r=r, p=p, maxmem=_SCRYPT_MEM, dklen=32)


def hash_secret(secret: str) -> str:
    salt = os.urandom(16)
    key = _scrypt(secret, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(key)}"


def verify_secret(secret: str, stored: str) -> bool:
    m = _HASH.fullmatch(stored)
    if m is None:
        return False
    n, r, p = (int(x) for x in m.group(1, 2, 3))
    key = _scrypt(secret, _unb64(m.group(4)), n, r, p)
    return hmac.compare_digest(key, _unb64(m.group(5)))


def new_token(name: str, scopes: Iterable[Scope]) -> tuple[str, str]:
    """A fresh token for `name` and the line that stores it: (token, line)."""
    if not NAME.fullmatch(name):
        raise BadInput(f"token name {name!r}: lower-case letters, digits, '-' and '_', at most 40")
    wanted = sorted({Scope(s) for s in scopes})
    if not wanted:
        raise BadInput("a token needs at least one scope (read, trigger, act, admin)")
    secret = secrets.token_urlsafe(32)
    return f"{name}.{secret}", f"{name} {','.join(wanted)} {hash_secret(secret)}"


def parse_lines(text: str, where: str) -> list[Credential]:
    """The credentials of a file's or a variable's text; BadInput naming the line at fault."""
    found: dict[str, Credential] = {}
    for number, raw in enumerate(re.split(r"[\n;]", text), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        cred = _parse_line(line, f"{where}, line {number}")
        if cred.name in found:
            raise BadInput(f"{where}, line {number}: token {cred.name!r} is already defined")
        found[cred.name] = cred
    return list(found.values())


def _parse_line(line: str, where: str) -> Credential:
    parts = line.split()
    if len(parts) != 3:
        raise BadInput(f"{where}: expected 'NAME SCOPES HASH' (attribution token create prints one)")
    name, scopes, digest = parts
    if not NAME.fullmatch(name):
        raise BadInput(f"{where}: token name {name!r}: lower-case letters, digits, '-' and '_', at most 40")
    try:
        granted = frozenset(Scope(s) for s in scopes.split(",") if s)
    except ValueError:
        raise BadInput(f"{where}: scopes {scopes!r}: each one of {', '.join(Scope)}") from None
    m = _HASH.fullmatch(digest)
    if not granted or m is None:
        raise BadInput(f"{where}: {'no scope' if not granted else 'the hash is not scrypt$N$r$p$salt$key'}")
    if not 2 <= int(m.group(1)) <= MAX_SCRYPT_N or int(m.group(1)) & (int(m.group(1)) - 1):
        raise BadInput(f"{where}: scrypt N must be a power of two up to {MAX_SCRYPT_N}")
    return Credential(name, granted, digest)


class Credentials:
    """The credentials in force: the single admin token, the variable's lines, the file's lines
    (read again when the file changes). `identify` says whose a presented token is."""

    def __init__(
        self,
        admin_token: str | None = None,
        admin_name: str = "admin",
        env_lines: str | None = None,
        env_name: str = "",
        path: str | None = None,
    ) -> None:
        self._admin_token = admin_token or None
        self._admin = (
            Credential(admin_name, frozenset({Scope.admin}), hashlib.sha256(admin_token.encode()).hexdigest())
            if admin_token
            else None
        )
        self._env = parse_lines(env_lines, f"${env_name}") if env_lines else []
        self._path = Path(path) if path else None
        self._seen: tuple[int, int, int] | None = None
        self._file: list[Credential] = []
        self._verified: dict[str, Credential] = {}  # sha256(token) -> its credential, while unchanged
        self._lock = threading.Lock()
        self._guessing = threading.BoundedSemaphore(2)
        if self._path is not None:  # at start a missing or broken file is the operator's to fix now
            if not self._path.is_file():
                raise BadInput(f"service.tokens_file {self._path}: no such file")
            self._reload(strict=True)

    @classmethod
    def from_environment(cls, token_env: str, tokens_env: str, tokens_file: str | None) -> Credentials:
        """As the service's settings name them (service.token_env, tokens_env, tokens_file)."""
        return cls(os.environ.get(token_env), f"${token_env}", os.environ.get(tokens_env), tokens_env, tokens_file)

    @property
    def configured(self) -> bool:
        """Any credential at all: without one the service is open (--insecure-no-auth)."""
        return self._admin is not None or bool(self._env) or self._path is not None

    def all(self) -> list[Credential]:
        self._reload()
        return ([self._admin] if self._admin else []) + self._env + self._file

    def named(self, name: str) -> Credential | None:
        return next((c for c in self.all() if c.name == name), None)

    def _reload(self, strict: bool = False) -> None:
        """Read the file again when it changed (inode, size or mtime). A file gone or broken later
        holds no credential (refused, never open) until it is fixed."""
        if self._path is None:
            return
        try:
            st = self._path.stat()
            seen = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            seen = (0, 0, 0)
        with self._lock:
            if seen == self._seen:
                return
            try:
                self._file = parse_lines(self._path.read_text(), str(self._path))
            except (OSError, UnicodeDecodeError, BadInput) as exc:
                if strict:
                    raise BadInput(f"service.tokens_file {self._path}: {exc}") from None
                log.warning("tokens file %s unreadable (%s): its tokens are refused until it is fixed", self._path, exc)
                self._file = []
            self._seen = seen
            self._verified.clear()

    def identify(self, token: str) -> Credential | None:
        """The credential the token is, or None."""
        if self._admin_token is not None and hmac.compare_digest(token.encode(), self._admin_token.encode()):
            return self._admin
        self._reload()
        key = hashlib.sha256(token.encode()).hexdigest()
        known = self._verified.get(key)
        if known is not None:
            return known
        name, _, secret = token.partition(".")
        cred = next((c for c in self._env + self._file if c.name == name), None)
        if cred is None or not secret:
            return None
        with self._guessing:
            ok = verify_secret(secret, cred.digest)
        if ok:
            self._verified[key] = cred
        return cred if ok else None
