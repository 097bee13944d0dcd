"""Pages over catalog candidates (issue 54 item 5, service/runtime/catalog_pages.py), by exact
enumeration on small catalogs: the conditionals each slot reports are the distribution its item is
drawn from (the page's exact distribution computed from the learner's own costs, every ordered page
driven through the real decision with a scripted uniform, and sampled frequencies), per-slot IPS with
them is exactly unbiased, and a slot learns as its shown item alone on the slot's input."""

from __future__ import annotations

import copy
import math
import re
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from service.config import ModelSpec, Settings
from service.learners.base import Decision
from service.learners.squarecb import igw_scores
from service.pages import page_records
from service.runtime import Runtime
from service.runtime import catalog_pages as catalog_pages_module
from service.runtime.catalog_pages import CatalogPageRequest
from service.runtime.catalog_requests import CatalogQuery, catalog_request
from service.serial import checksum
from service.slots import slot_context
from service.store import DecisionRecord, MemoryStore

pytestmark = pytest.mark.anyio

SPEC = {
    "actions": "features",
    "learner": "squarecb-adf",
    "hashing_bits": 10,
    "seed": 2,
    # a spread-out exploration, so that every ordered page is drawn often enough to be counted
    "params": {"gamma_scale": 4.0},
    "reward_window_seconds": 600,
}
CTX = {"user": "u1", "mobile": True}


def catalog_items(n: int) -> list[dict[str, Any]]:
    return [
        {"id": f"i{k}", "features": {"kind": f"k{k % 2}", "brand": f"b{k % 3}", "price": 1.0 + k}}
        for k in range(n)
    ]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def rt() -> AsyncIterator[Runtime]:
    """A runtime whose model ``shop`` has a 5-item catalog and learned 30 catalog decisions."""
    runtime = Runtime(MemoryStore(), Settings(store="memory", decision_id_seed=54))  # the same model each run
    await runtime.start()
    try:
        await runtime.create_model("shop", ModelSpec.model_validate(SPEC))
        await runtime.items.put("shop", catalog_items(5))
        for t in range(30):
            p = await runtime.predict("shop", {"user": f"u{t % 2}", "mobile": True}, catalog=CatalogQuery())
            click = p.label in ("i1", "i3") if t % 2 else p.label == "i0"
            await runtime.feedback(p.decision_id, click, True)
        yield runtime
    finally:
        await runtime.stop()


def catalog_page_request(
    m: Any, features: dict[str, Any], query: CatalogQuery | None, slots: list[dict[str, Any]], rt: Runtime
) -> CatalogPageRequest:
    """The page's request as ``Runtime.predict_page`` makes it (no sent actions)."""
    request = catalog_request(m, features, None, query, None, None, None, rt.clock)
    assert request is not None
    return CatalogPageRequest(m, request, slots)


class Scripted:
    """A generator whose ``random()`` gives the uniforms given, in order (the page draws one per slot)."""

    def __init__(self, us: list[float]) -> None:
        self.us = iter(us)

    def random(self) -> float:
        return next(self.us)


def oracle(req: CatalogPageRequest, s: int, prefix: tuple[int, ...]) -> tuple[list[int], np.ndarray]:
    """Slot ``s``'s candidates (positions in the request) given the earlier slots' ``prefix`` and
    their probabilities, from the learner's own costs (squarecb-adf's ``costs`` on the items sent
    with their features, the slot's features added to the context) and inverse gap weighting."""
    r = req.request
    learner = r.learner
    mask = req.masks[s]
    left = [a for a in range(req.total) if a not in prefix and (mask is None or mask[a])]
    catalog, rows = r.parts[-1]  # every candidate of these requests is a catalog item
    x = catalog.action_input(slot_context(r.context, req.vectors[s]), rows[left])
    gamma = learner.params.gamma_scale * float(learner.t_) ** learner.params.gamma_exponent
    _, _, p = igw_scores(-learner.costs(x), gamma, 0.5, np.ones(len(left), np.bool_))
    return left, p


def enumerate_pages(req: CatalogPageRequest) -> dict[tuple[int, ...], list[float]]:
    """Every ordered page the request can show, with each slot's exact conditional probability."""
    out: dict[tuple[int, ...], list[float]] = {}

    def walk(prefix: tuple[int, ...], probs: list[float]) -> None:
        s = len(prefix)
        if s == len(req.ids):
            out[prefix] = probs
            return
        left, p = oracle(req, s, prefix)
        for a, q in zip(left, p.tolist(), strict=True):
            walk((*prefix, a), [*probs, q])

    walk((), [])
    return out


