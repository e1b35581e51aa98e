"""Prometheus connector: node and GPU metrics of the attempt's hosts over its window.

For each configured query (PromQL with {hosts} / {hosts_with_port} placeholders, filled with the
attempt's hosts as an escaped regex alternation) it calls /api/v1/query_range over the attempt
window plus a look-back, with a step chosen to stay under Prometheus' 11,000-point limit, maps
each series to a host by the first host-like label present, and stores the samples in staging.
Deadlines are httpx timeouts. Transport errors, 429 and 5xx raise TransientSourceError (the task
retries them); a bad query or a garbage body is recorded, and the other queries still run.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from workload_attribution.connectors.coverage import Cover, Tally
from workload_attribution.connectors.http import escape_double_quoted, http_get, tls
from workload_attribution.connectors.registry import CollectContext, Collected, SourceConfig, register
from workload_attribution.contracts.models import Details, Observation
from workload_attribution.staging.database import connected
from workload_attribution.staging.observations import insert_observations

if TYPE_CHECKING:  # at run time httpx is imported where a request is made: the offline path never pays for it
    import httpx

CONNECTOR = "prometheus"
MAX_POINTS = 11_000

DEFAULT_QUERIES = {
    "dcgm_xid": 'DCGM_FI_DEV_XID_ERRORS{Hostname=~"{hosts}"}',
    "dcgm_ecc_dbe": 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{Hostname=~"{hosts}"}',
    "ib_link_downed": 'node_infiniband_link_downed_total{instance=~"{hosts_with_port}"}',
    "ib_port_errors": 'node_infiniband_port_errors_received_total{instance=~"{hosts_with_port}"}',
    "up": 'up{instance=~"{hosts_with_port}"}',
}
DEFAULT_HOST_LABELS = ["Hostname", "hostname", "instance", "node", "host", "nodename"]


class PrometheusSource(SourceConfig):
    connector: Literal["prometheus"] = "prometheus"
    url: str
    timeout_s: float = Field(10.0, gt=0)
    lookback_s: float = Field(3600.0, ge=0, description="collect this much before the attempt started")
    margin_s: float = Field(300.0, ge=0, description="and this much after it ended")
    queries: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_QUERIES))
    host_labels: list[str] = Field(default_factory=lambda: list(DEFAULT_HOST_LABELS))
    headers: dict[str, str] = Field(default_factory=dict)

    def probe(self) -> tuple[str, str, dict[str, str]]:
        return "http", self.url.rstrip("/") + "/-/ready", self.headers


def promql_regex_string(values: list[str]) -> str:
    """Hosts as a regex alternation inside a PromQL double-quoted string: regex-escaped, then
    string-escaped, so no host name can break out of the matcher."""
    return escape_double_quoted("|".join(re.escape(v) for v in values))


def render_query(expr: str, hosts: list[str]) -> str:
    alt = promql_regex_string(hosts)
    return expr.replace("{hosts_with_port}", f"(?:{alt})(?::[0-9]+)?").replace("{hosts}", f"(?:{alt})")


def choose_step(start: datetime, end: datetime, minimum_s: int = 15) -> int:
    return max(minimum_s, math.ceil((end - start).total_seconds() / (MAX_POINTS - 1)))


def host_of(labels: dict[str, str], host_labels: list[str]) -> str | None:
    for name in host_labels:
        value = labels.get(name)
        if value:
            return value.rsplit(":", 1)[0] if name == "instance" and re.search(r":\d+$", value) else value
    return None


@dataclass
class QueryResult:
    name: str
    series: int = 0
    samples: int = 0
    warnings: list[str] = field(default_factory=list)
    error: str | None = None


def _query(
    client: httpx.Client, src: PrometheusSource, name: str, expr: str, start: datetime, end: datetime, step: int
) -> tuple[QueryResult, list[Observation]]:
    res = QueryResult(name)
    r = http_get(
        client,
        "/api/v1/query_range",
        f"prometheus {name}",
        {"query": expr, "start": start.timestamp(), "end": end.timestamp(), "step": step},
    )
    matrix = _matrix(r, res)
    obs: list[Observation] = []
    for series in matrix or []:
        if not isinstance(series, dict):
            res.error = "unexpected answer: a series is not an object"
            return res, []
        obs += _samples(series, name, src.host_labels, res)
    return res, obs


def _matrix(r: httpx.Response, res: QueryResult) -> list[Any] | None:
    """The answer's series, or None with the reason in `res.error`."""
    try:
        body = r.json()
    except ValueError:
        res.error = f"HTTP {r.status_code}, body is not JSON: {r.text[:120]!r}"
        return None
    if not isinstance(body, dict) or body.get("status") != "success":
        err = body.get("error") if isinstance(body, dict) else None
        res.error = f"HTTP {r.status_code}: {err or 'unexpected response'}"
        return None
    res.warnings = [str(w) for w in body.get("warnings") or []]
    data = body.get("data") or {}
    if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        res.error = f"unexpected answer: resultType {data.get('resultType') if isinstance(data, dict) else None!r}"
        return None
    return data["result"]


