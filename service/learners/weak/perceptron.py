"""Projected online Perceptron as a binary weak-learner family (ALGORITHMS.md §4.3)."""

from __future__ import annotations

import numpy as np

from service.features import SparseVector
from service.learners.weak import BinaryFamily, weak_families
from service.learners.weak.family_kernels import (
    nonzeros,
    perceptron_scores,
    perceptron_update,
    perceptron_update_dense,
    perceptron_votes,
    perceptron_votes_dense,
)


@weak_families.register("perceptron")
class PerceptronFamily(BinaryFamily):
    """N x K projected Perceptrons on the unit ball.

    Seed 000 §3 analyses online gradient descent on the reward ``w y <h_k, x>`` with
    ``||h_k|| <= 1`` and ``||x|| <= 1``; ALGORITHMS.md §4.3 (PROPOSED) fixes the details:

    * input ``x / max(1, ||x||_2)``, so the score ``<u, x>`` lies in [-1, 1];
    * on a margin mistake ``y <u, x> <= 0`` with weight ``w > 0``:
      ``u <- Proj_{||u|| <= 1}(u + eta_n w y x)`` with ``eta_n = 1/sqrt(n)``, n counting this
      model's updates;
    * random start ``u ~ N(0, sigma^2 I)``, ``sigma = 0.01/sqrt(d)`` (seed 000: "random h_1k").

    Each vector is kept as ``u = scale V`` with its squared norm, so a step costs O(nnz) on sparse
    input: V moves on the non-zeros, ``||u + c x||^2 = ||u||^2 + 2 c u.x + c^2 ||x||^2`` and the
    projection only divides the scale (:func:`~service.learners.weak.family_kernels.perceptron_update`).
    A scale below ``1e-100`` is folded back into V (O(d), rare).

    Attributes
    ----------
    V_ : ndarray of shape (d, K, N)
        Unscaled weights, feature-major: ``V_[:, k, i] * scale_[k, i]`` is the weight vector of
        ``h_k^(i)``; the weights of one feature for all models are contiguous.
    scale_ : ndarray of shape (K, N)
        The lazy scale of each vector.
    sqnorm_ : ndarray of shape (K, N)
        ``||u||^2`` of each model, kept up to date by the updates.
    n_ : ndarray of shape (K, N), int64
        Number of updates of each model.
    """

    accepts_sparse = True

    def __init__(self, n_learners: int, n_labels: int, n_features: int, rng: np.random.Generator) -> None:
        super().__init__(n_learners, n_labels, n_features, rng)
        sigma = 0.01 / np.sqrt(n_features)
        U = rng.normal(0.0, sigma, size=(n_labels, n_learners, n_features))  # the draws of every version
        self.V_ = np.ascontiguousarray(U.transpose(2, 0, 1))
        self.scale_ = np.ones((n_labels, n_learners))
        self.sqnorm_ = np.einsum("kid,kid->ki", U, U)
        self.n_ = np.zeros((n_labels, n_learners), dtype=np.int64)

    @property
    def U(self) -> np.ndarray:
        """The weight vectors ``u_k^(i)``, shape (K, N, d) (a new array)."""
        return (self.V_ * self.scale_).transpose(1, 2, 0)

    def scores(self, x: np.ndarray | SparseVector) -> np.ndarray:
        idx, val = (x.idx, x.val) if isinstance(x, SparseVector) else nonzeros(x)
        return perceptron_scores(self.V_, self.scale_, idx, val).T

    def votes(self, x: np.ndarray | SparseVector, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h, f = np.empty(self.scale_.shape), np.empty(self.n_labels)
        if isinstance(x, SparseVector):
            perceptron_votes(self.V_, self.scale_, alpha, x.idx, x.val, h, f)
        else:
            perceptron_votes_dense(self.V_, self.scale_, alpha, x, h, f)
        return h.T, f

    def update(
        self,
        x: np.ndarray | SparseVector,
        k: int,
        y: float,
        weights: np.ndarray,
        rng: np.random.Generator,
    ) -> None:
        if isinstance(x, SparseVector):
            perceptron_update(self.V_, self.scale_, self.sqnorm_, self.n_, x.idx, x.val, k, y, weights)
        else:
            perceptron_update_dense(self.V_, self.scale_, self.sqnorm_, self.n_, x, k, y, weights)
