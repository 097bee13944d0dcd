"""The store contract (service/store/base.py), run against every implementation in conftest.STORES."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest

from service.learners import Decision, make_learner
from service.learners.ccb_adf import CCB
from service.pages import page_decision_of, page_records, page_slot
from service.serial import encode
from service.slots import PageFeaturiser
from service.store import (
    ACTIVITY_MINUTES,
    ActivateStatus,
    Activity,
    Checkpoint,
    ClaimStatus,
    DecisionExistsError,
    DecisionRecord,
    Event,
    Heartbeat,
    LoggedDecision,
    ModelExistsError,
    Store,
    UnknownModelError,
)
from service.store.base import slot_decision_id
from service.store.redis import RedisStore

pytestmark = pytest.mark.anyio

CONFIG = {"learner": "banditron", "n_features": 3, "n_labels": 2, "params": {"gamma": 0.1}}


def record(decision_id: str, model: str = "m", created: float = 0.0, window: float = 10.0) -> DecisionRecord:
    x = np.array([0.1, -2.5, 1e-300])
    d = Decision(np.array([0.95, 0.05]), 1, {"greedy": 0})
    return DecisionRecord(decision_id, model, x, d.to_state(), 7, created, created + window)


def logged(decision_id: str, model: str = "m", created: float = 0.0, window: float = 10.0) -> DecisionRecord:
    """:func:`record`, kept in the model's decision log too."""
    return replace(record(decision_id, model, created, window), logged=True)


def deferred(decision_id: str, created: float = 0.0, window: float = 10.0) -> DecisionRecord:
    """:func:`logged`, deferred: learned only if activated within its window."""
    return replace(logged(decision_id, created=created, window=window), deferred=True)


async def read_all(store: Store, model: str, **kw: float | int) -> list[LoggedDecision]:
    """Every page of ``model``'s decision log (``since``, ``until``, ``limit`` passed on)."""
    out: list[LoggedDecision] = []
    after = None
    while True:
        page, after = await store.read_decision_log(model, after=after, **kw)  # type: ignore[arg-type]
        out += page
        if after is None:
            return out


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


async def test_a_taken_id_is_refused_while_pending_or_claimed(store: Store) -> None:
    await store.create_model("m", CONFIG)
    await store.put_decision(record("a"))
    with pytest.raises(DecisionExistsError, match="'a"):
        await store.put_decision(record("a", created=1.0))
    await store.claim_and_append("a", True, now=1.0)
    with pytest.raises(DecisionExistsError):
        await store.put_decision(record("a", created=2.0))
    assert (await store.counts("m")).decisions == 1
    assert [e.decision_id for e in await store.read_log("m", after=0)] == ["a"]


async def test_concurrent_puts_of_one_id_save_exactly_one(store: Store) -> None:
    await store.create_model("m", CONFIG)
    outs = await asyncio.gather(
        *(store.put_decision(record("a", created=float(i))) for i in range(20)), return_exceptions=True
    )
    assert sum(o is None for o in outs) == 1
    assert all(isinstance(o, DecisionExistsError) for o in outs if o is not None)
    c = await store.counts("m")
    assert (c.decisions, c.pending) == (1, 1)


async def test_a_taken_logged_id_leaves_no_trace_and_later_decisions_are_saved(store: Store) -> None:
    """Issue 51 item 1: a taken id changes nothing, so a decision created a little earlier (a
    concurrent request, or a replica whose clock is behind) is still saved after it. On Redis the
    refused decision's entry was added to the decision log and deleted again, and the next decision
    behind it failed inside Redis (a 500 for another client)."""
    await store.create_model("m", CONFIG)
    await store.put_decision(logged("a", created=100.0))
    await store.put_decision(logged("b", created=100.005))
    with pytest.raises(DecisionExistsError):
        await store.put_decision(logged("b", created=100.006))
    await store.put_decision(logged("c", created=100.004))  # 2 ms behind the refused one
    await store.put_decision(logged("d", created=100.0061))
    # in creation order (Redis: arrival order, which differs only under such skew)
    assert sorted(e.decision_id for e in await read_all(store, "m")) == ["a", "b", "c", "d"]
    c = await store.counts("m")
    assert (c.decisions, c.pending) == (4, 4)


