"""BanditBBM ("OptBandit") and OnlineMBBM: potential-based costs (9) over Hoeffding trees."""

from __future__ import annotations

import numpy as np
import pytest

from service.learners import make_learner
from service.learners.banditbbm import BanditBBM, bbm_costs
from service.learners.base import learners, rho_mix
from service.learners.booster_costs import bbm_cost_matrix, loss_estimate
from service.sampling import DecisionIds
from service.serial import decode, encode
from service.sim.datasets import load_dataset
from service.sim.stream import run_stream


def test_optbandit_is_an_alias() -> None:
    assert learners.get("optbandit") is BanditBBM


def test_bbm_costs_use_the_votes_of_the_earlier_learners() -> None:
    weak = np.array([2, 0, 2, 1])
    truth = np.eye(3)[2]
    C = bbm_costs(weak, 3, 0.1, "random", truth, None)
    s = np.zeros(3, dtype=int)
    for i, lab in enumerate(weak):
        np.testing.assert_array_equal(C[i], bbm_cost_matrix(3 - i, s, 0.1, "random")[:, 2])
        s[lab] += 1
    assert C[0].argmin() == 2  # the true label is cheapest (eq. (8))


def test_bandit_cost_vectors_are_unbiased_for_the_ideal_cost() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        k = int(rng.integers(2, 6))
        weak = rng.integers(0, k, 5)
        y, greedy = int(rng.integers(k)), int(rng.integers(k))
        rho = float(rng.uniform(0.05, (k - 1) / k))
        p = rho_mix(k, greedy, rho)
        mean = sum(
            p[lab] * bbm_costs(weak, k, 0.1, "random", 1 - loss_estimate(p, lab, greedy, lab == y), None)
            for lab in range(k)
        )
        np.testing.assert_allclose(mean, bbm_costs(weak, k, 0.1, "random", np.eye(k)[y], None), atol=1e-9)


@pytest.fixture(scope="module")
def car():
    ds = load_dataset("car")
    return ds, *ds.stream(0, 1, limit=900)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("banditbbm", {"n_learners": 5}),
        ("banditbbm", {"n_learners": 5, "potential": "mc"}),
        ("online-mbbm", {"n_learners": 5, "grace": (5.0, 10.0)}),
    ],
)
def test_save_load_mid_growth_is_bit_identical(name: str, params: dict, car) -> None:
    ds, X, y = car
    a = make_learner(name, ds.d, ds.n_labels, params, seed=4)
    run_stream(a, X[:500], y[:500], DecisionIds.for_seed(1))
    assert a.trees_.n_leaves_.max() > 1
    b = type(a).from_state(a.config(), decode(encode(a.state())))
    ca = run_stream(a, X[500:], y[500:], DecisionIds.for_seed(2))
    cb = run_stream(b, X[500:], y[500:], DecisionIds.for_seed(2))
    assert (ca == cb).all()
    assert encode(a.state()) == encode(b.state())


def test_bandit_bbm_learns_car(car) -> None:
    ds, X, y = car
    m = make_learner("optbandit", ds.d, ds.n_labels, {"n_learners": 5, "rho": 0.05}, seed=0)
    correct = run_stream(m, X, y, DecisionIds.for_seed(0))
    assert correct[-300:].mean() > 0.7 > np.mean(y == np.bincount(y).argmax()) - 0.1


def test_online_mbbm_reads_the_true_label(car) -> None:
    ds, X, _ = car
    m = make_learner("online-mbbm", ds.d, ds.n_labels, {"n_learners": 3}, seed=0)
    d = m.decide(X[0], np.random.default_rng(0))
    assert m.full_information and d.probability == 1.0
    with pytest.raises(NotImplementedError):
        m.learn(X[0], d, True)
