"""Fixtures of the replication tests: the anyio backend, an HTTP client with a bounded timeout, and
runtimes in this process standing in for replicas of one shared Redis."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from service.config import Settings
from service.runtime import Runtime
from service.store.redis import RedisStore

CLIENT_TIMEOUT = 10.0  # seconds: every request of these tests gives up after this (counted as a timeout)

#: ``start(**settings)``, the fixture :func:`replicas`.
Start = Callable[..., Awaitable[Runtime]]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(CLIENT_TIMEOUT)) as client:
        yield client


@pytest.fixture
async def replicas(redis_url: str) -> AsyncIterator[Start]:
    """``start(**settings)``: a started Runtime on its own client of one fresh key prefix."""
    prefix = f"test-{uuid.uuid4().hex}:"
    started: list[Runtime] = []

    async def start(**settings: object) -> Runtime:
        runtime = Runtime(RedisStore(redis_url, prefix=prefix), Settings(**settings))  # type: ignore[arg-type]
        started.append(runtime)
        await runtime.start()
        return runtime

    yield start
    for runtime in started:
        await runtime.stop()
    cleaner = RedisStore(redis_url, prefix=prefix)
    async for key in cleaner.redis.scan_iter(match=prefix + "*"):
        await cleaner.redis.delete(key)
    for store in [cleaner, *(runtime.store for runtime in started)]:
        await store.close()
