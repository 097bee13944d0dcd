"""The compiled Hoeffding-tree forest (VFDT) used as the weak learner of the seed-001 boosters.

The textbook oracle and the sparse-input check are in ``test_hoeffding_oracle.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from river import tree as river_tree

from lab.sim.datasets import load_dataset
from service.features import SparseVector
from service.learners.weak.hoeffding_tree import HoeffdingForest, draw_tree_hyperparameters
from service.serial import decode, encode


def forest(d: int, k: int, n: int = 1, grace: float = 10.0, tie: float = 0.05, delta: float = 1e-7):
    return HoeffdingForest(d, k, np.full(n, grace), np.full(n, tie), np.full(n, delta))


def prequential(f: HoeffdingForest, X: np.ndarray, y: np.ndarray, w: float) -> float:
    hits = 0
    for x, label in zip(X, y, strict=True):
        hits += int(f.distribution(x)[0][0].argmax() == label)
        f.update(x, np.array([label]), np.array([w]))
    return hits / len(y)


def river_prequential(X: np.ndarray, y: np.ndarray, w: float, grace: int) -> float:
    m = river_tree.HoeffdingTreeClassifier(grace_period=grace, delta=1e-7, tau=0.05, leaf_prediction="mc")
    hits = 0
    for x, label in zip(X, y, strict=True):
        xi = dict(enumerate(x))
        hits += int(m.predict_one(xi) == label)
        m.learn_one(xi, int(label), w=w)
    return hits / len(y)


@pytest.mark.parametrize(("name", "weight", "grace"), [("car", 50.0, 10), ("balance", 10.0, 50)])
def test_accuracy_comparable_to_river(name: str, weight: float, grace: int) -> None:
    """Same VFDT rule (info gain, Hoeffding bound, tie threshold); ours differs in split candidates."""
    ds = load_dataset(name)
    X, y = ds.stream(0, 6, limit=4000)
    ours = prequential(forest(ds.d, ds.n_labels, grace=grace), X, y, weight)
    theirs = river_prequential(X, y, weight, grace)
    assert abs(ours - theirs) < 0.05, (ours, theirs)
    assert ours > np.bincount(y).max() / len(y)  # better than the majority class


def test_splits_on_the_informative_binary_feature_with_exact_branch_weights() -> None:
    rng = np.random.default_rng(0)
    X = rng.integers(0, 2, size=(200, 3)).astype(float)
    y = X[:, 1].astype(int)  # feature 1 decides the class
    f = forest(3, 2)
    for x, label in zip(X, y, strict=True):
        f.update(x, np.array([label]), np.array([1.0]))
    assert f.feature_[0, 0] == 1 and f.threshold_[0, 0] == pytest.approx(0.5)
    left, right = f.child_[0, 0]
    # the split happened at the first evaluation with both classes present; children inherit exact counts
    assert f.class_w_[f.slot_[0, left], 1] == 0.0
    assert f.class_w_[f.slot_[0, right], 0] == 0.0
    assert f.distribution(np.array([0.0, 1.0, 0.0]))[0][0].argmax() == 1
    assert f.distribution(np.array([1.0, 0.0, 1.0]))[0][0].argmax() == 0


def test_information_gain_oracle() -> None:
    """The gain the forest acts on equals textbook entropy arithmetic for a binary attribute."""
    X = np.array([[0.0], [0.0], [1.0], [1.0], [1.0]])
    y = np.array([0, 0, 1, 1, 0])

    def H(p: np.ndarray) -> float:
        p = p[p > 0] / p.sum()
        return float(-(p * np.log2(p)).sum())

    expected = H(np.array([3.0, 2.0])) - (2 / 5) * H(np.array([2.0, 0.0])) - (3 / 5) * H(np.array([1.0, 2.0]))
    # R = 1 bit, n = 5: eps = sqrt(ln(1/delta) / 10); choose delta so eps is just below the gain
    delta_ok = float(np.exp(-10 * (expected - 1e-6) ** 2))
    delta_no = float(np.exp(-10 * (expected + 1e-6) ** 2))
    for delta, splits in ((delta_ok, True), (delta_no, False)):
        f = forest(1, 2, grace=5.0, tie=1e-9, delta=delta)
        for x, label in zip(X, y, strict=True):
            f.update(x, np.array([label]), np.array([1.0]))
        assert (f.feature_[0, 0] == 0) == splits


def test_weighted_example_equals_repeated_example() -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 4))
    y = rng.integers(0, 3, 30)
    a, b = forest(4, 3, grace=1e9), forest(4, 3, grace=1e9)
    for x, label in zip(X, y, strict=True):
        a.update(x, np.array([label]), np.array([3.0]))
        for _ in range(3):
            b.update(x, np.array([label]), np.array([1.0]))
    np.testing.assert_array_equal(a.key_, b.key_)  # the same (class, feature) entries
    np.testing.assert_allclose(a.moments_, b.moments_, rtol=1e-12)  # sums, squares, min, max
    np.testing.assert_array_equal(a.class_w_, b.class_w_)


def test_leaf_statistics_are_the_weighted_sums_of_the_non_zero_values() -> None:
    """One entry per (class, feature) seen non-zero: sum w x, sum w x^2, min, max, count."""
    f = forest(3, 2, grace=1e9)
    f.update(np.array([2.0, 0.0, -1.0]), np.array([1]), np.array([0.5]))
    f.update(np.array([4.0, 0.0, 0.0]), np.array([1]), np.array([2.0]))
    f.update(np.array([0.0, 3.0, 0.0]), np.array([0]), np.array([1.0]))
    start, used, _ = f.segment_[0]
    assert f.key_[start : start + used].tolist() == [0 * 3 + 1, 1 * 3 + 0, 1 * 3 + 2]  # class * d + feature
    np.testing.assert_array_equal(
        f.moments_[start : start + used],
        [[3.0, 9.0, 3.0, 3.0], [9.0, 34.0, 2.0, 4.0], [-0.5, 0.5, -1.0, -1.0]],
    )
    assert f.count_[start : start + used].tolist() == [1, 2, 1]
    np.testing.assert_array_equal(f.stat_w_[0], [1.0, 2.5])
    assert f.n_class_[0].tolist() == [1, 2]


def test_entry_pool_reuses_freed_space() -> None:
    """Splits free their leaf's entries and full segments move: the pool stays near the live entries."""
    ds = load_dataset("mice")
    X, y = ds.stream(0, 1, limit=1000)
    f = forest(ds.d, ds.n_labels, n=4, grace=10.0, tie=0.5, delta=0.1)
    most = 0
    for x, label in zip(X, y, strict=True):
        f.update(x, np.full(4, label), np.full(4, 5.0))
        live = int(f.pool_[1] - f.pool_[2])
        most = max(most, live)
        assert f.pool_[1] <= f.key_.size
    assert f.n_leaves_.min() > 10
    assert f.key_.size < 2.5 * most  # growth by 1.25, compaction at 1/8 freed, 25% slack per segment
    used = f.segment_[: f.n_rows_, 1]
    assert live == f.segment_[: f.n_rows_, 2].sum() and used.sum() <= live


