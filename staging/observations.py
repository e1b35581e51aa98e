"""Structured observations (scheduler records, metric samples) into staging, in bulk."""

from __future__ import annotations

import json
from collections.abc import Sequence

import duckdb

from workload_attribution.contracts.models import Observation
from workload_attribution.staging.database import MAX_TEXT, naive_utc


def insert_observations(con: duckdb.DuckDBPyConnection, observations: Sequence[Observation]) -> int:
    """Bulk-insert structured observations (records or samples) in one statement per table.

    Column lists travel as DuckDB list parameters and are unnested in SQL: one round trip,
    no per-row executemany (which runs at ~1k rows/s).
    """
    records = [o for o in observations if o.kind != "sample"]
    samples = [o for o in observations if o.kind == "sample"]
    if records:
        _insert_records(con, records)
    if samples:
        _insert_samples(con, samples)
    return len(observations)


def _insert_records(con: duckdb.DuckDBPyConnection, records: list[Observation]) -> None:
    con.execute(
        """
        INSERT INTO records
        SELECT nextval('obs_seq'), unnest($source), unnest($connector), unnest($node), unnest($kind),
               unnest($time), unnest($text), unnest($attrs)::JSON, unnest($path), unnest($line)
        """,
        {
            "source": [o.source for o in records],
            "connector": [o.connector for o in records],
            "node": [o.node for o in records],
            "kind": [o.kind for o in records],
            "time": [naive_utc(o.time) for o in records],
            "text": [o.text[:MAX_TEXT] for o in records],
            "attrs": [json.dumps(o.attrs, default=str) for o in records],
            "path": [o.path for o in records],
            "line": [o.line for o in records],
        },
    )


def _insert_samples(con: duckdb.DuckDBPyConnection, samples: list[Observation]) -> None:
    # One JSON document parsed by DuckDB: handing it nested Python lists costs a type probe per
    # value (seconds for 10^4 samples); json.dumps + from_json is milliseconds.
    payload = json.dumps(
        [
            {
                "source": o.source,
                "connector": o.connector,
                "node": o.node,
                "metric": o.attrs.get("__name__", o.series),
                "labels": {k: str(v) for k, v in (o.attrs.get("labels") or {}).items()},
                "series": o.series,
                "value": o.value,
                "time": t.isoformat() if (t := naive_utc(o.time)) else None,
                "path": o.path,
                "raw": o.text,
            }
            for o in samples
        ]
    )
    con.execute(
        """
        INSERT INTO samples
        SELECT nextval('obs_seq'), source, connector, node, metric, labels, series, value, time::TIMESTAMP,
               path, NULL, raw
        FROM (SELECT unnest(from_json($p::JSON, '[{"source": "VARCHAR", "connector": "VARCHAR", "node": "VARCHAR",
               "metric": "VARCHAR", "labels": "MAP(VARCHAR, VARCHAR)", "series": "VARCHAR", "value": "DOUBLE",
               "time": "VARCHAR", "path": "VARCHAR", "raw": "VARCHAR"}]'), recursive := true))
        """,
        {"p": payload},
    )


def non_finite(con: duckdb.DuckDBPyConnection, most: int = 10) -> dict[str, tuple[int, list[str]]]:
    """Per source, the samples whose value is NaN or +/-Inf: how many, and the first `most` of
    their series (shown capped)."""
    rows = con.execute(
        """
        SELECT source, count(*), list(DISTINCT left(series, 160) ORDER BY left(series, 160))[1:$most]
        FROM samples WHERE value IS NOT NULL AND NOT isfinite(value) GROUP BY source
        """,
        {"most": most},
    ).fetchall()
    return {source: (int(n), list(series)) for source, n, series in rows}
