"""BanditBoost (seed 000, ALGORITHMS.md §4.1): unbiasedness, an oracle round, state, determinism."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lab.repro import reproductions
from lab.repro.seed000 import render
from lab.sim.stream import run_stream
from service.features import SparseVector
from service.learners import ParamError, make_learner
from service.learners.banditboost import hinge_subgradient, osboost_weights
from service.learners.base import Learner, gamma_mix
from service.sampling import DecisionIds, decision_rng
from service.serial import checksum, decode, encode

WEAK = ["perceptron", "naive_bayes"]


def stream(n: int, d: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A small stream with one-hot-ish binary features and labels that depend on them."""
    rng = np.random.default_rng(seed)
    X = (rng.random((n, d)) < 0.3).astype(np.float64)
    y = (X[:, : min(d, k)].argmax(axis=1) + (X.sum(axis=1) > d / 3)) % k
    return X, y.astype(np.int64)


# -- unbiasedness by exact enumeration over the sampled label (ALGORITHMS.md §8, row "BanditBoost") --


@pytest.mark.parametrize("case", range(200))
def test_weight_and_loss_estimators_are_unbiased(case: int) -> None:
    rng = np.random.default_rng(case)
    K, N = int(rng.integers(2, 8)), int(rng.integers(1, 12))
    gamma = float(rng.uniform(0.01, 0.49))
    theta = gamma / (2 + gamma)
    delta = float(rng.uniform(0.01, 0.99))
    h = rng.uniform(-1, 1, size=(N, K))
    alpha = rng.dirichlet(np.ones(N), size=K).T  # (N, K), columns on the simplex
    f = (alpha * h).sum(axis=0)
    y_true, greedy = int(rng.integers(K)), int(rng.integers(K))
    p = gamma_mix(K, greedy, delta)
    y_bin = np.where(np.arange(K) == y_true, 1.0, -1.0)  # y_tk for every class

    # full-information quantities: OSBoost weights and the hinge subgradients, every class
    w_bar = np.column_stack([textbook_weights(h[:, k], y_bin[k], gamma) for k in range(K)])
    grad = np.column_stack(
        [-y_bin[k] * h[:, k] if theta - y_bin[k] * f[k] > 0 else np.zeros(N) for k in range(K)]
    )
    # bandit estimates, averaged over the sampled label kappa ~ p
    E_w, E_l = np.zeros((N, K)), np.zeros((N, K))
    for kappa in range(K):
        y = 1.0 if kappa == y_true else -1.0  # the click reveals exactly y_{t kappa}
        E_w[:, kappa] += p[kappa] * osboost_weights(h[:, kappa], y, gamma) / p[kappa]
        E_l[:, kappa] += p[kappa] * hinge_subgradient(h[:, kappa], y, f[kappa], theta) / p[kappa]
    np.testing.assert_allclose(E_w, w_bar, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(E_l, grad, rtol=1e-12, atol=1e-12)


def textbook_weights(h: np.ndarray, y: float, gamma: float) -> np.ndarray:
    """Seed 000 eqs. (2)-(3), written as the paper's loop."""
    theta = gamma / (2 + gamma)
    out, z = [], 0.0
    for hi in h:
        out.append(min(1.0, (1 - gamma) ** (z / 2)))
        z += y * hi - theta
    return np.array(out)


def test_hinge_subgradient_is_zero_at_the_kink() -> None:
    theta = 0.1 / 2.1
    assert not hinge_subgradient(np.ones(3), 1.0, theta, theta).any()
    assert hinge_subgradient(np.ones(3), 1.0, theta - 1e-9, theta).tolist() == [-1.0, -1.0, -1.0]


# The oracle (rounds against a textbook BanditBoost, both families, late feedback) and sparse input:
# test_banditboost_oracle.py.


# -- contract pieces: decide is pure, save/load mid-stream, determinism, parameters --


@pytest.mark.parametrize("weak", WEAK)
def test_decide_does_not_change_the_model(weak: str) -> None:
    m = make_learner("banditboost", 6, 3, {"weak": weak, "n_learners": 5}, seed=0)
    X, y = stream(50, 6, 3, 2)
    run_stream(m, X, y, DecisionIds.for_seed(0))
    before = checksum(m.state())
    for x in X[:10]:
        m.decide(x, np.random.default_rng(1))
    assert checksum(m.state()) == before


@pytest.mark.parametrize("weak", WEAK)
def test_save_load_mid_stream_is_bit_identical(weak: str) -> None:
    K, d = 4, 6
    X, y = stream(400, d, K, 3)
    X[:, -1] = np.random.default_rng(3).normal(size=400)  # one numeric feature (Gaussian in NB)
    params = {"weak": weak, "n_learners": 8, "delta": 0.2}
    whole = make_learner("banditboost", d, K, params, seed=7)
    first = make_learner("banditboost", d, K, params, seed=7)
    ids_a, ids_b = DecisionIds.for_seed(1), DecisionIds.for_seed(1)
    run_stream(whole, X, y, ids_a)
    run_stream(first, X[:200], y[:200], ids_b)
    resumed = Learner.from_state(first.config(), decode(encode(first.state())))
    run_stream(resumed, X[200:], y[200:], ids_b)
    assert checksum(resumed.state()) == checksum(whole.state())
    np.testing.assert_array_equal(resumed.alpha_, whole.alpha_)


@pytest.mark.parametrize("weak", WEAK)
def test_same_seed_same_run(weak: str) -> None:
    X, y = stream(200, 5, 3, 4)
    runs = []
    for _ in range(2):
        m = make_learner("banditboost", 5, 3, {"weak": weak, "n_learners": 7}, seed=11)
        correct = run_stream(m, X, y, DecisionIds.for_seed(2))
        runs.append((correct.tobytes(), checksum(m.state())))
    assert runs[0] == runs[1]
    other = make_learner("banditboost", 5, 3, {"weak": weak, "n_learners": 7}, seed=12)
    run_stream(other, X, y, DecisionIds.for_seed(2))
    assert checksum(other.state()) != runs[0][1]


@pytest.mark.parametrize(
    "params",
    [{"weak": "tree-of-life"}, {"n_learners": 0}, {"delta": 0.0}, {"delta": 1.0}, {"gamma": 0.5}, {"eta": 1}],
)
def test_bad_params_are_refused(params: dict[str, object]) -> None:
    with pytest.raises(ParamError, match="banditboost"):
        make_learner("banditboost", 3, 3, params)


def test_learns_a_separable_problem() -> None:
    """Sanity: on a one-hot problem with label = active block, BanditBoost beats chance clearly."""
    rng = np.random.default_rng(0)
    K, n = 4, 3000
    y = rng.integers(K, size=n)
    X = np.eye(K)[y]
    m = make_learner("banditboost", K, K, {"n_learners": 10, "delta": 0.1}, seed=0)
    correct = run_stream(m, X, y, DecisionIds.for_seed(0))
    assert correct[-1000:].mean() > 0.85  # exploration alone costs 0.1 * 3/4


def test_decision_record_round_trip() -> None:
    m = make_learner("banditboost", 3, 3, {"n_learners": 4}, seed=0)
    d = m.decide(np.ones(3), decision_rng("abc"))
    from service.learners.base import Decision

    back = Decision.from_state(decode(encode(d.to_state())))
    m2 = Learner.from_state(m.config(), m.state())
    m.learn(np.ones(3), d, True)
    m2.learn(np.ones(3), back, True)
    assert checksum(m.state()) == checksum(m2.state())


# -- the reproduction command's quick mode writes to the given directory only --


def test_reproduce_quick_writes_to_the_given_path(tmp_path: Path) -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "REPRODUCTION.md"
    before = docs.read_bytes() if docs.exists() else None
    md = reproductions.get("seed000-table2")(True, tmp_path)
    assert (tmp_path / "repro" / "seed000_delta_sweep.png").stat().st_size > 1000
    text = (tmp_path / "REPRODUCTION.md").read_text()
    assert "<!-- BEGIN seed000-table2 -->" in text and md.strip() in text
    for row in ("| Car (", "| Dna (", "| Nursery (", "| Connect4 (", "| Reuters4 |"):
        assert row in md
    assert "Quick mode" in md and "Tuning on the evaluation stream" in md
    assert render(tmp_path) == md  # the section is a function of the CSV the run wrote
    assert (docs.read_bytes() if docs.exists() else None) == before


def test_the_dense_fast_path_decides_and_learns_as_the_generic_path() -> None:
    """BanditBoost's dense Perceptron path (votes, argmax and the update fused in compiled calls)
    makes the decisions and states of the generic path (here: the same rows as SparseVectors),
    ties included (a zero row ties every label and draws the greedy label from the generator)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(400, 6)) * (rng.random((400, 6)) < 0.6)
    X[::7] = 0.0  # all-zero rows: every vote is 0, a tie
    y = rng.integers(0, 4, 400)
    # the third decides with numpy's generator: the dense path that cannot take a draw back
    models = (make_learner("banditboost", 6, 4, {"n_learners": 7}, seed=1) for _ in range(3))
    dense, generic, numpy_gen = models
    ids = DecisionIds.for_seed(2)
    ties = 0
    for x, label in zip(X, y, strict=True):
        sx = SparseVector(np.flatnonzero(x).astype(np.int64), x[x != 0.0], x.size)
        did = ids.new()
        ra, rc = decision_rng(did), decision_rng(did).generator()
        a, b, c = dense.decide(x, ra), generic.decide(sx, decision_rng(did)), numpy_gen.decide(x, rc)
        for other in (b, c):
            assert (a.label, a.probs.tobytes(), a.memo["greedy"], a.memo["f"]) == (
                other.label, other.probs.tobytes(), other.memo["greedy"], other.memo["f"]
            )  # fmt: skip
            assert a.memo["h"].tobytes() == other.memo["h"].tobytes()
        assert ra.random() == rc.random()  # the same draws taken
        ties += not x.any()
        dense.learn(x, a, a.label == label)
        generic.learn(sx, b, b.label == label)
        numpy_gen.learn(x, c, c.label == label)
    assert ties > 50
    assert checksum(dense.state()) == checksum(generic.state()) == checksum(numpy_gen.state())
