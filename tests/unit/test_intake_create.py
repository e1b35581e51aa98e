"""The service creates its flow runs as Prefect's client would, without the server's schema check."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import uuid4


class _Response:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def json(self) -> dict[str, Any]:
        return self.doc


class _Client:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict[str, Any]]] = []

    async def request(self, method: str, path: str, path_params: dict[str, Any], json: dict[str, Any]) -> _Response:
        from prefect.client.schemas.objects import FlowRun

        self.sent.append((method, path.format(**path_params), json))
        run = FlowRun(flow_id=uuid4(), name=json["name"], parameters=json["parameters"])
        return _Response(run.model_dump(mode="json"))


def test_a_run_is_created_scheduled_under_its_key_and_the_parameters_are_not_checked_again_by_the_server():
    from workload_attribution.service.intake import create_flow_run

    client, deployment = _Client(), uuid4()
    params = {"target": {"cluster": "k8s", "job_id": "team-a/wl", "attempt": 0}}
    run = asyncio.run(create_flow_run(client, deployment, "k8s:kueue:team-a/wl:0", params, ["trigger:kubernetes"]))
    [(method, path, body)] = client.sent
    assert (method, path) == ("POST", f"/deployments/{deployment}/create_flow_run")
    assert body["enforce_parameter_schema"] is False
    assert body["parameters"] == params and body["tags"] == ["trigger:kubernetes"]
    assert body["idempotency_key"] == "k8s:kueue:team-a/wl:0"
    assert body["name"] == "k8s:team-a/wl:0"  # what the flow names its run: it need not rename it
    assert body["state"]["type"] == "SCHEDULED"
    assert run.name == "k8s:team-a/wl:0"


def test_a_run_is_named_after_its_target_as_the_flow_names_it_else_after_its_key():
    from workload_attribution.contracts.identity import Target
    from workload_attribution.service.intake import run_name

    target = Target(cluster="k8s", job_id="team-a/wl", attempt=2)
    assert run_name("k", {"target": target.model_dump(mode="json", exclude_none=True)}) == target.describe()
    assert run_name("k8s:kueue:team-a/wl:2", {"target": "not a target"}) == "k8s-kueue-team-a/wl-2"
