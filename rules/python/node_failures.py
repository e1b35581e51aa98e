"""Node-failure events from slurmctld lines (hostlists need expanding), Open MPI's lost-daemon report
(the node on a line of its own) and Kubernetes node conditions."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from workload_attribution.contracts.hostlist import HostlistError, expand_hostlist

if TYPE_CHECKING:
    import duckdb

    from workload_attribution.rules.engine import Settings

NOT_RESPONDING = re.compile(r"Nodes (\S+) not responding, setting DOWN")
KILLED = re.compile(r"(?:on failed node|due to failure of node) (\S+)")
NODE_FAILURE = re.compile(r"Node failure on (\S+)")
# Open MPI 4's report prints the lost node on a line of its own under its header (help-errmgr-base.txt):
#   ORTE has lost communication with its daemon located on node:
#     hostname:  X
LOST_DAEMON_HEADER = "has lost communication with its daemon located on node"
LOST_DAEMON_HOST = re.compile(r"^\s*hostname:\s+(\S+)\s*$")
HEADER_REACH = 3  # the hostname line follows the header within this many lines (a blank between)


def extract(con: duckdb.DuckDBPyConnection, settings: Settings) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for obs_id, body in con.execute(
        "SELECT obs_id, body FROM log_lines WHERE source = 'app' AND contains(body, 'Node failure on ')"
    ).fetchall():
        m = NODE_FAILURE.search(body)
        if m:
            out.append({"obs_id": obs_id, "symptom": "slurm_node_failure", "peer_node": m.group(1).rstrip(".,;:")})
    out += _lost_daemon_hosts(con)
    for obs_id, body in con.execute(
        "SELECT obs_id, body FROM log_lines WHERE source = 'scheduler_log' "
        "AND (contains(body, 'not responding, setting DOWN') OR contains(body, 'on failed node') "
        "OR contains(body, 'due to failure of node'))"
    ).fetchall():
        m = NOT_RESPONDING.search(body)
        if m:
            try:
                hosts = expand_hostlist(m.group(1))
            except HostlistError:
                hosts = [m.group(1)]
            out += [
                {
                    "obs_id": obs_id,
                    "symptom": "slurm_node_not_responding",
                    "peer_node": h,
                    "attrs": {"hostlist": m.group(1)},
                }
                for h in hosts
            ]
            continue
        m = KILLED.search(body)
        if m:
            out.append(
                {"obs_id": obs_id, "symptom": "slurm_killed_on_failed_node", "peer_node": m.group(1).rstrip(".,")}
            )
    for obs_id, node in con.execute(
        "SELECT obs_id, node FROM records WHERE kind = 'node_condition' "
        "AND json_extract_string(attrs, '$.type') = 'Ready' "
        "AND json_extract_string(attrs, '$.status') IN ('Unknown', 'False')"
    ).fetchall():
        out.append({"obs_id": obs_id, "symptom": "k8s_node_not_ready", "node": node})
    return out


def _lost_daemon_hosts(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """`hostname:  X` just under Open MPI's lost-daemon header of the same file: the node it lost
    (alone, `hostname:` is any program's word)."""
    out: list[dict[str, Any]] = []
    for obs_id, body in con.execute(
        f"""
        SELECT h.obs_id, h.body FROM log_lines h
        WHERE h.source = 'app' AND contains(h.body, 'hostname:')
          AND EXISTS (SELECT 1 FROM log_lines l WHERE l.source = 'app' AND l.path IS NOT DISTINCT FROM h.path
                      AND l.node IS NOT DISTINCT FROM h.node AND contains(l.body, '{LOST_DAEMON_HEADER}')
                      AND h.lineno - l.lineno BETWEEN 1 AND {HEADER_REACH})
        """
    ).fetchall():
        m = LOST_DAEMON_HOST.match(body)
        if m:
            host = m.group(1)
            out.append(
                {
                    "obs_id": obs_id,
                    "symptom": "mpi_daemon_lost",
                    "peer_node": host,
                    "blame": "peer",
                    "attrs": {"peer": host, "kind": "ompi_hostname_line"},
                }
            )
    return out
