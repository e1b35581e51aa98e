"""Which host of the allocation the evidence names: the one place every rule that blames a host
asks (early/catalog-peer-to-host, early/name-the-host; the verdicts rules then read `peer_node`).

A name means an allocation host the way DNS compares names: case-insensitively, a short name as
its fully qualified one (n7 is n7.cluster.local), an address whole, and an EC2-style name as the
address it is named after (ip-10-15-20-17.ec2.internal is 10.15.20.17); an address the bundle's
own records tie to a host (the address NCCL bootstrapped with) is that host. A name that two
hosts answer to, or none, determines nobody: never a guess.

A node-level event (its verdict's blame is a host: contracts.vocabulary.NODE_LEVEL, or the
scheduler's NODE_FAIL) that names no host gets the one the evidence determines, in this order:
the allocation's only host; the host another line of the same report names (Open MPI's header,
then `hostname: X`); the host the scheduler's own record is about (a pod's nodeName, also for a
kubelet event on that pod, a node's condition, an event on a Node); for a lost node, the one host
of the steps that ended NODE_FAIL, or a host the job's reason names, then the only allocation host
whose kernel log reports hardware errors (MCE, EDAC, `[Hardware Error]`) during the attempt. When
none is determined the event says why (attrs.host_unnamed), and the diagnosis repeats it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from workload_attribution.contracts.vocabulary import node_level

if TYPE_CHECKING:
    import duckdb

    from workload_attribution.rules.engine import Settings

IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
EC2_NAME = re.compile(r"^ip-(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})$")
# the kernel's own words for a hardware error report (mce, EDAC, APEI/GHES)
KERNEL_HARDWARE_ERROR = re.compile(r"\[Hardware Error\]|\bEDAC\b|[Mm]achine [Cc]heck|\bmce: ")
LOST_NODE_STATES = ("NODE_FAIL", "BOOT_FAIL")


def host_key(name: str) -> str:
    """What a host name is compared by: an address whole; an EC2-style name as its address; any
    other name by its first label, case-insensitively."""
    n = name.strip().rstrip(".").lower()
    if IPV4.match(n):
        return n
    short = n.split(".", 1)[0]
    m = EC2_NAME.match(short)
    return ".".join(m.groups()) if m else short


def resolve(name: str | None, hosts: Iterable[str], addresses: dict[str, set[str]] | None = None) -> str | None:
    """The one host of `hosts` that `name` means, spelled as the allocation spells it; None when
    no host or more than one answers to it."""
    if not name:
        return None
    hosts = list(hosts)
    if name in hosts:
        return name
    key = host_key(name)
    found = {h for h in hosts if host_key(h) == key}
    found |= {h for h in (addresses or {}).get(key, set()) if h in hosts}
    return found.pop() if len(found) == 1 else None


def only_one(candidates: Iterable[str | None]) -> str | None:
    """The single host of candidates, if exactly one (never a guess among two)."""
    found = {c for c in candidates if c}
    return found.pop() if len(found) == 1 else None


# ------------------------------------------------------------------ the rules


def _allocation(con: duckdb.DuckDBPyConnection) -> list[str]:
    row = con.execute("SELECT nodes FROM attempt").fetchone()
    return [n for n in (row[0] if row and row[0] else []) if n]


def _addresses(con: duckdb.DuckDBPyConnection) -> dict[str, set[str]]:
    """Addresses the bundle's own records tie to a host: the one each NCCL rank bootstrapped with."""
    out: dict[str, set[str]] = {}
    for addr, node in con.execute(
        "SELECT json_extract_string(attrs, '$.addr'), node FROM events "
        "WHERE symptom = 'nccl_host_address' AND node IS NOT NULL"
    ).fetchall():
        if addr:
            out.setdefault(host_key(addr), set()).add(node)
    return out


