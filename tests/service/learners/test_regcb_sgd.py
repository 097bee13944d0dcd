"""RegCB over VW's SGD regression: the bound's weight search against its definition, the bounds and
the two explorers against their definitions, and the learning step shared with SquareCB-SGD."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.learners import make_learner
from service.learners.base import Decision
from service.learners.regcb_sgd import bound_weight
from service.learners.squarecb_sgd import label_scores, label_sensitivities
from service.sampling import DecisionIds, decision_rng


def _gain(w: float, fhat: float, sens: float) -> float:
    return w * (fhat * fhat - (fhat - sens * w) ** 2)


def _root(fhat: float, delta: float, sens: float) -> float:
    """The weight in [0, fhat / sens] where the gain reaches delta (it grows there), by 200 halvings."""
    lo, hi = 0.0, fhat / sens
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _gain(mid, fhat, sens) > delta else (mid, hi)
    return lo


@pytest.mark.parametrize("seed", range(5))
def test_the_bound_weight_is_the_largest_within_delta(seed: int) -> None:
    """The weight found is the cap fhat / sens (where the prediction reaches the fake label) when
    the gain there is within delta; else VW's search returns its bracket's lower end: within delta
    always, and the bound it gives (the prediction moved by sens w) within 0.001 of the exact root's
    (it stops when the gain is within 1e-6 of delta, the bracket narrower than 1e-6, or after 20
    halvings)."""
    rng = np.random.default_rng(seed)
    for _ in range(200):
        fhat, sens, delta = rng.uniform(0.5, 2.0), 10 ** rng.uniform(-4, 1), 10 ** rng.uniform(-3, 1)
        w = bound_weight(fhat, delta, sens)
        cap = fhat / sens
        if cap * fhat * fhat <= delta:
            assert w == cap
            continue
        assert 0.0 <= w <= cap and _gain(w, fhat, sens) <= delta
        assert 0.0 <= sens * (_root(fhat, delta, sens) - w) <= 1e-3


def _trained(params: dict, rounds: int = 300) -> tuple:
    d, k = 6, 4
    m = make_learner("regcb-sgd", d, k, params, seed=0)
    rng = np.random.default_rng(1)
    ids = DecisionIds.for_seed(0)
    for _ in range(rounds):
        x = (rng.random(d) < 0.5) * rng.normal(size=d)
        dec = m.decide(x, decision_rng(ids.new()))
        m.learn(x, dec, bool(dec.label == int(abs(x[0]) * 3) % k))
    return m, rng


@pytest.mark.parametrize("variant", ["elimination", "optimistic"])
def test_the_first_round_is_uniform_and_bounds_are_the_predictions(variant: str) -> None:
    m = make_learner("regcb-sgd", 4, 3, {"variant": variant}, seed=0)
    lo, hi = m.bounds(np.ones(4), np.ones(3, bool))
    assert np.array_equal(lo, np.zeros(3))
    assert np.array_equal(hi, np.zeros(3) if variant == "elimination" else np.full(3, np.inf))
    assert np.array_equal(m.decide(np.ones(4), np.random.default_rng(0)).probs, np.full(3, 1 / 3))


@pytest.mark.parametrize("mellowness", [0.001, 0.1])
def test_bounds_follow_their_definition(mellowness: float) -> None:
    """VW's get_cost_ranges: from the raw predicted cost c (unclipped, as VW's scores), the lower
    bound is 0 when c < 0, else max(c - s w, 0) capped at 1; the upper bound 1 when c > 1, else
    min(c + s w, 1) floored at 0; s the sensitivity towards -1 (towards 2), w the bound weight."""
    m, rng = _trained({"mellowness": mellowness, "variant": "elimination"})
    k = m.n_labels
    delta = mellowness * math.log(k * m.t_)
    outside = 0
    for _ in range(40):
        x = (rng.random(m.n_features) < 0.5) * rng.normal(size=m.n_features) * 3
        lo, hi = m.bounds(x, np.ones(k, bool))
        idx, val = m._expand(x)
        raw = label_scores(m.w_, idx, val, k, m._exact)
        s_lo, s_hi = label_sensitivities(
            m.g2_, m.scale_, m.totals_, idx, val, k, m._exact, raw, -1.0, 2.0, 0.5, True
        )
        for a in range(k):
            c, s = raw[a], s_lo[a]
            outside += not 0 <= c <= 1
            assert lo[a] == (0.0 if c < 0 else min(max(c - s * bound_weight(c + 1, delta, s), 0.0), 1.0))
            s = s_hi[a]
            assert hi[a] == (1.0 if c > 1 else max(min(c + s * bound_weight(2 - c, delta, s), 1.0), 0.0))
            assert lo[a] <= min(max(c, 0), 1) <= hi[a]
    assert outside > 0  # the raw branches were taken


@pytest.mark.parametrize("variant", ["elimination", "optimistic"])
def test_the_explorers_draw_uniformly_from_their_sets(variant: str) -> None:
    m, rng = _trained({"variant": variant, "mellowness": 0.001})
    k = m.n_labels
    for _ in range(30):
        x = (rng.random(m.n_features) < 0.5) * rng.normal(size=m.n_features)
        lo, hi = m.bounds(x, np.ones(k, bool))
        keep = lo <= hi.min() if variant == "elimination" else lo == lo.min()
        dec = m.decide(x, np.random.default_rng(0))
        np.testing.assert_array_equal(dec.probs, keep / keep.sum())
        assert keep[dec.label]
        if variant == "elimination":  # the label of the least predicted cost always survives
            assert keep[int(np.argmin(m.costs(x)))]


def test_only_eligible_labels_are_bounded_and_drawn() -> None:
    m, rng = _trained({"variant": "elimination", "mellowness": 0.01})
    eligible = np.array([False, True, False, True])
    for _ in range(30):
        x = (rng.random(m.n_features) < 0.5) * rng.normal(size=m.n_features)
        dec = m.decide(x, np.random.default_rng(int(rng.integers(1 << 30))), eligible)
        assert eligible[dec.label] and not dec.probs[~eligible].any()
        assert dec.probs.sum() == pytest.approx(1.0)


def test_it_learns_as_squarecb_sgd_unweighted() -> None:
    """The served label's row steps with weight 1 / K whatever its probability (VW's RegCB learns
    unweighted), as SquareCB-SGD with weighting="none" does."""
    reg = make_learner("regcb-sgd", 5, 3, {"interactions": "pairs"}, seed=0)
    sq = make_learner("squarecb-sgd", 5, 3, {"interactions": "pairs", "weighting": "none"}, seed=0)
    rng = np.random.default_rng(2)
    for _ in range(200):
        x = rng.normal(size=5)
        label = int(rng.integers(3))
        probs = rng.dirichlet(np.ones(3))
        reward = bool(rng.random() < 0.4)
        reg.learn(x, Decision(probs, label), reward)
        sq.learn(x, Decision(probs, label), reward)
    for a, b in ((reg.w_, sq.w_), (reg.g2_, sq.g2_), (reg.totals_, sq.totals_)):
        assert np.array_equal(a, b)


def _adf_lines(feats: list[str], label: str = "", shown: int = -1) -> list[str]:
    """VW's text lines of one multi-line example: action a's features and intercept, the label on
    the shown action's line."""
    return [f"{label if a == shown else ''}| {f} a{a}c:1" for a, f in enumerate(feats)]