def _samples(series: dict[str, Any], name: str, host_labels: list[str], res: QueryResult) -> list[Observation]:
    """One series' samples, mapped to a host by its first host-like label; a sample whose time or
    value is not a number is left out."""
    metric = {str(k): str(v) for k, v in (series.get("metric") or {}).items()}
    name_ = metric.get("__name__", name)
    labels = {k: v for k, v in metric.items() if k != "__name__"}
    label_text = "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    node = host_of(labels, host_labels)
    res.series += 1
    obs = []
    for ts, value in series.get("values") or []:
        try:
            v = float(value)
            t = datetime.fromtimestamp(float(ts), tz=timezone.utc)
        except (TypeError, ValueError):
            continue
        obs.append(
            Observation(
                source="metrics",
                connector=CONNECTOR,
                kind="sample",
                node=node,
                time=t,
                text=f"{name_}{label_text} {value} @{ts}",
                series=name_ + label_text,
                value=v,
                path=f"prometheus:{name}",
                attrs={"__name__": name_, "labels": labels},
            )
        )
    res.samples += len(obs)
    return obs


class QueryCounts(BaseModel):
    series: int
    samples: int


class PrometheusDetails(Details):
    step_s: int
    warnings: list[str]
    queries: dict[str, QueryCounts]


@register(CONNECTOR, PrometheusSource)
def collect(ctx: CollectContext[PrometheusSource]) -> Collected:
    cover = Cover(ctx.source, CONNECTOR)
    src, scope = ctx.config, ctx.scope
    start = scope.start - timedelta(seconds=src.lookback_s)
    end = scope.end + timedelta(seconds=src.margin_s)
    step = choose_step(start, end)
    results: list[QueryResult] = []
    obs: list[Observation] = []
    import httpx

    timeout = httpx.Timeout(src.timeout_s, connect=min(src.timeout_s, 5.0))
    with httpx.Client(
        base_url=src.url.rstrip("/"), timeout=timeout, headers=src.headers, transport=ctx.transport, verify=tls()
    ) as client:
        for name, expr in src.queries.items():
            res, got = _query(client, src, name, render_query(expr, scope.nodes), start, end, step)
            results.append(res)
            obs.extend(got)
    with connected(ctx.staging) as con:
        insert_observations(con, obs)
    failed = [r for r in results if r.error]
    warnings = [w for r in results for w in r.warnings]
    tally = Tally(
        observations=len(obs),
        unparsed=len(failed),
        gaps=bool(warnings),
        failed=bool(failed) and len(failed) == len(results),
        none_in_scope=not obs,
    )
    details = PrometheusDetails(
        step_s=step,
        warnings=warnings,
        queries={r.name: QueryCounts(series=r.series, samples=r.samples) for r in results},
    )
    error = "; ".join(f"{r.name}: {r.error}" for r in failed) or None
    return cover.judged(tally, nodes=sorted({o.node for o in obs if o.node}), error=error, details=details)