async def test_concurrent_puts_of_one_logged_id_beside_other_decisions(store: Store) -> None:
    """50 puts of one id (creation times out of order, as concurrent requests of two replicas) and 20
    of fresh ids at once: exactly one of the first saved, every fresh one saved, nothing else kept."""
    await store.create_model("m", CONFIG)
    await store.put_decision(logged("first", created=200.0))
    taken = [store.put_decision(logged("same", created=200.0 + ((7 * i) % 50) / 1000)) for i in range(50)]
    fresh = [store.put_decision(logged(f"o{i}", created=200.0 + ((11 * i) % 20) / 1000)) for i in range(20)]
    mixed = [c for pair in zip(taken[:20], fresh, strict=True) for c in pair] + taken[20:]
    outs = await asyncio.gather(*mixed, return_exceptions=True)
    same, others = outs[0:40:2] + outs[40:], outs[1:40:2]
    assert sum(o is None for o in same) == 1
    assert all(isinstance(o, DecisionExistsError) for o in same if o is not None)
    assert others == [None] * 20
    ids = [e.decision_id for e in await read_all(store, "m")]
    assert sorted(ids) == sorted(["first", "same", *(f"o{i}" for i in range(20))])
    assert (await store.counts("m")).pending == 22
    for i in range(20):  # each learned once
        assert (await store.claim_and_append(f"o{i}", True, now=201.0)).status is ClaimStatus.ACCEPTED
    assert [e.decision_id for e in await store.read_log("m", after=0)] == [f"o{i}" for i in range(20)]


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


# -- deferred decisions (issue 38) --------------------------------------------------------------------


async def test_deferred_activate_then_feedback_learns_once(store: Store) -> None:
    await store.create_model("m", CONFIG)
    await store.put_decision(deferred("a"))
    got = await store.get_decision("a")
    assert got is not None and got.deferred and got.activated_at is None
    out = await store.activate("a", now=1.0)
    assert (out.status, out.claim, out.deferred, out.reward) == (ActivateStatus.ACTIVATED, None, True, None)
    again = await store.activate("a", now=2.0)
    assert (again.status, again.deferred) == (ActivateStatus.ALREADY, True)
    got = await store.get_decision("a")
    assert got is not None and got.activated_at == 1.0
    fb = await store.claim_and_append("a", True, now=3.0)
    assert fb.status is ClaimStatus.ACCEPTED and fb.claim is not None
    assert (fb.claim.position, fb.claim.deferred, fb.claim.activated) == (1, True, True)
    [ev] = await store.read_log("m", after=0)
    assert (ev.decision_id, ev.reward, ev.outcome) == ("a", True, "click")
    late = await store.activate("a", now=4.0)
    assert late.status is ActivateStatus.ALREADY and late.claim is not None and late.claim.position == 1
    c = await store.counts("m")
    assert (c.decisions, c.deferred, c.activated, c.clicks, c.pending, c.dropped_unactivated) == (
        1,
        1,
        1,
        1,
        0,
        0,
    )


async def test_deferred_feedback_before_activate_is_held_until_it(store: Store) -> None:
    await store.create_model("m", CONFIG)
    await store.put_decision(deferred("a"))
    await store.put_decision(deferred("g"))
    held = await store.claim_and_append("a", True, now=1.0)
    assert held.status is ClaimStatus.HELD and held.claim is not None
    assert (held.claim.outcome, held.claim.position) == ("click", None)
    assert (await store.claim_and_append("g", 0.25, now=1.0)).status is ClaimStatus.HELD
    dup = await store.claim_and_append("a", False, now=2.0)
    assert dup.status is ClaimStatus.DUPLICATE and dup.claim is not None and dup.claim.outcome == "click"
    assert await store.log_position("m") == 0 and await store.get_decision("a") is not None
    assert (await store.counts("m")).clicks == 0  # nothing learned yet
    out = await store.activate("a", now=3.0)
    assert (out.status, out.reward) == (ActivateStatus.ACTIVATED, True) and out.claim is not None
    assert (out.claim.outcome, out.claim.position, out.claim.activated) == ("click", 1, True)
    graded = await store.activate("g", now=4.0)
    assert graded.reward == 0.25 and graded.claim is not None and graded.claim.position == 2
    events = await store.read_log("m", after=0)
    assert [(e.decision_id, e.reward, e.outcome) for e in events] == [
        ("a", True, "click"),
        ("g", 0.25, "reward"),
    ]
    after = await store.claim_and_append("a", False, now=5.0)
    assert after.status is ClaimStatus.DUPLICATE and after.claim is not None and after.claim.position == 1
    assert (await store.activate("a", now=5.0)).status is ActivateStatus.ALREADY
    c = await store.counts("m")
    assert (c.clicks, c.graded, c.graded_sum, c.activated, c.pending) == (1, 1, 0.25, 2, 0)
    assert await store.expire_due("m", now=100.0, default_reward="no_click") == []


