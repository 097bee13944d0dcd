"""Binary Hoeffding trees as a BanditBoost weak-learner family (the weak learners of BinBandit).

Weak learner i of class k is a two-class Hoeffding tree (:mod:`service.learners.weak.hoeffding_tree`,
"N trees per class" as in the seed-001 authors' ``online_binary.py``); its score is
``2 P(+1 | x) - 1`` from the leaf's class weights plus one pseudo-count per class (ALGORITHMS.md
§4.3, "how the authors' BinBandit maps a tree to [-1, 1]"). Per-tree hyperparameters are drawn
from the seed-001 BinBandit ranges (§2.10): grace U[50, 200], tie 10^U[log .01, log .9], split
confidence 10^U[-11, log .9]. The forest takes dense rows and :class:`~service.features.SparseVector`
alike (the same trees either way), so the family takes sparse input.
"""

from __future__ import annotations

import numpy as np

from service.features import SparseVector
from service.learners.weak import BinaryFamily, weak_families
from service.learners.weak.hoeffding_tree import HoeffdingForest, draw_tree_hyperparameters

GRACE = (50.0, 200.0)
TIE = (0.01, 0.9)
CONFIDENCE = (1e-11, 0.9)


@weak_families.register("hoeffding_tree")
class HoeffdingTreeFamily(BinaryFamily):
    """N x K binary Hoeffding trees in one :class:`HoeffdingForest` (tree ``k N + i`` is h_k^(i)).

    Attributes
    ----------
    forest_ : HoeffdingForest
        The K N two-class trees; class 1 is the positive label.
    """

    accepts_sparse = True

    def __init__(self, n_learners: int, n_labels: int, n_features: int, rng: np.random.Generator) -> None:
        super().__init__(n_learners, n_labels, n_features, rng)
        draws = draw_tree_hyperparameters(rng, n_learners * n_labels, GRACE, TIE, CONFIDENCE)
        self.forest_ = HoeffdingForest(n_features, 2, *draws)

    def scores(self, x: np.ndarray | SparseVector) -> np.ndarray:
        dist, _ = self.forest_.distribution(x)  # (K N, 2)
        h = 2.0 * dist[:, 1] / dist.sum(axis=1) - 1.0
        return h.reshape(self.n_labels, self.n_learners).T

    def update(
        self, x: np.ndarray | SparseVector, k: int, y: float, weights: np.ndarray, rng: np.random.Generator
    ) -> None:
        trees = k * self.n_learners + np.arange(self.n_learners)
        labels = np.full(self.n_learners, 1 if y > 0 else 0)
        self.forest_.update(x, labels, weights, trees=trees)
