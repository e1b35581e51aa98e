"""POST /v1/diagnose against a real `attribution serve` process (the evidence in, the diagnosis out):
the same diagnosis as a local run, as a tar.gz or as JSON observations; hostile archives refused
without a byte written outside the request's temporary directory, and nothing left after the
answer; a burst of 50 concurrent posts on 2 cores all answered (200 or 429); `--remote` prints
what a local run prints."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, WORKED
from tests.services.prometheus import free_port
from tests.waiting import WaitTimeout, wait_http

TOKEN = "diag-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    base = tmp_path_factory.mktemp("diagsvc")
    tmpdir = base / "tmp"
    tmpdir.mkdir()
    cfg = base / "attribution.yaml"
    cfg.write_text(
        f"warehouse: {base / 'w.duckdb'}\nservice:\n  diagnose_concurrency: 2\n  diagnose_timeout_s: 60\n"
        f"  diagnose_max_expanded_bytes: {256 * 2**20}\n  diagnose_max_members: 2000\n"
    )
    port = free_port()
    env = {**os.environ, "ATTRIBUTION_CONFIG": str(cfg), "ATTRIBUTION_API_TOKEN": TOKEN, "TMPDIR": str(tmpdir)}
    env.pop("PREFECT_API_URL", None)
    log = open(base / "serve.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "workload_attribution", "serve", "--dashboard-only", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd="/",
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/healthz", "serve --dashboard-only to answer", 90, proc, base / "serve.log")
    except WaitTimeout:
        proc.kill()
        raise
    yield {"url": url, "tmp": tmpdir, "base": base, "cfg": cfg}
    proc.terminate()
    proc.wait(20)


def local(*args):
    r = subprocess.run(
        [sys.executable, "-m", "workload_attribution", "diagnose", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def comparable(doc: dict) -> dict:
    doc = {k: v for k, v in doc.items() if k != "created_at"}
    doc["coverage"] = [{k: v for k, v in c.items() if k != "duration_ms"} for c in doc["coverage"]]
    return doc


def tarball(members: dict[str, bytes | None], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data or b"")
            tar.addfile(info, io.BytesIO(data or b""))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buf.getvalue()


def bundle_document(bundle: Path) -> dict:
    """The worked example as the JSON form: every file's lines as they are, per source and node."""
    import yaml

    sources: dict = {}
    for source, folder in (("app", "app"), ("syslog", "syslog"), ("fabricmanager", "fabricmanager")):
        for f in sorted((bundle / "logs" / folder).glob("*.log")):
            text = f.read_bytes().decode("utf-8", errors="replace")
            lines = text.split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            sources.setdefault(source, {"lines": []})["lines"] += [
                {"node": f.stem, "text": x.rstrip("\r")} for x in lines
            ]
    import re

    samples = []
    for line in (bundle / "metrics" / "range-export.prom").read_text().splitlines():
        m = re.match(r"^(\w+)\{(.*)\} (\S+) (\d+)$", line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            node = labels.get("Hostname") or labels.get("instance", "").split(":")[0]
            samples.append(
                {
                    "node": node,
                    "metric": m.group(1),
                    "labels": labels,
                    "value": float(m.group(3)),
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(m.group(4)) / 1000))
                    + f".{int(m.group(4)) % 1000:03d}Z",
                }
            )
    sources["metrics"] = {"samples": samples}
    sources["sacct"] = {"document": json.loads((bundle / "scheduler" / "sacct.json").read_text())}
    sources["topology"] = {"document": yaml.safe_load((bundle / "topology.yaml").read_text())}
    doc = {"attempt": yaml.safe_load((bundle / "attempt.yaml").read_text()), "sources": sources}
    return json.loads(json.dumps(doc, default=lambda v: v.isoformat()))  # YAML times as RFC 3339 strings