def _agreement_with_vw(ours_mellowness: float, rounds: int = 300) -> float:
    """Share of rounds where our elimination's distribution equals VW's ``--cb_explore_adf --regcb``
    (mellowness 0.1) on the same stream: each action's example carries its own copies of the
    features and an intercept (VW's weights for it are then ours for the label, no collisions), both
    learn the same uniformly drawn action's cost."""
    vowpalwabbit = pytest.importorskip("vowpalwabbit")
    k, d = 3, 4
    vw = vowpalwabbit.Workspace("--cb_explore_adf --regcb --mellowness 0.1 --noconstant --quiet")
    params = {"variant": "elimination", "mellowness": ours_mellowness, "interactions": "none"}
    m = make_learner("regcb-sgd", d, k, params, seed=0)
    rng = np.random.default_rng(0)
    teacher = rng.normal(size=(d, k))
    agree = 0
    for _ in range(rounds):
        x = (rng.random(d) < 0.7) * rng.normal(size=d)
        feats = [" ".join(f"a{a}f{j}:{x[j]:.17g}" for j in range(d) if x[j] != 0) for a in range(k)]
        examples = vw.parse(_adf_lines(feats))
        pmf = np.array(vw.predict(examples))
        vw.finish_example(examples)
        lo, hi = m.bounds(x, np.ones(k, bool))
        keep = lo <= hi.min()
        agree += bool(np.allclose(pmf, keep / keep.sum(), atol=1e-6))
        a = int(rng.integers(k))
        cost = float(a != int(np.argmax(x @ teacher)))
        examples = vw.parse(_adf_lines(feats, f"0:{cost}:{1 / k} ", a))
        vw.learn(examples)
        vw.finish_example(examples)
        m.learn(x, Decision(np.full(k, 1 / k), a), cost == 0.0)
    vw.finish()
    return agree / rounds


def test_without_pairs_the_explorer_tracks_vws_regcb() -> None:
    """Against VW itself: at VW's own mellowness our elimination draws from VW's distribution in most
    rounds (the misses are early rounds, not understood), and far more often than at a tenth of it,
    so the bounds are VW's in scale. With -q :: VW's bounds come out narrower than ours (at 0.1 VW
    matches ours near 0.01 on such a stream; on car and dna VW errs 0.10 and 0.08 where ours errs
    0.20 and 0.53): not found why, so RegCB-SGD's mellowness is tuned (lab/sweep.py)."""
    at_vws = _agreement_with_vw(0.1)
    assert at_vws >= 0.85
    assert at_vws > _agreement_with_vw(0.01) + 0.1
