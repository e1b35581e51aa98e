"""Real services for the integration tests, started once per session and stopped at its end."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, WORKED
from tests.services.prometheus import Prometheus

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def wheel_bin(tmp_path_factory):
    """The wheel, built and installed in a fresh virtualenv (tests/services/wheel.py): its bin/."""
    from tests.services.wheel import build_venv

    return build_venv(tmp_path_factory.mktemp("wheel"))


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


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _free_run_of_ports(n: int) -> int:
    """The first of n consecutive free TCP ports on loopback (slurmd's Port=[a-b] needs a run), below
    the kernel's ephemeral range: a port chosen there can be taken, between the choice and the
    daemon's bind, by any outgoing connection on the host (the other test worker's connection storms
    open thousands) or by another bind to port 0."""
    import random
    import socket

    # the system's randomness, not the `random` module's: pytest-randomly seeds that alike in every
    # test process (and in a concurrent run on the same host), which would choose the same ports
    choose = random.SystemRandom()
    high = min(_ephemeral_low(), 65536) - n
    for _ in range(200):
        base = choose.randint(20000, max(20001, high))
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
    # Not under pytest's base directory: pytest keeps that 0700 (and resets it when another run on this
    # host starts), while the daemons run as slurm, munge and mysql, and munged wants every directory
    # above its socket open to all. A directory of this run's own, removed at the end.
    # Ports are free when chosen, not reserved: another process on a shared host may bind one first.
    # That start fails naming the daemon (and its log); it is stopped and tried once more on new ports.
    for attempt in (1, 2):
        base = Path(tempfile.mkdtemp(prefix="attribution-slurm-", dir="/tmp"))
        base.chmod(0o755)
        ports = {
            name: _free_run_of_ports(1)
            for name in ("SLURM_REST_PORT", "SLURM_DB_PORT", "SLURM_CTLD_PORT", "SLURM_DBD_PORT")
        }
        ports["SLURM_NODE_PORT"] = _free_run_of_ports(4)
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
        if up.returncode == 0:
            break
        subprocess.run(
            ["bash", str(ROOT / "tests/services/slurm_down.sh"), str(base)], capture_output=True, timeout=120
        )
        shutil.rmtree(base, ignore_errors=True)
        if attempt == 2:
            pytest.fail(f"slurm_up.sh failed twice, on two sets of ports: {up.stderr[-2000:]}")
        print(f"slurm_up.sh failed on ports {ports}, trying new ones: {up.stderr[-1000:]}", file=sys.stderr)
    env = {}
    for line in (base / "env.sh").read_text().splitlines():
        k, _, v = line.removeprefix("export ").partition("=")
        env[k] = v
    os.environ.update({k: env[k] for k in ("SLURM_CONF", "SLURMRESTD_TOKEN")})
    yield env
    subprocess.run(["bash", str(ROOT / "tests/services/slurm_down.sh"), str(base)], capture_output=True, timeout=120)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres():
    """A real PostgreSQL of this module's own (tests/services/postgres.py): a DuckLake catalog, a
    Prefect server's database."""
    from tests.services.postgres import Postgres

    base = Path(tempfile.mkdtemp(prefix="attribution-pg-"))  # not under pytest's 0700 tmp: the server runs as postgres
    base.chmod(0o755)
    pg = Postgres(base / "pg").start()
    yield pg
    pg.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def s3():
    """A real S3 server of this module's own (SeaweedFS, tests/services/seaweedfs.py) with a bucket."""
    from tests.services.seaweedfs import SeaweedS3

    base = Path(tempfile.mkdtemp(prefix="attribution-s3-"))
    server = SeaweedS3(base).start()
    yield server
    server.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def staged():
    """The worked example's scope and a fresh staging database for it."""
    from workload_attribution.connectors.bundle import load_scope
    from workload_attribution.staging.attempt import create_staging
    from workload_attribution.staging.database import release_staging

    scope = load_scope(WORKED)
    path = create_staging(scope)
    yield scope, path
    release_staging(path)


# ---- the production shape (tests/services/prefect_stack.py), shared by the trigger and operations tests

OOM = EXAMPLES / "host_oom_kueue-1-0"


@pytest.fixture(scope="session")
def kube():
    """The Kubernetes API stand-in (no kube-apiserver runs here) holding the Kueue example's Workload."""
    import json

    from tests.services.kube_standin import KubeStandIn

    server = KubeStandIn(namespace="team-a").start()
    name = json.loads((OOM / "scheduler" / "workload.json").read_text())["metadata"]["name"]
    server.load_bundle(OOM / "scheduler", {"kueue.x-k8s.io/workload-name": name})
    yield server
    server.stop()


@pytest.fixture(scope="session")
def hung_prometheus(prometheus):
    """The real Prometheus behind a proxy that can hold connections (a hung endpoint)."""
    from tests.services.stall_proxy import StallProxy

    proxy = StallProxy("127.0.0.1", prometheus.port).start()
    yield proxy
    proxy.stop()


@pytest.fixture(scope="session")
def stack(tmp_path_factory, kube, request, wheel_bin, hung_prometheus):
    """Prefect server, `attribution deploy`, worker and serve, from the wheel in a fresh venv started
    from / (as an operator installs it), with clusters: `lab` (static, the worked example's files),
    `k8s` (Kueue via the stand-in), `ci` (the real Slurm, by sacct) and `ci-hung` (the real Slurm by
    slurmrestd, its metrics from the real Prometheus behind the stall proxy)."""
    import yaml

    from tests.services.prefect_stack import PrefectStack

    base = tmp_path_factory.mktemp("stack")
    try:
        slurm = request.getfixturevalue("slurm")
    except pytest.skip.Exception:
        slurm = None
    files = lambda bundle, src: {"connector": "files", "path": str(bundle / "logs" / src / "{host}.log")}  # noqa: E731
    cfg = {
        "warehouse": str(base / "warehouse.duckdb"),
        "service": {"answer_within_s": 15},  # CI machines are slow: answers here carry the flow run id
        "clusters": {
            "lab": {
                "scheduler": "static",
                "timezone": "Europe/Berlin",
                "sources": {s: files(WORKED, s) for s in ("app", "syslog", "fabricmanager")},
            },
            "k8s": {
                "scheduler": "kueue",
                "kueue": {"url": kube.url, "namespace": "team-a", "token_env": None},
                "sources": {s: files(OOM, s) for s in ("app", "syslog")},
            },
            "ci": {"scheduler": "slurm", "slurm": {}},
            "ci-hung": {  # scoped and discovered through slurmrestd
                "scheduler": "slurm",
                "slurm": {"rest_url": slurm["SLURMRESTD_URL"]} if slurm else {},
                "sources": {"metrics": {"connector": "prometheus", "url": hung_prometheus.url, "timeout_s": 300}},
            },
        },
    }
    (base / "attribution.yaml").write_text(yaml.safe_dump(cfg))
    extra = {"SLURM_CONF": slurm["SLURM_CONF"]} if slurm else {}
    extra["ATTRIBUTION_HEARTBEAT_S"] = "2"  # the worker's heartbeats, so a killed worker's runs crash soon
    s = PrefectStack(base, base / "attribution.yaml", extra, bin_dir=wheel_bin, deploy_args=["--zombie-after", "15"])
    s.slurm = slurm
    try:
        s.start()
    except Exception:
        s.stop()
        raise
    yield s
    s.stop()
