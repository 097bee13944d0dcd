"""Hoeffding trees (VFDT, Domingos & Hulten 2000) for weighted examples, many trees in numpy tables.

The weak learner of Zhang, Jung, Tewari (AISTATS 2019), as ALGORITHMS.md §2.8 describes the port
the authors used: information-gain splits with range ``R = log2(#classes at the leaf)``, Hoeffding
bound ``eps = sqrt(R^2 ln(1/delta) / (2 n))`` with ``n`` the leaf's weight, split when the best gain
beats the second best (or "no split") by ``eps`` or when ``eps < tie``, evaluated every ``grace``
units of weight; a candidate split needs more than 1% of the leaf weight on both sides; leaves
predict the weighted class distribution plus a pseudo-count of 1 per class.

Features are numeric with Gaussian class-conditional estimators (weighted Welford) and 10 candidate
thresholds evenly spaced inside the leaf's observed range. Features whose values so far were all 0
or 1 (the one-hot encoded attributes of car and nursery) are split at 0.5 with exact branch
weights, which is the multiway nominal split of the reference for a binary attribute.

A :class:`HoeffdingForest` holds ``N`` independent trees: node tables with a leading tree axis
(padded to the largest tree: a node is a few numbers), and one pool of leaf rows shared by all
trees (a leaf holds ``k x d`` Gaussian statistics, so leaves are not padded: the pool grows with the
total number of leaves, not with N times the largest tree). Routing, prediction and the statistics
update of all trees are single numpy operations; only split evaluation (every ``grace`` weight)
runs per tree. The state is a set of numpy arrays (:class:`~service.learners.base.Stateful` with
growable tables), so a forest saves without pickle and reloads bit-identically mid-growth.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr

from service.learners.base import Stateful

__all__ = ["N_CANDIDATES", "HoeffdingForest", "draw_tree_hyperparameters"]

N_CANDIDATES = 10  # candidate thresholds per numeric feature (ALGORITHMS.md §2.8)
MIN_BRANCH_FRACTION = 0.01


def draw_tree_hyperparameters(
    rng: np.random.Generator,
    n_trees: int,
    grace: tuple[float, float],
    tie: tuple[float, float],
    confidence: tuple[float, float],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-tree hyperparameters as the seed-001 experiments drew them (ALGORITHMS.md §2.10).

    ``grace ~ U[grace]``; ``tie`` and the split confidence ``delta`` are log-uniform on their
    ranges (``10^U[log10 lo, log10 hi]``). Returns ``(grace, tie, delta)``, each of shape (n_trees,).
    """
    g = rng.uniform(grace[0], grace[1], n_trees)
    t = 10.0 ** rng.uniform(np.log10(tie[0]), np.log10(tie[1]), n_trees)
    d = 10.0 ** rng.uniform(np.log10(confidence[0]), np.log10(confidence[1]), n_trees)
    return g, t, d


def _entropy(w: np.ndarray, axis: int = 0) -> np.ndarray:
    """Entropy in bits of the (unnormalised) distributions ``w`` along ``axis``."""
    tot = w.sum(axis=axis, keepdims=True)
    p = np.divide(w, tot, out=np.zeros_like(w), where=tot > 0)
    logp = np.log2(p, out=np.zeros_like(p), where=p > 0)
    return -(p * logp).sum(axis=axis)


