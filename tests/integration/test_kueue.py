"""Kueue/Kubernetes connector against an API stand-in (no kube-apiserver can run here; see
tests/services/kube_standin.py) serving the recorded objects of the Kueue example bundles."""

import pytest

from tests.conftest import EXAMPLES
from tests.helpers import collect_bundle, coverage_of
from tests.services.kube_standin import KubeStandIn
from workload_attribution.connectors.kueue import KueueSource, fetch, scope_from
from workload_attribution.contracts.errors import TransientSourceError
from workload_attribution.contracts.models import CoverageStatus
from workload_attribution.rules.pack import default_pack
from workload_attribution.staging.attempt import create_staging
from workload_attribution.staging.database import release_staging

OOM = EXAMPLES / "host_oom_kueue-1-0"
PREEMPTED = EXAMPLES / "kueue_preempted-1-0"


@pytest.fixture(scope="module")
def api():
    server = KubeStandIn(namespace="llm-train", token="s3cret").start()
    import json

    for b in (OOM, PREEMPTED):
        name = json.loads((b / "scheduler" / "workload.json").read_text())["metadata"]["name"]
        server.load_bundle(b / "scheduler", {"kueue.x-k8s.io/workload-name": name})
    yield server
    server.stop()


def _src(api, **kw):
    return KueueSource(url=api.url, namespace="llm-train", **kw)


@pytest.fixture(autouse=True)
def token(monkeypatch):
    monkeypatch.setenv("KUBE_TOKEN", "s3cret")


def _diagnose(bundle, api):
    import yaml

    from workload_attribution.connectors import kueue
    from workload_attribution.connectors.registry import CollectContext
    from workload_attribution.tasks.steps import ScopedAttempt, attribute, normalize_collected

    objects = fetch(_src(api), yaml.safe_load((bundle / "attempt.yaml").read_text())["job_id"])
    scope = scope_from(objects, cluster="eos")
    staging = create_staging(scope)
    try:
        pack = default_pack()
        results = [kueue.store(CollectContext(source="kueue", scope=scope, staging=staging, config=_src(api)), objects)]
        for s in ("app", "syslog", "metrics"):
            results.append(collect_bundle(bundle, scope, s, staging, pack.prefilter(s)))
        scoped = ScopedAttempt(scope=scope, staging=staging)
        return scope, attribute(scoped, normalize_collected(scoped, results), pack)
    finally:
        release_staging(staging)


def test_scopes_a_workload_from_the_api(api):
    objects = fetch(_src(api), "pytorchjob-moe-8x22b-b9d4b")
    scope = scope_from(objects, cluster="eos")
    assert scope.nodes == ["trn-111", "trn-112", "trn-113", "trn-114"]
    assert scope.state == "Finished:Failed" and scope.exit_code == "1"
    assert (
        scope.start.isoformat() == "2026-11-02T18:57:34+00:00" and scope.end.isoformat() == "2026-11-02T21:17:41+00:00"
    )


def test_oomkilled_pod_from_the_api_is_host_oom(api):
    _, d = _diagnose(OOM, api)
    assert (d.terminal_state, d.sub_domain, d.affected_nodes) == ("application_failure", "host_oom", [])
    assert {c.source: c.connector for c in d.coverage}["kueue"] == "kubernetes"


def test_preemption_from_the_api(api):
    _, d = _diagnose(PREEMPTED, api)
    assert (d.terminal_state, d.sub_domain) == ("scheduler_action", "preemption")


def test_wrong_token_is_an_error_not_a_crash(api, monkeypatch):
    from workload_attribution.contracts.models import AttemptScope

    monkeypatch.setenv("KUBE_TOKEN", "wrong")
    scope = AttemptScope(
        cluster="c",
        scheduler="kueue",
        job_id="pytorchjob-moe-8x22b-b9d4b",
        attempt=0,
        nodes=["trn-111"],
        start="2026-11-02T18:00:00Z",
        end="2026-11-02T22:00:00Z",
        state="Failed",
    )
    staging = create_staging(scope)
    try:
        cov = coverage_of(_src(api), scope, staging)
        assert cov.status == CoverageStatus.error and "not authorised" in cov.error
        missing = scope.model_copy(update={"job_id": "no-such-workload"})
        monkeypatch.setenv("KUBE_TOKEN", "s3cret")
        cov = coverage_of(_src(api), missing, staging)
        assert cov.status == CoverageStatus.empty and "not found" in cov.error  # the workload is gone: nothing to read
        api.fail_next.append((503, "{}"))
        with pytest.raises(TransientSourceError):
            coverage_of(_src(api), scope, staging)
        api.fail_next.append((200, "<html>"))
        cov = coverage_of(_src(api), scope, staging)
        assert cov.status == CoverageStatus.error and "not JSON" in cov.error
    finally:
        release_staging(staging)


def test_discover_failed_workloads_pages_and_windows(api):
    from datetime import datetime, timezone

    from workload_attribution.connectors.kueue import discover_failed

    t = lambda text: datetime.fromisoformat(text).replace(tzinfo=timezone.utc)  # noqa: E731
    found = discover_failed(_src(api), t("2026-01-01T00:00:00"), t("2027-01-01T00:00:00"), page_size=1)  # a page each
    assert [(w["job_id"], w["reason"], w["end"], w["attempt"]) for w in found] == [
        ("llm-train/pytorchjob-moe-8x22b-376c1", "Preempted", t("2026-03-07T09:21:44"), 0),
        ("llm-train/pytorchjob-moe-8x22b-b9d4b", "Failed", t("2026-11-02T21:17:41"), 0),
    ]
    # [start, end): the eviction is outside a window that starts after it; an end equal to the window's end is out
    assert [w["reason"] for w in discover_failed(_src(api), t("2026-06-01T00:00:00"), t("2027-01-01T00:00:00"))] == [
        "Failed"
    ]
    assert discover_failed(_src(api), t("2026-01-01T00:00:00"), t("2026-03-07T09:21:44")) == []
