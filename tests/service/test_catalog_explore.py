"""Exploration over a catalog (service/catalog_explore.py, issue 54): exact propensities by
enumeration, ties included; the rule equals squarecb-adf's for the same costs; a decision learns as
its shown item sent alone."""

from __future__ import annotations

import numpy as np
import pytest

from service.actions import ActionFeaturiser
from service.catalog import Catalog, CatalogError
from service.catalog_explore import CatalogExploration, decide, igw_top
from service.learners import make_learner
from service.learners.base import Decision
from service.learners.squarecb import igw_decision
from service.sampling import DecisionIds, decision_rng
from service.serial import checksum
from tests.service.learners.exact_draws import assert_honest, exact_draws

BITS = 10


def shop(n: int, twins: bool = False) -> tuple[Catalog, list[dict]]:
    """``n`` items; with ``twins`` items 2k and 2k + 1 have the same features (tied costs)."""
    its = []
    for i in range(n):
        k = i // 2 if twins else i
        its.append({"id": f"i{i}", "features": {"c": f"c{k % 3}", "item": f"i{k}", "p": float(k % 5)}})
    cat = Catalog(BITS)
    cat.put_many(its)
    return cat, its


def trained(cat: Catalog, its: list[dict], events: int = 300, seed: int = 0):
    """squarecb-adf after ``events`` catalog decisions on clicks of category c1."""
    f = ActionFeaturiser(BITS, 100, 100)
    m = make_learner("squarecb-adf", 1 << BITS, 1, {}, seed=seed)
    ids = DecisionIds.for_seed(seed)
    for t in range(events):
        ctx = f.context({"u": f"u{t % 4}"})
        d = decide(m, cat, ctx, cat.select_all(), decision_rng(ids.new()))
        x, dec = d.learn_input(cat, ctx)
        m.learn(x, dec, float(its[d.slot]["features"]["c"] == f"c{t % 3}"))
    return m, f


def as_decision(d, slots: np.ndarray, cat: Catalog) -> Decision:
    """A catalog decision as a Decision over the candidates (all of them in ``top``)."""
    p = np.zeros(len(slots))
    where = {cat.id_of(int(s)): i for i, s in enumerate(slots)}
    for item_id, q in d.top:
        p[where[item_id]] = q
    return Decision(p, d.index, {})


def test_igw_top_is_squarecbs_rule_bit_for_bit() -> None:
    """For the same costs, the catalog's kernel gives squarecb-adf's distribution and label."""
    rng = np.random.default_rng(0)
    for trial in range(200):
        k = int(rng.integers(1, 12))
        cost = np.round(rng.normal(size=k), int(rng.integers(1, 4)))  # rounded: ties happen
        gamma = float(rng.uniform(0, 50))
        ref = igw_decision(-cost, gamma, np.random.default_rng(trial), None)
        got = igw_top(cost, gamma, np.random.default_rng(trial).random(), k)
        assert got[0] == ref.memo["greedy"] and got[1] == ref.label
        assert got[2] == ref.probs[ref.label]
        order = sorted(range(k), key=lambda a: (-ref.probs[a], a))
        assert got[3].tolist() == order and got[4].tolist() == ref.probs[order].tolist()


def test_top_k_is_the_k_most_probable_in_candidate_order_on_ties() -> None:
    cost = np.array([0.5, 0.1, 0.3, 0.1, 0.3, 0.9])
    _, _, _, idx, p = igw_top(cost, 10.0, 0.5, 3)
    assert idx.tolist() == [1, 3, 2] and p[0] > p[1] == 1.0 / 6.0 > p[2]


