"""Banditron (ALGORITHMS.md §5): unbiasedness by exact enumeration, the erratum, an oracle loop."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from service.learners.banditron import Banditron
from service.learners.base import Decision, gamma_mix, make_learner


def expected_update(m: Banditron, x: np.ndarray, greedy: int, y: int) -> np.ndarray:
    """E over the sampled label of the implementation's own change to W, by exact enumeration."""
    p = gamma_mix(m.n_labels, greedy, m.params.gamma)
    total = np.zeros_like(m.W_)
    for sampled in range(m.n_labels):
        trial = Banditron(m.n_features, m.n_labels, m.params, seed=0)
        trial.W_ = m.W_.copy()
        trial.learn(x, Decision(p, sampled, {"greedy": greedy}), sampled == y)
        total += p[sampled] * (trial.W_ - m.W_)
    return total


@pytest.mark.parametrize("case", range(200))
def test_expected_update_is_the_perceptron_update(case: int) -> None:
    """seed 002 Lemma 4: E U~ = U, including the case yhat = y."""
    rng = np.random.default_rng(case)
    k, d = int(rng.integers(2, 10)), int(rng.integers(1, 6))
    m = make_learner("banditron", d, k, {"gamma": float(rng.uniform(0.01, 0.49))})
    m.W_ = rng.normal(size=(k, d))
    x = rng.normal(size=d)
    greedy, y = int(rng.integers(k)), int(rng.integers(k))
    perceptron = np.zeros((k, d))
    perceptron[y] += x
    perceptron[greedy] -= x
    np.testing.assert_allclose(expected_update(m, x, greedy, y), perceptron, atol=1e-12)


def _literal_seed002(k: int, gamma: Fraction, x: list[Fraction], greedy: int, y: int) -> list[list[Fraction]]:
    """E of the update as printed in seed 002's Algorithm 1 (1[yhat = r] in the first term)."""
    p = [gamma / k + (1 - gamma if r == greedy else 0) for r in range(k)]
    exp = [[Fraction(0)] * len(x) for _ in range(k)]
    for sampled in range(k):
        for r in range(k):
            coef = Fraction(int(y == sampled) * int(greedy == r)) / p[r] - int(greedy == r)
            for j, xj in enumerate(x):
                exp[r][j] += p[sampled] * xj * coef
    return exp


def test_the_form_printed_in_seed_002_is_biased() -> None:
    """The erratum: the literal Algorithm-1 form misses the Perceptron update in most cases."""
    rng = np.random.default_rng(0)
    biased = 0
    for _ in range(100):
        k = int(rng.integers(2, 8))
        gamma = Fraction(int(rng.integers(1, 49)), 100)
        x = [Fraction(int(v), 7) for v in rng.integers(-9, 10, size=3)]
        greedy, y = int(rng.integers(k)), int(rng.integers(k))
        target = [[xj * (int(r == y) - int(r == greedy)) for xj in x] for r in range(k)]
        biased += _literal_seed002(k, gamma, x, greedy, y) != target
    assert biased > 50


def test_oracle_textbook_loop() -> None:
    """Same decisions, same W as a plain-Python transcription of the algorithm."""
    rng = np.random.default_rng(1)
    k, d, gamma = 4, 5, 0.2
    m = make_learner("banditron", d, k, {"gamma": gamma}, seed=0)
    W = [[0.0] * d for _ in range(k)]
    for t in range(300):
        x = rng.normal(size=d)
        y = int(rng.integers(k))
        dec = m.decide(x, np.random.default_rng(t))
        scores = [sum(W[r][j] * x[j] for j in range(d)) for r in range(k)]
        assert scores[dec.memo["greedy"]] == pytest.approx(max(scores))
        yhat, sampled = dec.memo["greedy"], dec.label
        P = [(1 - gamma) * (r == yhat) + gamma / k for r in range(k)]
        assert dec.conditional.tolist() == pytest.approx(P)  # given yhat (probs: over its ties)
        for r in range(k):
            coef = (y == sampled) * (sampled == r) / P[r] - (yhat == r)
            for j in range(d):
                W[r][j] += x[j] * coef
        m.learn(x, dec, sampled == y)
    np.testing.assert_allclose(m.W_, np.array(W), rtol=1e-10, atol=1e-10)


def test_first_tie_break_takes_the_first_maximiser() -> None:
    m = make_learner("banditron", 2, 5, {"tie_break": "first"})
    assert all(m.decide(np.ones(2), np.random.default_rng(s)).memo["greedy"] == 0 for s in range(20))


def test_random_tie_break_is_uniform_at_the_start() -> None:
    m = make_learner("banditron", 2, 4)
    counts = np.bincount(
        [m.decide(np.ones(2), np.random.default_rng(s)).memo["greedy"] for s in range(4000)], minlength=4
    )
    assert counts.min() > 900  # 1000 expected each; 5 sigma ~ 137
