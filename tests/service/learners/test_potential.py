"""The boost-by-majority potential and cost matrix (9) (ALGORITHMS.md §2.6, §8)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from service.learners.booster_costs import bbm_cost_matrix, bbm_potential, bbm_potential_mc


def loss(s: np.ndarray, r: int, ties: str) -> float:
    """Textbook zero-one loss of a vote vector."""
    if ties == "pessimistic":
        return float(max(np.delete(s, r)) >= s[r])
    top = np.flatnonzero(s == s.max())
    return 1.0 - (r in top) / top.size


def potential_by_enumeration(n: int, s: np.ndarray, r: int, gamma: float, ties: str) -> float:
    """E_{X ~ Mult(n, u^r)} L^r(s + X) by summing over every outcome of the n draws."""
    k = s.size
    u = np.full(k, (1 - gamma) / k)
    u[r] += gamma
    total = 0.0
    for draws in itertools.product(range(k), repeat=n):
        x = np.bincount(draws, minlength=k)
        total += math.prod(u[d] for d in draws) * loss(s + x, r, ties)
    return total


@pytest.mark.parametrize("ties", ["random", "pessimistic"])
def test_exact_potential_equals_enumeration(ties: str) -> None:
    rng = np.random.default_rng(1)
    for _ in range(40):
        k = int(rng.integers(2, 5))
        n = int(rng.integers(0, 6 if k < 4 else 5))
        s = rng.integers(0, 4, k)
        r = int(rng.integers(k))
        gamma = float(rng.uniform(0.01, 0.5))
        assert bbm_potential(n, s, r, gamma, ties) == pytest.approx(
            potential_by_enumeration(n, s, r, gamma, ties), abs=1e-12
        )


@pytest.mark.parametrize("ties", ["random", "pessimistic"])
def test_cost_vector_is_minimal_at_the_true_label(ties: str) -> None:
    rng = np.random.default_rng(2)
    for _ in range(60):
        k = int(rng.integers(2, 7))
        n = int(rng.integers(0, 15))
        s = rng.integers(0, 6, k)
        G = bbm_cost_matrix(n, s, 0.1, ties)
        for r in range(k):
            assert G[r, r] <= G[:, r].min() + 1e-12


def test_monte_carlo_is_close_to_exact() -> None:
    rng = np.random.default_rng(3)
    errors = []
    for _ in range(20):
        k, n = 4, int(rng.integers(1, 12))
        s = rng.integers(0, 4, k)
        exact = bbm_cost_matrix(n, s, 0.1, "random")
        mc = bbm_potential_mc(n, s, 0.1, "random", rng, samples=2000)
        errors.append(np.abs(exact - mc).max())
    assert max(errors) < 0.06


def test_potential_with_no_learners_left_is_the_loss() -> None:
    s = np.array([2, 2, 1])
    assert bbm_potential(0, s, 0, 0.1, "random") == 0.5
    assert bbm_potential(0, s, 0, 0.1, "pessimistic") == 1.0
    assert bbm_potential(0, s, 2, 0.1, "random") == 1.0
