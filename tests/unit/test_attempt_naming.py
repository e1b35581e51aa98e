"""An attempt's flow run is named after its target once: a run already so named is not renamed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class _Client:
    def __init__(self) -> None:
        self.renamed: list[tuple[Any, str]] = []

    def set_flow_run_name(self, flow_run_id: Any, name: str) -> None:
        self.renamed.append((flow_run_id, name))


def _run_named(monkeypatch, name: str) -> tuple[SimpleNamespace, _Client]:
    import prefect.context

    client = _Client()
    run = SimpleNamespace(id="run-1", name=name)
    monkeypatch.setattr(
        prefect.context.FlowRunContext, "get", classmethod(lambda cls: SimpleNamespace(flow_run=run, client=client))
    )
    return run, client


def test_a_run_created_under_another_name_is_renamed_after_its_target(monkeypatch):
    from workload_attribution.contracts.identity import Target
    from workload_attribution.flows.attempt import _named

    target = Target(cluster="k8s", job_id="team-a/wl", attempt=0)
    run, client = _run_named(monkeypatch, "clever-otter")  # the UI's "run" or the API's
    _named(target)
    assert client.renamed == [("run-1", "k8s:team-a/wl:0")] and run.name == "k8s:team-a/wl:0"


def test_a_run_serve_named_after_its_target_is_not_renamed(monkeypatch):
    from workload_attribution.contracts.identity import Target
    from workload_attribution.flows.attempt import _named
    from workload_attribution.service.intake import run_name

    target = Target(cluster="k8s", job_id="team-a/wl", attempt=0)
    named = run_name("k8s:kueue:team-a/wl:0", {"target": target.model_dump(mode="json", exclude_none=True)})
    _, client = _run_named(monkeypatch, named)
    _named(target)
    assert client.renamed == []
