"""AdaBoost.MH (ALGORITHMS.md §7.1): weights, Z, stump search against brute force, oracle training."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from service.learners.stumps.mh import StumpData, alpha, label_matrix, share_point_weights
from service.learners.stumps.train import boost, train


def toy(seed: int, n: int = 40, d: int = 5, K: int = 3, levels: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Small data with repeated values (ties) and a label that depends on two features."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, levels, size=(n, d)).astype(np.float64)
    y = ((X[:, 0] + 2 * X[:, 1] + rng.integers(0, 2, n)) % K).astype(np.int64)
    return X, y


def brute_force_best(X: np.ndarray, Y: np.ndarray, W: np.ndarray) -> tuple[float, set[tuple[int, float]]]:
    """Textbook search: every feature, every midpoint, gamma_l = sum_i W_il Y_il phi(x_i)."""
    best, argbest = -1.0, set()
    for j in range(X.shape[1]):
        values = sorted(set(X[:, j].tolist()))
        for lo, hi in itertools.pairwise(values):
            theta = (lo + hi) / 2
            phi = np.where(X[:, j] > theta, 1.0, -1.0)
            gamma = (W * Y * phi[:, None]).sum(axis=0)
            edge = float(np.abs(gamma).sum())
            if edge > best + 1e-12:
                best, argbest = edge, {(j, theta)}
            elif abs(edge - best) <= 1e-12:
                argbest.add((j, theta))
    return best, argbest


def test_share_point_weights_sum_to_one_and_split_half_on_the_label() -> None:
    y = np.array([0, 2, 1, 2])
    W = share_point_weights(y, 3)
    assert W.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(W[np.arange(4), y], 1 / 8)
    np.testing.assert_allclose(W.sum(axis=1), 1 / 4)


@pytest.mark.parametrize("seed", range(8))
def test_stump_search_equals_brute_force(seed: int) -> None:
    X, y = toy(seed)
    K = 3
    Y = label_matrix(y, K).astype(np.float64)
    data = StumpData(X, Y, share_point_weights(y, K))
    rng = np.random.default_rng(seed)
    data.W = rng.dirichlet(np.ones(X.shape[0] * K)).reshape(-1, K)  # arbitrary normalised weights
    edge, argbest = brute_force_best(X, Y, data.W)
    stump = data.search()
    assert stump.edge == pytest.approx(edge, abs=1e-12)
    assert (stump.feature, stump.threshold) in argbest
    np.testing.assert_array_equal(
        stump.votes, np.where((data.W * Y * stump.phi(X)[:, None]).sum(0) > 0, 1, -1)
    )
    # a subset search (one bandit arm) equals brute force restricted to that feature
    for j in range(X.shape[1]):
        e_j, _ = brute_force_best(X[:, [j]], Y, data.W)
        assert data.search([j]).edge == pytest.approx(max(e_j, 0.0), abs=1e-12)
    assert stump.evaluations == sum(len(set(X[:, j].tolist())) - 1 for j in range(X.shape[1]))


def test_stump_search_over_several_chunks_equals_per_feature_search() -> None:
    rng = np.random.default_rng(1)
    n, d, K = 700, 1600, 4  # n K d > 4M elements: the search runs in two chunks
    X = rng.integers(0, 6, size=(n, d)).astype(np.float64)
    y = rng.integers(0, K, n)
    data = StumpData(X, label_matrix(y, K), share_point_weights(y, K))
    per_feature = data.feature_edges()
    stump = data.search()
    assert stump.edge == pytest.approx(per_feature.max(), abs=1e-12)
    assert per_feature[stump.feature] == pytest.approx(stump.edge, abs=1e-12)


def test_constant_feature_has_no_stump() -> None:
    X = np.ones((5, 1))
    y = np.array([0, 1, 0, 1, 1])
    data = StumpData(X, label_matrix(y, 2), share_point_weights(y, 2))
    stump = data.search()
    assert stump.edge == 0.0 and stump.evaluations == 0 and math.isinf(stump.threshold)
    assert alpha(0.0, 0.0) == 0.0


@pytest.mark.parametrize("search", ["full", "ucb", "exp3p"])
def test_weights_stay_normalised_and_z_is_sqrt_one_minus_edge_squared(search: str) -> None:
    X, y = toy(3, n=60)
    K = 3
    data = StumpData(X, label_matrix(y, K), share_point_weights(y, K))
    product_z = 1.0
    for step in boost(data, 25, search, np.random.default_rng(0), epsilon=0.0):
        assert data.W.sum() == pytest.approx(1.0, abs=1e-12)
        assert np.all(data.W >= 0.0)
        assert pytest.approx(math.sqrt(1.0 - step.stump.edge**2), abs=1e-12) == step.Z
        product_z *= step.Z
    # The exponential loss under share-point weights is prod Z_t; training error <= sqrt(K-1) L_e (§7.1).
    model = train(
        StumpData(X, label_matrix(y, K), share_point_weights(y, K)), 25, search, np.random.default_rng(0), 0.0
    )
    error = np.mean(model.scores(X).argmax(axis=1) != y)
    assert error <= math.sqrt(K - 1) * product_z + 1e-12


def test_weights_with_unknown_entries_keep_them_at_zero() -> None:
    X, y = toy(4)
    K = 3
    Y = np.zeros((y.size, K), dtype=np.int8)
    W0 = np.zeros((y.size, K))
    shown = (y + np.arange(y.size)) % K  # one revealed entry per row, as from click logs
    Y[np.arange(y.size), shown] = np.where(shown == y, 1, -1)
    W0[np.arange(y.size), shown] = 1.0 + np.arange(y.size) % 3
    data = StumpData(X, Y, W0)
    for step in boost(data, 10, "full", np.random.default_rng(0), 0.0):
        assert data.W.sum() == pytest.approx(1.0, abs=1e-12)
        assert np.all(data.W[W0 == 0.0] == 0.0)
        assert pytest.approx(math.sqrt(1.0 - step.stump.edge**2), abs=1e-12) == step.Z


def textbook_adaboost_mh(X: np.ndarray, y: np.ndarray, K: int, T: int, eps: float) -> list[tuple]:
    """Schapire-Singer AdaBoost.MH with share-point weights and brute-force stumps (§7.1)."""
    n = y.size
    Y = -np.ones((n, K))
    Y[np.arange(n), y] = 1.0
    W = np.where(Y > 0, 1 / (2 * n), 1 / (2 * n * (K - 1)))
    out = []
    for _ in range(T):
        edge, argbest = brute_force_best(X, Y, W)
        j, theta = min(argbest)
        phi = np.where(X[:, j] > theta, 1.0, -1.0)
        v = np.where((W * Y * phi[:, None]).sum(0) > 0, 1.0, -1.0)
        a = 0.5 * math.log(((1 + edge) / 2 + eps) / ((1 - edge) / 2 + eps))
        W = W * np.exp(-a * phi[:, None] * v * Y)
        W /= W.sum()
        out.append((j, theta, a, v, W))
    return out


def test_full_search_matches_textbook_oracle() -> None:
    rng = np.random.default_rng(5)
    X = rng.normal(size=(30, 4)).round(3)  # continuous: the best stump is unique every iteration
    y = (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 0.5)
    K, T, eps = 3, 6, 0.01 / 30
    data = StumpData(X, label_matrix(y, K), share_point_weights(y, K))
    steps = list(boost(data, T, "full", np.random.default_rng(0), eps))
    oracle = textbook_adaboost_mh(X, y, K, T, eps)
    for step, (j, theta, a, v, _) in zip(steps, oracle, strict=True):
        assert (step.stump.feature, step.stump.threshold) == (j, pytest.approx(theta, abs=1e-12))
        assert step.alpha == pytest.approx(a, abs=1e-10)
        np.testing.assert_array_equal(step.stump.votes, v)
    np.testing.assert_allclose(data.W, oracle[-1][4], atol=1e-12)


def test_retrain_is_deterministic() -> None:
    X, y = toy(6, n=80)
    models = []
    for _ in range(2):
        for search in ("full", "ucb", "exp3p"):
            data = StumpData(X, label_matrix(y, 3), share_point_weights(y, 3))
            models.append(train(data, 15, search, np.random.default_rng(7), 0.01 / 80))
    for a, b in zip(models[:3], models[3:], strict=True):
        for name in ("features", "thresholds", "alphas", "votes"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
