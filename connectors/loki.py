"""Loki connector: application logs and syslogs of the attempt's hosts via LogQL query_range.

One configured stream selector per source (`{job="syslog", host=~"{hosts}"}`: the attempt's hosts
go in as an escaped regex alternation). The rules' literal pre-filter is pushed down as a line
filter so only candidate lines travel. Long windows are split; within a window, pages advance by
the last timestamp seen (Loki's `limit` caps each answer) and lines already seen at that boundary
timestamp are dropped. Deadlines are httpx timeouts; transport errors, 429 and 5xx raise
TransientSourceError (Retry-After honoured up to a bound); a 4xx is an error with Loki's reason.
Lines carry Loki's nanosecond timestamp as their collector time.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from workload_attribution.connectors.http import escape_double_quoted, http_get
from workload_attribution.connectors.registry import CollectContext, Collected, SourceConfig, register
from workload_attribution.contracts.models import Coverage, CoverageStatus
from workload_attribution.staging.database import connected
from workload_attribution.staging.lines import Line, stage_lines

if TYPE_CHECKING:  # at run time httpx is imported where a request is made: the offline path never pays for it
    import httpx

CONNECTOR = "loki"


class LokiSource(SourceConfig):
    connector: Literal["loki"] = "loki"
    url: str
    source: str = Field("", description="which source these lines are (app, syslog, ...); the config key by default")
    selector: str = Field(description='LogQL stream selector, e.g. {job="syslog", host=~"{hosts}"}')
    host_label: str = "host"
    limit: int = Field(5000, ge=1, le=50000)
    max_window_s: float = Field(6 * 3600, gt=0, description="split longer windows into pieces of this size")
    max_pages: int = Field(1000, ge=1, description="stop (partial coverage) after this many pages per window")
    timeout_s: float = Field(15.0, gt=0)
    lookback_s: float = Field(900.0, ge=0)
    margin_s: float = Field(300.0, ge=0)
    tenant: str | None = Field(default=None, description="X-Scope-OrgID")
    push_prefilter: bool = True

    def probe(self) -> tuple[str, str, dict[str, str]]:
        return "http", self.url.rstrip("/") + "/ready", {"X-Scope-OrgID": self.tenant} if self.tenant else {}


def logql_string(value: str) -> str:
    """A value inside a LogQL double-quoted string."""
    return escape_double_quoted(value)


def render_selector(selector: str, hosts: list[str]) -> str:
    alternation = "|".join(re.escape(h) for h in hosts)
    return selector.replace("{hosts}", logql_string(f"(?:{alternation})"))


def line_filter(literals: list[str]) -> str:
    if not literals:
        return ""
    return f' |~ "{logql_string("|".join(re.escape(x) for x in sorted(set(literals))))}"'


def _ns(t: datetime) -> int:
    return int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000


def _page(client: httpx.Client, src: LokiSource, query: str, start_ns: int, end_ns: int) -> list[tuple[dict, int, str]]:
    r = http_get(
        client,
        "/loki/api/v1/query_range",
        f"loki {src.source}",
        {"query": query, "start": start_ns, "end": end_ns, "limit": src.limit, "direction": "forward"},
    )
    if r.status_code >= 400:
        raise ValueError(f"HTTP {r.status_code}: {r.text.strip()[:200]}")
    try:
        body = r.json()
        data = body["data"]
        if body.get("status") != "success" or data.get("resultType") != "streams":
            raise ValueError(f"unexpected answer: status={body.get('status')} resultType={data.get('resultType')}")
        out = []
        for stream in data["result"]:
            labels = stream.get("stream") or {}
            for ts, line in stream.get("values") or []:
                out.append((labels, int(ts), str(line)))
        return out
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"body is not a Loki streams answer ({exc})") from None


def _streams(client: httpx.Client, src: LokiSource, selector: str, start_ns: int, end_ns: int) -> set[str]:
    """Hosts that have a stream in the window (/loki/api/v1/series): coverage must know who logged
    at all, even when the pushed-down line filter returns nothing for a host."""
    r = http_get(
        client, "/loki/api/v1/series", f"loki {src.source}", {"match[]": selector, "start": start_ns, "end": end_ns}
    )
    if r.status_code >= 400:
        raise ValueError(f"HTTP {r.status_code}: {r.text.strip()[:200]}")
    try:
        return {str(s.get(src.host_label, "")) for s in r.json()["data"]}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"body is not a Loki series answer ({exc})") from None


@register(CONNECTOR, LokiSource)
def collect(ctx: CollectContext[LokiSource]) -> Collected:
    started = time.monotonic()
    src = ctx.config.model_copy(update={"source": ctx.config.source or ctx.source})
    scope, prefilter = ctx.scope, list(ctx.prefilter)
    selector = render_selector(src.selector, scope.nodes)
    query = selector + (line_filter(prefilter) if src.push_prefilter else "")
    start = scope.start - timedelta(seconds=src.lookback_s)
    end = scope.end + timedelta(seconds=src.margin_s)
    headers = {"X-Scope-OrgID": src.tenant} if src.tenant else {}
    lines: list[tuple[str, int, str]] = []  # (host, ns, line)
    truncated_windows = 0
    error = None
    import httpx

    timeout = httpx.Timeout(src.timeout_s, connect=min(src.timeout_s, 5.0))
    streams: set[str] = set()
    with httpx.Client(
        base_url=src.url.rstrip("/"), timeout=timeout, headers=headers, transport=ctx.transport
    ) as client:
        series_error = None
        try:
            streams = _streams(client, src, selector, _ns(start), _ns(end))
        except ValueError as exc:  # lines can still come: coverage will say partial
            series_error = str(exc)
        w_start = start
        while w_start < end and error is None:
            w_end = min(end, w_start + timedelta(seconds=src.max_window_s))
            cursor, stop_ns = _ns(w_start), _ns(w_end)
            seen_at_cursor: set[tuple[str, str]] = set()
            for _ in range(src.max_pages):
                try:
                    page = _page(client, src, query, cursor, stop_ns)
                except ValueError as exc:
                    error = str(exc)
                    break
                page.sort(key=lambda x: x[1])
                fresh = [
                    (lab, ts, line)
                    for lab, ts, line in page
                    if not (ts == cursor and (lab.get(src.host_label, ""), line) in seen_at_cursor)
                ]
                for lab, ts, line in fresh:
                    lines.append((lab.get(src.host_label) or "", ts, line))
                if len(page) < src.limit or not page:
                    break
                last = page[-1][1]
                if not fresh:
                    truncated_windows += 1  # more lines share one timestamp than `limit`: cannot page past them
                    break
                at_last = {(lab.get(src.host_label, ""), line) for lab, ts, line in page if ts == last}
                seen_at_cursor = (seen_at_cursor | at_last) if last == cursor else at_last
                cursor = last
            else:
                truncated_windows += 1
            w_start = w_end
    _store(ctx.staging, src, lines)
    nodes = sorted(({h for h, _, _ in lines} | streams) - {""})
    missing = sorted(set(scope.nodes) - set(nodes))
    if error and not lines:
        status = CoverageStatus.error
    elif error or truncated_windows or series_error:
        status = CoverageStatus.partial
    elif not lines and not streams:
        status = CoverageStatus.empty
    else:
        status = CoverageStatus.ok
    return Collected(
        Coverage(
            source=src.source,
            connector=CONNECTOR,
            status=status,
            observations=len(lines),
            nodes=nodes,
            error=error or series_error,
            duration_ms=int((time.monotonic() - started) * 1000),
            details={
                "query": query,
                "hosts_without_streams": missing,
                "matched_lines": len(lines),
                "truncated_windows": truncated_windows,
                "prefilter_pushed_down": src.push_prefilter,
            },
        )
    )


def _store(staging: str, src: LokiSource, lines: list[tuple[str, int, str]]) -> None:
    """One stream per host; lines numbered in time order; Loki's time as the collector time."""
    by_host: dict[str, list[tuple[int, str]]] = {}
    for host, ts, line in lines:
        by_host.setdefault(host, []).append((ts, line))
    with connected(staging) as con:
        for host, items in sorted(by_host.items()):
            items.sort()
            stage_lines(
                con,
                src.source,
                CONNECTOR,
                host or None,
                f'loki:{src.source}{{{src.host_label}="{host}"}}',
                [
                    Line(text, i, datetime.fromtimestamp(ts / 1e9, timezone.utc))
                    for i, (ts, text) in enumerate(items, 1)
                ],
            )
