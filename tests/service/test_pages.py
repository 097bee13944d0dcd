"""Page records (issue 53, :mod:`service.pages`): a one-slot page without slot features is today's
single decision byte for byte, and slot ids map back to their page."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest

from service.config import ModelSpec, Settings
from service.pages import page_records, split_slot_id
from service.runtime import Runtime
from service.store import DecisionRecord, MemoryStore
from service.store.base import slot_decision_id
from service.store.codec import encode_decision, encode_x

pytestmark = pytest.mark.anyio

SPEC = {"actions": "features", "hashing_bits": 10, "seed": 3, "reward_window_seconds": 600}
ACTIONS = [{"id": f"i{k}", "features": {"kind": f"k{k % 2}", "price": 1.5 * k}} for k in range(5)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def runtimes() -> AsyncIterator[tuple[Runtime, Runtime]]:
    made = [Runtime(MemoryStore(), Settings(store="memory")) for _ in range(2)]
    for rt in made:
        await rt.start()
        await rt.create_model("shop", ModelSpec.model_validate(SPEC))
    try:
        yield made[0], made[1]
    finally:
        for rt in made:
            await rt.stop()


async def test_a_one_slot_page_without_slot_features_is_todays_record_and_event(
    runtimes: tuple[Runtime, Runtime],
) -> None:
    single, paged = runtimes
    features = {"user": "u1", "hour": 13.0}
    p = await single.predict("shop", features, actions=ACTIONS, event_id="e1")
    m = paged.models["shop"]
    page = m.featurise_page(features, ACTIONS, [{"id": "only"}])
    d = m.decide_page(page, "e1")
    base = DecisionRecord("e1", "shop", np.zeros(0), {}, m.position, 0.0, 600.0, True)
    [record] = page_records(base, page, m.pack_page(page), d)
    await paged.store.put_page([record])
    want, got = await single.store.get_decision(p.decision_id), await paged.store.get_decision("e1")
    assert want is not None and got is not None
    assert encode_x(got.x) == encode_x(want.x)
    assert encode_decision(got.decision) == encode_decision(want.decision)
    await single.feedback(p.decision_id, True, True)
    assert (await paged.store.claim_slot("e1", 0, True, 1.0)).claim is not None  # slot 0 is the decision
    [e1], [e2] = await single.store.read_log("shop", 0), await paged.store.read_log("shop", 0)
    assert encode_x(e2.x) == encode_x(e1.x) and encode_decision(e2.decision) == encode_decision(e1.decision)
    await paged.catch_up(m)
    await single.catch_up(single.models["shop"])
    assert m.checksum() == single.models["shop"].checksum()


@pytest.mark.parametrize("decision_id", ["abc", "a.b", "q2v0yN3mVt0dQ1bB5mM0aQ.x3", "client:id-7.z"])
def test_slot_ids_keep_the_routing_suffix_and_map_back(decision_id: str) -> None:
    ids = [slot_decision_id(decision_id, s) for s in range(12)]
    assert ids[0] == decision_id and len(set(ids)) == 12
    if "." in decision_id:
        assert all(i.rsplit(".", 1)[1] == decision_id.rsplit(".", 1)[1] for i in ids)
    assert [split_slot_id(i) for i in ids] == [(decision_id, s) for s in range(12)]