async def test_deferred_never_activated_is_dropped_at_expiry(store: Store) -> None:
    await store.create_model("m", CONFIG)
    await store.put_decision(deferred("a", window=5.0))  # a feedback held, never activated
    await store.put_decision(deferred("b", window=5.0))  # nothing at all
    await store.put_decision(deferred("c", window=5.0))  # activated, no feedback: the default reward
    await store.put_decision(logged("n", window=5.0))  # not deferred: the default reward
    assert (await store.claim_and_append("a", True, now=1.0)).status is ClaimStatus.HELD
    assert (await store.activate("c", now=1.0)).status is ActivateStatus.ACTIVATED
    claims = await store.expire_due("m", now=5.0, default_reward="no_click")
    got = {c.decision_id: (c.outcome, c.position, c.deferred, c.activated) for c in claims}
    assert got == {
        "a": ("expired", None, True, False),
        "b": ("expired", None, True, False),
        "c": ("expired", got["c"][1], True, True),
        "n": ("expired", got["n"][1], False, False),
    }
    events = await store.read_log("m", after=0)
    assert sorted((e.decision_id, e.reward, e.outcome) for e in events) == [
        ("c", False, "expired"),
        ("n", False, "expired"),
    ]
    c = await store.counts("m")
    assert (c.deferred, c.activated, c.dropped_unactivated, c.expired, c.clicks, c.pending) == (
        3,
        1,
        2,
        2,
        0,
        0,
    )
    for name in "ab":
        out = await store.activate(name, now=6.0)
        assert out.status is ActivateStatus.EXPIRED and out.claim is not None and out.claim.position is None
        assert (await store.claim_and_append(name, True, now=6.0)).status is ClaimStatus.EXPIRED
    assert (await store.activate("c", now=6.0)).status is ActivateStatus.ALREADY
    log = {e.decision_id: e for e in await read_all(store, "m")}
    assert [(log[n].outcome, log[n].reward, log[n].deferred, log[n].activated_at) for n in "abcn"] == [
        ("dropped", None, True, None),
        ("dropped", None, True, None),
        ("expired", False, True, 1.0),
        ("expired", False, False, None),
    ]


async def test_activate_after_the_window_is_expired_and_changes_nothing(store: Store) -> None:
    await store.create_model("m", CONFIG)
    await store.put_decision(deferred("a", window=5.0))
    await store.claim_and_append("a", True, now=1.0)
    out = await store.activate("a", now=5.0)
    assert out.status is ActivateStatus.EXPIRED and out.claim is not None and out.claim.position is None
    assert await store.log_position("m") == 0
    c = await store.counts("m")
    assert (c.activated, c.clicks, c.pending) == (0, 0, 1)
    [claim] = await store.expire_due("m", now=5.0, default_reward="no_click")
    assert (claim.position, claim.deferred, claim.activated) == (None, True, False)
    assert await store.log_position("m") == 0


async def test_activate_of_a_decision_not_deferred_or_unknown(store: Store) -> None:
    await store.create_model("m", CONFIG)
    await store.put_decision(record("a"))
    out = await store.activate("a", now=1.0)
    assert (out.status, out.deferred) == (ActivateStatus.ALREADY, False)
    await store.claim_and_append("a", True, now=2.0)
    out = await store.activate("a", now=3.0)
    assert (out.status, out.deferred) == (ActivateStatus.ALREADY, False)
    assert (await store.activate("nope", now=1.0)).status is ActivateStatus.UNKNOWN
    c = await store.counts("m")
    assert (c.deferred, c.activated) == (0, 0)


