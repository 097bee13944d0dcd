"""The compiled glue of the tree boosters (service.learners.booster_kernels) equals the numpy steps it
replaced, bit for bit, on inputs with many ties and a wide dynamic range (the stored reproduction
runs rely on it); and the kernels compile at import, never at a call."""

from __future__ import annotations

import numpy as np
import pytest

from service import _jit_cache
from service.learners import booster_kernels as bk
from service.learners import make_learner
from service.learners.base import rho_mix, sample
from service.learners.booster_costs import (
    hedge_update,
    logistic_alpha_grad,
    logistic_cost_matrices,
    loss_estimate,
)
from service.learners.weak.hoeffding_tree import operands


def textbook_rows_argmax(V: np.ndarray, U: np.ndarray) -> np.ndarray:
    at_max = V.max(axis=1, keepdims=True) == V
    return np.argmax(np.where(at_max, U.reshape(V.shape), -1.0), axis=1)


def textbook_costs_to_examples(
    C: np.ndarray, clip: float, U: np.ndarray, prefer: int | None, divide: bool
) -> tuple[np.ndarray, np.ndarray]:
    C = np.clip(C, -clip, clip)
    low = C.min(axis=1)
    at_min = low[:, None] == C
    labels = np.argmax(np.where(at_min, U.reshape(C.shape), -1.0), axis=1)
    if prefer is not None:
        labels = np.where(at_min[:, prefer], prefer, labels)
    weights = (C - low[:, None]).sum(axis=1)
    if divide:
        weights /= C.shape[1] - 1
    return labels, np.maximum(weights, 1e-10)


