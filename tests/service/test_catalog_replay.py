"""A logged catalog decision's candidates rebuilt from the catalog's history (issue 54, item 5;
service/catalog_history.py, service/catalog_replay.py), property-wise: a random stream of puts,
replacements, deletions, expiries (retired by the sweep's ``items`` event), filters, candidate ids
and eligible / excluded labels, interleaved with catalog decisions and feedback; for every logged
decision the candidates rebuilt at the end are those rebuilt when it was made (same ids, same
hashed features, same order), and the model as it was then gives the chosen item the logged
probability bit for bit. The same after the catalog's bytes are saved and loaded (a checkpoint),
with the decision log on the memory store and on SQLite (Redis: tests/service/replication/)."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.catalog import Catalog
from service.catalog_replay import ReplayError, Snapshots, as_of, rebuild
from service.config import ModelSpec
from service.decision_log import LogRecord
from service.runtime import Runtime
from service.runtime.catalog_requests import MEMO_NAMES, CatalogQuery
from service.runtime.items import apply_event, pop_catalog, put_events, remove_event, sweep_event
from service.store import MemoryStore, SQLiteStore
from tests.service.conftest import Start

pytestmark = pytest.mark.anyio

SHOP = ModelSpec(actions="features", learner="squarecb-adf", hashing_bits=10)
CATEGORIES = ("shoes", "bags", "hats")


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def random_item(rng: np.random.Generator, i: int, now: float) -> dict[str, Any]:
    features: dict[str, Any] = {
        "category": CATEGORIES[int(rng.integers(3))],
        "price": float(rng.integers(1, 9)),
    }
    if rng.random() < 0.5:
        features["brand"] = f"b{int(rng.integers(4))}"
    if rng.random() < 0.3:
        features["sale"] = bool(rng.random() < 0.5)
    item: dict[str, Any] = {"id": f"sku-{i}", "features": features}
    if rng.random() < 0.1:
        item["active"] = False
    if rng.random() < 0.2:
        item["expires_at"] = now + float(rng.integers(1, 30))
    return item


async def log_records(runtime: Runtime, name: str = "shop") -> list[LogRecord]:
    out: list[LogRecord] = []
    async for page in await runtime.decision_log(name):
        out += page
    return out


def seen(rep: Any) -> list[tuple[str, list[int], list[float]]]:
    """What a rebuild gives: each candidate's id and hashed features, in order."""
    return [
        (
            rep.catalog.id_of(int(s)),
            rep.catalog.features(int(s)).idx.tolist(),
            rep.catalog.features(int(s)).val.tolist(),
        )
        for s in rep.slots
    ]


