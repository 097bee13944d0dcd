"""Pairwise interactions (service.interactions) against a textbook expansion, and C-OVA with pairs
equal to a plain C-OVA fed the expanded vectors, decision for decision and bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from service.features import SparseVector
from service.interactions import expand_pairs, pair_argmax, pair_columns, pair_pa_update, pair_scores
from service.kernels import PA_BASES, pa_update, sparse_argmax, sparse_scores
from service.learners import make_learner
from service.learners.cova import ConservativeOVA, COVAParams
from service.sampling import DecisionIds, decision_rng

MASK = (1 << 64) - 1


def splitmix_finaliser(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def textbook(x: np.ndarray, p: int) -> np.ndarray:
    """``x`` then the products ``x_i x_j`` (i < j), in their rank's column or hashed, collisions added."""
    d = x.size
    out = np.zeros(d + p)
    out[:d] = x
    exact = p == d * (d - 1) // 2
    rank = 0
    for i in range(d):
        for j in range(i + 1, d):
            if x[i] != 0.0 and x[j] != 0.0:
                column = rank if exact else splitmix_finaliser(rank) % p
                out[d + column] += x[i] * x[j]
            rank += 1
    return out


def rows(rng: np.random.Generator, d: int) -> np.ndarray:
    x = np.where(rng.random(d) < 0.3, rng.standard_normal(d), 0.0)
    return x if rng.random() < 0.5 else (x != 0).astype(float)  # one-hot-like rows too


@pytest.mark.parametrize(("d", "bits"), [(1, 18), (2, 18), (7, 18), (30, 18), (30, 3), (300, 10), (64, 1)])
def test_expansion_is_the_textbook_one(d: int, bits: int) -> None:
    rng = np.random.default_rng(d * 100 + bits)
    p = pair_columns(d, bits)
    assert p == d * (d - 1) // 2 or (p == 1 << bits < d * (d - 1) // 2)
    for _ in range(50):
        x = rows(rng, d)
        got = expand_pairs(x, p)
        assert got.dim == d + p
        assert np.all(np.diff(got.idx) > 0) and np.all(got.val != 0.0)  # a valid SparseVector
        assert got.dense().tobytes() == textbook(x, p).tobytes()  # collisions added in rank order
        nz = np.flatnonzero(x)
        sparse = expand_pairs(SparseVector(nz, x[nz], d), p)
        assert sparse.idx.tobytes() == got.idx.tobytes() and sparse.val.tobytes() == got.val.tobytes()


@pytest.mark.parametrize("bits", [18, 4])
def test_cova_with_pairs_is_cova_on_the_expanded_input(bits: int) -> None:
    rng = np.random.default_rng(bits)
    d, k, n = 9, 4, 400
    X = (rng.random((n, d)) < 0.4).astype(float)
    y = (X[:, 0] * X[:, 1] + 2 * X[:, 2] * X[:, 3] + X[:, 4]).astype(int) % k  # products matter
    p = pair_columns(d, bits)
    pairs = make_learner("cova", d, k, {"interactions": "pairs", "interaction_bits": bits}, seed=1)
    plain = make_learner("cova", d + p, k, {"interactions": "none"}, seed=1)
    a, b = DecisionIds.for_seed(1), DecisionIds.for_seed(1)
    for t in range(n):
        e = expand_pairs(X[t], p)
        d1 = pairs.decide(X[t], decision_rng(a.new()))
        d2 = plain.decide(e, decision_rng(b.new()))
        assert d1.label == d2.label
        pairs.learn(X[t], d1, d1.label == y[t])
        plain.learn(e, d2, d2.label == y[t])
    assert pairs.W_.tobytes() == plain.W_.tobytes()


@pytest.mark.parametrize(("learner", "floor"), [("cova", 0.45), ("squarecb-sgd", 0.3)])
def test_pairs_learn_what_a_linear_model_cannot(learner: str, floor: float) -> None:
    """A label that is an XOR of two binary features: no linear scorer gets it (C-OVA without pairs
    at chance; SquareCB-SGD's predictions are clipped to the cost range, a piecewise linear model
    that gets the two cases of equal bits but not the other two, about 1/3 wrong); with the
    product both do far better (C-OVA not perfectly: without an intercept the case of two zeros
    stays hard for its one-sided updates)."""
    rng = np.random.default_rng(0)
    X = (rng.random((4000, 6)) < 0.5).astype(float)
    y = (X[:, 0] != X[:, 1]).astype(int)
    errors = {}
    for interactions in ("none", "pairs"):
        m = make_learner(learner, 6, 2, {"interactions": interactions}, seed=0)
        ids = DecisionIds.for_seed(0)
        wrong = 0
        for t in range(len(y)):
            dec = m.decide(X[t], decision_rng(ids.new()))
            m.learn(X[t], dec, dec.label == y[t])
            wrong += t >= 3000 and dec.label != y[t]
        errors[interactions] = wrong / 1000
    assert errors["pairs"] < 0.3 <= floor < errors["none"], errors


