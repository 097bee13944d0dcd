"""Every failure answers ``{"detail": "<one line naming the problem>"}`` with the right 4xx.

Malformed JSON and an empty body -> 400; a body of the wrong shape or type, bad features or a bad
model configuration -> 422; unknown model or decision -> 404 (naming the models there to the admin
key only, or when no key is configured: admin information); duplicate -> 409; expired -> 410; a
model this replica's group does not hold -> 421 (its holders' addresses in the body and the
``X-Model-Replicas`` header); body over the size limit -> 413 (:class:`BodyLimit`); shared store
unreachable -> 503 with ``Retry-After`` (nothing was recorded).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.auth import HEADER, _matches
from service.config import Settings
from service.features import FeatureError
from service.learners.base import ParamError
from service.placement import MisdirectedError, PlacementError
from service.registry import UnknownNameError
from service.runtime import ModelUnavailableError, NoSuchModelError
from service.serial import StateFormatError
from service.store import DecisionExistsError, ModelExistsError, StoreUnavailableError, UnknownModelError

RETRY_AFTER_SECONDS = 1

log = logging.getLogger("clickboost.api")


def _loc(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) or "body"


def _validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    for err in errors:
        if err["type"] == "missing" and tuple(err["loc"]) == ("body",):
            expected = "an exported state" if request.url.path.endswith("/state") else "a JSON object"
            return JSONResponse({"detail": f"empty body: expected {expected}"}, status_code=400)
        if err["type"] == "json_invalid":
            reason = err.get("ctx", {}).get("error", "invalid JSON")
            where = f" at character {err['loc'][-1]}" if isinstance(err["loc"][-1], int) else ""
            return JSONResponse({"detail": f"malformed JSON: {reason}{where}"}, status_code=400)
    problems = "; ".join(f"{_loc(tuple(e['loc']))}: {e['msg']}" for e in errors)
    body = {
        "detail": problems,
        "errors": [{"loc": e["loc"], "msg": e["msg"], "type": e["type"]} for e in errors],
    }
    return JSONResponse(jsonable_encoder(body), status_code=422)


def _status(code: int) -> Callable[[Request, Exception], JSONResponse]:
    def handler(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=code)

    return handler


def _unavailable(request: Request, exc: Exception) -> JSONResponse:
    """The shared store is down: nothing was recorded; retry (503 with ``Retry-After``)."""
    # The cause (addresses, driver errors) goes to the log, not to clients.
    log.warning("store unavailable on %s %s: %s", request.method, request.url.path, exc)
    detail = "shared store unavailable, nothing recorded; retry later"
    return JSONResponse(
        {"detail": detail}, status_code=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)}
    )


def _documented_methods(app: FastAPI) -> list[tuple[re.Pattern[str], frozenset[str]]]:
    """(path pattern, methods) of every documented path, from the OpenAPI document (cached)."""
    table = getattr(app.state, "documented_methods", None)
    if table is None:
        table = [
            (
                re.compile("^" + re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(path)) + "$"),
                frozenset(m.upper() for m in ops),
            )
            for path, ops in app.openapi()["paths"].items()
        ]
        app.state.documented_methods = table
    return table


async def _http_error(request: Request, exc: Exception) -> Response:
    """FastAPI's answer, except that a 405 lists every method of the path in ``Allow`` (RFC 9110
    15.5.6): Starlette names only the first route that matched the path, one method of several."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        path = request.url.path
        allowed = sorted({m for rx, ms in _documented_methods(request.app) if rx.match(path) for m in ms})
        if allowed:
            detail = f"method {request.method} not allowed on {path}; allowed: {', '.join(allowed)}"
            return JSONResponse({"detail": detail}, status_code=405, headers={"Allow": ", ".join(allowed)})
    return await http_exception_handler(request, exc)


def _admin(request: Request) -> bool:
    """The request comes with the admin key, or no key is configured (a development server)."""
    settings: Settings = request.app.state.settings
    if not settings.api_key_set and not settings.admin_key:
        return True
    return bool(settings.admin_key) and _matches(request.headers.get(HEADER), [settings.admin_key])


def _unknown_model(request: Request, exc: Exception) -> JSONResponse:
    detail = str(exc)
    if isinstance(exc, NoSuchModelError) and _admin(request):
        detail += f"; known: {exc.known}"
    return JSONResponse({"detail": detail}, status_code=404)


def _model_unavailable(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(
        {"detail": str(exc)}, status_code=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)}
    )


def _misdirected(request: Request, exc: Exception) -> JSONResponse:
    """421: the model is held by other replica groups; the body and a header name their addresses."""
    assert isinstance(exc, MisdirectedError)
    return JSONResponse(exc.body(), status_code=421, headers=exc.headers())


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""
    app.add_exception_handler(ModelUnavailableError, _model_unavailable)
    app.add_exception_handler(MisdirectedError, _misdirected)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StoreUnavailableError, _unavailable)
    app.add_exception_handler(UnknownModelError, _unknown_model)
    for exc, code in [
        (FeatureError, 422),
        (ParamError, 422),
        (UnknownNameError, 422),
        (StateFormatError, 422),
        (ModelExistsError, 409),
        (PlacementError, 409),
        (DecisionExistsError, 409),
    ]:
        app.add_exception_handler(exc, _status(code))


class BodyLimit:
    """Pure ASGI: refuse request bodies over ``max_bytes`` with 413 and a JSON ``detail``.

    A declared Content-Length over the limit is answered before reading anything; a chunked body
    is counted as it arrives and cut with an :class:`HTTPException` (413) that FastAPI turns into
    the same JSON answer.

    A state import (``PUT /models/{name}/state``) carrying the admin key may be as large as
    ``state_bytes`` (the model memory budget): an exported state is the model's arrays, which at
    default sizes are megabytes (issue 50: the default learner's table is 6 MiB), and only the admin
    route takes it. So may a catalog's bulk registration (``POST /models/{name}/items``, issue 54:
    100,000 items of ten features are about 20 MB of JSON), which the same budget bounds. The key is
    checked here, before any byte is read, so an anonymous client still meets ``max_bytes``;
    ``admin_key`` None means no keys are configured (every route open).
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        state_bytes: int | None = None,
        admin_key: str | None = None,
        keys_configured: bool = False,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.state_bytes = max(state_bytes or max_bytes, max_bytes)
        self.admin_key = admin_key
        self.keys_configured = keys_configured

    def _limit(self, scope: Scope) -> int:
        path, method = scope.get("path", ""), scope.get("method")
        state = method == "PUT" and path.endswith("/state")
        items = method == "POST" and path.endswith("/items")  # a catalog's bulk (service.api.items)
        if not path.startswith("/models/") or not (state or items):
            return self.max_bytes
        if self.keys_configured:
            given = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"x-api-key"), None)
            if self.admin_key is None or not _matches(given, [self.admin_key]):
                return self.max_bytes
        return self.state_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self._limit(scope)
        for key, value in scope["headers"]:
            if key == b"content-length" and value.isdigit() and int(value) > limit:
                detail = f"body too large: {int(value)} bytes, at most {limit}"
                await JSONResponse({"detail": detail}, status_code=413)(scope, receive, send)
                return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit:
                raise HTTPException(413, f"body too large: more than {limit} bytes")
            return message

        await self.app(scope, counted, send)
