"""Test settings. Prefect is configured before anything imports it: a private, reused PREFECT_HOME
(migrated once, gitignored), no telemetry, a generous ephemeral-server start-up timeout."""

import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
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
    from attribution.models import AttemptScope
    from connectors.staging import connect, create_staging, release_staging

    scope = AttemptScope(cluster="c", scheduler="slurm", job_id="1", attempt=0, nodes=["n1"],
                         start="2026-11-20T10:00:00Z", end="2026-11-20T12:00:00Z", state="FAILED",
                         timezone="Europe/Berlin")
    path = create_staging(scope)
    con = connect(path)
    yield con
    con.close()
    release_staging(path)
