"""The compiled boost-by-majority potential (service.learners.bbm_kernels) equals the Python DP of
``bbm_cost_matrix`` / ``bbm_costs`` and a brute-force enumeration, in both tie conventions
(Zhang, Jung, Tewari, AISTATS 2019, eqs. (8)-(9); ALGORITHMS.md §2.6); it stays finite and in
[0, 1] up to N = 150, k = 26; and its kernels compile at import, never at a call."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from service import _jit_cache
from service.learners import bbm_kernels as bk
from service.learners import make_learner
from service.learners.banditbbm import bbm_costs
from service.learners.booster_costs import bbm_cost_matrix

TIES = ["random", "pessimistic"]
TOL = 1e-12  # absolute and relative, on potentials in [0, 1]


def zero_one(v: np.ndarray, r: int, ties: str) -> float:
    """Textbook ``L^r`` of a vote vector."""
    if ties == "pessimistic":
        return float(np.delete(v, r).max() >= v[r])
    top = np.flatnonzero(v == v.max())
    return 1.0 - (r in top) / top.size


def potential_by_enumeration(n: int, v: np.ndarray, r: int, gamma: float, ties: str) -> float:
    """``E_{X ~ Mult(n, u^r)} L^r(v + X)`` summed over every count vector X."""
    k = v.size
    u = np.full(k, (1.0 - gamma) / k)
    u[r] += gamma
    total = 0.0
    for x in itertools.product(range(n + 1), repeat=k):
        if sum(x) != n:
            continue
        p = math.factorial(n) * math.prod(u[c] ** x[c] / math.factorial(x[c]) for c in range(k))
        total += p * zero_one(v + np.array(x), r, ties)
    return total


def votes(rng: np.random.Generator, k: int, n: int) -> np.ndarray:
    """Votes concentrated on a few labels, as the trees' are (a Dirichlet with small concentration)."""
    return rng.choice(k, size=n, p=rng.dirichlet(np.full(k, 0.3)))


@pytest.mark.parametrize("ties", TIES)
def test_gamma_matrix_equals_enumeration(ties: str) -> None:
    rng = np.random.default_rng(0)
    for _ in range(60):
        k = int(rng.integers(2, 5))
        n = int(rng.integers(0, 7 if k < 4 else 5))
        s = rng.integers(0, 4, k)  # small counts: many ties between labels
        gamma = float(rng.uniform(0.01, 0.9))
        G = bk.bbm_gamma_matrix(n, s, gamma, ties == "pessimistic", n + 1 + int(rng.integers(0, 4)))
        for lab, r in itertools.product(range(k), range(k)):
            v = s.copy()
            v[lab] += 1
            assert G[lab, r] == pytest.approx(potential_by_enumeration(n, v, r, gamma, ties), abs=TOL)


@pytest.mark.parametrize("ties", TIES)
@pytest.mark.parametrize("k", [2, 3, 4, 7, 10])
def test_gamma_matrix_equals_python_dp(k: int, ties: str) -> None:
    rng = np.random.default_rng(k)
    for trial in range(30):
        n_learners = int(rng.integers(1, 26))
        i = int(rng.integers(0, n_learners))
        # concentrated votes (as the trees'), or spread ones (more groups, more ties at the top)
        s = np.bincount(votes(rng, k, i) if trial % 2 else rng.integers(0, k, i), minlength=k)
        n = n_learners - 1 - i
        gamma = float(rng.choice([0.1, rng.uniform(0.01, 0.9)]))
        G = bk.bbm_gamma_matrix(n, s, gamma, ties == "pessimistic", n_learners)
        np.testing.assert_allclose(G, bbm_cost_matrix(n, s, gamma, ties), rtol=TOL, atol=TOL)


