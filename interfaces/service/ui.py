"""/ui: the read-only dashboard (plain HTML and inline SVG; see interfaces/dashboard.py).

It needs the `read` scope: a bearer token, or a session opened at /ui/login with such a token
(sessions.py: the cookie holds a random id, never the token) and ended at /ui/logout."""

from __future__ import annotations

import logging
from html import escape
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from workload_attribution import dashboard
from workload_attribution.contracts.identity import NAME_PATTERN
from workload_attribution.service.auth import AuthError, Scope, authorize
from workload_attribution.service.payloads import read_body
from workload_attribution.service.reads import DIAGNOSIS_ID, WHEN, warehouse_call, when
from workload_attribution.service.sessions import COOKIE, handle_of

router = APIRouter(include_in_schema=False)
PAGE_SIZE = 100
log = logging.getLogger("workload_attribution.service")


def signed_in(request: Request) -> bool:
    """Whether the request may read the dashboard; a credential refused is counted and logged (the
    browser is sent to sign in)."""
    try:
        authorize(request, Scope.read, session=True)
    except AuthError as exc:
        if request.cookies.get(COOKIE) or request.headers.get("authorization"):
            request.app.state.svc.metrics.auth_failures.labels(exc.scope.value, exc.reason).inc()
            log.warning("refused %s %s: %s, needs scope %s", request.method, request.url.path, exc.reason, exc.scope)
        return False
    return True


def dashboard_page(request: Request, body: str, status: int = 200) -> HTMLResponse:
    """A dashboard page; with a sign-out button when it is seen through a session."""
    return html(dashboard.with_sign_out(body) if request.cookies.get(COOKIE) else body, status)


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
) -> Response:
    from fastapi import HTTPException

    from workload_attribution.warehouse.reads import Filters, list_diagnoses, trends

    if not signed_in(request):
        return RedirectResponse("/ui/login", status_code=303)
    try:
        since_t, until_t = when("since", since), when("until", until)
    except HTTPException:
        return dashboard_page(request, dashboard.page("Bad filter", f"<h1>since / until: {escape(WHEN)}</h1>"), 422)
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
    listed = dashboard.list_page(rows, shown, charts, page_no=page, page_size=per_page, total=total)
    return dashboard_page(request, listed)


@router.get("/ui/diagnoses/{diagnosis_id}", response_class=HTMLResponse)
def ui_diagnosis(diagnosis_id: str, request: Request) -> Response:
    import re

    from workload_attribution.warehouse.reads import get_diagnosis, switch_ports

    if not signed_in(request):
        return RedirectResponse("/ui/login", status_code=303)
    doc = (
        warehouse_call(request, get_diagnosis, diagnosis_id.lower())
        if re.fullmatch(DIAGNOSIS_ID, diagnosis_id)
        else None
    )
    if doc is None:
        return dashboard_page(request, dashboard.page("Not found", "<h1>No such diagnosis</h1>"), 404)
    ports = warehouse_call(request, switch_ports, doc["diagnosis_id"])
    return dashboard_page(request, dashboard.diagnosis_page(doc, ports=ports))


@router.get("/ui/login", response_class=HTMLResponse)
def ui_login_form() -> HTMLResponse:
    return html(dashboard.login_page())


@router.post("/ui/login")
async def ui_login(request: Request) -> Response:
    """A token with the read scope opens a session; the cookie holds the session's random id."""
    from urllib.parse import parse_qs

    svc = request.app.state.svc
    body = await read_body(request, 4096, svc.cfg.service.body_timeout_s)
    given = (parse_qs(body.decode(errors="replace")).get("token") or [""])[0].strip()
    if not svc.credentials.configured:
        return RedirectResponse("/ui", status_code=303)  # an open service: nothing to sign in to
    cred = svc.credentials.identify(given) if given else None
    if cred is None or not cred.allows(Scope.read):
        reason = "dashboard token mismatch" if cred is None else "dashboard token lacks the scope"
        svc.metrics.auth_failures.labels(Scope.read.value, reason).inc()
        log.warning("refused POST /ui/login: %s%s, needs scope read", reason, f" ({cred.name})" if cred else "")
        return html(dashboard.login_page(failed=True), 403)
    session_id = svc.sessions.open(cred.name, cred.fingerprint)
    log.info("dashboard session opened for token %s", cred.name)
    response = RedirectResponse("/ui", status_code=303)
    response.set_cookie(
        COOKIE,
        session_id,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        max_age=int(svc.cfg.service.session_ttl_s),
        path="/",
    )
    return response


@router.post("/ui/logout")
def ui_logout(request: Request) -> Response:
    """The session ends here and now (its id is worth nothing after), and the cookie is dropped."""
    sid = request.cookies.get(COOKIE)
    if sid:
        request.app.state.svc.sessions.end(handle_of(sid))
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response
