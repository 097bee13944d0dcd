"""The catalog's history on a shared Redis (issue 54, item 5): two replicas that decide over the
catalog while it changes (puts, replacements, removals, expiries retired by the sweep's ``items``
event) hold the same catalog bytes, history included, and rebuild every logged decision alike, as
does a replica started later from a checkpoint; the model as it was at each decision reproduces
the logged probability of the chosen item bit for bit."""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

import numpy as np
import pytest

from service.catalog_replay import rebuild
from service.config import ModelSpec
from service.decision_log import LogRecord
from service.runtime import Runtime
from service.runtime.catalog_requests import CatalogQuery
from tests.service.replication.conftest import Start

pytestmark = pytest.mark.anyio

SHOP = ModelSpec(actions="features", learner="squarecb-adf", hashing_bits=10)


def item(i: int, rng: np.random.Generator, expires: float | None = None) -> dict[str, Any]:
    features = {"category": f"c{int(rng.integers(3))}", "price": float(rng.integers(1, 9))}
    return {"id": f"sku-{i}", "features": features, "expires_at": expires}


async def records(r: Runtime) -> list[LogRecord]:
    out: list[LogRecord] = []
    async for page in await r.decision_log("shop"):
        out += page
    return [x for x in out if x.catalog is not None]


async def level(*rs: Runtime) -> None:
    """Every runtime has applied the whole log."""
    for r in rs:
        await r.catch_up(r.models["shop"])


def seen(rep: Any) -> list[tuple[str, list[int], list[float]]]:
    cat = rep.catalog
    out = []
    for s in rep.slots.tolist():
        v = cat.features(s)
        out.append((cat.id_of(s), v.idx.tolist(), v.val.tolist()))
    return out


async def test_two_replicas_and_a_later_one_rebuild_every_decision_alike(replicas: Start) -> None:
    rng = np.random.default_rng(5)
    a = await replicas(checkpoint_every=7, checkpoint_interval_seconds=3600)
    b = await replicas(checkpoint_every=7, checkpoint_interval_seconds=3600)
    await a.create_model("shop", SHOP)
    await b.resolve("shop")
    await a.items.put("shop", [item(i, rng) for i in range(30)])
    learners: dict[str, Any] = {}
    for step in range(40):
        writer = a if step % 2 else b
        op = step % 5
        if op == 0:
            await writer.items.put("shop", [item(int(i), rng) for i in rng.choice(40, 3, replace=False)])
        elif op == 1:
            soon = time.time() + 0.05
            await writer.items.put("shop", [item(100 + step, rng, soon)])
        elif op == 2:
            await asyncio.sleep(0.06)
            await writer.sweep()  # the expired item is retired by an items event
        elif op == 3 and f"sku-{step}" in writer.models["shop"].catalog:  # type: ignore[operator]
            await writer.items.remove("shop", f"sku-{step}")
        await level(a, b)
        for r in (a, b):  # each replica decides at its own catalog version
            m = r.models["shop"]
            learner = copy.deepcopy(m.learner)
            query = CatalogQuery(where={"category": ["c0", "c1"]}) if step % 3 else CatalogQuery()
            p = await r.predict("shop", {"user": f"u{step % 4}"}, catalog=query)
            learners[p.decision_id] = learner
            if step % 2:
                await r.feedback(p.decision_id, True, wait=True)
        await level(a, b)
    await level(a, b)
    ca, cb = a.models["shop"].catalog, b.models["shop"].catalog
    assert ca is not None and cb is not None and len(ca.history) > 10
    assert ca.to_bytes() == cb.to_bytes()
    await a.checkpoints.wait()
    c = await replicas()
    await level(c)
    cc = c.models["shop"].catalog
    assert cc is not None and cc.to_bytes() == ca.to_bytes() and c.models["shop"].checkpoint_position > 0
    logged = await records(a)
    assert len(logged) == 80
    for record in logged:
        reps = [rebuild(cat, record) for cat in (ca, cb, cc)]
        assert seen(reps[0]) == seen(reps[1]) == seen(reps[2])
        assert reps[0].pmf(learners[record.decision_id])[reps[0].index] == record.probs[0]