@pytest.mark.parametrize("twins", [False, True])
def test_reported_probability_is_the_exact_draw_distribution(twins: bool) -> None:
    """By enumeration of the decision's one uniform: a new model (all tied), a trained one, and a
    catalog of twin items (tied costs after training too); the distribution sums to 1."""
    cat, its = shop(8, twins)
    slots = cat.select_all()
    f = ActionFeaturiser(BITS, 100, 100)
    fresh = make_learner("squarecb-adf", 1 << BITS, 1, {}, seed=0)
    model, _ = trained(cat, its)
    ctx = f.context({"u": "u1"})
    wide = CatalogExploration(top_k=8, reference_candidates=2)  # gamma scaled with K too
    for m in (fresh, model):
        for exploration in (None, wide):
            found = exact_draws(
                lambda rng, m=m, e=exploration: as_decision(decide(m, cat, ctx, slots, rng, e), slots, cat), 8
            )
            assert_honest(found)
            assert found.reported[0].sum() == pytest.approx(1.0, abs=1e-15)
    if twins:
        costs = cat.scores(model.w_, ctx, slots)
        assert costs[0] == costs[1] and costs[2] == costs[3]


def test_decisions_are_deterministic_given_the_seed() -> None:
    cat, its = shop(50)
    m, f = trained(cat, its, 10)
    ctx = f.context({"u": "u2"})
    a = [decide(m, cat, ctx, cat.select_all(), decision_rng(f"id{i}")) for i in range(20)]
    b = [decide(m, cat, ctx, cat.select_all(), decision_rng(f"id{i}")) for i in range(20)]
    assert a == b and len({d.item_id for d in a}) > 1


def test_a_catalog_decision_is_squarecb_adfs_on_the_same_candidates() -> None:
    """Up to K_ref candidates the catalog decides as squarecb-adf does on the items sent with their
    features: same costs within rounding, the same distribution and the same item for a seed."""
    cat, its = shop(10)
    m, f = trained(cat, its)
    for u in range(4):
        raw = {"u": f"u{u}"}
        x = f(raw, its)
        ctx = f.context(raw)
        for s in range(20):
            ref = m.decide(x, decision_rng(f"d{s}"))
            got = decide(m, cat, ctx, cat.select_all(), decision_rng(f"d{s}"), CatalogExploration(top_k=10))
            np.testing.assert_allclose(as_decision(got, cat.select_all(), cat).probs, ref.probs, rtol=1e-12)
            assert got.index == ref.label


def test_learning_from_a_catalog_decision_is_learning_from_the_item_sent_alone() -> None:
    cat, its = shop(30)
    f = ActionFeaturiser(BITS, 100, 100)
    a = make_learner("squarecb-adf", 1 << BITS, 1, {}, seed=0)
    b = make_learner("squarecb-adf", 1 << BITS, 1, {}, seed=0)
    ids = DecisionIds.for_seed(1)
    for t in range(200):
        raw = {"u": f"u{t % 5}", "h": float(t % 24)}
        d = decide(a, cat, f.context(raw), cat.select_all(), decision_rng(ids.new()))
        reward = float(t % 3 == 0)
        x, dec = d.learn_input(cat, f.context(raw))
        a.learn(x, dec, reward)
        alone = f(raw, [its[d.slot]])
        b.learn(alone, b.decide(alone, np.random.default_rng(0)), reward)
    assert checksum(a.state()) == checksum(b.state())


def test_gamma_grows_as_a_power_of_k_above_the_reference() -> None:
    e = CatalogExploration()
    assert e.gamma(300.0, 10) == 300.0 and e.gamma(300.0, 3) == 300.0
    assert e.gamma(300.0, 10_000) == pytest.approx(300.0 * 1000**0.25)
    assert CatalogExploration(k_exponent=0.5).gamma(300.0, 40) == pytest.approx(600.0)
    with pytest.raises(ValueError):
        CatalogExploration(top_k=0)


def test_no_candidates_and_other_learners_are_refused() -> None:
    cat, _ = shop(3)
    f = ActionFeaturiser(BITS, 100, 100)
    m = make_learner("squarecb-adf", 1 << BITS, 1, {}, seed=0)
    with pytest.raises(CatalogError, match="no catalog item"):
        decide(m, cat, f.context({"u": "a"}), cat.select_all({"c": "none"}), np.random.default_rng(0))
    with pytest.raises(TypeError, match="squarecb-adf"):
        decide(
            make_learner("cova-adf", 1 << BITS, 1, {}, seed=0),
            cat,
            f.context({}),
            cat.select_all(),
            np.random.default_rng(0),
        )  # type: ignore[arg-type]
