"""Pieces shared by the boosters of Zhang, Jung, Tewari (AISTATS 2019) and Jung et al. (NeurIPS 2017).

One place for: the loss estimator (4), the logistic cost matrices (10) and the alpha-gradient of
(11), the boost-by-majority potential and its cost matrices (9) (exact and Monte Carlo), and the
(label, weight) reduction of a cost vector for weak learners that take weighted labelled examples
(ALGORITHMS.md §2.4-§2.8, §3).

Conventions: ``Gamma[l, r]`` is the cost of predicting ``l`` when the truth is ``r`` (column ``r`` is
the cost vector for truth ``r``), so the random cost vector (5) is ``Gamma @ iota_hat`` with
``iota_hat = 1 - ell_hat``. Labels are 0-based.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from service.features import SparseVector
from service.learners.base import Learner, ParamError, Params
from service.learners.booster_kernels import cost_examples, forest_learn_costs, rows_argmax
from service.learners.weak.hoeffding_tree import (
    HoeffdingForest,
    draw_tree_hyperparameters,
    operands,
    upgrade_entry_keys,
)

Ties = Literal["random", "pessimistic"]
#: forest_learn_costs' "no labels given": the reduction's labels
_NO_LABELS = np.zeros(0, dtype=np.int64)

__all__ = [
    "BanditTreeBoosterParams",
    "TreeBooster",
    "TreeBoosterParams",
    "bbm_cost_matrix",
    "bbm_potential",
    "bbm_potential_mc",
    "costs_to_examples",
    "hedge_update",
    "logistic_alpha_grad",
    "logistic_cost_matrices",
    "loss_estimate",
    "masked_rows_argmax",
    "rand_rows_argmax",
]


def loss_estimate(probs: np.ndarray, label: int, greedy: int, reward: bool) -> np.ndarray:
    """The estimator (4) of the zero-one loss vector ``1 - e_y`` from one click bit.

    ``ell = 1[ytilde = y] / p(y) (1 - e_y - e_yhat) + 1[ytilde = yhat] / p(yhat) e_yhat``, computable
    because ``1[ytilde = y]`` is the click and then ``y = ytilde``; ``1[ytilde = yhat]`` is known
    (ALGORITHMS.md §2.4). Unbiased over ``ytilde ~ probs`` for every true label.

    Parameters
    ----------
    probs : ndarray of shape (k,)
        The sampling distribution (2) of the decision.
    label : int
        The sampled label ``ytilde``.
    greedy : int
        The intermediate prediction ``yhat``.
    reward : bool
        The click bit ``1[ytilde = y]``.
    """
    # Python floats, then one array: the same IEEE operations as on a numpy vector (0 + 1/p is 1/p
    # exactly), a few microseconds less per round
    k = len(probs)
    if reward:
        q = 1.0 / float(probs[label])
        ell = [q] * k
        ell[label] -= q
        ell[greedy] -= q  # label == greedy: -1/p here, cancelled below
    else:
        ell = [0.0] * k
    if label == greedy:
        ell[greedy] += 1.0 / float(probs[greedy])
    return np.array(ell)


# --------------------------------------------------------------------------------------------
# AdaBandit / Adaboost.OLM: logistic loss L^r(s) = sum_{l != r} log(1 + exp(s[l] - s[r]))
# --------------------------------------------------------------------------------------------


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # 1 / (1 + exp(-z)) without overflow


def logistic_cost_matrices(S: np.ndarray) -> np.ndarray:
    """Cost matrices (10) for a stack of vote vectors: column ``r`` is the gradient of ``L^r``.

    ``Gamma[l, r] = 1 / (1 + exp(s[r] - s[l]))`` for ``l != r`` and ``Gamma[r, r] = -sum_{j != r}
    Gamma[j, r]``, so every column sums to 0 and is minimal at ``l = r`` (ALGORITHMS.md §2.7).

    Parameters
    ----------
    S : ndarray of shape (N, k)
        Vote vectors ``s^{i-1}``, one per weak learner.

    Returns
    -------
    ndarray of shape (N, k, k)
    """
    G = _sigmoid(S[:, :, None] - S[:, None, :])
    k = S.shape[1]
    diag = np.arange(k)
    G[:, diag, diag] = 0.0
    G[:, diag, diag] = -G.sum(axis=1)
    return G


def logistic_alpha_grad(S: np.ndarray, weak: np.ndarray, alpha: np.ndarray, iota: np.ndarray) -> np.ndarray:
    """Derivative of ``f(alpha) = sum_r iota[r] L^r(s + alpha e_j)`` for each learner, eq. (11).

    With ``j = l^i`` (the learner's prediction) and ``s = s^{i-1}``:
    ``dL^r/dalpha = -sum_{l != r} 1 / (1 + exp(s[r] + alpha - s[l]))`` if ``j = r``, else
    ``1 / (1 + exp(s[r] - s[j] - alpha))``. This is the correct derivative of the ALGORITHMS.md §2.7
    erratum (the reference code's ``j = r`` branch computes the complement of each summand).

    Parameters
    ----------
    S : ndarray of shape (N, k)
        ``s^{i-1}`` per learner.
    weak : ndarray of shape (N,), int
        ``l^i`` per learner.
    alpha : ndarray of shape (N,)
        ``alpha^i`` at which the derivative is taken.
    iota : ndarray of shape (k,)
        ``iota_hat = 1 - ell_hat`` (bandit) or ``e_y`` (full information).

    Returns
    -------
    ndarray of shape (N,)
    """
    n = np.arange(S.shape[0])
    sj = S[n, weak] + alpha  # vote of class j after adding alpha
    # r != j: sigmoid(s[j] + alpha - s[r]); summed with weights iota[r] over r != j
    off = _sigmoid(sj[:, None] - S)
    off[n, weak] = 0.0
    # r == j: -sum_{l != j} sigmoid(s[l] - s[j] - alpha)
    on = _sigmoid(S - sj[:, None])
    on[n, weak] = 0.0
    return off @ iota - on.sum(axis=1) * iota[weak]


# --------------------------------------------------------------------------------------------
# BanditBBM / OnlineMBBM: the boost-by-majority potential (ALGORITHMS.md §2.6)
# --------------------------------------------------------------------------------------------


def _exp_series(upper: int, m: int, a: float) -> np.ndarray:
    """Coefficients of ``sum_{y=0}^{min(upper, m)} (a z)^y / y!`` padded to degree ``m``."""
    out = np.zeros(m + 1)
    top = min(upper, m)
    if top >= 0:
        y = np.arange(top + 1)
        out[: top + 1] = np.exp(y * math.log(a) - np.array([math.lgamma(v + 1.0) for v in y]))
    return out


@lru_cache(maxsize=200_000)
def _phi_exact(n: int, sr: int, others: tuple[int, ...], gamma: float, ties: Ties) -> float:
    """Exact potential for integer votes (the generating-function DP of ALGORITHMS.md §2.6).

    ``others`` are the votes of the non-true labels (sorted; the potential is symmetric in them).
    Condition on ``X_r = j ~ Bin(n, q)``; the other ``m = n - j`` draws are uniform on the k-1 other
    labels, so ``P(correct | j)`` is ``m! / (k-1)^m`` times a coefficient of a product of truncated
    exponential series.
    """
    k = len(others) + 1
    q = gamma + (1.0 - gamma) / k
    a = 1.0 / (k - 1)  # each of the m remaining draws hits a given other label w.p. 1/(k-1)
    phi = 1.0
    for j in range(n + 1):
        m = n - j
        c = sr + j
        pj = math.comb(n, j) * q**j * (1.0 - q) ** m
        if ties == "pessimistic":
            poly = np.zeros(m + 1)
            poly[0] = 1.0
            for sl in others:
                poly = np.convolve(poly, _exp_series(c - 1 - sl, m, a))[: m + 1]
            correct = poly[m]
        else:
            # bivariate in (z, w): w counts the other labels tied with r at the top
            polys = [np.zeros(m + 1)]
            polys[0][0] = 1.0
            for sl in others:
                below = _exp_series(c - 1 - sl, m, a)
                d = c - sl
                tie = np.zeros(m + 1)
                if 0 <= d <= m:
                    tie[d] = math.exp(d * math.log(a) - math.lgamma(d + 1.0))
                nxt = [np.convolve(p, below)[: m + 1] for p in polys] + [np.zeros(m + 1)]
                for tau, p in enumerate(polys):
                    nxt[tau + 1] += np.convolve(p, tie)[: m + 1]
                polys = nxt
            correct = sum(p[m] / (tau + 1) for tau, p in enumerate(polys))
        phi -= pj * math.exp(math.lgamma(m + 1.0)) * correct
    return min(max(phi, 0.0), 1.0)


def bbm_potential(n: int, s: np.ndarray, r: int, gamma: float, ties: Ties) -> float:
    """``phi^r_n(s) = E_{X ~ Mult(n, u^r_gamma)} L^r(s + X)``, exactly, for integer votes ``s``.

    ``u^r_gamma = (1-gamma)/k 1 + gamma e_r``; ``L^r`` is the zero-one loss with random or
    pessimistic ties (ALGORITHMS.md §2.6). Memoised on ``(n, s[r], sorted(s_{-r}))`` after shifting
    ``s`` so its minimum is 0 (the potential is shift-invariant).
    """
    v = np.asarray(s, dtype=np.int64)
    v = v - v.min()
    others = tuple(sorted(int(u) for u in np.delete(v, r)))
    return _phi_exact(int(n), int(v[r]), others, float(gamma), ties)


def _zero_one(S: np.ndarray, r: int | np.ndarray, ties: Ties) -> np.ndarray:
    """``L^r`` of vote vectors ``S[..., k]`` (``r`` broadcast against ``S[..., 0]``)."""
    top = S.max(axis=-1, keepdims=True)
    sr = np.take_along_axis(S, np.broadcast_to(np.asarray(r)[..., None], (*S.shape[:-1], 1)), axis=-1)
    if ties == "pessimistic":
        others = np.where(np.arange(S.shape[-1]) == np.asarray(r)[..., None], -np.inf, S)
        return (others.max(axis=-1) >= sr[..., 0]).astype(float)
    at_top = (top == S).sum(axis=-1)
    return 1.0 - (sr[..., 0] == top[..., 0]) / at_top


def bbm_potential_mc(
    n: int, s: np.ndarray, gamma: float, ties: Ties, rng: np.random.Generator, samples: int = 100
) -> np.ndarray:
    """Monte Carlo cost matrix ``Gamma[l, r] ~ phi^r_n(s + e_l)`` with ``samples`` draws per truth.

    The reference code's estimator (``M = 100``, ALGORITHMS.md §2.6); for every truth ``r`` the
    same draws ``X ~ Mult(n, u^r_gamma)`` serve all ``l`` (common random numbers).
    """
    k = s.size
    G = np.empty((k, k))
    eye = np.eye(k)
    for r in range(k):
        u = np.full(k, (1.0 - gamma) / k)
        u[r] += gamma
        X = rng.multinomial(n, u, size=samples)  # (M, k)
        S = s[None, None, :] + eye[:, None, :] + X[None, :, :]  # (l, M, k)
        G[:, r] = _zero_one(S, r, ties).mean(axis=1)
    return G


@lru_cache(maxsize=100_000)
def _bbm_matrix_exact(n: int, s: tuple[int, ...], gamma: float, ties: Ties) -> np.ndarray:
    k = len(s)
    G = np.empty((k, k))
    for lab in range(k):
        v = np.array(s, dtype=np.int64)
        v[lab] += 1
        for r in range(k):
            G[lab, r] = bbm_potential(n, v, r, gamma, ties)
    G.flags.writeable = False
    return G


def bbm_cost_matrix(
    n: int, s: np.ndarray, gamma: float, ties: Ties, rng: np.random.Generator | None = None
) -> np.ndarray:
    """Cost matrix (9): ``Gamma[l, r] = phi^r_n(s + e_l)``; exact, or Monte Carlo when ``rng`` is given.

    ``n`` is the number of weak learners still to vote (``N - i`` for learner ``i``, 1-based).
    """
    if rng is not None:
        return bbm_potential_mc(n, s, gamma, ties, rng)
    return _bbm_matrix_exact(int(n), tuple(int(v) for v in s), float(gamma), ties)


# --------------------------------------------------------------------------------------------
# Weak-learner input and Hedge
# --------------------------------------------------------------------------------------------


def costs_to_examples(
    C: np.ndarray, clip: float, rng: np.random.Generator, prefer: int | None = None, divide: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """The (label, weight) reduction of cost vectors (ALGORITHMS.md §2.8; one clip bound, no rounding).

    Each row is clipped to ``[-clip, clip]``. The label is ``prefer`` (the clicked, or true, label)
    where it is a minimiser of the row, else uniform among the row's minimisers. The weight is
    ``sum_l (c[l] - min c)`` (the weak-learning sample weight), divided by ``k - 1`` if ``divide``
    (the reference's Isolet setting), floored at ``1e-10``.

    Parameters
    ----------
    C : ndarray of shape (N, k)
        One cost vector per weak learner.

    Returns
    -------
    labels : ndarray of shape (N,), int
    weights : ndarray of shape (N,)
    """
    C = np.asarray(C, dtype=np.float64)
    # compiled (booster_kernels.cost_examples): numpy's arithmetic and sum order, one call
    return cost_examples(C, float(clip), rng.random(C.size), -1 if prefer is None else int(prefer), divide)


def rand_rows_argmax(V: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Row-wise ``randargmax``: for each row, an index of its maximum, uniform among ties (the one
    with the largest of ``V.size`` uniform draws, compiled: :func:`rows_argmax`)."""
    return rows_argmax(np.asarray(V, dtype=np.float64), rng.random(V.size))


def masked_rows_argmax(V: np.ndarray, mask: np.ndarray, U: np.ndarray) -> np.ndarray:
    """:func:`rand_rows_argmax` with its draws ``U`` (N k) given, over the eligible columns only
    (``mask``): each row's maximum among them, the tie with the largest draw. The boosters' masked
    decisions: every tree votes for an eligible label, so the votes rank the eligible labels by the
    trees' class weights (a tree whose favourite is ineligible votes for its next best)."""
    top = np.where(mask, V, -np.inf).max(axis=1, keepdims=True)
    return np.argmax(np.where(mask & (top == V), U.reshape(V.shape), -1.0), axis=1).astype(np.int64)


def hedge_update(log_v: np.ndarray, losses: np.ndarray, rate: float = 1.0) -> np.ndarray:
    """Hedge in the log domain: ``log v -= rate * loss``, shifted so the maximum is 0 (§2.7)."""
    out = log_v - rate * losses
    return out - out.max()


# --------------------------------------------------------------------------------------------
# The common frame of the four VFDT boosters (ALGORITHMS.md §2.1, §3)
# --------------------------------------------------------------------------------------------


#: ``subspace="auto"``: about this many times sqrt(d) features per leaf (chosen on the tuning sets,
#: ``clickboost sweep-defaults``)
SUBSPACE_SCALE = 4.0


def subspace_share(subspace: float | str, n_features: int) -> float:
    """The share of the features a leaf keeps for the parameter ``subspace`` at input width d:
    itself, or for ``"auto"`` ``min(1, SUBSPACE_SCALE / sqrt(d))`` (ours: on narrow input every
    feature, on MNIST's 784 pixels about a seventh)."""
    if subspace == "auto":
        return min(1.0, SUBSPACE_SCALE / math.sqrt(max(n_features, 1)))
    return float(subspace)


class TreeBoosterParams(Params):
    """Hyperparameters shared by the boosters over Hoeffding trees.

    Parameters
    ----------
    n_learners : int, default 20
        Number N of weak learners (Hoeffding trees).
    grace, tie_threshold, split_confidence : (float, float)
        Ranges of the per-tree VFDT hyperparameters, drawn once per tree from the learner's seeded
        generator: grace period uniform, tie threshold and split confidence log-uniform
        (ALGORITHMS.md §2.10). A degenerate range ``(v, v)`` fixes the value.
    cost_clip : float, default 100
        Clip bound of cost vectors before the (label, weight) reduction (§2.8).
    weight_divide : bool, default False
        Divide the weak-learner weight by ``k - 1`` (the reference code's Isolet setting).
    adaptive_grace : bool, default False
        Ours (not in the papers): after a failed split evaluation a tree waits until its Hoeffding
        bound can pass before the next one (the nmin adaptation of García-Martín et al. 2018;
        :class:`~service.learners.weak.hoeffding_tree.HoeffdingForest`). On wide inputs most
        evaluations fail and each costs a scan of every feature the leaf has seen.
    grace_unit : {"weight", "examples"}, default "weight"
        What a tree's grace period counts: the leaf's weight (the papers' VFDT port, ALGORITHMS.md
        §2.8) or, ours, the examples it saw. Bandit weights are importance weights, up to ``(k - 1)
        / rho`` per example, so in weight a leaf searches for a split at almost every example.
    subspace : float or "auto", default 1.0
        Ours: the share of the features each leaf keeps statistics of and may split on, drawn per
        leaf (:class:`~service.learners.weak.hoeffding_tree.HoeffdingForest`); 1 is every feature,
        the papers' setting. ``"auto"`` depends on the input's width d: ``min(1, SUBSPACE_SCALE /
        sqrt(d))`` (:func:`subspace_share`), about ``SUBSPACE_SCALE sqrt(d)`` features per leaf.
    """

    #: added after runs were stored: a setting without it dumps (and keys) as before
    omit_at: ClassVar[dict[str, Any]] = {"adaptive_grace": False, "grace_unit": "weight", "subspace": 1.0}

    n_learners: int = Field(20, ge=1, le=1000)
    grace: tuple[float, float] = (5.0, 20.0)
    tie_threshold: tuple[float, float] = (0.01, 0.9)
    split_confidence: tuple[float, float] = (0.01, 0.9)
    cost_clip: float = Field(100.0, gt=0.0)
    weight_divide: bool = False
    adaptive_grace: bool = False
    grace_unit: Literal["weight", "examples"] = "weight"
    subspace: Annotated[float, Field(gt=0.0, le=1.0)] | Literal["auto"] = 1.0

    @model_validator(mode="after")
    def _ranges(self) -> TreeBoosterParams:
        for name in ("grace", "tie_threshold", "split_confidence"):
            lo, hi = getattr(self, name)
            if not 0.0 < lo <= hi:
                raise ValueError(f"{name} must be a range 0 < lo <= hi, got {(lo, hi)}")
        if self.split_confidence[1] >= 1.0:
            raise ValueError("split_confidence must lie in (0, 1)")
        return self


class BanditTreeBoosterParams(TreeBoosterParams):
    """Adds the exploration rate of eq. (2), and the served split schedule of the bandit boosters.

    Parameters
    ----------
    rho : float, default 0.1
        ``p(yhat) = 1 - rho``, ``p(l) = rho / (k-1)`` otherwise; must satisfy ``rho <= (k-1)/k``
        ("large weight on yhat", §2.2), checked at construction.
    grace, tie_threshold, split_confidence : (float, float), defaults (5, 20), (0.7, 0.8), (1e-11, 1e-10)
    grace_unit : default "examples"
    subspace : default "auto"
    adaptive_grace : default True
        The split schedule served at the defaults is ours (issue 41), not the papers': a grace
        period of 5 to 20 *examples* (not importance weight, which reached it at almost every
        example), the reference code's tie threshold and confidence for its wide data sets, each
        leaf keeping about ``4 sqrt(d)`` of the features (all of them up to d = 16), and a leaf
        whose evaluation failed waiting until its bound can pass. Chosen by ``clickboost
        sweep-defaults``' protocol on car, dna, nursery and digits only (docs/BENCHMARKS.md): mean
        online error 0.137 (AdaBandit) against 0.185 for the papers' schedule (3 shuffles, 10,000
        rounds; printed by `bench boosters`). Seed 001's reproduction passes the papers' settings explicitly
        (``lab.repro.seed001``), so these defaults never move it. A model stored before its
        parameters were stored complete read the papers' values (:attr:`omit_at`).
    """

    omit_at: ClassVar[dict[str, Any]] = {
        **TreeBoosterParams.omit_at,
        "tie_threshold": [0.01, 0.9],  # JSON's form: what key() compares
        "split_confidence": [0.01, 0.9],
    }

    rho: float = Field(0.1, gt=0.0, lt=1.0)
    grace: tuple[float, float] = (5.0, 20.0)
    tie_threshold: tuple[float, float] = (0.7, 0.8)
    split_confidence: tuple[float, float] = (1e-11, 1e-10)
    grace_unit: Literal["weight", "examples"] = "examples"
    subspace: Annotated[float, Field(gt=0.0, le=1.0)] | Literal["auto"] = "auto"
    adaptive_grace: bool = True


class TreeBooster(Learner):
    """Common frame of AdaBandit, BanditBBM, Adaboost.OLM and OnlineMBBM: N Hoeffding trees.

    Attributes
    ----------
    trees_ : HoeffdingForest
        The weak learners, with their randomly drawn hyperparameters.
    """

    params: TreeBoosterParams
    #: 2: the trees' entry keys are ``class * d + feature`` (one run per class in a leaf's segment)
    schema_version = 2

    def _init(self) -> None:
        p = self.params
        rho = getattr(p, "rho", None)
        if rho is not None and rho > (self.n_labels - 1) / self.n_labels:
            raise ParamError(
                f"{self.name}: rho must be <= (k-1)/k = {(self.n_labels - 1) / self.n_labels:.4g} "
                f"so that the greedy label keeps the largest probability, got {rho}"
            )
        draws = draw_tree_hyperparameters(
            self.rng_, p.n_learners, p.grace, p.tie_threshold, p.split_confidence
        )
        self.trees_ = HoeffdingForest(
            self.n_features, self.n_labels, *draws, adaptive=p.adaptive_grace,
            by_examples=p.grace_unit == "examples", subspace=subspace_share(p.subspace, self.n_features),
        )  # fmt: skip
        # what each learn event hands the trees (:meth:`_learn_forest`): scratch, not state
        self._reduced = np.zeros(p.n_learners, dtype=np.int64), np.zeros(p.n_learners)
        self._draws = np.zeros(p.n_learners * self.n_labels)  # the reduction's draws (same stream)

    @property
    def accepts_sparse(self) -> bool:
        """The trees take a :class:`~service.features.SparseVector` as is (O(nnz) updates per tree)."""
        return True

    def upgrade_state(self, state: dict[str, Any], version: int) -> None:
        """Schema 1 (entry keys ``feature * k + class``) to 2: :func:`upgrade_entry_keys`."""
        if version != 1:
            super().upgrade_state(state, version)
        upgrade_entry_keys(state, "trees_.", self.n_features, self.n_labels)

    def _weak_distribution(self, x: np.ndarray | SparseVector) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Class distributions of the trees for ``x`` and the memo entries that let ``learn`` skip
        re-routing ``x`` when no tree has split in between (``leaves`` and ``tree_nodes``)."""
        dist, nodes = self.trees_.distribution(x)
        return dist, {"leaves": nodes, "tree_nodes": self.trees_.n_nodes_.copy()}

    def _train_trees(
        self,
        x: np.ndarray | SparseVector,
        C: np.ndarray,
        prefer: int | None,
        memo: dict,
        labels: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Feed every tree its cost vector through the (label, weight) reduction (§2.8); ``labels``,
        when given, replace the reduction's labels (the weights stay). Returns the (labels, weights)
        the trees learned (:meth:`_learn_forest`)."""
        given = _NO_LABELS if labels is None else np.asarray(labels, dtype=np.int64)
        C = np.asarray(C, dtype=np.float64)
        prefer = -1 if prefer is None else int(prefer)
        return self._learn_forest(forest_learn_costs, x, memo, C, prefer, given)

    def _learn_forest(
        self, learn: Any, x: np.ndarray | SparseVector, memo: dict, *args: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """One compiled learn event: ``learn`` (a kernel taking ``booster_kernels.LEARN``'s frame,
        then ``args``) computes the trees' cost vectors, reduces them to (label, weight) pairs (§2.8,
        with N k draws of the learner's generator) and updates the trees; an update stopped for room
        is resumed here after the arrays grow. Returns the (labels, weights) the trees learned (for
        audits: ``lab.repro.seed001_variants.weight_audit``), arrays the next event overwrites."""
        p = self.params
        f = self.trees_
        xs = operands(x)
        leaves = np.asarray(memo["leaves"], dtype=np.int64)
        labels, weights = self._reduced
        frame = (
            f.arrays(), xs, f.trees, leaves, np.asarray(memo["tree_nodes"], dtype=np.int64), f.schedule,
            f.subspace, float(p.cost_clip), self.rng_.random(out=self._draws), p.weight_divide, labels,
            weights,
        )  # fmt: skip
        start, lack, used = learn(frame, *args)
        if start >= 0:  # stopped for room: grow and go on
            f.resume(xs, f.trees, labels, weights, leaves if used else leaves[:0], start, lack)
        return labels, weights