async def test_concurrent_activations_and_feedbacks_learn_once(store: Store) -> None:
    await store.create_model("m", CONFIG)
    for i in range(10):
        await store.put_decision(deferred(f"d{i}"))
    calls = []
    for i in range(10):
        for j in range(4):  # interleaved: activations and feedbacks race for each decision
            calls += [store.activate(f"d{i}", now=1.0), store.claim_and_append(f"d{i}", j % 2 == 0, now=1.0)]
    outs = await asyncio.gather(*calls)
    activated = [o for o in outs[::2] if o.status is ActivateStatus.ACTIVATED]
    assert len(activated) == 10
    events = await store.read_log("m", after=0)
    assert sorted(e.decision_id for e in events) == [f"d{i}" for i in range(10)]
    c = await store.counts("m")
    assert (c.activated, c.clicks + c.no_clicks, c.pending) == (10, 10, 0)


# -- the decision log -------------------------------------------------------------------------------


async def test_a_feedback_or_activation_naming_another_model_finds_nothing(store: Store) -> None:
    """Issue 51 item 6: a Personalizer reward or activation names its loop (the model); a decision
    of another model is unknown there on every store (it was learned on SQLite and 404 on Redis),
    pending or claimed, and stays as it was."""
    await store.create_model("m", CONFIG)
    await store.create_model("other", CONFIG)
    await store.put_decision(deferred("a"))
    await store.put_decision(record("b"))
    assert (await store.claim_and_append("a", True, now=1.0, model="other")).status is ClaimStatus.UNKNOWN
    assert (await store.activate("a", now=1.0, model="other")).status is ActivateStatus.UNKNOWN
    assert (await store.claim_and_append("b", True, now=1.0, model="other")).status is ClaimStatus.UNKNOWN
    assert await store.log_position("m") == 0 and (await store.counts("m")).activated == 0
    assert (await store.activate("a", now=2.0, model="m")).status is ActivateStatus.ACTIVATED
    assert (await store.claim_and_append("a", False, now=2.0, model="m")).status is ClaimStatus.ACCEPTED
    assert (await store.claim_and_append("b", True, now=2.0)).status is ClaimStatus.ACCEPTED  # any model's
    # claimed: a duplicate in its own model, unknown in another
    assert (await store.claim_and_append("a", True, now=3.0, model="other")).status is ClaimStatus.UNKNOWN
    assert (await store.activate("a", now=3.0, model="other")).status is ActivateStatus.UNKNOWN
    assert (await store.claim_and_append("a", True, now=3.0, model="m")).status is ClaimStatus.DUPLICATE
    assert (await store.activate("b", now=3.0, model="m")).status is ActivateStatus.ALREADY
    assert [e.decision_id for e in await store.read_log("m", after=0)] == ["a", "b"]
    assert await store.log_position("other") == 0


async def test_decision_log_keeps_each_logged_decision_and_its_outcome(store: Store) -> None:
    await store.create_model("m", CONFIG)
    for i, name in enumerate("abcde"):
        await store.put_decision(logged(name, created=float(i), window=1.0))
    await store.put_decision(record("not-logged", created=0.5, window=1.0))
    await store.claim_and_append("a", True, now=0.5)
    await store.claim_and_append("b", False, now=1.5)
    await store.expire_due("m", now=3.5, default_reward="no_click")  # c (and not-logged)
    await store.expire_due("m", now=4.5, default_reward="drop")  # d
    entries = await read_all(store, "m")
    assert [e.decision_id for e in entries] == list("abcde")
    assert [(e.outcome, e.reward, e.outcome_at) for e in entries] == [
        ("click", True, 0.5),
        ("no_click", False, 1.5),
        ("expired", False, 3.5),
        ("dropped", None, 4.5),
        (None, None, None),  # pending
    ]
    r, a = record("a"), entries[0]
    assert a.x.dtype == np.float64 and a.x.tobytes() == r.x.tobytes()
    assert a.probs.dtype == np.float64 and a.probs.tobytes() == np.array([0.95, 0.05]).tobytes()
    assert (a.label, a.model_version, a.created_at) == (1, 7, 0.0)
    assert [e.created_at for e in entries] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert (await store.counts("m")).decisions == 6


