"""No 5xx for what a client sends: every endpoint of `attribution serve` is fed random bodies, valid
bodies mutated (bytes flipped, cut, spliced; a field's value replaced by any JSON), random query
strings and path parameters, over a real socket (uvicorn with the service's bounded protocol, in a
thread), and must answer below 500 each time; /healthz must answer after every request.

The run is bounded for the default suite (FUZZ_EXAMPLES examples per endpoint, a few seconds);
ATTRIBUTION_FUZZ_EXAMPLES=2000 runs a longer search. Only the trigger is a stand-in (it accepts at
once: a 503 for an unreachable Prefect would be the service's right answer, not a fault).
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import uvicorn
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.services.prometheus import free_port
from tests.waiting import wait_until
from workload_attribution.flows.config import Config
from workload_attribution.service import bounded
from workload_attribution.service.app import create_app
from workload_attribution.service.auth import sign

TOKEN, SECRET = "fuzz-admin", "fuzz-secret"
FUZZ_EXAMPLES = int(os.environ.get("ATTRIBUTION_FUZZ_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=FUZZ_EXAMPLES <= 25,  # the default run is the same every time; a long run searches anew
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


class Accepts:
    async def start(self, key: str, parameters: dict[str, Any], tags: list[str]) -> tuple[str, bool]:
        return f"run-{key[:8]}", False

    async def reset(self) -> None:
        pass


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("fuzz")
    os.environ["ATTRIBUTION_API_TOKEN"], os.environ["ATTRIBUTION_WEBHOOK_SECRET"] = TOKEN, SECRET
    try:
        cfg = Config(
            warehouse=str(base / "w.duckdb"),
            clusters={"eos": {"scheduler": "slurm"}, "k8s": {"scheduler": "kueue"}},
            service={"outbox_dir": str(base / "outbox"), "sessions_file": str(base / "s.sqlite3")},
        )
        app = create_app(cfg, Accepts())
    finally:
        os.environ.pop("ATTRIBUTION_API_TOKEN")
        os.environ.pop("ATTRIBUTION_WEBHOOK_SECRET")
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical", http=bounded.protocol(5, 5, 64))
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, "the fuzzed service to listen")
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


# --------------------------------------------------------------------------- valid bodies, to mutate

ATTEMPT = {
    "cluster": "eos",
    "scheduler": "slurm",
    "job_id": "77",
    "attempt": 0,
    "nodes": ["n1", "n2"],
    "start": "2026-11-20T10:00:00Z",
    "end": "2026-11-20T11:00:00Z",
    "state": "FAILED",
}
DOCUMENT = {
    "attempt": ATTEMPT,
    "sources": {
        "syslog": {"lines": [{"node": "n1", "text": "Nov 20 10:30:00 n1 kernel: NVRM: Xid (PCI:0000:1b:00): 79"}]},
        "app": {"lines": [{"node": "n2", "rank": 1, "time": "2026-11-20T10:31:00Z", "text": "NCCL WARN x"}]},
        "metrics": {
            "samples": [
                {"node": "n1", "metric": "DCGM_FI_DEV_XID_ERRORS", "value": 79.0, "time": "2026-11-20T10:30:00Z"}
            ]
        },
    },
}
SLURM = {"cluster": "eos", "job_id": "4191701", "state": "FAILED", "nodes": "n[1-2]", "exit_code": "1:0"}
KUEUE = {
    "cluster": "k8s",
    "namespace": "team-a",
    "name": "job-1",
    "conditions": [{"type": "Finished", "status": "True", "reason": "Failed"}],
}
ATTEMPTS = {"cluster": "eos", "nodes": ["n1", "n2"], "start": "2026-11-20T10:00:00Z", "end": "2026-11-20T11:00:00Z"}


def _bundle_files() -> dict[str, bytes]:
    import yaml

    return {
        "b/attempt.yaml": yaml.safe_dump(ATTEMPT).encode(),
        "b/logs/syslog/n1.log": b"Nov 20 10:30:00 n1 kernel: NVRM: Xid (PCI:0000:1b:00): 79, pid=1\n",
    }


def _tar(compress: str) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in _bundle_files().items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    if compress == "gz":
        import gzip

        return gzip.compress(raw.getvalue())
    return zstandard.ZstdCompressor().compress(raw.getvalue())


def _zip() -> bytes:
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in _bundle_files().items():
            z.writestr(name, data)
    return raw.getvalue()


ARCHIVES = [_tar("gz"), _tar("zst"), _zip(), json.dumps(DOCUMENT).encode()]

# ------------------------------------------------------------------------------------- strategies

TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=40) | st.sampled_from(
    ["", "\x00", "a\x00b", "../../etc", "/abs", "\ud800", "n1\nX: y", "x" * 300, "🙂", "1:0", "FAILD"]
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def _encode(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True, ensure_ascii=bool(hash(str(value)) & 1)).encode("utf-8", "surrogatepass")


def _paths(doc: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*at, i))
    return out


def _replaced(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy = json.loads(json.dumps(doc))
    parent = copy
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return copy


@st.composite
def field_replaced(draw: st.DrawFn, doc: dict[str, Any]) -> bytes:
    """A valid document with one value (anywhere in it) replaced by any JSON, or a key dropped."""
    path = draw(st.sampled_from(_paths(doc)))
    if path and draw(st.booleans()) and isinstance(doc, dict):
        parent = json.loads(json.dumps(doc))
        holder = parent
        for step in path[:-1]:
            holder = holder[step]
        if isinstance(holder, dict):
            holder.pop(path[-1], None)
            return _encode(parent)
    return _encode(_replaced(doc, path, draw(JSON)))


@st.composite
def mutated(draw: st.DrawFn, body: bytes) -> bytes:
    """Bytes flipped, the body cut, random bytes inserted, a slice repeated."""
    data = bytearray(body)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "repeat"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=64))
        else:
            data[at:at] = data[at : at + draw(st.integers(1, 512))] * draw(st.integers(1, 8))
    return bytes(data)


def bodies(*valid: dict[str, Any] | bytes, unchanged: bool = True) -> st.SearchStrategy[bytes]:
    """Random bytes, the valid bodies mutated, a field of each replaced, and (`unchanged`) themselves."""
    docs = [v for v in valid if isinstance(v, dict)]
    raw = [v if isinstance(v, bytes) else _encode(v) for v in valid]
    options = [st.binary(max_size=2048), st.sampled_from(raw).flatmap(mutated)]
    options += [field_replaced(d) for d in docs] + ([st.sampled_from(raw)] if unchanged else [])
    return st.one_of(options)


# ------------------------------------------------------------------------------------------ tests


def answered(client: httpx.Client, request: httpx.Request) -> httpx.Response:
    r = client.send(request)
    assert r.status_code < 500, (request.method, request.url, r.status_code, r.text[:300])
    assert client.get("/healthz").json()["status"] == "ok"
    return r


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=60) as c:
        yield c


AUTH = {"Authorization": f"Bearer {TOKEN}"}


@FUZZ
@given(body=bodies(SLURM))
def test_slurm_webhook(client: httpx.Client, body: bytes) -> None:
    headers = {**sign(SECRET, body), "Content-Type": "application/json"}
    answered(client, client.build_request("POST", "/v1/webhooks/slurm", content=body, headers=headers))


@FUZZ
@given(body=bodies(KUEUE))
def test_kubernetes_webhook(client: httpx.Client, body: bytes) -> None:
    headers = {**sign(SECRET, body), "Content-Type": "application/json"}
    answered(client, client.build_request("POST", "/v1/webhooks/kubernetes", content=body, headers=headers))


@FUZZ
@given(body=bodies(ATTEMPTS, {"cluster": "eos", "job_id": "4191701"}))
def test_attempts(client: httpx.Client, body: bytes) -> None:
    answered(client, client.build_request("POST", "/v1/attempts", content=body, headers=AUTH))


# a valid body costs a whole diagnosis (~1 s): the valid ones are not sent unchanged
@FUZZ
@given(body=bodies(DOCUMENT, *ARCHIVES, unchanged=False), store=st.sampled_from(["false", "true", "yes", "2", ""]))
def test_diagnose(client: httpx.Client, body: bytes, store: str) -> None:
    request = client.build_request("POST", "/v1/diagnose", params={"store": store}, content=body, headers=AUTH)
    answered(client, request)


def quoted(text: str) -> str:
    """Any text as a URL's path segment or query value, percent-encoded (lone surrogates as the
    bytes they would be: not UTF-8)."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


