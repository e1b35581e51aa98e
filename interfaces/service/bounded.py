"""Connection bounds `attribution serve` puts on uvicorn's HTTP/1.1 protocol (h11), which has none
of its own before a request head is complete:

- a connection must send its whole request head within `header_timeout_s` of opening (or of
  its first byte after a kept-alive answer); else it is closed (408 when part of a head came);
- a request body that stops arriving for `body_timeout_s` (+1 s, so a route reading the body
  answers its own 408 first) is closed; once the answer is sent, what is left of a body gets
  `body_timeout_s` in all;
- at most `max_connections` connections are held: one more makes room by closing the connection
  idle longest (waiting for a request head, or kept alive between requests); when every
  connection has a request in progress, the new one gets 503 and is closed. An idle socket flood
  therefore never stops /healthz (or anything else) from being answered.

Closes are counted by reason (`STATS`, exported on /metrics as
attribution_connections_closed_total{reason}). A TLS connection is counted from the end of its
handshake; one that never completes the handshake is closed by asyncio after 60 s.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("workload_attribution.service")
FD_RESERVE = 256  # descriptors kept for the warehouse, the outbox, temporary files, Prefect's client


@dataclass
class Stats:
    open: int = 0
    opened: int = 0
    closed: Counter[str] = field(default_factory=Counter)


STATS = Stats()


def _raw_answer(status: int, reason: str, text: str) -> bytes:
    body = text.encode() + b"\n"
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body


class BoundedH11(H11Protocol):
    """uvicorn's h11 protocol with a head deadline, a body stall deadline and a connection cap
    (the class attributes, set by `protocol()`)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 1024
    # the server's connections waiting for a request head, the one idle longest first (a dict is
    # ordered): making room is O(1) however many there are
    idle: dict[BoundedH11, None] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_fixed = False  # the answer is sent: the rest of the body has a fixed deadline
        self._refused = False  # answered 503 before any request: what it sends is dropped

    # ---------------------------------------------------------------------------- the connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        STATS.open += 1
        STATS.opened += 1
        self._arm_head()
        if len(self.connections) > self.max_connections:
            self._make_room()
        if not self.transport.is_closing() and not self._refused:
            self.idle[self] = None

    def connection_lost(self, exc: Exception | None) -> None:
        STATS.open -= 1
        self.idle.pop(self, None)
        self._cancel_head()
        self._cancel_body()
        super().connection_lost(exc)

    def waiting_for_head(self) -> bool:
        """No request in progress: a connection that is opening, or kept alive between requests."""
        return self.conn.their_state is h11.IDLE and (self.cycle is None or self.cycle.response_complete)

    def _make_room(self) -> None:
        oldest = next(iter(self.idle), None)
        if oldest is not None:
            STATS.closed["shed"] += 1
            oldest._close()
            return
        STATS.closed["refused"] += 1
        log.warning("%d connections, each with a request in progress: refusing a new one", len(self.connections))
        self._refused = True
        self.transport.write(_raw_answer(503, "Service Unavailable", "too many connections, retry"))
        if self.transport.can_write_eof():  # the answer, then our end shut: the client reads it before it closes
            self.transport.write_eof()
            self._cancel_head()
            self.loop.call_later(1.0, self._close)
        else:
            self._close()

    def _close(self) -> None:
        self.idle.pop(self, None)
        self._cancel_head()
        self._cancel_body()
        if not self.transport.is_closing():
            self.transport.close()

    # --------------------------------------------------------------------------------- the head

    def _arm_head(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_late)

    def _cancel_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or not self.waiting_for_head():
            return
        STATS.closed["header_timeout"] += 1
        if self.conn.trailing_data[0]:  # part of a head came: say why
            self.transport.write(
                _raw_answer(408, "Request Timeout", f"request head not received within {self.header_timeout_s:g} s")
            )
        self._close()

    # --------------------------------------------------------------------------------- the body

    def _arm_body(self, delay: float) -> None:
        self._cancel_body()
        self._body_timer = self.loop.call_later(delay, self._body_late)

    def _cancel_body(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_late(self) -> None:
        self._body_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
            return
        if self.flow.read_paused and not self._body_fixed:  # the application is not reading yet: not the sender's fault
            self._arm_body(self.body_timeout_s + 1)
            return
        STATS.closed["body_timeout"] += 1
        self._close()

    # ------------------------------------------------------------------------------- the events

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        self._track()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.SEND_BODY and not self._body_fixed:  # answered before the body came
            self._body_fixed = True
            self._arm_body(self.body_timeout_s)
        self._track()

    def _track(self) -> None:
        if self.transport.is_closing():
            return
        state = self.conn.their_state
        if self.waiting_for_head():
            if self not in self.idle:  # idle again after an answer: the newest idle one
                self.idle[self] = None
            self._body_fixed = False
            self._cancel_body()
            # kept alive with nothing sent: uvicorn's keep-alive timeout; a head begun: ours
            if self.conn.trailing_data[0] or self.cycle is None:
                self._arm_head()
            return
        self.idle.pop(self, None)
        self._cancel_head()
        if state is h11.SEND_BODY:
            if not self._body_fixed:
                self._arm_body(self.body_timeout_s + 1)
        else:
            self._body_fixed = False
            self._cancel_body()


def protocol(header_timeout_s: float, body_timeout_s: float, max_connections: int) -> type[BoundedH11]:
    """The protocol class for uvicorn's `http=`, with these bounds."""
    return type(
        "BoundedH11",
        (BoundedH11,),
        {
            "header_timeout_s": header_timeout_s,
            "body_timeout_s": body_timeout_s,
            "max_connections": max_connections,
            "idle": {},
        },
    )


def raise_fd_limit(max_connections: int) -> int:
    """Raise this process's open-file soft limit so `max_connections` sockets fit beside its own
    files; answer the number of connections that fit (fewer when the hard limit is lower)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max_connections + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < want:
        return max(16, soft - FD_RESERVE)
    return max_connections
