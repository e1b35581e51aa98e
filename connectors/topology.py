"""Fabric topology: which host (HCA) or switch each switch port is cabled to.

Two inputs, one shape: the bundle's topology.yaml (docs/contracts.md) and the text
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
    """A topology document that is not one (wrong shape, unknown line), or one past the bounds."""


# Bounds: a topology larger than these is refused whole (nothing of it is stored). 200,000 links
# cable 20,000 hosts with 8 rails each plus their switches; the file is read whole, so its size is
# bounded too.
MAX_LINKS = 200_000
MAX_TOPOLOGY_BYTES = 32 << 20
MAX_NAME = 253  # a host or switch name (DNS)
_NAME = re.compile(r"^[^\x00-\x1f\x7f-\x9f]{1,253}$")


def check_size(text: str, loader: Any, most: int = MAX_LINKS) -> None:
    """Refuse, before building it, a YAML document with more scalars than `most` links can hold
    (each link is a port and a peer): the document is only parsed into events, never held whole."""
    import yaml

    scalars, limit = 0, 2 * most + 10_000
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.ScalarEvent):
            scalars += 1
            if scalars > limit:
                raise TopologyError(f"more than {most:,} links: refused (nothing of it is stored)")


def _name(value: Any) -> str | None:
    """A switch, port or host name as a string, or None when it cannot be one."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    text = str(value)
    return text if _NAME.match(text) else None


def links_from_yaml(doc: Any, skipped: list[str] | None = None, most: int = MAX_LINKS) -> list[Link]:
    """The links of a topology.yaml document. An entry that cannot be a link (a port cabled to a
    list, a name with control characters) is left out and named in `skipped` (when given; else the
    document is refused); more than `most` links refuse the document."""
    switches = doc.get("switches") if isinstance(doc, dict) else None
    if not isinstance(switches, dict):
        raise TopologyError("expected a 'switches' mapping")

    def skip(what: str) -> None:
        if skipped is None:
            raise TopologyError(what)
        skipped.append(what)

    names = {str(k) for k in switches}
    out: list[Link] = []
    for switch, spec in switches.items():
        sw = _name(switch)
        if sw is None:
            skip(f"switch {str(switch)[:60]!r}: not a name")
            continue
        if spec is not None and not isinstance(spec, dict):
            skip(f"switch {sw}: expected a mapping with 'ports'")
            continue
        ports = (spec or {}).get("ports")
        if ports is not None and not isinstance(ports, dict):
            skip(f"switch {sw}: 'ports' must map port -> host or switch")
            continue
        for port, peer in (ports or {}).items():
            p, target = _name(port), _name(peer)
            if p is None or target is None:
                skip(f"switch {sw} port {str(port)[:20]!r}: cabled to {str(peer)[:40]!r}, not a host or switch name")
                continue
            if len(out) >= most:
                raise TopologyError(f"more than {most:,} links: refused (nothing of it is stored)")
            host, _, hca = target.partition(":")
            out.append((sw, p, host, "switch" if host in names else "host", hca or None))
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
            if len(pending) >= MAX_LINKS:
                raise TopologyError(f"more than {MAX_LINKS:,} links: refused (nothing of it is stored)")
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
