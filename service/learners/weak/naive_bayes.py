"""Weighted naive Bayes as a binary weak-learner family (ALGORITHMS.md §4.3)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from service.features import SparseVector
from service.kernels import nonzeros
from service.learners.weak import BinaryFamily, weak_families
from service.learners.weak.family_kernels import nb_refresh, nb_scores, nb_update, nb_votes


@weak_families.register("naive_bayes")
class NaiveBayesFamily(BinaryFamily):
    """N x K binary naive Bayes models trained on weighted examples.

    Each binary model keeps weighted sufficient statistics per side ``c in {+1, -1}``
    (ALGORITHMS.md §4.3, PROPOSED):

    * the class mass ``W_c`` (sum of example weights), prior ``(W_c + 1) / (W_+ + W_- + 2)``;
    * binary features (every value seen so far is 0 or 1; one-hot encoded categoricals):
      Bernoulli with Laplace smoothing, ``P(x_j = 1 | c) = (S_cj + 1) / (W_c + 2)`` with ``S_cj`` the
      weighted count of ones;
    * other (numeric) features: Gaussian with the weighted mean ``S_cj / W_c`` and variance
      ``M2_cj / W_c`` (weighted Welford update), floored at ``1e-9`` plus ``1e-9`` times the model's
      overall variance of feature j; they count only once both sides have mass.

    The score is ``h(x) = P(+1 | x) - P(-1 | x) = tanh(a / 2)``, with ``a`` the log posterior odds,
    so it lies in [-1, 1] and is 0 without data. The log-odds are linear in the binary features plus
    a quadratic per numeric feature, with coefficients cached (derived, not state) and refreshed for
    the class an update touches (:mod:`~service.learners.weak.family_kernels`). Scoring costs
    O(K N (nnz + numeric features)). An update moves the statistics on the non-zeros, but not the
    caches: every absent binary feature contributes ``log P(x_j = 0 | c) = log((W_c - S_cj + 1) /
    (W_c + 2))``, which moves with ``W_c`` for every j with its own ``S_cj`` (a sum of logs that no
    per-class total summarises), so refreshing class k's models is O(N d).

    Attributes
    ----------
    W_ : ndarray of shape (K, N, 2)
        Class masses; index 0 is the +1 side, 1 the -1 side.
    S_ : ndarray of shape (K, N, 2, d)
        Weighted feature sums.
    M2_ : ndarray of shape (K, N, 2, d)
        Weighted sums of squared deviations from the mean, kept for numeric features only (for a
        binary feature it is ``S - S^2 / W``, filled in when the feature turns out to be numeric).
    binary_ : ndarray of shape (d,), bool
        Whether every value of feature j seen so far was 0 or 1.
    """

    accepts_sparse = True

    def __init__(self, n_learners: int, n_labels: int, n_features: int, rng: np.random.Generator) -> None:
        super().__init__(n_learners, n_labels, n_features, rng)
        shape = (n_labels, n_learners, 2)
        self.W_ = np.zeros(shape)
        self.S_ = np.zeros((*shape, n_features))
        self.M2_ = np.zeros((*shape, n_features))
        self.binary_ = np.ones(n_features, dtype=bool)
        self._refresh()

    def _refresh(self) -> None:
        """Recompute every cached quantity from the statistics."""
        K, N, d = self.n_labels, self.n_learners, self.n_features
        self._numeric = np.flatnonzero(~self.binary_)
        self._ratio = np.zeros((K, N, 2, d))  # log P(x_j = 1 | c) - log P(x_j = 0 | c), binary j
        self._zeros = np.empty((K, N, 2))  # sum over binary j of log P(x_j = 0 | c)
        self._slope = np.empty((d, K, N))
        self._offset = np.empty((K, N))
        self._gauss = np.empty((4, self._numeric.size, K, N))
        for k in range(K):
            nb_refresh(*self._arrays(), k)

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return (
            self.W_,
            self.S_,
            self.M2_,
            self.binary_,
            self._numeric,
            self._ratio,
            self._zeros,
            self._slope,
            self._offset,
            self._gauss,
        )

    def set_state(self, state: Mapping[str, Any]) -> None:
        super().set_state(state)
        self._refresh()

    def scores(self, x: np.ndarray | SparseVector) -> np.ndarray:
        idx, val = (x.idx, x.val) if isinstance(x, SparseVector) else nonzeros(x)
        return nb_scores(self._slope, self._offset, self._numeric, self._gauss, idx, val).T

    def votes(self, x: np.ndarray | SparseVector, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        idx, val = (x.idx, x.val) if isinstance(x, SparseVector) else nonzeros(x)
        h, f = np.empty(self._offset.shape), np.empty(self.n_labels)
        nb_votes(self._slope, self._offset, self._numeric, self._gauss, alpha, idx, val, h, f)
        return h.T, f

    def update(
        self,
        x: np.ndarray | SparseVector,
        k: int,
        y: float,
        weights: np.ndarray,
        rng: np.random.Generator,
    ) -> None:
        idx, val = (x.idx, x.val) if isinstance(x, SparseVector) else nonzeros(x)
        c = 0 if y > 0 else 1
        if not nb_update(*self._arrays(), idx, val, k, c, weights):
            self._to_numeric(idx[(val != 0.0) & (val != 1.0) & self.binary_[idx]])
            nb_update(*self._arrays(), idx, val, k, c, weights)

    def _to_numeric(self, fresh: np.ndarray) -> None:
        """Turn the binary features ``fresh`` numeric for every model (at most d times in all)."""
        # For 0/1 data M2 = S - S^2 / W exactly; start the Welford sums of new numeric features there.
        S = self.S_[..., fresh]
        W = self.W_[..., None]
        self.M2_[..., fresh] = np.where(W > 0.0, S - S * S / np.where(W > 0.0, W, 1.0), 0.0)
        self.binary_[fresh] = False
        self._refresh()
