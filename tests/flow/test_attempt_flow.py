"""The Prefect flow under prefect_test_harness (a real temporary Prefect server)."""

import pytest

from tests.conftest import WORKED

pytestmark = pytest.mark.prefect


@pytest.fixture(scope="session", autouse=True)
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


def test_flow_diagnoses_and_publishes(tmp_path, monkeypatch):
    from workload_attribution.contracts.identity import Target
    from workload_attribution.flows.attempt import attribute_attempt
    from workload_attribution.warehouse.store import Warehouse

    wh = tmp_path / "w.duckdb"
    monkeypatch.setenv("ATTRIBUTION_WAREHOUSE", str(wh))  # the flow reads its process's configuration
    doc = attribute_attempt(Target(bundle=str(WORKED)))
    assert (doc["terminal_state"], doc["sub_domain"], doc["affected_nodes"]) == (
        "hardware_failure",
        "nvlink",
        ["gb-r12-n04"],
    )
    assert {c["source"] for c in doc["coverage"]} == {
        "app",
        "syslog",
        "fabricmanager",
        "scheduler_log",
        "sacct",
        "kueue",
        "scheduler_record",
        "metrics",
        "topology",
    }
    assert Warehouse(wh).get("eos", "slurm", "4191701", 0)["diagnosis_id"] == doc["diagnosis_id"]


def test_transient_source_errors_are_retried_and_permanent_ones_recorded(monkeypatch):
    import dataclasses

    from workload_attribution.connectors import registry
    from workload_attribution.contracts.errors import TransientSourceError
    from workload_attribution.contracts.identity import Target
    from workload_attribution.flows.attempt import attribute_attempt

    calls = {"metrics": 0, "topology": 0}
    real = registry.get("bundle")

    def flaky(ctx):
        if ctx.source == "metrics":
            calls["metrics"] += 1
            if calls["metrics"] <= 2:
                raise TransientSourceError("HTTP 503 from exporter")
        if ctx.source == "topology":
            calls["topology"] += 1
            raise TransientSourceError("connection refused")
        return real.collect(ctx)

    monkeypatch.setitem(registry._REGISTRY, "bundle", dataclasses.replace(real, collect=flaky))
    monkeypatch.setenv("ATTRIBUTION_WAREHOUSE", "")  # not stored
    doc = attribute_attempt(Target(bundle=str(WORKED)))
    cov = {c["source"]: c for c in doc["coverage"]}
    assert calls["metrics"] == 3 and cov["metrics"]["status"] == "ok"
    assert calls["topology"] == 4 and cov["topology"]["status"] == "error"
    assert "failed after retries: connection refused" in cov["topology"]["error"]
    assert doc["sub_domain"] == "nvlink"


def test_the_flow_acts_after_publishing(tmp_path, monkeypatch):
    """The story's act step in a flow run: the bundle's cluster (eos) has an actions block (a dry
    run with a notifier): its decision is recorded beside the diagnosis."""
    from workload_attribution.contracts.identity import Target
    from workload_attribution.flows.attempt import attribute_attempt
    from workload_attribution.warehouse.store import Warehouse

    wh = tmp_path / "w.duckdb"
    cfg = tmp_path / "attribution.yaml"
    actions = "{sinks: [{kind: alertmanager, url: 'http://alertmanager:9093'}]}"
    cfg.write_text(f"clusters:\n  eos:\n    scheduler: static\n    actions: {actions}\n")
    monkeypatch.setenv("ATTRIBUTION_CONFIG", str(cfg))
    monkeypatch.setenv("ATTRIBUTION_WAREHOUSE", str(wh))
    doc = attribute_attempt(Target(bundle=str(WORKED)))
    records = Warehouse(wh).actions()
    assert [(r.diagnosis_id, r.sink, r.node, r.outcome.value) for r in records] == [
        (doc["diagnosis_id"], "alertmanager", "gb-r12-n04", "dry_run")
    ]


def test_a_bundle_is_scoped_in_the_flow_run_itself_and_its_sources_are_task_runs(monkeypatch):
    """Scoping a bundle asks no scheduler: a line of the flow run's log, not a task run (three state
    events and a row on the Prefect server); the sources with input stay task runs."""
    import time

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from workload_attribution.contracts.identity import Target
    from workload_attribution.flows import attempt

    said: list[str] = []
    logged = attempt._logged
    monkeypatch.setattr(attempt, "_logged", lambda step, *a, **k: said.append(step) or logged(step, *a, **k))
    collected: list[str] = []  # the sources with input: each a task run
    nothing = attempt.nothing_to_collect
    monkeypatch.setattr(
        attempt, "nothing_to_collect", lambda scoped, source: nothing(scoped, source) or collected.append(source)
    )
    monkeypatch.setenv("ATTRIBUTION_WAREHOUSE", "")
    state = attempt.attribute_attempt(Target(bundle=str(WORKED)), return_state=True)
    assert state.is_completed()
    only = FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
    with get_client(sync_client=True) as client:
        deadline = time.monotonic() + 30
        # task runs are recorded from their state events, a moment later: wait for every collect's
        names = sorted(r.name for r in client.read_task_runs(flow_run_filter=only))
        while len(names) < len(collected) and time.monotonic() < deadline:
            time.sleep(0.2)
            names = sorted(r.name for r in client.read_task_runs(flow_run_filter=only))
    assert collected and names and all(n.startswith("collect-") for n in names), names
    assert said[0] == "scope", said
