"""A client of `attribution serve`'s POST /v1/diagnose: send an attempt bundle, get its diagnosis.

    from workload_attribution.client import diagnose_remote
    d = diagnose_remote("https://attribution.example:8080", Path("bundle/"), token=os.environ["ATTRIBUTION_API_TOKEN"])

The bundle travels as a .tar.gz built on the fly in a temporary file (never all in memory).
"""

from __future__ import annotations

import os
import tarfile
import tempfile
from pathlib import Path

from workload_attribution.contracts.errors import BadInput, SourceError, TransientSourceError
from workload_attribution.contracts.models import Diagnosis


def pack_bundle(bundle: Path, out: Path) -> None:
    """bundle/ as a gzip'd tar, members relative to it; links and special files are not sent."""
    bundle = Path(bundle)
    with tarfile.open(out, "w:gz", compresslevel=6) as tar:
        for path in sorted(bundle.rglob("*")):
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                continue
            tar.add(path, arcname=str(path.relative_to(bundle)), recursive=False)


def diagnose_remote(
    url: str, bundle: Path, token: str | None = None, store: bool = False, timeout_s: float = 300.0
) -> Diagnosis:
    import httpx

    if not Path(bundle).is_dir():
        raise BadInput(f"{bundle}: no such bundle directory")
    headers = {"Content-Type": "application/gzip"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    with tempfile.TemporaryDirectory(prefix="attribution-send-") as tmp:
        archive = Path(tmp) / "bundle.tar.gz"
        pack_bundle(Path(bundle), archive)
        try:
            with archive.open("rb") as body:
                r = httpx.post(
                    url.rstrip("/") + "/v1/diagnose",
                    params={"store": "true" if store else "false"},
                    content=body,
                    headers=headers,
                    timeout=httpx.Timeout(timeout_s, connect=10.0),
                )
        except httpx.TimeoutException:
            raise TransientSourceError(f"{url}: no answer within {timeout_s:g} s", "timeout") from None
        except httpx.TransportError as exc:
            raise TransientSourceError(f"{url}: {type(exc).__name__}: {exc}") from None
    if r.status_code == 200:
        return Diagnosis.model_validate_json(r.content)
    try:
        detail = r.json().get("detail")
    except ValueError:
        detail = r.text[:200]
    if isinstance(detail, list):
        detail = "; ".join(f"{d.get('field')}: {d.get('error')}" for d in detail if isinstance(d, dict))
    message = f"{url} answered {r.status_code}: {detail}"
    if r.status_code in (401, 403, 413, 422):
        raise BadInput(message)
    if r.status_code in (429, 503, 504):
        raise TransientSourceError(message)
    raise SourceError(message)


def token_from_env(name: str = "ATTRIBUTION_API_TOKEN") -> str | None:
    return os.environ.get(name) or None
