"""A lake whose data path is S3-compatible object storage (`data_path=s3://bucket/prefix/`): how a
connection reaches it. DuckDB's httpfs extension (duckdb-extension-httpfs, loaded from its file
like the others) reads and writes the bucket with a secret made from the standard AWS variables,
never from the warehouse URL, and never printed:

    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN (optional)
    AWS_REGION (or AWS_DEFAULT_REGION; default us-east-1)
    AWS_ENDPOINT_URL_S3 (or AWS_ENDPOINT_URL): an S3-compatible server (SeaweedFS, MinIO, Ceph),
        http:// or https://; addressed by path (http://host/bucket/key), as such servers expect.
        Unset: AWS S3 itself, addressed by virtual host.

The secret is temporary (the connection's own) and scoped to the lake's data path.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlparse

from workload_attribution.contracts.errors import BadInput

SCHEMES = ("s3://",)


def is_object_store(data_path: str) -> bool:
    return data_path.startswith(SCHEMES)


def secret_sql(data_path: str, env: Mapping[str, str]) -> str:
    """CREATE SECRET for the lake's bucket from the AWS variables in `env`; BadInput naming the
    variable (never its value) when one is missing or malformed."""
    missing = [v for v in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if not env.get(v)]
    if missing:
        raise BadInput(f"warehouse data path {data_path}: set {' and '.join(missing)} (the bucket's credentials)")
    options = {
        "KEY_ID": _quoted(env["AWS_ACCESS_KEY_ID"]),
        "SECRET": _quoted(env["AWS_SECRET_ACCESS_KEY"]),
        "REGION": _quoted(env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"),
        "SCOPE": _quoted(data_path),
    }
    if env.get("AWS_SESSION_TOKEN"):
        options["SESSION_TOKEN"] = _quoted(env["AWS_SESSION_TOKEN"])
    endpoint_var = next((v for v in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL") if env.get(v)), None)
    if endpoint_var:
        endpoint = urlparse(env[endpoint_var])
        if endpoint.scheme not in ("http", "https") or not endpoint.netloc or endpoint.path.strip("/"):
            raise BadInput(f"{endpoint_var}: expected http(s)://host[:port] of an S3-compatible server")
        options["ENDPOINT"] = _quoted(endpoint.netloc)
        options["URL_STYLE"] = "'path'"
        options["USE_SSL"] = "true" if endpoint.scheme == "https" else "false"
    listed = ", ".join(f"{k} {v}" for k, v in options.items())
    return f"CREATE TEMPORARY SECRET warehouse_bucket (TYPE s3, {listed})"


def _quoted(value: str) -> str:
    """A SQL string literal (CREATE SECRET takes no parameters)."""
    return "'" + value.replace("'", "''") + "'"
