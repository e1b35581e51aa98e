"""An attempt's staging database: made (or taken ahead) with its scope recorded, and released."""

from __future__ import annotations

from workload_attribution.contracts.models import AttemptScope
from workload_attribution.staging.ahead import take_ahead
from workload_attribution.staging.database import connect, naive_utc, new_staging_path, open_staging


def create_staging(scope: AttemptScope, path: str | None = None) -> str:
    """Create the schema and macros, record the scope; returns the path tasks connect with."""
    if path:
        open_staging(path)
    else:
        path = take_ahead()
        if path is None:
            path = new_staging_path()
            open_staging(path)
    con = connect(path)
    try:
        con.execute(
            "INSERT INTO attempt VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                scope.cluster,
                scope.scheduler,
                scope.job_id,
                scope.attempt,
                scope.nodes,
                naive_utc(scope.start),
                naive_utc(scope.end),
                scope.state,
                scope.exit_code,
                scope.reason,
                scope.timezone,
                scope.gpus_per_node,
            ],
        )
    finally:
        con.close()
    return path
