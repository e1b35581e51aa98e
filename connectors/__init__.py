"""Connectors: get an attempt's evidence from a source into the staging database."""


class TransientSourceError(Exception):
    """A source failed in a way worth retrying (transport error, 429, 5xx).

    `status` is the coverage status to record if every retry fails ('error' or 'timeout').
    """

    def __init__(self, message: str, status: str = "error"):
        super().__init__(message)
        self.status = status


def http_get(client, path: str, what: str, params: dict | None = None, max_retry_after_s: int = 30):
    """GET with the failure policy every HTTP connector shares: a timeout or transport error, 429 and
    5xx raise TransientSourceError (the collect task retries those; Retry-After is honoured up to a
    bound first); anything else is returned for the connector to judge."""
    import time

    import httpx

    try:
        r = client.get(path, params=params)
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