async def decide(runtime: Runtime, rng: np.random.Generator, now: float) -> str | None:
    """One catalog decision of a random kind; its id (None when the selection left nothing)."""
    m = runtime.models["shop"]
    cat = m.catalog
    assert cat is not None
    live = [cat.id_of(int(s)) for s in cat.select_all(None, now)]
    ctx = {"user": f"u{int(rng.integers(5))}", "hour": float(rng.integers(24))}
    kind = int(rng.integers(4))
    query, eligible, excluded = CatalogQuery(), None, None
    if kind == 1:
        query = CatalogQuery(where={"category": list(rng.choice(CATEGORIES, 2, replace=False))})
    elif kind == 2 and live:
        query = CatalogQuery(candidates=list(rng.permutation(live)[: int(rng.integers(1, len(live) + 1))]))
    elif kind == 3 and len(live) > 2:
        names = [str(x) for x in rng.choice(live, 2, replace=False)]
        eligible, excluded = (names, None) if rng.random() < 0.5 else (None, [names[0], 0])
    try:
        p = await runtime.predict("shop", ctx, eligible, excluded, catalog=query)
    except Exception as exc:  # a filter or exclusion that leaves nothing: a 4xx, nothing logged
        assert "no active catalog item" in str(exc) or "no eligible" in str(exc) or "not one of" in str(exc)
        return None
    return p.decision_id


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("seed", [0, 1, 2])
async def test_every_decision_is_rebuilt_and_its_probability_reproduced(
    start: Start, seed: int, kind: str, tmp_path: Path
) -> None:
    rng = np.random.default_rng(seed)
    clock = Clock()
    runtime = await start(MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "c.sqlite3"))
    runtime.clock = clock
    await runtime.create_model("shop", SHOP)
    m = runtime.models["shop"]
    await runtime.items.put("shop", [random_item(rng, i, clock.t) for i in range(40)])
    learners: dict[str, Any] = {}
    first: dict[str, list[tuple[str, list[int], list[float]]]] = {}
    n_items = 40
    for _ in range(150):
        op = rng.random()
        ids = [m.catalog.id_of(int(s)) for s in m.catalog.live_slots()]
        if op < 0.15:
            await runtime.items.put("shop", [random_item(rng, n_items + j, clock.t) for j in range(3)])
            n_items += 3
        elif op < 0.3 and ids:
            chosen = rng.choice(ids, min(4, len(ids)), replace=False)
            await runtime.items.put("shop", [random_item(rng, int(str(i)[4:]), clock.t) for i in chosen])
        elif op < 0.38 and len(ids) > 5:
            await runtime.items.remove("shop", str(rng.choice(ids)))
        elif op < 0.48:
            clock.t += float(rng.integers(1, 10))
            await runtime.sweep()  # retires what expired, through an items event
        else:
            learner = copy.deepcopy(m.learner)  # the model as it decides
            decision_id = await decide(runtime, rng, clock.t)
            if decision_id is None:
                continue
            learners[decision_id] = learner
            record = next(r for r in await log_records(runtime) if r.decision_id == decision_id)
            first[decision_id] = seen(rebuild(m.catalog, record))
            if rng.random() < 0.5:
                await runtime.feedback(decision_id, bool(rng.random() < 0.5), wait=True)
    assert len(m.catalog.history) > 0 and len(first) > 40
    loaded = Catalog.from_bytes(m.catalog.to_bytes())  # a checkpoint's copy
    assert loaded.to_bytes() == m.catalog.to_bytes()
    records = [r for r in await log_records(runtime) if r.catalog is not None]
    assert len(records) == len(first)
    versions = {r.catalog["version"] for r in records}
    assert len(versions) > 10  # the catalog changed between decisions
    snapshots = Snapshots(m.catalog)
    for record in records:
        for cat, snaps in ((m.catalog, None), (loaded, None), (m.catalog, snapshots)):
            rep = rebuild(cat, record, snapshots=snaps)
            assert seen(rep) == first[record.decision_id]
            p = rep.pmf(learners[record.decision_id])
            assert p[rep.index] == record.probs[0]  # bit for bit
            assert math.isclose(float(p.sum()), 1.0)


async def test_a_catalog_at_a_version_is_the_catalog_that_was(start: Start) -> None:
    """``as_of`` of every earlier version equals, byte for byte in its rows, the catalog kept then."""
    rng = np.random.default_rng(7)
    cat = Catalog(10)
    kept: dict[int, list[tuple[str, bool, float, list[int], list[float]]]] = {}

    def rows(c: Catalog) -> list[tuple[str, bool, float, list[int], list[float]]]:
        out = []
        for s in c.live_slots().tolist():
            v = c.features(s)
            out.append((c.id_of(s), bool(c._active[s]), float(c._expires[s]), v.idx.tolist(), v.val.tolist()))
        return out

    for step in range(200):
        kept[cat.version] = rows(cat)
        ids = [cat.id_of(int(s)) for s in cat.live_slots()]
        op = rng.random()
        if op < 0.4 or len(ids) < 5:
            cat.put_many([random_item(rng, int(rng.integers(60)), 100.0 + step) for _ in range(1)])
        elif op < 0.7:
            cat.discard([str(rng.choice(ids))])
        else:
            cat.expire(100.0 + step)
    for version, expected in kept.items():
        assert rows(as_of(cat, version)) == expected
    with pytest.raises(ReplayError, match="not applied the log up to it"):
        as_of(cat, cat.version + 1)
    below = cat.version // 2
    cat.history.forget(below)
    assert rows(as_of(cat, below)) == kept[below]
    with pytest.raises(ReplayError, match=f"before version {below} is forgotten"):
        as_of(cat, below - 1)