@pytest.mark.parametrize("ties", TIES)
@pytest.mark.parametrize("k", [2, 3, 4, 7, 10])
def test_cost_vectors_equal_bbm_costs(k: int, ties: str) -> None:
    rng = np.random.default_rng(100 + k)
    for trial in range(4):
        n_learners = int(rng.integers(1, 26 if k <= 4 else 13))
        weak = votes(rng, k, n_learners)
        gamma = float(rng.uniform(0.01, 0.9))
        if trial == 0:
            truth = np.eye(k)[rng.integers(k)]  # full information (OnlineMBBM): one column
        else:
            truth = rng.standard_normal(k) * rng.choice([1.0, 50.0])  # iota_hat: any sign, 1/p scale
        C = bk.bbm_cost_vectors(weak, k, gamma, ties == "pessimistic", truth)
        ref = bbm_costs(weak, k, gamma, ties, truth, None)
        np.testing.assert_allclose(C, ref, rtol=TOL, atol=TOL * (1.0 + np.abs(truth).sum()))


@pytest.mark.parametrize("ties", TIES)
def test_equal_costs_stay_equal(ties: str) -> None:
    """Labels with equal counts and equal weights in ``truth`` get bit-identical costs, so the
    (label, weight) reduction's random tie-break sees the exact ties."""
    rng = np.random.default_rng(7)
    for _ in range(30):
        k, n_learners = 10, int(rng.integers(2, 21))
        weak = votes(rng, k, n_learners)
        truth = rng.choice([1.0, -8.0, 30.0], size=k)
        C = bk.bbm_cost_vectors(weak, k, 0.1, ties == "pessimistic", truth)
        s = np.zeros(k, np.int64)
        for i in range(n_learners):
            for a, b in itertools.combinations(range(k), 2):
                if s[a] == s[b] and truth[a] == truth[b]:
                    assert C[i, a] == C[i, b]
            s[weak[i]] += 1


@pytest.mark.parametrize("ties", TIES)
def test_gamma_matrix_is_the_arithmetic_of_the_cost_vectors(ties: str) -> None:
    """OnlineMBBM decides with whole matrices and learns with cost vectors of ``e_y``: the same
    numbers, bit for bit, given the booster's N."""
    rng = np.random.default_rng(5)
    k, n_learners = 6, 12
    weak = votes(rng, k, n_learners)
    for r in range(k):
        C = bk.bbm_cost_vectors(weak, k, 0.3, ties == "pessimistic", np.eye(k)[r])
        s = np.zeros(k, np.int64)
        for i in range(n_learners):
            G = bk.bbm_gamma_matrix(n_learners - 1 - i, s, 0.3, ties == "pessimistic", n_learners)
            np.testing.assert_array_equal(C[i], G[:, r])
            s[weak[i]] += 1


