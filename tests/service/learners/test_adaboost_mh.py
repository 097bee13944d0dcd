"""The served bandit-aided AdaBoost.MH learner: unbiased logging, retrain, save/load, warm start."""

from __future__ import annotations

import numpy as np
import pytest

from lab.sim.stream import run_stream
from service.learners import make_learner
from service.learners.adaboost_mh import AdaBoostMH
from service.learners.base import Decision, Learner, ParamError, gamma_mix, learner_from_state
from service.sampling import DecisionIds, decision_rng
from service.serial import checksum, decode, encode


def blobs(n: int, seed: int, d: int = 6, K: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """A stream where the label is a function of two features (stumps can fit it)."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    y = (X[:, 0] > 0.5).astype(np.int64) + 2 * (X[:, 1] > 0.5)
    return X, y % K


def fresh(**params: object) -> AdaBoostMH:
    learner = make_learner("adaboost-mh", 6, 4, {"retrain_every": 50, "iterations": 20, **params}, seed=3)
    assert isinstance(learner, AdaBoostMH)
    return learner


@pytest.mark.parametrize("seed", range(20))
def test_logged_weights_are_unbiased_share_point_weights(seed: int) -> None:
    """Enumerate the sampled label: E[W_log row] = share-point row, and only the shown entry is set."""
    rng = np.random.default_rng(seed)
    K = int(rng.integers(2, 8))
    y, greedy = int(rng.integers(K)), int(rng.integers(K))
    probs = gamma_mix(K, greedy, float(rng.uniform(0.01, 0.9)))
    expected = np.zeros(K)
    for shown in range(K):
        learner = make_learner("adaboost-mh", 3, K, {"retrain_every": 10}, seed=0)
        learner.learn(np.ones(3), Decision(probs, shown), shown == y)
        row_w, row_y = learner.W_log_[0], learner.Y_log_[0]
        assert np.count_nonzero(row_w) == 1 and np.count_nonzero(row_y) == 1
        assert row_y[shown] == (1 if shown == y else -1)
        expected += probs[shown] * row_w
    share = np.full(K, 0.5 / (K - 1))
    share[y] = 0.5
    np.testing.assert_allclose(expected, share, rtol=1e-12)


def test_decide_does_not_change_the_model_and_probabilities_sum_to_one() -> None:
    learner = fresh()
    X, y = blobs(120, 0)
    run_stream(learner, X, y, DecisionIds.for_seed(0))
    before = checksum(learner.state())
    for i in range(20):
        d = learner.decide(X[i], decision_rng(f"id{i}"))
        assert d.probs.sum() == pytest.approx(1.0)
        assert d.probs.min() == pytest.approx(0.05 / 4)
    assert checksum(learner.state()) == before


@pytest.mark.parametrize("search", ["ucb", "exp3p", "full"])
def test_save_load_mid_stream_is_bit_identical(search: str) -> None:
    X, y = blobs(300, 1)
    ids_a, ids_b = DecisionIds.for_seed(5), DecisionIds.for_seed(5)
    a = fresh(search=search, max_log=100)  # the ring buffer wraps before the end
    run_stream(a, X[:130], y[:130], ids_a)
    b: Learner = learner_from_state(a.config(), decode(encode(a.state())))
    for _ in range(130):  # the second run continues the same id sequence
        ids_b.new()
    ca = run_stream(a, X[130:], y[130:], ids_a)
    cb = run_stream(b, X[130:], y[130:], ids_b)
    np.testing.assert_array_equal(ca, cb)
    assert checksum(a.state()) == checksum(b.state())


def test_same_seed_same_stream_same_model_and_retrain_is_deterministic() -> None:
    X, y = blobs(200, 2)
    runs = []
    for _ in range(2):
        learner = fresh(search="exp3p")
        runs.append((run_stream(learner, X, y, DecisionIds.for_seed(1)), learner))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    a, b = runs[0][1], runs[1][1]
    assert checksum(a.state()) == checksum(b.state())
    a.retrain()
    b.retrain()
    assert checksum(a.state()) == checksum(b.state())
    assert a.alphas_.size == 20


def test_ring_buffer_keeps_the_last_max_log_rows() -> None:
    learner = fresh(max_log=40, retrain_every=1000)
    X, y = blobs(100, 3)
    run_stream(learner, X, y, DecisionIds.for_seed(0))
    assert learner.n_logged_ == 100 and learner.X_log_.shape == (40, 6)
    rows = np.arange(60, 100) % 40
    np.testing.assert_array_equal(learner.X_log_[rows], X[60:100])


def test_learns_from_clicks_only() -> None:
    X, y = blobs(3000, 4)
    learner = fresh(retrain_every=200, iterations=30)
    correct = run_stream(learner, X, y, DecisionIds.for_seed(2))
    assert correct[-1000:].mean() > 0.85  # chance is 0.25; greedy accuracy is capped by 1 - 0.05 * 3/4
    assert correct[:200].mean() < 0.5  # before the first retrain the policy is uniform


def test_warm_start_from_labelled_data() -> None:
    X, y = blobs(400, 5)
    learner = fresh(iterations=30)
    learner.warm_start(X, y)
    assert learner.t_ == 0 and learner.n_logged_ == 400
    X_test, y_test = blobs(500, 6)
    scores = np.array([learner.scores(x) for x in X_test])
    assert np.mean(scores.argmax(axis=1) == y_test) > 0.95


def test_bad_params_are_refused() -> None:
    with pytest.raises(ParamError, match="epsilon"):
        make_learner("adaboost-mh", 3, 2, {"epsilon": 0.0})
    with pytest.raises(ParamError, match="search"):
        make_learner("adaboost-mh", 3, 2, {"search": "random"})


def test_the_log_is_bounded_in_bytes() -> None:
    """A wide input keeps fewer rows: the log never exceeds ``max_log_bytes`` (issue 20, item 3)."""

    d, k = 1 << 18, 10
    assert AdaBoostMH.growth_nbytes(d, k) <= 128 * 2**20 + 100 * (24 + 8 * k)
    m = make_learner("adaboost-mh", d, k, {"max_log_bytes": 3 * (8 * d + 9 * k), "retrain_every": 4}, seed=0)
    rng = np.random.default_rng(0)
    for _ in range(10):
        x = np.zeros(d)
        x[rng.integers(d, size=5)] = 1.0
        m.learn(x, m.decide(x, rng), bool(rng.integers(2)))
    assert m.X_log_.shape[0] == 3 and m.n_logged_ == 10
    assert m.state_nbytes(d, k, m.params.model_dump()) == m.nbytes()
