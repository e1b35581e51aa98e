"""Who may call: a bearer token (requests, reads, the dashboard) or an HMAC signature (webhooks).

Webhook signature (contracts/signature.py, the scheme the action webhooks sign with too):
X-Attribution-Timestamp: <unix seconds>, X-Attribution-Signature: sha256=<hex HMAC-SHA256(secret,
"<timestamp>." + body)> (hex in either case); timestamps outside the replay window are refused.
Refusals say 401 or 403 and nothing else; the reason goes to the log and to /metrics.
"""

from __future__ import annotations

import hmac
import re
import time

from fastapi import Request

from workload_attribution.contracts.errors import AttributionError
from workload_attribution.contracts.signature import sign  # the scheme: contracts/signature.py

__all__ = ["AuthError", "bearer", "check_bearer", "check_signature", "sign", "token_or_cookie_ok"]


class AuthError(AttributionError):
    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


def check_signature(secret: str | None, headers, body: bytes, window_s: float, now: float | None = None) -> None:
    if secret is None:
        return
    ts, sig = headers.get("x-attribution-timestamp"), headers.get("x-attribution-signature")
    if not ts or not sig:
        raise AuthError(401, "signature missing")
    if not re.fullmatch(r"\d{1,12}", ts):
        raise AuthError(403, "timestamp malformed")
    if abs((now or time.time()) - int(ts)) > window_s:
        raise AuthError(403, "timestamp outside the replay window")
    scheme, _, given = sig.strip().partition("=")
    if scheme.lower() != "sha256" or not re.fullmatch(r"[0-9a-fA-F]{64}", given):
        raise AuthError(403, "signature malformed")
    want = sign(secret, body, int(ts))["X-Attribution-Signature"].partition("=")[2]
    if not hmac.compare_digest(want.encode(), given.lower().encode()):
        raise AuthError(403, "signature mismatch")


def check_bearer(token: str | None, headers) -> None:
    if token is None:
        return
    auth = headers.get("authorization") or ""
    if not auth:
        raise AuthError(401, "token missing")
    scheme, _, given = auth.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise AuthError(403, "token mismatch")


def bearer(request: Request) -> None:
    """Dependency: the request carries the API token (when one is configured)."""
    check_bearer(request.app.state.svc.token, request.headers)


def token_or_cookie_ok(token: str | None, request: Request) -> bool:
    """The dashboard: the API token as a bearer header, or the session cookie /ui/login set."""
    if token is None:
        return True
    given = request.cookies.get("attribution_token") or ""
    auth = request.headers.get("authorization") or ""
    if auth.lower().startswith("bearer "):
        given = auth[7:].strip()
    return bool(given) and hmac.compare_digest(given.encode(), token.encode())