FILTERS = ["cluster", "since", "until", "terminal_state", "node", "symptom", "limit", "offset", "page", "per_page"]
QUERY = st.dictionaries(
    st.sampled_from([*FILTERS, "port", "sub_domain"]), TEXT | st.integers(-(2**64), 2**64).map(str), max_size=4
).map(lambda q: "&".join(f"{k}={quoted(v)}" for k, v in q.items()))
PATHS = (
    st.sampled_from(["/v1/diagnoses", "/ui", "/v1/sessions", "/v1/tokens"])
    | TEXT.map(lambda s: "/v1/diagnoses/" + quoted(s))
    | TEXT.map(lambda s: "/ui/diagnoses/" + quoted(s))
)


@FUZZ
@given(path=PATHS, query=QUERY)
def test_reads(client: httpx.Client, path: str, query: str) -> None:
    answered(client, client.build_request("GET", f"{path}?{query}", headers=AUTH))


@FUZZ
@given(body=bodies(b"token=fuzz-admin", b"token=read-bot.abc"), path=st.sampled_from(["/ui/login", "/ui/logout"]))
def test_login(client: httpx.Client, body: bytes, path: str) -> None:
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    answered(client, client.build_request("POST", path, content=body, headers=headers))


@FUZZ
@given(handle=TEXT)
def test_session_handles(client: httpx.Client, handle: str) -> None:
    answered(client, client.build_request("DELETE", f"/v1/sessions/{quoted(handle)}", headers=AUTH))


def test_the_bodies_known_to_have_answered_500(client: httpx.Client) -> None:
    """Found before the fuzzing: the zstd magic then garbage, a NUL in a host name."""
    r = answered(
        client, client.build_request("POST", "/v1/diagnose", content=b"\x28\xb5\x2f\xfd" + b"\x07" * 64, headers=AUTH)
    )
    assert r.status_code == 422 and "zstd" in r.json()["detail"], r.text
    doc = _replaced(DOCUMENT, ("sources", "syslog", "lines", 0, "node"), "n1\x00evil")
    r = answered(client, client.build_request("POST", "/v1/diagnose", content=_encode(doc), headers=AUTH))
    assert r.status_code == 422 and "sources.syslog.lines.0.node" in r.json()["detail"], r.text
