"""The HMAC signature of a webhook body, one scheme for what the service receives (the schedulers'
hooks, interfaces/service/auth.py) and what the actions send (actions/sinks/webhook.py):

    X-Attribution-Timestamp: <unix seconds>
    X-Attribution-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>." + body)>
"""

from __future__ import annotations

import hashlib
import hmac
import time

TIMESTAMP_HEADER = "X-Attribution-Timestamp"
SIGNATURE_HEADER = "X-Attribution-Signature"


def sign(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """The headers a sender adds (the hooks in deployments/ do the same in a few lines)."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    mac = hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {TIMESTAMP_HEADER: ts, SIGNATURE_HEADER: f"sha256={mac}"}
