"""`attribution serve` in-process (FastAPI's TestClient): authentication, limits, validation, what
is recorded instead of diagnosed, reads from a real warehouse, metrics, the OpenAPI schema.

Every request here is refused or answered before any flow run is started, so the trigger is a
recorder that fails the test if it is ever called where it must not be; the path that does start
runs is tested against a real Prefect server in tests/integration/test_triggers.py.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.conftest import WORKED
from tests.waiting import wait_until
from workload_attribution.flows.config import Config
from workload_attribution.service.app import create_app
from workload_attribution.service.auth import sign

TOKEN, SECRET = "tok-123", "sec-456"
FAILED = {"cluster": "eos", "job_id": "4191701", "state": "FAILED", "nodes": "gb-r12-n[01-06]", "exit_code": "1:0"}


class MustNotStart:
    def __init__(self):
        self.calls = []

    async def start(self, key, parameters, tags):
        self.calls.append(key)
        raise AssertionError(f"no flow run may start here ({key})")


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTRIBUTION_API_TOKEN", TOKEN)
    monkeypatch.setenv("ATTRIBUTION_WEBHOOK_SECRET", SECRET)
    cfg = Config(
        warehouse=str(tmp_path / "w.duckdb"),
        clusters={"eos": {"scheduler": "slurm"}, "k8s": {"scheduler": "kueue"}},
        service={"outbox_dir": str(tmp_path / "outbox")},
    )
    trigger = MustNotStart()
    return TestClient(create_app(cfg, trigger)), trigger, cfg


def signed(body: bytes, **kw) -> dict:
    return {**sign(SECRET, body, **kw), "Content-Type": "application/json"}


def post_slurm(client, doc, headers=None):
    body = json.dumps(doc).encode()
    return client.post("/v1/webhooks/slurm", content=body, headers=headers if headers is not None else signed(body))


@pytest.mark.parametrize(
    "case, headers, status",
    [
        ("no signature", {}, 401),
        ("signature of another body", "other", 403),
        ("wrong secret", "wrong-secret", 403),
        ("stale timestamp", "stale", 403),
        ("future timestamp", "future", 403),
        ("malformed timestamp", "malformed", 403),
    ],
)
def test_webhook_signature_is_required(env, case, headers, status):
    client, trigger, _ = env
    body = json.dumps(FAILED).encode()
    if headers == "other":
        headers = signed(b'{"cluster": "eos"}')
    elif headers == "wrong-secret":
        headers = {**sign("not-the-secret", body), "Content-Type": "application/json"}
    elif headers == "stale":
        headers = signed(body, timestamp=int(time.time()) - 301)
    elif headers == "future":
        headers = signed(body, timestamp=int(time.time()) + 301)
    elif headers == "malformed":
        headers = {**signed(body), "X-Attribution-Timestamp": "12a"}
    r = client.post("/v1/webhooks/slurm", content=body, headers=headers)
    assert r.status_code == status
    # nothing about why leaks to the caller, only the scope the route needs; the reason is counted in /metrics
    assert r.json() == {
        "detail": "authentication required: a credential with the 'trigger' scope"
        if status == 401
        else "forbidden: this route needs the 'trigger' scope",
        "scope": "trigger",
    }
    assert trigger.calls == []
    assert 'attribution_auth_failures_total{reason="' in client.get("/metrics").text


@pytest.mark.parametrize(
    "auth, status", [(None, 401), ("Bearer nope", 403), ("Basic dG9rLTEyMw==", 403), (f"Bearer {TOKEN}x", 403)]
)
def test_bearer_token_is_required(env, auth, status):
    client, trigger, _ = env
    headers = {"Authorization": auth} if auth else {}
    body = {"cluster": "eos", "job_id": "1"}
    assert client.post("/v1/attempts", json=body, headers=headers).status_code == status
    assert client.get("/v1/diagnoses", headers=headers).status_code == status
    assert client.get("/v1/diagnoses/0f8e4c57-6c1c-5d6b-9d54-6ee4c2a8a001", headers=headers).status_code == status
    assert trigger.calls == []


def test_oversized_body_is_refused_before_reading_it_all(env):
    client, trigger, _ = env
    body = json.dumps({**FAILED, "nodes": "n" * 70000}).encode()
    assert client.post("/v1/webhooks/slurm", content=body, headers=signed(body)).status_code == 413

    def chunks():  # no Content-Length: counted while streaming
        for _ in range(100):
            yield b"x" * 1024

    r = client.post("/v1/webhooks/slurm", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert trigger.calls == []


@pytest.mark.parametrize(
    "doc, field",
    [
        (b"{not json", "body"),
        ({**FAILED, "job_id": "123; DROP TABLE diagnoses"}, "job_id"),
        ({**FAILED, "job_id": 123456}, "job_id"),
        ({**FAILED, "state": "FAILED\nX-Injected: 1"}, "state"),
        ({**FAILED, "cluster": "../etc"}, "cluster"),
        ({**FAILED, "attempt": -1}, "attempt"),
        ({**FAILED, "attempt": "one"}, "attempt"),
        ({**FAILED, "start": "yesterday"}, "start"),
        ({**FAILED, "unexpected": 1}, "unexpected"),
        ({k: v for k, v in FAILED.items() if k != "state"}, "state"),
        ({**FAILED, "cluster": "other"}, "cluster"),  # not a configured cluster
    ],
)
def test_malformed_webhook_is_422_naming_the_field(env, doc, field):
    client, trigger, _ = env
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    r = client.post("/v1/webhooks/slurm", content=body, headers=signed(body))
    assert r.status_code == 422, r.text
    assert field in [d["field"] for d in r.json()["detail"]]
    assert trigger.calls == []


@pytest.mark.parametrize(
    "doc, error",
    [
        ({"cluster": "eos"}, "either job_id or nodes"),
        ({"cluster": "eos", "job_id": "1", "nodes": ["a"]}, "either job_id or nodes"),
        ({"cluster": "eos", "nodes": ["a"], "start": "2026-11-20T10:00:00Z"}, "nodes need start and end"),
        (
            {"cluster": "eos", "nodes": ["a"], "start": "2026-11-20T10:00:00Z", "end": "2026-11-20T09:00:00Z"},
            "end must be after start",
        ),
        ({"cluster": "eos", "nodes": ["a"], "start": "2026-11-20T10:00:00", "end": "2026-11-20T11:00:00"}, "time zone"),
        (
            {
                "cluster": "eos",
                "nodes": ["host with space"],
                "start": "2026-11-20T10:00:00Z",
                "end": "2026-11-20T11:00:00Z",
            },
            "pattern",
        ),
    ],
)
def test_explicit_attempt_validation(env, doc, error):
    client, trigger, _ = env
    r = client.post("/v1/attempts", json=doc, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 422
    assert error in json.dumps(r.json())
    assert trigger.calls == []


def test_completed_attempts_are_recorded_not_diagnosed(env):
    client, trigger, _ = env
    r = post_slurm(client, {**FAILED, "state": "COMPLETED", "exit_code": "0:0"})
    assert r.status_code == 200
    assert r.json() == {
        "status": "recorded",
        "idempotency_key": "eos:slurm:4191701:0",
        "flow_run_id": None,
        "duplicate": False,
        "reason": "job COMPLETED",
    }
    wl = {
        "cluster": "k8s",
        "namespace": "team-a",
        "name": "train-1",
        "conditions": [{"type": "Finished", "status": "True", "reason": "Succeeded"}],
    }
    body = json.dumps(wl).encode()
    r = client.post("/v1/webhooks/kubernetes", content=body, headers=signed(body))
    assert r.status_code == 200 and r.json()["status"] == "recorded"
    assert trigger.calls == []
    assert 'attribution_triggers_total{outcome="recorded",source="slurm"} 1.0' in client.get("/metrics").text


def test_prefect_down_is_503_with_retry_after(env, monkeypatch):
    client, trigger, _ = env

    async def down(key, parameters, tags):
        raise ConnectionError("All connection attempts failed")

    monkeypatch.setattr(trigger, "start", down)
    r = post_slurm(client, FAILED)
    assert r.status_code == 503 and r.headers["Retry-After"] == "10"
    assert "connection" not in r.text.lower()
    assert "attribution_trigger_failures_total 1.0" in client.get("/metrics").text


def test_reads_come_from_the_warehouse(env):
    from tests.helpers import diagnose

    client, _, cfg = env
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert client.get("/v1/diagnoses", headers=auth).json()["items"] == []  # no warehouse yet: empty, not an error
    d = diagnose(WORKED, warehouse=cfg.warehouse)
    items = client.get(
        "/v1/diagnoses", params={"cluster": "eos", "terminal_state": "hardware_failure"}, headers=auth
    ).json()["items"]
    assert [i["diagnosis_id"] for i in items] == [d.diagnosis_id]
    assert items[0]["affected_nodes"] == ["gb-r12-n04"] and items[0]["attempt_end"].startswith("2026-11-20T12:13:07")
    for params in (
        {"cluster": "other"},
        {"terminal_state": "completed"},
        {"node": "gb-r12-n01"},
        {"since": "2026-11-21T00:00:00Z"},
        {"until": "2026-11-20T00:00:00Z"},
    ):
        assert client.get("/v1/diagnoses", params=params, headers=auth).json()["items"] == [], params
    doc = client.get(f"/v1/diagnoses/{d.diagnosis_id}", headers=auth).json()
    assert doc["diagnosis_id"] == d.diagnosis_id and doc["sub_domain"] == "nvlink"
    assert client.get("/v1/diagnoses/00000000-0000-0000-0000-000000000000", headers=auth).status_code == 404
    assert client.get("/v1/diagnoses/x' OR 1=1 --", headers=auth).status_code in (404, 422)
    assert client.get("/v1/diagnoses", params={"node": "a' OR '1'='1"}, headers=auth).status_code == 422
    assert client.get("/v1/diagnoses", params={"limit": 5000}, headers=auth).status_code == 422
    metrics = client.get("/metrics").text
    assert 'attribution_diagnoses{terminal_state="hardware_failure"} 1.0' in metrics


def test_openapi_documents_every_endpoint_and_payload(env):
    client, _, _ = env
    spec = client.get("/openapi.json").json()
    assert {
        "/v1/webhooks/slurm",
        "/v1/webhooks/kubernetes",
        "/v1/attempts",
        "/v1/diagnoses",
        "/v1/diagnoses/{diagnosis_id}",
        "/healthz",
        "/metrics",
    } <= set(spec["paths"])
    body = spec["paths"]["/v1/webhooks/slurm"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert {"cluster", "job_id", "state"} <= set(body["required"])


def test_serve_refuses_to_start_without_secrets(monkeypatch, capsys):
    from workload_attribution.cli import main

    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:1/api")
    monkeypatch.delenv("ATTRIBUTION_API_TOKEN", raising=False)
    monkeypatch.delenv("ATTRIBUTION_WEBHOOK_SECRET", raising=False)
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "set ATTRIBUTION_API_TOKEN (or ATTRIBUTION_API_TOKENS, or service.tokens_file)" in err
    assert "and ATTRIBUTION_WEBHOOK_SECRET" in err
    monkeypatch.delenv("PREFECT_API_URL")
    assert main(["serve", "--insecure-no-auth"]) == 2
    assert "PREFECT_API_URL" in capsys.readouterr().err


def test_dashboard_needs_the_token_and_escapes_what_it_shows(env):
    from tests.helpers import diagnose
    from workload_attribution.warehouse.store import Warehouse

    client, _, cfg = env
    d = diagnose(WORKED)
    hostile = "<img src=x onerror=alert(1)>"
    Warehouse(cfg.warehouse).write(d.model_copy(update={"explanation": hostile}))
    r = client.get("/ui", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"
    assert client.get(f"/ui/diagnoses/{d.diagnosis_id}", follow_redirects=False).status_code == 303
    r = client.post(
        "/ui/login",
        content=b"token=nope",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )
    assert r.status_code == 403 and "set-cookie" not in r.headers
    r = client.post(
        "/ui/login",
        content=f"token={TOKEN}".encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )
    cookie = r.headers["set-cookie"]
    assert r.status_code == 303 and "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie
    page = client.get(f"/ui/diagnoses/{d.diagnosis_id}").text  # the cookie is kept by the client
    assert hostile not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    client.cookies.clear()
    assert client.get("/ui", follow_redirects=False).status_code == 303
    assert client.get("/ui", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


class HeldPrefect:
    """Prefect that answers only once the test lets it (`release`): busy for as long as the test
    needs, or failing then."""

    def __init__(self, fail: bool = False):
        self.fail, self.created = fail, []
        self.release = threading.Event()

    async def start(self, key, parameters, tags):
        import asyncio

        await asyncio.to_thread(self.release.wait, 60)
        if self.fail:
            raise RuntimeError("database is locked")
        self.created.append(key)
        return f"run-{len(self.created)}", False

    async def reset(self):
        pass


@pytest.mark.parametrize("fail", [False, True])
def test_a_busy_orchestrator_gets_the_caller_an_answer_in_time_and_the_run_still_made(monkeypatch, tmp_path, fail):
    monkeypatch.setenv("ATTRIBUTION_API_TOKEN", TOKEN)
    monkeypatch.setenv("ATTRIBUTION_WEBHOOK_SECRET", SECRET)
    cfg = Config(
        warehouse=str(tmp_path / "w.duckdb"),
        clusters={"eos": {"scheduler": "slurm"}},
        service={"answer_within_s": 0.2, "outbox_dir": str(tmp_path / "outbox")},
    )
    held = HeldPrefect(fail=fail)
    with TestClient(create_app(cfg, held)) as client:
        r = post_slurm(client, FAILED)  # answered while Prefect still holds the creation
        assert not held.release.is_set()
        assert r.status_code == 202 and r.json()["status"] == "queued" and r.json()["flow_run_id"] is None
        assert r.json()["idempotency_key"] == "eos:slurm:4191701:0"
        held.release.set()  # the creation goes on after the answer
        started = 'attribution_flow_runs_started_total{source="slurm"}'
        done = "attribution_trigger_failures_total 1.0" if fail else started

        def outcome() -> str | None:
            text = client.get("/metrics").text
            return text if done in text else None

        metrics = wait_until(outcome, "the late creation's outcome")
    if fail:
        assert held.created == [] and "attribution_trigger_failures_total 1.0" in metrics
    else:
        assert held.created == ["eos:slurm:4191701:0"]
        assert 'attribution_triggers_total{outcome="started_late",source="slurm"} 1.0' in metrics
        assert 'attribution_flow_runs_started_total{source="slurm"} 1.0' in metrics


def test_one_app_takes_triggers_from_any_event_loop(monkeypatch, tmp_path):
    """What a trigger waits on is made in its request's own loop: an app is not bound to the first
    loop that served it (a test client per test, an embedding server)."""
    import asyncio

    monkeypatch.setenv("ATTRIBUTION_API_TOKEN", TOKEN)
    monkeypatch.setenv("ATTRIBUTION_WEBHOOK_SECRET", SECRET)
    cfg = Config(
        warehouse=str(tmp_path / "w.duckdb"),
        clusters={"eos": {"scheduler": "slurm"}},
        service={"outbox_dir": str(tmp_path / "outbox")},
    )

    class Accepts:
        async def start(self, key, parameters, tags):
            await asyncio.sleep(0.1)  # a real server's round trip: the request waits on its stop future meanwhile
            return f"run-{key}", False

        async def reset(self):
            pass

    app = create_app(cfg, Accepts())

    async def trigger(job: str) -> str:
        body = json.dumps({**FAILED, "job_id": job}).encode()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc") as client:
            r = await client.post("/v1/webhooks/slurm", content=body, headers=signed(body))
            return f"{r.status_code} {r.json()['status']}"

    assert [asyncio.run(trigger(job)) for job in ("11", "12")] == ["202 accepted", "202 accepted"]


def test_the_service_stopping_answers_what_it_still_holds(monkeypatch, tmp_path, caplog):
    """SIGTERM with requests in flight (uvicorn's graceful shutdown, 0.5 s here): a trigger still
    waiting for Prefect is answered 'queued' at once, its run made at the next start from the
    outbox; a request outliving the deadline, which uvicorn cancels and would answer with a bare
    500, is answered 503 + Retry-After (the sender keeps it and sends it again)."""
    import asyncio

    import uvicorn

    from tests.services.prometheus import free_port
    from workload_attribution.cli.serve import make_server
    from workload_attribution.service import bounded
    from workload_attribution.service.intake import Outbox

    caplog.set_level("INFO", logger="workload_attribution.service")
    monkeypatch.setenv("ATTRIBUTION_API_TOKEN", TOKEN)
    monkeypatch.setenv("ATTRIBUTION_WEBHOOK_SECRET", SECRET)
    cfg = Config(
        warehouse=str(tmp_path / "w.duckdb"),
        clusters={"eos": {"scheduler": "slurm"}},
        service={"answer_within_s": 60, "outbox_dir": str(tmp_path / "outbox")},
    )
    held = HeldPrefect(fail=False)
    app = create_app(cfg, held)
    slow_began = threading.Event()

    async def slow() -> dict:  # any request that outlives the stop (a large POST /v1/diagnose, a read)
        slow_began.set()
        await asyncio.Event().wait()
        return {}

    app.add_api_route("/slow", slow)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical", http=bounded.protocol(5, 5, 64))
    config.timeout_graceful_shutdown = 0.5
    server = make_server(config, app)
    serving = threading.Thread(target=server.run, daemon=True)
    serving.start()
    wait_until(lambda: server.started, "the service to listen")
    answers: dict = {}
    body = json.dumps(FAILED).encode()
    senders = [
        threading.Thread(
            target=lambda: answers.__setitem__(
                "trigger", httpx.post(f"{url}/v1/webhooks/slurm", content=body, headers=signed(body), timeout=30)
            )
        ),
        threading.Thread(target=lambda: answers.__setitem__("slow", httpx.get(f"{url}/slow", timeout=30))),
    ]
    for t in senders:
        t.start()
    wait_until(lambda: Outbox(tmp_path / "outbox").pending() and slow_began.is_set(), "both requests in flight")
    server.should_exit = True  # what SIGTERM does; Prefect still holds the creation
    for t in senders:
        t.join(30)
    wait_until(lambda: "stopped: 1 trigger(s) left in the outbox" in caplog.text, "the service to say what it left")
    held.release.set()  # Prefect answers only once the service is gone
    serving.join(30)
    trigger, cut = answers["trigger"], answers["slow"]
    assert trigger.status_code == 202 and trigger.json()["status"] == "queued", trigger.text
    assert cut.status_code == 503 and cut.headers["Retry-After"] == "10", (cut.status_code, cut.text)
    assert "stopping" in cut.json()["detail"]
    assert [e.key for e in Outbox(tmp_path / "outbox").pending()] == ["eos:slurm:4191701:0"]  # made at next start


# ------------------------------------------------------------------ ids, signatures, time filters


@pytest.mark.parametrize(
    "doc, field",
    [
        ({"cluster": "eos", "job_id": "../../../etc/passwd"}, "job_id"),  # a Slurm cluster: digits only
        ({"cluster": "k8s", "job_id": "../../../etc/passwd"}, "job_id"),  # a Kueue cluster: RFC 1123 names
        ({"cluster": "eos", "job_id": "1\n2"}, "job_id"),
        ({"cluster": "../eos", "job_id": "1"}, "cluster"),
        (
            {"cluster": "eos", "nodes": ["../../etc"], "start": "2026-11-20T10:00:00Z", "end": "2026-11-20T11:00:00Z"},
            "nodes.0",
        ),
    ],
)
def test_explicit_attempt_ids_are_validated_like_the_webhooks(env, doc, field):
    """/v1/attempts checks a job id with the scheduler's own form (its module's check_job_id, found in
    the scheduler registry), the same check the webhooks' job ids and workload names pass; the answer
    names the field."""
    client, trigger, _ = env
    r = client.post("/v1/attempts", json=doc, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 422, r.text
    assert field in [d["field"] for d in r.json()["detail"]], r.text
    assert "/etc/passwd" not in json.dumps([d["field"] for d in r.json()["detail"]])
    assert trigger.calls == []
    for path, body in (
        ("/v1/webhooks/slurm", {**FAILED, "job_id": "../../../etc/passwd"}),
        (
            "/v1/webhooks/kubernetes",
            {"cluster": "k8s", "namespace": "team-a", "name": "../../../etc/passwd", "conditions": []},
        ),
    ):
        raw = json.dumps(body).encode()
        r = client.post(path, content=raw, headers=signed(raw))
        assert r.status_code == 422 and r.json()["detail"][0]["field"] in ("job_id", "name"), r.text


@pytest.mark.parametrize(
    "garbage",
    [
        "..%2F..%2F..%2Fetc%2Fpasswd",
        "x' OR 1=1 --",
        "%00",
        "%C3%BC" * 20,
        "a" * 5000,
        "0f8e4c57-6c1c-5d6b-9d54-6ee4c2a8a00g",
        "{{7*7}}",
    ],
)
def test_a_garbage_diagnosis_id_is_404_or_422_never_500(env, garbage):
    client, _, _ = env
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = client.get(f"/v1/diagnoses/{garbage}", headers=auth)
    assert r.status_code in (404, 422), (r.status_code, r.text)
    if r.status_code == 422:
        assert r.json()["detail"] == [{"field": "diagnosis_id", "error": "not a diagnosis id (UUID)"}]
    assert client.get(f"/ui/diagnoses/{garbage}", headers=auth).status_code == 404


def test_hex_signatures_are_accepted_in_either_case(env):
    client, trigger, _ = env
    body = json.dumps({**FAILED, "state": "COMPLETED", "exit_code": "0:0"}).encode()
    headers = signed(body)
    mac = headers["X-Attribution-Signature"].partition("=")[2]
    for sig in (f"sha256={mac.upper()}", f"SHA256={mac}", f"sha256={mac[:32].upper()}{mac[32:]}"):
        r = client.post("/v1/webhooks/slurm", content=body, headers={**headers, "X-Attribution-Signature": sig})
        assert r.status_code == 200 and r.json()["status"] == "recorded", (sig, r.text)
    wrong = mac[:-1] + ("0" if mac[-1] != "0" else "1")
    r = client.post(
        "/v1/webhooks/slurm", content=body, headers={**headers, "X-Attribution-Signature": f"sha256={wrong}"}
    )
    assert r.status_code == 403
    assert trigger.calls == []


def test_reads_take_relative_times_and_name_a_bad_one(env):
    from tests.helpers import diagnose

    client, _, cfg = env
    auth = {"Authorization": f"Bearer {TOKEN}"}
    d = diagnose(WORKED, warehouse=cfg.warehouse)  # its attempt ended 2026-11-20T12:13:07Z
    for since, found in (("3650d", True), ("1h", False), ("now", False), ("2026-11-20T12:00:00Z", True)):
        r = client.get("/v1/diagnoses", params={"since": since}, headers=auth)
        assert r.status_code == 200 and (r.json()["total"] == 1) == found, (since, r.text)
        assert [i["diagnosis_id"] for i in r.json()["items"]] == ([d.diagnosis_id] if found else [])
    assert client.get("/v1/diagnoses", params={"until": "3650d"}, headers=auth).json()["total"] == 0
    for bad in ("last tuesday", "99999999999d", "7 days"):
        r = client.get("/v1/diagnoses", params={"since": bad}, headers=auth)
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "since", (bad, r.text)
    assert client.get("/ui", params={"since": "99999999999d"}, headers=auth).status_code == 422


def test_concurrent_first_scrapes_read_the_warehouse_once():
    """32 scrapes arriving together on a fresh service share one warehouse read; later scrapes within
    refresh_s read nothing, and the read after it happens in the background: a scrape never waits
    for a slow warehouse once there is a snapshot."""
    from workload_attribution.service.metrics import Metrics

    reads = []
    warehouse_answers = threading.Event()
    warehouse_answers.set()  # the first read answers; the one behind a stale scrape waits for the test

    def by_state():
        reads.append(time.monotonic())
        warehouse_answers.wait(60)  # a slow warehouse: as slow as the test says
        return [("hardware_failure", 3)]

    m = Metrics(by_state, None, refresh_s=0.5)
    start = threading.Barrier(32)
    texts: list[bytes] = []

    def scrape():
        start.wait()
        texts.append(m.text())

    threads = [threading.Thread(target=scrape) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(reads) == 1
    assert all(b'attribution_diagnoses{terminal_state="hardware_failure"} 3.0' in t for t in texts)
    for _ in range(50):
        m.text()
    assert len(reads) == 1
    warehouse_answers.clear()
    time.sleep(0.6)  # the thing under test: the snapshot's refresh_s (0.5 s) runs out
    stale: list[bytes] = []
    scraper = threading.Thread(target=lambda: stale.append(m.text()))
    scraper.start()
    scraper.join(10)  # the warehouse answers only when the test says: a scrape that waited for it hangs
    assert not scraper.is_alive() and b'attribution_diagnoses{terminal_state="hardware_failure"} 3.0' in stale[0]
    wait_until(lambda: len(reads) == 2, "the refresh behind the stale scrape to start")
    warehouse_answers.set()
    wait_until(lambda: b"attribution_diagnoses_snapshots_total 2.0" in m.text(), "the refreshed snapshot")
    assert len(reads) == 2
