"""Clients of the clickboost service: the SDK (:class:`Client`, :class:`AsyncClient`) and, in
:mod:`clickboost_client.replay`, the replay load-test client.

The SDK depends on httpx only (no numpy, no fastapi), so a web app can install it next to anything.
Its import name is the distribution's, ``clickboost_client`` (``pip install clickboost-client``);
the folder of its sources is ``clients/``. The name of the release before, ``clients``, still
imports the same objects for one more release, with a :class:`DeprecationWarning`.
"""

import sys as _sys

from clickboost_client.errors import (
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
from clickboost_client.models import (
    ActivateResult,
    FeedbackResult,
    ModelCounts,
    ModelInfo,
    Page,
    Prediction,
    SlotChoice,
)
from clickboost_client.sdk import AsyncClient, Client, ModelState, Retry

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
    "Page",
    "Prediction",
    "ProtocolError",
    "RateLimited",
    "Retry",
    "ServerError",
    "SlotChoice",
    "TransportError",
    "Unauthorized",
]

if __name__ != "clickboost_client":  # imported by its old name ("clients"): the same objects
    import warnings as _warnings

    # ``clients.errors`` and the others are the modules of ``clickboost_client``, not second copies
    # (whose exception classes an ``except`` of the other name would not catch).
    for _module in ("errors", "models", "sdk"):
        _sys.modules[f"{__name__}.{_module}"] = _sys.modules[f"clickboost_client.{_module}"]
    _warnings.warn(
        f"the SDK's import name is now clickboost_client; {__name__!r} goes in the next release",
        DeprecationWarning,
        stacklevel=2,
    )
