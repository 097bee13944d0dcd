"""SquareCB over VW's SGD regression with hashed pairs: the regression step against Vowpal Wabbit
itself and a textbook version, the scores and updates against the table written out here, sparse
input as dense. Pairs that learn an XOR: tests/service/test_interactions.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.config import ModelSpec, Settings
from service.features import SparseVector
from service.learners import make_learner
from service.learners.squarecb_sgd import SquareCBSGD, label_row, label_sensitivities, vw_update
from service.runtime import BudgetError, check_event_budget
from service.sampling import DecisionIds, decision_rng

M64 = (1 << 64) - 1


def _mix(z: int) -> int:
    """SplitMix64's finaliser in Python integers (service.interactions._mix)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _vw_textbook(
    w: np.ndarray, g2: np.ndarray, scale: np.ndarray, totals: np.ndarray, x: list[tuple[int, float]],
    y: float, eta: float, h: float,
) -> None:  # fmt: skip
    """VW's gd step (gd.cc, power_t 0.5, adaptive, normalised, invariant) written out in Python,
    the prediction clipped to [0, 1]; ``x`` lists (column, value) entries, a column possibly twice
    (a hash collision), each entry a feature of its own as in VW's loops over an example."""
    p = min(max(sum(w[i] * v for i, v in x), 0.0), 1.0)
    if p == y:
        return
    norm, q = 0.0, 0.0
    for i, v in x:
        g2[i] += h * 4 * (p - y) ** 2 * v * v
        if abs(v) > scale[i]:
            if scale[i] > 0:
                w[i] *= scale[i] / abs(v)
            scale[i] = abs(v)
        norm += (v / scale[i]) ** 2
        q += v * v / (math.sqrt(g2[i]) * scale[i])
    totals[0] += h * norm
    totals[1] += h
    m = math.sqrt(totals[1] / totals[0])
    q *= m
    u = 2 * eta * h * (y - p) if eta * h * q < 1e-6 else (y - p) * (1 - math.exp(-2 * eta * h * q)) / q
    for i, v in x:
        w[i] += m * u * v / (math.sqrt(g2[i]) * scale[i])


def _expanded(x: np.ndarray, pairs: bool, squares: bool = False) -> list[tuple[int, float]]:
    """z of the docstring, dense and by definition: x, then x_i x_j (i < j) at d + rank, then the
    squares x_i^2 at d + P + i, then 1."""
    d = x.size
    P = d * (d - 1) // 2 if pairs else 0
    z = [(i, float(x[i])) for i in range(d) if x[i] != 0.0]
    if pairs:
        rank = 0
        for i in range(d):
            for j in range(i + 1, d):
                if x[i] * x[j] != 0.0:
                    z.append((d + rank, float(x[i] * x[j])))
                rank += 1
    if squares:
        z += [(d + P + i, float(x[i] * x[i])) for i in range(d) if x[i] != 0.0]
        P += d
    z.append((d + P, 1.0))
    return z


def _column(j: int, a: int, k: int, size: int, exact: bool) -> int:
    return j * k + a if exact else (_mix(j) % size + a) % size


def _row(x: np.ndarray, a: int, k: int, size: int, exact: bool, interactions: str) -> list[tuple[int, float]]:
    z = _expanded(x, interactions != "none", interactions == "quadratic")
    return [(_column(j, a, k, size, exact), v) for j, v in z]


@pytest.mark.parametrize(
    ("params", "exact"),
    [
        ({"interactions": "quadratic"}, True),
        ({"interactions": "pairs"}, True),
        ({"bits": 5}, False),
        ({"interactions": "none"}, True),
        ({"weighting": "none", "bits": 4}, False),
    ],
)
def test_scores_and_updates_equal_the_textbook_table(params: dict, exact: bool) -> None:
    d, k = 5, 3
    m = make_learner("squarecb-sgd", d, k, params, seed=0)
    inter = m.params.interactions
    size = 1 << m.params.bits
    assert m._exact == exact
    w, g2, scale, totals = np.zeros(size), np.zeros(size), np.zeros(size), np.zeros(2)
    rng = np.random.default_rng(1)
    ids = DecisionIds.for_seed(0)
    for _ in range(200):
        x = (rng.random(d) < 0.6) * rng.normal(size=d) * rng.choice([0.5, 3.0])
        cost = [sum(w[c] * v for c, v in _row(x, a, k, size, exact, inter)) for a in range(k)]
        want = 1 - np.clip(cost, 0, 1)  # the cost is regressed: rewards 1 - clipped cost
        np.testing.assert_allclose(m.scores(x), want, rtol=1e-12, atol=1e-12)
        dec = m.decide(x, decision_rng(ids.new()))
        reward = bool(rng.random() < 0.4)
        m.learn(x, dec, reward)
        h = 1.0 / (k * dec.probs[dec.label]) if m.params.weighting == "mtr" else 1.0 / k
        _vw_textbook(w, g2, scale, totals, _row(x, dec.label, k, size, exact, inter), 1.0 - reward, 0.5, h)
    for got, want in zip((m.w_, m.g2_, m.scale_, m.totals_), (w, g2, scale, totals), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_the_regression_step_tracks_vowpal_wabbits_own_gd() -> None:
    """Our step against VW itself (the ``vowpalwabbit`` package, ``vw`` at its defaults: adaptive,
    normalised, invariant, -l 0.5, power_t 0.5, a constant): the prediction before each of 400
    importance-weighted steps agrees to VW's float32 precision. The first label is 1, so VW's
    clipping range (the labels seen) is [0, 1] from the first step, as ours. VW hashes the names
    f0..f11 into distinct columns at 18 bits, so no collision blurs the comparison."""
    vowpalwabbit = pytest.importorskip("vowpalwabbit")
    rng = np.random.default_rng(0)
    d = 12
    vw = vowpalwabbit.Workspace("--quiet")
    w, g2, scale, totals = np.zeros(d + 1), np.zeros(d + 1), np.zeros(d + 1), np.zeros(2)
    ours, theirs = [], []
    for t in range(400):
        idx = np.unique(rng.integers(0, d, 5))
        val = rng.normal(size=idx.size) * rng.choice([0.1, 1.0, 10.0])
        y = 1.0 if t == 0 else float(rng.random() < 0.3)
        h = float(rng.choice([1.0, 2.5, 4.0]))
        ex = vw.parse(f"{y} {h} | " + " ".join(f"f{i}:{v:.17g}" for i, v in zip(idx, val, strict=True)))
        vw.learn(ex)
        theirs.append(ex.get_simplelabel_prediction())
        vw.finish_example(ex)
        cols = np.append(idx, d).astype(np.int64)  # VW's constant feature last
        ours.append(vw_update(w, g2, scale, totals, cols, np.append(val, 1.0), y, 0.5, h, 0.0, 1.0))
    vw.finish()
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-6)
    assert np.ptp(theirs[100:]) > 0.2  # it learned: the predictions move


