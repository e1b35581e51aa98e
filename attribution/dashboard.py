"""The read-only dashboard served by `attribution serve` at /ui: server-rendered HTML and inline SVG
(no JavaScript, no build step, nothing fetched from elsewhere).

    /ui                   diagnoses, newest first, with filters; trend charts above the list
    /ui/diagnoses/{id}    one diagnosis: the symptoms on a timeline per host (root first, cascades
                          after), the coverage of every source, the root's evidence lines
    /ui/login             exchange the API token for a session cookie (when a token is configured)

Every value is HTML-escaped; every query binds its parameters.
"""

from __future__ import annotations

import hmac
from datetime import datetime, timedelta
from html import escape
from typing import Any, Callable

STATE_COLORS = {
    "hardware_failure": "#d62728", "infrastructure_failure": "#ff7f0e", "application_failure": "#1f77b4",
    "scheduler_action": "#9467bd", "unknown": "#7f7f7f", "completed": "#2ca02c",
}
ROLE_COLORS = {"root": "#d62728", "cascade": "#ff9f40", "context": "#4c78a8"}

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#263238;color:#fff;padding:10px 20px}header a{color:#fff;text-decoration:none;margin-right:16px}
main{padding:16px 20px;max-width:1400px}h1{font-size:20px;margin:4px 0 12px}h2{font-size:16px;margin:20px 0 8px}
table{border-collapse:collapse;background:#fff;width:100%}td,th{border-bottom:1px solid #e0e0e0;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eceff1}.pill{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:12px}
form.filters{margin:8px 0 16px;display:flex;gap:8px;flex-wrap:wrap;align-items:end}form.filters label{font-size:12px;display:flex;flex-direction:column}
.charts{display:grid;grid-template-columns:2fr 1fr 1fr;gap:16px}.card{background:#fff;border:1px solid #e0e0e0;padding:10px}
code,pre{font:12px/1.3 ui-monospace,monospace}pre{white-space:pre-wrap;margin:0}.muted{color:#777}
"""


def page(title: str, body: str) -> str:
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(title)} - workload-attribution</title>"
            f"<style>{STYLE}</style></head><body><header><a href='/ui'><b>workload-attribution</b></a>"
            f"<a href='/ui'>diagnoses</a><a href='/docs'>API</a></header><main>{body}</main></body></html>")


def pill(state: str) -> str:
    return f"<span class=pill style='background:{STATE_COLORS.get(state, '#555')}'>{escape(state)}</span>"


# ------------------------------------------------------------------------------------------ charts

def stacked_bars(series: list[tuple[str, dict[str, int]]], title: str, width: int = 640, height: int = 220) -> str:
    """Bars per period (x), stacked by terminal_state."""
    if not series:
        return f"<div class=card><b>{escape(title)}</b><p class=muted>no data</p></div>"
    top = max(sum(v.values()) for _, v in series) or 1
    left, bottom, inner_h = 30, 30, height - 50
    bw = max(2.0, (width - left - 10) / len(series))
    parts = [f"<svg role=img aria-label='{escape(title)}' width={width} height={height} viewBox='0 0 {width} {height}'>",
             f"<line x1={left} y1={height - bottom} x2={width} y2={height - bottom} stroke='#999'/>",
             f"<text x=2 y=14 font-size=11>{top}</text>"]
    for i, (label, counts) in enumerate(series):
        y = height - bottom
        for state in STATE_COLORS:
            n = counts.get(state, 0)
            if not n:
                continue
            h = n / top * inner_h
            y -= h
            parts.append(f"<rect class=bar x={left + i * bw:.1f} y={y:.1f} width={max(1.0, bw - 1):.1f} height={h:.1f} "
                         f"fill='{STATE_COLORS[state]}'><title>{escape(label)} {escape(state)}: {n}</title></rect>")
        if len(series) <= 16 or i % max(1, len(series) // 8) == 0:
            parts.append(f"<text x={left + i * bw:.1f} y={height - 12} font-size=10>{escape(label[5:])}</text>")
    parts.append("</svg>")
    legend = " ".join(pill(s) for s in STATE_COLORS)
    return f"<div class=card><b>{escape(title)}</b><br>{''.join(parts)}<div>{legend}</div></div>"


def hbars(rows: list[tuple[str, int]], title: str, color: str, width: int = 320) -> str:
    if not rows:
        return f"<div class=card><b>{escape(title)}</b><p class=muted>no data</p></div>"
    top = max(n for _, n in rows) or 1
    height = 22 * len(rows) + 10
    parts = [f"<svg role=img aria-label='{escape(title)}' width='100%' viewBox='0 0 {width} {height}'>"]
    for i, (label, n) in enumerate(rows):
        w = n / top * (width - 170)
        parts.append(f"<text x=0 y={i * 22 + 16} font-size=11>{escape(label[:24])}</text>"
                     f"<rect class=bar x=150 y={i * 22 + 4} width={w:.1f} height=16 fill='{color}'><title>{escape(label)}: {n}</title></rect>"
                     f"<text x={155 + w:.1f} y={i * 22 + 16} font-size=11>{n}</text>")
    parts.append("</svg>")
    return f"<div class=card><b>{escape(title)}</b><br>{''.join(parts)}</div>"


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
    hosts = sorted({s.get("node") or "(job)" for s in syms},
                   key=lambda h: (h != root_node, min(order.get(s["role"], 3) for s in syms if (s.get("node") or "(job)") == h), h))
    left, row = 160, 24
    height = row * len(hosts) + 40
    scale = (width - left - 20) / span
    parts = [f"<svg role=img aria-label='symptom timeline' width={width} height={height}>"]
    for i, h in enumerate(hosts):
        y = 10 + i * row
        parts.append(f"<text x=0 y={y + 14} font-size=12{' font-weight=bold' if h == root_node else ''}>{escape(h[:22])}</text>"
                     f"<line x1={left} y1={y + row / 2} x2={width - 10} y2={y + row / 2} stroke='#eee'/>")
    for s in sorted(syms, key=lambda s: order.get(s["role"], 3), reverse=True):   # roots drawn last, on top
        y = 10 + hosts.index(s.get("node") or "(job)") * row
        a = (parse(s["first_seen"]) - t0).total_seconds() * scale
        b = (parse(s.get("last_seen") or s["first_seen"]) - t0).total_seconds() * scale
        color = ROLE_COLORS.get(s["role"], "#999")
        parts.append(f"<rect class=mark x={left + a:.1f} y={y + 4} width={max(6.0, b - a):.1f} height={row - 8} rx=3 "
                     f"fill='{color}'><title>{escape(s['symptom'])} ({escape(s['role'])}) x{s.get('count', 1)} "
                     f"{escape(s['first_seen'])}</title></rect>")
    parts.append(f"<text x={left} y={height - 6} font-size=10>{escape(t0.isoformat())}</text>"
                 f"<text x={width - 10} y={height - 6} font-size=10 text-anchor=end>+{span:.0f} s</text></svg>")
    legend = " ".join(f"<span class=pill style='background:{c}'>{r}</span>" for r, c in ROLE_COLORS.items())
    return "".join(parts) + f"<div>{legend}</div>"


# ------------------------------------------------------------------------------------------- pages

def list_page(rows: list[dict], filters: dict[str, Any], trends: dict[str, Any]) -> str:
    f = {k: escape(str(v)) if v is not None else "" for k, v in filters.items()}
    form = ("<form class=filters method=get action='/ui'>"
            f"<label>cluster<input name=cluster value='{f['cluster']}'></label>"
            f"<label>terminal state<select name=terminal_state><option value=''>any</option>"
            + "".join(f"<option{' selected' if filters.get('terminal_state') == s else ''}>{s}</option>" for s in STATE_COLORS)
            + "</select></label>"
            f"<label>node<input name=node value='{f['node']}'></label>"
            f"<label>since<input name=since placeholder='2026-11-01T00:00:00Z' value='{f['since']}'></label>"
            f"<label>until<input name=until value='{f['until']}'></label><button>filter</button></form>")
    charts = ("<div class=charts>"
              + stacked_bars(trends["per_period"], f"Diagnoses by terminal_state per {trends['period']}")
              + hbars(trends["top_hosts"], "Top hosts (hardware/infrastructure roots and affected)", "#d62728")
              + hbars(trends["top_ports"], "Top switch ports", "#ff7f0e")
              + "</div>")
    body = ["<h1>Diagnoses</h1>", charts, form, "<table><tr><th>attempt end</th><th>cluster</th><th>job / attempt</th>"
            "<th>verdict</th><th>root</th><th>affected</th><th>action</th></tr>"]
    for r in rows:
        body.append(
            f"<tr><td>{escape(str(r['attempt_end'] or ''))[:19]}</td><td>{escape(r['cluster'])}</td>"
            f"<td><a href='/ui/diagnoses/{escape(r['diagnosis_id'])}'>{escape(r['scheduler'])} {escape(r['job_id'])}</a>"
            f" #{r['attempt']}</td><td>{pill(r['terminal_state'])} {escape(r['sub_domain'])}</td>"
            f"<td>{escape(r['root_node'] or '')}</td><td>{escape(', '.join(r['affected_nodes'] or []))}</td>"
            f"<td>{escape(r['recommended_action'] or '')}</td></tr>")
    body.append("</table>")
    if not rows:
        body.append("<p class=muted>no diagnosis matches</p>")
    return page("Diagnoses", "".join(body))


def diagnosis_page(doc: dict[str, Any]) -> str:
    a, rc = doc["attempt"], doc.get("root_cause") or {}
    ev = {e["id"]: e for e in doc.get("evidence") or []}
    head = (f"<h1>{escape(a['cluster'])} / {escape(a['scheduler'])} job {escape(str(a['job_id']))} attempt {a['attempt']}</h1>"
            f"<p>{pill(doc['terminal_state'])} <b>{escape(doc['sub_domain'])}</b> (confidence {escape(str(doc.get('confidence')))})"
            f" &middot; action <b>{escape(doc.get('recommended_action') or '')}</b> &middot; affected "
            f"<b>{escape(', '.join(doc.get('affected_nodes') or []) or 'none')}</b></p>"
            f"<p>{escape(doc.get('explanation') or '')}</p>")
    root = ""
    if rc:
        lines = "".join(f"<pre>{escape(ev[i]['ref'])}: {escape(ev[i]['text'])}</pre>" for i in rc.get("evidence", []) if i in ev)
        root = (f"<h2>Root cause</h2><p><b>{escape(rc.get('title') or rc.get('symptom') or '')}</b> on "
                f"{escape(rc.get('node') or '-')} {escape(rc.get('component') or '')} at {escape(str(rc.get('first_seen')))}</p>{lines}")
    order = {"root": 0, "cascade": 1, "context": 2}
    syms = sorted(doc.get("symptoms") or [], key=lambda s: (order.get(s["role"], 3), s.get("first_seen") or ""))
    table = ["<h2>Symptoms (root first)</h2><table><tr><th>role</th><th>symptom</th><th>node</th><th>rank</th>"
             "<th>first seen</th><th>count</th><th>demoted by</th></tr>"]
    for s in syms:
        table.append(f"<tr><td><span class=pill style='background:{ROLE_COLORS.get(s['role'], '#999')}'>{escape(s['role'])}</span></td>"
                     f"<td>{escape(s['symptom'])}</td><td>{escape(s.get('node') or '')}</td><td>{escape(str(s.get('rank') if s.get('rank') is not None else ''))}</td>"
                     f"<td>{escape(str(s.get('first_seen') or ''))}</td><td>{s.get('count', '')}</td>"
                     f"<td>{escape(s.get('demoted_by') or '')}</td></tr>")
    table.append("</table>")
    cov = ["<h2>Coverage</h2><table><tr><th>source</th><th>connector</th><th>status</th><th>observations</th><th>note</th></tr>"]
    for c in doc.get("coverage") or []:
        cov.append(f"<tr><td>{escape(c['source'])}</td><td>{escape(c.get('connector') or '')}</td><td>{escape(c['status'])}</td>"
                   f"<td>{c.get('observations', '')}</td><td>{escape(c.get('error') or '')}</td></tr>")
    cov.append("</table>")
    raw = f"<h2>JSON</h2><p><a href='/v1/diagnoses/{escape(doc['diagnosis_id'])}'>the diagnosis document</a></p>"
    return page(f"{a['cluster']} {a['job_id']}", head + "<h2>Timeline</h2>" + timeline(doc) + root + "".join(table)
                + "".join(cov) + raw)


def login_page(failed: bool = False) -> str:
    msg = "<p style='color:#d62728'>wrong token</p>" if failed else ""
    return page("Sign in", f"<h1>Sign in</h1>{msg}<form method=post action='/ui/login'>"
                           "<label>API token <input type=password name=token autofocus></label> <button>sign in</button></form>")


# ------------------------------------------------------------------------------------------ queries

def trends(rows: Callable[[str, list], list[tuple]], cluster: str | None) -> dict[str, Any]:
    where, args = ("WHERE cluster = ?", [cluster]) if cluster else ("", [])
    span = rows(f"SELECT min(end_time), max(end_time) FROM diagnoses {where}", args)
    lo, hi = span[0] if span else (None, None)
    period = "day" if lo and hi and hi - lo <= timedelta(days=62) else "week"
    per = rows(f"SELECT strftime(date_trunc('{period}', end_time), '%Y-%m-%d') AS p, terminal_state, count(*) "
               f"FROM diagnoses {where} {'AND' if where else 'WHERE'} end_time IS NOT NULL GROUP BY ALL ORDER BY p", args)
    series: dict[str, dict[str, int]] = {}
    for p, state, n in per:
        series.setdefault(p, {})[state] = n
    top_hosts = rows(f"""
        SELECT node, count(DISTINCT diagnosis_id) FROM (
            SELECT diagnosis_id, root_node AS node, cluster FROM diagnoses WHERE root_node IS NOT NULL
            UNION SELECT d.diagnosis_id, a.node, d.cluster FROM diagnoses d JOIN diagnosis_affected_nodes a USING (diagnosis_id))
        {where} GROUP BY node ORDER BY 2 DESC, node LIMIT 8""", args)
    top_ports = rows(f"SELECT switch || ':' || port, attempts FROM switch_port_patterns {where} LIMIT 8", args)
    return {"period": period, "per_period": sorted(series.items()), "top_hosts": top_hosts, "top_ports": top_ports}


def token_ok(token: str | None, request) -> bool:
    """The API token as a bearer header, or the session cookie /ui/login set."""
    if token is None:
        return True
    given = request.cookies.get("attribution_token") or ""
    auth = request.headers.get("authorization") or ""
    if auth.lower().startswith("bearer "):
        given = auth[7:].strip()
    return bool(given) and hmac.compare_digest(given.encode(), token.encode())
