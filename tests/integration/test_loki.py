"""Loki connector against a stand-in that speaks Loki's documented HTTP API.

No Loki (nor any Loki-compatible server) is installable on these machines (no Debian package,
nothing on PyPI/npm that runs without Docker), so tests/services/loki_standin.py implements the
documented query_range/push API: stream selectors, line filters, ns timestamps, limits, errors.
"""

import socket

import pytest

from tests.conftest import WORKED
from tests.helpers import collect_bundle, coverage_of
from tests.services.loki_standin import LokiStandIn, parse_query
from workload_attribution.connectors.bundle import load_scope
from workload_attribution.connectors.loki import LokiSource, render_selector
from workload_attribution.contracts.errors import TransientSourceError
from workload_attribution.contracts.models import CoverageStatus
from workload_attribution.rules.pack import default_pack
from workload_attribution.staging.attempt import create_staging
from workload_attribution.staging.database import connect, release_staging


def _ns_times(lines: list[str], tz: str, ref) -> list[int]:
    """What a log shipper does: stamp each line; lines without a time get the previous line's."""
    path = create_staging(load_scope(WORKED))
    con = connect(path)
    try:
        ts = [
            r[0]
            for r in con.execute(
                "SELECT epoch_ns(log_time(x, $tz, $ref)) FROM unnest($l) t(x)", {"l": lines, "tz": tz, "ref": ref}
            ).fetchall()
        ]
    finally:
        con.close()
        release_staging(path)
    out, last = [], None
    for t in ts:
        last = t if t is not None else last
        out.append(last if last is not None else 0)
    return out


@pytest.fixture(scope="module")
def loki():
    server = LokiStandIn().start()
    scope = load_scope(WORKED)
    ref = scope.start.replace(tzinfo=None)
    for job in ("app", "syslog"):
        for f in sorted((WORKED / "logs" / job).glob("*.log")):
            lines = [x.rstrip("\r") for x in f.read_text().split("\n") if x.strip()]
            times = _ns_times(lines, scope.timezone, ref)
            key = tuple(sorted({"job": job, "host": f.stem}.items()))
            server.streams[key] = list(zip(times, lines))
    yield server
    server.stop()


def _lines(staging):
    con = connect(staging)
    try:
        return con.execute(
            "SELECT s.node, r.line, r.collector_time FROM raw_lines r JOIN source_files s USING (file_id) "
            "ORDER BY 1, 3, 2"
        ).fetchall()
    finally:
        con.close()


def test_pagination_and_window_splitting_lose_and_duplicate_nothing(loki, staged, tmp_path):
    scope, staging = staged
    pf = default_pack().prefilter("syslog")
    big = coverage_of(
        LokiSource(url=loki.url, source="syslog", selector='{job="syslog", host=~"{hosts}"}'), scope, staging, pf
    )
    assert big.status == CoverageStatus.ok and set(big.nodes) == set(scope.nodes)
    want = _lines(staging)
    other = create_staging(scope)
    try:
        small = coverage_of(
            LokiSource(
                url=loki.url, source="syslog", selector='{job="syslog", host=~"{hosts}"}', limit=2, max_window_s=900
            ),
            scope,
            other,
            pf,
        )
        assert small.observations == big.observations and _lines(other) == want
    finally:
        release_staging(other)
    n_requests = sum(1 for r in loki.requests if r["path"].endswith("query_range"))
    assert n_requests > 10
    # the rules' literal pre-filter travelled as a line filter: only candidate lines came back
    assert all("NVRM" in x or "Link" in x for _, x, _ in want) and len(want) == 4


