"""Where the evidence archive keeps its objects: a local folder, or S3-compatible object storage.

One small interface (put, get, list, delete by key), two implementations. A key is a relative
path of ASCII segments (`evidence/ab/ab12....jsonl.zst`). S3 is spoken directly (SigV4 over
httpx, no SDK): the endpoint, region and credentials come from the standard AWS_* variables
(AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL for a server other than AWS's, AWS_REGION or
AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), never from a
file of this project.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote, urlparse

from workload_attribution.contracts.errors import BadInput
from workload_attribution.warehouse.object_store import is_object_store

if TYPE_CHECKING:  # imported where an S3 store is used: httpx costs a diagnosis without one ~0.1 s to import
    import httpx


class ArchiveStoreError(BadInput):
    """The archive's location cannot be used as configured (no credentials, not a bucket URL)."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    modified: datetime


class ObjectStore(Protocol):
    def put(self, key: str, data: bytes) -> None: ...
    def get(self, key: str) -> bytes: ...  # KeyError when there is no such object
    def list(self, prefix: str) -> Iterator[ObjectInfo]: ...
    def delete(self, key: str) -> None: ...  # gone already: nothing to do


def open_store(location: str) -> ObjectStore:
    """`s3://bucket/prefix` -> S3Objects; anything else is a local folder."""
    if is_object_store(location):  # the same schemes a lake's data path may name
        return S3Objects.from_url(location)
    if "://" in location:
        raise ArchiveStoreError(f"archive location {location}: a folder or s3://bucket/prefix")
    return LocalObjects(Path(location))


def _checked(key: str) -> str:
    parts = key.split("/")
    if not key or any(p in ("", ".", "..") for p in parts) or not key.isascii():
        raise ValueError(f"not an object key: {key!r}")
    return key


