"""UCB1 and EXP3.P arm selectors and the edge reward (ALGORITHMS.md §7.2-7.4, §8)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from service.learners.stumps.bandits import EXP3P, UCB1, edge_reward, importance_weighted_reward


def test_edge_reward_is_the_capped_decrease_of_log_exponential_loss() -> None:
    assert edge_reward(0.0) == 0.0
    assert edge_reward(0.6) == pytest.approx(-0.5 * math.log(1 - 0.36))
    assert edge_reward(0.99) == 1.0  # -1/2 ln(1 - 0.9801) = 1.96, capped
    assert edge_reward(1.0) == 1.0
    # erratum of §7.2: log L_e = sum_t 1/2 log(1 - gamma_t^2) = -sum_t r_t (uncapped), so log Z_t = -r_t
    for g in (0.1, 0.3, 0.7):
        assert math.log(math.sqrt(1 - g * g)) == pytest.approx(-edge_reward(g))


@pytest.mark.parametrize("seed", range(100))
def test_exp3p_importance_weighted_reward_is_unbiased_exactly(seed: int) -> None:
    """E_{j_t ~ p} r_hat_j = r_j for every arm, by exact enumeration in rational arithmetic (§8)."""
    rng = np.random.default_rng(seed)
    M = int(rng.integers(2, 9))
    raw = [Fraction(int(v)) for v in rng.integers(1, 50, M)]
    probs = np.array([v / sum(raw) for v in raw], dtype=object)
    rewards = [Fraction(int(v), 97) for v in rng.integers(0, 98, M)]
    expectation = [Fraction(0)] * M
    for pulled in range(M):
        r_hat = importance_weighted_reward(pulled, rewards[pulled], probs)
        for j in range(M):
            expectation[j] += probs[pulled] * r_hat[j]
    assert expectation == rewards


def test_exp3p_matches_textbook_and_keeps_log_weights() -> None:
    """Auer et al.'s EXP3.P in the weight domain (oracle) vs the log-domain implementation."""
    M, T, delta = 5, 40, 0.1
    bandit = EXP3P(M, T, delta)
    gamma = min(3 / 5, 2 * math.sqrt(3 / 5 * M * math.log(M) / T))
    a = 2 * math.sqrt(math.log(M * T / delta))
    assert (bandit.gamma, bandit.alpha) == (pytest.approx(gamma), pytest.approx(a))
    w = np.full(M, math.exp(a * gamma / 3 * math.sqrt(T / M)))
    rng, oracle_rng = np.random.default_rng(3), np.random.default_rng(3)
    rewards = np.linspace(0.1, 0.9, M)
    for _ in range(T):
        p = (1 - gamma) * w / w.sum() + gamma / M
        np.testing.assert_allclose(bandit.probs(), p, rtol=1e-12)
        arm = bandit.select(rng)
        c = np.cumsum(p)
        assert arm == min(int(np.searchsorted(c, oracle_rng.random() * c[-1], side="right")), M - 1)
        r_hat = np.zeros(M)
        r_hat[arm] = rewards[arm] / p[arm]
        w = w * np.exp(gamma / (3 * M) * (r_hat + a / (p * math.sqrt(M * T))))  # every arm, with sqrt
        bandit.update(arm, float(rewards[arm]))
    assert bandit.probs().sum() == pytest.approx(1.0)


def test_exp3p_log_weights_do_not_overflow() -> None:
    bandit = EXP3P(2, 10)
    for _ in range(5000):
        bandit.update(0, 1.0)
    assert bandit.log_w.max() > math.log(np.finfo(float).max)  # plain weights would be inf
    p = bandit.probs()
    assert np.all(np.isfinite(p)) and p.sum() == pytest.approx(1.0)
    assert p.min() >= bandit.gamma / 2  # mixing keeps every arm at least gamma / M


def test_ucb1_initialisation_and_index_follow_multiboost() -> None:
    initial = np.array([0.2, 0.5, 0.1])
    bandit = UCB1(initial)
    assert bandit.tau == 2
    np.testing.assert_allclose(bandit.index(), initial + math.sqrt(2 * math.log(2)))
    assert bandit.select(np.random.default_rng(0)) == 1
    bandit.update(1, 0.0)
    np.testing.assert_allclose(
        bandit.index(),
        [0.2 + math.sqrt(2 * math.log(3)), 0.25 + math.sqrt(math.log(3)), 0.1 + math.sqrt(2 * math.log(3))],
    )
    assert bandit.select(np.random.default_rng(0)) == 0
    tied = UCB1(np.array([0.3, 0.3]))
    assert tied.select(np.random.default_rng(0)) == 0  # ties to the lowest index
