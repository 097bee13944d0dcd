"""Projected online Perceptron as a binary weak-learner family (ALGORITHMS.md §4.3)."""

from __future__ import annotations

import math

import numpy as np

from service.learners.weak import BinaryFamily, weak_families


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

    Attributes
    ----------
    U_ : ndarray of shape (K, N, d)
        ``U_[k, i]`` is the weight vector of ``h_k^(i)`` (class-major, so an update touches one
        contiguous block).
    n_ : ndarray of shape (K, N), int64
        Number of updates of each model.
    """

    def __init__(self, n_learners: int, n_labels: int, n_features: int, rng: np.random.Generator) -> None:
        super().__init__(n_learners, n_labels, n_features, rng)
        sigma = 0.01 / np.sqrt(n_features)
        self.U_ = rng.normal(0.0, sigma, size=(n_labels, n_learners, n_features))
        self.n_ = np.zeros((n_labels, n_learners), dtype=np.int64)

    @staticmethod
    def _scale(x: np.ndarray) -> np.ndarray:
        sq = float(x @ x)
        return x / math.sqrt(sq) if sq > 1.0 else x

    def scores(self, x: np.ndarray) -> np.ndarray:
        k, n, d = self.U_.shape
        return (self.U_.reshape(k * n, d) @ self._scale(x)).reshape(k, n).T

    def update(self, x: np.ndarray, k: int, y: float, weights: np.ndarray, rng: np.random.Generator) -> None:
        xs = self._scale(x)
        u = self.U_[k]
        mistake = (y * (u @ xs) <= 0.0) & (weights > 0.0)
        rows = np.flatnonzero(mistake)
        if rows.size == 0:
            return
        n = self.n_[k]
        n[rows] += 1
        moved = u[rows] + (y * weights[rows] / np.sqrt(n[rows]))[:, None] * xs
        norms = np.sqrt(np.einsum("ij,ij->i", moved, moved))
        np.maximum(norms, 1.0, out=norms)
        u[rows] = moved / norms[:, None]
