"""BanditBBM ("OptBandit") and OnlineMBBM: potential-based costs (9) over Hoeffding trees."""

from __future__ import annotations

import numpy as np
import pytest

from lab.sim.datasets import load_dataset
from lab.sim.stream import run_stream
from service.learners import make_learner
from service.learners.banditbbm import BanditBBM, bbm_costs
from service.learners.base import learners, rho_mix
from service.learners.booster_costs import bbm_cost_matrix, loss_estimate
from service.sampling import DecisionIds
from service.serial import decode, encode


def test_optbandit_is_an_alias() -> None:
    assert learners.get("optbandit") is BanditBBM


def test_bbm_costs_use_the_votes_of_the_earlier_learners() -> None:
    weak = np.array([2, 0, 2, 1])
    truth = np.eye(3)[2]
    C = bbm_costs(weak, 3, 0.1, "random", truth, None)
    s = np.zeros(3, dtype=int)
    for i, lab in enumerate(weak):
        # the compiled potential (bbm_kernels) against the Python DP: equal to rounding
        np.testing.assert_allclose(C[i], bbm_cost_matrix(3 - i, s, 0.1, "random")[:, 2], rtol=0, atol=1e-13)
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


@pytest.mark.parametrize("rule", ["argmin", "random"])
def test_unclicked_label_rule(rule: str, car) -> None:
    """``unclicked_label``: on an unclicked round every tree gets the minimiser of its cost vector
    (the paper's reduction) or, with the reference code's rule, a label other than the greedy one;
    the weights are the reduction's either way, and clicked rounds are unaffected."""
    from service.learners.booster_costs import costs_to_examples

    ds, X, y = car
    params = {"n_learners": 6, "rho": 0.3, "gamma": 0.1, "unclicked_label": rule}
    m = make_learner("banditbbm", ds.d, ds.n_labels, params, seed=3)
    run_stream(m, X[:200], y[:200], DecisionIds.for_seed(1))
    seen: list[tuple[np.ndarray, np.ndarray]] = []
    train = m._learn_forest

    def spy(*args: object, **kw: object) -> tuple[np.ndarray, np.ndarray]:
        labels, weights = train(*args, **kw)  # type: ignore[arg-type]
        seen.append((labels.copy(), weights.copy()))
        return labels, weights

    m._learn_forest = spy  # type: ignore[method-assign]
    rounds = 0
    for x in X[200:260]:
        d = m.decide(x, np.random.default_rng(rounds))
        ell = loss_estimate(d.conditional, d.label, int(d.memo["greedy"]), False)
        C = bbm_costs(np.asarray(d.memo["weak"]), ds.n_labels, 0.1, "random", 1.0 - ell, None)
        rng_copy = np.random.Generator(type(m.rng_.bit_generator)())
        rng_copy.bit_generator.state = m.rng_.bit_generator.state
        want_labels, want_weights = costs_to_examples(C, 100.0, rng_copy)
        m.learn(x, d, False)
        labels, weights = seen[-1]
        np.testing.assert_array_equal(weights, want_weights)
        if rule == "argmin":
            np.testing.assert_array_equal(labels, want_labels)
        else:
            assert (labels != int(d.memo["greedy"])).all()
        rounds += 1
    assert rounds == 60
    if rule == "random":  # labels are drawn per tree, not one label for the round
        assert any(len(set(labels.tolist())) > 1 for labels, _ in seen[-60:])


def test_its_trees_grow_on_wide_input_at_the_defaults() -> None:
    """Issue 41: BanditBBM's weights (sums of potential differences) are about 1 per example where
    AdaBandit's logistic costs give 15-25, and a tree's Hoeffding bound counts weight, so under
    AdaBandit's split confidence (1e-11 to 1e-10) its trees hardly split on digits' 64 pixels.
    Its default confidence lets them grow about as AdaBandit's do."""
    ds = load_dataset("digits")
    X, y = ds.stream(0, 1, limit=1_500)
    runs = {
        "banditbbm": ("banditbbm", {}),
        "adabandit": ("adabandit", {}),
        "wide": ("banditbbm", {"split_confidence": (1e-11, 1e-10)}),
    }
    leaves = {}
    for name, (learner, params) in runs.items():
        m = make_learner(learner, ds.d, ds.n_labels, params, seed=0)
        run_stream(m, X, y, DecisionIds.for_seed(0))
        leaves[name] = float(m.trees_.n_leaves_.mean())  # 64.1, 85.4 and 11.9 when written
    assert leaves["banditbbm"] >= 0.5 * leaves["adabandit"], leaves
    assert leaves["wide"] <= 0.5 * leaves["banditbbm"], leaves
