"""Topology: both input formats, snapshots with validity in time (any load order), and the
switch-port view placing each diagnosis's hosts with the topology of its attempt's time."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.conftest import PLANTED_PORT
from workload_attribution.cli import main
from workload_attribution.connectors.topology import TopologyError, links_from_ibnetdiscover, links_from_yaml
from workload_attribution.warehouse.store import Warehouse

IBNETDISCOVER = """#
# Topology file: generated on Tue Nov 24 09:12:01 2026
#
# Initiated from node 0002c903000a1b2c port 0002c903000a1b2d

vendid=0x2c9
devid=0xd2f0
sysimgguid=0xb8cef603008f6a00
switchguid=0xb8cef603008f6a00(b8cef603008f6a00)
Switch\t41 "S-b8cef603008f6a00"\t\t# "MF0;leaf-07:MQM9700/U1" enhanced port 0 lid 3 lmc 0
[17]\t"H-0002c903000a1b2c"[1](2c903000a1b2d) \t\t# "gpu0017 mlx5_0" lid 5 4xNDR
[18]\t"H-0002c903000a1b3c"[1](2c903000a1b3d) \t\t# "gpu0018 mlx5_0" lid 6 4xNDR
[33]\t"S-b8cef603008f7b00"[5]\t\t# "spine-01" lid 9 4xNDR

vendid=0x2c9
devid=0xd2f0
switchguid=0xb8cef603008f7b00(b8cef603008f7b00)
Switch\t41 "S-b8cef603008f7b00"\t\t# "spine-01" enhanced port 0 lid 9 lmc 0
[5]\t"S-b8cef603008f6a00"[33]\t\t# "MF0;leaf-07:MQM9700/U1" lid 3 4xNDR

