"""Checkpoints on a shared Redis (issue 4, must-show 5): one lease holder writes them every N events
or T seconds, the log is trimmed below them, a new replica starts from checkpoint + tail, and a
checkpoint is validated on load, never unpickled. Runtimes in this process, each with its own Redis
client, stand in for replicas (their counters of checkpoints written are visible here).
"""

from __future__ import annotations

import asyncio
import pickle
import time
from pathlib import Path

import numpy as np
import pytest

from service.config import ModelSpec, Settings
from service.runtime import ModelUnavailableError, Runtime
from service.serial import encode
from service.store import Checkpoint
from service.store.redis import RedisStore
from tests.service.replication.conftest import Start

pytestmark = pytest.mark.anyio

SPEC = ModelSpec(learner="banditron", n_features=4, n_labels=3, reward_window_seconds=600)


async def traffic(runtimes: list[Runtime], n: int, seed: int) -> None:
    """``n`` predict/feedback pairs alternating over ``runtimes``; each waits until applied where sent."""
    rng = np.random.default_rng(seed)
    for t in range(n):
        a, b = runtimes[t % len(runtimes)], runtimes[(t + 1) % len(runtimes)]
        p = await a.predict("cp", rng.normal(size=4).tolist())
        out, applied = await b.feedback(p.decision_id, bool(rng.random() < 0.5), wait=True)
        assert out.claim is not None and applied


async def test_one_lease_holder_checkpoints_every_n_and_a_new_replica_starts_from_it(replicas: Start) -> None:
    r1 = await replicas(checkpoint_every=10, checkpoint_interval_seconds=3600)
    r2 = await replicas(checkpoint_every=10, checkpoint_interval_seconds=3600)
    await r1.create_model("cp", SPEC)
    await r2.sync_models()
    await traffic([r1, r2], 65, seed=0)
    for r in (r1, r2):
        assert await r.wait_applied(r.models["cp"], 65)
    written = sorted([r1.checkpoints_written, r2.checkpoints_written])
    assert written[0] == 0 and written[1] >= 5  # one writer: the lease holder
    store = r1.store
    cp = await store.get_checkpoint("cp")
    # every 10 events or more: a follower applies what one read brings, and checkpoints at the end
    # of the batch that reached 10 since the last one (60 when each read brought one event)
    assert cp is not None and 65 - 10 < cp.position <= 65
    # trimmed up to the checkpoint, whose own event stays (Checkpoints._write says why)
    tail = list(range(cp.position, 66))
    assert [e.position for e in await store.read_log("cp", after=0)] == tail
    r3 = await replicas(checkpoint_every=10, checkpoint_interval_seconds=3600)
    m3 = r3.models["cp"]
    assert (m3.checkpoint_position, m3.position) == (cp.position, 65)  # the checkpoint, then the tail
    assert m3.checksum() == r1.models["cp"].checksum() == r2.models["cp"].checksum()


async def test_a_replica_behind_a_checkpoint_at_the_end_of_the_log_catches_up_without_a_new_event(
    replicas: Start, redis_url: str
) -> None:
    """The lease holder checkpoints at the last event of a log that then goes quiet; replicas that
    had not followed it yet (loaded at 0, their loops not started: as if asleep meanwhile) catch up
    from the checkpoint with no further event appended: one through its catch-up (an admin read, a
    ``?wait``), one through its tail loop (the kill -9 test's flake: a replica left at 411 of 419
    once the load had ended, the last checkpoint at 419 and the log trimmed up to it)."""
    r1 = await replicas(checkpoint_every=10, checkpoint_interval_seconds=3600)
    await r1.create_model("cp", SPEC)
    lagging = [Runtime(RedisStore(redis_url, prefix=r1.store.prefix), Settings()) for _ in range(2)]
    try:
        for r in lagging:
            await r.open()
            await r.sync_models()  # the model at version 0, no loop running
        await traffic([r1], 20, seed=3)
        assert await r1.wait_applied(r1.models["cp"], 20)
        cp = await r1.store.get_checkpoint("cp")
        assert cp is not None and cp.position == 20  # the log's last event
        want = (20, r1.models["cp"].checksum())

        by_catch_up, by_tail = lagging
        m = by_catch_up.models["cp"]
        assert m.position == 0
        await by_catch_up.catch_up(m)
        assert (m.position, m.checksum()) == want

        assert by_tail.models["cp"].position == 0
        await by_tail.load()  # starts its tail loop
        deadline = time.monotonic() + 10
        while by_tail.models["cp"].position < 20:
            assert time.monotonic() < deadline, f"stuck at {by_tail.models['cp'].position} of 20"
            await asyncio.sleep(0.05)
        assert (by_tail.models["cp"].position, by_tail.models["cp"].checksum()) == want
    finally:
        for r in lagging:
            await r.stop()
            await r.store.close()


async def test_checkpoints_every_t_seconds_and_the_lease_moves_when_its_holder_stops(replicas: Start) -> None:
    settings = {"checkpoint_every": 1_000_000, "checkpoint_interval_seconds": 0.4}
    r1, r2 = await replicas(**settings), await replicas(**settings)
    await r1.create_model("cp", SPEC)
    await r2.sync_models()
    await traffic([r1, r2], 3, seed=1)
    await asyncio.sleep(1.5)  # > T plus a tail round: the holder saw time pass and checkpointed
    cp = await r1.store.get_checkpoint("cp")
    assert cp is not None and cp.position == 3
    holder, other = (r1, r2) if r1.checkpoints_written else (r2, r1)
    assert other.checkpoints_written == 0
    await holder.stop()  # its lease (3 T) lapses; the other replica takes over
    await traffic([other], 2, seed=2)
    await asyncio.sleep(2.5)
    cp = await other.store.get_checkpoint("cp")
    assert cp is not None and cp.position == 5 and other.checkpoints_written >= 1


class Boobytrap:
    """Unpickling this object creates ``path``: proof that a loader ran pickle."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[Path]]:
        return (Path.touch, (self.path,))


async def test_checkpoints_are_validated_on_load_and_never_unpickled(replicas: Start, tmp_path: Path) -> None:
    r1 = await replicas()
    await r1.create_model("cp", SPEC)
    sentinel = tmp_path / "unpickled"
    bad = [
        pickle.dumps(Boobytrap(sentinel)),
        encode({"schema_version": 1, "t_": 0, "rng_": np.zeros(6, np.uint64), "W_": np.zeros((2, 2))}),
        encode(r1.models["cp"].learner.state())[:-8],  # truncated
    ]
    for data in bad:
        await r1.store.redis.delete(r1.store.key("cp", "cp"))
        await r1.store.put_checkpoint("cp", Checkpoint(1, data))
        # the replica starts (its other models are served); this one is refused and reported
        r = await replicas()
        assert "cp" not in r.models
        assert "StateFormatError" in r.registry.load_failures["cp"].reason
        with pytest.raises(ModelUnavailableError, match="cannot be loaded on this replica"):
            r.get("cp")
    assert not sentinel.exists()
