"""The read-only dashboard served by `attribution serve` at /ui: server-rendered HTML and inline SVG
(no JavaScript, no build step, nothing fetched from elsewhere).

    /ui                   diagnoses, newest first, with filters; trend charts above the list
    /ui/diagnoses/{id}    one diagnosis: the symptoms on a timeline per host (root first, cascades
                          after), the root's evidence lines, the history of its blamed hosts and
                          ports (and the escalation), what would settle it, what is new in its
                          logs (a doubtful verdict's novel templates), the coverage
    /ui/login             sign in with a token of the read scope: a session (the cookie holds its id)
    /ui/logout            end the session

Every value is HTML-escaped; every query binds its parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from html import escape
from typing import Any
from urllib.parse import urlencode

STATE_COLORS = {
    "hardware_failure": "#d62728",
    "infrastructure_failure": "#ff7f0e",
    "application_failure": "#1f77b4",
    "scheduler_action": "#9467bd",
    "unknown": "#7f7f7f",
    "completed": "#2ca02c",
}
ROLE_COLORS = {"root": "#d62728", "cascade": "#ff9f40", "context": "#4c78a8"}

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#263238;color:#fff;padding:10px 20px}header a{color:#fff;text-decoration:none;margin-right:16px}
main{padding:16px 20px;max-width:1400px}h1{font-size:20px;margin:4px 0 12px}h2{font-size:16px;margin:20px 0 8px}
table{border-collapse:collapse;background:#fff;width:100%}
td,th{border-bottom:1px solid #e0e0e0;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eceff1}.pill{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:12px}
form.filters{margin:8px 0 16px;display:flex;gap:8px;flex-wrap:wrap;align-items:end}
form.filters label{font-size:12px;display:flex;flex-direction:column}
.charts{display:grid;grid-template-columns:2fr 1fr 1fr;gap:16px}
.card{background:#fff;border:1px solid #e0e0e0;padding:10px;min-width:0}.card.span2{grid-column:span 2}
svg a text{fill:#1a56b0}svg a:hover text{text-decoration:underline}
code,pre{font:12px/1.3 ui-monospace,monospace}pre{white-space:pre-wrap;margin:0}.muted{color:#777}
"""


def page(title: str, body: str) -> str:
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(title)} - workload-attribution</title>"
        f"<style>{STYLE}</style></head><body><header><a href='/ui'><b>workload-attribution</b></a>"
        f"<a href='/ui'>diagnoses</a><a href='/docs'>API</a></header><main>{body}</main></body></html>"
    )


def pill(state: str) -> str:
    return f"<span class=pill style='background:{STATE_COLORS.get(state, '#555')}'>{escape(state)}</span>"


# ------------------------------------------------------------------------------------------ links


def link(filters: dict[str, Any], **change: Any) -> str:
    """/ui with the current filters, some changed (None removes one); the page goes back to 1."""
    q = {k: v for k, v in {**filters, **change, "page": change.get("page")}.items() if v not in (None, "")}
    return "/ui" + ("?" + urlencode(q) if q else "")


def a(href: str, text: str, cls: str = "") -> str:
    return f"<a href='{escape(href)}'{f' class={cls}' if cls else ''}>{escape(text)}</a>"


# ------------------------------------------------------------------------------------------ charts


def card(title: str, body: str, empty: bool = False, span: int = 1) -> str:
    cls = "card span2" if span == 2 else "card"
    return f"<div class='{cls}'><b>{escape(title)}</b><br>{'<p class=muted>no data</p>' if empty else body}</div>"