def test_lines_from_loki_drive_the_same_verdict(loki, staged):
    from workload_attribution.connectors.registry import Collected
    from workload_attribution.tasks.steps import ScopedAttempt, attribute, normalize_collected

    scope, staging = staged
    pack = default_pack()
    results = [
        Collected(
            coverage_of(
                LokiSource(url=loki.url, source=s, selector=f'{{job="{s}", host=~"{{hosts}}"}}'),
                scope,
                staging,
                pack.prefilter(s),
            )
        )
        for s in ("app", "syslog")
    ]
    for s in ("sacct", "metrics"):
        results.append(Collected(collect_bundle(WORKED, scope, s, staging, pack.prefilter(s)).coverage))
    scoped = ScopedAttempt(scope=scope, staging=staging)
    d = attribute(scoped, normalize_collected(scoped, results), pack)
    assert (d.terminal_state, d.sub_domain, d.affected_nodes) == ("hardware_failure", "nvlink", ["gb-r12-n04"])
    ev = {e.id: e for e in d.evidence}
    assert ev[d.root_cause.evidence[0]].connector == "loki"
    assert ev[d.root_cause.evidence[0]].ref.startswith('loki:syslog{host="gb-r12-n04"}')


def test_hostile_host_names_stay_inside_the_selector():
    q = render_selector('{job="app", host=~"{hosts}"}', ['x"} |= "', "a.b"])
    matchers, filters = parse_query(q)
    assert filters == [] and matchers[1][0] == "host" and matchers[1][2] == '(?:x"\\}\\ \\|=\\ "|a\\.b)'


def test_empty_result_is_empty_not_ok(loki, staged):
    scope, staging = staged
    cov = coverage_of(LokiSource(url=loki.url, source="app", selector='{job="nothing-here"}'), scope, staging, [])
    assert cov.status == CoverageStatus.empty and cov.details.hosts_without_streams == sorted(scope.nodes)


def test_bad_selector_is_an_error_with_lokis_reason(loki, staged):
    scope, staging = staged
    cov = coverage_of(LokiSource(url=loki.url, source="app", selector='{job=~".*"}'), scope, staging, [])
    assert cov.status == CoverageStatus.error and "empty-compatible value" in cov.error


@pytest.mark.parametrize(
    "fault,status",
    [
        ((429, {"Retry-After": "1"}, "too many"), "error"),
        ((503, {}, "unavailable"), "error"),
        ((502, {}, "bad gateway"), "error"),
    ],
)
def test_throttling_and_5xx_are_retryable(loki, staged, fault, status):
    scope, staging = staged
    loki.faults.append(fault)
    with pytest.raises(TransientSourceError) as err:
        coverage_of(LokiSource(url=loki.url, source="app", selector='{job="app"}'), scope, staging, [])
    assert err.value.status == status and str(fault[0]) in str(err.value)


def test_garbage_body_and_partial_pages(loki, staged):
    scope, staging = staged
    loki.faults.append((200, {}, "<html>proxy error</html>"))
    cov = coverage_of(LokiSource(url=loki.url, source="app", selector='{job="app"}'), scope, staging, [])
    assert cov.status == CoverageStatus.error and "not a Loki streams answer" in cov.error
    # the first page arrives, the second is garbage: what arrived is kept, coverage says partial
    staging2 = create_staging(scope)
    try:
        loki.fault_on_call = {loki.query_calls + 2: (200, {}, "{broken")}
        cov = coverage_of(
            LokiSource(url=loki.url, source="syslog", selector='{job="syslog"}', limit=50), scope, staging2, []
        )
        assert cov.status == CoverageStatus.partial and cov.observations == 50
    finally:
        release_staging(staging2)


def test_timeout_and_refused(staged):
    scope, staging = staged
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TransientSourceError) as err:
        coverage_of(
            LokiSource(url=f"http://127.0.0.1:{port}", source="app", selector='{job="app"}'), scope, staging, []
        )
    assert "ConnectError" in str(err.value)
    with socket.socket() as listener:  # accepts, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(TransientSourceError) as err:
            coverage_of(LokiSource(url=url, source="app", selector='{job="app"}', timeout_s=0.5), scope, staging, [])
        assert err.value.status == "timeout"