async def test_decision_log_reads_time_ranges_in_pages(store: Store) -> None:
    await store.create_model("m", CONFIG)
    for i in range(7):
        await store.put_decision(logged(f"d{i}", created=10.0 + i / 4))
    page, after = await store.read_decision_log("m", limit=3)
    assert [e.decision_id for e in page] == ["d0", "d1", "d2"] and after is not None
    assert [e.decision_id for e in await read_all(store, "m", limit=2)] == [f"d{i}" for i in range(7)]
    window = await read_all(store, "m", since=10.25, until=11.25, limit=2)
    assert [e.decision_id for e in window] == ["d1", "d2", "d3", "d4"]
    assert await read_all(store, "m", since=12.0) == []
    assert await read_all(store, "m", until=10.0) == []
    with pytest.raises(UnknownModelError):
        await store.read_decision_log("other")


async def test_decision_log_retention_by_age_and_count_is_apart_from_the_event_log(store: Store) -> None:
    await store.create_model("m", CONFIG)
    for i in range(10):
        await store.put_decision(logged(f"d{i}", created=float(i), window=100.0))
    for i in range(5):
        await store.claim_and_append(f"d{i}", True, now=20.0 + i)
    # Redis keeps the features once, in the decision log, which the learn events name: it keeps those
    # entries until a checkpoint trims the events (issue 40); the other stores forget them now.
    named = isinstance(getattr(store, "store", store), RedisStore)  # unwrapped (conftest.Routed)
    assert await store.trim_decision_log("m", older_than=3.0, keep=None) == (0 if named else 3)
    # The learn events of the forgotten decisions are intact, and trimming them keeps the decision log.
    events = await store.read_log("m", after=0)
    assert [e.decision_id for e in events] == [f"d{i}" for i in range(5)]
    assert all(e.x is not None and e.x.tobytes() == record("a").x.tobytes() for e in events)
    await store.trim_log("m", 5)
    assert await store.trim_decision_log("m", older_than=3.0, keep=None) == (3 if named else 0)
    assert await store.trim_decision_log("m", older_than=None, keep=5) == 2
    assert await store.trim_decision_log("m", older_than=5.0, keep=5) == 0
    assert [e.decision_id for e in await read_all(store, "m")] == [f"d{i}" for i in range(5, 10)]
    await store.claim_and_append("d5", False, now=30.0)
    await store.trim_log("m", 6)
    assert await store.read_log("m", after=0) == []
    entries = await read_all(store, "m")
    assert [(e.decision_id, e.outcome) for e in entries][:2] == [("d5", "no_click"), ("d6", None)]
    assert all(e.x.tobytes() == record("a").x.tobytes() for e in entries)
    # An outcome that comes after its entry was forgotten is not kept.
    assert await store.trim_decision_log("m", older_than=100.0, keep=None) == 5
    await store.claim_and_append("d6", True, now=31.0)
    await store.put_decision(logged("new", created=50.0))
    assert [(e.decision_id, e.outcome) for e in await read_all(store, "m")] == [("new", None)]
    with pytest.raises(UnknownModelError):
        await store.trim_decision_log("other", older_than=1.0, keep=None)


async def test_delete_model_forgets_its_decision_log(store: Store) -> None:
    await store.create_model("m", CONFIG)
    await store.put_decision(logged("a"))
    await store.delete_model("m")
    await store.create_model("m", CONFIG)
    assert await read_all(store, "m") == []


# -- the dashboard: per-minute activity and replica heartbeats ----------------------------------------


async def test_activity_adds_up_per_minute_over_replicas(store: Store) -> None:
    await store.create_model("m", CONFIG)
    assert await store.read_activity("m", 0) == {}
    await store.add_activity("m", {101: Activity(1, 0, 0, 1, 0.0), 100: Activity(3, 1, 1, 0, 0.25)})
    # another replica, the same minute; graded rewards add up too
    await store.add_activity("m", {101: Activity(2, 1, 0, 0, 0.5, 1, 0.375)})
    await store.add_activity("m", {101: Activity(graded=1, graded_sum=0.25)})
    assert await store.read_activity("m", 0) == {
        100: Activity(3, 1, 1, 0, 0.25),
        101: Activity(3, 1, 0, 1, 0.5, 2, 0.625),
    }
    assert list(await store.read_activity("m", 0)) == [100, 101]  # minute order
    assert await store.read_activity("m", 101) == {101: Activity(3, 1, 0, 1, 0.5, 2, 0.625)}
    assert await store.read_activity("m", 102) == {}
    await store.create_model("other", CONFIG)
    assert await store.read_activity("other", 0) == {}  # per model
    for call in (store.add_activity("nope", {1: Activity(1)}), store.read_activity("nope", 0)):
        with pytest.raises(UnknownModelError):
            await call
    await store.delete_model("m")  # forgotten with the model
    await store.create_model("m", CONFIG)
    assert await store.read_activity("m", 0) == {}


