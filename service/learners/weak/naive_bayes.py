"""Weighted naive Bayes as a binary weak-learner family (ALGORITHMS.md §4.3)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from service.learners.weak import BinaryFamily, weak_families

_VAR_FLOOR = 1e-9  # absolute floor, plus this times the model's overall feature variance (§4.3)


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
    so it lies in [-1, 1] and is 0 without data. Log-probabilities of the Bernoulli part are cached
    (derived, not state) and refreshed only for the class an update touches.

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

    def __init__(self, n_learners: int, n_labels: int, n_features: int, rng: np.random.Generator) -> None:
        super().__init__(n_learners, n_labels, n_features, rng)
        shape = (n_labels, n_learners, 2)
        self.W_ = np.zeros(shape)
        self.S_ = np.zeros((*shape, n_features))
        self.M2_ = np.zeros((*shape, n_features))
        self.binary_ = np.ones(n_features, dtype=bool)
        self._refresh()

    # -- derived caches -------------------------------------------------------------------------

    def _refresh(self) -> None:
        """Recompute every cached quantity from the statistics."""
        K, N, d = self.n_labels, self.n_learners, self.n_features
        self._ratio = np.empty((K, N, 2, d))  # log P(x_j = 1 | c) - log P(x_j = 0 | c)
        self._zeros = np.empty((K, N, 2))  # sum over binary j of log P(x_j = 0 | c)
        self._slope = np.empty((K, N, d))
        self._offset = np.empty((K, N))
        for k in range(K):
            for c in (0, 1):
                self._refresh_side(k, c)
            self._refresh_class(k)

    def _refresh_side(self, k: int, c: int) -> None:
        W = self.W_[k, :, c]
        ones = self.S_[k, :, c] * self.binary_  # numeric features: a harmless 0
        log_zero = np.log1p(W[:, None] - ones)  # log(W - S + 1); minus log(W + 2) below
        self._ratio[k, :, c] = np.log1p(ones) - log_zero
        self._zeros[k, :, c] = log_zero @ self.binary_ - np.count_nonzero(self.binary_) * np.log(W + 2.0)

    def _refresh_class(self, k: int) -> None:
        """Log-odds of class k's models are ``slope @ x_binary + offset`` (+ the Gaussian part)."""
        self._slope[k] = self._ratio[k, :, 0] - self._ratio[k, :, 1]
        prior = np.log1p(self.W_[k, :, 0]) - np.log1p(self.W_[k, :, 1])
        self._offset[k] = prior + self._zeros[k, :, 0] - self._zeros[k, :, 1]

    def set_state(self, state: Mapping[str, Any]) -> None:
        super().set_state(state)
        self._refresh()

    # -- the family interface -------------------------------------------------------------------

    def _log_odds(self, x: np.ndarray) -> np.ndarray:
        K, N, d = self._slope.shape
        a = (self._slope.reshape(K * N, d) @ np.where(self.binary_, x, 0.0)).reshape(K, N) + self._offset
        numeric = ~self.binary_
        if numeric.any():
            a += self._gaussian_log_ratio(x[numeric], numeric)
        return a

    def _gaussian_log_ratio(self, xn: np.ndarray, numeric: np.ndarray) -> np.ndarray:
        """``sum_j log N(x_j | +1) - log N(x_j | -1)`` over numeric features, shape (K, N)."""
        W = self.W_[..., None]  # (K, N, 2, 1)
        S, M2 = self.S_[..., numeric], self.M2_[..., numeric]
        both = (self.W_ > 0.0).all(axis=2)  # (K, N)
        Wsafe = np.where(W > 0.0, W, 1.0)
        mean = S / Wsafe
        var = M2 / Wsafe
        total = W.sum(axis=2)  # (K, N, 1)
        total_safe = np.where(total > 0.0, total, 1.0)
        pooled_mean = S.sum(axis=2) / total_safe
        overall = (M2.sum(axis=2) + (W * (mean - pooled_mean[:, :, None]) ** 2).sum(axis=2)) / total_safe
        var = var + _VAR_FLOOR * (1.0 + overall[:, :, None])
        ll = -0.5 * (np.log(2.0 * np.pi * var) + (xn - mean) ** 2 / var)
        return np.where(both, (ll[:, :, 0] - ll[:, :, 1]).sum(axis=-1), 0.0)

    def scores(self, x: np.ndarray) -> np.ndarray:
        return np.tanh(0.5 * self._log_odds(x)).T

    def update(self, x: np.ndarray, k: int, y: float, weights: np.ndarray, rng: np.random.Generator) -> None:
        not_binary = (x != 0.0) & (x != 1.0)
        if not_binary.any() and self.binary_[not_binary].any():
            # For 0/1 data M2 = S - S^2 / W exactly; start the Welford sums of new numeric features there.
            fresh = not_binary & self.binary_
            S = self.S_[..., fresh]
            W = self.W_[..., None]
            self.M2_[..., fresh] = np.where(W > 0.0, S - S * S / np.where(W > 0.0, W, 1.0), 0.0)
            self.binary_ &= ~not_binary
            self._refresh()
        c = 0 if y > 0 else 1
        w = weights.astype(np.float64)
        numeric = ~self.binary_
        if numeric.any():  # weighted Welford (West 1979) on the numeric features
            W_old = self.W_[k, :, c][:, None]
            S = self.S_[k, :, c][:, numeric]
            xn = x[numeric]
            mean_old = S / np.where(W_old > 0.0, W_old, 1.0)
            W_new = W_old + w[:, None]
            mean_new = (S + w[:, None] * xn) / np.where(W_new > 0.0, W_new, 1.0)
            m2 = self.M2_[k, :, c]  # a view: basic indexing
            m2[:, numeric] += w[:, None] * (xn - mean_old) * (xn - mean_new)
        self.S_[k, :, c] += w[:, None] * x
        self.W_[k, :, c] += w
        self._refresh_side(k, c)
        self._refresh_class(k)
