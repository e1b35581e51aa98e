"""Node-failure events from slurmctld lines (hostlists need expanding) and Kubernetes node conditions."""

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


def extract(con: duckdb.DuckDBPyConnection, settings: Settings) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for obs_id, body in con.execute(
        "SELECT obs_id, body FROM log_lines WHERE source = 'app' AND contains(body, 'Node failure on ')"
    ).fetchall():
        m = NODE_FAILURE.search(body)
        if m:
            out.append({"obs_id": obs_id, "symptom": "slurm_node_failure", "peer_node": m.group(1).rstrip(".,;:")})
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
