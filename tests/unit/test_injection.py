"""Hostile names never reach LogQL, PromQL or SQL unescaped: proved on the queries actually sent.

Host names come from schedulers and webhooks, so they are attacker-controlled in the worst case.
Each test captures what leaves the process (HTTP query strings recorded by the fault server's
socket, SQL text handed to DuckDB) and parses it back the way the server would: a hostile name
must match itself and nothing else, and never change the query's structure.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import pytest

from tests.helpers import collect, diagnose
from tests.services.fault_server import FaultServer
from tests.services.loki_standin import parse_query
from workload_attribution.connectors import kueue, loki, prometheus, slurm
from workload_attribution.contracts.models import AttemptScope
from workload_attribution.rules.pack import default_pack
from workload_attribution.staging.attempt import create_staging
from workload_attribution.staging.database import release_staging

HOSTILE = [
    'gpu-a01"} or vector(1) #',  # break out of the PromQL string / selector
    'gpu-a02"} |= "x',  # break out of the LogQL selector, add a filter
    "a|.*",  # widen the regex alternation
    'x\\"y',  # escape the escape
    'n\n{job="admin"}',  # new line + a second selector
    "back`tick",
    "gpu-a03.example.com",  # the dot must be literal
]
START = datetime(2026, 11, 20, 10, 0, tzinfo=timezone.utc)
END = datetime(2026, 11, 20, 10, 40, tzinfo=timezone.utc)
NOT_MINE = ["gpu-a03xexamplexcom", "", "other", "gpu-a01", "admin", ".*", "a"]


def scope(nodes=HOSTILE, **kw) -> AttemptScope:
    return AttemptScope(
        **{
            "cluster": "lab",
            "scheduler": "static",
            "job_id": "1",
            "attempt": 0,
            "nodes": nodes,
            "start": START,
            "end": END,
            "state": "FAILED",
            **kw,
        }
    )


def only_these(regex: str, hosts: list[str]) -> None:
    pattern = re.compile(regex)
    for h in hosts:
        assert pattern.fullmatch(h), (regex, h)
    for other in NOT_MINE:
        if other not in hosts:
            assert not pattern.fullmatch(other), (regex, other)


PROMQL_STRING = r'"((?:[^"\\]|\\.)*)"'


def test_promql_sent_to_prometheus_keeps_every_host_literal():
    answer = lambda p, q: (200, {"status": "success", "data": {"resultType": "matrix", "result": []}})  # noqa: E731
    s = scope()
    staging = create_staging(s)
    with FaultServer(fault="answer", answer=answer) as server:
        collect(prometheus.PrometheusSource(url=server.url, timeout_s=2), s, staging)
    release_staging(staging)
    sent = [q["query"][0] for _, q in server.requests]
    assert len(sent) == len(prometheus.DEFAULT_QUERIES)
    for query in sent:
        # exactly one selector with exactly one matcher: metric{label=~"..."}; nothing after it
        m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{([a-zA-Z_]+)=~" + PROMQL_STRING + r"\}", query)
        assert m, query
        regex = json.loads(f'"{m.group(3)}"')  # PromQL string escapes are Go's: \\ and \" as in JSON
        if m.group(2) == "instance":
            only_these(regex, HOSTILE + [h + ":9100" for h in HOSTILE])
        else:
            only_these(regex, HOSTILE)


def test_logql_sent_to_loki_keeps_every_host_literal_and_the_filter_intact():
    def answer(path, q):
        if path.endswith("/series"):
            return 200, {"status": "success", "data": []}
        return 200, {"status": "success", "data": {"resultType": "streams", "result": []}}

    s = scope()
    staging = create_staging(s)
    prefilter = ["NVRM: Xid", 'NCCL WARN "quoted"', "a|b"]
    with FaultServer(fault="answer", answer=answer) as server:
        collect(
            loki.LokiSource(url=server.url, source="syslog", selector='{job="syslog", host=~"{hosts}"}', timeout_s=2),
            s,
            staging,
            prefilter=prefilter,
        )
    release_staging(staging)
    queries = [q["query"][0] for p, q in server.requests if p.endswith("query_range")]
    selectors = [q["match[]"][0] for p, q in server.requests if p.endswith("series")]
    assert queries and selectors
    for query in queries + selectors:
        matchers, filters = parse_query(query)  # Loki's grammar, as the stand-in implements it
        assert [(k, op) for k, op, _ in matchers] == [("job", "="), ("host", "=~")], matchers
        assert matchers[0][2] == "syslog"
        only_these(matchers[1][2], HOSTILE)
        if query in queries:
            assert len(filters) == 1 and filters[0][0] == "|~"
            line = re.compile(filters[0][1])
            for lit in prefilter:
                assert line.search(f"xx {lit} yy")
            assert not line.search("a b c") and not line.search("NVRM Xid")


@pytest.mark.parametrize("job_id", ["1; rm -rf /", "1 OR 1=1", "../../etc/passwd", "1\n2", "", "１２３", "-j 5"])
def test_hostile_slurm_job_ids_are_refused_before_any_request(job_id):
    with FaultServer(fault="wrong_shape") as server:
        with pytest.raises(slurm.NotASlurmJob, match="not a Slurm job id"):
            slurm.job_document(slurm.SlurmSource(rest_url=server.url, timeout_s=1), job_id)
    assert server.requests == []


@pytest.mark.parametrize(
    "name", ["../secrets", "a/b/c", "UPPER", "x?labelSelector=all", "a" * 254, "", "-lead", "new\nline"]
)
def test_hostile_kubernetes_names_are_refused_before_any_request(name):
    with FaultServer(fault="wrong_shape") as server:
        src = kueue.KueueSource(url=server.url, namespace="team-a", token_env=None, timeout_s=1)
        with pytest.raises(kueue.NotAKubernetesName, match="not a Kubernetes name"):
            kueue.fetch(src, name)
        with pytest.raises(kueue.NotAKubernetesName, match="not a Kubernetes name"):
            kueue.fetch(src.model_copy(update={"namespace": name}), "train-7")
    assert server.requests == []


def test_sql_reads_bind_every_filter(monkeypatch, tmp_path):
    """The API's filters reach DuckDB as bound parameters: the SQL text never holds them."""
    from fastapi.testclient import TestClient

    from workload_attribution.flows.config import Config
    from workload_attribution.service.app import create_app
    from workload_attribution.warehouse.store import Warehouse

    monkeypatch.setenv("ATTRIBUTION_API_TOKEN", "t")
    monkeypatch.setenv("ATTRIBUTION_WEBHOOK_SECRET", "s")
    sent: list[tuple[str, list]] = []
    real_rows = Warehouse.rows

    def capture(self, sql, args=None):
        sent.append((sql, list(args or [])))
        return real_rows(self, sql, args)

    from tests.conftest import WORKED

    diagnose(WORKED, warehouse=tmp_path / "w.duckdb", pack=default_pack())  # one row
    monkeypatch.setattr(Warehouse, "rows", capture)
    client = TestClient(create_app(Config(warehouse=str(tmp_path / "w.duckdb")), None))
    evil = "x' OR '1'='1'; DROP TABLE diagnoses; --"
    auth = {"Authorization": "Bearer t"}
    # the edge refuses what no host or cluster name can be (and never echoes it) ...
    for params in ({"cluster": evil}, {"node": evil}):
        r = client.get("/v1/diagnoses", params=params, headers=auth)
        assert r.status_code == 422 and "DROP" not in r.text
    assert sent == []
    # ... and what passes the edge is bound, never part of the SQL text
    marker = "node-7f3e.example"
    assert (
        client.get(
            "/v1/diagnoses",
            params={"cluster": "lab-7f3e", "node": marker, "since": "2026-01-01T00:00:00Z"},
            headers=auth,
        ).status_code
        == 200
    )
    assert client.get(
        "/ui", params={"cluster": "lab-7f3e", "node": marker, "since": evil[:40]}, headers=auth
    ).status_code in (200, 422)
    assert sent
    for sql, _ in sent:
        assert marker not in sql and "lab-7f3e" not in sql and "DROP TABLE" not in sql, sql
    assert any(marker in [str(a) for a in args] for _, args in sent)
    assert real_rows(Warehouse(str(tmp_path / "w.duckdb")), "SELECT count(*) FROM diagnoses") == [(1,)]