async def test_activity_keeps_the_last_day_of_minutes(store: Store) -> None:
    await store.create_model("m", CONFIG)
    day = ACTIVITY_MINUTES
    await store.add_activity("m", {t: Activity(decisions=1) for t in range(1000, 1000 + day + 300)})
    held = await store.read_activity("m", 0)
    assert list(held) == list(range(1300, 1000 + day + 300))  # the newest day, bounded
    await store.add_activity("m", {1300: Activity(decisions=1)})  # an old minute still held: added to
    assert (await store.read_activity("m", 1300))[1300].decisions == 2
    await store.add_activity("m", {1000 + 3 * day: Activity(clicks=1)})  # after a long silence
    assert await store.read_activity("m", 0) == {1000 + 3 * day: Activity(clicks=1)}


async def test_heartbeats_are_listed_until_their_ttl(store: Store) -> None:
    one = Heartbeat("r1", "host-a", 101, 1_700_000_000.5, {"m": (3, 1), "n": (0, 0)})
    two = Heartbeat("r2", "host-b", 202, 1_700_000_001.0, {})
    await store.heartbeat(two, ttl=60.0)
    await store.heartbeat(one, ttl=0.5)
    listed = await store.replicas()
    assert [b.replica for b in listed] == ["r1", "r2"]
    assert [replace(b, age=0.0) for b in listed] == [one, two]
    assert all(0.0 <= b.age < 0.5 for b in listed)
    renewed = replace(one, models={"m": (4, 0)})
    await store.heartbeat(renewed, ttl=0.5)  # replaces the replica's last one
    assert [replace(b, age=0.0) for b in await store.replicas()] == [renewed, two]
    await asyncio.sleep(0.7)  # r1 stops reporting: gone after its TTL; r2's age grows
    (left,) = await store.replicas()
    assert left.replica == "r2" and left.age >= 0.6
    await store.forget_replica("r2")  # a clean stop: gone at once
    await store.forget_replica("r2")
    assert await store.replicas() == []


# -- pages (issue 53): a record per slot under the page's one id (service.pages) ---------------------

PAGE_CONFIG = {"learner": "squarecb-adf", "n_features": 256, "n_labels": 1, "actions": "features"}


def page(
    decision_id: str, created: float = 0.0, window: float = 10.0, deferred: bool = False
) -> list[DecisionRecord]:
    """The slot records of a three-slot page over four candidates, decided by the CCB reduction (logged)."""
    f = PageFeaturiser(8, 100, 10)
    x = f(
        {"user": "u1", "age": 31.0},
        [{"id": f"i{k}", "features": {"kind": f"k{k % 2}", "price": 1.5 + k}} for k in range(4)],
        [{"id": p, "features": {"position": p}} for p in ("hero", "middle", "footer")],
    )
    d = CCB(make_learner("squarecb-adf", 256, 1)).decide(x, np.random.default_rng(5))
    base = DecisionRecord(decision_id, "m", np.zeros(1), {}, 3, created, created + window, True, deferred)
    return page_records(base, x, f.pack(x), d)


async def test_a_page_keeps_a_record_per_slot_and_takes_each_slot_reward_once(store: Store) -> None:
    await store.create_model("m", PAGE_CONFIG)
    records = page("p")
    await store.put_page(records)
    for s, r in enumerate(records):
        got = await store.get_decision(slot_decision_id("p", s))
        assert got is not None and got.x.tobytes() == r.x.tobytes()
        assert encode(got.decision) == encode(r.decision) and page_slot(got.decision) == s
    c = await store.counts("m")
    assert (c.decisions, c.pending) == (3, 3)
    first = await store.claim_slot("p", 1, True, now=1.0)
    assert first.status is ClaimStatus.ACCEPTED and first.claim is not None and first.claim.position == 1
    again = await store.claim_slot("p", 1, False, now=1.5)
    assert (
        again.status is ClaimStatus.DUPLICATE and again.claim is not None and again.claim.outcome == "click"
    )
    assert (await store.claim_slot("p", 0, 0.25, now=2.0)).status is ClaimStatus.ACCEPTED
    assert (await store.claim_slot("p", 3, True, now=2.0)).status is ClaimStatus.UNKNOWN  # no slot 3
    events = await store.read_log("m", after=0)
    assert [(e.decision_id, e.reward, e.outcome) for e in events] == [
        ("p~1", True, "click"),
        ("p", 0.25, "reward"),
    ]
    for e, s in zip(events, (1, 0), strict=True):  # what a replica needs to learn the slot
        assert e.x is not None and e.x.tobytes() == records[s].x.tobytes()
        assert e.decision is not None and encode(e.decision) == encode(records[s].decision)
        assert page_decision_of(e.decision).labels == page_decision_of(records[0].decision).labels
    c = await store.counts("m")
    assert (c.clicks, c.graded, c.pending) == (1, 1, 1)