def test_the_regression_step_equals_the_textbook_step() -> None:
    rng = np.random.default_rng(0)
    n = 16
    arrays = [np.zeros(n) for _ in range(3)] + [np.zeros(2)]
    oracle = [np.zeros(n) for _ in range(3)] + [np.zeros(2)]
    for _ in range(300):
        idx = rng.integers(0, n, 5)  # columns may repeat (hash collisions)
        val = rng.normal(size=idx.size) * rng.choice([0.1, 1.0, 10.0])
        y = float(rng.random() < 0.3)
        h = float(rng.choice([0.25, 1.0, 40.0]))
        vw_update(*arrays, idx, val, y, 0.5, h, 0.0, 1.0)
        _vw_textbook(*oracle, list(zip(idx.tolist(), val.tolist(), strict=True)), y, 0.5, h)
    for got, want in zip(arrays, oracle, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def _sensitivity_textbook(
    g2: np.ndarray, scale: np.ndarray, totals: np.ndarray, x: list[tuple[int, float]], p: float, y: float,
    eta: float,
) -> float:  # fmt: skip
    """VW's stateless sensitivity (gd.cc, get_pred_per_update on a shadow copy, times eta): each
    entry's AdaGrad sum and scale as a unit-weight step towards y would leave them, copied afresh
    from the table per entry (a repeated column does not accumulate), and the totals with weight 1."""
    gs = 4 * (p - y) ** 2
    norm, q = 0.0, 0.0
    for i, v in x:
        s = max(scale[i], abs(v))
        norm += (v / s) ** 2
        q += v * v / (math.sqrt(g2[i] + gs * v * v) * s)
    return eta * q * math.sqrt((totals[1] + 1) / (totals[0] + norm))


@pytest.mark.parametrize("params", [{}, {"bits": 6}])
def test_every_labels_sensitivity_is_vws_on_its_row(params: dict) -> None:
    """label_sensitivities against the textbook on each label's row (exact and hashed columns,
    collisions included), towards both fake labels; nothing stored changes."""
    m = make_learner("squarecb-sgd", 6, 4, params, seed=0)
    rng = np.random.default_rng(4)
    ids = DecisionIds.for_seed(0)
    for _ in range(200):
        x = (rng.random(6) < 0.6) * rng.normal(size=6) * rng.choice([0.5, 3.0])
        m.learn(x, m.decide(x, decision_rng(ids.new())), bool(rng.random() < 0.4))
    k = m.n_labels
    for _ in range(20):
        x = (rng.random(6) < 0.6) * rng.normal(size=6) * 3
        idx, val = m._expand(x)
        p = rng.normal(size=k)
        before = [a.copy() for a in (m.g2_, m.scale_, m.totals_)]
        lo, hi = label_sensitivities(
            m.g2_, m.scale_, m.totals_, idx, val, k, m._exact, p, -1.0, 2.0, 0.5, True
        )
        lo_only, zeros = label_sensitivities(
            m.g2_, m.scale_, m.totals_, idx, val, k, m._exact, p, -1.0, 2.0, 0.5, False
        )
        assert np.array_equal(lo_only, lo) and not zeros.any()
        for a in range(k):
            cols, vals = label_row(idx, val, k, a, m.w_.size, m._exact)
            row = list(zip(cols.tolist(), vals.tolist(), strict=True))
            assert lo[a] == pytest.approx(
                _sensitivity_textbook(m.g2_, m.scale_, m.totals_, row, p[a], -1.0, 0.5), rel=1e-12
            )
            assert hi[a] == pytest.approx(
                _sensitivity_textbook(m.g2_, m.scale_, m.totals_, row, p[a], 2.0, 0.5), rel=1e-12
            )
        for got, want in zip((m.g2_, m.scale_, m.totals_), before, strict=True):
            assert np.array_equal(got, want)


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
