"""Prometheus metrics (prometheus-client), correct with several uvicorn workers.

With ``PROMETHEUS_MULTIPROC_DIR`` set (``serve --workers N`` sets it), each worker writes its
samples to files there and ``GET /metrics`` merges them (prometheus-client's multiprocess mode);
gauges are per model and set from the shared store at scrape time ("mostrecent" across workers).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.runtime import Runtime

HTTP_SECONDS = Histogram(
    "clickboost_http_request_duration_seconds",
    "HTTP request latency",
    ["method", "route", "status"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
DECISIONS = Counter("clickboost_decisions_total", "Decisions served", ["model"])
FEEDBACK = Counter(
    "clickboost_feedback_total",
    "Feedback requests by outcome (click, no_click, reward, held, duplicate, expired, unknown)",
    ["outcome"],
)
ACTIVATIONS = Counter(
    "clickboost_activations_total",
    "Activations of deferred decisions by result (activated, already, expired, unknown, not_deferred)",
    ["result"],
)
PENDING = Gauge(
    "clickboost_pending_decisions", "Decisions awaiting feedback", ["model"], multiprocess_mode="mostrecent"
)
CTR = Gauge("clickboost_ctr", "clicks / answered decisions", ["model"], multiprocess_mode="mostrecent")
EXPIRED = Gauge(
    "clickboost_expired_decisions",
    "Decisions given the default reward",
    ["model"],
    multiprocess_mode="mostrecent",
)
VERSION = Gauge(
    "clickboost_model_version", "Event-log position applied", ["model"], multiprocess_mode="mostrecent"
)
LAG_EVENTS = Gauge(
    "clickboost_apply_lag_events",
    "Events in the log not yet applied here",
    ["model"],
    multiprocess_mode="mostrecent",
)
LAG_SECONDS = Gauge(
    "clickboost_apply_lag_seconds",
    "Age of the last applied event when it was applied",
    ["model"],
    multiprocess_mode="mostrecent",
)
FAILED = Gauge(
    "clickboost_model_failed",
    "1 while this process cannot apply the model's next event (it serves its last good state)",
    ["model"],
    multiprocess_mode="mostrecent",
)
FAILURES = Gauge(
    "clickboost_model_failures",
    "Consecutive failed attempts to apply the model's next event here",
    ["model"],
    multiprocess_mode="mostrecent",
)
STATE_BYTES = Gauge(
    "clickboost_model_state_bytes", "Bytes of learned state", ["model"], multiprocess_mode="mostrecent"
)
_GAUGES = (PENDING, CTR, EXPIRED, VERSION, LAG_EVENTS, LAG_SECONDS, FAILED, FAILURES, STATE_BYTES)


async def render(runtime: Runtime) -> tuple[bytes, str]:
    """Refresh the per-model gauges from the store and render every metric."""
    for gauge in _GAUGES:
        gauge.clear()
    for name, m in list(runtime.models.items()):
        counts = await runtime.store.counts(name)
        PENDING.labels(name).set(counts.pending)
        EXPIRED.labels(name).set(counts.expired)
        if counts.ctr is not None:
            CTR.labels(name).set(counts.ctr)
        VERSION.labels(name).set(m.position)
        LAG_EVENTS.labels(name).set(await runtime.store.log_position(name) - m.position)
        LAG_SECONDS.labels(name).set(m.last_apply_lag)
        FAILED.labels(name).set(m.failure is not None)
        FAILURES.labels(name).set(m.failures if m.failure is not None else 0)
        STATE_BYTES.labels(name).set(m.learner.nbytes())
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"})


class HTTPMetrics:
    """Pure ASGI middleware: latency histogram by method, route template and status.

    ``routes`` (the app's, read at the first request) give the templates of Starlette's own routes,
    which leave no route in the scope: the hot path's plain routes and the mounted dashboard files.
    A label is a template or ``unmatched``, never a requested path: every distinct path would add
    series that are never dropped (issue 42).
    """

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self.routes = routes
        self._plain: set[str] | None = None
        self._mounts: list[str] = []
        self._children: dict[tuple[str, str, int], Any] = {}  # labels() lookups cost ~10 us each

    def _template(self, scope: Scope) -> str:
        if self._plain is None:
            self._plain = {r.path for r in self.routes if isinstance(r, Route)}
            self._mounts = [r.path for r in self.routes if isinstance(r, Mount)]
        path = scope["path"]
        if "endpoint" not in scope:
            return "unmatched"
        if path in self._plain:
            return path
        for prefix in self._mounts:
            if path.startswith(prefix + "/"):
                return prefix + "/{path}"
        return "unmatched"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            # FastAPI sets the route (its path is the template); Starlette's own routes do not
            path = getattr(scope.get("route"), "path", None) or self._template(scope)
            method = scope["method"] if scope["method"] in _METHODS else "other"  # any token is a method
            key = (method, path, status)
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = HTTP_SECONDS.labels(method, path, str(status))
            child.observe(time.perf_counter() - start)
