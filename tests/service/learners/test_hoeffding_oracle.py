"""The compiled Hoeffding forest against a textbook VFDT written here from the rules of its docstring.

The textbook tree keeps every example a leaf has seen since its creation and recomputes everything
at each split evaluation the obvious way: two-pass weighted means and variances, the observed range
from the values themselves, entropies with ``np.log2``, every candidate of every feature. The forest
keeps sums, skips candidates that cannot win and works in nats, so gains differ in the last bits:
the trees (features, thresholds) must be identical and the predictions equal to rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytest

from service.features import Featuriser
from service.learners.weak.forest_kernels import leaf_keeps
from service.learners.weak.hoeffding_tree import HoeffdingForest
from service.serial import encode

N_CANDIDATES = 10
MIN_BRANCH_FRACTION = 0.01


@dataclass
class Leaf:
    prior: np.ndarray  # class weights inherited at creation
    xs: list[np.ndarray] = field(default_factory=list)
    ys: list[int] = field(default_factory=list)
    ws: list[float] = field(default_factory=list)
    evaluated: float = 0.0
    node: int = 0  # the forest's node number of this leaf (its features under a subspace)

    @property
    def class_w(self) -> np.ndarray:
        return self.prior + np.bincount(self.ys, self.ws, minlength=self.prior.size)


@dataclass
class Split:
    feature: int
    threshold: float
    left: Leaf | Split
    right: Leaf | Split


def entropy(w: np.ndarray) -> float:
    p = w[w > 0] / w.sum()
    return float(-(p * np.log2(p)).sum())


class TextbookTree:
    """One VFDT tree: the rules of ``service/learners/weak/hoeffding_tree.py``'s docstring, slowly."""

    def __init__(
        self,
        d: int,
        k: int,
        grace: float,
        tie: float,
        delta: float,
        adaptive: bool = False,
        by_examples: bool = False,
        subspace: float = 1.0,
        index: int = 0,
    ) -> None:
        self.d, self.k, self.grace, self.tie, self.delta = d, k, grace, tie, delta
        self.adaptive = adaptive  # nmin adaptation (García-Martín et al. 2018) after a failed evaluation
        self.by_examples = by_examples  # the grace period counts examples, not weight (ours)
        self.subspace, self.index = subspace, index  # a leaf's features: leaf_keeps(index, node, ...)
        self.evaluations = 0
        self.nodes = 1
        self.root: Leaf | Split = Leaf(np.zeros(k))

    def leaf(self, x: np.ndarray) -> Leaf:
        node = self.root
        while isinstance(node, Split):
            node = node.right if x[node.feature] > node.threshold else node.left
        return node

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.leaf(x).class_w + 1.0

    def update(self, x: np.ndarray, y: int, w: float, binary: np.ndarray) -> None:
        leaf = self.leaf(x)
        leaf.xs.append(x)
        leaf.ys.append(y)
        leaf.ws.append(w)
        seen = len(leaf.ws) if self.by_examples else sum(leaf.ws)
        if seen - leaf.evaluated >= self.grace:
            self.evaluate(leaf, binary)

    def left_weights(self, leaf: Leaf, f: int, theta: float, binary: bool) -> np.ndarray:
        """Left-branch weight per class: exact for 0/1 features, else a point mass where a class's
        values are all equal, else its Gaussian (weighted mean and variance)."""
        X, y, w = np.array(leaf.xs), np.array(leaf.ys), np.array(leaf.ws)
        left = np.zeros(self.k)
        for c in np.unique(y):
            v, wc = X[y == c, f], w[y == c]
            if binary:
                left[c] = wc[v == 0].sum()
            elif np.all(v == v[0]):
                left[c] = wc.sum() if theta >= v[0] else 0.0
            else:
                mean = np.average(v, weights=wc)
                sd = math.sqrt(np.average((v - mean) ** 2, weights=wc))
                left[c] = wc.sum() * 0.5 * math.erfc(-(theta - mean) / sd / math.sqrt(2.0))
        return left

    def evaluate(self, leaf: Leaf, binary: np.ndarray) -> None:
        self.evaluations += 1
        leaf.evaluated = len(leaf.ws) if self.by_examples else sum(leaf.ws)
        keeps = leaf_keeps(self.index, leaf.node, np.arange(self.d), self.subspace)
        pre = leaf.class_w
        present = int((pre > 0).sum())
        if present < 2:
            return
        X = np.array(leaf.xs)
        observed = np.bincount(leaf.ys, leaf.ws, minlength=self.k)
        total = observed.sum()
        per_feature = np.full(self.d, -np.inf)
        where = np.zeros(self.d)
        for f in range(self.d):
            lo, hi = X[:, f].min(), X[:, f].max()
            if not hi > lo or not keeps[f]:  # a leaf keeps no statistics of a feature outside its subspace
                continue
            thetas = (
                [0.5] if binary[f] else lo + (hi - lo) * (np.arange(1, N_CANDIDATES + 1) / (N_CANDIDATES + 1))
            )
            for theta in thetas:
                left = self.left_weights(leaf, f, theta, bool(binary[f]))
                right = observed - left
                wl, wr = left.sum(), right.sum()
                if min(wl, wr) <= MIN_BRANCH_FRACTION * total:
                    continue
                gain = entropy(pre) - (wl * entropy(left) + wr * entropy(right)) / total
                if gain > per_feature[f]:
                    per_feature[f], where[f] = gain, theta
        ranked = np.sort(per_feature)[::-1]
        best, second = ranked[0], max(ranked[1], 0.0)
        r = math.log2(present)
        eps = math.sqrt(r * r * math.log(1.0 / self.delta) / (2.0 * pre.sum()))
        if best > 0 and (best - second > eps or eps < self.tie):
            f = int(np.argmax(per_feature))
            left = self.left_weights(leaf, f, where[f], bool(binary[f]))
            children = Leaf(left, node=self.nodes), Leaf(observed - left, node=self.nodes + 1)
            self.nodes += 2  # numbered as the forest numbers its nodes
            self.replace(leaf, Split(f, float(where[f]), *children))
        elif best > 0 and self.adaptive:
            # the next evaluation when the bound can pass: eps < max(best - second, tie) needs
            # n >= r^2 ln(1/delta) / (2 gap^2); wait for that much more weight, at least grace
            gap = max(best - second, self.tie)
            need = r * r * math.log(1.0 / self.delta) / (2.0 * gap * gap)
            if self.by_examples:  # the weight still needed, in examples at the leaf's mean weight
                leaf.evaluated += max(0.0, (need - pre.sum()) * len(leaf.ws) / total - self.grace)
            else:
                leaf.evaluated += max(self.grace, need - pre.sum()) - self.grace

    def replace(self, leaf: Leaf, split: Split) -> None:
        if self.root is leaf:
            self.root = split
            return
        stack = [self.root]
        while stack:
            node = stack.pop()
            if isinstance(node, Split):
                for side in ("left", "right"):
                    if getattr(node, side) is leaf:
                        setattr(node, side, split)
                        return
                    stack.append(getattr(node, side))


