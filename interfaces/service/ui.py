"""/ui: the read-only dashboard (plain HTML and inline SVG; see interfaces/dashboard.py)."""

from __future__ import annotations

import hmac
from html import escape
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from workload_attribution import dashboard
from workload_attribution.contracts.identity import NAME_PATTERN
from workload_attribution.service.auth import token_or_cookie_ok
from workload_attribution.service.payloads import read_body
from workload_attribution.service.reads import DIAGNOSIS_ID, WHEN, warehouse_call, when

router = APIRouter(include_in_schema=False)
PAGE_SIZE = 100


def html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(
        body,
        status_code=status,
        headers={
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
            "frame-ancestors 'none'",
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "no-store",
        },
    )


@router.get("/ui", response_class=HTMLResponse)
def ui_list(
    request: Request,
    cluster: Annotated[str | None, Query(pattern=r"^$|" + NAME_PATTERN)] = None,
    since: Annotated[str | None, Query(max_length=40)] = None,
    until: Annotated[str | None, Query(max_length=40)] = None,
    terminal_state: Annotated[str | None, Query(pattern=r"^[a-z_]{0,40}$")] = None,
    sub_domain: Annotated[str | None, Query(pattern=r"^[a-z_]{0,40}$")] = None,
    node: Annotated[str | None, Query(pattern=r"^$|" + NAME_PATTERN)] = None,
    symptom: Annotated[str | None, Query(pattern=r"^[a-z0-9_]{0,64}$")] = None,
    port: Annotated[str | None, Query(pattern=r"^$|^[A-Za-z0-9._/-]{1,63}:[A-Za-z0-9._/-]{1,20}$")] = None,
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
    per_page: Annotated[int, Query(ge=10, le=500)] = PAGE_SIZE,
):
    from fastapi import HTTPException

    from workload_attribution.warehouse.reads import Filters, list_diagnoses, trends

    svc = request.app.state.svc
    if not token_or_cookie_ok(svc.token, request):
        return RedirectResponse("/ui/login", status_code=303)
    try:
        since_t, until_t = when("since", since), when("until", until)
    except HTTPException:
        return html(dashboard.page("Bad filter", f"<h1>since / until: {escape(WHEN)}</h1>"), 422)
    filters = Filters(
        cluster=cluster or None,
        since=since_t,
        until=until_t,
        terminal_state=terminal_state or None,
        sub_domain=sub_domain or None,
        node=node or None,
        symptom=symptom or None,
        switch_port=port or None,
    )
    rows, total = warehouse_call(request, list_diagnoses, filters, per_page, (page - 1) * per_page)
    charts = warehouse_call(request, trends, filters)
    shown = {
        "cluster": cluster,
        "terminal_state": terminal_state,
        "sub_domain": sub_domain,
        "node": node,
        "symptom": symptom,
        "port": port,
        "since": since,
        "until": until,
        "per_page": per_page if per_page != PAGE_SIZE else None,
    }
    return html(dashboard.list_page(rows, shown, charts, page_no=page, page_size=per_page, total=total))


@router.get("/ui/diagnoses/{diagnosis_id}", response_class=HTMLResponse)
def ui_diagnosis(diagnosis_id: str, request: Request):
    import re

    from workload_attribution.warehouse.reads import get_diagnosis, switch_ports

    svc = request.app.state.svc
    if not token_or_cookie_ok(svc.token, request):
        return RedirectResponse("/ui/login", status_code=303)
    doc = (
        warehouse_call(request, get_diagnosis, diagnosis_id.lower())
        if re.fullmatch(DIAGNOSIS_ID, diagnosis_id)
        else None
    )
    if doc is None:
        return html(dashboard.page("Not found", "<h1>No such diagnosis</h1>"), 404)
    return html(dashboard.diagnosis_page(doc, ports=warehouse_call(request, switch_ports, doc["diagnosis_id"])))


@router.get("/ui/login", response_class=HTMLResponse)
def ui_login_form():
    return html(dashboard.login_page())


@router.post("/ui/login")
async def ui_login(request: Request):
    from urllib.parse import parse_qs

    svc = request.app.state.svc
    body = await read_body(request, 4096, svc.cfg.service.body_timeout_s)
    given = (parse_qs(body.decode(errors="replace")).get("token") or [""])[0]
    if svc.token is not None and not hmac.compare_digest(given.encode(), svc.token.encode()):
        svc.metrics.auth_failures.labels("dashboard token mismatch").inc()
        return html(dashboard.login_page(failed=True), 403)
    response = RedirectResponse("/ui", status_code=303)
    response.set_cookie(
        "attribution_token",
        given,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        max_age=12 * 3600,
    )
    return response
