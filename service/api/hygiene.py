"""Request hygiene: request ids in every log line, JSON logs, 415 for non-JSON bodies, a rate limit.

One pure-ASGI middleware (:class:`RequestHygiene`, cheaper than Starlette's ``BaseHTTPMiddleware``
on the hot path) does, per HTTP request:

* **request id**: ``X-Request-ID`` taken from the request when it is a sane token (1-128 of
  ``[A-Za-z0-9._:-]``), else 128 new random bits in 32 hex digits (the form of a uuid4's hex,
  from :func:`random.getrandbits`: an id to find log lines by needs no system entropy, which
  ``uuid4`` reads with a system call per request); echoed in the response and held in a context variable
  that :class:`RequestIdFilter` adds to every log record of the request (uvicorn's access line too:
  it is written from inside the request's task);
* **415** for a body that is not JSON on the routes that take JSON (``POST /predict``,
  ``POST /feedback``, ``PUT /models/{name}``): the media type must be ``application/json`` or
  ``*/*+json``; before this, a ``text/plain`` body or one without a content type was parsed as JSON;
* **429** with ``Retry-After`` past ``CLICKBOOST_RATE_LIMIT`` requests per second per API key
  (per client address without a key), a token bucket per replica with one second of burst; the
  health, metrics and documentation routes are not limited.

:func:`log_config` is uvicorn's logging configuration for ``--log-format text|json``.
"""

from __future__ import annotations

import contextvars
import json
import logging
import math
import re
import time
from hashlib import blake2b
from random import getrandbits
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
_SANE_ID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")
_JSON_BODY_ROUTES = re.compile(r"^(POST /predict|POST /feedback|PUT /models/[^/]+)/?$")
_UNLIMITED = ("/healthz", "/readyz", "/metrics", "/docs", "/redoc", "/openapi.json", "/static-offline-docs")
#: Most distinct keys the rate limiter tracks before it forgets idle ones (bounded memory).
MAX_BUCKETS = 100_000


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


class RequestHygiene:
    """The middleware of the module docstring.

    Parameters
    ----------
    app : ASGI app
    rate_limit : float or None
        Requests per second per key; None: no limit.
    """

    def __init__(self, app: ASGIApp, rate_limit: float | None = None) -> None:
        self.app = app
        self.rate = rate_limit
        self.burst = max(1.0, rate_limit or 0.0)
        self.buckets: dict[bytes, tuple[float, float]] = {}  # key -> (tokens, monotonic time)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])  # lower-case names; a repeated header keeps its last value
        given = headers.get(b"x-request-id", b"")
        rid = given.decode() if _SANE_ID.fullmatch(given) else f"{getrandbits(128):032x}"
        token = REQUEST_ID.set(rid)
        rid_header = (b"x-request-id", rid.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), rid_header]
            await send(message)

        try:
            refusal = self._refusal(scope, headers)
            if refusal is not None:
                await refusal(scope, receive, send_with_id)
                return
            await self.app(scope, receive, send_with_id)
        finally:
            REQUEST_ID.reset(token)

    def _refusal(self, scope: Scope, headers: dict[bytes, bytes]) -> JSONResponse | None:
        """The 415 or 429 answer for this request, if it gets one."""
        path = scope["path"]
        if _JSON_BODY_ROUTES.match(f"{scope['method']} {path}"):
            has_body = headers.get(b"content-length", b"0") != b"0" or b"transfer-encoding" in headers
            if has_body and not _is_json(headers.get(b"content-type", b"")):
                got = headers.get(b"content-type", b"").decode("latin-1") or "none"
                return JSONResponse(
                    {"detail": f"the body must be JSON: send Content-Type: application/json (got {got})"},
                    status_code=415,
                )
        if self.rate is None or path.startswith(_UNLIMITED):
            return None
        # Personalizer's clients send their key as Ocp-Apim-Subscription-Key (service.api.personalizer)
        key = headers.get(b"x-api-key") or headers.get(b"ocp-apim-subscription-key")
        if key is not None:
            key = b"k" + blake2b(key, digest_size=16).digest()  # no key kept in memory as is
        else:
            client = scope.get("client")
            key = b"a" + (client[0].encode() if client else b"")
        wait = self._take(key)
        if wait <= 0.0:
            return None
        return JSONResponse(
            {"detail": f"rate limit of {self.rate:g} requests/s for this key (CLICKBOOST_RATE_LIMIT)"},
            status_code=429,
            headers={"Retry-After": str(max(1, math.ceil(wait)))},
        )

    def _take(self, key: bytes) -> float:
        """Take a token of ``key``'s bucket: 0 if there was one, else the seconds until there is."""
        assert self.rate is not None
        now = time.monotonic()
        tokens, then = self.buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        if tokens >= 1.0:
            if len(self.buckets) >= MAX_BUCKETS and key not in self.buckets:
                self.buckets.clear()  # forgetting full buckets only ever lets a request through
            self.buckets[key] = (tokens - 1.0, now)
            return 0.0
        self.buckets[key] = (tokens, now)
        return (1.0 - tokens) / self.rate


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` (``-`` outside a request) to every record it sees."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        return True


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, request_id, message, and the
    exception text when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "request_id": getattr(record, "request_id", REQUEST_ID.get()),
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


JSONFormatter.converter = time.gmtime  # type: ignore[assignment]


def log_config(log_format: str, level: str = "info") -> dict[str, Any]:
    """uvicorn's ``log_config``: every logger (uvicorn's, clickboost's) through one handler on
    stderr that adds the request id; ``json`` or ``text`` lines."""
    text = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
    formatter = {"()": JSONFormatter} if log_format == "json" else {"format": text}
    handler = {
        "class": "logging.StreamHandler",
        "formatter": "main",
        "filters": ["request_id"],
        "stream": "ext://sys.stderr",
    }
    loggers = {
        name: {"handlers": ["main"], "level": level.upper(), "propagate": False}
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "clickboost")
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": RequestIdFilter}},
        "formatters": {"main": formatter},
        "handlers": {"main": handler},
        "loggers": loggers,
        "root": {"handlers": ["main"], "level": "WARNING"},
    }
