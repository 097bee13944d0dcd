"""Exceptions raised by the SDK, one class per kind of failure the caller may want to handle.

Every HTTP error answer becomes an :class:`APIError` subclass chosen by status code, carrying the
status, the server's message and the parsed body, so ``except NotFound`` or ``except Conflict`` reads
like the API contract (issue 3): unknown decision id -> 404, second feedback -> 409, reward window
passed -> 410, bad input -> 400/413/422, a model held by other replicas -> 421.
"""

from __future__ import annotations

from typing import Any


class ClickboostError(Exception):
    """Base class of every exception the SDK raises."""


class TransportError(ClickboostError):
    """No HTTP answer: connection refused, timed out or broken (after the retries allowed)."""


class ProtocolError(ClickboostError):
    """The server answered 2xx with a body that does not match the API contract."""


class APIError(ClickboostError):
    """An HTTP error answer from the service.

    Attributes
    ----------
    status : int
        The HTTP status code.
    message : str
        The server's explanation (FastAPI's ``detail``), flattened to one line.
    body : Any
        The decoded JSON body (or the raw text when it was not JSON).
    first_outcome : dict or None
        409 / 410 only: how the decision was first answered, ``{"outcome": "click" | "no_click" |
        "expired", "model", "model_version", "at"}``.
    """

    def __init__(self, status: int, message: str, body: Any = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.body = body
        first = body.get("first_outcome") if isinstance(body, dict) else None
        self.first_outcome: dict[str, Any] | None = first if isinstance(first, dict) else None


class BadRequest(APIError):
    """400 / 413 / 422: the request was malformed or failed validation; the model was not touched."""


class Unauthorized(APIError):
    """401 / 403: missing or wrong API key (or an admin call made with a non-admin key)."""


class NotFound(APIError):
    """404: unknown model or unknown decision id."""


class Conflict(APIError):
    """409: feedback for this decision id was already recorded (``first_outcome`` says how)."""


class Misdirected(APIError):
    """421: the replica's group does not hold the model (model placement), after the SDK followed
    one such answer to the replicas it named; ``body["groups"]`` maps the model's groups to their
    addresses."""


class Gone(APIError):
    """410: the decision's reward window has passed (the default reward applies)."""


class RateLimited(APIError):
    """429: the server asked the client to slow down."""


class ServerError(APIError):
    """5xx: the service (or the load balancer in front of it) failed."""


def _message(body: Any) -> str:
    """One line from a FastAPI error body: ``detail`` as a string, a dict or a list of errors."""
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, dict):
        detail = detail.get("message") or detail.get("error") or detail
    if isinstance(detail, list):  # FastAPI's request validation errors
        parts = []
        for err in detail:
            if isinstance(err, dict):
                loc = ".".join(str(p) for p in err.get("loc", []) if p != "body")
                parts.append(f"{loc}: {err.get('msg', err)}" if loc else str(err.get("msg", err)))
            else:
                parts.append(str(err))
        detail = "; ".join(parts)
    return " ".join(str(detail).split())


def error_for(status: int, body: Any) -> APIError:
    """The exception for an HTTP error answer with decoded ``body``."""
    if status in (401, 403):
        cls: type[APIError] = Unauthorized
    elif status == 404:
        cls = NotFound
    elif status == 409:
        cls = Conflict
    elif status == 410:
        cls = Gone
    elif status == 421:
        cls = Misdirected
    elif status == 429:
        cls = RateLimited
    elif status >= 500:
        cls = ServerError
    else:
        cls = BadRequest
    return cls(status, _message(body), body)
