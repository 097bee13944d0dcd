"""Clients of the clickboost service: the SDK (:class:`Client`, :class:`AsyncClient`) and, in
:mod:`clients.replay`, the replay load-test client.

The SDK depends on httpx only (no numpy, no fastapi), so a web app can install it next to anything.
"""

from clients.errors import (
    APIError,
    BadRequest,
    ClickboostError,
    Conflict,
    Gone,
    Misdirected,
    NotFound,
    ProtocolError,
    RateLimited,
    ServerError,
    TransportError,
    Unauthorized,
)
from clients.models import ActivateResult, FeedbackResult, ModelCounts, ModelInfo, Prediction
from clients.sdk import AsyncClient, Client, ModelState, Retry

__all__ = [
    "APIError",
    "ActivateResult",
    "AsyncClient",
    "BadRequest",
    "ClickboostError",
    "Client",
    "Conflict",
    "FeedbackResult",
    "Gone",
    "Misdirected",
    "ModelCounts",
    "ModelInfo",
    "ModelState",
    "NotFound",
    "Prediction",
    "ProtocolError",
    "RateLimited",
    "Retry",
    "ServerError",
    "TransportError",
    "Unauthorized",
]
