"""Scoped credentials: each token may do what its scopes say and nothing more, every refusal names
the scope it lacked (and /metrics counts it by scope), tokens are stored hashed and change without
a restart, and the dashboard's session is the service's (the cookie a random id, never a token),
refused at once when it is ended, revoked or expired."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fastapi import Depends
from fastapi.testclient import TestClient

from tests.conftest import WORKED
from workload_attribution.cli import main
from workload_attribution.flows.config import Config
from workload_attribution.service.app import create_app
from workload_attribution.service.auth import Scope, require
from workload_attribution.service.sessions import COOKIE, Sessions

ADMIN = "the-old-single-token"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


class MustNotStart:
    async def start(self, key, parameters, tags):
        raise AssertionError(f"no flow run may start here ({key})")

    async def reset(self):
        pass


def create(tokens: Path, name: str, *scopes: str, capsys) -> str:
    assert main(["token", "create", name, *[f"--scope={s}" for s in scopes], "--file", str(tokens)]) == 0
    return capsys.readouterr().out.strip()


@pytest.fixture
def service(monkeypatch, tmp_path, capsys):
    """A service with a tokens file holding a token per scope, and the single admin token."""
    monkeypatch.setenv("ATTRIBUTION_API_TOKEN", ADMIN)
    monkeypatch.setenv("ATTRIBUTION_WEBHOOK_SECRET", "sec")
    tokens = tmp_path / "tokens"
    made = {scope: create(tokens, f"{scope}-bot", scope, capsys=capsys) for scope in ("read", "trigger", "act")}
    cfg = Config(
        warehouse=str(tmp_path / "w.duckdb"),
        clusters={"eos": {"scheduler": "slurm"}},
        service={
            "outbox_dir": str(tmp_path / "outbox"),
            "tokens_file": str(tokens),
            "sessions_file": str(tmp_path / "sessions.sqlite3"),
        },
    )
    app = create_app(cfg, MustNotStart())
    # what the actions' routes will declare: the act scope
    act = [Depends(require(Scope.act))]
    app.add_api_route("/v1/test-act", lambda: {"acted": True}, methods=["POST"], dependencies=act)
    return TestClient(app), made, tokens


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def attempt(client, token):  # past authentication a request for an unknown cluster is 422
    return client.post("/v1/attempts", json={"cluster": "nowhere", "job_id": "1"}, headers=bearer(token))


def refused(r, status: int, scope: str) -> None:
    assert r.status_code == status, r.text
    assert r.json()["scope"] == scope and f"'{scope}' scope" in r.json()["detail"], r.json()


def test_a_read_token_reads_and_cannot_trigger_or_act(service):
    client, made, _ = service
    assert client.get("/v1/diagnoses", headers=bearer(made["read"])).status_code == 200
    refused(attempt(client, made["read"]), 403, "trigger")
    body = b'{"cluster": "eos", "job_id": "1", "state": "FAILED"}'
    refused(client.post("/v1/webhooks/slurm", content=body, headers=bearer(made["read"])), 403, "trigger")
    refused(client.post("/v1/test-act", headers=bearer(made["read"])), 403, "act")
    refused(client.get("/v1/sessions", headers=bearer(made["read"])), 403, "admin")


def test_a_trigger_token_triggers_and_cannot_act_or_read(service):
    client, made, _ = service
    r = attempt(client, made["trigger"])
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "cluster"  # through authentication
    body = b'{"cluster": "nowhere", "job_id": "1", "state": "FAILED"}'  # a webhook sent with a token, unsigned
    r = client.post("/v1/webhooks/slurm", content=body, headers=bearer(made["trigger"]))
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "cluster"
    refused(client.post("/v1/test-act", headers=bearer(made["trigger"])), 403, "act")
    refused(client.get("/v1/diagnoses", headers=bearer(made["trigger"])), 403, "read")
    refused(client.post("/v1/diagnose", content=b"{}", headers=bearer(made["trigger"])), 403, "read")


def test_an_act_token_acts_only_and_admin_does_everything(service):
    client, made, _ = service
    assert client.post("/v1/test-act", headers=bearer(made["act"])).json() == {"acted": True}
    refused(attempt(client, made["act"]), 403, "trigger")
    # the single token of service.token_env, as before scopes: admin
    assert client.post("/v1/test-act", headers=bearer(ADMIN)).status_code == 200
    assert attempt(client, ADMIN).status_code == 422
    assert client.get("/v1/diagnoses", headers=bearer(ADMIN)).status_code == 200
    names = {t["name"]: t["scopes"] for t in client.get("/v1/tokens", headers=bearer(ADMIN)).json()["items"]}
    assert names == {
        "$ATTRIBUTION_API_TOKEN": ["admin"],
        "read-bot": ["read"],
        "trigger-bot": ["trigger"],
        "act-bot": ["act"],
    }


@pytest.mark.parametrize("auth", [None, "Bearer nope", "Bearer read-bot.wrong-secret", "Basic cmVhZA=="])
def test_unknown_tokens_are_refused_naming_the_scope_and_counted_by_scope(service, auth):
    client, _, _ = service
    headers = {"Authorization": auth} if auth else {}
    refused(client.get("/v1/diagnoses", headers=headers), 401 if auth is None else 403, "read")
    refused(client.post("/v1/test-act", headers=headers), 401 if auth is None else 403, "act")
    metrics = client.get("/metrics").text
    for scope in ("read", "act"):
        counted = re.findall(rf'attribution_auth_failures_total{{reason="[^"]+",scope="{scope}"}} (\S+)', metrics)
        assert [float(n) for n in counted] == [1.0], metrics


def test_tokens_are_stored_hashed_and_change_without_a_restart(service, capsys):
    client, made, tokens = service
    text = tokens.read_text()
    assert all(t.split(".", 1)[1] not in text for t in made.values())
    assert all(line.split()[2].startswith("scrypt$16384$8$1$") for line in text.splitlines())
    assert tokens.stat().st_mode & 0o077 == 0
    new = create(tokens, "grafana-2", "read", capsys=capsys)  # the rotation: a new token beside the old
    assert client.get("/v1/diagnoses", headers=bearer(new)).status_code == 200
    assert client.get("/v1/diagnoses", headers=bearer(made["read"])).status_code == 200
    assert main(["token", "revoke", "read-bot", "--file", str(tokens)]) == 0
    refused(client.get("/v1/diagnoses", headers=bearer(made["read"])), 403, "read")
    assert client.get("/v1/diagnoses", headers=bearer(new)).status_code == 200


def sign_in(client, token: str):
    return client.post("/ui/login", content=f"token={token}".encode(), headers=FORM, follow_redirects=False)


def test_the_dashboard_session_is_a_random_id_never_the_token(service):
    from tests.helpers import diagnose
    from workload_attribution.warehouse.store import Warehouse

    client, made, _ = service
    d = diagnose(WORKED)
    Warehouse(client.app.state.svc.cfg.warehouse).write(d)
    ids = []
    for _ in range(2):
        r = sign_in(client, made["read"])
        assert r.status_code == 303 and made["read"] not in r.headers["set-cookie"]
        ids.append(client.cookies[COOKIE])
    assert len(set(ids)) == 2 and all(len(i) >= 43 for i in ids) and made["read"] not in ids
    assert "sign out" in client.get("/ui").text
    # the session reads the JSON the diagnosis page links to; it triggers nothing
    assert client.get(f"/v1/diagnoses/{d.diagnosis_id}").json()["diagnosis_id"] == d.diagnosis_id
    refused(client.post("/v1/attempts", json={"cluster": "eos", "job_id": "1"}), 401, "trigger")
    client.cookies.clear()
    for token in (made["trigger"], made["act"], "read-bot.not-it"):
        r = sign_in(client, token)
        assert r.status_code == 403 and "set-cookie" not in r.headers and "read scope" in r.text


def test_a_session_is_refused_at_once_after_logout(service):
    client, made, _ = service
    sign_in(client, made["read"])
    sid = client.cookies[COOKIE]
    assert client.get("/ui", follow_redirects=False).status_code == 200
    r = client.post("/ui/logout", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"
    client.cookies.set(COOKIE, sid)  # the old id, replayed
    assert client.get("/ui", follow_redirects=False).headers["location"] == "/ui/login"
    refused(client.get("/v1/diagnoses"), 401, "read")


def test_an_admin_revokes_a_session_and_removing_its_token_ends_it(service):
    client, made, tokens = service
    sign_in(client, made["read"])
    listed = client.get("/v1/sessions", headers=bearer(ADMIN)).json()["items"]
    assert [s["token"] for s in listed] == ["read-bot"] and client.cookies[COOKIE] not in json.dumps(listed)
    assert client.delete(f"/v1/sessions/{listed[0]['handle']}", headers=bearer(ADMIN)).status_code == 204
    assert client.get("/ui", follow_redirects=False).status_code == 303
    assert client.delete(f"/v1/sessions/{listed[0]['handle']}", headers=bearer(ADMIN)).status_code == 404
    sign_in(client, made["read"])
    assert client.get("/ui", follow_redirects=False).status_code == 200
    assert main(["token", "revoke", "read-bot", "--file", str(tokens)]) == 0
    assert client.get("/ui", follow_redirects=False).status_code == 303
    assert client.get("/v1/sessions", headers=bearer(ADMIN)).json()["items"] == []


def test_a_session_expires(service, tmp_path):
    client, made, _ = service
    now = [1_800_000_000.0]
    client.app.state.svc.sessions = Sessions(tmp_path / "s.sqlite3", ttl_s=3600, clock=lambda: now[0])
    sign_in(client, made["read"])
    now[0] += 3599
    assert client.get("/ui", follow_redirects=False).status_code == 200
    now[0] += 2
    assert client.get("/ui", follow_redirects=False).status_code == 303


@pytest.mark.parametrize(
    "line, words",
    [
        ("grafana read", "expected 'NAME SCOPES HASH'"),
        ("grafana write scrypt$16384$8$1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5a2V5", "scopes 'write'"),
        ("grafana read sha1$abc", "not scrypt"),
        ("grafana read scrypt$99999999$8$1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5a2V5", "power of two"),
        ("Grafana! read scrypt$16384$8$1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5a2V5", "token name"),
    ],
)
def test_a_broken_tokens_file_stops_serve_naming_the_line(monkeypatch, tmp_path, capsys, line, words):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# the service's tokens\n{line}\n")
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:1/api")
    monkeypatch.setenv("ATTRIBUTION_SERVICE__TOKENS_FILE", str(tokens))
    assert main(["serve", "--dashboard-only"]) == 2
    err = capsys.readouterr().err
    assert f"{tokens}, line 2" in err and words in err, err