async def test_the_slots_of_a_page_without_reward_take_the_default_at_expiry(store: Store) -> None:
    await store.create_model("m", PAGE_CONFIG)
    await store.put_page(page("p", window=5.0))
    await store.put_page(page("q", created=1.0, window=5.0))
    await store.claim_slot("p", 1, True, now=1.0)
    claims = await store.expire_due("m", now=5.5, default_reward="no_click")
    assert sorted((c.decision_id, c.outcome) for c in claims) == [("p", "expired"), ("p~2", "expired")]
    events = await store.read_log("m", after=1)
    assert sorted((e.decision_id, e.reward) for e in events) == [("p", False), ("p~2", False)]
    assert all(page_slot(e.decision) is not None for e in events if e.decision is not None)
    dropped = await store.expire_due("m", now=7.0, default_reward="drop")
    assert sorted(c.decision_id for c in dropped) == ["q", "q~1", "q~2"] and {
        c.position for c in dropped
    } == {None}
    assert await store.log_position("m") == 3
    assert (await store.claim_slot("q", 0, True, now=8.0)).status is ClaimStatus.EXPIRED
    c = await store.counts("m")
    assert (c.decisions, c.clicks, c.expired, c.pending) == (6, 1, 5, 0)


async def test_a_taken_page_id_saves_no_slot(store: Store) -> None:
    await store.create_model("m", PAGE_CONFIG)
    await store.put_decision(replace(record("p"), model="m"))  # a single decision holds the id
    with pytest.raises(DecisionExistsError, match="'p"):
        await store.put_page(page("p"))
    await store.put_page(page("q"))
    with pytest.raises(DecisionExistsError):
        await store.put_page(page("q", created=1.0))
    with pytest.raises(DecisionExistsError):
        await store.put_decision(replace(record("q"), model="m"))
    await store.claim_slot("q", 2, True, now=1.0)  # claimed slots keep their ids taken too
    with pytest.raises(DecisionExistsError):
        await store.put_page(page("q", created=2.0))
    c = await store.counts("m")
    assert (c.decisions, c.pending) == (4, 3)
    outs = await asyncio.gather(
        *(store.put_page(page("r", created=i / 10)) for i in range(10)), return_exceptions=True
    )
    assert sum(o is None for o in outs) == 1
    assert all(isinstance(o, DecisionExistsError) for o in outs if o is not None)
    assert (await store.counts("m")).pending == 6


async def test_concurrent_rewards_of_a_page_learn_each_slot_once(store: Store) -> None:
    await store.create_model("m", PAGE_CONFIG)
    await store.put_page(page("p"))
    outs = await asyncio.gather(*(store.claim_slot("p", i % 3, i % 2 == 0, now=1.0) for i in range(60)))
    assert [o.status for o in outs].count(ClaimStatus.ACCEPTED) == 3
    events = await store.read_log("m", after=0)
    assert sorted(e.decision_id for e in events) == ["p", "p~1", "p~2"]


