"""The service's own access, for admins: which tokens are in force, the dashboard's live sessions,
and ending one (a browser left signed in elsewhere, a laptop lost)."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response

from workload_attribution.service.auth import Scope, require

router = APIRouter(dependencies=[Depends(require(Scope.admin))])


def _time(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat()


@router.get("/v1/tokens")
def tokens(request: Request) -> dict[str, Any]:
    """The tokens in force: names and scopes (never a secret or a hash)."""
    found = request.app.state.svc.credentials.all()
    return {"items": [{"name": c.name, "scopes": sorted(c.scopes)} for c in found]}


@router.get("/v1/sessions")
def sessions(request: Request) -> dict[str, Any]:
    """The dashboard's live sessions: a handle (to end one), the token that opened it, when."""
    live = request.app.state.svc.sessions.live()
    return {
        "items": [
            {"handle": s.handle, "token": s.credential, "created": _time(s.created), "expires": _time(s.expires)}
            for s in live
        ]
    }


@router.delete("/v1/sessions/{handle}", status_code=204)
def end_session(handle: str, request: Request) -> Response:
    """End a session now: its next request is refused."""
    if not re.fullmatch(r"[0-9a-f]{32}", handle):
        raise HTTPException(422, [{"field": "handle", "error": "not a session handle (32 hex digits)"}])
    if not request.app.state.svc.sessions.end(handle):
        raise HTTPException(404, "no such session")
    return Response(status_code=204)
