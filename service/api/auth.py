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

HEADER = "X-API-Key"
api_key_header = APIKeyHeader(name=HEADER, auto_error=False, description="API key (admin key for /models).")
# For routes that check keys inline (the hot path) but still show the scheme in the OpenAPI docs.
SECURITY = {"security": [{"APIKeyHeader": []}]}


def _matches(key: str | None, candidates: list[str]) -> bool:
    # compare_digest against every candidate: time does not depend on where a key differs
    if key is None:
        return False
    return any([hmac.compare_digest(key.encode(), c.encode()) for c in candidates])


def check_api_key(request: Request) -> None:
    """Allow /predict and /feedback to holders of an API key or the admin key (401 otherwise)."""
    settings: Settings = request.app.state.settings
    keys = settings.api_key_set
    if not keys:
        return
    allowed = [*keys, settings.admin_key] if settings.admin_key else list(keys)
    if not _matches(request.headers.get(HEADER), allowed):
        raise HTTPException(401, f"missing or invalid {HEADER}", headers={"WWW-Authenticate": "APIKey"})


async def require_admin(request: Request, key: Annotated[str | None, Depends(api_key_header)]) -> None:
    """Dependency: allow /models to holders of the admin key (401 otherwise)."""
    admin = request.app.state.settings.admin_key
    if admin and not _matches(key, [admin]):
        raise HTTPException(401, f"missing or invalid admin {HEADER}", headers={"WWW-Authenticate": "APIKey"})