def peers_to_hosts(con: duckdb.DuckDBPyConnection, settings: Settings) -> list[dict[str, Any]]:
    """catalog-peer-to-host: a peer a message names (attrs.peer, or peer_node) as the allocation
    spells it. A peer no host answers to keeps its name (scope-attempt then says so)."""
    hosts = _allocation(con)
    addresses = _addresses(con)
    out = []
    resolved: dict[str, str | None] = {}  # thousands of NCCL lines name a few peers
    for event_id, peer, peer_node in con.execute(
        "SELECT event_id, coalesce(json_extract_string(attrs, '$.peer'), peer_node), peer_node FROM events "
        "WHERE coalesce(json_extract_string(attrs, '$.peer'), peer_node) IS NOT NULL"
    ).fetchall():
        if peer not in resolved:
            resolved[peer] = resolve(peer, hosts, addresses)
        host = resolved[peer]
        if host is not None and host != peer_node:
            out.append({"event_id": event_id, "peer_node": host})
    return out


class _Evidence:
    """What the attempt's records and kernel logs say of its hosts, read once."""

    def __init__(self, con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
        self.hosts = _allocation(con)
        self.record_nodes = self._record_nodes(con)
        self.scheduler_named = self._scheduler_named(con)
        self.kernel_reporting = sorted(self._kernel_reporting(con, settings))

    @staticmethod
    def _record_nodes(con: duckdb.DuckDBPyConnection) -> dict[int, str]:
        """The node each scheduler record is about: its own (a pod's nodeName, a node's condition, a
        kubelet event on a Node), or for an event on a Pod, the node the pod's status gives."""
        return dict(
            con.execute("""
            WITH pods AS (
                SELECT json_extract_string(attrs, '$.pod') AS pod, node FROM records
                WHERE kind IN ('pod_terminated', 'pod_disruption') AND node IS NOT NULL
            )
            SELECT r.obs_id, any_value(coalesce(r.node, p.node)) FROM records r
            LEFT JOIN pods p ON r.node IS NULL AND r.kind = 'k8s_event'
                 AND json_extract_string(r.attrs, '$.kind') = 'Pod' AND p.pod = json_extract_string(r.attrs, '$.name')
            WHERE coalesce(r.node, p.node) IS NOT NULL
            GROUP BY r.obs_id HAVING count(DISTINCT coalesce(r.node, p.node)) = 1
            """).fetchall()
        )

    def _scheduler_named(self, con: duckdb.DuckDBPyConnection) -> str | None:
        """The one host the scheduler's record says the job lost: the host of the steps that ended
        NODE_FAIL when each ran on one, else the one allocation host the job's reason names."""
        lost_steps: list[set[str | None]] = []
        named: list[str | None] = []
        for kind, attrs in con.execute(
            "SELECT kind, attrs FROM records WHERE kind IN ('sacct_step', 'sacct_job', 'scheduler_job')"
        ).fetchall():
            a = json.loads(attrs) if isinstance(attrs, str) else (attrs or {})
            if kind == "sacct_step" and str(a.get("state") or "").upper() in LOST_NODE_STATES:
                lost_steps.append({resolve(n, self.hosts) for n in a.get("nodes") or []})
            reason = a.get("reason")
            if isinstance(reason, str):
                named += [resolve(w, self.hosts) for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9._-]*", reason)]
        if lost_steps and all(len(s) == 1 for s in lost_steps):
            return only_one(h for s in lost_steps for h in s)
        return only_one(named)

    def _kernel_reporting(self, con: duckdb.DuckDBPyConnection, settings: Settings) -> set[str]:
        """The allocation hosts whose kernel log reports a hardware error during the attempt."""
        found = set()
        for node, body in con.execute(
            """
            SELECT l.node, l.body FROM log_lines l, attempt a, settings s
            WHERE l.source = 'syslog' AND l.node IS NOT NULL
              AND (l.time IS NULL OR l.time BETWEEN a.start_time - to_seconds(s.skew_tolerance_s)
                                                 AND a.end_time + to_seconds(s.skew_tolerance_s))
              AND (contains(l.body, 'Hardware Error') OR contains(l.body, 'EDAC')
                   OR contains(lower(l.body), 'machine check') OR contains(l.body, 'mce: '))
            """
        ).fetchall():
            host = resolve(node, self.hosts)
            if host and KERNEL_HARDWARE_ERROR.search(body or ""):
                found.add(host)
        return found

    def determine(self, lost_node: bool, record_node: str | None, told: list[str]) -> tuple[str | None, str]:
        """(the host, how) or (None, why none)."""
        if len(self.hosts) == 1:
            return self.hosts[0], "the allocation's only host"
        if told:
            host = only_one(resolve(t, self.hosts) for t in told)
            if host and len(told) == 1:
                return host, "the host the report's other line names"
        if record_node:
            host = resolve(record_node, self.hosts)
            if host:
                return host, "the host the scheduler's record is about"
        if lost_node and self.scheduler_named:
            return self.scheduler_named, "the host the scheduler's record names"
        if lost_node and len(self.kernel_reporting) == 1:
            return self.kernel_reporting[0], "the only host whose kernel log reports hardware errors"
        why = f"the evidence names no host of the {len(self.hosts)} allocated"
        if not self.hosts:
            why = "the attempt's allocation is not known"
        elif lost_node and len(self.kernel_reporting) > 1:
            reporting = ", ".join(self.kernel_reporting[:3])
            why += f" ({len(self.kernel_reporting)} hosts' kernel logs report hardware errors: {reporting})"
        elif lost_node:
            why += "; the scheduler's record gives no node"
        return None, why


def name_hosts(con: duckdb.DuckDBPyConnection, settings: Settings) -> list[dict[str, Any]]:
    """name-the-host: a node-level event naming no host gets the host the evidence determines
    (peer_node, blame peer, attrs.host_by), or says why none (attrs.host_unnamed)."""
    rows = con.execute(
        """
        SELECT e.event_id, e.obs_id, e.symptom, e.terminal_state, e.sub_domain,
               json_extract_string(e.attrs, '$.terminal_state'), json_extract_string(e.attrs, '$.sub_domain'),
               -- the same report told in several lines of one host (Open MPI's header, then the line
               -- naming the node): what its other lines name
               (SELECT list(DISTINCT o.peer_node) FROM events o, settings s
                WHERE o.symptom = e.symptom AND o.node IS NOT DISTINCT FROM e.node AND o.peer_node IS NOT NULL
                  AND o.event_id <> e.event_id AND o.blame = 'peer'
                  AND (o.time IS NULL AND e.time IS NULL
                       OR abs(epoch(o.time) - epoch(e.time)) <= s.skew_tolerance_s)) AS told
        FROM events e
        WHERE e.role_hint IN ('root_candidate', 'scheduler') AND e.peer_node IS NULL
          AND (e.blame IS NULL OR e.blame IN ('none', 'peer'))
        """
    ).fetchall()
    wanted = []
    for event_id, obs_id, symptom, ts, sd, said_ts, said_sd, told in rows:
        if symptom == "scheduler_state":  # the scheduler's own word on the attempt: a lost node?
            ts, sd = said_ts, said_sd
        if node_level(ts, sd):
            wanted.append((event_id, obs_id, sd == "node_unreachable", told or []))
    if not wanted:
        return []
    evidence = _Evidence(con, settings)
    out: list[dict[str, Any]] = []
    for event_id, obs_id, lost, told in wanted:
        host, how = evidence.determine(lost, evidence.record_nodes.get(obs_id), told)
        if host:
            out.append({"event_id": event_id, "peer_node": host, "blame": "peer", "attrs": {"host_by": how}})
        else:
            out.append({"event_id": event_id, "attrs": {"host_unnamed": how}})
    return out
