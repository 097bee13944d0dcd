"""The runtime's page calls (issue 53, :mod:`service.runtime.requests`): ``predict_page``,
``feedback_slot`` (by index and by slot id), ``activate_page``, and a page made while the store is
down saved once it is back."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from service.config import ModelSpec, Settings
from service.learners.base import ParamError
from service.runtime import Runtime
from service.runtime.requests import SLOT_ID_MEMO, PageAnsweredError, UnknownSlotError
from service.store import ActivateStatus, ClaimStatus, MemoryStore, StoreUnavailableError
from service.store.base import slot_decision_id

pytestmark = pytest.mark.anyio

SPEC = {"actions": "features", "hashing_bits": 10, "seed": 3, "reward_window_seconds": 600}
ACTIONS = [{"id": f"i{k}", "features": {"kind": f"k{k % 2}", "price": 1.5 * k}} for k in range(5)]
SLOTS = [{"id": p, "features": {"position": p}} for p in ("hero", "tile", "footer")]
CONTEXT = {"user": "u1", "hour": 13.0}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    rt = Runtime(MemoryStore(), Settings(store="memory"))
    await rt.start()
    await rt.create_model("shop", ModelSpec.model_validate(SPEC))
    try:
        yield rt
    finally:
        await rt.stop()


async def test_a_page_is_a_slot_each_distinct_and_each_slot_rewarded_once(runtime: Runtime) -> None:
    p = await runtime.predict_page("shop", CONTEXT, ACTIONS, SLOTS, event_id="page-1")
    assert [s.slot_id for s in p.slots] == ["hero", "tile", "footer"]
    assert len({s.label for s in p.slots}) == 3
    taken: set[int] = set()
    for s in p.slots:
        assert p.labels[s.decision.label] == s.label
        assert s.decision.probability == pytest.approx(s.decision.probs[s.decision.label])
        assert s.ranking[0] in range(5) and not taken & set(s.ranking)  # earlier slots' items left out
        assert sorted(s.ranking) == sorted(set(range(5)) - taken)
        taken.add(s.decision.label)
    out, applied = await runtime.feedback_slot(p.decision_id, 1, True, wait=True)
    assert out.status is ClaimStatus.ACCEPTED and applied
    out, _ = await runtime.feedback_slot(p.decision_id, "tile", False, wait=False)
    assert out.status is ClaimStatus.DUPLICATE and out.claim is not None and out.claim.outcome == "click"
    out, _ = await runtime.feedback_slot(p.decision_id, "footer", 0.25, wait=True)
    assert out.status is ClaimStatus.ACCEPTED
    with pytest.raises(UnknownSlotError, match=r"no slot 'side'.*'hero', 'tile', 'footer'"):
        await runtime.feedback_slot(p.decision_id, "side", True, wait=False)
    with pytest.raises(UnknownSlotError, match="no slot index 3"):
        await runtime.feedback_slot(p.decision_id, 3, True, wait=False)
    out, _ = await runtime.feedback_slot(p.decision_id, "hero", True, wait=True)
    assert out.status is ClaimStatus.ACCEPTED
    # every slot answered: an id cannot be checked any more, an index gives the slot's outcome
    with pytest.raises(PageAnsweredError):
        await runtime.feedback_slot(p.decision_id, "hero", True, wait=False)
    out, _ = await runtime.feedback_slot(p.decision_id, 0, True, wait=False)
    assert out.status is ClaimStatus.DUPLICATE
    out, _ = await runtime.feedback_slot("nothing", 2, True, wait=False)
    assert out.status is ClaimStatus.UNKNOWN
    assert runtime.models["shop"].position == 3


async def test_slot_problems_name_the_slot(runtime: Runtime) -> None:
    slots = [{"id": "a", "eligible": ["i1", "i2"]}, {"id": "b", "excluded": ["i9"]}]
    with pytest.raises(ParamError, match=r"slots\.1: unknown action 'i9'"):
        await runtime.predict_page("shop", CONTEXT, ACTIONS, slots)
    with pytest.raises(ParamError, match=r"slots\.0: baseline action 'i4' is not eligible"):
        await runtime.predict_page("shop", CONTEXT, ACTIONS, [{"eligible": ["i1"], "baseline": "i4"}])
    p = await runtime.predict_page("shop", CONTEXT, ACTIONS, [slots[0], {"id": "b", "eligible": [1, 2]}])
    assert {s.label for s in p.slots} == {"i1", "i2"}
    assert p.slots[1].ranking == [int(p.slots[1].decision.label)]  # the one left


async def test_a_one_slot_page_is_todays_decision_and_keeps_its_slot_id(runtime: Runtime) -> None:
    single = await runtime.predict("shop", CONTEXT, actions=ACTIONS, event_id="one")
    record = await runtime.store.get_decision(single.decision_id)
    await runtime.feedback(single.decision_id, True, True)
    p = await runtime.predict_page("shop", CONTEXT, ACTIONS, [{"id": "0"}], event_id="page")
    assert p.slots[0].decision.probs.tolist() != [] and (await runtime.store.get_decision("page")) is not None
    # the same id seeds the same draw: a fresh model decides "one" as a page of one default slot
    fresh = Runtime(MemoryStore(), Settings(store="memory"))
    await fresh.start()
    try:
        await fresh.create_model("shop", ModelSpec.model_validate(SPEC))
        q = await fresh.predict_page("shop", CONTEXT, ACTIONS, [{"id": "0"}], event_id="one")
        got = await fresh.store.get_decision("one")
        assert got is not None and record is not None
        assert got.decision.keys() == record.decision.keys() and q.slots[0].label == single.label
        assert got.x.tobytes() == record.x.tobytes()
        assert got.decision["probs"].tobytes() == record.decision["probs"].tobytes()
        out, _ = await fresh.feedback_slot("one", "0", True, wait=True)
        assert out.status is ClaimStatus.ACCEPTED
        assert fresh.models["shop"].checksum() == runtime.models["shop"].checksum()
    finally:
        await fresh.stop()
    # a one-slot page with its own id keeps the id in the memo, for the feedback to check
    h = await runtime.predict_page("shop", CONTEXT, ACTIONS, [{"id": "hero"}])
    held = await runtime.store.get_decision(h.decision_id)
    assert held is not None and held.decision[f"memo.{SLOT_ID_MEMO}"] == "hero"
    with pytest.raises(UnknownSlotError):
        await runtime.feedback_slot(h.decision_id, "tile", True, wait=False)
    out, _ = await runtime.feedback_slot(h.decision_id, "hero", True, wait=False)
    assert out.status is ClaimStatus.ACCEPTED


async def test_a_deferred_page_is_activated_whole(runtime: Runtime) -> None:
    p = await runtime.predict_page("shop", CONTEXT, ACTIONS, SLOTS, defer=True)
    out, _ = await runtime.feedback_slot(p.decision_id, "tile", True, wait=False)
    assert out.status is ClaimStatus.HELD
    outs = await runtime.activate_page(p.decision_id, wait=True)
    assert [o.status for o in outs] == [ActivateStatus.ACTIVATED] * 3
    assert outs[1].claim is not None and outs[1].claim.position == 1  # the held feedback, learned now
    assert runtime.models["shop"].position == 1
    again = await runtime.activate_page(p.decision_id)
    assert [o.status for o in again] == [ActivateStatus.ALREADY] * 3
    assert [o.status for o in await runtime.activate_page("nothing")] == [ActivateStatus.UNKNOWN]


async def test_a_page_made_while_the_store_is_down_is_saved_once_it_is_back(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def down(records: object) -> None:
        raise StoreUnavailableError("down")

    with monkeypatch.context() as patched:
        patched.setattr(runtime.store, "put_page", down)
        p = await runtime.predict_page("shop", CONTEXT, ACTIONS, SLOTS)
    assert len(runtime.shared.unsaved) == 1
    runtime.shared.store_down_at = -float("inf")
    out, _ = await runtime.feedback_slot(p.decision_id, "footer", True, wait=True)  # saves it first
    assert out.status is ClaimStatus.ACCEPTED and not runtime.shared.unsaved
    for s in range(3):
        assert (await runtime.store.get_decision(slot_decision_id(p.decision_id, s)) is None) == (s == 2)
