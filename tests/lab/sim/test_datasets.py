"""Dataset loading, stream order and the seed-002 synthetic generator."""

from __future__ import annotations

import numpy as np
import pytest

from lab.sim.datasets import SYNTHETIC, Synthetic, load_dataset


def test_mnist_is_scaled_to_unit_interval() -> None:
    data = load_dataset("mnist")
    assert data.X.dtype == np.float64 and data.X.shape == (70_000, 784) and data.n_labels == 10
    assert data.X.min() == 0.0 and data.X.max() == 1.0


def test_nan_becomes_zero() -> None:
    with np.load(load_dataset.__globals__["datasets_dir"]() / "mice.npz") as z:
        raw = z["X"]
    data = load_dataset("mice")
    assert np.isnan(raw).any() and not np.isnan(data.X).any()
    assert np.array_equal(data.X[np.isnan(raw)], np.zeros(np.isnan(raw).sum()))


def test_stream_is_duplicate_then_permute() -> None:
    data = load_dataset("car")
    X, y = data.stream(7, duplicate=3, limit=5000)
    idx = np.tile(np.arange(data.n), 3)[np.random.default_rng(7).permutation(3 * data.n)][:5000]
    assert np.array_equal(X, data.X[idx]) and np.array_equal(y, data.y[idx])
    full_y = data.stream(7, duplicate=3)[1]
    assert np.array_equal(np.bincount(full_y), 3 * np.bincount(data.y))


def test_ordinal_coding_is_one_column_per_attribute_in_listed_value_order() -> None:
    data = load_dataset("car")
    assert data.feature_names[:2] == ["buying=vhigh", "buying=high"] and data.d == 21
    ords = data.ordinal()
    assert ords.feature_names == ["buying", "maint", "doors", "persons", "lug_boot", "safety"]
    assert ords.X.shape == (1728, 6) and np.array_equal(ords.y, data.y)
    # each column is the position of the row's value within its one-hot group, in listed order
    start = 0
    for j, size in enumerate((4, 4, 4, 3, 3, 3)):
        assert np.array_equal(ords.X[:, j], data.X[:, start : start + size].argmax(axis=1))
        start += size
    # car is the full Cartesian product of its attribute values: every combination once
    assert len({tuple(r) for r in ords.X}) == 4 * 4 * 4 * 3 * 3 * 3
    # a data set without one-hot groups is unchanged
    balance = load_dataset("balance")
    assert np.array_equal(balance.ordinal().X, balance.X)


def test_ordinal_coding_refuses_unnamed_or_broken_groups(tmp_path) -> None:
    path = tmp_path / "tiny.npz"
    np.savez(path, X=np.array([[1.0, 0.0], [1.0, 1.0]]), y=np.array([0, 1]))
    with pytest.raises(ValueError, match="one feature name per column"):
        load_dataset(str(path)).ordinal()
    (tmp_path / "tiny.json").write_text('{"feature_names": ["a=x", "a=y"]}')
    with pytest.raises(ValueError, match="not one-hot in every row"):
        load_dataset(str(path)).ordinal()


def test_explicit_npz_path_and_missing_name(tmp_path) -> None:
    path = tmp_path / "tiny.npz"
    np.savez(path, X=np.array([[1.0, np.nan], [0.0, 2.0]]), y=np.array([0, 2]))
    data = load_dataset(str(path))
    assert data.name == "tiny" and data.n_labels == 3 and np.array_equal(data.X, [[1.0, 0.0], [0.0, 2.0]])
    with pytest.raises(FileNotFoundError, match="available in"):
        load_dataset("no-such-dataset")


def test_synthetic_examples_follow_the_recipe() -> None:
    gen = Synthetic()
    v = gen.topics
    assert v.shape == (9, 120) and (v.sum(axis=1) >= 20).all() and (v.sum(axis=1) <= 40).all()
    X, y = gen.sample(3000, np.random.default_rng(1))
    head, tail = X[:, :120].astype(bool), X[:, 120:]
    assert set(np.unique(X)) == {0.0, 1.0}
    assert np.array_equal(head & ~v[y], np.zeros_like(head))  # only keywords of the topic
    assert np.array_equal(head.sum(axis=1), v[y].sum(axis=1) - 5)  # 5 of them turned off
    assert (tail.sum(axis=1) == 20).all()
    assert np.bincount(y, minlength=9).min() > 250


def test_synsep_is_separable_with_the_constructive_weights() -> None:
    """The docstring's witness ``w_i = 2 v_i - 1`` on keywords separates SYNSEP with margin >= 2."""
    gen = Synthetic()
    X, y = gen.sample(5000, np.random.default_rng(2))
    W = np.zeros((9, 400))
    W[:, :120] = 2.0 * gen.topics - 1.0
    scores = X @ W.T
    true = scores[np.arange(len(y)), y]
    scores[np.arange(len(y)), y] = -np.inf
    assert (true - scores.max(axis=1)).min() >= 2.0


def test_synnonsep_is_synsep_with_five_percent_wrong_labels() -> None:
    sep = list(SYNTHETIC["synsep"].chunks(40_000, chunk=10_000))
    non = list(SYNTHETIC["synnonsep"].chunks(40_000, chunk=10_000))
    for (Xs, _), (Xn, _) in zip(sep, non, strict=True):
        assert np.array_equal(Xs, Xn)
    flipped = np.concatenate([ys != yn for (_, ys), (_, yn) in zip(sep, non, strict=True)])
    assert 0.04 < flipped.mean() < 0.06
    again = list(SYNTHETIC["synnonsep"].chunks(40_000, chunk=10_000))
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(non, again, strict=True))