def test_run_keys_name_the_interactions_and_pairs_need_a_linear_base() -> None:
    default = make_learner("cova", 4, 3).params
    assert default.key() == {"base": "pa1", "C": 0.1, "interactions": "auto"}
    none = make_learner("cova", 4, 3, {"interactions": "none"})
    assert none.params.key() == {"base": "pa1", "C": 0.1}  # keyed as before pairs
    assert none.params.model_dump()["interactions"] == "none"
    assert none.params.complete() == {
        "base": "pa1",
        "C": 0.1,
        "interactions": "none",
        "interaction_bits": 18,
        "pair_max_nnz": 64,
        "epsilon": 0.0,
    }
    # a model stored before the default moved (no "interactions") is a model without pairs
    assert COVAParams.legacy({"C": 1.0}) == {
        "C": 1.0,
        "interactions": "none",
        "interaction_bits": 18,
        "pair_max_nnz": 64,
        "epsilon": 0.0,
    }
    with pytest.raises(ValueError, match="linear base"):
        make_learner("cova", 4, 3, {"interactions": "pairs", "base": "naive_bayes"})
    assert not make_learner("cova", 4, 3, {"base": "naive_bayes", "interactions": "auto"}).params.pairs(4)


def test_auto_pairs_only_where_the_pairs_have_exact_columns() -> None:
    """Hashed or large input gets no pairs under "auto" (they would be hashed); "pairs" hashes them."""
    exact = 2**9  # d (d - 1) / 2 <= 2**18 up to d = 724
    for d, has in ((exact, True), (724, True), (725, False), (2**18, False)):
        assert COVAParams(interactions="auto").pairs(d) is has, d
        assert COVAParams(interactions="pairs").pairs(d)
    hashed = make_learner("cova", 2**12, 3)  # a hashed model at the defaults: no pair columns
    assert hashed.W_.shape == (3, 2**12)
    assert ConservativeOVA.state_nbytes(2**12, 3) == hashed.nbytes()
    car = make_learner("cova", 21, 4)  # car's one-hot rows: every pair its own column
    assert car.W_.shape == (4, 21 + 210)
    assert ConservativeOVA.state_nbytes(21, 4) == car.nbytes()


def test_auto_pairs_only_small_inputs() -> None:
    m = make_learner("cova", 200, 3, {"interactions": "auto", "pair_max_nnz": 5})
    small, large = np.zeros(200), np.zeros(200)
    small[:5], large[:6] = 1.0, 1.0
    assert m.W_.shape == (3, 200 + 200 * 199 // 2)
    m.learn(small, m.decide(small, decision_rng("a")), True)  # a click: every scorer steps
    assert np.count_nonzero(m.W_[0, 200:]) == 10  # the 10 pairs of 5 non-zeros
    before = m.W_[:, 200:].copy()
    m.learn(large, m.decide(large, decision_rng("b")), True)
    assert np.array_equal(m.W_[:, 200:], before)  # 6 non-zeros: no pairs


@pytest.mark.parametrize("order", ["C", "F"])
def test_fused_pair_kernels_are_the_expanded_vectors_bits(order: str) -> None:
    """pair_scores / pair_argmax / pair_pa_update equal the sparse kernels on expand_pairs' vector,
    bit for bit, an underflowing product (dropped from the expansion) and ties included."""
    rng = np.random.default_rng(7)
    d, k = 30, 5
    p = pair_columns(d, 18)
    for trial in range(200):
        nz = np.sort(rng.choice(d, size=rng.integers(1, 12), replace=False))
        val = rng.normal(size=nz.size) * (1e-200 if trial % 7 == 0 else 1.0)  # products underflow to 0
        if trial % 5 == 0:
            val[: min(2, nz.size)] = 1.0  # ones: ties among fresh scores
        W = np.asarray(rng.normal(size=(k, d + p)) * (trial % 3 != 0), order=order)
        e = expand_pairs(SparseVector(nz, val, d), p)
        assert pair_scores(W, nz, val, d).tobytes() == sparse_scores(W, e.idx, e.val).tobytes()
        assert pair_argmax(W, nz, val, d) == sparse_argmax(W, e.idx, e.val)
        for click in (False, True):
            a, b = W.copy(order=order), W.copy(order=order)
            label = int(rng.integers(k))
            pair_pa_update(a, nz, val, d, label, click, PA_BASES["pa1"], 0.1)
            pa_update(b, e.idx, e.val, label, click, PA_BASES["pa1"], 0.1)
            assert a.tobytes() == b.tobytes()
