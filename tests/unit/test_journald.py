"""The journald source: exports of `journalctl -o json` (one object per line; field values are
strings, a non-UTF-8 field an array of byte values, a field given twice an array of strings, as
systemd's "Journal JSON Format" documents). No journal daemon runs here, so the exports are written
in that documented format; the connector is reached through the registry like any other."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from tests.helpers import collect
from workload_attribution.connectors import registry
from workload_attribution.connectors.journald import JournaldSource
from workload_attribution.contracts.models import AttemptScope
from workload_attribution.staging.attempt import create_staging
from workload_attribution.staging.database import connected, release_staging

START = datetime(2026, 11, 20, 10, 0, tzinfo=timezone.utc)
END = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)
XID = "NVRM: Xid (PCI:0000:c1:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def entry(host: str, when: datetime, message, transport: str = "kernel", ident: str = "kernel") -> str:
    doc = {
        "__CURSOR": "s=0;i=1",
        "__REALTIME_TIMESTAMP": str(int(when.timestamp() * 1_000_000)),
        "__MONOTONIC_TIMESTAMP": "806501166317",
        "_BOOT_ID": "6c7c6013a26343b29e964691ff25d04c",
        "_TRANSPORT": transport,
        "PRIORITY": "3",
        "SYSLOG_IDENTIFIER": ident,
        "_HOSTNAME": host,
        "MESSAGE": message,
    }
    if transport != "kernel":
        doc["_PID"] = "4242"
    return json.dumps(doc)


@pytest.fixture
def scope():
    return AttemptScope(
        cluster="c",
        scheduler="static",
        job_id="n1,n2@x",
        attempt=0,
        nodes=["n1", "n2"],
        start=START,
        end=END,
        state="UNKNOWN",
    )


def staged_lines(scope, cfg, prefilter=("NVRM: Xid", "Link down")):
    staging = create_staging(scope)
    try:
        got = collect(cfg, scope, staging, source="syslog", prefilter=prefilter)
        with connected(staging) as con:
            lines = con.execute(
                "SELECT s.node, r.lineno, r.line, r.collector_time FROM raw_lines r "
                "JOIN source_files s USING (file_id) ORDER BY s.node, r.lineno"
            ).fetchall()
        return got.coverage, lines
    finally:
        release_staging(staging)


def test_registered_and_in_the_configuration_schema():
    from workload_attribution.connectors.clusters import ClusterConfig

    assert registry.get("journald").config is JournaldSource
    cluster = ClusterConfig.model_validate(
        {"scheduler": "static", "sources": {"syslog": {"connector": "journald", "path": "/x/{host}.json"}}}
    )
    assert isinstance(cluster.sources["syslog"], JournaldSource)


def test_one_export_per_host(tmp_path, scope):
    t = datetime(2026, 11, 20, 11, 0, 5, 512000, tzinfo=timezone.utc)
    (tmp_path / "n1.json").write_text(
        "\n".join(
            [
                entry("n1", t, XID),
                entry("n1", t, "systemd-logind: New session 4 of user alice.", "syslog", "systemd-logind"),
                entry("n1", t, [78, 86, 82, 77, 58, 32, 88, 105, 100, 32, 0xFF, 0xFE]),  # "NVRM: Xid " + bad bytes
            ]
        )
        + "\n"
    )
    (tmp_path / "n2.json").write_text(
        entry(
            "n2",
            t,
            "mlx5_core 0000:0c:00.0 ibp12s0: Link down",
        )
        + "\n"
    )
    cov, lines = staged_lines(scope, JournaldSource(path=str(tmp_path / "{host}.json")))
    assert cov.status.value == "ok" and cov.nodes == ["n1", "n2"] and cov.observations == 4
    assert cov.details.binary_messages == 1 and cov.details.matched_lines == 3
    assert [(n, ln) for n, ln, _, _ in lines] == [("n1", 1), ("n1", 3), ("n2", 1)]  # numbered as in the file
    assert lines[0][2] == f"kernel: {XID}" and lines[0][3] == t.replace(tzinfo=None)
    assert lines[1][2].startswith("kernel: NVRM: Xid ")


def test_one_export_for_the_fleet_keeps_the_attempts_hosts_and_window(tmp_path, scope):
    inside, before = (
        datetime(2026, 11, 20, 11, 0, tzinfo=timezone.utc),
        datetime(2026, 11, 19, 8, 0, tzinfo=timezone.utc),
    )
    (tmp_path / "fleet.json").write_text(
        "\n".join(
            [
                entry("n1.cluster.example", inside, XID),  # a FQDN hostname is the allocation's n1
                entry("n9", inside, XID),  # not in the allocation: context elsewhere, not here
                entry("n2", before, XID),  # a day before the attempt: out of its window
                "this line is not JSON",
                json.dumps({"MESSAGE": "no timestamp"}),
                "",
            ]
        )
    )
    cov, lines = staged_lines(scope, JournaldSource(path=str(tmp_path / "fleet.json")))
    assert [(n, text.endswith("fallen off the bus.")) for n, _, text, _ in lines] == [("n1", True)]
    assert cov.status.value == "partial" and cov.unparsed == 2
    assert cov.details.other_hosts == 1 and cov.details.outside_window == 1
    assert "not journal entries" in cov.error


def test_missing_exports_are_reported_not_healthy(tmp_path, scope):
    cov, _ = staged_lines(scope, JournaldSource(path=str(tmp_path / "{host}.json")))
    assert cov.status.value == "unavailable" and "no journal export" in cov.error
    (tmp_path / "n1.json").write_text(entry("n1", datetime(2026, 11, 20, 11, 0, tzinfo=timezone.utc), XID) + "\n")
    cov, _ = staged_lines(scope, JournaldSource(path=str(tmp_path / "{host}.json")))
    assert cov.status.value == "partial" and cov.details.missing_nodes == ["n2"]


def test_a_diagnosis_from_journald_syslog(tmp_path):
    """A window on a static cluster whose syslog is journald exports: the XID, minutes before the
    window's end (no scheduler record: the end is when the attempt failed), is the root."""
    from workload_attribution.connectors.clusters import ClusterConfig
    from workload_attribution.contracts.identity import Target, Window
    from workload_attribution.flows.inline import attribute_inline
    from workload_attribution.flows.pipeline import Options
    from workload_attribution.rules.pack import default_pack

    t = datetime(2026, 11, 20, 11, 57, 5, tzinfo=timezone.utc)
    for host in ("n1", "n2"):
        (tmp_path / f"{host}.json").write_text(entry(host, t, XID if host == "n2" else "kernel: nothing") + "\n")
    cluster = ClusterConfig.model_validate(
        {"scheduler": "static", "sources": {"syslog": {"connector": "journald", "path": str(tmp_path / "{host}.json")}}}
    )
    d = attribute_inline(
        Target(cluster="c", window=Window(nodes=["n1", "n2"], start=START, end=END)),
        Options(pack=default_pack(), cluster=cluster),
    )
    assert (d.terminal_state, d.sub_domain, d.affected_nodes) == ("hardware_failure", "gpu", ["n2"])
    root = {e.id: e for e in d.evidence}[d.root_cause.evidence[0]]
    assert root.connector == "journald" and root.ref == str(tmp_path / "n2.json") + ":1"
