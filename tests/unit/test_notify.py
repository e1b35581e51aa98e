"""deployments/notify/attribution-notify: the signed webhook every scheduler's trigger sends through
(deployments/<scheduler>/), here with a Slurm notice to the real service: spooled first, delivered
in the background, kept while the service is away and sent by --flush, moved aside when refused."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.triggers import NOTIFY, notify_config, service, spooled
from tests.waiting import wait_until

CLUSTERS = {"lab": {"scheduler": "slurm"}}


def notify(env: dict[str, str], *args: str, notice: dict | None = None) -> subprocess.CompletedProcess[str]:
    text = json.dumps(notice) if notice is not None else ""
    argv = [sys.executable, str(NOTIFY), *args]
    return subprocess.run(argv, input=text, capture_output=True, text=True, env={**os.environ, **env}, timeout=60)


def unlocked(path: Path) -> bool:
    """No sender holds the spooled notice (each locks it while it tries)."""
    with path.open("rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def test_a_notice_is_spooled_then_delivered_signed_to_its_route(tmp_path: Path):
    with service(tmp_path, CLUSTERS) as svc:
        env = notify_config(tmp_path, f"{svc.url}/v1/webhooks/slurm", cluster="lab")
        r = notify(env, notice={"job_id": "4191701", "state": "NODE_FAIL", "attempt": 2})
        assert r.returncode == 0, r.stderr
        wait_until(lambda: svc.keys() == ["lab:slurm:4191701:2"], "the notice to reach the service")
        wait_until(lambda: not spooled(tmp_path), "the delivered notice to leave the spool")


def test_kept_while_the_service_is_away_then_flushed(tmp_path: Path):
    with service(tmp_path / "first", CLUSTERS) as svc:
        url = f"{svc.url}/v1/webhooks/slurm"
    env = notify_config(tmp_path, url, cluster="lab")  # the service has gone: nothing answers there
    assert notify(env, notice={"job_id": "77", "state": "FAILED"}).returncode == 0
    r = notify(env, "--flush")  # races the background sender: either still spools it, neither delivers
    assert r.returncode == 1 and "still spooled" in r.stdout
    [kept] = spooled(tmp_path)
    wait_until(lambda: unlocked(tmp_path / "spool" / kept), "the background sender to give up (its retries spent)")
    with service(tmp_path / "second", CLUSTERS) as svc:
        conf = Path(env["ATTRIBUTION_NOTIFY_CONFIG"])
        conf.write_text(conf.read_text().replace(url, f"{svc.url}/v1/webhooks/slurm"))
        r = notify(env, "--flush")
        assert r.returncode == 0 and "sent" in r.stdout, r.stdout + r.stderr
        assert svc.keys() == ["lab:slurm:77:0"] and not spooled(tmp_path)


def test_a_notice_the_service_refuses_is_moved_aside(tmp_path: Path):
    with service(tmp_path, CLUSTERS) as svc:
        env = notify_config(tmp_path, f"{svc.url}/v1/webhooks/slurm", cluster="lab")
        assert notify(env, notice={"job_id": "not a job", "state": "FAILED"}).returncode == 0
        wait_until(lambda: (tmp_path / "spool" / "rejected").is_dir() and not spooled(tmp_path), "the refusal")
        assert svc.keys() == []
    assert notify(env, notice=None).returncode == 1  # not JSON: said, and nothing spooled
