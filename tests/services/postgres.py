"""A real PostgreSQL (Debian's postgresql package, installed by .ci/run) in a private data
directory on 127.0.0.1: initdb, pg_ctl start, a database and a password user; stopped at the end.
The server refuses to run as root, so it runs as the package's `postgres` user."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.services.prometheus import free_port
from tests.waiting import wait_until


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    if os.environ.get("CI"):
        pytest.fail("PostgreSQL is not installed: .ci/run must install it")
    pytest.skip("PostgreSQL not installed (apt-get install postgresql)")


class Postgres:
    def __init__(self, base: Path, db: str = "attribution", user: str = "attribution", password: str = "lake-pass"):
        self.base, self.db, self.user, self.password = base, db, user, password
        self.port = free_port()

    def _as_postgres(self, *args: str, **kw) -> subprocess.CompletedProcess:
        cmd = list(args) if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)

    def start(self) -> Postgres:
        self.base.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres", "postgres")
        data = self.base / "data"
        r = self._as_postgres(
            _bin("initdb"),
            "-D",
            str(data),
            "-A",
            "scram-sha-256",
            "--username=postgres",
            f"--pwfile={self._pwfile()}",
            "-E",
            "UTF8",
        )
        if r.returncode != 0:
            raise RuntimeError(f"initdb failed: {r.stderr[-1500:]}")
        r = self._as_postgres(
            _bin("pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(self.base / "server.log"),
            "-w",
            "-t",
            "60",
            "-o",
            f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c max_connections=200",
            "start",
        )
        if r.returncode != 0:
            raise RuntimeError(
                f"pg_ctl start failed: {r.stderr[-1500:]} {(self.base / 'server.log').read_text()[-1500:]}"
            )
        env = {**os.environ, "PGPASSWORD": "postgres-admin"}
        sql = f"CREATE USER {self.user} PASSWORD '{self.password}'; CREATE DATABASE {self.db} OWNER {self.user};"
        r = subprocess.run(
            [
                "psql",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql.split(";")[0],
                "-c",
                sql.split(";")[1],
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        if r.returncode != 0:
            raise RuntimeError(f"psql failed: {r.stderr}")
        return self

    def _pwfile(self) -> Path:
        p = self.base / "pw"
        p.write_text("postgres-admin\n")
        if os.geteuid() == 0:
            shutil.chown(p, "postgres", "postgres")
        return p

    def create_database(self, name: str) -> str:
        """Another database owned by the user (e.g. a Prefect server's beside a DuckLake catalog); its name."""
        r = subprocess.run(
            ["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-v", "ON_ERROR_STOP=1"]
            + ["-c", f"CREATE DATABASE {name} OWNER {self.user}"],
            capture_output=True,
            text=True,
            env={**os.environ, "PGPASSWORD": "postgres-admin"},
            timeout=60,
        )
        if r.returncode != 0:
            raise RuntimeError(f"psql failed: {r.stderr}")
        return name

    def sqlalchemy_url(self, db: str | None = None) -> str:
        """The URL a Prefect server takes (PREFECT_SERVER_DATABASE_CONNECTION_URL), asyncpg's driver."""
        return f"postgresql+asyncpg://{self.user}:{self.password}@127.0.0.1:{self.port}/{db or self.db}"

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} dbname={self.db} user={self.user}"

    def stop(self) -> None:
        self._as_postgres(_bin("pg_ctl"), "-D", str(self.base / "data"), "-m", "fast", "-w", "stop")
        pid = self.base / "data" / "postmaster.pid"
        wait_until(lambda: not pid.exists(), "PostgreSQL to remove its postmaster.pid", timeout=30)