def matrices(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Small integers (ties everywhere) or normals scaled over 16 orders of magnitude."""
    if rng.random() < 0.5:
        return rng.integers(-2, 3, (n, k)).astype(float)
    return rng.standard_normal((n, k)) * 10.0 ** rng.integers(-8, 8, (n, k))


@pytest.mark.parametrize("k", [2, 3, 4, 7, 8, 9, 10, 17, 26])
def test_kernels_equal_the_numpy_steps(k: int) -> None:
    rng = np.random.default_rng(k)
    for _ in range(300):
        n = int(rng.integers(1, 25))
        V = matrices(rng, n, k)
        U = rng.random(2 * n * k)
        np.testing.assert_array_equal(bk.rows_argmax(V, U), textbook_rows_argmax(V, U[: n * k]))

        alpha = rng.standard_normal(n) * rng.choice([0.0, 1e-9, 1.0, 1e6])
        weak, votes, experts = bk.adabandit_votes(V, alpha, U)
        ref_weak = textbook_rows_argmax(V, U[: n * k])
        ref_votes = np.zeros((n, k))
        ref_votes[np.arange(n), ref_weak] = alpha
        ref_votes = np.cumsum(ref_votes, axis=0)
        np.testing.assert_array_equal(weak, ref_weak)
        assert votes.tobytes() == ref_votes.tobytes()  # bit for bit, signed zeros included
        np.testing.assert_array_equal(experts, textbook_rows_argmax(ref_votes, U[n * k :]))

        weak, counts, majority = bk.bbm_majority(V, U)
        np.testing.assert_array_equal(weak, ref_weak)
        np.testing.assert_array_equal(counts, np.bincount(ref_weak, minlength=k))
        top = np.flatnonzero(counts == counts.max())
        assert majority == (top[0] if top.size == 1 else -1)

        clip = float(rng.choice([1.0, 100.0, 1e300]))
        prefer = None if rng.random() < 0.3 else int(rng.integers(k))
        divide = bool(rng.integers(2))
        labels, weights = bk.cost_examples(V, clip, U[: n * k], -1 if prefer is None else prefer, divide)
        ref_labels, ref_weights = textbook_costs_to_examples(V, clip, U[: n * k], prefer, divide)
        np.testing.assert_array_equal(labels, ref_labels)
        assert weights.tobytes() == ref_weights.tobytes()


def adabandit_learn_numpy(
    votes: np.ndarray, weak: np.ndarray, alpha_memo: np.ndarray, iota: np.ndarray, eta: float,
    alpha: np.ndarray, log_v: np.ndarray, ell: np.ndarray, experts: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """AdaBandit's learning arithmetic as numpy steps (the code the kernels replaced)."""
    prev = np.vstack([np.zeros((1, votes.shape[1])), votes[:-1]])
    costs = logistic_cost_matrices(prev) @ iota
    grad = logistic_alpha_grad(prev, weak, alpha_memo, iota)
    return costs, np.clip(alpha - eta * grad, -2.0, 2.0), hedge_update(log_v, ell[experts])


@pytest.mark.parametrize("k", [2, 3, 4, 7, 8, 9, 10, 17, 26])
def test_adabandit_learning_kernels_equal_the_numpy_steps(k: int) -> None:
    rng = np.random.default_rng(100 + k)
    for _ in range(200):
        n = int(rng.choice([1, 2, 5, 20, 33]))
        V = matrices(rng, n, k)
        U = rng.random(2 * n * k)
        alpha_memo = rng.standard_normal(n) * rng.choice([0.0, 1e-9, 1.0, 30.0])
        weak, votes, experts = bk.adabandit_votes(V, alpha_memo, U)
        ell = np.where(rng.random(k) < 0.5, 0.0, rng.standard_normal(k) * rng.choice([1.0, 1e3]))
        iota = 1.0 - ell
        eta = float(rng.random())
        alpha, log_v = rng.uniform(-2, 2, n), -rng.exponential(1.0, n)
        costs, ref_alpha, ref_log_v = adabandit_learn_numpy(
            votes, weak, alpha_memo, iota, eta, alpha, log_v, ell, experts
        )
        t = np.tanh(bk.adabandit_logistic_args(votes, weak, alpha_memo))
        # the outputs start as garbage: every element must be written
        G, off, on, onsum = (np.full(shape, np.nan) for shape in [(n, k, k), (n, k), (n, k), n])
        bk.adabandit_logistic_parts(t, weak, k, G, off, on, onsum)
        prev = np.vstack([np.zeros((1, k)), votes[:-1]])
        assert G.tobytes() == logistic_cost_matrices(prev).tobytes()
        assert (G @ iota).tobytes() == costs.tobytes()
        bk.adabandit_step(alpha, log_v, off @ iota, onsum, iota, weak, eta, ell, experts)
        assert alpha.tobytes() == ref_alpha.tobytes()
        assert log_v.tobytes() == ref_log_v.tobytes()


@pytest.mark.parametrize("k", [2, 3, 4, 10, 26])
def test_loss_iota_is_loss_estimate(k: int) -> None:
    """The compiled loss estimate (4) and iota_hat are loss_estimate's floats, every case of (4);
    adabandit_learn_args adds adabandit_logistic_args' arguments unchanged."""
    rng = np.random.default_rng(k)
    for _ in range(50):
        probs = rng.dirichlet(np.ones(k)) if rng.random() < 0.5 else rho_mix(k, int(rng.integers(k)), 0.01)
        for label in range(k):
            for greedy in range(k):
                for reward in (False, True):
                    ell, iota = bk.loss_iota(probs, label, greedy, reward)
                    want = loss_estimate(probs, label, greedy, reward)
                    assert ell.tobytes() == want.tobytes() and iota.tobytes() == (1.0 - want).tobytes()
    votes, weak, alpha = rng.standard_normal((5, k)), rng.integers(0, k, 5), rng.standard_normal(5)
    ell, iota, z = np.full(k, np.nan), np.full(k, np.nan), np.full(5 * (k * (k - 1) // 2 + k), np.nan)
    bk.adabandit_learn_args(probs, 0, 1, True, votes, weak, alpha, ell, iota, z)
    want = loss_estimate(probs, 0, 1, True)
    assert ell.tobytes() == want.tobytes() and iota.tobytes() == (1.0 - want).tobytes()
    assert z.tobytes() == bk.adabandit_logistic_args(votes, weak, alpha).tobytes()


def test_tanh_is_odd_bit_for_bit() -> None:
    """adabandit_logistic_args computes half the arguments and negates their tanh: exact only if
    numpy's tanh (its SIMD kernel on this CPU) is odd bit for bit, at every position of an array."""
    rng = np.random.default_rng(7)
    z = rng.standard_normal(100_003) * 10.0 ** rng.uniform(-300, 3, 100_003)
    assert np.tanh(-z).tobytes() == (-np.tanh(z)).tobytes()
    assert np.tanh(z[3:]).tobytes() == np.tanh(z)[3:].tobytes()


@pytest.mark.parametrize("n", [*range(0, 140), 255, 256, 257, 1000, 4099, 100_000])
def test_pairwise_sum_is_numpys(n: int) -> None:
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 6, n)
    assert bk.pairwise_sum(a) == a.sum()


def test_hedge_draw_is_sample() -> None:
    rng = np.random.default_rng(3)
    for _ in range(3000):
        n = int(rng.integers(1, 300))
        v = np.exp(-rng.exponential(rng.choice([0.1, 10.0, 1000.0]), n))
        u = float(rng.random())
        expected = sample(v / v.sum(), _Fixed(u))
        assert bk.hedge_draw(v, u) == expected


class _Fixed:
    """A generator whose one draw is ``u`` (sample draws once)."""

    def __init__(self, u: float) -> None:
        self.u = u

    def random(self) -> float:
        return self.u


@pytest.mark.parametrize("name", bk.__all__)
def test_kernels_compile_their_declared_signatures_only(name: str) -> None:
    _jit_cache.warm([bk.__name__])  # what the server does before a model of these serves
    kernel = getattr(bk, name)
    compiled = list(kernel.signatures)
    assert compiled, f"{name} has no compiled signature"
    V, U = np.ones((3, 4)), np.full(24, 0.5)
    forest = make_learner("adabandit", 4, 4, {"n_learners": 3}, seed=0).trees_  # type: ignore[attr-defined]
    # booster_kernels.LEARN: the frame every fused learn kernel takes first
    frame = (
        forest.arrays(), operands(np.ones(4)), forest.trees, np.zeros(3, np.int64), forest.n_nodes_.copy(),
        forest.schedule, forest.subspace, 100.0, np.full(12, 0.5), False, np.zeros(3, np.int64), np.zeros(3),
    )  # fmt: skip
    args = {
        "rows_argmax": (V, U),
        "adabandit_votes": (V, np.ones(3), U),
        "cost_examples": (V, 1.0, U, 2, True),
        "adabandit_logistic_args": (V, np.zeros(3, np.int64), np.ones(3)),
        "adabandit_logistic_parts": (
            np.zeros(42),
            np.zeros(3, np.int64),
            4,
            np.zeros((3, 4, 4)),
            *[np.zeros((3, 4))] * 2,
            np.zeros(3),
        ),
        "adabandit_step": (
            *[np.zeros(3)] * 4,
            np.ones(4),
            np.zeros(3, np.int64),
            0.1,
            np.ones(4),
            np.zeros(3, np.int64),
        ),
        "hedge_draw": (np.ones(3), 0.5),
        "loss_iota": (np.full(4, 0.25), 1, 2, True),
        "adabandit_learn_args": (
            *(np.full(4, 0.25), 1, 2, True, V, np.zeros(3, np.int64), np.ones(3)),
            *(np.zeros(4), np.zeros(4), np.zeros(30)),
        ),
        "bbm_majority": (V, U),
        "pairwise_sum": (np.ones(9),),
        # 3 trees, 4 features and 4 labels
        "adabandit_decide": (
            forest.routing(np.ones(4)),
            np.zeros(3),
            np.ones(3),
            np.full(26, 0.5),
            0.1,
            np.zeros(4),
            np.zeros(3, np.int64),
            np.zeros(3, np.int64),
            np.zeros((3, 4)),
            np.zeros(3, np.int64),
        ),
        "bbm_decide": (
            forest.routing(np.ones(4)),
            np.full(12, 0.5),
            0.1,
            0.5,
            np.zeros(4),
            np.zeros(3, np.int64),
            np.zeros(3, np.int64),
            np.zeros(4, np.int64),
        ),
        "forest_learn_costs": (frame, V, -1, np.zeros(0, np.int64)),
        "adabandit_learn": (
            frame,
            V,
            -1,
            np.zeros(3),
            np.zeros(3),
            np.ones(4),
            np.zeros(3, np.int64),
            0.1,
            np.ones(4),
            np.zeros(3, np.int64),
            np.zeros(3),
            np.zeros(3),
        ),
    }[name]
    kernel(*args)
    kernel(*[a[:, ::1] if isinstance(a, np.ndarray) and a.ndim == 2 else a for a in args])
    assert list(kernel.signatures) == compiled
