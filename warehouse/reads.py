"""The reads the HTTP service and the dashboard make, as functions over a Warehouse: every filter
bound as a parameter, never interpolated; every read through the sandboxed reader."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from workload_attribution.warehouse.store import Warehouse

LIST_COLUMNS = [
    "diagnosis_id",
    "cluster",
    "scheduler",
    "job_id",
    "attempt",
    "attempt_end",
    "terminal_state",
    "sub_domain",
    "confidence",
    "root_node",
    "root_symptom",
    "affected_nodes",
    "recommended_action",
    "rules_version",
]

_DIAGNOSES_API = """
WITH diagnoses_api AS (
SELECT d.diagnosis_id, d.cluster, d.scheduler, d.job_id, d.attempt, d.end_time AS attempt_end, d.terminal_state,
       d.sub_domain, d.confidence, d.root_node, d.root_symptom,
       list(a.node ORDER BY a.node) FILTER (WHERE a.node IS NOT NULL) AS affected_nodes, d.recommended_action,
       d.rules_version
FROM diagnoses d LEFT JOIN diagnosis_affected_nodes a USING (diagnosis_id)
GROUP BY ALL)
"""


# The switch ports a diagnosis blames: where its root's host and its affected hosts were cabled at
# the attempt's end (topology_history), and affected components named switch:port. One definition
# for the filter, the chart and the diagnosis page, so a port's link lists what its bar counts.
_BLAMED_PORTS = """
SELECT b.diagnosis_id, t.switch || ':' || t.port AS port
FROM (SELECT diagnosis_id, cluster, end_time, root_node AS node FROM diagnoses WHERE root_node IS NOT NULL
      UNION SELECT d.diagnosis_id, d.cluster, d.end_time, a.node
            FROM diagnoses d JOIN diagnosis_affected_nodes a USING (diagnosis_id) WHERE a.node IS NOT NULL) b
JOIN topology_history t
  ON t.cluster = b.cluster AND t.peer_kind = 'host' AND t.peer = b.node
 AND b.end_time >= t.valid_from AND (t.valid_to IS NULL OR b.end_time < t.valid_to)
