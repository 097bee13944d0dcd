"""Sparse input (issue 19, part 1): the linear learners on a :class:`SparseVector` against the
textbook dense learner on ``x.dense()`` beside them, on hashed named-feature streams.

The updates are the same element-wise arithmetic on the non-zero columns, so given the same
decision the weights stay bit for bit equal; scores sum over nnz terms instead of d (another
summation order), so decisions are compared through their scores to a tight tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest

from service.features import Featuriser, SparseVector
from service.learners.base import Decision, make_learner
from service.sampling import DecisionIds, decision_rng

BITS, K, T = 12, 6, 400
LINEAR = [
    ("banditron", {"gamma": 0.1}),
    ("banditron", {"tie_break": "first"}),
    ("cova", {"base": "pa", "interactions": "none"}),
    ("cova", {"base": "pa1", "C": 0.5, "interactions": "none"}),
    ("cova", {"base": "pa2", "C": 0.5, "interactions": "none"}),
    ("cova", {"base": "perceptron", "interactions": "none"}),
    ("perceptron", {}),
]


def stream(seed: int) -> tuple[list[SparseVector], np.ndarray]:
    """Named-feature requests (strings, numbers, bools) hashed into 2^12 buckets; a sparse linear
    teacher over the hashed vector gives the label."""
    rng = np.random.default_rng(seed)
    featurise = Featuriser(None, BITS, 100)
    teacher = rng.normal(size=(K, 1 << BITS))
    xs, ys = [], []
    for _ in range(T):
        request = {f"s{j}": f"v{rng.integers(20)}" for j in range(20)}
        request |= {f"n{j}": float(rng.normal()) for j in range(8)}
        request |= {"flag": bool(rng.integers(2)), "zero": 0.0}
        x = featurise(request)
        xs.append(x)
        ys.append(int(np.argmax(teacher[:, x.idx] @ x.val)))
    return xs, np.array(ys)


@pytest.mark.parametrize(("name", "params"), LINEAR, ids=[f"{n}-{p}" for n, p in LINEAR])
def test_sparse_learner_equals_the_dense_textbook_learner(name: str, params: dict) -> None:
    xs, ys = stream(7)
    sparse = make_learner(name, 1 << BITS, K, params, seed=3)
    sparse.use_sparse_layout()  # as the service holds a hashed model
    dense = make_learner(name, 1 << BITS, K, params, seed=3)
    assert sparse.accepts_sparse
    ids = DecisionIds.for_seed(11)
    same_decisions = 0
    for x, y in zip(xs, ys, strict=True):
        did = ids.new()
        d = sparse.decide(x, decision_rng(did))
        d_dense = dense.decide(x.dense(), decision_rng(did))
        same_decisions += d.label == d_dense.label
        if d.memo["greedy"] == d_dense.memo["greedy"]:  # the same distribution, bit for bit
            assert d.probs.tobytes() == d_dense.probs.tobytes()
        np.testing.assert_allclose(sparse.W_[:, x.idx] @ x.val, dense.W_ @ x.dense(), rtol=1e-12, atol=1e-12)
        # both learn the sparse learner's decision, so one near-tie cannot desynchronise the runs
        twin = Decision(d.probs.copy(), d.label, dict(d.memo))
        if sparse.full_information:
            sparse.learn_full(x, d, int(y))
            dense.learn_full(x.dense(), twin, int(y))
        else:
            sparse.learn(x, d, d.label == y)
            dense.learn(x.dense(), twin, d.label == y)
    if name != "cova" or params["base"] == "perceptron":  # no norm in the step: bit for bit
        np.testing.assert_array_equal(sparse.W_, dense.W_)
    else:  # PA steps divide by ||x||^2, summed over nnz terms instead of d
        np.testing.assert_allclose(sparse.W_, dense.W_, rtol=1e-12, atol=1e-12)
    assert same_decisions >= T - 2  # ties aside, the same decisions
    assert np.count_nonzero(sparse.W_) > 0  # it learned something


@pytest.mark.parametrize(("name", "params"), LINEAR, ids=[f"{n}-{p}" for n, p in LINEAR])
def test_the_sparse_layout_changes_no_bit_and_survives_a_reload(name: str, params: dict) -> None:
    """use_sparse_layout stores W_ column-major: the same decisions and weights bit for bit as the
    row-major learner, and a state loaded into it keeps the layout."""
    xs, ys = stream(8)
    column, row = (make_learner(name, 1 << BITS, K, params, seed=3) for _ in range(2))
    column.use_sparse_layout()
    assert column.W_.flags.f_contiguous and not column.W_.flags.c_contiguous
    assert row.W_.flags.c_contiguous
    ids = DecisionIds.for_seed(12)
    for t, (x, y) in enumerate(zip(xs, ys, strict=True)):
        did = ids.new()
        d, d_row = column.decide(x, decision_rng(did)), row.decide(x, decision_rng(did))
        assert (d.label, d.probs.tobytes(), d.memo.keys()) == (
            d_row.label,
            d_row.probs.tobytes(),
            d_row.memo.keys(),
        )
        assert all(np.array_equal(d.memo[k], d_row.memo[k]) for k in d.memo)
        if column.full_information:
            column.learn_full(x, d, int(y))
            row.learn_full(x, d_row, int(y))
        else:
            column.learn(x, d, d.label == y)
            row.learn(x, d_row, d.label == y)
        if t == T // 2:  # reload half way: the state of the row-major twin, into the column-major one
            column.set_state(row.get_state())
            assert column.W_.flags.f_contiguous and not column.W_.flags.c_contiguous
    assert column.W_.tobytes() == row.W_.tobytes()  # tobytes reads in C order whatever the layout
    assert column.state().keys() == row.state().keys()
    assert np.count_nonzero(column.W_) > 0


def test_nonlinear_learners_get_the_dense_vector() -> None:
    assert not make_learner("cova", 8, 3, {"base": "naive_bayes"}).accepts_sparse
