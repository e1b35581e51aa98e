"""workload-attribution: why did this GPU training attempt die, and whom should we isolate?

The package root holds the interfaces (the `attribution` CLI, the HTTP service, the dashboard);
the layers below are subpackages: contracts (ground), staging, connectors / rules / warehouse,
tasks, flows. See README.md, "Architecture".
"""

from __future__ import annotations


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("workload-attribution")
    except PackageNotFoundError:
        return "0+unknown"
