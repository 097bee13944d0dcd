"""Fixtures of the replication tests: the anyio backend and an HTTP client with a bounded timeout."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

CLIENT_TIMEOUT = 10.0  # seconds: every request of these tests gives up after this (counted as a timeout)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(CLIENT_TIMEOUT)) as client:
        yield client
