"""SquareCB over VW's SGD regression with hashed pairs: the scores and the update against textbook
versions (the expansion and the table written out here, VW's step from the action contract tests)
and sparse input as dense. Pairs that learn an XOR: tests/service/test_interactions.py."""

from __future__ import annotations

import numpy as np
import pytest

from service.config import ModelSpec, Settings
from service.features import SparseVector
from service.learners import make_learner
from service.learners.squarecb_sgd import SquareCBSGD
from service.runtime import BudgetError, check_event_budget
from service.sampling import DecisionIds, decision_rng
from tests.service.learners.test_action_contract import _nag_textbook

M64 = (1 << 64) - 1


def _mix(z: int) -> int:
    """SplitMix64's finaliser in Python integers (service.interactions._mix)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _expanded(x: np.ndarray, pairs: bool) -> list[tuple[int, float]]:
    """z of the docstring, dense and by definition: x, then x_i x_j (i < j) at d + rank, then 1."""
    d = x.size
    z = [(i, float(x[i])) for i in range(d) if x[i] != 0.0]
    if pairs:
        rank = 0
        for i in range(d):
            for j in range(i + 1, d):
                if x[i] * x[j] != 0.0:
                    z.append((d + rank, float(x[i] * x[j])))
                rank += 1
    z.append((d + (d * (d - 1) // 2 if pairs else 0), 1.0))
    return z


def _column(j: int, a: int, k: int, size: int, exact: bool) -> int:
    return j * k + a if exact else _mix(j * k + a) % size


def _row(x: np.ndarray, a: int, k: int, size: int, exact: bool, pairs: bool) -> dict[int, float]:
    row: dict[int, float] = {}
    for j, v in _expanded(x, pairs):
        c = _column(j, a, k, size, exact)
        row[c] = row.get(c, 0.0) + v
    return row


@pytest.mark.parametrize(
    ("params", "exact"),
    [
        ({}, True),
        ({"bits": 5}, False),
        ({"interactions": "none"}, True),
        ({"weighting": "none", "bits": 4}, False),
    ],
)
def test_scores_and_updates_equal_the_textbook_table(params: dict, exact: bool) -> None:
    d, k = 5, 3
    m = make_learner("squarecb-sgd", d, k, params, seed=0)
    pairs = m.params.interactions == "pairs"
    size = 1 << m.params.bits
    assert m._exact == exact
    w, g2, scale, totals = np.zeros(size), np.zeros(size), np.zeros(size), np.zeros(2)
    rng = np.random.default_rng(1)
    ids = DecisionIds.for_seed(0)
    for _ in range(200):
        x = (rng.random(d) < 0.6) * rng.normal(size=d) * rng.choice([0.5, 3.0])
        want = [sum(w[c] * v for c, v in _row(x, a, k, size, exact, pairs).items()) for a in range(k)]
        np.testing.assert_allclose(m.scores(x), want, rtol=1e-12, atol=1e-12)
        dec = m.decide(x, decision_rng(ids.new()))
        reward = bool(rng.random() < 0.4)
        m.learn(x, dec, reward)
        h = 1.0 / dec.probs[dec.label] if m.params.weighting == "mtr" else 1.0
        _nag_textbook(w, g2, scale, totals, _row(x, dec.label, k, size, exact, pairs), float(reward), 0.5, h)
    for got, want in zip((m.w_, m.g2_, m.scale_, m.totals_), (w, g2, scale, totals), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_sparse_input_learns_the_same_bits_as_dense() -> None:
    d, k = 40, 4
    dense, sparse = (make_learner("squarecb-sgd", d, k, {"bits": 10}, seed=0) for _ in range(2))
    rng = np.random.default_rng(2)
    ids = DecisionIds.for_seed(3)
    for _ in range(300):
        idx = np.unique(rng.integers(0, d, 6)).astype(np.int64)
        val = rng.normal(size=idx.size)
        sv = SparseVector(idx, val, d)
        did = ids.new()
        a, b = dense.decide(sv.dense(), decision_rng(did)), sparse.decide(sv, decision_rng(did))
        assert a.label == b.label and np.array_equal(a.probs, b.probs)
        click = bool(rng.random() < 0.5)
        dense.learn(sv.dense(), a, click)
        sparse.learn(sv, b, click)
    assert np.array_equal(dense.w_, sparse.w_) and np.array_equal(dense.g2_, sparse.g2_)


def test_a_wrong_dimension_is_refused_and_changes_nothing() -> None:
    m = make_learner("squarecb-sgd", 3, 2, seed=0)
    with pytest.raises(ValueError, match="dimension 4"):
        m.decide(np.ones(4), np.random.default_rng(0))
    assert m.t_ == 0 and not m.w_.any()


def test_the_event_budget_counts_the_pairs_of_the_widest_request() -> None:
    """A hashed model's request may bring CLICKBOOST_MAX_NAMED_FEATURES non-zeros, whose pairs
    cost K n^2 / 2: the budget refuses such a spec with many labels, not the one without pairs."""
    settings = Settings(store="memory")
    wide = ModelSpec(learner="squarecb-sgd", hashing_bits=20, n_labels=100)
    with pytest.raises(BudgetError, match="steps per event"):
        check_event_budget("m", wide, settings)
    check_event_budget("m", wide.model_copy(update={"params": {"interactions": "none"}}), settings)
    n = settings.max_named_features
    assert SquareCBSGD.event_steps(n, 100) == 101 * (n + n * (n - 1) // 2 + 1)
