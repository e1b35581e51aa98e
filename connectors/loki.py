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
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from workload_attribution.connectors.coverage import Cover, Tally
from workload_attribution.connectors.http import escape_double_quoted, http_get, tls
from workload_attribution.connectors.registry import CollectContext, Collected, SourceConfig, register
from workload_attribution.contracts.models import Details
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


def _page(
    client: httpx.Client, src: LokiSource, query: str, start_ns: int, end_ns: int
) -> list[tuple[dict[str, Any], int, str]]:
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


class LokiDetails(Details):
    query: str
    hosts_without_streams: list[str]
    matched_lines: int
    truncated_windows: int
    prefilter_pushed_down: bool


@dataclass
class _Fetched:
    lines: list[tuple[str, int, str]] = field(default_factory=list)  # (host, ns, line)
    truncated_windows: int = 0  # windows whose pages could not all be read
    error: str | None = None  # a query Loki refused or answered with garbage: no more windows


def _window(client: httpx.Client, src: LokiSource, query: str, start: datetime, end: datetime, got: _Fetched) -> None:
    """One window's lines, page after page: a page advances to the last timestamp it holds, and
    the lines already seen at that timestamp are dropped from the next."""
    cursor, stop_ns = _ns(start), _ns(end)
    seen_at_cursor: set[tuple[str, str]] = set()
    for _ in range(src.max_pages):
        try:
            page = _page(client, src, query, cursor, stop_ns)
        except ValueError as exc:
            got.error = str(exc)
            return
        page.sort(key=lambda x: x[1])
        fresh = [
            (lab, ts, line)
            for lab, ts, line in page
            if not (ts == cursor and (lab.get(src.host_label, ""), line) in seen_at_cursor)
        ]
        got.lines += [(lab.get(src.host_label) or "", ts, line) for lab, ts, line in fresh]
        if len(page) < src.limit or not page:
            return
        last = page[-1][1]
        if not fresh:
            got.truncated_windows += 1  # more lines share one timestamp than `limit`: cannot page past them
            return
        at_last = {(lab.get(src.host_label, ""), line) for lab, ts, line in page if ts == last}
        seen_at_cursor = (seen_at_cursor | at_last) if last == cursor else at_last
        cursor = last
    got.truncated_windows += 1  # max_pages reached


@register(CONNECTOR, LokiSource)
def collect(ctx: CollectContext[LokiSource]) -> Collected:
    src = ctx.config.model_copy(update={"source": ctx.config.source or ctx.source})
    cover = Cover(src.source, CONNECTOR)
    selector = render_selector(src.selector, ctx.scope.nodes)
    query = selector + (line_filter(list(ctx.prefilter)) if src.push_prefilter else "")
    start = ctx.scope.start - timedelta(seconds=src.lookback_s)
    end = ctx.scope.end + timedelta(seconds=src.margin_s)
    got, streams, series_error = _Fetched(), set[str](), None
    import httpx

    timeout = httpx.Timeout(src.timeout_s, connect=min(src.timeout_s, 5.0))
    headers = {"X-Scope-OrgID": src.tenant} if src.tenant else {}
    with httpx.Client(
        base_url=src.url.rstrip("/"), timeout=timeout, headers=headers, transport=ctx.transport, verify=tls()
    ) as client:
        try:
            streams = _streams(client, src, selector, _ns(start), _ns(end))
        except ValueError as exc:  # lines can still come: coverage will say partial
            series_error = str(exc)
        w_start = start  # long windows are split: each piece is paged on its own
        while w_start < end and got.error is None:
            w_end = min(end, w_start + timedelta(seconds=src.max_window_s))
            _window(client, src, query, w_start, w_end, got)
            w_start = w_end
    _store(ctx.staging, src, got.lines)
    nodes = sorted(({h for h, _, _ in got.lines} | streams) - {""})
    tally = Tally(
        observations=len(got.lines),
        gaps=bool(got.error or got.truncated_windows or series_error),
        failed=bool(got.error and not got.lines),
        none_in_scope=not got.lines and not streams,
    )
    details = LokiDetails(
        query=query,
        hosts_without_streams=sorted(set(ctx.scope.nodes) - set(nodes)),
        matched_lines=len(got.lines),
        truncated_windows=got.truncated_windows,
        prefilter_pushed_down=src.push_prefilter,
    )
    return cover.judged(tally, nodes=nodes, error=got.error or series_error, details=details)


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
