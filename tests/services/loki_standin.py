"""A stand-in for Loki's HTTP API: no Loki package runs on these machines (see the test docstrings).

Implements what the connector uses, as grafana/loki's HTTP API reference documents it:
GET /ready; POST /loki/api/v1/push (JSON streams, nanosecond timestamps as strings);
GET /loki/api/v1/series (match[] selector, start/end) answering {"status":"success","data":[labels...]};
GET /loki/api/v1/query_range with a LogQL stream selector (=, !=, =~, !~; regexes fully
anchored; at least one matcher must not match the empty string, else 400 with Loki's message)
and line filters (|=, !=, |~, !~; double-quoted or backquoted), start inclusive / end exclusive
(ns integers, float seconds or RFC 3339), limit (default 100) applied across streams, direction
(backward default); answers {"status":"success","data":{"resultType":"streams","result":[...]}}.
Faults for tests: `faults` is a list of (status, headers, body) that query_range answers before normal service.
"""

from __future__ import annotations

import json
import re
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')
FILTER = re.compile(r'\s*(\|=|!=|\|~|!~)\s*(?:"((?:[^"\\]|\\.)*)"|`([^`]*)`)')


class ParseError(ValueError):
    pass


def _unquote(s: str) -> str:
    return json.loads(f'"{s}"')


def parse_query(q: str):
    q = q.strip()
    if not q.startswith("{"):
        raise ParseError("parse error at line 1, col 1: syntax error: unexpected input, expecting {")
    matchers, pos = [], 1
    while True:  # matchers up to the closing brace; quoted values may contain braces
        while pos < len(q) and q[pos] in " \t,":
            pos += 1
        if pos >= len(q):
            raise ParseError("parse error : unexpected end of query, expecting }")
        if q[pos] == "}":
            break
        m = MATCHER.match(q, pos)
        if not m:
            raise ParseError(f"parse error at line 1, col {pos + 1}: syntax error: unexpected input")
        matchers.append((m.group(1), m.group(2), _unquote(m.group(3))))
        pos = m.end()
    rest = q[pos + 1 :]

    def non_empty(op: str, v: str) -> bool:
        return (op == "=" and v != "") or (op == "=~" and re.fullmatch(v, "") is None)

    if not any(non_empty(op, v) for _, op, v in matchers):
        raise ParseError(
            "parse error : queries require at least one regexp or equality matcher that does not have an "
            'empty-compatible value. For instance, app=~".*" does not meet this requirement, but app=~".+" will'
        )
    filters, pos = [], 0
    while pos < len(rest.strip()):
        r = rest.strip()
        m = FILTER.match(r, pos)
        if not m:
            raise ParseError(f"parse error : unsupported pipeline stage near {r[pos : pos + 20]!r}")
        filters.append((m.group(1), _unquote(m.group(2)) if m.group(2) is not None else m.group(3)))
        pos = m.end()
    return matchers, filters


def _labels_match(labels: dict, matchers) -> bool:
    for k, op, v in matchers:
        got = labels.get(k, "")
        ok = {
            "=": got == v,
            "!=": got != v,
            "=~": re.fullmatch(v, got) is not None,
            "!~": re.fullmatch(v, got) is None,
        }[op]
        if not ok:
            return False
    return True


def _line_match(line: str, filters) -> bool:
    for op, v in filters:
        ok = {
            "|=": v in line,
            "!=": v not in line,
            "|~": re.search(v, line) is not None,
            "!~": re.search(v, line) is None,
        }[op]
        if not ok:
            return False
    return True


def _ts(value: str | None, default: int) -> int:
    if value is None:
        return default
    if re.fullmatch(r"\d+", value):
        return int(value)
    if re.fullmatch(r"\d+\.\d*", value):
        return int(float(value) * 1e9)
    return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1e9)


class LokiStandIn:
    def __init__(self):
        self.streams: dict[tuple, list[tuple[int, str]]] = {}
        self.faults: list[tuple[int, dict, str]] = []
        self.fault_on_call: dict[int, tuple[int, dict, str]] = {}  # n-th query_range call (1-based) -> fault
        self.query_calls = 0
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, body="", ctype="application/json", headers=None):
                data = body.encode() if isinstance(body, str) else body
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                u = urlparse(self.path)
                params = {k: v[0] for k, v in parse_qs(u.query).items()}
                with outer.lock:
                    outer.requests.append({"path": u.path, **params})
                    fault = None
                    if u.path == "/loki/api/v1/query_range":
                        outer.query_calls += 1
                        fault = (
                            outer.faults.pop(0) if outer.faults else outer.fault_on_call.pop(outer.query_calls, None)
                        )
                if fault:
                    return self._send(fault[0], fault[2], "text/plain", fault[1])
                if u.path == "/ready":
                    return self._send(200, "ready", "text/plain")
                if u.path == "/loki/api/v1/series":
                    try:
                        matchers, _ = parse_query(parse_qs(u.query).get("match[]", [""])[0])
                    except ParseError as exc:
                        return self._send(400, str(exc), "text/plain")
                    end = _ts(params.get("end"), 2**62)
                    start = _ts(params.get("start"), end - 3600 * 10**9)
                    with outer.lock:
                        found = [
                            dict(k)
                            for k, vals in outer.streams.items()
                            if _labels_match(dict(k), matchers) and any(start <= ts < end for ts, _ in vals)
                        ]
                    return self._send(200, json.dumps({"status": "success", "data": found}))
                if u.path != "/loki/api/v1/query_range":
                    return self._send(404, "404 page not found", "text/plain")
                try:
                    matchers, filters = parse_query(params.get("query", ""))
                    limit = int(params.get("limit", 100))
                except (ParseError, ValueError) as exc:
                    return self._send(400, str(exc), "text/plain")
                end = _ts(params.get("end"), 2**62)
                start = _ts(params.get("start"), end - 3600 * 10**9)
                backward = params.get("direction", "backward") == "backward"
                hits = []
                with outer.lock:
                    for key, values in outer.streams.items():
                        labels = dict(key)
                        if _labels_match(labels, matchers):
                            hits += [
                                (ts, key, line)
                                for ts, line in values
                                if start <= ts < end and _line_match(line, filters)
                            ]
                hits.sort(key=lambda h: h[0], reverse=backward)
                hits = hits[:limit]
                grouped: dict[tuple, list] = {}
                for ts, key, line in hits:
                    grouped.setdefault(key, []).append([str(ts), line])
                result = [{"stream": dict(k), "values": v} for k, v in grouped.items()]
                self._send(
                    200,
                    json.dumps(
                        {
                            "status": "success",
                            "data": {
                                "resultType": "streams",
                                "result": result,
                                "stats": {"summary": {"totalEntriesReturned": len(hits)}},
                            },
                        }
                    ),
                )

            def do_POST(self):
                if urlparse(self.path).path != "/loki/api/v1/push":
                    return self._send(404, "404 page not found", "text/plain")
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with outer.lock:
                    for s in body.get("streams", []):
                        key = tuple(sorted(s["stream"].items()))
                        outer.streams.setdefault(key, []).extend((int(v[0]), v[1]) for v in s["values"])
                self._send(204)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> LokiStandIn:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