async def test_the_sweep_forgets_what_no_retained_decision_needs(start: Start) -> None:
    """With a decision log that keeps 5 decisions, the sweep's items event forgets the rows retired
    before the oldest kept one (less the slack): an older decision then says why it cannot be
    rebuilt, a kept one still rebuilds; expired items are retired, so they stop counting."""
    clock = Clock()
    runtime = await start(MemoryStore(), log_retention="5")
    runtime.clock = clock
    await runtime.create_model("shop", SHOP)
    m = runtime.models["shop"]
    rng = np.random.default_rng(3)
    await runtime.items.put("shop", [random_item(rng, i, clock.t) | {"expires_at": None} for i in range(20)])
    await runtime.predict("shop", {"user": "u0"})
    old = (await log_records(runtime))[0]
    for i in range(10):  # replacements retire rows
        await runtime.items.put("shop", [random_item(rng, i, clock.t) | {"expires_at": None}])
    await runtime.items.put(
        "shop", [{"id": "flash", "features": {"category": "hats"}, "expires_at": clock.t + 5}]
    )
    clock.t += 2_000.0  # past the slack
    for _ in range(6):
        await runtime.predict("shop", {"user": "u1"})
    size = m.catalog.nbytes()
    assert len(m.catalog.history) == 10 and "flash" in m.catalog
    await runtime.sweep()
    assert "flash" not in m.catalog and len(m.catalog.history) == 1  # flash retired now, kept
    assert m.catalog.nbytes() < size
    with pytest.raises(ReplayError, match="is forgotten"):
        rebuild(m.catalog, old)
    for record in await log_records(runtime):
        rebuild(m.catalog, record)


async def test_what_cannot_be_rebuilt_says_why(start: Start) -> None:
    runtime = await start(MemoryStore())
    await runtime.create_model("shop", SHOP)
    m = runtime.models["shop"]
    await runtime.items.put("shop", [{"id": f"i{i}", "features": {"k": f"v{i}"}} for i in range(5)])
    await runtime.predict(
        "shop",
        {"u": "a"},
        actions=[{"id": "sent", "features": {"k": "z"}}],
        catalog=CatalogQuery(where={"k": "v1"}),
    )
    many = [f"x{i}" for i in range(MEMO_NAMES + 1)]
    await runtime.items.put("shop", [{"id": i, "features": {"k": "v"}} for i in many])
    await runtime.predict("shop", {"u": "a"}, catalog=CatalogQuery(candidates=many))
    sent, named = [r for r in await log_records(runtime)]
    with pytest.raises(ReplayError, match="sent 1 actions with their features"):
        rebuild(m.catalog, sent)
    with pytest.raises(ReplayError, match=f"named {MEMO_NAMES + 1} ids and labels"):
        rebuild(m.catalog, named)
    assert named.catalog["candidates"] == MEMO_NAMES + 1


def test_the_times_a_forget_reads_are_those_of_events_that_retired_rows() -> None:
    """The sweep turns a time into a version with the times of the events that retired rows, kept in
    this process only: events that add items note nothing (the list stays as long as the history),
    and a catalog loaded from a checkpoint counts its rows as retired when it was loaded."""
    cat = Catalog(10)
    for i in range(50):
        apply_event(
            cat, put_events(cat.hash_items([{"id": f"i{i}", "features": {"k": "x"}}]))[0], at=float(i)
        )
    assert cat.history.times == [] and cat.history.forget_below(1e9) == 0
    apply_event(cat, put_events(cat.hash_items([{"id": "i3", "features": {"k": "y"}}]))[0], at=100.0)
    apply_event(cat, remove_event(["i4"]), at=200.0)
    assert cat.history.times == [(51, 100.0), (52, 200.0)]
    assert cat.history.forget_below(150.0) == 51 and cat.history.due(51)
    apply_event(cat, sweep_event(None, 51), at=300.0)
    assert len(cat.history) == 1 and cat.history.complete_from == 51 and cat.history.times == [(52, 200.0)]
    state = {f"catalog.{k}": v for k, v in cat.to_state().items()}
    loaded = pop_catalog(state, SHOP, 1000)
    assert loaded is not None and loaded.to_bytes() == cat.to_bytes()
    assert [v for v, _ in loaded.history.times] == [52] and loaded.history.times[0][1] > 1e9