async def test_a_deferred_page_is_activated_whole(store: Store) -> None:
    await store.create_model("m", PAGE_CONFIG)
    await store.put_page(page("p", window=5.0, deferred=True))
    await store.put_page(page("n", window=5.0, deferred=True))  # never activated
    assert (await store.claim_slot("p", 0, True, now=1.0)).status is ClaimStatus.HELD
    assert await store.log_position("m") == 0
    outs = await store.activate_page("p", now=2.0)
    assert [o.status for o in outs] == [ActivateStatus.ACTIVATED] * 3
    assert outs[0].reward is True and outs[0].claim is not None and outs[0].claim.position == 1
    again = await store.activate_page("p", now=2.5)
    assert [o.status for o in again] == [ActivateStatus.ALREADY] * 3
    assert (await store.claim_slot("p", 1, False, now=3.0)).status is ClaimStatus.ACCEPTED
    assert [o.status for o in await store.activate_page("nope", now=3.0)] == [ActivateStatus.UNKNOWN]
    claims = await store.expire_due("m", now=5.0, default_reward="no_click")
    got = {c.decision_id: (c.position is not None, c.activated) for c in claims}
    assert got == {"p~2": (True, True), "n": (False, False), "n~1": (False, False), "n~2": (False, False)}
    assert [e.decision_id for e in await store.read_log("m", after=0)] == ["p", "p~1", "p~2"]
    c = await store.counts("m")
    assert (c.deferred, c.activated, c.dropped_unactivated) == (6, 3, 3)
    late = await store.activate_page("n", now=6.0)
    assert [o.status for o in late] == [ActivateStatus.EXPIRED] * 3


async def test_the_decision_log_keeps_each_slot_of_a_page(store: Store) -> None:
    await store.create_model("m", PAGE_CONFIG)
    records = page("p", window=5.0)
    await store.put_page(records)
    await store.put_decision(replace(logged("single", created=1.0), model="m"))
    await store.claim_slot("p", 2, 0.5, now=1.0)
    await store.claim_slot("p", 0, True, now=1.0)
    await store.expire_due("m", now=6.0, default_reward="no_click")
    entries = await read_all(store, "m")
    assert [(e.decision_id, e.slot) for e in entries] == [("p", 0), ("p~1", 1), ("p~2", 2), ("single", None)]
    assert [(e.outcome, e.reward) for e in entries[:3]] == [
        ("click", True),
        ("expired", False),
        ("reward", 0.5),
    ]
    d = page_decision_of(records[0].decision)
    for e, slot in zip(entries, d.slots, strict=False):  # candidates, choice and conditional probabilities
        assert e.x.tobytes() == records[0].x.tobytes()
        assert e.probs.tobytes() == slot.probs.tobytes() and e.label == slot.label


async def test_items_events_of_a_full_bulk_come_back_byte_for_byte(store: Store) -> None:
    """The catalog's ``items`` events (issue 54, service/runtime/items.py): a bulk of two full events
    of hashed items and a removal, appended and read back (and followed, on a shared store) bit for
    bit, kept through a checkpoint of the catalog's size; a catalog replayed from them is the one
    that registered the items."""
    from service.catalog import Catalog
    from service.runtime.items import ITEMS_PER_EVENT, apply_event, put_events, remove_event

    await store.create_model("m", CONFIG)
    its = [
        {"id": f"item-{i}", "features": {f"f{j}": float(i * j) for j in range(10)} | {"c": f"c{i % 7}"}}
        for i in range(ITEMS_PER_EVENT + 10)
    ]
    states = [*put_events(Catalog(12).hash_items(its)), remove_event(["item-3"])]
    assert len(states) == 3 and len(states[0]) > 200 * ITEMS_PER_EVENT  # a full event: about 200 KB
    for i, state in enumerate(states):
        assert await store.append("m", Event(0, "items", at=float(i), state=state)) == i + 1
    log = await store.read_log("m", after=0)
    assert [(e.position, e.kind, e.state) for e in log] == [(i + 1, "items", s) for i, s in enumerate(states)]
    if store.shared:
        tail = await store.tail({"m": 0}, 0.1)  # the first call only reports the registry
        tail = await store.tail({"m": 0}, 1.0)
        assert [e.state for e in tail.events["m"]] == states
    replayed, direct = Catalog(12), Catalog(12)
    for e in log:
        assert e.state is not None
        apply_event(replayed, e.state)
    direct.put_many(its[:ITEMS_PER_EVENT])  # one change per event: the version counts them
    direct.put_many(its[ITEMS_PER_EVENT:])
    direct.remove("item-3")
    assert replayed.to_bytes() == direct.to_bytes()
    await store.put_checkpoint("m", Checkpoint(3, replayed.to_bytes()))
    cp = await store.get_checkpoint("m")
    assert cp is not None and Catalog.from_bytes(cp.state).to_bytes() == direct.to_bytes()
