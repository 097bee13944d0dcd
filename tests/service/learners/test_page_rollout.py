"""Safe rollout of multi-slot pages (service/page_rollout.py, issue 53 part 5): logging and apprentice
modes over the CCB reduction, by exact enumeration of two- and three-slot pages for every action
learner: every slot's reported probability is the exact distribution of its draw given the earlier
slots, the page's probability is the mixture of the baseline page and the learner's pages, the
evidence each slot adds is unbiased for the learner's and the baseline's page policies, and a page of
one slot is a single decision's apprentice mix bit for bit. Then a model: logging learns nothing and
counts evidence, apprentice learns every slot, and a clearly better learner is promoted."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from service.config import ModelSpec, Settings
from service.learners.base import Decision, ParamError
from service.learners.ccb_adf import CCB
from service.page_rollout import PAGE_KEYS, Prefix, check_baselines, serve_page, serve_slot
from service.pages import page_records
from service.rollout import Rollout, served
from service.runtime import Runtime
from service.sampling import decision_rng
from service.store import DecisionRecord, MemoryStore
from tests.service.learners.exact_draws import Replay, assert_honest, exact_draws
from tests.service.learners.test_ccb_adf import enumerate_pages, name, new, page_of, trained

__all__ = ["name"]  # the fixture: every action learner

EPS = 0.3
GRID = 400


class Twice(Replay):
    """The learner's own sampling draw is 0.5; the serving draw (the second uniform) is the grid's."""

    def random(self, size: object = None) -> float:
        self.randoms += 1
        return 0.5 if self.randoms == 1 else self.u


def served_pages(
    ccb: CCB, page, mode: str, baselines: list[int]
) -> list[tuple[tuple[int, ...], list[np.ndarray], list[np.ndarray]]]:
    """Every page the mode can serve: its items, each slot's served distribution and the learner's,
    given the earlier slots. Each served distribution is checked to be the exact distribution of the
    slot's draw (:func:`exact_draws`: every tie-break path, a grid of serving draws)."""
    out: list[tuple[tuple[int, ...], list[np.ndarray], list[np.ndarray]]] = []

    def walk(acts: tuple[int, ...], ps: list[np.ndarray], pis: list[np.ndarray], prefix: Prefix) -> None:
        s = len(acts)
        if s == page.n_slots:
            out.append((acts, ps, pis))
            return
        taken = np.zeros(page.n, dtype=np.bool_)
        taken[list(acts)] = True

        def decide(rng: object) -> Decision:
            return serve_slot(ccb, page, s, taken, rng, None, mode, baselines[s], EPS, 0, copy.copy(prefix))  # type: ignore[arg-type]

        found = exact_draws(decide, page.n, GRID, replay=lambda script, u: Twice(script, u))
        assert_honest(found, GRID)
        d = decide(np.random.default_rng(0))
        p, pi = d.probs, np.asarray(d.memo["policy"])
        assert p.sum() == pytest.approx(1.0, abs=1e-12) and np.all(p[taken] == 0.0)
        for a in np.flatnonzero(p > 0).tolist():
            after = Prefix(
                prefix.on_baseline and a == baselines[s], prefix.learner * pi[a], prefix.served * p[a]
            )
            walk((*acts, a), [*ps, p], [*pis, pi], after)

    walk((), [], [], Prefix())
    return out


@pytest.mark.parametrize("n_slots", [2, 3])
def test_apprentice_pages_are_the_exact_mixture_and_their_evidence_is_unbiased(
    name: str, n_slots: int
) -> None:
    page = page_of(n_slots)
    rewards = np.random.default_rng(11).random((n_slots, page.n))  # r[s, a]
    baselines = [4, 0, 2][:n_slots]
    for ccb in (new(name, seed=1), trained(name)):
        leaves = served_pages(ccb, page, "apprentice", baselines)
        mine = {
            acts: float(np.prod([p[a] for a, p in zip(acts, ps, strict=True)]))
            for acts, ps in enumerate_pages(ccb, page, check=False)
        }
        base = tuple(baselines)
        total = 0.0
        learner_value = np.zeros(n_slots)
        baseline_value = np.zeros(n_slots)
        found: dict[tuple[int, ...], tuple[float, float]] = {}
        for acts, ps, pis in leaves:
            assert len(set(acts)) == n_slots
            prob = float(np.prod([p[a] for a, p in zip(acts, ps, strict=True)]))
            learner_p = float(np.prod([p[a] for a, p in zip(acts, pis, strict=True)]))
            assert prob == pytest.approx(
                (1 - EPS) * (acts == base) + EPS * mine.get(acts, 0.0), rel=1e-9, abs=1e-15
            )
            assert learner_p == pytest.approx(mine.get(acts, 0.0), rel=1e-12, abs=1e-15)
            found[acts] = (prob, learner_p)
            total += prob
            for s in range(n_slots):
                learner_value[s] += prob * rewards[s, acts[s]] * learner_p / prob
                baseline_value[s] += prob * rewards[s, acts[s]] * (acts == base) / prob
        # serve_page's pages carry the same figures, and each slot adds one observation to the evidence
        for i in range(40):
            d = serve_page(ccb, page, decision_rng(f"page{i}"), None, "apprentice", baselines, EPS, 0)
            prob, learner_p = found[tuple(d.labels)]
            for s, slot in enumerate(d.slots):
                memo = slot.memo
                assert memo["page_served"] == pytest.approx(prob, rel=1e-12)
                assert memo["page_policy"] == pytest.approx(learner_p, rel=1e-12)
                assert memo["page_baseline"] == int(tuple(d.labels) == base) and memo["page_unseen"] == 0.0
                r = Rollout("apprentice", EPS, 0.95)
                r.observe(slot, float(rewards[s, d.labels[s]]))
                assert r.n == 1
        assert total == pytest.approx(1.0, abs=1e-12)
        # each slot's value under the learner's own pages, and under the baseline page
        want_learner = [sum(p * rewards[s, acts[s]] for acts, p in mine.items()) for s in range(n_slots)]
        np.testing.assert_allclose(learner_value, want_learner, rtol=1e-9)
        np.testing.assert_allclose(
            baseline_value, [rewards[s, baselines[s]] for s in range(n_slots)], rtol=1e-9
        )


