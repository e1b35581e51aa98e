"""Fabric topology: which host (HCA) or switch each switch port is cabled to.

Two inputs, one shape: the bundle's topology.yaml (see README: the bundle) and the text
`ibnetdiscover` prints (the InfiniBand subnet discovery tool of rdma-core/infiniband-diags).
Both give links (switch, port, peer, peer_kind, hca); a link to a name that is itself a
switch is an inter-switch link.
"""

from __future__ import annotations

import re
from typing import Any

from workload_attribution.contracts.errors import BadInput

Link = tuple[str, str, str, str, str | None]  # switch, port, peer, peer_kind ('host' | 'switch'), hca


class TopologyError(BadInput):
    """A topology document that is not one (wrong shape, unknown line)."""


def links_from_yaml(doc: Any) -> list[Link]:
    switches = doc.get("switches") if isinstance(doc, dict) else None
    if not isinstance(switches, dict):
        raise TopologyError("expected a 'switches' mapping")
    out = []
    for switch, spec in switches.items():
        ports = (spec or {}).get("ports") if isinstance(spec, dict) or spec is None else None
        if ports is not None and not isinstance(ports, dict):
            raise TopologyError(f"switch {switch}: 'ports' must map port -> host or switch")
        for port, peer in (ports or {}).items():
            host, _, hca = str(peer).partition(":")
            out.append((str(switch), str(port), host, "switch" if host in switches else "host", hca or None))
    return out


# Switch	36 "S-0002c90200448bf8"		# "MF0;leaf-07:SX6036/U1" enhanced port 0 lid 3 lmc 0
_SWITCH = re.compile(r'^Switch\s+\d+\s+"(?P<guid>[^"]+)"\s*#\s*"(?P<desc>[^"]*)"')
# [17]	"H-0002c903000a1b2c"[1](2c903000a1b2d) 		# "node-01 mlx5_0" lid 5 4xHDR
_PORT = re.compile(
    r'^\[(?P<port>\d+)\](?:\([0-9a-fA-F]+\))?\s+"(?P<kind>[HSR])-(?P<guid>[0-9a-fA-F]+)"\[\d+\][^#]*#\s*"(?P<desc>[^"]*)"'
)


def _switch_name(desc: str, guid: str) -> str:
    # Mellanox/NVIDIA switches describe themselves as "MF0;<hostname>:<model>/<unit>"
    m = re.match(r"^MF0;([^:]+):", desc)
    return (m.group(1) if m else desc.strip()) or guid


def links_from_ibnetdiscover(text: str) -> list[Link]:
    out: list[Link] = []
    switch = None
    names: dict[str, str] = {}
    pending: list[tuple[str, str, str, str]] = []
    for line in text.splitlines():
        line = line.strip()
        m = _SWITCH.match(line)
        if m:
            switch = _switch_name(m.group("desc"), m.group("guid"))
            names["S-" + m.group("guid").split("-", 1)[-1].lower()] = switch
            continue
        if not line or line.startswith(("vendid", "devid", "sysimgguid", "switchguid", "caguid", "#")):
            continue
        if line.startswith(("Ca", "Rt")):
            switch = None  # a host block: its ports point back at switches we already have
            continue
        m = _PORT.match(line)
        if m and switch:
            pending.append((switch, m.group("port"), m.group("kind"), m.group("desc")))
    if not pending and text.strip():
        raise TopologyError("no 'Switch' block with cabled ports: not ibnetdiscover output")
    for sw, port, kind, desc in pending:
        if kind == "H":
            host, _, hca = desc.partition(" ")
            out.append((sw, port, host, "host", hca.strip() or None))
        else:
            out.append((sw, port, _switch_name(desc, desc), "switch", None))
    return out
