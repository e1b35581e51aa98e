"""The failure policy every HTTP sink shares: a transport error, a timeout, 409 (a conflict with a
concurrent change: a fresh read and another try may pass), 429 and 5xx are transient (tried again
by act.py); any other answer of 400 or more is the sink's error, said with the start of the body."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workload_attribution.contracts.errors import ActionError

if TYPE_CHECKING:  # imported where a request is made
    import httpx


def client(base_url: str, timeout_s: float, headers: dict[str, str] | None = None) -> httpx.Client:
    import httpx

    return httpx.Client(
        base_url=base_url.rstrip("/"),
        headers=headers or {},
        timeout=httpx.Timeout(timeout_s, connect=min(5.0, timeout_s)),
    )


def send(client: httpx.Client, method: str, path: str, what: str, **kwargs: Any) -> httpx.Response:
    """One request under the policy; the answer when below 400."""
    import httpx

    try:
        r = client.request(method, path, **kwargs)
    except httpx.TimeoutException:
        raise ActionError(f"{what}: {method} {path} did not answer in time", transient=True) from None
    except httpx.TransportError as exc:
        raise ActionError(f"{what}: {method} {path}: {type(exc).__name__}: {exc}", transient=True) from None
    if r.status_code in (409, 429) or r.status_code >= 500:
        raise ActionError(f"{what}: HTTP {r.status_code} for {method} {path}", transient=True)
    if r.status_code >= 400:
        raise ActionError(f"{what}: HTTP {r.status_code} for {method} {path}: {r.text[:300]}")
    return r
