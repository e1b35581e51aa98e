"""The dashboard's sessions, kept by the service: a browser holds a random id, never a token.

Signing in at /ui/login with a token that has the `read` scope opens a session: a random id (32
bytes) in an HttpOnly, SameSite=strict cookie, and a row here keyed by the id's SHA-256 (the
file holds no usable id). A session ends at its expiry (service.session_ttl_s), at logout, when an
admin deletes it (DELETE /v1/sessions/{handle}), or when the token that opened it is removed or
rotated: each request checks that the token's credential still has the fingerprint it had.

The rows live in a SQLite file (service.sessions_file, by default beside the outbox), so a restart
keeps them and replicas on one host share them.
"""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

COOKIE = "attribution_session"


@dataclass(frozen=True)
class Session:
    handle: str  # names the session to an admin (a hash of its id: listing sessions shows no id)
    credential: str
    fingerprint: str
    created: float
    expires: float


def handle_of(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()[:32]


class Sessions:
    def __init__(self, path: str | Path, ttl_s: float, clock: Callable[[], float] = time.time) -> None:
        self.path, self.ttl_s, self.clock = Path(path), ttl_s, clock
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS sessions (handle TEXT PRIMARY KEY, credential TEXT NOT NULL, "
                "fingerprint TEXT NOT NULL, created REAL NOT NULL, expires REAL NOT NULL)"
            )
        self.path.chmod(0o600)

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, timeout=10, isolation_level=None)) as db:
            yield db

    def open(self, credential: str, fingerprint: str) -> str:
        """A new session for the credential; its id (for the cookie)."""
        session_id = secrets.token_urlsafe(32)
        now = self.clock()
        with self._db() as db:
            db.execute("DELETE FROM sessions WHERE expires <= ?", (now,))
            db.execute(
                "INSERT INTO sessions VALUES (?, ?, ?, ?, ?)",
                (handle_of(session_id), credential, fingerprint, now, now + self.ttl_s),
            )
        return session_id

    def get(self, session_id: str) -> Session | None:
        """The live session of this id, or None (unknown, expired, ended)."""
        if not session_id or len(session_id) > 100:
            return None
        with self._db() as db:
            row = db.execute(
                "SELECT * FROM sessions WHERE handle = ? AND expires > ?", (handle_of(session_id), self.clock())
            ).fetchone()
        return Session(*row) if row else None

    def end(self, handle: str) -> bool:
        """End a session by its handle (logout: the handle of its id); whether there was one."""
        with self._db() as db:
            return db.execute("DELETE FROM sessions WHERE handle = ?", (handle,)).rowcount > 0

    def live(self) -> list[Session]:
        with self._db() as db:
            rows = db.execute("SELECT * FROM sessions WHERE expires > ? ORDER BY created", (self.clock(),)).fetchall()
        return [Session(*r) for r in rows]
