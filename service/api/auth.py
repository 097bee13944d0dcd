"""API keys from settings: ``X-API-Key`` for /predict and /feedback, the admin key for /models.

Fail closed. With no key configured at all every request is allowed (a development server;
``clickboost serve`` then refuses to bind anything but loopback unless ``--insecure``). Once any
key is configured:

- ``/predict``, ``/feedback`` and ``/decisions/{id}/activate`` need an API key (``CLICKBOOST_API_KEY``) or
  the admin key; so do the Personalizer routes (:mod:`service.api.personalizer`), which also take
  the key in Personalizer's ``Ocp-Apim-Subscription-Key`` header;
- every ``/models`` route, reads included (they expose learned state, configs and counts), needs
  the admin key (``CLICKBOOST_ADMIN_KEY``); with API keys but no admin key they answer 403 naming
  the missing setting, never serve;
- ``/healthz``, ``/readyz``, ``/metrics`` and the API documentation stay open.

Keys are compared in constant time (digests of equal length, every candidate compared).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import APIKeyHeader

from service.config import Settings

HEADER = "X-API-Key"
#: Azure Personalizer's key header, accepted on the Personalizer routes (the official clients send it).
SUBSCRIPTION_HEADER = "Ocp-Apim-Subscription-Key"
api_key_header = APIKeyHeader(name=HEADER, auto_error=False, description="API key (admin key for /models).")
# For routes that check keys inline (the hot path) but still show the scheme in the OpenAPI docs.
SECURITY = {"security": [{"APIKeyHeader": []}]}


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _matches(key: str | None, candidates: list[str]) -> bool:
    # Equal-length digests, every candidate compared: the time says nothing of where a key differs
    # nor of its length, nor of which candidate matched.
    if key is None:
        return False
    given = _digest(key)
    return any([hmac.compare_digest(given, _digest(c)) for c in candidates])


def check_api_key(request: Request, headers: tuple[str, ...] = (HEADER,)) -> None:
    """Allow /predict, /feedback and the activation to holders of an API key or the admin key (401
    otherwise), sent in the first of ``headers`` the request has."""
    settings: Settings = request.app.state.settings
    allowed = [*settings.api_key_set, *([settings.admin_key] if settings.admin_key else [])]
    if not allowed:
        return
    key = None
    for h in headers:
        key = request.headers.get(h)
        if key is not None:
            break
    if not _matches(key, allowed):
        named = " or ".join(headers)
        raise HTTPException(401, f"missing or invalid {named}", headers={"WWW-Authenticate": "APIKey"})


async def require_admin(request: Request, key: Annotated[str | None, Depends(api_key_header)]) -> None:
    """Dependency: allow /models to holders of the admin key (401), closed without one (403)."""
    settings: Settings = request.app.state.settings
    if settings.admin_key:
        if not _matches(key, [settings.admin_key]):
            raise HTTPException(
                401, f"missing or invalid admin {HEADER}", headers={"WWW-Authenticate": "APIKey"}
            )
    elif settings.api_key_set:
        raise HTTPException(
            403,
            "admin routes are closed: API keys are configured (CLICKBOOST_API_KEY) but no admin key; "
            "set CLICKBOOST_ADMIN_KEY to use /models",
        )
