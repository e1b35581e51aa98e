"""The failure policy every HTTP connector shares, and the escaping of values inside query strings."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from workload_attribution.contracts.errors import TransientSourceError

if TYPE_CHECKING:  # at run time httpx is imported where a request is made
    import ssl

    import httpx

MAX_BODY_BYTES = 512 * 1024 * 1024
_TLS: dict[tuple[Any, ...], ssl.SSLContext] = {}
_TLS_LOCK = threading.Lock()


def tls(verify: bool | str = True) -> ssl.SSLContext:
    """The TLS context for a connector's httpx client (its `verify`: True for the system's CAs as httpx
    finds them, False for none, or a CA file or directory), made once per process and setting, and
    made again when the CA file changes. httpx makes one per client, loading the whole CA bundle:
    ~22 ms of CPU for each client, two a Kueue attempt (its scope and its collection), whether or
    not the URL is https."""
    import httpx

    if verify is False:
        return httpx.create_ssl_context(verify=False)  # loads no CA: nothing to keep
    if verify is True:
        key: tuple[Any, ...] = (True, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    else:
        st = os.stat(verify)  # missing: the error the client would have raised
        key = (verify, st.st_mtime_ns, st.st_size)
    with _TLS_LOCK:
        ctx = _TLS.get(key)
    if ctx is None:
        ctx = httpx.create_ssl_context() if verify is True else _ca_context(str(verify))
        with _TLS_LOCK:
            if len(_TLS) > 64:  # CA files changed many times: keep only what is in use
                _TLS.clear()
            _TLS[key] = ctx
    return ctx


def _ca_context(path: str) -> ssl.SSLContext:
    import ssl

    return ssl.create_default_context(capath=path) if os.path.isdir(path) else ssl.create_default_context(cafile=path)


def escape_double_quoted(value: str) -> str:
    """A value for the inside of a double-quoted PromQL or LogQL string (Go escapes): backslash and
    quote escaped, every control character as \\u00XX, so no value can end the string or the line."""
    out = value.replace("\\", "\\\\").replace('"', '\\"')
    return "".join(f"\\u{ord(c):04x}" if ord(c) < 0x20 or ord(c) == 0x7F else c for c in out)


def http_get(
    client: httpx.Client,
    path: str,
    what: str,
    params: dict[str, Any] | None = None,
    max_retry_after_s: int = 30,
    max_bytes: int = MAX_BODY_BYTES,
) -> httpx.Response:
    """GET with the failure policy every HTTP connector shares: a timeout or transport error, 429 and
    5xx raise TransientSourceError (the collect task retries those; Retry-After is honoured up to a
    bound first); anything else is returned for the connector to judge.

    The client's read timeout is also the deadline for the whole answer: httpx's timeouts are per
    socket operation, so a server dripping a byte a second would otherwise hold a source forever.
    A body over `max_bytes` is refused (an error, not retried)."""
    import time

    import httpx

    deadline = time.monotonic() + (client.timeout.read or 60.0)
    try:
        with client.stream("GET", path, params=params) as r:
            raw, size = [], 0
            for chunk in r.iter_raw():
                raw.append(chunk)
                size += len(chunk)
                if size > max_bytes:
                    raise ValueError(f"{what}: answer from {path} is larger than {max_bytes // 2**20} MiB; refused")
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout("deadline passed while reading the answer")
            r = httpx.Response(r.status_code, headers=r.headers, content=b"".join(raw), request=r.request)
    except httpx.TimeoutException:
        raise TransientSourceError(f"{what}: {path} did not answer in time", "timeout") from None
    except httpx.TransportError as exc:
        raise TransientSourceError(f"{what}: {type(exc).__name__}: {exc}") from None
    if r.status_code == 429 or r.status_code >= 500:
        retry_after = r.headers.get("Retry-After", "")
        if retry_after.isdigit() and int(retry_after) <= max_retry_after_s:
            time.sleep(int(retry_after))
        raise TransientSourceError(f"{what}: HTTP {r.status_code} for {path}")
    return r
