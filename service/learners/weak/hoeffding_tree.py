"""Hoeffding trees (VFDT, Domingos & Hulten 2000) for weighted examples, many trees in compiled tables.

The weak learner of Zhang, Jung, Tewari (AISTATS 2019), as ALGORITHMS.md §2.8 describes the port
the authors used: information-gain splits with range ``R = log2(#classes at the leaf)``, Hoeffding
bound ``eps = sqrt(R^2 ln(1/delta) / (2 n))`` with ``n`` the leaf's weight, split when the best gain
beats the second best (or "no split") by ``eps`` or when ``eps < tie``, evaluated every ``grace``
units of weight; a candidate split needs more than 1% of the leaf weight on both sides; leaves
predict the weighted class distribution plus a pseudo-count of 1 per class.

Features are numeric with Gaussian class-conditional estimators (from weighted sums of ``x`` and
``x^2``; the normal CDF is ``erfc(-z / sqrt 2) / 2``) and 10 candidate thresholds evenly spaced
inside the leaf's observed range. Features whose values so far were all 0 or 1 (the one-hot encoded
attributes of car and nursery) are split at 0.5 with exact branch weights, which is the multiway
nominal split of the reference for a binary attribute. A class whose values of a feature at the
leaf are all equal is a point mass there (variance exactly 0).

A :class:`HoeffdingForest` holds ``N`` independent trees: node tables with a leading tree axis
(padded to the largest tree: a node is a few numbers) and one pool of leaf rows shared by all trees.
A leaf's feature statistics are sparse: one entry per (class, feature) with a non-zero value seen
at the leaf (:mod:`service.learners.weak.forest_kernels`), so a leaf costs memory in proportion to
what it has seen, not ``k x d``, and input may be a :class:`~service.features.SparseVector` (an
update is O(nnz) per tree; a dense row is the same vector and gives the same trees). Routing,
prediction, the update and the split search are compiled loops over those arrays. The state is a
set of numpy arrays (:class:`~service.learners.base.Stateful` with growable tables), so a forest
saves without pickle and reloads bit-identically mid-growth.

Memory is bounded as in VFDT (Domingos & Hulten 2000, section 3; MOA's and river's ``max_size``):
the feature statistics may take :data:`MAX_ENTRY_BYTES`. When they would outgrow it, the most
promising leaves keep (or regain, empty) their statistics, in order of promise (a leaf's weight
minus the weight of its majority class: what refining it could correct) until they hold half of the
bound, and the others drop theirs: such a leaf still counts its class weights, so it predicts as
before, but it no longer splits. Streams that stay within the bound never meet this rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from service.features import SparseVector
from service.learners.base import Stateful
from service.learners.weak.forest_kernels import (
    ADAPTIVE,
    BY_EXAMPLES,
    GROW_NODES,
    GROW_ROWS,
    compact,
    forest_distribution,
    forest_update,
)

__all__ = ["HoeffdingForest", "draw_tree_hyperparameters", "operands", "upgrade_entry_keys"]

_NONE_F = np.zeros(0)
_NONE_I = np.zeros(0, dtype=np.int64)
#: Growth factor of the entry pool (a new pool is at least this much larger).
POOL_GROWTH = 1.25
#: Bound on the leaves' feature statistics (the entry pool) of one forest, in bytes.
MAX_ENTRY_BYTES = 128 * 2**20
ENTRY_BYTES = 8 + 4 + 4 * 8  # key, count, moments


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


def operands(x: np.ndarray | SparseVector) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dense row, idx, val)`` for the kernels: a dense row with empty ``idx, val``, or the reverse."""
    if isinstance(x, SparseVector):
        return _NONE_F, x.idx, x.val
    return np.asarray(x, dtype=np.float64), _NONE_I, _NONE_F


