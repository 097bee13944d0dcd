"""Train/held-out splits and error curves for ``python -m service adaboost-mh`` and the seed-003
reproduction."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lab.sim.datasets import Dataset
from service.learners.stumps.mh import StumpData, label_matrix, share_point_weights
from service.learners.stumps.train import Search, boost

__all__ = ["Curve", "Split", "run", "split"]

# The datasets' own train/test split: the first rows are the published training set.
STANDARD_TRAIN_ROWS = {"dna": 2000, "isolet": 6238, "mnist": 60000}
HELDOUT_FRACTION = 0.2


@dataclass(frozen=True)
class Split:
    """Training and held-out rows of a dataset, and how they were chosen (one line)."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    n_labels: int
    description: str


def split(ds: Dataset, seed: int, train_limit: int | None = None) -> Split:
    """The published split when the dataset has one (dna, isolet, mnist), else a seeded 80/20 split.

    ``train_limit`` keeps a seeded random subset of that many training rows (the held-out set is
    never subsampled).
    """
    rng = np.random.default_rng(seed)
    n_std = STANDARD_TRAIN_ROWS.get(ds.name)
    if n_std is not None and ds.n > n_std:
        train, test = np.arange(n_std), np.arange(n_std, ds.n)
        how = f"published split: first {n_std} rows train, last {ds.n - n_std} held out"
    else:
        perm = rng.permutation(ds.n)
        n_test = max(1, round(HELDOUT_FRACTION * ds.n))
        train, test = np.sort(perm[n_test:]), np.sort(perm[:n_test])
        how = f"seeded random split (seed {seed}): {train.size} train, {test.size} held out"
    if train_limit is not None and train_limit < train.size:
        train = np.sort(rng.choice(train, train_limit, replace=False))
        how += f"; training subsampled to {train_limit} rows (seed {seed})"
    return Split(ds.X[train], ds.y[train], ds.X[test], ds.y[test], ds.n_labels, how)


@dataclass(frozen=True)
class Curve:
    """Per-iteration trace of one boosting run (arrays of length T)."""

    search: str
    seconds: np.ndarray
    evaluations: np.ndarray
    train_error: np.ndarray
    test_error: np.ndarray


def run(sp: Split, search: Search, iterations: int, seed: int) -> Curve:
    """Boost on ``sp``'s training rows; record errors after every iteration.

    The coefficient smoothing is MultiBoost's ``epsilon = 0.01 / n``. Wall time counts only search
    and reweighting (:class:`~service.learners.stumps.train.Step`), not the error bookkeeping here.
    """
    K = sp.n_labels
    data = StumpData(sp.X_train, label_matrix(sp.y_train, K), share_point_weights(sp.y_train, K))
    F_train = np.zeros((sp.y_train.size, K))
    F_test = np.zeros((sp.y_test.size, K))
    out: dict[str, list[float]] = {"seconds": [], "evaluations": [], "train": [], "test": []}
    rng = np.random.default_rng(seed)
    for step in boost(data, iterations, search, rng, 0.01 / sp.y_train.size):
        s = step.stump
        F_train += step.alpha * s.phi(sp.X_train)[:, None] * s.votes
        F_test += step.alpha * s.phi(sp.X_test)[:, None] * s.votes
        out["seconds"].append(step.seconds)
        out["evaluations"].append(step.evaluations)
        out["train"].append(float(np.mean(F_train.argmax(axis=1) != sp.y_train)))
        out["test"].append(float(np.mean(F_test.argmax(axis=1) != sp.y_test)))
    return Curve(
        search,
        np.array(out["seconds"]),
        np.array(out["evaluations"], dtype=np.int64),
        np.array(out["train"]),
        np.array(out["test"]),
    )
