"""Exploration helpers, sampling, decision ids and the per-decision generator."""

from __future__ import annotations

import re

import numpy as np
import pytest

from service.learners.base import gamma_mix, randargmax, randargmin, rho_mix, sample
from service.sampling import DecisionIds, decision_rng


@pytest.mark.parametrize("k", [2, 3, 10])
def test_the_two_exploration_parameterisations(k: int) -> None:
    g = gamma_mix(k, 1, 0.3)
    assert g.sum() == pytest.approx(1) and g[1] == pytest.approx(0.7 + 0.3 / k)
    assert np.delete(g, 1) == pytest.approx(np.full(k - 1, 0.3 / k))
    r = rho_mix(k, 1, 0.3)
    assert r.sum() == pytest.approx(1) and r[1] == pytest.approx(0.7)
    assert np.delete(r, 1) == pytest.approx(np.full(k - 1, 0.3 / (k - 1)))


def test_sample_inverts_the_cdf() -> None:
    p = np.array([0.2, 0.0, 0.5, 0.3])

    class Fixed:
        def __init__(self, u: float) -> None:
            self.u = u

        def random(self) -> float:
            return self.u

    cases = {0.0: 0, 0.19: 0, 0.2: 2, 0.69: 2, 0.7: 3, 0.999999: 3}
    for u, label in cases.items():
        assert sample(p, Fixed(u)) == label  # type: ignore[arg-type]


def test_sample_frequencies_match() -> None:
    rng = np.random.default_rng(0)
    p = np.array([0.1, 0.6, 0.3])
    counts = np.bincount([sample(p, rng) for _ in range(30000)], minlength=3) / 30000
    np.testing.assert_allclose(counts, p, atol=0.015)


def test_random_argmax_and_argmin_break_ties_uniformly() -> None:
    rng = np.random.default_rng(1)
    v = np.array([1.0, 3.0, 0.0, 3.0, 3.0])
    hits = np.bincount([randargmax(v, rng) for _ in range(6000)], minlength=5)
    assert hits[[0, 2]].sum() == 0 and hits[[1, 3, 4]].min() > 1800
    lows = np.bincount([randargmin(-v, rng) for _ in range(6000)], minlength=5)
    assert lows[[0, 2]].sum() == 0 and lows[[1, 3, 4]].min() > 1800
    assert randargmax(np.array([0.0, 2.0, 1.0]), rng) == 1


def test_decision_ids_are_urlsafe_128_bit_and_distinct() -> None:
    ids = [DecisionIds().new() for _ in range(1000)]
    assert len(set(ids)) == 1000
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{22}", i) for i in ids)


def test_seeded_ids_repeat_per_seed_and_differ_across_seeds() -> None:
    a, b, c = DecisionIds.for_seed(1), DecisionIds.for_seed(1), DecisionIds.for_seed(2)
    first = [a.new() for _ in range(5)]
    assert first == [b.new() for _ in range(5)]
    assert not set(first) & {c.new() for _ in range(5)}


def test_decision_rng_depends_only_on_the_id() -> None:
    x = decision_rng("abc").random(3)
    decision_rng("other").random(7)
    np.testing.assert_array_equal(decision_rng("abc").random(3), x)
    assert not np.array_equal(decision_rng("abd").random(3), x)
