"""Fixtures of the service's tests that start runtimes in this process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from service.config import Settings
from service.runtime import Runtime
from service.store import MemoryStore, Store

#: ``start(store=None, **settings)``, the fixture below.
Start = Callable[..., Awaitable[Runtime]]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    """``start(store=None, **settings)``: a started Runtime (memory store unless given), stopped after."""
    started: list[Runtime] = []

    async def go(store: Store | None = None, **settings: object) -> Runtime:
        runtime = Runtime(store or MemoryStore(), Settings(store="memory", **settings))  # type: ignore[arg-type]
        started.append(runtime)
        await runtime.start()
        return runtime

    yield go
    for runtime in started:
        await runtime.stop()
