"""AdaBoost.MH with discrete decision stumps (Schapire & Singer 1999; ALGORITHMS.md §7.1).

The training data is a feature matrix ``X`` (n, d), a sign matrix ``Y`` (n, K) and initial weights
``W0`` (n, K). Fully labelled data has ``Y[i, l] = +1`` iff ``l = y_i`` and the share-point weights
of :func:`share_point_weights`; data logged under bandit feedback reveals one entry per row and
carries weight only there (see :mod:`service.learners.adaboost_mh`).

Stump search is vectorised with sorted cumulative sums: features are argsorted once, and for a
stump ``phi(x) = +1 if x_j > theta else -1`` the class-wise edge at every threshold of feature j is
``gamma_l = sum_i W_il Y_il - 2 * (prefix sum of W_il Y_il over the rows with x_ij <= theta)``.

References
----------
R. E. Schapire, Y. Singer. Improved boosting algorithms using confidence-rated predictions. Machine
Learning 37, 1999. R. Busa-Fekete, B. Kégl. Accelerating AdaBoost using UCB. KDD Cup 2009; Fast
boosting using adversarial bandits. ICML 2010 (seed 003). MultiBoost ``AppStat/MultiBoost@307b61b``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Stump",
    "StumpData",
    "StumpEnsemble",
    "alpha",
    "label_matrix",
    "share_point_weights",
]

# Elements of the (rows, features, K) block gathered per chunk of the stump search (~32 MB).
_CHUNK_ELEMENTS = 1 << 22


def label_matrix(y: np.ndarray, n_labels: int) -> np.ndarray:
    """``Y[i, l] = +1`` if ``l = y_i`` else ``-1`` (ALGORITHMS.md §7.1), as int8."""
    Y = np.full((y.size, n_labels), -1, dtype=np.int8)
    Y[np.arange(y.size), y] = 1
    return Y


def share_point_weights(y: np.ndarray, n_labels: int) -> np.ndarray:
    """MultiBoost's ``WIT_SHARE_POINT`` initial weights: half of each point's 1/n on its label.

    ``W[i, y_i] = 1/(2n)`` and ``W[i, l] = 1/(2n(K-1))`` for ``l != y_i``; they sum to 1.
    """
    n = y.size
    W = np.full((n, n_labels), 1.0 / (2.0 * n * (n_labels - 1)))
    W[np.arange(n), y] = 1.0 / (2.0 * n)
    return W


def alpha(edge: float, epsilon: float) -> float:
    """Base coefficient ``1/2 ln((mu+ + eps) / (mu- + eps))`` with ``mu+- = (1 +- edge)/2`` (§7.1)."""
    return 0.5 * float(np.log(((1.0 + edge) / 2.0 + epsilon) / ((1.0 - edge) / 2.0 + epsilon)))


@dataclass(frozen=True, slots=True)
class Stump:
    """A discrete stump ``v * phi(x)`` with ``phi(x) = +1 if x[feature] > threshold else -1``.

    ``edge`` is ``sum_l |gamma_l|`` under the weights it was found with; ``evaluations`` counts the
    candidate thresholds examined to find it. A feature with a single distinct value has no
    threshold: its stump has ``threshold = inf`` and edge 0.
    """

    feature: int
    threshold: float
    votes: np.ndarray
    edge: float
    evaluations: int

    def phi(self, X: np.ndarray) -> np.ndarray:
        """``+1`` where ``X[:, feature] > threshold``, else ``-1`` (float64, shape (n,))."""
        return np.where(X[:, self.feature] > self.threshold, 1.0, -1.0)


class StumpData:
    """Training data presorted for stump search, with the current AdaBoost.MH weights.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    Y : ndarray of shape (n, K)
        Signs in {-1, +1} (entries with zero weight are ignored).
    W0 : ndarray of shape (n, K)
        Non-negative initial weights, normalised here to sum to 1.

    Attributes
    ----------
    W : ndarray of shape (n, K)
        Current weights, always summing to 1.
    n_thresholds : ndarray of shape (d,)
        Number of candidate thresholds (distinct values minus one) of every feature.
    """

    def __init__(self, X: np.ndarray, Y: np.ndarray, W0: np.ndarray) -> None:
        total = float(W0.sum())
        if not total > 0.0:
            raise ValueError("the initial weights must have a positive sum")
        self.X = X
        self.Y = Y.astype(np.float64)
        self.W = W0 / total
        self.order = np.argsort(X, axis=0, kind="stable")
        self.sorted_X = np.take_along_axis(X, self.order, axis=0)
        # valid[p, j]: a threshold fits between sorted positions p and p+1 of feature j.
        self.valid = self.sorted_X[1:] > self.sorted_X[:-1]
        self.n_thresholds = self.valid.sum(axis=0)

    @property
    def n_features(self) -> int:
        """d."""
        return int(self.X.shape[1])

    def _best_positions(
        self, chunk: np.ndarray, WY: np.ndarray, total: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Best edge and its sorted position for every feature of ``chunk`` (edge -1: no threshold)."""
        # g[p, j, l] = sum of W Y over the p+1 smallest values of feature chunk[j], then the
        # class-wise edges total - 2 g and their absolute values, all in place.
        g = WY[self.order[:-1, chunk]]
        np.cumsum(g, axis=0, out=g)
        g *= -2.0
        g += total
        np.abs(g, out=g)
        edges = g.sum(axis=2)
        edges[~self.valid[:, chunk]] = -1.0
        pos = np.argmax(edges, axis=0)
        return edges[pos, np.arange(chunk.size)], pos

    def _per_feature(self, feats: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        WY = self.W * self.Y
        total = WY.sum(axis=0)
        n, K = WY.shape
        step = max(1, _CHUNK_ELEMENTS // max(1, n * K))
        parts = [self._best_positions(feats[lo : lo + step], WY, total) for lo in range(0, feats.size, step)]
        return np.concatenate([e for e, _ in parts]), np.concatenate([p for _, p in parts]), WY, total

    def feature_edges(self) -> np.ndarray:
        """Edge of the best stump on every feature (0 for features without a threshold)."""
        edges = self._per_feature(np.arange(self.n_features))[0]
        return np.maximum(edges, 0.0)

    def search(self, features: Sequence[int] | np.ndarray | None = None) -> Stump:
        """The stump of maximal edge among the features ``features`` (all when ``None``).

        Ties go to the first feature listed, then to the lowest threshold.
        """
        feats = np.arange(self.n_features) if features is None else np.asarray(features, dtype=np.int64)
        edges, positions, WY, total = self._per_feature(feats)
        best = int(np.argmax(edges))
        feature, p = int(feats[best]), int(positions[best])
        evaluations = int(self.n_thresholds[feats].sum())
        if edges[best] < 0.0:  # no feature in the set has two distinct values
            return Stump(feature, float("inf"), np.ones(WY.shape[1]), 0.0, evaluations)
        gamma = total - 2.0 * WY[self.order[: p + 1, feature]].sum(axis=0)
        threshold = 0.5 * (self.sorted_X[p, feature] + self.sorted_X[p + 1, feature])
        votes = np.where(gamma > 0.0, 1.0, -1.0)
        return Stump(feature, float(threshold), votes, float(np.abs(gamma).sum()), evaluations)

    def update(self, stump: Stump, a: float) -> float:
        """Reweight with ``W_il <- W_il exp(-a v_l phi(x_i) Y_il) / Z`` and return ``Z`` (§7.1).

        With ``a = alpha(edge, 0)``, ``Z = sqrt(1 - edge^2)``.
        """
        margin = stump.phi(self.X)[:, None] * stump.votes[None, :] * self.Y
        W = self.W * np.exp(-a * margin)
        Z = float(W.sum())
        self.W = W / Z
        return Z


class StumpEnsemble:
    """The strong classifier ``f_l(x) = sum_t alpha_t v_{t,l} phi_t(x)`` as four flat arrays."""

    def __init__(
        self, features: np.ndarray, thresholds: np.ndarray, alphas: np.ndarray, votes: np.ndarray
    ) -> None:
        self.features = features
        self.thresholds = thresholds
        self.alphas = alphas
        self.votes = votes

    @classmethod
    def from_stumps(cls, stumps: Sequence[tuple[Stump, float]], n_labels: int) -> StumpEnsemble:
        """Collect ``(stump, alpha)`` pairs."""
        return cls(
            np.array([s.feature for s, _ in stumps], dtype=np.int64),
            np.array([s.threshold for s, _ in stumps], dtype=np.float64),
            np.array([a for _, a in stumps], dtype=np.float64),
            np.array([s.votes for s, _ in stumps], dtype=np.float64).reshape(len(stumps), n_labels),
        )

    def scores(self, X: np.ndarray) -> np.ndarray:
        """``f(X)``, shape (n, K)."""
        phi = np.where(X[:, self.features] > self.thresholds, 1.0, -1.0)
        return (phi * self.alphas) @ self.votes
