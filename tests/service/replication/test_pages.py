"""Pages on two replicas (issue 53): a page decided on one replica and rewarded slot by slot through
the other is learned once per slot, and both replicas, a fresh replay of the log (event by event
and in batches) and the CCB reduction run offline on the same pages hold the same state bytes."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import numpy as np
import pytest

from service.config import ModelSpec, Settings
from service.learners.ccb_adf import CCB
from service.pages import page_records
from service.runtime import ModelRuntime, Runtime
from service.runtime.budgets import build_learner
from service.serial import encode
from service.store import ClaimStatus, DecisionRecord
from service.store.redis import RedisStore

pytestmark = pytest.mark.anyio

PAGES = 40
SPEC = {"actions": "features", "hashing_bits": 10, "seed": 3, "reward_window_seconds": 600}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def replicas(redis_url: str) -> AsyncIterator[tuple[Runtime, Runtime]]:
    prefix = f"test-{uuid.uuid4().hex}:"
    settings = Settings(store="memory", checkpoint_every=100_000, checkpoint_interval_seconds=3600)
    made: list[Runtime] = []
    try:
        for _ in range(2):
            rt = Runtime(RedisStore(redis_url, prefix=prefix), settings)
            await rt.start()
            made.append(rt)
        yield made[0], made[1]
    finally:
        for rt in made:
            await rt.stop()
            await rt.store.close()


async def test_a_page_decided_on_one_replica_and_rewarded_on_the_other_is_learned_once_per_slot(
    replicas: tuple[Runtime, Runtime],
) -> None:
    a, b = replicas
    spec = ModelSpec.model_validate(SPEC)
    await a.create_model("shop", spec)
    m = a.models["shop"]
    rng = np.random.default_rng(0)
    pages = []
    for t in range(PAGES):
        n = int(rng.integers(3, 7))
        actions = [
            {"id": f"i{int(k)}", "features": {"kind": f"k{int(k) % 3}", "price": float(k)}}
            for k in rng.choice(20, n, replace=False)
        ]
        slots = [{"id": p, "features": {"position": p}} for p in ("hero", "tile", "footer")]
        page = m.featurise_page({"user": f"u{t % 5}", "hour": float(t % 24)}, actions, slots)
        decision_id = a.store.route("shop", f"page-{t}")
        d = m.decide_page(page, decision_id)
        now = a.clock()
        base = DecisionRecord(decision_id, "shop", np.zeros(0), {}, m.position, now, now + 600, True)
        await a.store.put_page(page_records(base, page, m.pack_page(page), d))
        pages.append((decision_id, page, d))

    # every slot rewarded through b, in an order of its own per page; a second reward through a is refused
    learned = []
    for t, (decision_id, page, d) in enumerate(pages):
        for s in rng.permutation(3):
            reward: bool | float = bool(rng.random() < 0.4) if t % 3 else float(rng.choice([0.25, 0.75]))
            out = await b.store.claim_slot(decision_id, int(s), reward, b.clock())
            assert out.status is ClaimStatus.ACCEPTED
            again = await a.store.claim_slot(decision_id, int(s), True, a.clock())
            assert again.status is ClaimStatus.DUPLICATE
            learned.append((page, d, int(s), reward))

    await b.registry.resolve("shop")
    for rt in (a, b):
        await rt.catch_up(rt.models["shop"])
    ma, mb = a.models["shop"], b.models["shop"]
    assert ma.position == mb.position == 3 * PAGES
    assert ma.checksum() == mb.checksum()

    # a fresh replica replaying the log, event by event and in batches, holds the same bytes
    events = await a.store.read_log("shop", 0, limit=10_000)
    one, batched = ModelRuntime("shop", spec, "replay", 1000), ModelRuntime("shop", spec, "replay", 1000)
    for event in events:
        one.apply(event)
    for at in range(0, len(events), 7):
        batched.apply_batch(events[at : at + 7])
    assert one.checksum() == batched.checksum() == ma.checksum()

    # and so does the CCB reduction learning the same slots offline, in the log's order
    offline = CCB(build_learner(spec))
    for page, d, s, reward in learned:
        offline.learn_slot(page, d, s, reward)
    assert encode(offline.learner.state()) == ma.state_bytes()
