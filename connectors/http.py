"""The failure policy every HTTP connector shares, and the escaping of values inside query strings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workload_attribution.contracts.errors import TransientSourceError

if TYPE_CHECKING:  # at run time httpx is imported where a request is made
    import httpx

MAX_BODY_BYTES = 512 * 1024 * 1024


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