class HoeffdingForest(Stateful):
    """``N`` independent multiclass Hoeffding trees that see the same ``x`` with per-tree (label, weight).

    Parameters
    ----------
    n_features, n_classes : int
        Input dimension d and number of classes k (2 for the binary form).
    grace, tie, delta : ndarray of shape (N,)
        Per-tree grace period (in units of weight), tie threshold and split confidence.
    adaptive : bool, default False
        After a failed split evaluation, wait until the Hoeffding bound can pass (at least ``grace``)
        instead of ``grace``: the *nmin adaptation* of García-Martín, Lavesson, Grahn, Casalicchio
        and Boeva (2018); ours, off in the papers' setting
        (:func:`~service.learners.weak.forest_kernels._try_split`).
    by_examples : bool, default False
        Count the grace period in examples a leaf has seen instead of their weight (ours, off in the
        papers' setting). Under importance weights a leaf's weight grows by up to ``(k - 1) / rho``
        per example, so a grace period in weight lets a leaf search for a split at almost every
        example.
    subspace : float, default 1.0
        Share of the features a leaf keeps statistics of (ours; 1: all, the papers' setting): each
        leaf draws its own, by a hash of (tree, node, feature)
        (:func:`~service.learners.weak.forest_kernels.leaf_keeps`), so an update and a split search
        cost that share of the full ones on wide input.

    Attributes
    ----------
    feature_, threshold_, child_, slot_ : node tables, shape (N, nodes[, 2])
        Split feature (-1 at a leaf), threshold (``x[f] <= threshold`` goes left), children, and the
        row of a leaf in the leaf pool (-1 at internal nodes).
    n_nodes_, n_leaves_ : ndarray of shape (N,)
        Nodes and leaves per tree.
    class_w_ : ndarray of shape (rows, k)
        Class weights a leaf predicts from (inherited estimate at creation plus observed weight).
    stat_w_, n_class_ : ndarray of shape (rows, k)
        Weight and number of examples per class observed since the leaf's creation.
    seen_, evaluated_ : ndarray of shape (rows,)
        Weight (examples with ``by_examples``) seen by the leaf, and at its last split evaluation
        (plus the extra wait of ``adaptive``: the next evaluation comes at ``evaluated_ + grace``).
    active_ : ndarray of shape (rows,), bool
        Whether the leaf keeps feature statistics (see the memory bound above).
    segment_ : ndarray of shape (rows, 3), int
        ``start, used, capacity`` of the leaf's entries in the entry pool.
    key_, count_, moments_ : the entry pool, shapes (entries,) and (entries, 4)
        ``class * d + feature`` of an entry (increasing within a leaf's segment: one run per class),
        the number of non-zero values it saw, and their weighted sum, weighted sum of squares,
        minimum and maximum. Before schema 2 of the learners that hold a forest the key was
        ``feature * k + class`` (:func:`upgrade_entry_keys`).
    binary_ : ndarray of shape (d,), bool
        Whether every value seen so far of the feature was 0 or 1.
    pool_ : ndarray of shape (3,), int
        Leaf rows in use (tree ``i``'s root starts at row ``i``), end of the used part of the entry
        pool, and entries freed inside it.
    """

    _growable = frozenset(
        {"feature_", "threshold_", "child_", "slot_", "class_w_", "stat_w_", "n_class_", "seen_"}
        | {"evaluated_", "active_", "segment_", "key_", "count_", "moments_"}
    )

    def __init__(
        self,
        n_features: int,
        n_classes: int,
        grace: np.ndarray,
        tie: np.ndarray,
        delta: np.ndarray,
        adaptive: bool = False,
        by_examples: bool = False,
        subspace: float = 1.0,
    ) -> None:
        n = grace.size
        self.d, self.k, self.n = n_features, n_classes, n
        self.adaptive = bool(adaptive)
        self.by_examples = bool(by_examples)
        if not 0.0 < subspace <= 1.0:
            raise ValueError(f"subspace must lie in (0, 1], got {subspace}")
        self.subspace = float(subspace)
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
        self.class_w_ = np.zeros((rows, n_classes))
        self.stat_w_ = np.zeros((rows, n_classes))
        self.n_class_ = np.zeros((rows, n_classes), dtype=np.int64)
        self.seen_ = np.zeros(rows)
        self.evaluated_ = np.zeros(rows)
        self.active_ = np.ones(rows, dtype=bool)
        self.segment_ = np.zeros((rows, 3), dtype=np.int64)
        self.key_ = np.zeros(0, dtype=np.int64)
        self.count_ = np.zeros(0, dtype=np.int32)
        self.moments_ = np.zeros((0, 4))
        self.binary_ = np.ones(n_features, dtype=bool)
        self.pool_ = np.array([n, 0, 0], dtype=np.int64)
        self._trees = np.arange(n)

    @property
    def schedule(self) -> int:
        """The split schedule's flags as the kernels take them (``ADAPTIVE``, ``BY_EXAMPLES``)."""
        return (ADAPTIVE if self.adaptive else 0) | (BY_EXAMPLES if self.by_examples else 0)

    @property
    def trees(self) -> np.ndarray:
        """Every tree's index (the ``trees`` argument of an update of all of them)."""
        return self._trees

    @property
    def n_rows_(self) -> int:
        """Rows of the leaf pool in use (the leaves of all trees)."""
        return int(self.pool_[0])

    # -- prediction ------------------------------------------------------------------------------

    def distribution(self, x: np.ndarray | SparseVector) -> tuple[np.ndarray, np.ndarray]:
        """Class weights each tree predicts for ``x`` (observed weight + 1 per class), shape (N, k),
        and the leaf node of ``x`` in each tree (to pass back to :meth:`update`)."""
        return forest_distribution(
            self.feature_, self.threshold_, self.child_, self.slot_, self.class_w_, *operands(x)
        )

    def routing(self, x: np.ndarray | SparseVector) -> tuple[np.ndarray, ...]:
        """The arguments of :func:`forest_distribution` for ``x``: the routing tables, the class
        weights and ``x`` as the kernels take it (for compiled callers that route in their call)."""
        return (self.feature_, self.threshold_, self.child_, self.slot_, self.class_w_, *operands(x))

    # -- learning --------------------------------------------------------------------------------

    def update(
        self,
        x: np.ndarray | SparseVector,
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
        tr = self._trees if trees is None else np.asarray(trees, dtype=np.int64)
        labels = np.asarray(labels, dtype=np.int64)
        weights = np.asarray(weights, dtype=np.float64)
        nodes = _NONE_I if nodes is None else np.asarray(nodes, dtype=np.int64)
        self.resume(operands(x), tr, labels, weights, nodes, 0, 0)

    def arrays(self) -> tuple[np.ndarray, ...]:
        """The forest's arrays as :func:`forest_update` takes them (``forest_kernels.FOREST``)."""
        return (
            self.feature_, self.threshold_, self.child_, self.slot_, self.n_nodes_, self.n_leaves_,
            self.grace_, self.tie_, self.delta_, self.class_w_, self.stat_w_, self.n_class_,
            self.seen_, self.evaluated_, self.active_, self.segment_, self.key_, self.count_,
            self.moments_, self.binary_, self.pool_,
        )  # fmt: skip

    def resume(
        self,
        xs: tuple[np.ndarray, np.ndarray, np.ndarray],
        trees: np.ndarray,
        labels: np.ndarray,
        weights: np.ndarray,
        nodes: np.ndarray,
        start: int,
        lack: int,
    ) -> None:
        """Update trees ``trees[start:]`` (see :meth:`update`; ``xs`` is :func:`operands` of ``x``),
        first growing the arrays by ``lack`` (what :func:`forest_update` last asked for; 0: nothing).

        A compiled caller that updates the forest in its own call (``booster_kernels``) hands an
        update that stopped for room over to here."""
        while start >= 0:
            if lack == GROW_NODES:
                self._grow_nodes()
            elif lack == GROW_ROWS:
                self._grow_rows()
            elif lack:
                self._make_room(lack)
            start, lack = forest_update(
                *self.arrays(), *xs, trees, labels, weights, nodes, start, self.schedule, self.subspace
            )  # fmt: skip

    @staticmethod
    def _pad(a: np.ndarray, axis: int, size: int, fill: float) -> np.ndarray:
        pad = [(0, 0)] * a.ndim
        pad[axis] = (0, size - a.shape[axis])
        return np.pad(a, pad, constant_values=fill)

    def _grow_nodes(self) -> None:
        """Double the node capacity of every tree."""
        size = 2 * self.feature_.shape[1]
        self.feature_ = self._pad(self.feature_, 1, size, -1)
        self.slot_ = self._pad(self.slot_, 1, size, -1)
        self.threshold_ = self._pad(self.threshold_, 1, size, 0.0)
        self.child_ = self._pad(self.child_, 1, size, 0)

    def _grow_rows(self) -> None:
        """Double the leaf pool."""
        size = 2 * self.class_w_.shape[0]
        for name in ("class_w_", "stat_w_", "n_class_", "seen_", "evaluated_", "segment_"):
            setattr(self, name, self._pad(getattr(self, name), 0, size, 0))
        self.active_ = self._pad(self.active_, 0, size, True)

    def _make_room(self, lack: int) -> None:
        """Room for ``lack`` entries past the end of the pool: grow it by :data:`POOL_GROWTH`, up to
        :data:`MAX_ENTRY_BYTES`; at the bound, drop the least promising leaves' statistics first."""
        bound = MAX_ENTRY_BYTES // ENTRY_BYTES
        if self.pool_[1] + lack > bound:
            self._keep_promising(bound // 2)
            if self.pool_[1] + lack <= self.key_.size:
                return
        size = max(min(int(POOL_GROWTH * self.key_.size), bound), int(self.pool_[1]) + lack, 1024)
        for name in ("key_", "count_", "moments_"):
            setattr(self, name, self._pad(getattr(self, name), 0, size, 0))

    def _keep_promising(self, entries: int) -> None:
        """Statistics for the leaves of highest promise (ties: lower row) until they hold ``entries``;
        the others drop theirs, and their counts since creation, and stop splitting."""
        rows = self.n_rows_
        w = self.class_w_[:rows]
        order = np.lexsort((np.arange(rows), w.max(axis=1) - w.sum(axis=1)))  # promise, decreasing
        held = np.where(self.active_[:rows], self.segment_[:rows, 1], 0)[order]
        keep = np.zeros(rows, dtype=bool)
        keep[order[np.cumsum(held) <= entries]] = True
        drop = np.flatnonzero(self.active_[:rows] & ~keep)
        self.pool_[2] += self.segment_[drop, 2].sum()
        for table in (self.segment_, self.stat_w_, self.n_class_, self.seen_, self.evaluated_):
            table[drop] = 0
        self.active_[:rows] = keep
        compact(self.segment_, self.key_, self.count_, self.moments_, self.pool_)


def upgrade_entry_keys(state: dict[str, Any], prefix: str, n_features: int, n_classes: int) -> None:
    """Rewrite, in ``state``, the entry pool of the forest stored under ``prefix`` from the key
    ``feature * k + class`` (increasing within a leaf's segment) to ``class * d + feature``.

    Each segment's entries are re-sorted within the segment: positions, capacities and the pool's
    counters stay, so the forest goes on exactly as it would have (the sums are the same numbers).
    """
    key = np.asarray(state[prefix + "key_"], dtype=np.int64).copy()
    count = np.asarray(state[prefix + "count_"]).copy()
    moments = np.asarray(state[prefix + "moments_"]).copy()
    segment = np.asarray(state[prefix + "segment_"])
    for start, used in segment[segment[:, 1] > 0, :2]:
        part = slice(int(start), int(start + used))
        old = key[part]
        new = (old % n_classes) * n_features + old // n_classes
        order = np.argsort(new, kind="stable")
        key[part], count[part], moments[part] = new[order], count[part][order], moments[part][order]
    state[prefix + "key_"], state[prefix + "count_"], state[prefix + "moments_"] = key, count, moments