class HoeffdingForest(Stateful):
    """``N`` independent multiclass Hoeffding trees that see the same ``x`` with per-tree (label, weight).

    Parameters
    ----------
    n_features, n_classes : int
        Input dimension d and number of classes k (2 for the binary form).
    grace, tie, delta : ndarray of shape (N,)
        Per-tree grace period (in units of weight), tie threshold and split confidence.

    Attributes
    ----------
    feature_, threshold_, child_, slot_ : node tables, shape (N, nodes[, 2])
        Split feature (-1 at a leaf), threshold (``x[f] <= threshold`` goes left), children, and the
        row of a leaf in the leaf pool (-1 at internal nodes).
    n_rows_ : int
        Rows of the leaf pool in use (the leaves of all trees; tree ``i``'s root starts at row ``i``).
    class_w_ : ndarray of shape (rows, k)
        Class weights a leaf predicts from (inherited estimate at creation plus observed weight).
    stat_w_, mean_, m2_ : leaf statistics, shapes (rows, k) and (rows, k, d)
        Weight per class, weighted mean and sum of squared deviations per class and feature.
    lo_, hi_ : ndarray of shape (rows, d)
        Observed feature range at the leaf (candidate thresholds lie inside it).
    seen_, evaluated_ : ndarray of shape (rows,)
        Weight seen by the leaf, and at its last split evaluation.
    binary_ : ndarray of shape (d,), bool
        Whether every value seen so far of the feature was 0 or 1.
    """

    _growable = frozenset(
        {"feature_", "threshold_", "child_", "slot_", "class_w_", "stat_w_", "mean_", "m2_", "lo_", "hi_"}
        | {"seen_", "evaluated_"}
    )

    def __init__(
        self, n_features: int, n_classes: int, grace: np.ndarray, tie: np.ndarray, delta: np.ndarray
    ) -> None:
        n = grace.size
        self.d, self.k, self.n = n_features, n_classes, n
        self.grace_ = np.asarray(grace, dtype=np.float64).copy()
        self.tie_ = np.asarray(tie, dtype=np.float64).copy()
        self.delta_ = np.asarray(delta, dtype=np.float64).copy()
        nodes, rows = 4, 2 * n
        self.feature_ = np.full((n, nodes), -1, dtype=np.int64)
        self.threshold_ = np.zeros((n, nodes))
        self.child_ = np.zeros((n, nodes, 2), dtype=np.int64)
        self.slot_ = np.full((n, nodes), -1, dtype=np.int64)
        self.slot_[:, 0] = np.arange(n)
        self.n_nodes_ = np.ones(n, dtype=np.int64)
        self.n_leaves_ = np.ones(n, dtype=np.int64)
        self.n_rows_ = n
        self.class_w_ = np.zeros((rows, n_classes))
        self.stat_w_ = np.zeros((rows, n_classes))
        self.mean_ = np.zeros((rows, n_classes, n_features))
        self.m2_ = np.zeros((rows, n_classes, n_features))
        self.lo_ = np.zeros((rows, n_features))
        self.hi_ = np.zeros((rows, n_features))
        self.seen_ = np.zeros(rows)
        self.evaluated_ = np.zeros(rows)
        self.binary_ = np.ones(n_features, dtype=bool)
        self._trees = np.arange(n)

    # -- prediction ------------------------------------------------------------------------------

    def route(self, x: np.ndarray, trees: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Leaf node and leaf-pool row of ``x`` in every tree (or in ``trees``): two int arrays."""
        cap = self.feature_.shape[1]
        base = (self._trees if trees is None else trees) * cap
        feature, threshold = self.feature_.reshape(-1), self.threshold_.reshape(-1)
        child = self.child_.reshape(-1)
        g = base.copy()  # flat node ids
        f = feature[g]
        inner = f >= 0
        while inner.any():
            right = x[f] > threshold[g]  # f = -1 at leaves reads x[-1]; masked below
            g = np.where(inner, child[2 * g + right] + base, g)
            f = feature[g]
            inner = f >= 0
        return g - base, self.slot_.reshape(-1)[g]

    def distribution(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Class weights each tree predicts for ``x`` (observed weight + 1 per class), shape (N, k),
        and the leaf node of ``x`` in each tree (to pass back to :meth:`update`)."""
        nodes, slots = self.route(x)
        return self.class_w_[slots] + 1.0, nodes

    # -- learning --------------------------------------------------------------------------------

    def update(
        self,
        x: np.ndarray,
        labels: np.ndarray,
        weights: np.ndarray,
        nodes: np.ndarray | None = None,
        trees: np.ndarray | None = None,
    ) -> None:
        """Tree ``i`` learns the example ``(x, labels[i])`` with weight ``weights[i] > 0``.

        ``nodes`` are the leaves of ``x`` from :meth:`distribution`, valid while no tree has split
        since (the caller checks :attr:`n_nodes_`); routing is redone when they are not given.
        ``trees`` restricts the update to those trees (``labels`` and ``weights`` then follow it).
        """
        tr = self._trees if trees is None else trees
        if nodes is None:
            nodes, slots = self.route(x, trees)
        else:
            slots = self.slot_[tr, nodes]
        k = self.k
        leaf = slots  # leaf-pool rows
        row = leaf * k + labels  # flat (leaf, class) ids
        w = np.asarray(weights, dtype=np.float64)
        stat_w, class_w = self.stat_w_.reshape(-1), self.class_w_.reshape(-1)
        mean, m2 = self.mean_.reshape(-1, self.d), self.m2_.reshape(-1, self.d)
        Wn = stat_w[row] + w
        old = mean[row]
        delta = x - old
        new = old + (w / Wn)[:, None] * delta
        m2[row] += w[:, None] * delta * (x - new)  # weighted Welford
        mean[row] = new
        stat_w[row] = Wn
        class_w[row] += w
        lo, hi = self.lo_.reshape(-1, self.d), self.hi_.reshape(-1, self.d)
        seen, evaluated = self.seen_.reshape(-1), self.evaluated_.reshape(-1)
        first = (seen[leaf] == 0)[:, None]
        lo[leaf] = np.where(first, x, np.minimum(lo[leaf], x))
        hi[leaf] = np.where(first, x, np.maximum(hi[leaf], x))
        seen[leaf] += w
        self.binary_ &= (x == 0.0) | (x == 1.0)
        due = np.flatnonzero(seen[leaf] - evaluated[leaf] >= self.grace_[tr])
        if due.size:
            self._try_splits(tr[due], nodes[due], slots[due])

    def _try_splits(self, trees: np.ndarray, nodes: np.ndarray, slots: np.ndarray) -> None:
        """Evaluate the best split of leaf ``slots[b]`` of tree ``trees[b]``, all at once; split where due."""
        self.evaluated_[slots] = self.seen_[slots]
        # As MOA and its ports (the reference's VFDT, river): purity, the pre-split entropy, the
        # range R and the n of the Hoeffding bound use the leaf's class distribution including the
        # estimate it inherited at creation; the branch distributions use the statistics observed since.
        pre = self.class_w_[slots]  # (B, k)
        present = (pre > 0).sum(axis=1)
        keep = present >= 2  # a pure leaf is not split
        if not keep.any():
            return
        trees, nodes, slots, pre, present = trees[keep], nodes[keep], slots[keep], pre[keep], present[keep]
        cw = self.stat_w_[slots]
        lo, hi = self.lo_[slots], self.hi_[slots]  # (B, d)
        n_cand = 1 if self.binary_.all() else N_CANDIDATES  # 0/1 features have one distinct split
        frac = np.arange(1, n_cand + 1) / (n_cand + 1)
        theta = lo[..., None] + (hi - lo)[..., None] * frac  # (B, d, C)
        theta = np.where(self.binary_[:, None], 0.5, theta)  # 0/1 features: the nominal split
        mean = self.mean_[slots]  # (B, k, d)
        var = np.maximum(self.m2_[slots], 0.0) / np.where(cw > 0, cw, 1.0)[..., None]
        std = np.sqrt(var)[..., None]
        z = (theta[:, None] - mean[..., None]) / np.where(std > 0, std, 1.0)
        below = np.where(std > 0, ndtr(z), (theta[:, None] >= mean[..., None]).astype(float))
        below = np.where(self.binary_[:, None], (1.0 - mean)[..., None], below)
        left = cw[:, :, None, None] * np.clip(below, 0.0, 1.0)  # (B, k, d, C)
        right = cw[:, :, None, None] - left
        wl, wr = left.sum(axis=1), right.sum(axis=1)  # (B, d, C)
        total = cw.sum(axis=1)[:, None, None]
        split_entropy = (wl * _entropy(left, axis=1) + wr * _entropy(right, axis=1)) / total
        gain = _entropy(pre, axis=1)[:, None, None] - split_entropy
        ok = (np.minimum(wl, wr) > MIN_BRANCH_FRACTION * total) & (hi > lo)[..., None]
        gain = np.where(ok, gain, -np.inf)
        per_feature = gain.max(axis=2)  # (B, d)
        top2 = -np.sort(-per_feature, axis=1)[:, :2]
        best = top2[:, 0]
        second = np.maximum(top2[:, 1] if top2.shape[1] > 1 else -np.inf, 0.0)  # or no split
        r = np.log2(present)
        eps = np.sqrt(r * r * np.log(1.0 / self.delta_[trees]) / (2.0 * pre.sum(axis=1)))
        go = np.isfinite(best) & (best > 0.0) & ((best - second > eps) | (eps < self.tie_[trees]))
        for b in np.flatnonzero(go):
            f = int(np.argmax(per_feature[b]))
            c = int(np.argmax(gain[b, f]))
            self._split(
                int(trees[b]),
                int(nodes[b]),
                int(slots[b]),
                f,
                float(theta[b, f, c]),
                left[b, :, f, c],
                right[b, :, f, c],
            )

    def _split(
        self, i: int, node: int, slot: int, f: int, threshold: float, left: np.ndarray, right: np.ndarray
    ) -> None:
        a = int(self.n_nodes_[i])
        if a + 2 > self.feature_.shape[1]:
            self._grow_nodes()
        if self.n_rows_ == self.class_w_.shape[0]:
            self._grow_rows()
        new_slot = int(self.n_rows_)
        self.feature_[i, node] = f
        self.threshold_[i, node] = threshold
        self.child_[i, node] = (a, a + 1)
        self.slot_[i, node] = -1
        self.slot_[i, a : a + 2] = (slot, new_slot)
        self.n_nodes_[i] += 2
        self.n_leaves_[i] += 1
        self.n_rows_ += 1
        for s, dist in ((slot, left), (new_slot, right)):
            self.class_w_[s] = dist
            for table in (
                self.stat_w_,
                self.mean_,
                self.m2_,
                self.lo_,
                self.hi_,
                self.seen_,
                self.evaluated_,
            ):
                table[s] = 0.0

    @staticmethod
    def _double(a: np.ndarray, axis: int, fill: float) -> np.ndarray:
        pad = [(0, 0)] * a.ndim
        pad[axis] = (0, a.shape[axis])
        return np.pad(a, pad, constant_values=fill)

    def _grow_nodes(self) -> None:
        """Double the node capacity of every tree."""
        self.feature_ = self._double(self.feature_, 1, -1)
        self.slot_ = self._double(self.slot_, 1, -1)
        self.threshold_ = self._double(self.threshold_, 1, 0.0)
        self.child_ = self._double(self.child_, 1, 0)

    def _grow_rows(self) -> None:
        """Double the leaf pool."""
        for name in ("class_w_", "stat_w_", "mean_", "m2_", "lo_", "hi_", "seen_", "evaluated_"):
            setattr(self, name, self._double(getattr(self, name), 0, 0.0))
