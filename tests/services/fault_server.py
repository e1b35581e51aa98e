"""An HTTP server that fails on purpose, for the connector fault matrix (tests/unit/test_connector_faults.py).

Real Prometheus and Slurm run in the connector tests; none of them can be told to answer 503 with
Retry-After, drip a body one byte at a time or page forever, so this server plays those faults on
the wire (a real socket, real HTTP/1.1, httpx on the other end). Every request is recorded (path +
query) so tests can also read what the connectors sent.

Faults: hang (accept, never answer), drip (headers, then a byte every `drip_s`), http:<code>
(+ `retry_after`), truncated (a JSON body cut mid-way, honest Content-Length of the cut body),
not_json (an HTML error page labelled JSON), wrong_shape (valid JSON, not what the API returns),
and `answer`: a callable (path, query) -> (status, JSON body) for empty results and endless pages.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


class FaultServer:
    def __init__(
        self,
        fault: str = "wrong_shape",
        answer: Callable[[str, dict], tuple[int, Any]] | None = None,
        retry_after: str | None = None,
        drip_s: float = 0.3,
    ):
        self.fault, self.answer, self.retry_after, self.drip_s = fault, answer, retry_after, drip_s
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self._closing = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                u = urlparse(self.path)
                query = parse_qs(u.query)
                outer.requests.append((u.path, query))
                outer.play(self, u.path, query)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def play(self, h: BaseHTTPRequestHandler, path: str, query: dict) -> None:
        fault = self.fault
        if fault == "hang":
            self._closing.wait(60)
            return
        if fault == "drip":
            body = b'{"status": "success", "data": {"resultType": "matrix", "result": []}}' * 50
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            for i in range(len(body)):
                if self._closing.wait(self.drip_s):
                    return
                try:
                    h.wfile.write(body[i : i + 1])
                    h.wfile.flush()
                except OSError:
                    return
            return
        if fault.startswith("http:"):
            extra = {"Retry-After": self.retry_after} if self.retry_after else {}
            return self._send(h, int(fault[5:]), b'{"error": "injected"}', extra)
        if fault == "truncated":
            return self._send(
                h, 200, b'{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {"__na'
            )
        if fault == "not_json":
            return self._send(h, 200, b"<html><body>502 Bad Gateway (proxy)</body></html>")
        if fault == "wrong_shape":
            return self._send(h, 200, b'["status", "success", {"data": 42}]')
        status, body = self.answer(path, query) if self.answer else (404, {"error": "no answer configured"})
        self._send(h, status, json.dumps(body).encode())

    @staticmethod
    def _send(h, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)

    def start(self) -> FaultServer:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