def uniform_for(p: np.ndarray, k: int) -> float:
    """A uniform that the sampler's arithmetic (service.kernels._draw) maps to entry ``k`` of ``p``:
    the middle of its interval of the CDF."""
    c = np.cumsum(p)
    return float(((c[k - 1] if k else 0.0) + p[k] / 2) / c[-1])


CASES = {
    "2 slots, no slot features": (4, [{"id": "a"}, {"id": "b"}]),
    "3 slots with features, eligible and excluded": (
        5,
        [
            {"id": "hero", "features": {"position": "hero"}, "excluded": ["i2"]},
            {"id": "tile", "features": {"position": "tile", "size": 2.0}},
            {"id": "foot", "features": {"position": "foot"}, "eligible": ["i0", "i2", "i3", 4]},
        ],
    ),
    "3 slots of 3 candidates, one without features": (
        3,
        [{"id": "x", "features": {"position": "x"}}, {"id": "y"}, {"id": "z", "features": {"position": "z"}}],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_reported_conditionals_are_the_draw_distribution_and_ips_is_unbiased(
    rt: Runtime, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    n, slots = CASES[case]
    m = rt.models["shop"]
    query = CatalogQuery(candidates=[f"i{k}" for k in range(n)])
    req = catalog_page_request(m, CTX, query, slots, rt)
    exact = enumerate_pages(req)
    assert math.isclose(sum(math.prod(p) for p in exact.values()), 1.0, rel_tol=1e-12)

    # every ordered page, driven through the real decision by uniforms that pick it: the slots show
    # it and report exactly the conditionals computed from the learner's costs
    reported: dict[tuple[int, ...], list[float]] = {}
    for page, probs in exact.items():
        us = []
        for s in range(len(slots)):
            left, p = oracle(req, s, page[:s])
            us.append(uniform_for(p, left.index(page[s])))
        monkeypatch.setattr(catalog_pages_module, "decision_rng", lambda _id, us=us: Scripted(us))
        got = req.decide("any")
        assert tuple(x.index for x in got.slots) == page
        reported[page] = [x.probability for x in got.slots]
        assert [x.item_id for x in got.slots] == [f"i{a}" for a in page]
        np.testing.assert_allclose([x.probability for x in got.slots], probs, rtol=1e-12, atol=0)
        # each slot's decision over the kept items: its item's conditional at its slot, 0 elsewhere
        for s, d in enumerate(got.decision.slots):
            assert d.label == s and d.probs[s] == got.slots[s].probability and d.probs.sum() == d.probs[s]
            assert (
                int(d.memo["catalog.candidates"])
                == got.slots[s].candidates
                == len(oracle(req, s, page[:s])[0])
            )
        # the top k of each slot: every candidate left there, with its exact probability
        for s, x in enumerate(got.slots):
            left, p = oracle(req, s, page[:s])
            top = {k: q for _, k, q in x.top}
            assert sorted(top) == left
            np.testing.assert_allclose([top[k] for k in left], p, rtol=1e-12, atol=0)
    monkeypatch.undo()

    # sampled with real decision ids: each page's frequency within 5 sigma of its exact probability
    draws = 6000
    counts: dict[tuple[int, ...], int] = dict.fromkeys(exact, 0)
    for t in range(draws):
        got = req.decide(f"d{t}")
        page = tuple(x.index for x in got.slots)
        counts[page] += 1
        np.testing.assert_allclose([x.probability for x in got.slots], exact[page], rtol=1e-12, atol=0)
    for page, probs in exact.items():
        q = math.prod(probs)
        assert abs(counts[page] / draws - q) <= 5 * math.sqrt(q * (1 - q) / draws) + 1e-9, (
            page,
            counts[page],
            q,
        )

    # per-slot IPS with the reported conditionals is exactly unbiased: for a target policy that
    # shows the candidate "first left" in each slot, E[1{a_s = target} r_s(a_s) / p_s] over the
    # exact page distribution equals E[r_s(target)] over the logged prefixes
    def reward(s: int, a: int) -> float:
        return ((a + 1) * (s + 2) % 7) / 7

    for s in range(len(slots)):
        ips = truth = 0.0
        for page, probs in exact.items():  # each page with its exact probability of being drawn
            target = oracle(req, s, page[:s])[0][0]
            if page[s] == target:  # weighted by the conditional the server reported for slot s
                ips += math.prod(probs) * reward(s, page[s]) / reported[page][s]
            truth += math.prod(probs) * reward(s, target)
        assert math.isclose(ips, truth, rel_tol=1e-12), (s, ips, truth)


async def test_a_slot_learns_its_shown_item_alone_on_the_slot_input(rt: Runtime) -> None:
    """After the page's records are stored and each slot rewarded, the model equals a copy of the
    learner before that learned, slot by slot, the shown item sent alone with the slot's context
    and the probability it was drawn with; an item changed later changes nothing learned."""
    m = rt.models["shop"]
    slots = [
        {"id": "hero", "features": {"position": "hero"}},
        {"id": "tile"},
        {"id": "foot", "features": {"n": 3.0}},
    ]
    req = catalog_page_request(m, CTX, None, slots, rt)
    got = req.decide("page-1")
    twin = copy.deepcopy(m.learner)
    now = rt.clock()
    base = DecisionRecord("page-1", "shop", np.zeros(0), {}, m.position, now, now + 600.0, True)
    await rt.store.put_page(tuple(page_records(base, got.page, m.pack_page(got.page), got.decision)))
    await rt.items.put("shop", [{"id": got.slots[0].item_id, "features": {"kind": "changed"}}])
    rewards = [True, False, 0.5]
    for s in (2, 0, 1):  # in any order
        out, _ = await rt.feedback_slot("page-1", s, rewards[s], True)
        assert out.status.value == "accepted"
    catalog = m.catalog
    for s in (2, 0, 1):  # in the order learned
        x = got.page.slot_input(s).alone(s)
        assert x.ids == [got.slots[s].item_id] and x.n == 1
        twin.learn(x, Decision(np.array([got.slots[s].probability]), 0, {}), rewards[s])
    assert checksum(twin.state()) == checksum(m.learner.state())
    # what was kept is the item as decided: its catalog row has changed since
    assert (
        got.page.actions.features(0).idx.tolist()
        != catalog.features(catalog.slot_of(got.slots[0].item_id)).idx.tolist()
    )


async def test_refusals(rt: Runtime) -> None:
    m = rt.models["shop"]
    two = CatalogQuery(candidates=["i0", "i1"])
    with pytest.raises(ValueError, match="3 slots but 2 candidates"):
        catalog_page_request(m, CTX, two, [{"id": "a"}, {"id": "b"}, {"id": "c"}], rt)
    req = catalog_page_request(m, CTX, two, [{"id": "a"}, {"id": "b", "eligible": ["i0"]}], rt)
    outcomes = set()
    for t in range(200):  # slot b allows i0 alone: when a takes it, b has none left
        try:
            outcomes.add(tuple(x.item_id for x in req.decide(f"r{t}").slots))
        except ValueError as exc:
            assert "slots.1: no candidate left for slot 'b'" in str(exc)
            outcomes.add(("refused",))
    assert outcomes == {("i1", "i0"), ("refused",)}
    for slot, message in [
        ({"id": "a", "eligible": ["i9"]}, "slots.0: eligible: 'i9' is not one of this request's candidates"),
        ({"id": "a", "eligible": ["i0"], "excluded": ["i1"]}, "slots.0: give eligible or excluded"),
        ({"id": "a", "excluded": ["i0", "i1"]}, "slots.0: no eligible action: every candidate is excluded"),
        (
            {"id": "a", "eligible": ["i0"], "baseline": "i1"},
            "slots.0: baseline action 'i1' is not eligible for this request",
        ),
        ({"id": "a", "eligible": [5]}, "slots.0: eligible: unknown candidate index 5"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            catalog_page_request(m, CTX, two, [slot, {"id": "b"}], rt)
    ids = ["i0", "i1", "i2"]
    with pytest.raises(ValueError, match=re.escape("slots.1.id: 'a' is given twice")):
        catalog_page_request(m, CTX, CatalogQuery(ids), [{"id": "a"}, {"id": "a"}], rt)
