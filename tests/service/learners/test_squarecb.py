"""SquareCB against a textbook: ridge regression solved from scratch each round, and the inverse gap
weighting of Foster & Rakhlin (2020) written out."""

from __future__ import annotations

import numpy as np
import pytest

from service.learners import ParamError, make_learner
from service.sampling import DecisionIds, decision_rng


def textbook_probs(
    rows: list[list[np.ndarray]], clicks: list[list[float]], x: np.ndarray, ridge: float, gamma: float
) -> np.ndarray:
    """Each label's ridge solution on the rounds it was served, then p(a) = 1/(K + gamma gap)."""
    k = len(rows)
    xe = np.append(x, 1.0)
    r = np.empty(k)
    for a in range(k):
        A = ridge * np.eye(xe.size)
        b = np.zeros(xe.size)
        for row, click in zip(rows[a], clicks[a], strict=True):
            A += np.outer(row, row)
            b += click * row
        r[a] = np.linalg.solve(A, b) @ xe
    best = int(np.argmax(r))
    p = 1.0 / (k + gamma * (r[best] - r))
    p[best] = 0.0
    p[best] = 1.0 - p.sum()
    return p


@pytest.mark.parametrize(
    ("ridge", "scale", "exponent"), [(1.0, 10.0, 0.5), (0.3, 2.0, 0.0), (5.0, 30.0, 1.0)]
)
def test_probabilities_are_the_textbook_ridge_and_inverse_gap_weighting(
    ridge: float, scale: float, exponent: float
) -> None:
    rng = np.random.default_rng(3)
    d, k, n = 4, 3, 250
    X = rng.normal(size=(n, d))
    y = np.argmax(X[:, :k] + 0.3 * rng.normal(size=(n, k)), axis=1)
    params = {"ridge": ridge, "gamma_scale": scale, "gamma_exponent": exponent}
    m = make_learner("squarecb", d, k, params, seed=0)
    ids = DecisionIds.for_seed(1)
    rows: list[list[np.ndarray]] = [[] for _ in range(k)]
    clicks: list[list[float]] = [[] for _ in range(k)]
    moved = 0
    for t in range(n):
        gamma = scale * (t + 1) ** exponent
        want = textbook_probs(rows, clicks, X[t], ridge, gamma)
        dec = m.decide(X[t], decision_rng(ids.new()))
        np.testing.assert_allclose(dec.probs, want, rtol=1e-8, atol=1e-12)
        assert dec.memo["greedy"] == int(np.argmax(dec.probs))
        moved += float(dec.probs.max()) > 1.0 / k + 1e-6
        click = dec.label == y[t]
        m.learn(X[t], dec, click)
        rows[dec.label].append(np.append(X[t], 1.0))
        clicks[dec.label].append(float(click))
    assert moved > n // 2, "the regressions should leave the uniform start"
    # every label's inverse Gram matrix stays exactly symmetric, and is the inverse of ridge I + sum x x'
    for a in range(k):
        np.testing.assert_array_equal(m.A_inv_[a], m.A_inv_[a].T)
        gram = ridge * np.eye(d + 1) + sum((np.outer(r, r) for r in rows[a]), np.zeros((d + 1, d + 1)))
        np.testing.assert_allclose(m.A_inv_[a] @ gram, np.eye(d + 1), atol=1e-8)


def test_without_the_constant_the_scores_are_linear_in_x() -> None:
    m = make_learner("squarecb", 2, 2, {"constant": False}, seed=0)
    assert m.theta_.shape == (2, 2) and m.A_inv_.shape == (2, 2, 2)
    x = np.array([1.0, 2.0])
    dec = m.decide(x, np.random.default_rng(0))
    m.learn(x, dec, True)
    dec0 = m.decide(np.zeros(2), np.random.default_rng(0))
    np.testing.assert_array_equal(dec0.probs, [0.5, 0.5])  # the zero row scores 0 for every label


def test_bad_hyperparameters_are_refused() -> None:
    for params, needle in [({"ridge": 0.0}, "ridge"), ({"gamma_exponent": 2.0}, "gamma_exponent")]:
        with pytest.raises(ParamError, match=needle):
            make_learner("squarecb", 2, 2, params)


def test_a_row_of_the_wrong_dimension_is_refused() -> None:
    m = make_learner("squarecb", 3, 2, seed=0)
    dec = m.decide(np.ones(3), np.random.default_rng(0))
    for x in (np.ones(2), np.ones(4)):
        with pytest.raises(ValueError, match="wrong dimension"):
            m.decide(x, np.random.default_rng(0))
        with pytest.raises(ValueError, match="wrong dimension"):
            m.learn(x, dec, True)
    assert m.t_ == 0 and np.all(m.theta_ == 0.0)  # refused rows changed nothing
