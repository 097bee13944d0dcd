"""The store contract (service/store/base.py), run against every implementation in conftest.STORES."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from service.learners import Decision
from service.serial import encode
from service.store import (
    Checkpoint,
    ClaimStatus,
    DecisionRecord,
    Event,
    ModelExistsError,
    Store,
    UnknownModelError,
)

pytestmark = pytest.mark.anyio

CONFIG = {"learner": "banditron", "n_features": 3, "n_labels": 2, "params": {"gamma": 0.1}}


def record(decision_id: str, model: str = "m", created: float = 0.0, window: float = 10.0) -> DecisionRecord:
    x = np.array([0.1, -2.5, 1e-300])
    d = Decision(np.array([0.95, 0.05]), 1, {"greedy": 0})
    return DecisionRecord(decision_id, model, x, d.to_state(), 7, created, created + window)


async def test_models_create_get_list_delete(store: Store) -> None:
    await store.create_model("m", CONFIG)
    assert await store.get_model("m") == CONFIG
    with pytest.raises(ModelExistsError):
        await store.create_model("m", CONFIG)
    assert await store.list_models() == {"m": CONFIG}
    await store.delete_model("m")
    assert await store.list_models() == {}
    with pytest.raises(UnknownModelError):
        await store.get_model("m")
    with pytest.raises(UnknownModelError):
        await store.delete_model("m")


async def test_decision_record_round_trips_exactly(store: Store) -> None:
    await store.create_model("m", CONFIG)
    r = record("a")
    await store.put_decision(r)
    got = await store.get_decision("a")
    assert got is not None
    assert got.x.dtype == np.float64 and got.x.tobytes() == r.x.tobytes()
    assert encode(got.decision) == encode(r.decision)
    assert (got.model, got.model_version, got.created_at, got.expires_at) == ("m", 7, 0.0, 10.0)
    assert (await store.counts("m")).decisions == 1
    assert (await store.counts("m")).pending == 1


async def test_claim_appends_one_learn_event(store: Store) -> None:
    await store.create_model("m", CONFIG)
    r = record("a")
    await store.put_decision(r)
    out = await store.claim_and_append("a", True, now=1.0)
    assert out.status is ClaimStatus.ACCEPTED and out.claim is not None
    assert (out.claim.outcome, out.claim.position, out.claim.model) == ("click", 1, "m")
    [ev] = await store.read_log("m", after=0)
    assert (ev.position, ev.kind, ev.decision_id, ev.reward, ev.outcome) == (1, "learn", "a", True, "click")
    assert ev.x is not None and ev.x.tobytes() == r.x.tobytes()
    assert ev.decision is not None and encode(ev.decision) == encode(r.decision)
    assert await store.get_decision("a") is None
    c = await store.counts("m")
    assert (c.decisions, c.clicks, c.no_clicks, c.expired, c.pending, c.ctr) == (1, 1, 0, 0, 0, 1.0)


async def test_second_claim_is_a_duplicate_with_the_first_outcome(store: Store) -> None:
    await store.create_model("m", CONFIG)
    await store.put_decision(record("a"))
    await store.claim_and_append("a", False, now=1.0)
    out = await store.claim_and_append("a", True, now=2.0)
    assert out.status is ClaimStatus.DUPLICATE and out.claim is not None
    assert (out.claim.outcome, out.claim.position) == ("no_click", 1)
    assert await store.log_position("m") == 1
    assert (await store.counts("m")).clicks == 0


async def test_unknown_id(store: Store) -> None:
    await store.create_model("m", CONFIG)
    out = await store.claim_and_append("nope", True, now=1.0)
    assert out.status is ClaimStatus.UNKNOWN and out.claim is None


async def test_feedback_after_the_window_is_expired_and_claims_nothing(store: Store) -> None:
    await store.create_model("m", CONFIG)
    await store.put_decision(record("a", window=10.0))
    out = await store.claim_and_append("a", True, now=10.0)
    assert out.status is ClaimStatus.EXPIRED
    assert await store.log_position("m") == 0
    assert await store.get_decision("a") is not None  # left for expire_due


async def test_expire_due_applies_no_click_once(store: Store) -> None:
    await store.create_model("m", CONFIG)
    await store.put_decision(record("a", created=0.0, window=5.0))
    await store.put_decision(record("b", created=1.0, window=5.0))
    await store.put_decision(record("c", created=2.0, window=5.0))
    await store.claim_and_append("b", True, now=3.0)  # answered in time: never expires
    claims = await store.expire_due("m", now=6.5, default_reward="no_click")
    assert [(c.decision_id, c.outcome, c.position) for c in claims] == [("a", "expired", 2)]
    assert await store.expire_due("m", now=6.5, default_reward="no_click") == []
    ev = (await store.read_log("m", after=1))[0]
    assert (ev.kind, ev.decision_id, ev.reward, ev.outcome) == ("learn", "a", False, "expired")
    out = await store.claim_and_append("a", True, now=6.6)
    assert out.status is ClaimStatus.EXPIRED and out.claim is not None and out.claim.position == 2
    assert [c.decision_id for c in await store.expire_due("m", now=100.0, default_reward="no_click")] == ["c"]
    c = await store.counts("m")
    assert (c.decisions, c.clicks, c.no_clicks, c.expired, c.pending) == (3, 1, 0, 2, 0)
    assert await store.log_position("m") == 3


async def test_expire_due_drop_appends_nothing(store: Store) -> None:
    await store.create_model("m", CONFIG)
    await store.put_decision(record("a", window=1.0))
    [claim] = await store.expire_due("m", now=2.0, default_reward="drop")
    assert (claim.outcome, claim.position) == ("expired", None)
    assert await store.log_position("m") == 0
    assert (await store.claim_and_append("a", False, now=3.0)).status is ClaimStatus.EXPIRED


async def test_concurrent_claims_accept_exactly_one(store: Store) -> None:
    await store.create_model("m", CONFIG)
    await store.put_decision(record("a"))
    outs = await asyncio.gather(*(store.claim_and_append("a", i % 2 == 0, now=1.0) for i in range(50)))
    statuses = [o.status for o in outs]
    assert statuses.count(ClaimStatus.ACCEPTED) == 1
    assert statuses.count(ClaimStatus.DUPLICATE) == 49
    assert await store.log_position("m") == 1


async def test_claims_are_forgotten_after_claim_ttl(store: Store) -> None:
    await store.create_model("m", CONFIG)
    await store.put_decision(record("a"))
    await store.claim_and_append("a", True, now=1.0)
    assert (await store.claim_and_append("a", True, now=100.9)).status is ClaimStatus.DUPLICATE
    assert (await store.claim_and_append("a", True, now=101.0)).status is ClaimStatus.UNKNOWN


async def test_log_positions_are_contiguous_and_readable_in_pages(store: Store) -> None:
    await store.create_model("m", CONFIG)
    await store.put_decision(record("a"))
    await store.claim_and_append("a", True, now=1.0)
    assert await store.append("m", Event(0, "reset", at=2.0)) == 2
    assert await store.append("m", Event(0, "import", at=3.0, state=b"\x00\x01state")) == 3
    log = await store.read_log("m", after=0)
    assert [(e.position, e.kind) for e in log] == [(1, "learn"), (2, "reset"), (3, "import")]
    assert log[2].state == b"\x00\x01state"
    assert [e.position for e in await store.read_log("m", after=1, limit=1)] == [2]
    assert await store.read_log("m", after=3) == []
    with pytest.raises(UnknownModelError):
        await store.read_log("other", after=0)


async def test_checkpoints_keep_the_latest_and_trim_the_log(store: Store) -> None:
    await store.create_model("m", CONFIG)
    assert await store.get_checkpoint("m") is None
    for i in range(3):
        await store.append("m", Event(0, "reset", at=float(i)))
    await store.put_checkpoint("m", Checkpoint(2, b"two"))
    await store.put_checkpoint("m", Checkpoint(1, b"one"))  # older: ignored
    cp = await store.get_checkpoint("m")
    assert cp is not None and (cp.position, cp.state) == (2, b"two")
    await store.trim_log("m", 2)
    assert [e.position for e in await store.read_log("m", after=0)] == [3]
    assert await store.log_position("m") == 3


async def test_delete_model_forgets_its_decisions_and_log(store: Store) -> None:
    await store.create_model("m", CONFIG)
    await store.put_decision(record("a"))
    await store.delete_model("m")
    assert await store.get_decision("a") is None
    await store.create_model("m", CONFIG)
    assert await store.log_position("m") == 0
    assert (await store.counts("m")).decisions == 0
    assert await store.get_checkpoint("m") is None


async def test_ping(store: Store) -> None:
    await store.ping()
