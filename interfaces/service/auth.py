"""Who may call: a bearer token with the route's scope, a dashboard session, or (webhooks) an HMAC
signature.

Scopes (credentials.py holds the tokens): `read` the reads, POST /v1/diagnose and the dashboard;
`trigger` POST /v1/attempts and the webhooks; `act` actions on the fleet and their undo; `admin`
everything. A route says what it needs as a dependency:

    @router.post("/v1/actions", dependencies=[Depends(require(Scope.act))])

Webhook signature (contracts/signature.py, the scheme the action webhooks sign with too):
X-Attribution-Timestamp: <unix seconds>, X-Attribution-Signature: sha256=<hex HMAC-SHA256(secret,
"<timestamp>." + body)> (hex in either case); timestamps outside the replay window are refused. A
webhook sender that cannot sign may send a bearer token with the `trigger` scope instead.

A refusal is 401 (no credential) or 403 and names the scope the route needs, never why a given
credential failed: that reason goes to the log and, with the scope, to /metrics.
"""

from __future__ import annotations

import hmac
import re
import time
from collections.abc import Callable, Mapping

from fastapi import Request

from workload_attribution.contracts.errors import AttributionError
from workload_attribution.contracts.signature import sign  # the scheme: contracts/signature.py
from workload_attribution.service.credentials import Credential, Scope
from workload_attribution.service.sessions import COOKIE

__all__ = ["AuthError", "Scope", "check_signature", "require", "session_credential", "sign"]


class AuthError(AttributionError):
    """A refusal: `reason` is counted in /metrics (a few fixed words), `who` the credential it
    concerns, for the log."""

    def __init__(self, status: int, reason: str, scope: Scope, who: str = "") -> None:
        super().__init__(reason)
        self.status, self.reason, self.scope, self.who = status, reason, scope, who

    @property
    def detail(self) -> str:
        if self.status == 401:
            return f"authentication required: a credential with the '{self.scope}' scope"
        return f"forbidden: this route needs the '{self.scope}' scope"


def check_signature(
    secret: str | None, headers: Mapping[str, str], body: bytes, window_s: float, now: float | None = None
) -> None:
    if secret is None:
        return
    ts, sig = headers.get("x-attribution-timestamp"), headers.get("x-attribution-signature")
    if not ts or not sig:
        raise AuthError(401, "signature missing", Scope.trigger)
    if not re.fullmatch(r"\d{1,12}", ts):
        raise AuthError(403, "timestamp malformed", Scope.trigger)
    if abs((now or time.time()) - int(ts)) > window_s:
        raise AuthError(403, "timestamp outside the replay window", Scope.trigger)
    scheme, _, given = sig.strip().partition("=")
    if scheme.lower() != "sha256" or not re.fullmatch(r"[0-9a-fA-F]{64}", given):
        raise AuthError(403, "signature malformed", Scope.trigger)
    want = sign(secret, body, int(ts))["X-Attribution-Signature"].partition("=")[2]
    if not hmac.compare_digest(want.encode(), given.lower().encode()):
        raise AuthError(403, "signature mismatch", Scope.trigger)


def bearer_credential(request: Request, scope: Scope) -> Credential:
    """The credential of the request's bearer token, which must allow `scope`."""
    auth = request.headers.get("authorization") or ""
    if not auth:
        raise AuthError(401, "token missing", scope)
    kind, _, given = auth.partition(" ")
    if kind.lower() != "bearer" or not given.strip():
        raise AuthError(403, "not a bearer token", scope)
    cred = request.app.state.svc.credentials.identify(given.strip())
    if cred is None:
        raise AuthError(403, "token mismatch", scope)
    if not cred.allows(scope):
        raise AuthError(403, "token lacks the scope", scope, cred.name)
    return cred


def session_credential(request: Request, scope: Scope) -> Credential | None:
    """The credential of the request's dashboard session when it is live and allows `scope`; None
    when the request has no session cookie. A session whose token was removed or rotated is ended."""
    svc = request.app.state.svc
    sid = request.cookies.get(COOKIE)
    if not sid:
        return None
    session = svc.sessions.get(sid)
    if session is None:
        raise AuthError(401, "session unknown or expired", scope)
    cred = svc.credentials.named(session.credential)
    if cred is None or cred.fingerprint != session.fingerprint:
        svc.sessions.end(session.handle)
        raise AuthError(401, "session's token removed or rotated", scope, session.credential)
    if not cred.allows(scope):
        raise AuthError(403, "session lacks the scope", scope, cred.name)
    return cred


def authorize(request: Request, scope: Scope, session: bool = False) -> Credential | None:
    """The credential the request acts with (None on an open service: no credential configured)."""
    svc = request.app.state.svc
    if not svc.credentials.configured:
        return None
    cred = None
    if session and not request.headers.get("authorization"):
        cred = session_credential(request, scope)
    cred = cred or bearer_credential(request, scope)
    request.state.credential = cred
    return cred


def require(scope: Scope, session: bool = False) -> Callable[[Request], Credential | None]:
    """A FastAPI dependency: the request holds a credential with `scope` (a bearer token; with
    `session`, a dashboard session too, for what a browser reads)."""

    def dependency(request: Request) -> Credential | None:
        return authorize(request, scope, session)

    dependency.__name__ = f"requires_{scope}"
    return dependency
