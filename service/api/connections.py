"""Limits on connections and on the time to send request headers (issue 42, item 7).

uvicorn has neither: a connection that sends part of its headers and waits holds a file descriptor
for good, and at the process's descriptor limit the server accepts no one (1,100 such connections at
1,024 descriptors: no predict served, nothing in the log). :class:`GuardedHttp` is uvicorn's
httptools protocol (``serve`` passes it as ``http``) with two limits from the settings:

- ``CLICKBOOST_HEADER_TIMEOUT_SECONDS``: a request whose headers are not complete this long after
  its connection opened (or after its first byte, on a kept-alive connection) is closed;
- ``CLICKBOOST_MAX_CONNECTIONS`` (default: the descriptor limit less 128, kept for the store, logs
  and Redis): a connection past the limit closes the oldest one still sending its headers, or is
  closed itself when every other one has a request in progress. Accepting always succeeds, so a
  client that sends its request at once is served however many slow ones there are.

Each limit hit is logged (at most one line a second per limit, with the count since the last line).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from functools import cache

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.config import load_settings

log = logging.getLogger("clickboost.connections")

#: Descriptors kept for everything but connections when the limit derives from RLIMIT_NOFILE.
RESERVED_DESCRIPTORS = 128
# Connections that have not sent complete request headers yet, oldest first (one server per process).
_waiting: dict[GuardedHttp, None] = {}


@cache
def limits() -> tuple[int, float]:
    """(most connections, seconds to send request headers) of this process's settings."""
    settings = load_settings()
    most = settings.max_connections
    if most is None:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        most = max(soft - RESERVED_DESCRIPTORS, 1) if soft != resource.RLIM_INFINITY else 65_536
    return most, settings.header_timeout_seconds


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
_evictions = _Tally("connection limit reached: closed the oldest connections still sending headers")
_refusals = _Tally("connection limit reached with every connection busy: closed new connections")


class GuardedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header timeout and a connection limit (module docstring)."""

    _timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        most, _ = limits()
        if len(self.connections) > most:
            oldest = next((c for c in _waiting if c is not self), None)
            if oldest is None:
                _refusals.hit(self.loop)
                transport.close()
                return
            _evictions.hit(self.loop)
            oldest._headers_done()
            oldest.transport.close()
        self._await_headers()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self not in _waiting:  # a kept-alive connection's next request
            self._await_headers()

    def on_headers_complete(self) -> None:
        self._headers_done()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_done()
        super().connection_lost(exc)

    def _await_headers(self) -> None:
        _waiting[self] = None
        self._timer = self.loop.call_later(limits()[1], self._headers_late)

    def _headers_done(self) -> None:
        _waiting.pop(self, None)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _headers_late(self) -> None:
        self._timer = None
        if self in _waiting and not self.transport.is_closing():
            _timeouts.hit(self.loop)
            self.transport.close()
