"""Every failure answers ``{"detail": "<one line naming the problem>"}`` with the right 4xx.

Malformed JSON and an empty body -> 400; a body of the wrong shape or type, bad features or a bad
model configuration -> 422; unknown model or decision -> 404; duplicate -> 409; expired -> 410;
body over the size limit -> 413 (FastAPI's ``max_body_size``); shared store unreachable -> 503 with
``Retry-After`` (nothing was recorded).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from service.features import FeatureError
from service.learners.base import ParamError
from service.registry import UnknownNameError
from service.serial import StateFormatError
from service.store import ModelExistsError, StoreUnavailableError, UnknownModelError

RETRY_AFTER_SECONDS = 1


def _loc(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) or "body"


def _validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    for err in errors:
        if err["type"] == "json_invalid":
            reason = err.get("ctx", {}).get("error", "invalid JSON")
            pos = err["loc"][-1]
            return JSONResponse({"detail": f"malformed JSON: {reason} at character {pos}"}, status_code=400)
        if err["type"] == "missing" and tuple(err["loc"]) == ("body",):
            return JSONResponse({"detail": "empty body: expected a JSON object"}, status_code=400)
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
    detail = f"shared store unavailable, nothing recorded; retry later ({exc})"
    return JSONResponse(
        {"detail": detail}, status_code=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)}
    )


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StoreUnavailableError, _unavailable)
    for exc, code in [
        (FeatureError, 422),
        (ParamError, 422),
        (UnknownNameError, 422),
        (StateFormatError, 422),
        (UnknownModelError, 404),
        (ModelExistsError, 409),
    ]:
        app.add_exception_handler(exc, _status(code))