def test_bad_input_is_refused() -> None:
    f = forest(3, 2)
    with pytest.raises(ValueError, match="dimension"):
        f.update(np.zeros(4), np.array([0]), np.array([1.0]))
    with pytest.raises(ValueError, match="index"):
        f.update(SparseVector(np.array([5]), np.array([1.0]), 3), np.array([0]), np.array([1.0]))
    with pytest.raises(ValueError, match="label"):
        f.update(np.zeros(3), np.array([2]), np.array([1.0]))


def test_empty_tree_predicts_uniform_and_trees_are_independent() -> None:
    f = forest(2, 3, n=2)
    np.testing.assert_array_equal(f.distribution(np.zeros(2))[0], np.ones((2, 3)))
    f.update(np.array([1.0, 0.0]), np.array([2, 0]), np.array([1.0, 5.0]))
    np.testing.assert_array_equal(f.distribution(np.zeros(2))[0], [[1, 1, 2], [6, 1, 1]])


def test_save_load_mid_growth_is_bit_identical() -> None:
    ds = load_dataset("mice")
    X, y = ds.stream(0, 1, limit=900)
    rng = np.random.default_rng(2)
    g, t, d = draw_tree_hyperparameters(rng, 4, (20.0, 40.0), (0.05, 0.5), (0.01, 0.5))
    a = HoeffdingForest(ds.d, ds.n_labels, g, t, d)
    labels = lambda i: np.array([y[i], (y[i] + 1) % ds.n_labels, y[i], y[i]])  # noqa: E731
    for i in range(500):
        a.update(X[i], labels(i), np.full(4, 2.0))
    assert a.n_leaves_.max() > 2
    b = HoeffdingForest(ds.d, ds.n_labels, g, t, d)
    b.set_state(decode(encode(a.get_state())))
    for i in range(500, 900):
        a.update(X[i], labels(i), np.full(4, 2.0))
        b.update(X[i], labels(i), np.full(4, 2.0))
    assert encode(a.get_state()) == encode(b.get_state())