def test_without_tables_is_the_same_arithmetic(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above TABLE_BYTES the powers are multiplied out per use: the same sums, bit for bit."""
    rng = np.random.default_rng(11)
    expected = []
    for _ in range(8):
        k = int(rng.choice([2, 5, 10]))
        weak, truth = votes(rng, k, int(rng.integers(1, 16))), rng.standard_normal(k)
        expected.append(
            (k, weak, truth, [bk.bbm_cost_vectors(weak, k, 0.2, p, truth) for p in (False, True)])
        )
    monkeypatch.setattr(bk, "TABLE_BYTES", 0)
    bk._tables.cache_clear()
    try:
        for k, weak, truth, ref in expected:
            assert bk._tables(k, weak.size)[0].size == 0
            for p in (0, 1):
                np.testing.assert_array_equal(bk.bbm_cost_vectors(weak, k, 0.2, bool(p), truth), ref[p])
    finally:
        bk._tables.cache_clear()


@pytest.mark.parametrize("ties", TIES)
def test_finite_and_bounded_for_many_learners_and_labels(ties: str) -> None:
    rng = np.random.default_rng(150)
    k, n_learners = 26, 150
    pess = ties == "pessimistic"
    weak = votes(rng, k, n_learners)
    costs = bk.bbm_cost_vectors(weak, k, 0.1, pess, np.ones(k))
    assert np.isfinite(costs).all()
    assert (costs >= 0.0).all() and (costs <= k).all()  # sums of k potentials in [0, 1]
    for gamma in (1e-6, 0.5, 0.999):
        for i in (0, 40, 149):
            s = np.bincount(weak[:i], minlength=k)
            G = bk.bbm_gamma_matrix(n_learners - 1 - i, s, gamma, pess, n_learners)
            assert np.isfinite(G).all() and (G >= 0.0).all() and (G <= 1.0).all()


def test_kernels_compile_their_declared_signature_only() -> None:
    _jit_cache.warm([bk.__name__])  # what the server does before a model of these serves
    kernels = [bk._cost_vectors, bk._gamma_matrix, bk._state_gamma, bk._build_tables, bk.bbm_learn]
    assert all(len(f.signatures) == 1 for f in kernels)
    bk.bbm_cost_vectors(np.array([1, 0, 1], dtype=np.int32), 3, 0.1, True, [0.0, 1.0, 2.0])
    bk.bbm_cost_vectors(np.array([0, 9, 2, 9, 1, 9])[::2], 3, 0.1, False, np.ones(6)[::2])  # strided
    bk.bbm_gamma_matrix(2, np.array([1, 0, 0]), 0.1, False, 4)
    m = make_learner("banditbbm", 4, 3, {"n_learners": 3, "rho": 0.3}, seed=0)
    x = np.array([0.0, 1.0, 2.0, 0.5])
    for t in range(20):  # bbm_learn, clicked and not
        d = m.decide(x, np.random.default_rng(t))
        m.learn(x, d, bool(t % 2))
    assert all(len(f.signatures) == 1 for f in kernels)


def test_no_learners_and_last_learner() -> None:
    assert bk.bbm_cost_vectors(np.zeros(0, np.int64), 4, 0.1, False, np.ones(4)).shape == (0, 4)
    # n = 0: the potential is the loss itself (ALGORITHMS.md §2.6)
    G = bk.bbm_gamma_matrix(0, np.array([2, 1, 1]), 0.1, False, 5)
    assert G[1, 0] == 0.5 and G[0, 0] == 0.0 and G[2, 1] == 1.0
    assert bk.bbm_gamma_matrix(0, np.array([2, 1, 1]), 0.1, True, 5)[1, 0] == 1.0
    with pytest.raises(ValueError, match="n_learners"):
        bk.bbm_gamma_matrix(5, np.zeros(3), 0.1, True, 5)


@pytest.mark.parametrize("pessimistic", [False, True])
@pytest.mark.parametrize("rows", [4096, 3])
def test_cost_memo_is_bit_identical(pessimistic: bool, rows: int) -> None:
    """A :class:`~service.learners.bbm_kernels.CostMemo` changes no bit of the cost vectors: states
    seen again, truths with zeros (rows of only some groups computed), and a table emptied when full
    (``rows=3``)."""
    k, n, gamma = 5, 9, 0.2
    rng = np.random.default_rng(3)
    memo = bk.CostMemo(k, n, gamma, pessimistic, rows=rows)
    for _ in range(300):
        weak = rng.integers(0, 2 if rng.random() < 0.5 else k, n)  # few states, then many
        truth = rng.uniform(-3.0, 3.0, k) * (rng.random(k) < 0.6)
        want = bk.bbm_cost_vectors(weak, k, gamma, pessimistic, truth)
        got = bk.bbm_cost_vectors(weak, k, gamma, pessimistic, truth, memo)
        assert np.array_equal(got, want)
    assert 0 < memo.keys[-1, 0] <= memo.keys.shape[0] - 1


def test_cost_memo_checks_its_configuration() -> None:
    memo = bk.CostMemo(4, 6, 0.2, False)
    with pytest.raises(ValueError, match="memo of"):
        bk.bbm_cost_vectors(np.zeros(6, dtype=np.int64), 4, 0.1, False, np.ones(4), memo)
