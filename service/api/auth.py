"""API keys from settings: ``X-API-Key`` for /predict and /feedback, the admin key for /models.

With no keys configured every request is allowed; ``python -m service serve`` then refuses to bind
anything but loopback unless ``--insecure``. The admin key is accepted on every endpoint.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import APIKeyHeader

from service.config import Settings

_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="API key (admin key for /models).")


def _settings(request: Request) -> Settings:
    return request.app.state.settings


def _matches(key: str, candidates: list[str]) -> bool:
    # compare_digest against every candidate: time does not depend on where a key differs
    return any([hmac.compare_digest(key.encode(), c.encode()) for c in candidates])


def require_api_key(request: Request, key: Annotated[str | None, Depends(_header)]) -> None:
    """Allow /predict and /feedback to holders of an API key or the admin key."""
    settings = _settings(request)
    keys = sorted(settings.api_key_set)
    if settings.admin_key:
        keys.append(settings.admin_key)
    if not settings.api_key_set:
        return
    if key is None or not _matches(key, keys):
        raise HTTPException(401, "missing or invalid X-API-Key", headers={"WWW-Authenticate": "APIKey"})


def require_admin(request: Request, key: Annotated[str | None, Depends(_header)]) -> None:
    """Allow /models to holders of the admin key."""
    admin = _settings(request).admin_key
    if not admin:
        return
    if key is None or not _matches(key, [admin]):
        raise HTTPException(401, "missing or invalid admin X-API-Key", headers={"WWW-Authenticate": "APIKey"})