def test_leaf_pool_grows_with_the_total_number_of_leaves_not_with_the_largest_tree() -> None:
    """Only tree 0 learns: the leaf statistics grow with its leaves alone (no padding per tree)."""
    ds = load_dataset("mice")
    X, y = ds.stream(0, 1, limit=1000)
    n = 8
    f = forest(ds.d, ds.n_labels, n=n, grace=10.0, tie=0.5, delta=0.1)
    for x, label in zip(X, y, strict=True):
        f.update(x, np.array([label]), np.array([5.0]), trees=np.array([0]))
    assert f.n_leaves_[0] > 8 and (f.n_leaves_[1:] == 1).all()
    assert f.n_rows_ == f.n_leaves_.sum()
    rows = f.class_w_.shape[0]
    assert f.n_rows_ <= rows < 2 * f.n_rows_  # doubled only when full
    # every leaf of every tree owns its own row of the pool
    used = [slice(0, int(m)) for m in f.n_nodes_]
    leaves = np.concatenate([f.slot_[i, u][f.feature_[i, u] < 0] for i, u in enumerate(used)])
    assert sorted(leaves.tolist()) == list(range(f.n_rows_))


def test_hyperparameter_draws_respect_their_ranges() -> None:
    g, t, d = draw_tree_hyperparameters(
        np.random.default_rng(0), 500, (5.0, 20.0), (0.01, 0.9), (1e-11, 1e-10)
    )
    assert g.min() >= 5 and g.max() <= 20
    assert t.min() >= 0.01 and t.max() <= 0.9
    assert d.min() >= 1e-11 and d.max() <= 1e-10
    assert 0.3 < np.mean(np.log10(t) < np.log10(0.0949)) < 0.7  # log-uniform: median at the geometric mean


def test_binary_family_scores_and_saves_mid_growth() -> None:
    from lab.sim.stream import run_stream
    from service.learners import make_learner
    from service.learners.weak import weak_families
    from service.sampling import DecisionIds

    family = weak_families.get("hoeffding_tree")(3, 4, 2, np.random.default_rng(0))
    np.testing.assert_array_equal(family.scores(np.zeros(2)), np.zeros((3, 4)))  # empty trees: P = 1/2
    family.update(np.zeros(2), 1, 1.0, np.array([1.0, 2.0, 3.0]), np.random.default_rng(0))
    np.testing.assert_allclose(family.scores(np.zeros(2))[:, 1], [1 / 3, 2 / 4, 3 / 5])
    assert not family.scores(np.zeros(2))[:, [0, 2, 3]].any()

    ds = load_dataset("car")
    X, y = ds.stream(0, 2, limit=2400)
    a = make_learner("binbandit", ds.d, ds.n_labels, {"n_learners": 4, "delta": 0.2}, seed=1)
    run_stream(a, X[:1800], y[:1800], DecisionIds.for_seed(0))
    assert a.weak_.forest_.n_leaves_.max() > 1
    b = type(a).from_state(a.config(), decode(encode(a.state())))
    ca = run_stream(a, X[1800:], y[1800:], DecisionIds.for_seed(1))
    cb = run_stream(b, X[1800:], y[1800:], DecisionIds.for_seed(1))
    assert (ca == cb).all() and encode(a.state()) == encode(b.state())


def test_memory_bound_keeps_statistics_for_the_most_promising_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    """VFDT's memory management: at the bound, low-promise leaves drop their statistics and stop
    splitting but keep counting class weights; the pool stays within the bound; saves resume exactly."""
    from service.learners.weak import hoeffding_tree

    monkeypatch.setattr(hoeffding_tree, "MAX_ENTRY_BYTES", 3000 * hoeffding_tree.ENTRY_BYTES)
    ds = load_dataset("mice")
    X, y = ds.stream(0, 1, limit=900)
    f = forest(ds.d, ds.n_labels, n=4, grace=10.0, tie=0.5, delta=0.1)
    for i in range(600):
        f.update(X[i], np.full(4, y[i]), np.full(4, 5.0))
        assert f.key_.size <= 3000
    rows = f.n_rows_
    inactive = np.flatnonzero(~f.active_[:rows])
    assert inactive.size > 0 and f.active_[:rows].any()
    assert not f.segment_[inactive].any() and not f.stat_w_[inactive].any()
    w = f.class_w_[:rows]
    promise = w.sum(axis=1) - w.max(axis=1)
    assert promise[f.active_[:rows]].mean() > promise[inactive].mean()

    g = HoeffdingForest(ds.d, ds.n_labels, f.grace_, f.tie_, f.delta_)
    g.set_state(decode(encode(f.get_state())))
    before = f.class_w_[:rows].copy()
    for i in range(600, 900):
        f.update(X[i], np.full(4, y[i]), np.full(4, 5.0))
        g.update(X[i], np.full(4, y[i]), np.full(4, 5.0))
    assert encode(f.get_state()) == encode(g.get_state())
    grew = f.class_w_[inactive] != before[inactive]
    assert grew.any()  # inactive leaves still count class weights
