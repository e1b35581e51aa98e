"""`attribution serve`: the HTTP service (triggers, reads, the dashboard, /metrics)."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable
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
        "PREFECT_API_URL, API tokens (service.tokens_file, the variable named by service.tokens_env, or the "
        "single admin token of service.token_env; `attribution token create` makes one) and the webhook secret "
        "named by service.webhook_secret_env; --dashboard-only serves the reads and /ui alone. Logs go to "
        "stderr: where it listens, one access line per request, refusals and warnings. A request "
        "head must arrive within service.header_timeout_s, a body must not stall for "
        "service.body_timeout_s.",
    )
    sv.add_argument("--host", help="listen address (default: service.host)")
    sv.add_argument("--port", type=int, help="listen port (default: service.port)")
    sv.add_argument("--insecure-no-auth", action="store_true", help="accept requests without token/signature")
    sv.add_argument(
        "--dashboard-only",
        action="store_true",
        help="only the reads (/v1/diagnoses, /ui, /healthz, /metrics) and POST /v1/diagnose: no Prefect, "
        "no webhook secret; the trigger routes answer 404 saying so",
    )
    sv.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate (chain) ...")
    sv.add_argument("--tls-key", metavar="PEM", help="... and this private key")
    sv.add_argument(
        "--max-connections",
        type=int,
        default=None,
        metavar="N",
        help="connections held at most (default: service.max_connections, 1024); one more closes the one "
        "idle longest, or is answered 503 when every connection has a request in progress",
    )
    sv.add_argument("--no-access-log", action="store_true", help="no line per request on stderr")
    sv.set_defaults(func=run)


def _connections_wanted(args: argparse.Namespace, svc: Any) -> int:
    """The flags checked together: TLS files, the connection bound, the secrets the mode needs."""
    if bool(args.tls_cert) != bool(args.tls_key):
        raise BadInput("--tls-cert and --tls-key go together")
    for flag in ("tls_cert", "tls_key"):
        path = getattr(args, flag)
        if path and not os.path.isfile(path):
            raise BadInput(f"--{flag.replace('_', '-')} {path}: no such file")
    wanted = svc.max_connections if args.max_connections is None else args.max_connections
    if not 1 <= wanted <= 1_000_000:
        raise BadInput("--max-connections: 1 to 1000000")
    if not args.dashboard_only:
        need_prefect_server()
    from workload_attribution.service.credentials import Credentials

    tokens = Credentials.from_environment(svc.token_env, svc.tokens_env, svc.tokens_file)  # a broken one: exit 2
    missing = [] if tokens.configured else [f"{svc.token_env} (or {svc.tokens_env}, or service.tokens_file)"]
    if not args.dashboard_only and not os.environ.get(svc.webhook_secret_env):
        missing.append(svc.webhook_secret_env)
    if missing and not args.insecure_no_auth:
        raise BadInput(f"set {' and '.join(missing)} (or pass --insecure-no-auth on a trusted network)")
    return int(wanted)


def _logging(args: argparse.Namespace) -> logging.Logger:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("workload_attribution.service")
    if args.no_access_log:
        logging.getLogger("workload_attribution.access").setLevel(logging.WARNING)
    if args.insecure_no_auth:
        log.warning("--insecure-no-auth: requests are accepted without a token or a signature")
    return log


def make_server(config: Any, app: Any, announce: Callable[[list[tuple]], None] | None = None) -> Any:
    """uvicorn's server for the app: it tells the app when it begins to stop (a trigger still waiting
    for Prefect is answered 'queued' then, not cut by uvicorn's graceful-shutdown deadline) and
    hands `announce` the addresses it really bound."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if announce is not None:
                announce([s.getsockname() for srv in getattr(self, "servers", []) for s in srv.sockets or []])

        async def shutdown(self, sockets: Any = None) -> None:
            app.state.svc.stop()
            await super().shutdown(sockets)

    return Server(config)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from workload_attribution.service import bounded
    from workload_attribution.service.app import create_app

    cfg = common.load_config(args)
    svc = cfg.service
    wanted = _connections_wanted(args, svc)
    log = _logging(args)
    max_connections = bounded.raise_fd_limit(wanted)
    if max_connections < wanted:
        log.warning(
            "the open-file limit (ulimit -n) holds %d connections, not the %d asked for",
            max_connections,
            wanted,
        )
    app = create_app(cfg, dashboard_only=args.dashboard_only, insecure=args.insecure_no_auth)
    config = uvicorn.Config(
        app,
        host=args.host or svc.host,
        port=args.port or svc.port,
        http=bounded.protocol(svc.header_timeout_s, svc.body_timeout_s, max_connections),
        ws="none",
        log_level="warning",
        access_log=False,  # ours: workload_attribution.access, one line per request with its route and time
        ssl_certfile=args.tls_cert,
        ssl_keyfile=args.tls_key,
        timeout_keep_alive=5,
        timeout_graceful_shutdown=10,
    )
    scheme = "https" if args.tls_cert else "http"
    what = "dashboard and reads only" if args.dashboard_only else f"triggers start {svc.deployment}"

    def announce(bound: list[tuple]) -> None:
        where = ", ".join(f"{scheme}://{h if ':' not in h else f'[{h}]'}:{p}" for h, p, *_ in bound)
        log.info(
            "listening on %s (%s; max %d connections, request head within %g s, body stalls %g s)",
            where or f"{scheme}://{config.host}:{config.port}",
            what,
            max_connections,
            svc.header_timeout_s,
            svc.body_timeout_s,
        )

    make_server(config, app, announce).run()
    return EXIT_OK