def test_a_bundle_posted_as_tar_gz_gets_the_local_diagnosis(service, tmp_path):
    from workload_attribution.client import pack_bundle

    pack_bundle(WORKED, tmp_path / "b.tgz")
    r = httpx.post(
        f"{service['url']}/v1/diagnose",
        content=(tmp_path / "b.tgz").read_bytes(),
        headers={**AUTH, "Content-Type": "application/gzip"},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-attribution-rules-version"] == r.json()["rules"]["version"]
    assert comparable(r.json()) == comparable(json.loads(local(WORKED, "--json", "--no-warehouse")))
    assert list(service["tmp"].iterdir()) == []  # nothing of the request left on disk


def test_the_same_attempt_as_json_observations(service):
    doc = bundle_document(WORKED)
    r = httpx.post(f"{service['url']}/v1/diagnose", json=doc, headers=AUTH, timeout=120)
    assert r.status_code == 200, r.text
    want = comparable(json.loads(local(WORKED, "--json", "--no-warehouse")))
    got = comparable(r.json())
    for key in (
        "terminal_state",
        "sub_domain",
        "affected_nodes",
        "root_cause",
        "recommended_action",
        "symptoms",
        "candidates",
    ):
        assert got[key] == want[key], key
    # the same evidence; a posted sample and the scope are written back (exposition, YAML) with other line numbers
    for g, w in zip(got["evidence"], want["evidence"], strict=True):
        same = ("id", "source", "node", "time") if w["source"] in ("metrics", "scope") else tuple(w)
        assert {k: g[k] for k in same} == {k: w[k] for k in same}
    assert [(c["source"], c["status"]) for c in got["coverage"]] == [
        (c["source"], c["status"]) for c in want["coverage"]
    ]


def test_store_writes_it_once(service):
    from workload_attribution.client import diagnose_remote

    for _ in range(2):
        d = diagnose_remote(service["url"], WORKED, token=TOKEN, store=True)
    r = httpx.get(f"{service['url']}/v1/diagnoses", headers=AUTH, params={"cluster": "eos"})
    assert [i["diagnosis_id"] for i in r.json()["items"]] == [d.diagnosis_id]


@pytest.mark.parametrize("case", ["dotdot", "absolute", "symlink", "members", "zip_bomb", "not_a_bundle", "garbage"])
def test_hostile_bodies_are_refused_and_nothing_escapes(service, tmp_path, case):
    canary = service["base"] / "x"
    if case == "dotdot":
        body, status, words = tarball({"attempt.yaml": b"x", "../x": b"escaped"}), 422, ["'..'"]
    elif case == "absolute":
        body, status, words = tarball({str(canary): b"escaped"}), 422, ["absolute"]
    elif case == "symlink":
        body, status, words = tarball({"attempt.yaml": b"x"}, {"logs": str(service["base"])}), 422, ["a link"]
    elif case == "members":
        body, status, words = tarball({f"logs/app/n{i}.log": b"" for i in range(10_000)}), 413, ["members"]
    elif case == "zip_bomb":
        bomb = tmp_path / "bomb.zip"
        with (
            zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z,
            z.open("logs/app/n1.log", "w", force_zip64=True) as f,
        ):
            zeros = b"\0" * (64 << 20)
            for _ in range(32):  # 2 GiB expanded
                f.write(zeros)
        body, status, words = bomb.read_bytes(), 413, ["expanded size"]
    elif case == "not_a_bundle":
        body, status, words = tarball({"readme.txt": b"hello"}), 422, ["attempt.yaml"]
    else:
        body, status, words = os.urandom(4096), 422, ["neither"]
    r = httpx.post(f"{service['url']}/v1/diagnose", content=body, headers=AUTH, timeout=120)
    assert r.status_code == status, r.text
    for w in words:
        assert w in r.json()["detail"], r.text
    assert not canary.exists() and not (service["base"].parent / "x").exists()
    assert list(service["tmp"].iterdir()) == []


def test_fifty_at_once_are_all_answered(service, tmp_path):
    from workload_attribution.client import pack_bundle

    pack_bundle(WORKED, tmp_path / "b.tgz")
    body = (tmp_path / "b.tgz").read_bytes()

    async def burst():
        async with httpx.AsyncClient(timeout=300) as c:
            return await asyncio.gather(
                *[c.post(f"{service['url']}/v1/diagnose", content=body, headers=AUTH) for _ in range(50)],
                return_exceptions=True,
            )

    answers = asyncio.run(burst())
    codes = [a.status_code if isinstance(a, httpx.Response) else repr(a) for a in answers]
    assert all(c in (200, 429) for c in codes), codes
    assert codes.count(200) >= 2
    assert all(a.headers.get("retry-after") for a in answers if isinstance(a, httpx.Response) and a.status_code == 429)
    metrics = httpx.get(f"{service['url']}/metrics").text
    assert 'attribution_diagnose_requests_total{outcome="busy"}' in metrics or codes.count(200) == 50


def test_remote_prints_what_a_local_run_prints(service):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "workload_attribution",
            "diagnose",
            str(WORKED),
            "--remote",
            service["url"],
            "--no-warehouse",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ATTRIBUTION_API_TOKEN": TOKEN},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == local(WORKED, "--no-warehouse")


def test_without_the_token_it_is_refused(service):
    r = httpx.post(f"{service['url']}/v1/diagnose", content=b"{}", timeout=10)
    assert r.status_code == 401