def textbook_shape(node: Leaf | Split) -> list[tuple[int, float]]:
    if isinstance(node, Leaf):
        return [(-1, 0.0)]
    return [(node.feature, node.threshold), *textbook_shape(node.left), *textbook_shape(node.right)]


def forest_shape(f: HoeffdingForest, i: int, node: int = 0) -> list[tuple[int, float]]:
    if f.feature_[i, node] < 0:
        return [(-1, 0.0)]
    left, right = f.child_[i, node]
    return [
        (int(f.feature_[i, node]), float(f.threshold_[i, node])),
        *forest_shape(f, i, left),
        *forest_shape(f, i, right),
    ]


def mixed_stream(seed: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gaussian, 0/1, mostly-zero and small-integer features; three classes from a noisy rule."""
    rng = np.random.default_rng(seed)
    X = np.column_stack(
        [
            rng.normal(size=n),
            rng.integers(0, 2, n).astype(float),
            np.where(rng.random(n) < 0.6, 0.0, rng.exponential(2.0, n)),
            rng.integers(0, 4, n).astype(float),
            rng.normal(3.0, 0.5, n),
        ]
    )
    score = np.column_stack([X[:, 0] + X[:, 1], X[:, 2] - 1.0, 0.7 * X[:, 3] - X[:, 0]])
    y = np.argmax(score + rng.normal(scale=0.7, size=score.shape), axis=1)
    return X, y, rng.uniform(0.5, 5.0, n)


#: split evaluations of the plain textbook trees on these streams (the run with adaptive=False)
PLAIN_EVALUATIONS = {0: 1608, 1: 1586}


@pytest.mark.parametrize(
    ("seed", "adaptive", "by_examples", "subspace"),
    [
        (0, False, False, 1.0),
        (1, False, False, 1.0),
        (0, True, False, 1.0),
        (1, True, False, 1.0),
        # the served schedule of the bandit boosters (issue 41): grace in examples, leaf subspaces
        # (not seed 1 with grace in examples: there a child's inherited class weight is 1e-14 in the
        # textbook's two-pass Gaussian and exactly 0 in the forest's, a pure leaf in one of them)
        (0, False, True, 1.0),
        (0, True, True, 1.0),
        (0, False, False, 0.6),
        (1, False, False, 0.6),
        (0, True, True, 0.6),
    ],
)
def test_compiled_forest_grows_the_textbook_trees(
    seed: int, adaptive: bool, by_examples: bool, subspace: float
) -> None:
    X, y, w = mixed_stream(seed, 1500)
    d, k = X.shape[1], 3
    grace, tie, delta = np.array([10.0, 25.0, 7.0]), np.array([0.05, 0.3, 0.5]), np.array([1e-3, 0.1, 0.3])
    if by_examples:  # the stream's weights average 2.75 per example
        grace = grace / 2.75
    forest = HoeffdingForest(d, k, grace, tie, delta, adaptive, by_examples, subspace)
    trees = [
        TextbookTree(d, k, *params, adaptive, by_examples, subspace, i)
        for i, params in enumerate(zip(grace, tie, delta, strict=True))
    ]
    binary = np.ones(d, dtype=bool)
    rotate = np.array([0, 1, 2])  # tree i learns label (y + i) mod k with weight w * (i + 1)
    for x, label, weight in zip(X, y, w, strict=True):
        labels, weights = (label + rotate) % k, weight * (rotate + 1.0)
        forest.update(x, labels, weights)
        binary &= (x == 0) | (x == 1)
        for tree, lab, wt in zip(trees, labels, weights, strict=True):
            tree.update(x, int(lab), float(wt), binary)
    shapes = [textbook_shape(tree.root) for tree in trees]
    assert min(map(len, shapes)) >= 5 and sum(map(len, shapes)) >= 60, "the stream should grow real trees"
    evaluations = sum(t.evaluations for t in trees)
    if adaptive:  # the schedule changes something: the low-tie tree skips most failing evaluations
        assert evaluations < PLAIN_EVALUATIONS[seed] - 300
    elif not by_examples and subspace == 1.0:
        assert evaluations == PLAIN_EVALUATIONS[seed]
    for i, shape in enumerate(shapes):
        assert forest_shape(forest, i) == shape
    probe = mixed_stream(seed + 100, 200)[0]
    for x in probe:
        dist, _ = forest.distribution(x)
        want = np.array([tree.predict(x) for tree in trees])
        np.testing.assert_allclose(dist, want, rtol=1e-9)
        np.testing.assert_array_equal(dist.argmax(axis=1), want.argmax(axis=1))


def test_sparse_and_dense_input_grow_identical_forests() -> None:
    """Hashed requests as SparseVectors and as dense rows: bit for bit the same state and predictions."""
    rng = np.random.default_rng(5)
    featurise = Featuriser(None, 9, 64)
    xs, ys = [], []
    for _ in range(1200):
        request = {f"s{j}": f"v{rng.integers(6)}" for j in range(6)}
        request |= {f"n{j}": float(rng.normal()) for j in range(4)} | {"flag": bool(rng.integers(2))}
        xs.append(featurise(request))
        ys.append(int(request["s0"][1:]) % 3 if request["flag"] else int(request["n0"] > 0))
    n = 4
    g = np.array([5.0, 10.0, 20.0, 8.0])
    sparse = HoeffdingForest(xs[0].dim, 3, g, np.full(n, 0.2), np.full(n, 0.05))
    dense = HoeffdingForest(xs[0].dim, 3, g, np.full(n, 0.2), np.full(n, 0.05))
    for t, (x, label) in enumerate(zip(xs, ys, strict=True)):
        labels, weights = np.full(n, label), rng.uniform(0.5, 8.0, n)
        d_sparse, nodes = sparse.distribution(x)
        d_dense, _ = dense.distribution(x.dense())
        np.testing.assert_array_equal(d_sparse, d_dense)
        sparse.update(x, labels, weights, nodes if t % 2 else None)
        dense.update(x.dense(), labels, weights)
    assert sparse.n_leaves_.min() > 3
    assert encode(sparse.get_state()) == encode(dense.get_state())


@pytest.mark.parametrize("name", ["adabandit", "banditbbm", "adaboost-olm", "online-mbbm", "binbandit"])
def test_tree_boosters_take_sparse_input_and_learn_as_on_dense_rows(name: str) -> None:
    """The runtime hands hashed requests to these learners as SparseVectors: same decisions, same state."""
    from service.learners import make_learner
    from service.sampling import DecisionIds, decision_rng

    rng = np.random.default_rng(3)
    featurise = Featuriser(None, 8, 32)
    # small grace (binbandit: more exploration) so that the trees grow within the stream
    params = (
        {"n_learners": 2, "delta": 0.3} if name == "binbandit" else {"n_learners": 4, "grace": (1.0, 2.0)}
    )
    sparse, dense = make_learner(name, 256, 4, params, seed=1), make_learner(name, 256, 4, params, seed=1)
    assert sparse.accepts_sparse
    ids = DecisionIds.for_seed(2)
    for _ in range(300):
        request = {f"s{j}": f"v{rng.integers(5)}" for j in range(5)} | {"n": float(rng.normal())}
        x, y = featurise(request), int(request["s1"][1:]) % 4
        did = ids.new()
        d_sparse, d_dense = sparse.decide(x, decision_rng(did)), dense.decide(x.dense(), decision_rng(did))
        assert d_sparse.label == d_dense.label
        np.testing.assert_array_equal(d_sparse.probs, d_dense.probs)
        if sparse.full_information:
            sparse.learn_full(x, d_sparse, y)
            dense.learn_full(x.dense(), d_dense, y)
        else:
            sparse.learn(x, d_sparse, d_sparse.label == y)
            dense.learn(x.dense(), d_dense, d_dense.label == y)
    trees = sparse.weak_.forest_ if name == "binbandit" else sparse.trees_
    assert trees.n_leaves_.max() > 2
    assert encode(sparse.state()) == encode(dense.state())
