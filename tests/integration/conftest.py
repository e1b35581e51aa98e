"""Real services for the integration tests, started once per session and stopped at its end."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, WORKED
from tests.services.prometheus import Prometheus, free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory):
    # DCGM series of the worked example and the InfiniBand counters of the shared ib_link_down example
    files = sorted((WORKED / "metrics").glob("*.prom")) + [
        EXAMPLES / "ib_link_down_one_host-1-0" / "metrics" / "range-export.prom"
    ]
    server = Prometheus(tmp_path_factory.mktemp("prom"), files).start()
    yield server
    server.stop()


SLURM_PACKAGES = {
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sbatch": "slurm-client",
    "munged": "munge",
    "slurmrestd": "slurmrestd",
    "slurmdbd": "slurmdbd",
    "mariadbd": "mariadb-server",
}


def _free_run_of_ports(n: int) -> int:
    """The first of n consecutive free TCP ports on loopback (slurmd's Port=[a-b] needs a run)."""
    import random
    import socket

    for _ in range(200):
        base = random.randint(20000, 60000 - n)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of free ports")


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A real Slurm 22.05 of this run alone (tests/services/slurm_up.sh): its own directory, ports and
    munged. Needs root and the Debian packages, which .ci/run installs; the tests install nothing."""
    missing = [
        pkg for cmd, pkg in SLURM_PACKAGES.items() if not (shutil.which(cmd) or Path(f"/usr/sbin/{cmd}").exists())
    ]
    why = "real Slurm needs root" if os.geteuid() != 0 else (f"not installed: {' '.join(missing)}" if missing else "")
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"{why} (.ci/run installs the packages and runs as root)")
        pytest.skip(why)
    base = tmp_path_factory.mktemp("slurm")
    base.chmod(0o755)  # the daemons run as slurm, munge and mysql
    for parent in base.parents:
        if parent == Path("/tmp") or parent == Path("/"):
            break
        parent.chmod(parent.stat().st_mode | 0o055)  # munged wants every directory above its socket open to all
    ports = {
        "SLURM_REST_PORT": free_port(),
        "SLURM_DB_PORT": free_port(),
        "SLURM_CTLD_PORT": free_port(),
        "SLURM_DBD_PORT": free_port(),
        "SLURM_NODE_PORT": _free_run_of_ports(4),
    }
    try:
        up = subprocess.run(
            ["bash", str(ROOT / "tests/services/slurm_up.sh"), str(base)],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, **{k: str(v) for k, v in ports.items()}},
        )
    except subprocess.TimeoutExpired as exc:  # what it started must still be stopped
        up = subprocess.CompletedProcess(exc.cmd, 1, "", f"timed out: {exc.stderr!r}")
    if up.returncode != 0:
        subprocess.run(
            ["bash", str(ROOT / "tests/services/slurm_down.sh"), str(base)], capture_output=True, timeout=120
        )
        pytest.fail(f"slurm_up.sh failed: {up.stderr[-2000:]}")
    env = {}
    for line in (base / "env.sh").read_text().splitlines():
        k, _, v = line.removeprefix("export ").partition("=")
        env[k] = v
    os.environ.update({k: env[k] for k in ("SLURM_CONF", "SLURMRESTD_TOKEN")})
    yield env
    subprocess.run(["bash", str(ROOT / "tests/services/slurm_down.sh"), str(base)], capture_output=True, timeout=120)


@pytest.fixture
def staged():
    """The worked example's scope and a fresh staging database for it."""
    from workload_attribution.connectors.bundle import load_scope
    from workload_attribution.contracts.staging import create_staging, release_staging

    scope = load_scope(WORKED)
    path = create_staging(scope)
    yield scope, path
    release_staging(path)
