"""Real services for the integration tests, started once per session and stopped at its end."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, WORKED
from tests.services.prometheus import Prometheus

ROOT = Path(__file__).resolve().parents[2]
SLURM_BASE = Path(os.environ.get("ATTRIBUTION_SLURM_BASE", "/tmp/attribution-slurm"))


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory):
    # DCGM series of the worked example and the InfiniBand counters of the shared ib_link_down example
    files = sorted((WORKED / "metrics").glob("*.prom")) + [
        EXAMPLES / "ib_link_down_one_host-1-0" / "metrics" / "range-export.prom"
    ]
    server = Prometheus(tmp_path_factory.mktemp("prom"), files).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def slurm():
    """Real Slurm 22.05 via tests/services/slurm_up.sh (needs root; .ci/run installs the packages)."""
    if os.geteuid() != 0 or (not shutil.which("apt-get") and not shutil.which("slurmctld")):
        if os.environ.get("CI"):
            pytest.fail("real Slurm needs root and apt (or installed packages)")
        pytest.skip("real Slurm needs root")
    up = subprocess.run(
        ["bash", str(ROOT / "tests/services/slurm_up.sh"), str(SLURM_BASE)], capture_output=True, text=True, timeout=600
    )
    if up.returncode != 0:
        pytest.fail(f"slurm_up.sh failed: {up.stderr[-2000:]}")
    env = {}
    for line in (SLURM_BASE / "env.sh").read_text().splitlines():
        k, _, v = line.removeprefix("export ").partition("=")
        env[k] = v
    os.environ.update({k: env[k] for k in ("SLURM_CONF", "SLURMRESTD_TOKEN")})
    yield env
    subprocess.run(
        ["bash", str(ROOT / "tests/services/slurm_down.sh"), str(SLURM_BASE)], capture_output=True, timeout=120
    )


@pytest.fixture
def staged():
    """The worked example's scope and a fresh staging database for it."""
    from workload_attribution.connectors.bundle import load_scope
    from workload_attribution.contracts.staging import create_staging, release_staging

    scope = load_scope(WORKED)
    path = create_staging(scope)
    yield scope, path
    release_staging(path)
