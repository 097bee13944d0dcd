"""The follower's pause (setting ``follow_pause_seconds``, issue 40): after a round that brought events
a replica waits before its next read, so that under load one read brings many; a replica that was
idle applies the first event of a burst at once, and one whose read came back full (a backlog) reads
again at once. Two runtimes on one real Redis: the writer appends, the follower tails."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from service.config import ModelSpec, Settings
from service.runtime import Runtime
from service.store.base import Event
from service.store.redis import _TAIL_BATCH, RedisStore

pytestmark = pytest.mark.anyio

PAUSE = 3.0  # long, so that a pause taken or skipped is seconds apart even on a loaded machine
SPEC = {"learner": "banditron", "n_features": 4, "n_labels": 3, "reward_window_seconds": 600}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def pair(redis_url: str) -> AsyncIterator[tuple[Runtime, Runtime]]:
    prefix = f"test-{uuid.uuid4().hex}:"
    settings = {"store": "memory", "checkpoint_every": 100_000, "checkpoint_interval_seconds": 3600}
    writer = Runtime(RedisStore(redis_url, prefix=prefix), Settings(**settings))
    follower = Runtime(RedisStore(redis_url, prefix=prefix), Settings(**settings, follow_pause_seconds=PAUSE))
    for rt in (writer, follower):
        await rt.start()
    try:
        yield writer, follower
    finally:
        for rt in (writer, follower):
            await rt.stop()
            await rt.store.close()


async def _until(follower: Runtime, position: int, timeout: float) -> float:
    """Seconds until ``follower`` applied ``position`` of model "m"; fails after ``timeout``."""
    start = time.monotonic()
    while (m := follower.models.get("m")) is None or m.position < position:
        assert time.monotonic() - start < timeout, f"position {position} not applied in {timeout} s"
        await asyncio.sleep(0.01)
    return time.monotonic() - start


async def test_a_follower_pauses_after_a_round_but_reads_a_backlog_at_once(
    pair: tuple[Runtime, Runtime],
) -> None:
    writer, follower = pair
    await writer.create_model("m", ModelSpec.model_validate(SPEC))
    await _until(follower, 0, 10.0)
    await asyncio.sleep(PAUSE + 0.5)  # idle now: whatever pause the creation began is over

    await writer.store.append("m", Event(0, "reset", at=1.0))
    assert await _until(follower, 1, PAUSE / 2) < PAUSE / 2  # idle: at once
    # A backlog of more events than one read brings, appended during the pause that event began.
    n = _TAIL_BATCH + 40
    for i in range(n):
        await writer.store.append("m", Event(0, "reset", at=2.0 + i))
    await asyncio.sleep(0.3)
    assert follower.models["m"].position == 1  # pausing
    # After the pause, the whole backlog in back-to-back reads (a second pause would take until 2 PAUSE).
    took = await _until(follower, 1 + n, 2 * PAUSE)
    assert took < PAUSE + 1.0, took
