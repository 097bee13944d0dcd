"""A replica applies a log in batches (issue 40): bit for bit what applying it event by event gives.

Every bandit learner (fixed labels, dense and hashed; candidate actions) learns a log written to a
real Redis by a runtime serving decisions: clicks, graded rewards, eligible-label masks, a reset in
the middle. A fresh model applies that log one event at a time (:meth:`ModelRuntime.apply`), another
in batches of uneven sizes (:meth:`ModelRuntime.apply_batch`, the follower's path); their checksums
and positions must be equal.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import numpy as np
import pytest

from service.config import ModelSpec, Settings
from service.learners.base import learners
from service.runtime import ModelRuntime, Runtime
from service.store.base import Event
from service.store.redis import RedisStore

pytestmark = pytest.mark.anyio

D, K, N = 6, 3, 60
BANDIT = sorted(name for name, cls in learners.items() if not cls.full_information and not cls.actions)
ACTIONS = sorted(name for name, cls in learners.items() if cls.actions)
BATCHES = (1, 7, 2, 64, 3)  # cycled: runs of every length, a reset inside some of them


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def runtime(redis_url: str) -> AsyncIterator[Runtime]:
    store = RedisStore(redis_url, prefix=f"test-{uuid.uuid4().hex}:")
    rt = Runtime(store, Settings(store="memory", checkpoint_every=100_000, checkpoint_interval_seconds=3600))
    await rt.start()
    try:
        yield rt
    finally:
        await rt.stop()
        await store.close()


def _spec(learner: str, kind: str) -> dict[str, object]:
    base: dict[str, object] = {"learner": learner, "seed": 3, "reward_window_seconds": 600}
    if kind == "actions":
        return {**base, "actions": "features", "hashing_bits": 10}
    if kind == "hashed":
        return {**base, "hashing_bits": 10, "n_labels": K}
    return {**base, "n_features": D, "n_labels": K}


async def _log(rt: Runtime, name: str, kind: str, seed: int) -> list[Event]:
    """``N`` decisions and their feedback (a reset after the first third), the model's whole log."""
    rng = np.random.default_rng(seed)
    for t in range(N):
        if t == N // 3:
            await rt.reset_model(name)
        actions = None
        if kind == "dense":
            features: object = rng.normal(size=D).tolist()
        else:
            features = {f"f{j}": float(rng.normal()) for j in range(int(rng.integers(1, 8)))}
        if kind == "actions":
            actions = [
                {"id": f"a{i}", "features": {"kind": f"k{i}", "w": float(rng.random())}} for i in range(3)
            ]
        eligible = [0, 2] if kind != "actions" and t % 5 == 0 else None
        p = await rt.predict(name, features, eligible=eligible, actions=actions)  # type: ignore[arg-type]
        reward: bool | float = bool(rng.random() < 0.5) if t % 4 else float(rng.choice([0.25, 0.75]))
        await rt.feedback(p.decision_id, reward, False)
    events = await rt.store.read_log(name, 0, limit=10_000)
    assert [e.position for e in events] == list(range(1, N + 2))  # N learns and the reset
    return events


def _fresh(rt: Runtime, name: str) -> ModelRuntime:
    return ModelRuntime(name, rt.models[name].spec, "replay", 1000)


@pytest.mark.parametrize(
    ("learner", "kind"),
    [(n, "dense") for n in BANDIT] + [(n, "hashed") for n in BANDIT] + [(n, "actions") for n in ACTIONS],
)
async def test_batched_apply_is_bit_identical_to_one_by_one(
    runtime: Runtime, learner: str, kind: str
) -> None:
    name = f"batch-{learner}-{kind}"
    await runtime.create_model(name, ModelSpec.model_validate(_spec(learner, kind)))
    events = await _log(runtime, name, kind, seed=len(name))

    one = _fresh(runtime, name)
    for event in events:
        one.apply(event)
    batched, at, i = _fresh(runtime, name), 0, 0
    while at < len(events):
        size = BATCHES[i % len(BATCHES)]
        batched.apply_batch(events[at : at + size])
        at, i = at + size, i + 1

    assert (batched.position, batched.checksum()) == (one.position, one.checksum()) == (N + 1, one.checksum())
    # and both are what the serving runtime holds after applying its own log
    serving = runtime.models[name]
    await runtime.catch_up(serving)
    assert (serving.position, serving.checksum()) == (one.position, one.checksum())