UNION SELECT diagnosis_id, component FROM diagnosis_affected_components WHERE component LIKE '%:%'
"""


@dataclass(frozen=True)
class Filters:
    cluster: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    terminal_state: str | None = None
    sub_domain: str | None = None
    node: str | None = None  # the root's node or an affected node
    symptom: str | None = None  # a symptom of the diagnosis (e.g. xid_79), any role
    switch_port: str | None = None  # "switch:port" blamed

    def where(self) -> tuple[str, list[Any]]:
        conds, args = [], []
        for cond, value in (
            ("cluster = ?", self.cluster),
            ("attempt_end >= ?", self.since),
            ("attempt_end < ?", self.until),
            ("terminal_state = ?", self.terminal_state),
            ("sub_domain = ?", self.sub_domain),
        ):
            if value is not None:
                conds.append(cond)
                args.append(value)
        if self.node:
            conds.append("(root_node = ? OR list_contains(affected_nodes, ?))")
            args += [self.node, self.node]
        if self.symptom:
            conds.append("diagnosis_id IN (SELECT diagnosis_id FROM diagnosis_symptoms WHERE symptom = ?)")
            args.append(self.symptom)
        if self.switch_port:
            conds.append(f"diagnosis_id IN (SELECT diagnosis_id FROM ({_BLAMED_PORTS}) WHERE port = ?)")
            args.append(self.switch_port)
        return ("WHERE " + " AND ".join(conds)) if conds else "", args


def list_diagnoses(wh: Warehouse, filters: Filters, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    """A page of diagnoses, newest attempt end first, and how many match in all."""
    where, args = filters.where()
    rows = wh.rows(
        _DIAGNOSES_API + f"SELECT {', '.join(LIST_COLUMNS)}, count(*) OVER () FROM diagnoses_api {where} "
        "ORDER BY attempt_end DESC NULLS LAST, diagnosis_id LIMIT ? OFFSET ?",
        args + [limit, offset],
    )
    total = rows[0][-1] if rows else (_count(wh, where, args) if offset else 0)
    items = [dict(zip(LIST_COLUMNS, r[:-1])) for r in rows]
    for it in items:
        it["attempt_end"] = it["attempt_end"].isoformat() if it["attempt_end"] else None
        it["affected_nodes"] = it["affected_nodes"] or []
    return items, total


def _count(wh: Warehouse, where: str, args: list[Any]) -> int:
    rows = wh.rows(_DIAGNOSES_API + f"SELECT count(*) FROM diagnoses_api {where}", args)
    return rows[0][0] if rows else 0


def get_diagnosis(wh: Warehouse, diagnosis_id: str) -> dict[str, Any] | None:
    rows = wh.rows("SELECT diagnosis FROM diagnoses WHERE diagnosis_id = ?", [diagnosis_id.lower()])
    return json.loads(rows[0][0]) if rows else None


def counts_by_terminal_state(wh: Warehouse) -> list[tuple[str, int]]:
    return [
        (str(s), int(n)) for s, n in wh.rows("SELECT terminal_state, count(*) FROM diagnoses GROUP BY 1 ORDER BY 1")
    ]


def switch_ports(wh: Warehouse, diagnosis_id: str) -> list[str]:
    """The switch ports one diagnosis blames (see _BLAMED_PORTS)."""
    return [
        str(p)
        for (p,) in wh.rows(
            f"SELECT DISTINCT port FROM ({_BLAMED_PORTS}) WHERE diagnosis_id = ? ORDER BY 1", [diagnosis_id.lower()]
        )
    ]


MAX_PERIODS = 400


def trends(wh: Warehouse, filters: Filters, now: datetime | None = None) -> dict[str, Any]:
    """What the dashboard charts: diagnoses per period by terminal state, XIDs per period, failures
    per host per period, top hosts and ports. The time axis is true: every period from the filter's
    `since` (else the first matching attempt) to its `until` (else now when `since` is given, else
    the last matching attempt), empty ones included; a day, a week or a month per bar by the span."""
    where, args = filters.where()
    base = _DIAGNOSES_API + f", f AS (SELECT * FROM diagnoses_api {where}) "
    span = wh.rows(base + "SELECT min(attempt_end), max(attempt_end) FROM f", args)
    first, last = span[0] if span else (None, None)
    if first is None or last is None:
        return {
            "period": "day",
            "periods": [],
            "period_ends": [],
            "per_period": [],
            "xids": [],
            "host_periods": [],
            "top_hosts": [],
            "top_ports": [],
        }
    period, bounds = _periods(wh, filters, first, last, now)
    periods = [p.strftime("%Y-%m-%d") for p, _ in bounds]
    bucket = f"strftime(date_trunc('{period}', attempt_end), '%Y-%m-%d')"
    per_period = _per_period(wh, base, args, bucket, periods)
    xids = wh.rows(
        base
        + f"""
        SELECT {bucket}, s.symptom, count(DISTINCT f.diagnosis_id) FROM f JOIN diagnosis_symptoms s USING (diagnosis_id)
        WHERE s.symptom LIKE 'xid\\_%' ESCAPE '\\' AND f.attempt_end IS NOT NULL GROUP BY ALL ORDER BY 1, 2""",
        args,
    )
    top_hosts, host_periods = _hosts(wh, base, args, bucket)
    ports = wh.rows(
        base
        + f"""
        SELECT p.port, count(DISTINCT p.diagnosis_id) FROM ({_BLAMED_PORTS}) p JOIN f USING (diagnosis_id)
        GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 8""",
        args,
    )
    return {
        "period": period,
        "periods": periods,
        "period_ends": [e.strftime("%Y-%m-%d") for _, e in bounds],
        "per_period": per_period,
        "xids": xids,
        "host_periods": host_periods,
        "top_hosts": top_hosts,
        "top_ports": ports,
    }


def _periods(
    wh: Warehouse, filters: Filters, first: datetime, last: datetime, now: datetime | None
) -> tuple[str, list[tuple]]:
    """The time axis (see trends): a day, a week or a month per bar, and each bar's start and end."""
    lo = filters.since or first
    hi = filters.until or (max(last, now or datetime.now(last.tzinfo)) if filters.since else last)
    hi = max(hi, lo)
    days = (hi - lo).total_seconds() / 86400
    period = "day" if days <= 62 else "week" if days <= 730 else "month"
    if days / {"day": 1, "week": 7, "month": 30}[period] > MAX_PERIODS:  # a `since` far back: from the first attempt
        lo = first
    bounds = wh.rows(
        f"SELECT p, p + INTERVAL 1 {period} FROM (SELECT unnest(range(date_trunc('{period}', ?::TIMESTAMPTZ), "
        f"date_trunc('{period}', ?::TIMESTAMPTZ) + INTERVAL 1 {period}, INTERVAL 1 {period})) AS p) ORDER BY p",
        [lo, hi],
    )
    return period, bounds


def _per_period(
    wh: Warehouse, base: str, args: list[Any], bucket: str, periods: list[str]
) -> list[tuple[str, dict[str, int]]]:
    """Diagnoses per period by terminal state, every period of the axis included."""
    per: dict[str, dict[str, int]] = {p: {} for p in periods}
    for p, state, n in wh.rows(
        base + f"SELECT {bucket}, terminal_state, count(*) FROM f WHERE attempt_end IS NOT NULL GROUP BY ALL", args
    ):
        per.setdefault(p, {})[state] = n
    return sorted(per.items())


def _hosts(wh: Warehouse, base: str, args: list[Any], bucket: str) -> tuple[list[tuple], list[tuple]]:
    """The hosts blamed most (root or affected) and their diagnoses per period."""
    nodes = wh.rows(
        base
        + """
        , blamed AS (SELECT f.diagnosis_id, f.attempt_end, unnest(f.affected_nodes) AS node FROM f
                     UNION SELECT diagnosis_id, attempt_end, root_node FROM f WHERE root_node IS NOT NULL)
        SELECT node, count(DISTINCT diagnosis_id) FROM blamed GROUP BY node ORDER BY 2 DESC, node LIMIT 8""",
        args,
    )
    top = [n for n, _ in nodes]
    host_periods = (
        wh.rows(
            base
            + f"""
        , blamed AS (SELECT f.diagnosis_id, f.attempt_end, unnest(f.affected_nodes) AS node FROM f
                     UNION SELECT diagnosis_id, attempt_end, root_node FROM f WHERE root_node IS NOT NULL)
        SELECT {bucket}, node, count(DISTINCT diagnosis_id) FROM blamed WHERE list_contains(?, node) GROUP BY ALL
        ORDER BY 1, 2""",
            args + [top],
        )
        if top
        else []
    )
    return nodes, host_periods
