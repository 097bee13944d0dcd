"""Graded rewards, by exact enumeration (issue 50).

A learner that learns a click bit (``graded = False``) is handed, for a graded reward ``r`` in
(0, 1), a Bernoulli(r) bit (:func:`service.sampling.reward_bit`). Enumerating the sampled label
``a ~ p`` and the coin, the bandit estimators average to their full-information values at the graded
rewards (each linear in the click): Banditron's update to ``x (r - e_yhat)^T`` (seed 002, Lemma 4
with a reward per label), estimator (4) of AdaBandit / BanditBBM to ``s (1 - e_yhat) - r + e_yhat``
with ``s = sum_a r_a`` (``1 - e_y`` when ``r = e_y``). The learners that learn the value
(``graded = True``: both served defaults among them) take ``r`` itself, no coin: their step is the
regression's towards the cost ``1 - r``, between the steps of the two bits.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from service.config import DEFAULT_ACTION_LEARNER, DEFAULT_LEARNER
from service.learners.base import Decision, learners, make_learner
from service.learners.booster_costs import loss_estimate
from service.sampling import reward_bit

D, K = 5, 4


def _rewards(rng: np.random.Generator) -> np.ndarray:
    """A graded reward per label, some at the bits' ends."""
    r = rng.random(K)
    r[rng.integers(K)] = rng.choice([0.0, 1.0])
    return r


@pytest.mark.parametrize("seed", range(20))
def test_banditrons_update_averages_to_the_graded_full_information_update(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, r = rng.random(D), _rewards(rng)
    m = make_learner("banditron", D, K, {"gamma": 0.3}, seed=seed)
    m.W_ = rng.normal(size=m.W_.shape)
    d = m.decide(x, np.random.default_rng(seed))
    expected = np.zeros_like(m.W_)
    for a in range(K):  # the label drawn, then the coin of its reward
        for click, weight in ((True, r[a]), (False, 1.0 - r[a])):
            trial = copy.deepcopy(m)
            trial.learn(x, Decision(d.probs, a, dict(d.memo)), click)
            expected += d.probs[a] * weight * (trial.W_ - m.W_)
    greedy = np.eye(K)[d.memo["greedy"]]
    np.testing.assert_allclose(expected, np.outer(r - greedy, x), atol=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_estimator_4_averages_to_its_graded_full_information_value(seed: int) -> None:
    rng = np.random.default_rng(seed)
    r = _rewards(rng)
    p = rng.dirichlet(np.ones(K))
    greedy = int(rng.integers(K))
    mean = sum(
        p[a] * (r[a] * loss_estimate(p, a, greedy, True) + (1 - r[a]) * loss_estimate(p, a, greedy, False))
        for a in range(K)
    )
    e = np.eye(K)[greedy]
    np.testing.assert_allclose(mean, r.sum() * (1 - e) - r + e, atol=1e-12)


def test_the_coin_has_the_graded_reward_as_its_mean() -> None:
    """The bit a bit learner gets: over many decision ids its mean is the reward (the same bit on
    every replica: it is a function of the id)."""
    for r in (0.1, 0.5, 0.93):
        bits = [reward_bit(f"d{i}", r) for i in range(20_000)]
        assert abs(np.mean(bits) - r) < 4 * np.sqrt(r * (1 - r) / len(bits))
        assert bits == [reward_bit(f"d{i}", r) for i in range(20_000)]


@pytest.mark.parametrize("name", sorted({DEFAULT_LEARNER[0], DEFAULT_ACTION_LEARNER[0]}))
def test_the_defaults_learn_the_value_itself(name: str) -> None:
    """Both served defaults learn a graded reward as a value: no coin, and the step lies strictly
    between those of the two bits (the regression moves towards the cost 1 - r)."""
    cls = learners.get(name)
    assert cls.graded
    rng = np.random.default_rng(0)
    if cls.actions:
        from service.actions import ActionFeaturiser

        f = ActionFeaturiser(12, 64, 16)
        x = f(
            {"u": "a", "n": 3.0}, [{"id": str(i), "features": {"k": str(i), "p": 10.0 * i}} for i in range(3)]
        )
        m = make_learner(name, 1 << 12, 1, {}, seed=0)
    else:
        x = rng.random(D)
        m = make_learner(name, D, K, {}, seed=0)
    d = m.decide(x, np.random.default_rng(1))
    after = {}
    for reward in (0.0, 0.3, 1.0):
        trial = copy.deepcopy(m)
        trial.learn(x, d, reward if reward not in (0.0, 1.0) else bool(reward))
        predicted = trial.scores(x) if hasattr(trial, "scores") else 1.0 - trial.costs(x)
        after[reward] = predicted[d.label]
    assert after[0.0] < after[0.3] < after[1.0]
