"""The full-information multiclass Perceptron against a textbook loop."""

from __future__ import annotations

import numpy as np
import pytest

from service.learners.base import make_learner


def test_perceptron_oracle() -> None:
    rng = np.random.default_rng(3)
    k, d = 3, 4
    m = make_learner("perceptron", d, k)
    W = np.zeros((k, d))
    for t in range(300):
        x, y = rng.normal(size=d), int(rng.integers(k))
        dec = m.decide(x, np.random.default_rng(t))
        assert (W @ x)[dec.label] == pytest.approx((W @ x).max())
        if dec.label != y:
            W[y] += x
            W[dec.label] -= x
        m.learn_full(x, dec, y)
    np.testing.assert_array_equal(m.W_, W)
