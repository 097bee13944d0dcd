"""AdaBandit and the pieces it shares with Adaboost.OLM: estimator (4), costs (5), (10), gradient (11)."""

from __future__ import annotations

import numpy as np
import pytest

from lab.sim.datasets import load_dataset
from lab.sim.stream import run_stream
from service.learners import make_learner
from service.learners.base import Decision, rho_mix
from service.learners.booster_costs import (
    costs_to_examples,
    logistic_alpha_grad,
    logistic_cost_matrices,
    loss_estimate,
)
from service.sampling import DecisionIds, decision_rng
from service.serial import decode, encode


def logistic_loss(s: np.ndarray, r: int) -> float:
    """Textbook ``L^r(s) = sum_{l != r} log(1 + exp(s[l] - s[r]))``."""
    return float(sum(np.log1p(np.exp(s[j] - s[r])) for j in range(s.size) if j != r))


def cases(n: int, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        k = int(rng.integers(2, 9))
        rho = float(rng.uniform(0.01, (k - 1) / k))
        yield rng, k, rho, int(rng.integers(k)), int(rng.integers(k))


def test_estimator_4_is_unbiased_by_enumeration() -> None:
    for _, k, rho, y, greedy in cases(400, 0):
        p = rho_mix(k, greedy, rho)
        mean = sum(p[lab] * loss_estimate(p, lab, greedy, lab == y) for lab in range(k))
        np.testing.assert_allclose(mean, 1.0 - np.eye(k)[y], atol=1e-12)


def test_estimator_4_is_the_numpy_textbook_bit_for_bit() -> None:
    """loss_estimate works on Python floats; the vector form of eq. (4) gives the same bits."""
    for rng, k, _, _, greedy in cases(300, 7):
        p = rng.dirichlet(np.ones(k))
        for lab in range(k):
            for reward in (False, True):
                ref = np.zeros(k)
                if reward:
                    ref += 1.0 / p[lab]
                    ref[lab] -= 1.0 / p[lab]
                    ref[greedy] -= 1.0 / p[lab]
                if lab == greedy:
                    ref[greedy] += 1.0 / p[greedy]
                got = loss_estimate(p, lab, greedy, reward)
                assert got.dtype == np.float64 and got.tobytes() == ref.tobytes()


def test_estimator_4_cases_and_bound() -> None:
    for _, k, rho, y, greedy in cases(200, 1):
        p = rho_mix(k, greedy, rho)
        for lab in range(k):
            ell = loss_estimate(p, lab, greedy, lab == y)
            assert np.abs(ell).max() <= max((k - 1) / rho, 1 / (1 - rho)) + 1e-9
            if lab != greedy and lab != y:  # explore miss
                assert not ell.any()
            if lab == greedy and lab != y:  # exploit miss: non-zero
                assert ell[greedy] == pytest.approx(1 / (1 - rho))


def test_random_cost_vector_5_is_unbiased() -> None:
    for rng, k, rho, y, greedy in cases(300, 2):
        G = rng.normal(size=(k, k))
        p = rho_mix(k, greedy, rho)
        mean = sum(p[lab] * (G @ (1 - loss_estimate(p, lab, greedy, lab == y))) for lab in range(k))
        np.testing.assert_allclose(mean, G[:, y], atol=1e-9)


def test_cost_matrix_10_columns_are_gradients() -> None:
    rng = np.random.default_rng(3)
    for _ in range(100):
        k = int(rng.integers(2, 8))
        s = rng.normal(scale=2.0, size=k)
        G = logistic_cost_matrices(s[None])[0]
        np.testing.assert_allclose(G.sum(axis=0), 0.0, atol=1e-12)
        h = 1e-6
        for r in range(k):
            fd = [(logistic_loss(s + h * e, r) - logistic_loss(s - h * e, r)) / (2 * h) for e in np.eye(k)]
            np.testing.assert_allclose(G[:, r], fd, atol=1e-7)
            assert G[r, r] == G[:, r].min()


def test_first_round_cost_matrix() -> None:
    G = logistic_cost_matrices(np.zeros((1, 4)))[0]
    np.testing.assert_allclose(G, np.full((4, 4), 0.5) - 2.0 * np.eye(4))


def test_alpha_gradient_11_matches_finite_differences_and_is_unbiased() -> None:
    for rng, k, rho, y, greedy in cases(200, 4):
        s = rng.normal(size=k)
        j = int(rng.integers(k))
        a = float(rng.uniform(-2, 2))
        iota = rng.normal(size=k)
        h = 1e-6

        e = np.eye(k)[j]
        fd = [sum(iota[r] * logistic_loss(s + (a + d) * e, r) for r in range(k)) for d in (h, -h)]

        def grad(iota: np.ndarray, s: np.ndarray = s, j: int = j, a: float = a) -> float:
            return float(logistic_alpha_grad(s[None], np.array([j]), np.array([a]), iota)[0])

        assert grad(iota) == pytest.approx((fd[0] - fd[1]) / (2 * h), abs=1e-6)
        p = rho_mix(k, greedy, rho)
        mean = sum(p[lab] * grad(1 - loss_estimate(p, lab, greedy, lab == y)) for lab in range(k))
        truth = grad(np.eye(k)[y])
        assert mean == pytest.approx(truth, abs=1e-9)


def test_label_weight_reduction() -> None:
    rng = np.random.default_rng(5)
    C = np.array([[3.0, -1.0, -1.0, 500.0], [0.0, 1.0, 2.0, 3.0]])
    labels, weights = costs_to_examples(C, 100.0, rng, prefer=2)
    assert labels.tolist() == [2, 0]
    assert weights.tolist() == [4.0 + 101.0, 6.0]
    labels, _ = costs_to_examples(C[:1], 100.0, rng, prefer=3)  # not a minimiser: random minimiser
    assert labels[0] in (1, 2)
    assert costs_to_examples(np.zeros((1, 3)), 100.0, rng)[1][0] == 1e-10


def test_rho_must_leave_the_greedy_label_the_largest_mass() -> None:
    from service.learners.base import ParamError

    with pytest.raises(ParamError, match="rho"):
        make_learner("adabandit", 3, 2, {"rho": 0.6})


@pytest.fixture(scope="module")
def car_stream():
    ds = load_dataset("car")
    X, y = ds.stream(0, 1, limit=1200)
    return ds, X, y


@pytest.mark.parametrize("name", ["adabandit", "adaboost-olm"])
def test_save_load_mid_growth_is_bit_identical(name: str, car_stream) -> None:
    ds, X, y = car_stream
    params = {"n_learners": 5, "grace": (5.0, 10.0)}
    a = make_learner(name, ds.d, ds.n_labels, params, seed=3)
    run_stream(a, X[:600], y[:600], DecisionIds.for_seed(1))
    assert a.trees_.n_leaves_.max() > 1  # trees have grown
    b = type(a).from_state(a.config(), decode(encode(a.state())))
    ids_a, ids_b = DecisionIds.for_seed(2), DecisionIds.for_seed(2)
    ca = run_stream(a, X[600:], y[600:], ids_a)
    cb = run_stream(b, X[600:], y[600:], ids_b)
    assert (ca == cb).all()
    assert encode(a.state()) == encode(b.state())


def test_learn_uses_the_decision_memo(car_stream) -> None:
    """A decision made before other updates landed is learned with its own weak predictions and votes."""
    ds, X, y = car_stream
    m = make_learner("adabandit", ds.d, ds.n_labels, {"n_learners": 4}, seed=0)
    run_stream(m, X[:300], y[:300], DecisionIds.for_seed(0))
    rng = np.random.default_rng(9)
    old = m.decide(X[300], rng)
    run_stream(m, X[301:400], y[301:400], DecisionIds.for_seed(5))
    copy = Decision.from_state(decode(encode(old.to_state())))
    m.learn(X[300], copy, copy.label == y[300])
    assert m.t_ == 400 - 300 + 300 - 1 + 1


def test_adabandit_learns_car() -> None:
    ds = load_dataset("car")
    X, y = ds.stream(0, 2, limit=3000)
    m = make_learner("adabandit", ds.d, ds.n_labels, {"n_learners": 5, "rho": 0.02}, seed=0)
    correct = run_stream(m, X, y, DecisionIds.for_seed(0))
    assert correct[-1000:].mean() > 0.8 > np.mean(y == 0)  # well above the majority class


def test_lr_scale_multiplies_the_alpha_step_exactly() -> None:
    """``eta_t = lr_scale * rho / (k^2 sqrt t)`` (ALGORITHMS.md §2.7): from one state and one decision,
    a model with ``lr_scale=3`` moves every alpha three times as far as one with ``lr_scale=1``."""
    from service.learners.base import learner_from_state

    ds = load_dataset("car")
    X, y = ds.stream(1, 1, limit=300)
    m1 = make_learner("adabandit", ds.d, ds.n_labels, {"n_learners": 4, "rho": 0.2, "lr_scale": 1.0}, seed=0)
    run_stream(m1, X[:-1], y[:-1], DecisionIds.for_seed(0))
    config = m1.config()
    config["params"] = {**config["params"], "lr_scale": 3.0}
    m3 = learner_from_state(config, m1.state())
    before = m1.alpha_.copy()
    assert np.array_equal(m3.alpha_, before) and np.abs(before).max() < 1.0
    d = m1.decide(X[-1], np.random.default_rng(9))
    for m in (m1, m3):
        m.learn(X[-1], d, d.label == y[-1])
    step1, step3 = m1.alpha_ - before, m3.alpha_ - before
    assert np.abs(step1).max() > 0.0
    np.testing.assert_allclose(step3, 3.0 * step1, rtol=1e-12, atol=0.0)


def test_learn_scratch_kept_or_fresh_gives_the_same_bits() -> None:
    """A small model keeps its learn event's scratch arrays between events, a wide one makes them
    afresh (issue 41); every element is written each event, so both learn the same bits, and the
    scratch is not state (save/load sees neither)."""
    data = load_dataset("car")
    X, y = data.stream(0, limit=600)
    kept = make_learner("adabandit", X.shape[1], data.n_labels, {"n_learners": 6}, seed=4)
    fresh = make_learner("adabandit", X.shape[1], data.n_labels, {"n_learners": 6}, seed=4)
    fresh.SCRATCH_KEPT = 0  # type: ignore[attr-defined]
    ids = DecisionIds.for_seed(4)
    for t in range(X.shape[0]):
        i = ids.new()
        a, b = kept.decide(X[t], decision_rng(i)), fresh.decide(X[t], decision_rng(i))
        assert a.label == b.label
        kept.learn(X[t], a, a.label == y[t])
        fresh.learn(X[t], b, b.label == y[t])
    assert kept._scratch is not None and fresh._scratch is None  # type: ignore[attr-defined]
    assert encode(kept.get_state()) == encode(fresh.get_state())
    wide = make_learner("adabandit", 4, 300, {}, seed=0)
    d = wide.decide(np.ones(4), np.random.default_rng(0))
    wide.learn(np.ones(4), d, True)
    assert wide._scratch is None  # type: ignore[attr-defined]