def axis_labels(periods: list[str], x: Callable[[int], float], y: float, spacing: float) -> list[str]:
    """At most 8 period labels under a time axis, none overlapping (`spacing`: one period's width),
    the date in full at the first and where the year turns."""
    step = max(1, len(periods) // 8, math.ceil(62 / max(spacing, 0.1)))
    out = []
    for i, period in enumerate(periods):
        if i % step == 0:
            full = i == 0 or period[:4] != periods[i - step][:4]
            out.append(f"<text x={x(i):.1f} y={y} font-size=10>{escape(period if full else period[5:])}</text>")
    return out


def period_link(filters: dict[str, Any], periods: list[str], ends: list[str], i: int, **change: Any) -> str:
    """The list filtered to period i (and `change`)."""
    return link(filters, **change, since=periods[i], until=ends[i] if i < len(ends) else None)


def stacked_bars(
    periods: list[str],
    series: list[tuple[str, dict[str, int]]],
    title: str,
    colors: dict[str, str],
    filters: dict[str, Any],
    key: str,
    ends: list[str] | None = None,
    width: int = 640,
    height: int = 220,
) -> str:
    """Bars per period on a true time axis (every period of the span, empty ones too), stacked by
    `colors`' keys; each segment links to the list filtered by its key and period."""
    ends = ends or []
    counts = dict(series)
    if not periods or not any(counts.values()):
        return card(title, "", empty=True)
    top = max(sum(counts.get(p, {}).values()) for p in periods) or 1
    left, bottom, inner_h = 30, 30, height - 50
    bw = max(2.0, (width - left - 10) / len(periods))
    parts = [
        f"<svg role=img aria-label='{escape(title)}' width='100%' viewBox='0 0 {width} {height}'>",
        f"<line x1={left} y1={height - bottom} x2={width} y2={height - bottom} stroke='#999'/>",
        f"<text x=2 y=14 font-size=11>{top}</text>",
    ]
    for i, period in enumerate(periods):
        y = float(height - bottom)
        for name, color in colors.items():
            n = counts.get(period, {}).get(name, 0)
            if not n:
                continue
            h = n / top * inner_h
            y -= h
            href = period_link(filters, periods, ends, i, **{key: name})
            parts.append(
                f"<a href='{escape(href)}'><rect class=bar data-period='{escape(period)}' x={left + i * bw:.1f} "
                f"y={y:.1f} width={max(1.0, bw - 1):.1f} height={h:.1f} fill='{color}'>"
                f"<title>{escape(period)} {escape(name)}: {n}</title></rect></a>"
            )
    parts += axis_labels(periods, lambda i: left + i * bw, height - 12, bw)
    parts.append("</svg>")
    legend = " ".join(
        f"<a href='{escape(link(filters, **{key: n}))}'><span class=pill style='background:{c}'>{escape(n)}</span></a>"
        for n, c in colors.items()
    )
    return card(title, "".join(parts) + f"<div>{legend}</div>")


def hbars(
    rows: list[tuple[str, int]], title: str, color: str, filters: dict[str, Any], key: str, width: int = 320
) -> str:
    """Horizontal bars; each label and bar links to the list filtered by it."""
    if not rows:
        return card(title, "", empty=True)
    top = max(n for _, n in rows) or 1
    height = 22 * len(rows) + 10
    parts = [f"<svg role=img aria-label='{escape(title)}' width='100%' viewBox='0 0 {width} {height}'>"]
    for i, (label, n) in enumerate(rows):
        w = n / top * (width - 170)
        href = escape(link(filters, **{key: label}))
        parts.append(
            f"<a href='{href}'><text x=0 y={i * 22 + 16} font-size=11>{escape(str(label)[:24])}</text>"
            f"<rect class=bar x=150 y={i * 22 + 4} width={w:.1f} height=16 fill='{color}'>"
            f"<title>{escape(str(label))}: {n}</title></rect></a>"
            f"<text x={155 + w:.1f} y={i * 22 + 16} font-size=11>{n}</text>"
        )
    parts.append("</svg>")
    return card(title, "".join(parts))


def heatmap(
    periods: list[str],
    cells: list[tuple[str, str, int]],
    title: str,
    filters: dict[str, Any],
    ends: list[str] | None = None,
    width: int = 640,
) -> str:
    """Hosts (rows) x periods (columns): failures blamed on each host per period, darker = more;
    a host links to its list, a cell to its list in that period."""
    ends = ends or []
    if not periods or not cells:
        return card(title, "", empty=True, span=2)
    hosts = sorted({h for _, h, _ in cells})
    grid = {(p, h): n for p, h, n in cells}
    top = max(grid.values()) or 1
    left, row = 130, 18
    cw = max(2.0, (width - left - 10) / len(periods))
    height = row * len(hosts) + 24
    parts = [f"<svg role=img aria-label='{escape(title)}' width='100%' viewBox='0 0 {width} {height}'>"]
    for j, host in enumerate(hosts):
        y = j * row
        parts.append(
            f"<a href='{escape(link(filters, node=host))}'><text x=0 y={y + 13} font-size=11>"
            f"{escape(host[:20])}</text></a>"
        )
        for i, period in enumerate(periods):
            n = grid.get((period, host), 0)
            if n:
                shade = 0.25 + 0.75 * n / top
                parts.append(
                    f"<a href='{escape(period_link(filters, periods, ends, i, node=host))}'><rect class=cell "
                    f"x={left + i * cw:.1f} y={y + 2} width={max(1.0, cw - 1):.1f} height={row - 4} "
                    f"fill='#d62728' fill-opacity='{shade:.2f}'><title>{escape(host)} {escape(period)}: "
                    f"{n}</title></rect></a>"
                )
    parts += axis_labels(periods, lambda i: left + i * cw, height - 4, cw)
    parts.append("</svg>")
    return card(title, "".join(parts), span=2)


def timeline(doc: dict[str, Any], width: int = 1100) -> str:
    """Symptoms across hosts: one row per host (the root's host first), a mark from first to last seen."""
    syms = [s for s in doc.get("symptoms") or [] if s.get("first_seen")]
    if not syms:
        return "<p class=muted>no timed symptoms</p>"
    parse = lambda v: datetime.fromisoformat(v)  # noqa: E731
    t0 = min(parse(s["first_seen"]) for s in syms)
    t1 = max(parse(s.get("last_seen") or s["first_seen"]) for s in syms)
    span = max((t1 - t0).total_seconds(), 1.0)
    root_node = (doc.get("root_cause") or {}).get("node")
    order = {"root": 0, "cascade": 1, "context": 2}
    hosts = sorted(
        {s.get("node") or "(job)" for s in syms},
        key=lambda h: (
            h != root_node,
            min(order.get(s["role"], 3) for s in syms if (s.get("node") or "(job)") == h),
            h,
        ),
    )
    left, row = 160, 24
    height = row * len(hosts) + 40
    scale = (width - left - 20) / span
    parts = [f"<svg role=img aria-label='symptom timeline' width={width} height={height}>"]
    for i, h in enumerate(hosts):
        y = 10 + i * row
        label = (
            f"<text x=0 y={y + 14} font-size=12{' font-weight=bold' if h == root_node else ''}>{escape(h[:22])}</text>"
        )
        parts.append(
            (label if h == "(job)" else f"<a href='{escape(link({}, node=h))}'>{label}</a>")
            + f"<line x1={left} y1={y + row / 2} x2={width - 10} y2={y + row / 2} stroke='#eee'/>"
        )
    for s in sorted(syms, key=lambda s: order.get(s["role"], 3), reverse=True):  # roots drawn last, on top
        y = 10 + hosts.index(s.get("node") or "(job)") * row
        a = (parse(s["first_seen"]) - t0).total_seconds() * scale
        b = (parse(s.get("last_seen") or s["first_seen"]) - t0).total_seconds() * scale
        color = ROLE_COLORS.get(s["role"], "#999")
        parts.append(
            f"<rect class=mark x={left + a:.1f} y={y + 4} width={max(6.0, b - a):.1f} height={row - 8} rx=3 "
            f"fill='{color}'><title>{escape(s['symptom'])} ({escape(s['role'])}) x{s.get('count', 1)} "
            f"{escape(s['first_seen'])}</title></rect>"
        )
    parts.append(
        f"<text x={left} y={height - 6} font-size=10>{escape(t0.isoformat())}</text>"
        f"<text x={width - 10} y={height - 6} font-size=10 text-anchor=end>+{span:.0f} s</text></svg>"
    )
    legend = " ".join(f"<span class=pill style='background:{c}'>{r}</span>" for r, c in ROLE_COLORS.items())
    return "".join(parts) + f"<div>{legend}</div>"


# ------------------------------------------------------------------------------------------- pages

XID_COLORS = ["#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]


def _filter_form(filters: dict[str, Any]) -> str:
    f = {k: escape(str(v)) if v is not None else "" for k, v in filters.items()}
    f.setdefault("per_page", "")
    states = "".join(
        f"<option{' selected' if filters.get('terminal_state') == s else ''}>{s}</option>" for s in STATE_COLORS
    )
    return (
        "<form class=filters method=get action='/ui'>"
        f"<label>cluster<input name=cluster value='{f['cluster']}'></label>"
        f"<label>terminal state<select name=terminal_state><option value=''>any</option>{states}</select></label>"
        f"<label>node<input name=node value='{f['node']}'></label>"
        f"<label>symptom<input name=symptom placeholder='xid_79' value='{f['symptom']}'></label>"
        f"<label>switch port<input name=port placeholder='leaf-07:17' value='{f['port']}'></label>"
        f"<label>since<input name=since placeholder='7d or 2026-11-01T00:00:00Z' value='{f['since']}'></label>"
        f"<label>until<input name=until value='{f['until']}'></label>"
        + (f"<input type=hidden name=per_page value='{f['per_page']}'>" if f.get("per_page") else "")
        + "<button>filter</button>"
        f"{a('/ui', 'clear')}</form>"
    )


def _xid_series(trends: dict[str, Any]) -> tuple[dict[str, dict[str, int]], dict[str, int], dict[str, str]]:
    """XIDs per period, their totals, and a colour for each of the 8 most frequent."""
    series: dict[str, dict[str, int]] = {}
    totals: dict[str, int] = {}
    for period, xid, n in trends.get("xids") or []:
        series.setdefault(period, {})[xid] = n
        totals[xid] = totals.get(xid, 0) + n
    colors = {x: XID_COLORS[i % len(XID_COLORS)] for i, x in enumerate(sorted(totals, key=lambda k: -totals[k])[:8])}
    return series, totals, colors


def _charts(trends: dict[str, Any], filters: dict[str, Any]) -> str:
    periods = trends.get("periods") or []
    xid_series, totals, xid_colors = _xid_series(trends)
    per = trends.get("period", "day")
    ends = trends.get("period_ends") or []
    per_state = f"Diagnoses by terminal_state per {per}"
    xids = f"XIDs per {per} (attempts{', the 8 most frequent' if len(totals) > len(xid_colors) else ''})"
    return (
        "<div class=charts>"
        + stacked_bars(
            periods, trends.get("per_period") or [], per_state, STATE_COLORS, filters, "terminal_state", ends
        )
        + hbars(trends.get("top_hosts") or [], "Top hosts (roots and affected)", "#d62728", filters, "node")
        + hbars(trends.get("top_ports") or [], "Top switch ports", "#ff7f0e", filters, "port")
        + stacked_bars(periods, list(xid_series.items()), xids, xid_colors, filters, "symptom", ends)
        + heatmap(periods, trends.get("host_periods") or [], f"Failures per host per {per} (top hosts)", filters, ends)
        + "</div>"
    )


def _pager(filters: dict[str, Any], shown_rows: int, page_no: int, page_size: int, total: int | None) -> str:
    shown = f"{(page_no - 1) * page_size + 1}-{(page_no - 1) * page_size + shown_rows}" if shown_rows else "0"
    pager = [f"<p class=pager>{shown} of {total if total is not None else '?'} "]
    if page_no > 1:
        pager.append(a(link(filters, page=page_no - 1 if page_no > 2 else None), "previous"))
    if total is not None and page_no * page_size < total:
        pager.append(" " + a(link(filters, page=page_no + 1), "next"))
    pager.append("</p>")
    return "".join(pager)


def _list_row(r: dict[str, Any], filters: dict[str, Any]) -> str:
    nodes = ", ".join(a(link(filters, node=n), n) for n in r.get("affected_nodes") or [])
    root = r.get("root_node")
    symptom = r.get("root_symptom")
    return (
        f"<tr><td>{escape(str(r['attempt_end'] or ''))[:19]}</td>"
        f"<td>{a(link(filters, cluster=r['cluster']), r['cluster'])}</td>"
        f"<td>{a('/ui/diagnoses/' + r['diagnosis_id'], r['scheduler'] + ' ' + r['job_id'])} #{r['attempt']}</td>"
        f"<td>{pill(r['terminal_state'])} {escape(r['sub_domain'])}</td>"
        f"<td>{a(link(filters, node=root), root) if root else ''}"
        f"{' ' + a(link(filters, symptom=symptom), symptom, 'muted') if symptom else ''}</td>"
        f"<td>{nodes}</td><td>{escape(r['recommended_action'] or '')}</td></tr>"
    )


def list_page(
    rows: list[dict],
    filters: dict[str, Any],
    trends: dict[str, Any],
    page_no: int = 1,
    page_size: int = 100,
    total: int | None = None,
) -> str:
    pager = _pager(filters, len(rows), page_no, page_size, total)
    body = [
        "<h1>Diagnoses</h1>",
        _charts(trends, filters),
        _filter_form(filters),
        pager,
        "<table><tr><th>attempt end</th><th>cluster</th><th>job / attempt</th><th>verdict</th><th>root</th>"
        "<th>affected</th><th>action</th></tr>",
        *(_list_row(r, filters) for r in rows),
        "</table>",
    ]
    if not rows:
        body.append("<p class=muted>no diagnosis matches</p>")
    body.append(pager)
    return page("Diagnoses", "".join(body))


def _verdict_head(doc: dict[str, Any], ports: list[str] | None) -> str:
    at = doc["attempt"]
    affected = ", ".join(a(link({}, node=n), n) for n in doc.get("affected_nodes") or []) or "none"
    port_links = ", ".join(a(link({}, port=p), p) for p in ports or [])
    return (
        f"<h1>{a(link({}, cluster=at['cluster']), at['cluster'])} / {escape(at['scheduler'])} job "
        f"{escape(str(at['job_id']))} attempt {at['attempt']}</h1>"
        f"<p><a href='{escape(link({}, terminal_state=doc['terminal_state']))}'>{pill(doc['terminal_state'])}</a> "
        f"<b>{escape(doc['sub_domain'])}</b> "
        f"(confidence {escape(str(doc.get('confidence')))})"
        f" &middot; action <b>{escape(doc.get('recommended_action') or '')}</b> &middot; affected "
        f"<b class=affected>{affected}</b>"
        + (f" &middot; switch ports <b class=ports>{port_links}</b>" if port_links else "")
        + f"</p><p>{escape(doc.get('explanation') or '')}</p>"
    )


def _root_section(doc: dict[str, Any], ports: list[str] | None) -> str:
    rc = doc.get("root_cause") or {}
    if not rc:
        return ""
    ev = {e["id"]: e for e in doc.get("evidence") or []}
    lines = "".join(
        f"<pre>{escape(ev[i]['ref'])}: {escape(ev[i]['text'])}</pre>" for i in rc.get("evidence", []) if i in ev
    )
    title = escape(rc.get("title") or rc.get("symptom") or "")
    component = rc.get("component") or ""
    return (
        "<h2>Root cause</h2><p class=root><b>"
        + (f"<a href='{escape(link({}, symptom=rc['symptom']))}'>{title}</a>" if rc.get("symptom") else title)
        + "</b> on "
        + (a(link({}, node=rc["node"]), rc["node"]) if rc.get("node") else "-")
        + " "
        + (a(link({}, port=component), component) if component in (ports or []) else escape(component))
        + f" at {escape(str(rc.get('first_seen')))}</p>{lines}"
    )


def _symptom_table(doc: dict[str, Any]) -> str:
    order = {"root": 0, "cascade": 1, "context": 2}
    syms = sorted(doc.get("symptoms") or [], key=lambda s: (order.get(s["role"], 3), s.get("first_seen") or ""))
    table = [
        "<h2>Symptoms (root first)</h2><table><tr><th>role</th><th>symptom</th><th>node</th><th>rank</th>"
        "<th>first seen</th><th>count</th><th>demoted by</th></tr>"
    ]
    for s in syms:
        table.append(
            f"<tr><td><span class=pill style='background:{ROLE_COLORS.get(s['role'], '#999')}'>"
            f"{escape(s['role'])}</span></td>"
            f"<td>{a(link({}, symptom=s['symptom']), s['symptom'])}</td>"
            f"<td>{a(link({}, node=s['node']), s['node']) if s.get('node') else ''}</td>"
            f"<td>{escape(str(s.get('rank') if s.get('rank') is not None else ''))}</td>"
            f"<td>{escape(str(s.get('first_seen') or ''))}</td><td>{s.get('count', '')}</td>"
            f"<td>{escape(s.get('demoted_by') or '')}</td></tr>"
        )
    table.append("</table>")
    return "".join(table)


def _coverage_table(doc: dict[str, Any]) -> str:
    cov = [
        "<h2>Coverage</h2><table><tr><th>source</th><th>connector</th><th>status</th><th>observations</th><th>note</th></tr>"
    ]
    for c in doc.get("coverage") or []:
        cov.append(
            f"<tr><td>{escape(c['source'])}</td><td>{escape(c.get('connector') or '')}</td>"
            f"<td>{escape(c['status'])}</td>"
            f"<td>{c.get('observations', '')}</td><td>{escape(c.get('error') or '')}</td></tr>"
        )
    cov.append("</table>")
    return "".join(cov)


def _history_section(doc: dict[str, Any]) -> str:
    """Fleet memory: each blamed node and switch port's roots and cascades in 7 and 30 days before
    this attempt's end, the latest of those attempts (each a link), and the escalation, if any."""
    hist = doc.get("history")
    if not hist:
        return ""
    esc = hist.get("escalation")
    out = ["<h2>History of the blamed hosts and ports</h2>"]
    if esc:
        out.append(
            f"<p class=escalation style='border-left:4px solid {STATE_COLORS['hardware_failure']};padding-left:8px'>"
            f"<b>Escalated</b>: {escape(esc['from_action'])} &rarr; <b>{escape(esc['to_action'])}</b>"
            f"{' + ' + escape(esc['ticket']) + ' ticket' if esc.get('ticket') else ''}. {escape(esc['reason'])}</p>"
        )
    rows = [_history_row(h) for h in hist.get("subjects") or []]
    if not rows:
        return "".join(out) + "<p class=muted>nothing blamed</p>"
    head = (
        "<table class=history><tr><th>blamed</th><th>root 7 d</th><th>root 30 d</th><th>cascade 7 d</th>"
        "<th>cascade 30 d</th><th>last root</th><th>latest attempts</th></tr>"
    )
    return "".join(out) + head + "".join(rows) + "</table>"


def _history_row(h: dict[str, Any]) -> str:
    key = "node" if h["kind"] == "node" else "port"
    attempts = ", ".join(
        (
            a(f"/ui/diagnoses/{p['diagnosis_id']}", f"{p['cluster']} {p['job_id']}")
            if p.get("diagnosis_id")
            else escape(f"{p['cluster']} {p['job_id']}")
        )
        + f" <span class=muted>{escape(p['role'])}</span>"
        for p in h.get("attempts") or []
    )
    more = f" <span class=muted>+{h['more']} more</span>" if h.get("more") else ""
    return (
        f"<tr><td>{a(link({}, **{key: h['subject']}), h['subject'])} <span class=muted>{escape(h['kind'])}</span></td>"
        f"<td>{h['root_7d']}</td><td>{h['root_30d']}</td><td>{h['cascade_7d']}</td><td>{h['cascade_30d']}</td>"
        f"<td>{escape(str(h.get('last_root') or '-'))[:19]}</td><td>{attempts or '-'}{more}</td></tr>"
    )


def _settle_section(doc: dict[str, Any]) -> str:
    """What would settle an undecided verdict: the evidence that was not collected."""
    items = doc.get("would_settle") or []
    if not items:
        return ""
    return (
        "<h2>What would settle it</h2><ul class=settle>"
        + "".join(f"<li><b>{escape(m['source'])}</b>: {escape(m['reason'])}</li>" for m in items)
        + "</ul>"
    )


def _novel_section(doc: dict[str, Any]) -> str:
    """A doubtful verdict's log templates new to its job (or rare in the fleet): the lines no rule read."""
    basis = doc.get("novelty")
    if not basis:
        return ""
    items = doc.get("novel_templates") or []
    note = f"<p class=muted>{escape(basis['note'])}</p>" if basis.get("note") else ""
    return (
        "<h2>New in its logs</h2>"
        + note
        + "<ul class=settle>"
        + "".join(
            f"<li><b>{escape(n['level'])}</b> {n['count']}x <code>{escape(n['first'])}</code>: "
            f"<code>{escape(n['line'][:300])}</code> <span class=muted>{escape(n['why'])}</span></li>"
            for n in items
        )
        + "</ul>"
    )


def diagnosis_page(doc: dict[str, Any], ports: list[str] | None = None) -> str:
    """One diagnosis; every host, switch port and symptom on it links to the list filtered by it.
    `ports`: the switch ports it blames (where its hosts were cabled at the time)."""
    at = doc["attempt"]
    raw = f"<h2>JSON</h2><p><a href='/v1/diagnoses/{escape(doc['diagnosis_id'])}'>the diagnosis document</a></p>"
    return page(
        f"{at['cluster']} {at['job_id']}",
        _verdict_head(doc, ports)
        + "<h2>Timeline</h2>"
        + timeline(doc)
        + _root_section(doc, ports)
        + _history_section(doc)
        + _settle_section(doc)
        + _novel_section(doc)
        + _symptom_table(doc)
        + _coverage_table(doc)
        + raw,
    )


def login_page(failed: bool = False) -> str:
    msg = "<p style='color:#d62728'>not a token with the read scope</p>" if failed else ""
    return page(
        "Sign in",
        f"<h1>Sign in</h1>{msg}<form method=post action='/ui/login'>"
        "<label>API token (read scope) <input type=password name=token autofocus></label> "
        "<button>sign in</button></form>",
    )


SIGN_OUT = (
    "<form method=post action='/ui/logout' style='display:inline;float:right;margin:0'>"
    "<button style='background:none;border:1px solid #fff;color:#fff;cursor:pointer'>sign out</button></form>"
)


def with_sign_out(html: str) -> str:
    """A page seen through a session, with the button that ends it in the header."""
    return html.replace("</header>", SIGN_OUT + "</header>", 1)
