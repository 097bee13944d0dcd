"""Binary weak-learner families: N weak learners x K per-class binary models in one object.

BanditBoost (seed 000, ALGORITHMS.md §4) reduces a multiclass round to binary examples
``((x, k), y_k)`` for the one class k the click reveals, with one example weight per weak learner.
ALGORITHMS.md §4.3 implements weak learner i as K independent binary models ``h_k^(i)``; a
*family* holds all N x K of them as stacked arrays, so scoring and updating are a few array
operations (compiled loops in :mod:`service.learners.weak.family_kernels`) instead of a Python loop
over learners.

Register a family with ``@weak_families.register("name")``; learners pick it by that name
(``banditboost(weak="name")``, ``cova(base="name")``). A family's learned state lives in
``_``-suffixed attributes (:class:`service.learners.base.Stateful`), so it is saved and loaded with
the learner that owns it.
"""

from __future__ import annotations

import abc
from typing import ClassVar

import numpy as np

from service.learners.base import Stateful
from service.registry import Registry

__all__ = ["BinaryFamily", "weak_families"]


class BinaryFamily(Stateful, abc.ABC):
    """N x K online binary scorers with weighted updates.

    Parameters
    ----------
    n_learners : int
        Number N of weak learners.
    n_labels : int
        Number K of classes; weak learner i holds one binary model per class.
    n_features : int
        Dimension d of the feature vectors.
    rng : numpy.random.Generator
        The owner's generator, for random initialisation only (not kept).
    """

    #: Whether ``scores``, ``votes`` and ``update`` also take a :class:`service.features.SparseVector`
    #: (the owner then takes sparse input too, :attr:`service.learners.base.Learner.accepts_sparse`).
    accepts_sparse: ClassVar[bool] = False

    def __init__(self, n_learners: int, n_labels: int, n_features: int, rng: np.random.Generator) -> None:
        self.n_learners = n_learners
        self.n_labels = n_labels
        self.n_features = n_features

    @abc.abstractmethod
    def scores(self, x: np.ndarray) -> np.ndarray:
        """Scores ``h_k^(i)(x)`` in [-1, 1] as an array of shape (N, K); must not change the state."""

    def votes(self, x: np.ndarray, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Scores ``h`` of shape (N, K) and the votes ``f_k = sum_i alpha[i, k] h[i, k]``, shape (K,).

        BanditBoost's round-t scores (seed 000, Algorithm 1 step 1) in one call; families with
        compiled loops override it. Must not change the state.
        """
        h = self.scores(x)
        return h, np.einsum("ik,ik->k", alpha, h)

    @abc.abstractmethod
    def update(self, x: np.ndarray, k: int, y: float, weights: np.ndarray, rng: np.random.Generator) -> None:
        """Train the N binary models of class ``k`` on ``(x, y)``, y in {-1, +1}, weights of shape (N,).

        ``rng`` is the owner's learn-time generator, for families whose updates are randomised.
        """


weak_families: Registry[type[BinaryFamily]] = Registry("weak learner family", "service.learners.weak")
