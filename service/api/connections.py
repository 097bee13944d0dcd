"""Limits on connections and on the time to send a request (issue 42 item 7, issue 51 item 4).

uvicorn has none: a connection that sends part of its headers, or all its headers and then its body
a byte at a time, holds a file descriptor for as long as it likes, and at the process's descriptor
limit the server accepts no one (1,100 such connections at 1,024 descriptors: no predict served,
nothing in the log). :class:`GuardedHttp` is uvicorn's httptools protocol (``serve`` passes it as
``http``) with three limits from the settings:

- ``CLICKBOOST_HEADER_TIMEOUT_SECONDS``: a request whose headers are not complete this long after
  its connection opened (or after its first byte, on a kept-alive connection) is closed;
- ``CLICKBOOST_BODY_TIMEOUT_SECONDS``: a request whose body is not complete this long after its
  headers were is answered 408 and closed (closed only, if its answer had begun). A deadline for
  the whole body, not for each read: a byte every second would renew a per-read one for ever. It is
  extended by as much again while the body has come at :data:`MIN_BODY_RATE` on average: a state
  import may be as large as the model budget (hundreds of MB, with the admin key), and every other
  body at most ``CLICKBOOST_MAX_BODY_BYTES`` (1 MB: 16 s at that rate);
- ``CLICKBOOST_MAX_CONNECTIONS`` (default: the descriptor limit less 128, kept for the store, logs
  and Redis): a connection past the limit closes the oldest one still sending its request (headers
  or body), or is closed itself when every other one has a complete request in progress. Accepting
  always succeeds, so a client that sends its request at once is served however many slow ones
  there are.

Each limit hit is logged (at most one line a second per limit, with the count since the last line).

It also sends each answer in one write (:class:`_JoinedWrites`, issue 52): uvicorn writes the
status line and headers, then the body, two ``send`` calls, and on loopback each one costs the
server the delivery of a segment to the reader. Under ``bench lean``'s load these writes were the
largest own share of the server's profile.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import time
from functools import cache
from typing import NamedTuple

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from service.config import load_settings

log = logging.getLogger("clickboost.connections")

#: Descriptors kept for everything but connections when the limit derives from RLIMIT_NOFILE.
RESERVED_DESCRIPTORS = 128
#: Bytes a second, on average since its headers, that keep a request's body from its timeout.
MIN_BODY_RATE = 64 * 1024
# Connections that are still sending a request (headers or body), oldest first (one server per process).
_waiting: dict[GuardedHttp, None] = {}


class Limits(NamedTuple):
    """This process's connection limits (module docstring)."""

    most: int
    header_seconds: float
    body_seconds: float


@cache
def limits() -> Limits:
    """The limits of this process's settings."""
    settings = load_settings()
    most = settings.max_connections
    if most is None:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        most = max(soft - RESERVED_DESCRIPTORS, 1) if soft != resource.RLIM_INFINITY else 65_536
    return Limits(most, settings.header_timeout_seconds, settings.body_timeout_seconds)


class _Tally:
    """Counts one kind of limit hit and logs it at most once a second: the first hit at once, the
    ones that follow within the second in one line at its end."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.count = 0
        self.logged_at = -float("inf")
        self.flush_due = False

    def hit(self, loop: asyncio.AbstractEventLoop) -> None:
        self.count += 1
        wait = self.logged_at + 1.0 - time.monotonic()
        if wait <= 0:
            self.flush()
        elif not self.flush_due:
            self.flush_due = True
            loop.call_later(wait, self.flush)

    def flush(self) -> None:
        self.flush_due = False
        if self.count:
            log.warning("%s: %d", self.what, self.count)
            self.count, self.logged_at = 0, time.monotonic()


_timeouts = _Tally("closed connections that did not send their request headers in time")
_body_timeouts = _Tally("closed connections that did not send their request body in time (408)")
_evictions = _Tally("connection limit reached: closed the oldest connections still sending a request")
_refusals = _Tally("connection limit reached with every connection busy: closed new connections")


class _JoinedWrites:
    """The transport as a request's cycle sees it: the head of the answer (status line and headers,
    written when the answer starts) is held until the first write of its body and goes out with it
    in one ``writelines`` (one ``writev``). Everything else is the transport's: a ``100 Continue``
    (written before the answer starts) is not held, and the later writes of a streamed body go out
    as they come.
    """

    __slots__ = ("_cycle", "_head", "_held", "_transport")

    def __init__(self, transport: asyncio.Transport, cycle: RequestResponseCycle) -> None:
        self._transport = transport
        self._cycle = cycle
        self._head: bytes | None = None
        self._held = False

    def write(self, data: bytes) -> None:
        if not self._held and self._cycle.response_started:  # the head: hold it
            self._held = True
            self._head = data
        elif self._head is not None:
            head, self._head = self._head, None
            self._transport.writelines((head, data))
        else:
            self._transport.write(data)

    def close(self) -> None:
        if self._head is not None:  # an answer closed right after its head (its body never came)
            self._transport.write(self._head)
            self._head = None
        self._transport.close()

    def __getattr__(self, name: str) -> object:  # is_closing, get_extra_info, ...
        return getattr(self._transport, name)


class GuardedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with header and body timeouts and a connection limit (module
    docstring)."""

    _timer: asyncio.TimerHandle | None = None
    _body_since = 0.0  # loop time when the headers were complete
    _body_bytes = 0  # received since

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > limits().most:
            oldest = next((c for c in _waiting if c is not self), None)
            if oldest is None:
                _refusals.hit(self.loop)
                transport.close()
                return
            _evictions.hit(self.loop)
            oldest._request_done()
            oldest.transport.close()
        self._await_request()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self not in _waiting:  # a kept-alive connection's next request
            self._await_request()

    def on_headers_complete(self) -> None:
        self._cancel_timer()
        if self.parser.should_upgrade() and self._should_upgrade():
            self._request_done()  # another protocol takes the connection over
        elif self in _waiting:  # the body has its own deadline (complete at once when there is none)
            self._body_since, self._body_bytes = self.loop.time(), 0
            self._timer = self.loop.call_later(limits().body_seconds, self._body_late)
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport and not cycle.response_started:
            cycle.transport = _JoinedWrites(self.transport, cycle)  # type: ignore[assignment]

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._request_done()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._request_done()
        super().connection_lost(exc)

    def _await_request(self) -> None:
        _waiting[self] = None
        self._cancel_timer()
        self._timer = self.loop.call_later(limits().header_seconds, self._headers_late)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _request_done(self) -> None:
        _waiting.pop(self, None)
        self._cancel_timer()

    def _headers_late(self) -> None:
        self._timer = None
        if self in _waiting and not self.transport.is_closing():
            _timeouts.hit(self.loop)
            self.transport.close()

    def _body_late(self) -> None:
        self._timer = None
        if self not in _waiting or self.transport.is_closing():
            return
        if self._body_bytes >= MIN_BODY_RATE * (self.loop.time() - self._body_since):
            self._timer = self.loop.call_later(limits().body_seconds, self._body_late)
            return
        _waiting.pop(self, None)
        _body_timeouts.hit(self.loop)
        cycle = self.cycle
        if cycle is not None and not cycle.response_started and not self.pipeline:
            # The application waits for the rest of the body: it reads a disconnect, and whatever
            # it answers is dropped (uvicorn writes nothing for a disconnected cycle).
            cycle.disconnected = True
            detail = f"request body not received within {limits().body_seconds:g} s"
            body = json.dumps({"detail": detail}).encode()
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
            )
            cycle.message_event.set()
        self.transport.close()
