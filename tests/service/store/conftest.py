"""The store implementations the contract suite runs against: add one entry per implementation."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from service.store import MemoryStore, SQLiteStore, Store
from service.store.redis import RedisStore

# name -> factory(request, claim_ttl) -> Store. The Redis issue adds "redis" here (using ``redis_url``).
STORES: dict[str, Callable[[pytest.FixtureRequest, float], Store]] = {
    "memory": lambda request, claim_ttl: MemoryStore(claim_ttl),
    # A unique key prefix per test: tests never see each other's keys on a shared Redis.
    "redis": lambda request, claim_ttl: RedisStore(
        request.getfixturevalue("redis_url"), claim_ttl, prefix=f"test-{uuid.uuid4().hex}:"
    ),
    # A fresh file per test, under pytest's tmp_path (never in the repository).
    "sqlite": lambda request, claim_ttl: SQLiteStore(
        request.getfixturevalue("tmp_path") / "data" / "clickboost.sqlite3", claim_ttl
    ),
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=sorted(STORES))
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """A fresh, empty store of each implementation, remembering claims for 100 s."""
    s = STORES[request.param](request, 100.0)
    try:
        yield s
    finally:
        for name in await s.list_models():
            await s.delete_model(name)
        await s.close()
