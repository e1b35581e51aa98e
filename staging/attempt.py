"""An attempt's staging database: made (or taken ahead) with its scope recorded, and released."""

from __future__ import annotations

import itertools

from workload_attribution.contracts.models import AttemptScope
from workload_attribution.staging.ahead import stage_ahead, take_ahead
from workload_attribution.staging.database import connect, naive_utc, new_staging_path, open_staging

# How many attempts' databases this process has made or taken.
_created = itertools.count()


def create_staging(scope: AttemptScope, path: str | None = None) -> str:
    """Create the schema and macros, record the scope; returns the path tasks connect with.

    From a process' second attempt on (a server, a worker, an evaluation: it will likely diagnose
    again), the next attempt's database is made meanwhile on another thread (staging/ahead.py):
    a database cannot serve two attempts (the rules lock its configuration: rules/sandbox.py), and
    making one (~25 ms of a warm attempt's CPU, mostly DuckDB's) is then off the attempt's way. A
    single diagnosis (`attribution diagnose`) makes none it would not use."""
    if path:
        open_staging(path)
    else:
        path = take_ahead()
        if path is None:
            path = new_staging_path()
            open_staging(path)
        if next(_created):
            try:
                stage_ahead()
            except RuntimeError:  # no thread starts while the interpreter shuts down: made when needed
                pass
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
