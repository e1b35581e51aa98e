"""`attribution serve`: the HTTP service (triggers, reads, the dashboard, /metrics)."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from workload_attribution.cli import common
from workload_attribution.cli.common import EXIT_OK, BadInput
from workload_attribution.cli.deploy import need_prefect_server


def add(sub: Any) -> None:
    sv = common.command(
        sub,
        "serve",
        help="run the HTTP service (webhooks, /v1/attempts, /v1/diagnoses, /ui, /metrics)",
        description="Serve the HTTP API (OpenAPI at /docs and /openapi.json). Triggers need "
        "PREFECT_API_URL and the secrets named by service.token_env / "
        "service.webhook_secret_env; --dashboard-only serves the reads and /ui alone.",
    )
    sv.add_argument("--host", help="listen address (default: service.host)")
    sv.add_argument("--port", type=int, help="listen port (default: service.port)")
    sv.add_argument("--insecure-no-auth", action="store_true", help="accept requests without token/signature")
    sv.add_argument(
        "--dashboard-only",
        action="store_true",
        help="only the reads (/v1/diagnoses, /ui, /healthz, /metrics): no Prefect, no webhook secret",
    )
    sv.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate (chain) ...")
    sv.add_argument("--tls-key", metavar="PEM", help="... and this private key")
    sv.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from workload_attribution.service.app import create_app

    cfg = common.load_config(args)
    svc = cfg.service
    if bool(args.tls_cert) != bool(args.tls_key):
        raise BadInput("--tls-cert and --tls-key go together")
    for flag in ("tls_cert", "tls_key"):
        path = getattr(args, flag)
        if path and not os.path.isfile(path):
            raise BadInput(f"--{flag.replace('_', '-')} {path}: no such file")
    if not args.dashboard_only:
        need_prefect_server()
    needed = [svc.token_env] + ([] if args.dashboard_only else [svc.webhook_secret_env])
    missing = [name for name in needed if not os.environ.get(name)]
    if missing and not args.insecure_no_auth:
        raise BadInput(f"set {' and '.join(missing)} (or pass --insecure-no-auth on a trusted network)")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("workload_attribution.service")
    if args.insecure_no_auth:
        log.warning("--insecure-no-auth: requests are accepted without a token or a signature")
    host, port = args.host or svc.host, args.port or svc.port
    scheme = "https" if args.tls_cert else "http"
    log.info(
        "listening on %s://%s:%d (%s)",
        scheme,
        host,
        port,
        "dashboard and reads only" if args.dashboard_only else f"triggers start {svc.deployment}",
    )
    uvicorn.run(
        create_app(cfg, dashboard_only=args.dashboard_only, insecure=args.insecure_no_auth),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        ssl_certfile=args.tls_cert,
        ssl_keyfile=args.tls_key,
        timeout_keep_alive=5,
        timeout_graceful_shutdown=10,
    )
    return EXIT_OK
