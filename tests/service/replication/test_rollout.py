"""Safe rollout on a shared Redis (issue 38 part 5): the automatic promotion is decided by one replica
(the rollout lease holder, in its sweep loop) and applied by every replica at the same log position,
with the same evidence; a replica started later replays it. Runtimes in this process, each with its
own Redis client, stand in for replicas (as in test_checkpoints.py)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from service.config import ModelSpec
from tests.service.replication.conftest import Start

pytestmark = pytest.mark.anyio

# label = the largest of three features; the baseline always shows label 0 (right a third of the time)
SPEC = ModelSpec(
    n_features=3,
    n_labels=3,
    rollout="apprentice",
    apprentice_epsilon=0.3,
    promote="auto",
    promote_min_decisions=300,
)
SETTINGS = {"sweep_interval_seconds": 0.1, "checkpoint_every": 1_000_000, "checkpoint_interval_seconds": 3600}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_both_replicas_switch_at_the_same_log_position(replicas: Start) -> None:
    r1, r2 = await replicas(**SETTINGS), await replicas(**SETTINGS)
    await r1.create_model("ro", SPEC)
    await r2.sync_models()
    rng = np.random.default_rng(0)
    for t in range(4000):
        a, b = (r1, r2) if t % 2 else (r2, r1)
        x = rng.random(3)
        baseline = 0 if a.models["ro"].rollout.mode != "online" else None
        p = await a.predict("ro", x.tolist(), baseline=baseline)
        await b.feedback(p.decision_id, p.decision.label == int(x.argmax()), wait=False)
        if t % 100 == 99:
            await asyncio.sleep(0.15)  # a sweep round on each replica
            if all(r.models["ro"].rollout.mode == "online" for r in (r1, r2)):
                break
    m1, m2 = r1.models["ro"], r2.models["ro"]
    assert m1.rollout.mode == m2.rollout.mode == "online"
    events = [e for e in await r1.store.read_log("ro", after=0, limit=100_000) if e.kind == "rollout"]
    assert len(events) == 1  # one replica decided
    doc = json.loads(events[0].state)  # type: ignore[arg-type]
    assert doc["reason"] == "auto" and doc["epoch"] == 0
    assert doc["evidence"]["n"] >= 300 and doc["evidence"]["difference"]["low"] > 0
    assert m1.rollout.changed == m2.rollout.changed
    assert m1.rollout.changed["position"] == events[0].position  # type: ignore[index]
    # the same state at the same version: learner and rollout
    position = await r1.store.log_position("ro")
    assert await r1.wait_applied(m1, position) and await r2.wait_applied(m2, position)
    assert m1.checksum() == m2.checksum()
    assert m1.rollout.to_state()["rollout.sums"].tobytes() == m2.rollout.to_state()["rollout.sums"].tobytes()
    # online now on both: no baseline needed, the learner's own distribution is served
    for r in (r1, r2):
        p = await r.predict("ro", [0.1, 0.9, 0.2])
        assert "rollout" not in p.decision.memo
    r3 = await replicas(**SETTINGS)  # replays the log: the switch at the same position
    m3 = r3.models["ro"]
    assert await r3.wait_applied(m3, position)
    assert m3.rollout.changed == m1.rollout.changed and m3.checksum() == m1.checksum()
