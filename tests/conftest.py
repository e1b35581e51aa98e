"""Test settings. Prefect is configured before anything imports it: a private, reused PREFECT_HOME
(migrated once, gitignored), no telemetry, a generous ephemeral-server start-up timeout."""

import atexit
import os
import pathlib
import shutil
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Nothing a test runs may touch the user's home: state, data and caches live in this run's directory.
RUN_DIR = pathlib.Path(tempfile.mkdtemp(prefix="attribution-tests-"))
# one per test process (the controller and each xdist worker): gone when that process ends, so
# runs on a shared host leave nothing behind
atexit.register(shutil.rmtree, RUN_DIR, ignore_errors=True)
for var in ("XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
    os.environ[var] = str(RUN_DIR / var.lower())
os.environ.pop("ATTRIBUTION_CONFIG", None)
_home = ROOT / ".prefect-test-home"
_home.mkdir(exist_ok=True)
os.environ["PREFECT_HOME"] = str(_home)
os.environ.pop("PREFECT_API_URL", None)
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "90"
os.environ["PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW"] = "ignore"
os.environ["PREFECT_TASKS_DEFAULT_NO_CACHE"] = "true"
os.environ["PREFECT_LOGGING_LEVEL"] = "WARNING"

import pytest  # noqa: E402

EXAMPLES = ROOT / "tests" / "regression"
WORKED = ROOT / "tests" / "examples" / "xid149-worked"


@pytest.fixture
def staging():
    """A fresh staging database with the log-time macros, as a connection."""
    from workload_attribution.contracts.models import AttemptScope
    from workload_attribution.staging.attempt import create_staging
    from workload_attribution.staging.database import connect, release_staging

    scope = AttemptScope(
        cluster="c",
        scheduler="slurm",
        job_id="1",
        attempt=0,
        nodes=["n1"],
        start="2026-11-20T10:00:00Z",
        end="2026-11-20T12:00:00Z",
        state="FAILED",
        timezone="Europe/Berlin",
    )
    path = create_staging(scope)
    con = connect(path)
    yield con
    con.close()
    release_staging(path)


PLANTED_PORT = ("leaf-07", "17")


@pytest.fixture(scope="session")
def seeded_warehouse(tmp_path_factory):
    """A warehouse seeded from the scenario generator in fleet mode: one cluster cabled to 40 leaf
    switches, every class, and a bad port (leaf-07:17) under which every network_link root sits,
    whichever host is cabled there at the time."""
    from tests.scenarios.generator import generate
    from workload_attribution.flows.backfill import backfill_inline

    base = tmp_path_factory.mktemp("seeded")
    generate(base / "bundles", per_class=1, seed=77, fleet_leaves=40, plant_port=":".join(PLANTED_PORT), plant_extra=4)
    wh = base / "warehouse.duckdb"
    summary = backfill_inline(since="3650d", bundles_dir=str(base / "bundles"), warehouse=str(wh), concurrency=2)
    assert summary.failed == 0, summary.failures
    return wh


# Tests run in two processes (pyproject: -n 2), a group at a time. A group is a module, so its module
# fixtures are built once, except where modules share something costly to build, which a group keeps
# on one process: the Prefect stack (a server, a worker and serve from the wheel's venv), the Prefect
# test home of the flow tests. Session services that start in seconds (Slurm, Prometheus, PostgreSQL)
# start in each process that needs them, so the integration tests spread over both processes.
GROUPS = {
    "tests/integration/test_operations.py": "prefect-stack",
    "tests/integration/test_triggers.py": "prefect-stack",
    "tests/integration/test_wheel.py": "prefect-stack",  # the wheel's venv, which the stack runs
    "tests/flow/": "prefect-home",
}


def group_of(path: str) -> str:
    return next((group for prefix, group in GROUPS.items() if path.startswith(prefix)), path)


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByServiceScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid.split("::", 1)[0])

    return ByServiceScheduling(config, log)