vendid=0x2c9
devid=0x1021
caguid=0x2c903000a1b2c
Ca\t1 "H-0002c903000a1b2c"\t\t# "gpu0017 mlx5_0"
[1](2c903000a1b2d) \t"S-b8cef603008f6a00"[17]\t\t# lid 5 lmc 0 "MF0;leaf-07:MQM9700/U1" lid 3 4xNDR
"""


def test_ibnetdiscover_links():
    assert sorted(links_from_ibnetdiscover(IBNETDISCOVER)) == [
        ("leaf-07", "17", "gpu0017", "host", "mlx5_0"),
        ("leaf-07", "18", "gpu0018", "host", "mlx5_0"),
        ("leaf-07", "33", "spine-01", "switch", None),
        ("spine-01", "5", "leaf-07", "switch", None),
    ]


@pytest.mark.parametrize("text", ["hello world\n", 'Ca\t1 "H-01"\t# "x"\n'])
def test_ibnetdiscover_refuses_other_text(text):
    with pytest.raises(TopologyError):
        links_from_ibnetdiscover(text)


def test_yaml_links_and_errors():
    assert links_from_yaml(
        {"switches": {"leaf-1": {"ports": {5: "a:mlx5_1", 33: "spine"}}, "spine": {"ports": {1: "leaf-1"}}}}
    ) == [
        ("leaf-1", "5", "a", "host", "mlx5_1"),
        ("leaf-1", "33", "spine", "switch", None),
        ("spine", "1", "leaf-1", "switch", None),
    ]
    for bad in ({}, {"switches": []}, {"switches": {"leaf-1": {"ports": ["a", "b"]}}}, []):
        with pytest.raises(TopologyError):
            links_from_yaml(bad)


def t(day: int) -> datetime:
    return datetime(2026, 11, day, tzinfo=timezone.utc)


def test_history_recabling_moves_and_out_of_order_snapshots(tmp_path):
    wh = Warehouse(tmp_path / "w.duckdb")
    wh.load_topology("c", [("leaf-1", "5", "A", "host", None), ("leaf-1", "6", "B", "host", None)], t(1), "s1")
    # day 10: port 5 recabled to C, B moved to leaf-2:1 (its old port not re-observed)
    wh.load_topology("c", [("leaf-1", "5", "C", "host", None), ("leaf-2", "1", "B", "host", None)], t(10), "s3")
    # loaded last but taken on day 5: nothing changed since day 1, so no new span begins
    assert (
        wh.load_topology("c", [("leaf-1", "5", "A", "host", None), ("leaf-1", "6", "B", "host", None)], t(5), "s2") == 2
    )
    cols, rows = wh.query(
        "SELECT switch, port, peer, valid_from, valid_to FROM topology_history ORDER BY switch, port, valid_from"
    )
    assert [(r[0], r[1], r[2], r[3].day, r[4].day if r[4] else None) for r in rows] == [
        ("leaf-1", "5", "A", 1, 10),
        ("leaf-1", "5", "C", 10, None),
        ("leaf-1", "6", "B", 1, 10),  # B left for leaf-2:1 on day 10
        ("leaf-2", "1", "B", 10, None),
    ]
    # the same snapshot again adds nothing
    assert (
        wh.load_topology("c", [("leaf-1", "5", "C", "host", None), ("leaf-2", "1", "B", "host", None)], t(10), "s3")
        == 0
    )


def test_switch_port_view_uses_the_topology_of_the_attempts_time(tmp_path):
    import duckdb

    wh = Warehouse(tmp_path / "w.duckdb")
    wh.load_topology("c", [("leaf-1", "5", "A", "host", None), ("leaf-1", "6", "B", "host", None)], t(1), "s1")
    wh.load_topology("c", [("leaf-1", "5", "C", "host", None), ("leaf-2", "1", "B", "host", None)], t(10), "s2")
    with duckdb.connect(str(wh.path)) as con:
        for i, (node, day) in enumerate([("A", 3), ("C", 12), ("B", 12), ("B", 4)]):
            con.execute(
                """INSERT INTO diagnoses (cluster, scheduler, job_id, attempt, diagnosis_id, terminal_state, sub_domain,
                           root_node, end_time, rules_version, created_at, diagnosis)
                           VALUES ('c', 'slurm', ?, 0, ?, 'infrastructure_failure', 'network_link', ?, ?, 'v', now(),
                                   '{}')""",
                [str(i), f"d{i}", node, t(day)],
            )
    _, rows = wh.query("switch_port_patterns")
    assert [(r[1], r[2], r[3], r[5]) for r in rows] == [
        ("leaf-1", "5", 2, ["A", "C"]),  # two hosts, one port: the port is the pattern
        ("leaf-2", "1", 1, ["B"]),
        ("leaf-1", "6", 1, ["B"]),
    ]


def test_cli_loads_both_formats(tmp_path, capsys):
    wh = str(tmp_path / "w.duckdb")
    (tmp_path / "fabric.txt").write_text(IBNETDISCOVER)
    (tmp_path / "topology.yaml").write_text("switches:\n  leaf-07:\n    ports:\n      17: gpu0099:mlx5_0\n")
    assert (
        main(
            [
                "topology",
                "load",
                str(tmp_path / "fabric.txt"),
                "--cluster",
                "eos",
                "--valid-from",
                "2026-11-24T09:12:01Z",
                "--warehouse",
                wh,
            ]
        )
        == 0
    )
    assert "4 link(s) (2 to hosts) as of 2026-11-24T09:12:01+00:00, 4 new" in capsys.readouterr().out
    assert (
        main(
            [
                "topology",
                "load",
                str(tmp_path / "topology.yaml"),
                "--cluster",
                "eos",
                "--valid-from",
                "2026-11-25T00:00:00Z",
                "--warehouse",
                wh,
            ]
        )
        == 0
    )
    _, rows = Warehouse(wh).query(
        "SELECT peer FROM topology_history WHERE switch = 'leaf-07' AND port = '17' AND valid_to IS NULL"
    )
    assert rows == [("gpu0099",)]
    (tmp_path / "bad.txt").write_text("not a topology at all\n")
    assert main(["topology", "load", str(tmp_path / "bad.txt"), "--cluster", "eos", "--warehouse", wh]) == 2


def test_seeded_warehouse_names_the_planted_port_first(seeded_warehouse):
    _, rows = Warehouse(seeded_warehouse).query("switch_port_patterns")
    top = rows[0]
    assert (top[1], top[2]) == PLANTED_PORT
    assert top[3] == 5 and top[4] == 5 and top[6] == ["network_link"]  # 5 attempts, 5 different hosts
    assert all(r[3] <= 1 for r in rows[1:])
    _, n = Warehouse(seeded_warehouse).query("SELECT count(*) FROM diagnoses")
    assert n[0][0] == 25  # 26 bundles, the completed one is not a failure: not backfilled
