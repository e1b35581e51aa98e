"""Prometheus connector against a real Prometheus 2.42 holding the worked example's metrics."""

import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from tests.conftest import WORKED
from tests.helpers import collect_bundle, coverage_of
from workload_attribution.connectors.prometheus import PrometheusSource, promql_regex_string, render_query
from workload_attribution.contracts.errors import TransientSourceError
from workload_attribution.contracts.models import CoverageStatus
from workload_attribution.staging.attempt import create_staging
from workload_attribution.staging.database import connect, release_staging


def test_reads_backfilled_dcgm_series_back(prometheus, staged):
    scope, staging = staged
    cov = coverage_of(PrometheusSource(url=prometheus.url), scope, staging)
    assert cov.status == CoverageStatus.ok, cov
    assert set(cov.nodes) == set(scope.nodes)
    assert cov.details.queries["dcgm_xid"].series == len(scope.nodes) * 4
    con = connect(staging)
    try:
        got = con.execute("""SELECT node, labels['gpu'], max(value) FROM samples
                             WHERE metric = 'DCGM_FI_DEV_XID_ERRORS' AND value > 0 GROUP BY ALL""").fetchall()
    finally:
        con.close()
    assert got == [("gb-r12-n04", "2", 149.0)]


def test_reads_backfilled_infiniband_counters_back(prometheus):
    from workload_attribution.contracts.models import AttemptScope

    scope = AttemptScope(
        cluster="c",
        scheduler="slurm",
        job_id="5442826",
        attempt=2,
        nodes=["hgx-r05-n3", "hgx-r06-n0", "hgx-r06-n1", "hgx-r06-n2"],
        start="2026-01-02T06:53:47Z",
        end="2026-01-02T08:28:50Z",
        state="FAILED",
    )
    staging = create_staging(scope)
    try:
        cov = coverage_of(
            PrometheusSource(
                url=prometheus.url,
                queries={"ib_link_downed": 'node_infiniband_link_downed_total{instance=~"{hosts_with_port}"}'},
            ),
            scope,
            staging,
        )
        assert cov.status == CoverageStatus.ok and cov.details.queries["ib_link_downed"].series == 8
        con = connect(staging)
        rows = con.execute("""SELECT node, labels['device'], min(value), max(value) FROM samples
                              GROUP BY ALL HAVING max(value) > min(value)""").fetchall()
        con.close()
        assert rows == [("hgx-r06-n2", "mlx5_0", 0.0, 1.0)]  # the one link that went down
    finally:
        release_staging(staging)


def test_metrics_from_prometheus_drive_the_same_verdict(prometheus, staged):
    """Syslog from the bundle, metrics from the live server: the DCGM transition corroborates the root."""
    from workload_attribution.connectors.registry import Collected
    from workload_attribution.rules.pack import default_pack
    from workload_attribution.tasks.steps import ScopedAttempt, attribute, normalize_collected

    scope, staging = staged
    pack = default_pack()
    results = []
    for source in ("app", "syslog", "sacct"):
        results.append(collect_bundle(WORKED, scope, source, staging, pack.prefilter(source)))
    results.append(Collected(coverage_of(PrometheusSource(url=prometheus.url), scope, staging)))
    scoped = ScopedAttempt(scope=scope, staging=staging)
    d = attribute(scoped, normalize_collected(scoped, results), pack)
    assert (d.terminal_state, d.sub_domain, d.affected_nodes) == ("hardware_failure", "nvlink", ["gb-r12-n04"])
    root = next(s for s in d.symptoms if s.role == "root")
    ev = {e.id: e for e in d.evidence}
    assert any(ev[i].connector == "prometheus" for i in root.evidence)


def test_host_names_cannot_break_out_of_the_matcher(prometheus):
    import httpx

    hostile = ['a"}) or vector(1) #', "gb-r12-n0.", "x|.*"]
    q = render_query('up{instance=~"{hosts_with_port}"}', hostile)
    r = httpx.get(f"{prometheus.url}/api/v1/query", params={"query": q, "time": 1795000000}).json()
    # valid PromQL that matches none of the real hosts: the names stayed literal inside the matcher
    assert r["status"] == "success" and r["data"]["result"] == []
    assert promql_regex_string(["n.1"]) == "n\\\\.1"


def test_bad_query_is_recorded_and_other_queries_still_run(prometheus, staged):
    scope, staging = staged
    src = PrometheusSource(url=prometheus.url, queries={"broken": "up{", "up": 'up{instance=~"{hosts_with_port}"}'})
    cov = coverage_of(src, scope, staging)
    assert cov.status == CoverageStatus.partial
    assert "broken: HTTP 400" in cov.error and cov.details.queries["up"].series == len(scope.nodes)


def _serve(handler_body):
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            handler_body(self)

        def log_message(self, *a):
            pass

    srv = HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.mark.parametrize(
    "fault,expect",
    [
        ("refused", ("transient", "error")),
        ("timeout", ("transient", "timeout")),
        ("500", ("transient", "error")),
        ("429", ("transient", "error")),
        ("garbage", ("coverage", CoverageStatus.error)),
    ],
)
def test_fault_cases(staged, fault, expect):
    """Fault injection needs a server that misbehaves on demand: a local HTTP stand-in, not Prometheus."""
    scope, staging = staged
    if fault == "refused":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{s.getsockname()[1]}"
        srv = None
    else:

        def body(h):
            if fault == "timeout":
                import time

                time.sleep(2)  # the thing under test: a server slower than the client's timeout
            code = {"500": 500, "429": 429}.get(fault, 200)
            h.send_response(code)
            if code == 429:
                h.send_header("Retry-After", "1")
            h.end_headers()
            h.wfile.write(b"<html>not json" if fault == "garbage" else b'{"status":"error"}')

        srv = _serve(body)
        url = f"http://127.0.0.1:{srv.server_address[1]}"
    src = PrometheusSource(url=url, timeout_s=0.5, queries={"up": "up"})
    try:
        if expect[0] == "transient":
            with pytest.raises(TransientSourceError) as err:
                coverage_of(src, scope, staging)
            assert err.value.status == expect[1]
        else:
            cov = coverage_of(src, scope, staging)
            assert cov.status == expect[1] and "not JSON" in cov.error
    finally:
        if srv:
            srv.shutdown()