def test_logging_serves_the_baseline_page_and_bounds_the_learner(name: str) -> None:
    page = page_of(3)
    ccb = trained(name)
    d = serve_page(ccb, page, decision_rng("x"), None, "logging", [1, 3, 0], EPS, 0)
    assert d.labels == [1, 3, 0] and d.probabilities == [1.0, 1.0, 1.0]
    mine = {
        acts: float(np.prod([p[a] for a, p in zip(acts, ps, strict=True)]))
        for acts, ps in enumerate_pages(ccb, page, check=False)
    }
    for s in d.slots:
        assert s.memo["page_policy"] == pytest.approx(mine[(1, 3, 0)], rel=1e-12)
        assert s.memo["page_unseen"] == pytest.approx(1.0 - mine[(1, 3, 0)], rel=1e-12)
        assert s.memo["page_served"] == 1.0 and s.memo["page_baseline"] == 1


def test_a_page_of_one_slot_is_a_single_apprentice_decision_bit_for_bit(name: str) -> None:
    page = page_of(1)
    ccb = trained(name)
    for i in range(30):
        d = serve_page(ccb, page, decision_rng(f"d{i}"), None, "apprentice", [i % page.n], EPS, 2)
        rng = decision_rng(f"d{i}")
        x = page.slot_input(0)
        want = served(ccb.learner, x, ccb.learner.decide(x, rng, None), "apprentice", i % page.n, EPS, 2, rng)
        [got] = d.slots
        assert got.label == want.label and got.probs.tobytes() == want.probs.tobytes()
        assert not set(PAGE_KEYS) & set(got.memo)
        assert sorted(got.memo) == sorted(want.memo)


def test_baselines_are_checked() -> None:
    page = page_of(3)
    mask = np.array([True, False, True, True, True])
    assert check_baselines(None, page, None, "online") is None
    assert check_baselines([0, 1, 2], page, None, "apprentice") == [0, 1, 2]
    for baselines, eligible, mode, words in [
        (None, None, "apprentice", "every slot needs a baseline"),
        ([0, 1], None, "logging", "one baseline per slot"),
        ([0, None, 2], None, "apprentice", "has no baseline"),
        ([0, 9, 2], None, "apprentice", "not one of the 5 candidates"),
        ([0, 1, 0], None, "online", "a page shows an item once"),
        ([0, 1, 2], [None, mask, None], "apprentice", "not allowed in that slot"),
    ]:
        with pytest.raises(ParamError, match=words):
            check_baselines(baselines, page, eligible, mode)


# -- a model in apprentice and logging mode ----------------------------------------------------------

pytestmark = []
ACTIONS = [{"id": f"i{k}", "features": {"kind": f"k{k}"}} for k in range(6)]
SLOTS = [{"id": s, "features": {"place": s}} for s in ("hero", "side", "foot")]


async def _pages(mode: str, n: int, reward) -> Runtime:  # type: ignore[no-untyped-def]
    rt = Runtime(MemoryStore(), Settings(store="memory"))
    await rt.start()
    spec = {"actions": "features", "hashing_bits": 12, "seed": 3, "reward_window_seconds": 600,
            "rollout": mode, "apprentice_epsilon": 0.5, "promote_min_decisions": 200}  # fmt: skip
    await rt.create_model("shop", ModelSpec.model_validate(spec))
    m = rt.models["shop"]
    for t in range(n):
        user = f"u{t % 3}"
        page = m.featurise_page({"user": user}, ACTIONS, SLOTS)
        did = f"p{t}"
        d = m.decide_page(page, did, None, [5, 4, 0])  # the baseline: the worst items
        base = DecisionRecord(did, "shop", np.zeros(0), {}, m.position, 0.0, 600.0, False)
        await rt.store.put_page(page_records(base, page, m.pack_page(page), d))
        for s, a in enumerate(d.labels):
            await rt.store.claim_slot(did, s, reward(user, s, a), 1.0)
        await rt.catch_up(m)
    return rt


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_logging_learns_nothing_and_apprentice_learns_every_slot_and_is_promoted(
    anyio_backend: str,
) -> None:
    def reward(user: str, s: int, a: int) -> bool:
        return a == int(user[1]) + s  # each user's item per slot; the baseline's never

    logging = await _pages("logging", 20, reward)
    m = logging.models["shop"]
    assert m.rollout.n == 60 and m.learner.t_ == 0  # 3 slots' evidence, nothing learned
    assert m.rollout.report()["baseline"]["value"] == 0.0
    await logging.stop()

    rt = await _pages("apprentice", 150, reward)
    m = rt.models["shop"]
    assert m.rollout.n == 450 and m.learner.t_ == 450
    report = m.rollout.report()
    assert report["difference"]["low"] > 0.0 and report["baseline"]["value"] == 0.0
    assert m.rollout.due("auto", 200)
    await rt.sweeper.promote(m)
    await rt.catch_up(m)
    assert m.rollout.mode == "online" and m.config()["rollout"] == "online"
    await rt.stop()
