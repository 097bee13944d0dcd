"""A model's catalog kept through its event log (issue 54, service/runtime/items.py): what the
runtime holds is the catalog that registered the same items, a bulk is several events, removals
apply in log order, checkpoints carry it through a restart (real SQLite files), and the memory
budget refuses a catalog that does not fit before anything is appended."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import service.runtime.items
from service.catalog import Catalog, CatalogError
from service.config import ModelSpec
from service.features import FeatureError
from service.runtime import BudgetError
from service.runtime.budgets import state_nbytes
from service.store import Event, MemoryStore, SQLiteStore, Store
from tests.service.conftest import Start

pytestmark = pytest.mark.anyio

SHOP = ModelSpec(actions="features", learner="squarecb-adf", hashing_bits=12)
LABELS = ModelSpec(hashing_bits=10, labels=["a", "b"])


def items(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "id": f"i{i}",
            "features": {"price": float(i % 97), "category": f"c{i % 5}", "sale": i % 2 == 0},
            **({"active": False} if i % 11 == 0 else {}),
            **({"expires_at": 1e12} if i % 13 == 0 else {}),
        }
        for i in range(start, start + n)
    ]


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "memory":
        return MemoryStore()
    return SQLiteStore(tmp_path / "clickboost.sqlite3")


async def test_the_runtime_holds_the_catalog_that_registered_the_items(
    start: Start, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service.runtime.items, "ITEMS_PER_EVENT", 40)
    runtime = await start(store)
    await runtime.create_model("shop", SHOP)
    m, position = await runtime.items.put("shop", items(100))
    assert position == 3  # 40 + 40 + 20 items
    direct = Catalog(12)
    for lo in range(0, 100, 40):  # one change per event
        direct.put_many(items(min(40, 100 - lo), lo))
    assert m.catalog is not None and m.catalog.to_bytes() == direct.to_bytes()
    m, position = await runtime.items.remove("shop", "i7")
    direct.remove("i7")
    assert position == 4 and m.catalog is not None and m.catalog.to_bytes() == direct.to_bytes()
    with pytest.raises(CatalogError, match="'i7' is not in the catalog"):
        await runtime.items.remove("shop", "i7")
    with pytest.raises(CatalogError, match=r"items\.1\.id: 'i3' is given twice"):
        await runtime.items.put("shop", [items(1, 3)[0], items(1, 3)[0]])
    assert await store.log_position("shop") == 4  # nothing appended for a refused write


async def test_a_label_model_has_no_catalog(start: Start) -> None:
    runtime = await start(MemoryStore())
    m = await runtime.create_model("labels", LABELS)
    assert m.catalog is None
    with pytest.raises(
        FeatureError, match='fixed labels; a catalog of items needs a model with "actions": "features"'
    ):
        await runtime.items.put("labels", items(1))


async def test_checkpoint_and_restart_keep_the_catalog(start: Start, tmp_path: Path) -> None:
    """A checkpoint carries the catalog (a new process starts from it, then replays the log after
    it: a removal and a replacement), the same bytes as the catalog that applied the whole log."""
    path = tmp_path / "clickboost.sqlite3"
    first = await start(SQLiteStore(path), checkpoint_every=2)
    await first.create_model("shop", SHOP)
    await first.items.put("shop", items(300))
    await first.items.put("shop", items(10, 295))  # 5 replaced, 5 new: checkpoint at 2
    await first.checkpoints.wait()
    await first.items.remove("shop", "i0")
    m = first.models["shop"]
    assert m.catalog is not None
    kept, version = m.catalog.to_bytes(), m.catalog.version
    store = first.store
    cp = await store.get_checkpoint("shop")
    assert cp is not None and cp.position == 2
    await first.stop()
    await store.close()
    second = await start(SQLiteStore(path))
    again = second.models["shop"]
    assert again.position == 3 and again.catalog is not None
    assert again.catalog.to_bytes() == kept and again.catalog.version == version == 3
    assert len(again.catalog) == 304 and "i0" not in again.catalog


async def test_the_memory_budget_refuses_a_catalog_that_does_not_fit(start: Start) -> None:
    """The budget per model counts the learned state and the catalog; a write that would exceed it
    is refused naming both sizes, and nothing is appended."""
    runtime = await start(MemoryStore(), max_model_bytes=state_nbytes(SHOP) + 100_000)  # a few hundred items
    m = await runtime.create_model("shop", SHOP)
    await runtime.items.put("shop", items(100))
    position = m.position
    with pytest.raises(BudgetError) as refused:
        await runtime.items.put("shop", items(2000, 100))
    message = str(refused.value)
    assert "would hold a catalog of" in message and "(2,100 items) beside" in message
    assert "of learned state; the budget per model is" in message and "CLICKBOOST_MAX_MODEL_BYTES" in message
    assert m.position == position == await runtime.store.log_position("shop")
    assert m.catalog is not None and len(m.catalog) == 100


async def test_a_bulk_gives_predicts_a_turn_between_its_events(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Applying a bulk's ``items`` events (issue 54: catalog changes do not stall predicts), the
    event loop gets a turn after each one: another task sees every position in between, each a
    whole event's catalog, and the end is the catalog of the whole bulk."""
    monkeypatch.setattr(service.runtime.items, "ITEMS_PER_EVENT", 40)
    runtime = await start(MemoryStore())
    m = await runtime.create_model("shop", SHOP)
    assert m.catalog is not None
    first = m.position
    # the events as a follower reads them from the log (not appended here: the runtime's own
    # follower must not apply them first)
    data = service.runtime.items.put_events(Catalog(12).hash_items(items(200)))
    events = [Event(first + 1 + i, "items", at=0.0, state=d) for i, d in enumerate(data)]  # type: ignore[arg-type]
    seen: list[tuple[int, int]] = []

    async def watch() -> None:
        while m.position < events[-1].position:
            seen.append((m.position, len(m.catalog)))  # type: ignore[arg-type]
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    await runtime.replication.apply_all(m, events)
    await watcher
    between = sorted({s for s in seen if first < s[0] < events[-1].position})
    assert between == [(first + i, 40 * i) for i in range(1, len(events))]
    assert m.position == events[-1].position and len(m.catalog) == 200


async def test_a_catalog_over_a_lowered_budget_is_not_loaded_and_counts_for_the_others(
    start: Start, tmp_path: Path
) -> None:
    """A process started with a budget its stored catalog exceeds refuses to load the model (reported,
    the others served), as for learned state; a loaded catalog counts against the process's budget
    when another model is created."""
    path = tmp_path / "clickboost.sqlite3"
    first = await start(SQLiteStore(path))
    await first.create_model("shop", SHOP)
    await first.items.put("shop", items(2000))
    m = first.models["shop"]
    assert m.catalog is not None
    held = m.budget_bytes + m.catalog.nbytes()
    store = first.store
    await first.stop()
    await store.close()
    second = await start(SQLiteStore(path), max_model_bytes=held - 1)
    assert "shop" not in second.models
    reason = second.registry.load_failures["shop"].reason
    assert "would hold a catalog of" in reason and "(2,000 items)" in reason
    assert "CLICKBOOST_MAX_MODEL_BYTES" in reason
    store = second.store
    await second.stop()
    await store.close()
    # the whole process: the catalog leaves no room for a second model of the same learned size
    third = await start(SQLiteStore(path), max_total_model_bytes=held + m.budget_bytes - 1)
    assert "shop" in third.models
    with pytest.raises(BudgetError, match="this process's models already hold"):
        await third.create_model("other", SHOP)
