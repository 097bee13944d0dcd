"""Checkpoints of a big hashed model (b=18, 20 MB of weights) off the event loop: encoded in a
thread while the loop keeps serving, bit for bit the state at their position, stored before the log
is trimmed, one at a time, waited for at shutdown, and loaded by a new replica."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

import service.runtime.checkpoints
from service.config import ModelSpec
from service.runtime import INLINE_CHECKPOINT_BYTES, ModelRuntime, Runtime
from service.serial import MAGIC_SPARSE, State, checksum, decode, encode, encode_sparse
from service.store import Checkpoint, MemoryStore
from tests.service.conftest import Start

pytestmark = pytest.mark.anyio

SPEC = ModelSpec(
    learner="banditron", hashing_bits=18, labels=[f"l{i}" for i in range(10)], reward_window_seconds=600
)
ENCODE_SECONDS = 0.5  # the encode is slowed down by this much, to hold the checkpoint in flight


@pytest.fixture
def encodes(monkeypatch: pytest.MonkeyPatch) -> list[threading.Thread]:
    """The threads the runtime's sparse encodings run in; each takes ``ENCODE_SECONDS`` longer."""
    threads: list[threading.Thread] = []

    def slow(state: State) -> bytes:
        threads.append(threading.current_thread())
        time.sleep(ENCODE_SECONDS)
        return encode_sparse(state)

    monkeypatch.setattr(service.runtime.checkpoints, "encode_sparse", slow)
    return threads


async def traffic(runtime: Runtime, n: int, seed: int, wait: bool = True) -> None:
    """``n`` predict + feedback pairs of 30 named string features; with ``wait``, each is applied
    before the next."""
    rng = np.random.default_rng(seed)
    for _ in range(n):
        values = rng.integers(0, 100, 30)
        p = await runtime.predict("h", {f"f{i}": f"v{v}" for i, v in enumerate(values)})
        out, applied = await runtime.feedback(p.decision_id, p.decision.label == values[0] % 10, wait=wait)
        assert out.claim is not None and applied == wait
        await asyncio.sleep(0)  # the memory store never suspends; a server's loop runs between requests


async def in_flight(runtime: Runtime) -> None:
    """Until the checkpoints in flight are done."""
    if runtime.checkpoints.in_flight:
        await asyncio.wait(list(runtime.checkpoints.in_flight.values()))


async def test_a_big_checkpoint_is_encoded_in_a_thread_while_decisions_go_on(
    start: Start, encodes: list[threading.Thread]
) -> None:
    r = await start(checkpoint_every=20, checkpoint_interval_seconds=3600)
    await r.create_model("h", SPEC)
    m = r.models["h"]
    assert m.learner.nbytes() > 300 * INLINE_CHECKPOINT_BYTES
    await traffic(r, 20, seed=0)  # event 20 starts the checkpoint, and that round returns at once
    t0 = time.monotonic()
    await traffic(r, 30, seed=1, wait=False)  # the loop answers meanwhile
    assert time.monotonic() - t0 < ENCODE_SECONDS / 2 and "h" in r.checkpoints.in_flight
    assert m.position == 20 and m.frozen is not None  # nothing is applied to the arrays being encoded
    events = await r.store.read_log("h", after=0)
    assert [e.position for e in events] == list(range(1, 51))  # not trimmed before it is stored
    await in_flight(r)
    assert len(encodes) == 1 and encodes[0] is not threading.main_thread()
    cp = await r.store.get_checkpoint("h")
    assert cp is not None and cp.position == 20 and cp.state.startswith(MAGIC_SPARSE)
    assert len(cp.state) < len(encode(m.learner.state(copy=False))) / 10  # only what was learned
    assert (await r.store.read_log("h", after=0))[0].position == 20  # trimmed once stored, to its event
    # Bit for bit the state after events 1..20, as a replica that applied exactly those holds it.
    replica = ModelRuntime("h", SPEC, m.incarnation, max_named=1000)
    for event in events[:20]:
        replica.apply(event)
    assert checksum(decode(cp.state)) == replica.checksum()
    # Thawed: the waiting events are applied, and that round starts the next checkpoint, at 50.
    assert await r.wait_applied(m, 50)
    await in_flight(r)
    cp = await r.store.get_checkpoint("h")
    assert cp is not None and cp.position == 50 and len(encodes) == 2 and m.frozen is None


async def test_stop_waits_for_the_checkpoint_in_flight(start: Start, encodes: list[threading.Thread]) -> None:
    r = await start(checkpoint_every=20, checkpoint_interval_seconds=3600)
    await r.create_model("h", SPEC)
    await traffic(r, 20, seed=0)
    assert "h" in r.checkpoints.in_flight
    await r.stop()
    cp = await r.store.get_checkpoint("h")
    assert cp is not None and cp.position == 20 and not r.checkpoints.in_flight


async def test_a_model_re_created_meanwhile_does_not_get_the_old_ones_checkpoint(
    start: Start, encodes: list[threading.Thread]
) -> None:
    r = await start(checkpoint_every=20, checkpoint_interval_seconds=3600)
    await r.create_model("h", SPEC)
    await traffic(r, 20, seed=0)
    assert "h" in r.checkpoints.in_flight
    await r.delete_model("h")
    await r.create_model("h", SPEC)
    await in_flight(r)
    assert await r.store.get_checkpoint("h") is None and r.checkpoints_written == 0


async def test_a_new_replica_loads_the_sparse_checkpoint_or_an_old_one_and_the_tail(start: Start) -> None:
    store = MemoryStore()
    settings = {"checkpoint_every": 20, "checkpoint_interval_seconds": 3600}
    r1 = await start(store, **settings)
    await r1.create_model("h", SPEC)
    await traffic(r1, 25, seed=0)
    await in_flight(r1)
    r2 = await start(store, **settings)
    m1, m2 = r1.models["h"], r2.models["h"]
    assert (m2.checkpoint_position, m2.position) == (20, 25)  # the checkpoint, then the tail
    assert m2.checksum() == m1.checksum()
    # A checkpoint written before the sparse encoding (CBST1) still loads.
    await store.put_checkpoint("h", Checkpoint(25, encode(m1.learner.state())))
    m3 = (await start(store, **settings)).models["h"]
    assert (m3.checkpoint_position, m3.position) == (25, 25) and m3.checksum() == m1.checksum()
    # Hashed: the weights column-major (Learner.use_sparse_layout) when created, loaded from a
    # checkpoint (in a thread) or made by a new ModelRuntime; the checksums above are the same as ever.
    for m in (m1, m2, m3):
        assert m.learner.W_.flags.f_contiguous and not m.learner.W_.flags.c_contiguous
    replica = ModelRuntime("h", SPEC, m1.incarnation, max_named=1000)
    assert replica.learner.W_.flags.f_contiguous