class LocalObjects:
    """Objects as files under a folder; a write lands whole or not at all (a temporary file renamed)."""

    def __init__(self, root: Path):
        self.root = root

    def __str__(self) -> str:
        return str(self.root)

    def put(self, key: str, data: bytes) -> None:
        path = self.root / _checked(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def get(self, key: str) -> bytes:
        try:
            return (self.root / _checked(key)).read_bytes()
        except FileNotFoundError:
            raise KeyError(key) from None

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        base = self.root / prefix.rstrip("/") if prefix.rstrip("/") else self.root
        if not base.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for name in sorted(filenames):
                if name.startswith("."):  # a write in progress
                    continue
                path = Path(dirpath) / name
                try:
                    st = path.stat()
                except FileNotFoundError:  # pruned meanwhile
                    continue
                key = path.relative_to(self.root).as_posix()
                yield ObjectInfo(key, st.st_size, datetime.fromtimestamp(st.st_mtime, timezone.utc))

    def delete(self, key: str) -> None:
        path = self.root / _checked(key)
        path.unlink(missing_ok=True)
        for parent in path.parents:  # empty folders go with their last object
            if parent == self.root or not parent.is_relative_to(self.root):
                break
            try:
                parent.rmdir()
            except OSError:
                break


S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
TRIES = (0.2, 1.0, 3.0)  # waits before the retries of a transient failure


@dataclass(frozen=True)
class S3Credentials:
    access_key: str
    secret_key: str
    session_token: str | None
    region: str
    endpoint: str | None  # None: AWS itself

    @classmethod
    def from_env(cls) -> S3Credentials:
        key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
        if not key or not secret:
            raise ArchiveStoreError("an s3:// archive needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        return cls(
            access_key=key,
            secret_key=secret,
            session_token=os.environ.get("AWS_SESSION_TOKEN") or None,
            region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
            endpoint=(os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "").rstrip("/")
            or None,
        )


class S3Objects:
    """Objects under `prefix` in an S3 bucket: path-style URLs on a configured endpoint (MinIO,
    SeaweedFS, Ceph), virtual-hosted ones on AWS. Transport errors and 5xx are retried."""

    def __init__(self, bucket: str, prefix: str, creds: S3Credentials, timeout_s: float = 30.0):
        import httpx

        self.bucket, self.prefix, self.creds = bucket, prefix.strip("/"), creds
        self.client = httpx.Client(timeout=timeout_s)

    @classmethod
    def from_url(cls, url: str) -> S3Objects:
        u = urlparse(url)
        if not u.netloc:
            raise ArchiveStoreError(f"archive location {url}: expected s3://bucket/prefix")
        return cls(u.netloc, u.path, S3Credentials.from_env())

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def _url(self, key: str) -> tuple[str, str]:
        """(the object's URL without query, its canonical path); key "" is the bucket itself."""
        full = "/".join(p for p in (self.prefix, key) if p) if key else ""
        if self.creds.endpoint:
            path = f"/{self.bucket}/{quote(full, safe='/-_.~')}" if full else f"/{self.bucket}"
            return self.creds.endpoint + path, path
        path = f"/{quote(full, safe='/-_.~')}"
        return f"https://{self.bucket}.s3.{self.creds.region}.amazonaws.com{path}", path

    def _send(self, method: str, key: str, query: dict[str, str] | None = None, body: bytes = b"") -> httpx.Response:
        import httpx

        url, path = self._url(key)
        qs = canonical_query(query or {})
        for wait in (*TRIES, None):
            headers = sign_v4(self.creds, method, url, path, qs, body)
            try:
                r = self.client.request(method, f"{url}?{qs}" if qs else url, content=body, headers=headers)
            except httpx.TransportError:
                if wait is None:
                    raise
            else:
                if r.status_code < 500 or wait is None:
                    return r
            time.sleep(wait)
        raise AssertionError("unreachable")

    def put(self, key: str, data: bytes) -> None:
        r = self._send("PUT", _checked(key), body=data)
        if r.status_code not in (200, 201, 204):
            raise OSError(f"{self}: PUT {key}: HTTP {r.status_code} {r.text[:200]}")

    def get(self, key: str) -> bytes:
        r = self._send("GET", _checked(key))
        if r.status_code == 404:
            raise KeyError(key)
        if r.status_code != 200:
            raise OSError(f"{self}: GET {key}: HTTP {r.status_code} {r.text[:200]}")
        return r.content

    def delete(self, key: str) -> None:
        r = self._send("DELETE", _checked(key))
        if r.status_code not in (200, 204, 404):
            raise OSError(f"{self}: DELETE {key}: HTTP {r.status_code} {r.text[:200]}")

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        full = (self.prefix + "/" if self.prefix else "") + prefix  # never another prefix that starts alike
        token: str | None = None
        while True:
            query = {"list-type": "2", "prefix": full}
            if token:
                query["continuation-token"] = token
            r = self._send("GET", "", query)
            if r.status_code != 200:
                raise OSError(f"{self}: LIST {prefix}: HTTP {r.status_code} {r.text[:200]}")
            import xml.etree.ElementTree as ET

            root = ET.fromstring(r.content)
            for c in root.findall(f"{S3_NS}Contents"):
                key = c.findtext(f"{S3_NS}Key") or ""
                modified = datetime.fromisoformat((c.findtext(f"{S3_NS}LastModified") or "").replace("Z", "+00:00"))
                rel = key[len(self.prefix) + 1 :] if self.prefix else key
                yield ObjectInfo(rel, int(c.findtext(f"{S3_NS}Size") or 0), modified)
            token = root.findtext(f"{S3_NS}NextContinuationToken")
            if (root.findtext(f"{S3_NS}IsTruncated") or "").lower() != "true" or not token:
                return


def canonical_query(query: dict[str, str]) -> str:
    """The query string as SigV4 signs it (sorted, RFC 3986 encoded); sent exactly so."""
    return "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(query.items()))


def sign_v4(creds: S3Credentials, method: str, url: str, path: str, query: str, body: bytes) -> dict[str, str]:
    """The headers of an AWS Signature Version 4 request to S3 (service `s3`, the payload hashed)."""
    now = datetime.now(timezone.utc)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(body).hexdigest()
    headers = {"host": urlparse(url).netloc, "x-amz-content-sha256": payload, "x-amz-date": stamp}
    if creds.session_token:
        headers["x-amz-security-token"] = creds.session_token
    signed = ";".join(sorted(headers))
    canonical = "\n".join(
        [
            method,
            path,
            query,
            "".join(f"{k}:{headers[k].strip()}\n" for k in sorted(headers)),
            signed,
            payload,
        ]
    )
    scope = f"{day}/{creds.region}/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key = f"AWS4{creds.secret_key}".encode()
    for part in (day, creds.region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={creds.access_key}/{scope}, SignedHeaders={signed}, Signature={signature}"
    )
    del headers["host"]  # httpx sends it from the URL
    return headers
