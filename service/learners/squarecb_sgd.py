"""SquareCB over an online SGD regression with hashed pairwise features (ours; issue 41): Vowpal
Wabbit's ``--cbify K --cb_explore_adf --squarecb -q ::`` as a label learner.

:mod:`service.learners.squarecb` solves each label's ridge regression exactly, which costs
``K (d + 1)^2`` floats: it cannot take pairs of a wide input, let alone of a hashed one. This learner
keeps VW's regressor instead: one hashed weight table shared by the labels, each label's row the
input (with its pairwise products, :mod:`service.interactions`, and a constant) crossed with the
label id, as VW's cbify builds one example per label; SGD with adaptive, normalised and
importance-invariant updates (:func:`service.learners.squarecb_adf.nag_update`, the action-feature
SquareCB's kernel) and inverse gap weighting (:func:`service.learners.squarecb.igw_scores`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from numba import njit
from pydantic import Field

from service._jit_cache import kernel
from service.features import SparseVector
from service.interactions import _mix, input_nonzeros, pairs_sparse
from service.kernels import merge_buckets
from service.learners.base import Decision, Learner, Params, learners
from service.learners.squarecb import igw_decision
from service.learners.squarecb_adf import nag_update

_OPTS = {"cache": True, "nogil": True, "boundscheck": False}


@njit(inline="always", **_OPTS)
def _column(j: int, a: int, k: int, mask: int, exact: bool) -> int:
    """The table column of expanded feature ``j`` crossed with label ``a``: ``j K + a`` when every
    (feature, label) has its own column, else that number hashed into the table (``mask + 1``
    columns, a power of two)."""
    c = j * k + a
    if exact:
        return c
    return np.int64(_mix(np.uint64(c)) & np.uint64(mask))


@kernel("float64[::1](float64[::1], int64[::1], float64[::1], int64, boolean)")
def label_scores(w: np.ndarray, idx: np.ndarray, val: np.ndarray, k: int, exact: bool) -> np.ndarray:
    """Each label's predicted reward ``r_a = sum_t w[column(idx_t, a)] val_t``, summed in ``idx``'s
    order (colliding columns simply add, as the merged row of :func:`label_row` does)."""
    mask = w.size - 1
    r = np.zeros(k)
    for t in range(idx.size):
        j, v = idx[t], val[t]
        for a in range(k):
            c = _column(j, a, k, mask, exact)
            if c < 0 or c > mask:  # the loops read w without bounds checks
                raise ValueError("a feature's column is outside the weight table")
            r[a] += w[c] * v
    return r


@kernel("Tuple((int64[::1], float64[::1]))(int64[::1], float64[::1], int64, int64, int64, boolean)")
def label_row(
    idx: np.ndarray, val: np.ndarray, k: int, a: int, size: int, exact: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Label ``a``'s row in the table: the columns of :func:`_column`, sorted, colliding values
    added (a row with distinct columns, as :func:`nag_update` takes)."""
    cols = np.empty(idx.size, np.int64)
    for t in range(idx.size):
        cols[t] = _column(idx[t], a, k, size - 1, exact)
    if exact:  # j K + a grows with j: sorted and distinct already
        return cols, val.copy()
    return merge_buckets(cols, val)


class SquareCBSGDParams(Params):
    """Hyperparameters of :class:`SquareCBSGD`.

    Parameters
    ----------
    gamma_scale, gamma_exponent : float, default 10 and 0.5
        ``gamma_t = gamma_scale t^gamma_exponent``, ``t`` the events applied plus one (VW's
        ``--gamma_scale`` and ``--gamma_exponent`` and their defaults). Larger: greedier.
    eta : float, default 0.5
        The regression's learning rate (VW's ``-l``, default 0.5).
    interactions : {"none", "pairs"}, default "pairs"
        ``"pairs"`` adds every product ``x_i x_j`` (``i < j``) of two non-zero inputs, as VW's
        ``-q ::``, at O(K nnz^2) work per event.
    bits : int, default 18
        The weight table has ``2**bits`` columns (VW's ``-b``, default 18). When the expanded
        input's dimension times K fits, each (feature, label) has its own column; else they are
        hashed into the table, as VW hashes. Memory: ``3 * 8 * 2**bits`` bytes whatever d and K.
    constant : bool, default True
        Add a constant feature 1 (an intercept per label), as VW does.
    weighting : {"mtr", "none"}, default "mtr"
        ``"mtr"``: the served label's row is learned with importance weight ``1 / p(label)``, as
        VW's squarecb does (its default ``--cb_type mtr``); ``"none"``: weight 1.

    The defaults are the best setting of ``clickboost sweep-defaults squarecb-sgd`` (car, dna,
    nursery, digits): mean online error 0.1644, against 0.2046 without pairs and 0.2495 without
    pairs or weighting; its grid crosses ``gamma_scale`` in {3, 10, 30, 100} with both choices of
    ``interactions`` and ``weighting``.
    """

    gamma_scale: float = Field(10.0, gt=0.0)
    gamma_exponent: float = Field(0.5, ge=0.0, le=1.0)
    eta: float = Field(0.5, gt=0.0)
    interactions: Literal["none", "pairs"] = "pairs"
    bits: int = Field(18, ge=4, le=26)
    constant: bool = True
    weighting: Literal["mtr", "none"] = "mtr"


@learners.register("squarecb-sgd")
class SquareCBSGD(Learner):
    """SquareCB over VW's SGD regression of the click, with hashed pairs (ours; Foster & Rakhlin
    2020 with VW's ``--squarecb`` regressor).

    The input ``x`` (dense or hashed, dimension d) is expanded to ``z``: its non-zeros, then with
    ``interactions="pairs"`` each product ``x_i x_j`` at its pair's rank (``d + rank``), then the
    constant 1. Label ``a``'s row is ``z`` crossed with ``a``: feature ``j`` at column ``j K + a``
    of the weight table, or that number hashed into ``2**bits`` columns when ``dim(z) K`` does not
    fit (colliding values added). Round t: ``r_a = <w, row_a>``, the greedy label ``b`` (first
    maximiser), ``p(a) = 1 / (K + gamma_t (r_b - r_a))`` for ``a != b`` and the rest on ``b``
    (Foster & Rakhlin 2020, Algorithm 1, with predicted rewards); sample. Learn: one step of VW's
    default regression (adaptive, normalised, importance-invariant; :func:`nag_update`) towards
    the reward on the served label's row, with importance weight ``1 / p(label)`` (VW's ``mtr``;
    ``weighting="none"``: 1). Graded rewards are learned as they are (``graded = True``).

    Eligible labels: the inverse gap weighting runs over the m eligible labels (K replaced by m);
    ``learn`` is unchanged (its weight is the served label's probability under the mask).

    Ours where beyond the paper: the regressor (VW's, with float64 weights and no clipping of the
    prediction), the crossing of features with labels and the exact columns of small inputs.

    Attributes
    ----------
    w_, g2_, scale_ : ndarray of shape (2**bits,)
        The table: weights, AdaGrad's sums and the normalisation's scales of each column.
    totals_ : ndarray of shape (2,)
        The normalisation's weighted sum of squared norms, and the weights' sum.

    References
    ----------
    Foster & Rakhlin (ICML 2020), SquareCB; Ross, Mineiro & Langford (UAI 2013) and Karampatziakis &
    Langford (UAI 2011), the regression: as :class:`service.learners.squarecb_adf.SquareCBADF`.

    Examples
    --------
    >>> import numpy as np
    >>> from service.learners import make_learner
    >>> m = make_learner("squarecb-sgd", 3, 2, seed=0)
    >>> x = np.array([1.0, 0.0, 2.0])
    >>> d = m.decide(x, np.random.default_rng(0))
    >>> [float(p) for p in d.probs]  # no data yet: every gap 0, p = 1/K each
    [0.5, 0.5]
    >>> m.learn(x, d, True)
    >>> bool(m.scores(x)[d.label] > m.scores(x)[1 - d.label])
    True
    """

    name = "squarecb-sgd"
    graded = True
    kernels = (
        "service.kernels",
        "service.interactions",
        "service.learners.squarecb",
        "service.learners.squarecb_adf",
        "service.learners.squarecb_sgd",
    )
    Params = SquareCBSGDParams
    params: SquareCBSGDParams

    @classmethod
    def _expanded(cls, n_features: int, params: Mapping[str, Any] | None) -> int:
        """The non-zeros of ``z`` at most: the input's, with ``"pairs"`` their pairs, the constant."""
        pairs = cls.Params.parse(cls.name, params).interactions == "pairs"
        return n_features + (n_features * (n_features - 1) // 2 if pairs else 0) + 1

    @classmethod
    def event_steps(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """Every label's row of ``z`` scored, one row learned: about ``(K + 1) dim(z)`` steps, with
        ``dim(z)`` quadratic in the non-zeros under ``"pairs"`` (so the budget bounds the pairs of
        the widest request)."""
        return (n_labels + 1) * cls._expanded(n_features, params)

    @classmethod
    def event_nbytes(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """``z`` and a row of it (indices and values) at a time."""
        return 32 * cls._expanded(n_features, params) + super().event_nbytes(n_features, n_labels, params)

    def _init(self) -> None:
        d = self.n_features
        self._pairs = self.params.interactions == "pairs"
        self._dim = d + (d * (d - 1) // 2 if self._pairs else 0)  # the constant goes at index _dim
        size = 1 << self.params.bits
        self._exact = (self._dim + 1) * self.n_labels <= size
        self.w_ = np.zeros(size)
        self.g2_ = np.zeros(size)
        self.scale_ = np.zeros(size)
        self.totals_ = np.zeros(2)

    @property
    def accepts_sparse(self) -> bool:
        return True

    def _expand(self, x: np.ndarray | SparseVector) -> tuple[np.ndarray, np.ndarray]:
        """``z``'s non-zeros: the input's, its pairs' (rank order), the constant."""
        idx, val, d = input_nonzeros(x)
        if d != self.n_features:
            raise ValueError(f"x has dimension {d}, the model {self.n_features}")
        idx, val = np.asarray(idx, np.int64), np.asarray(val, np.float64)
        if self._pairs:
            idx, val = pairs_sparse(idx, val, d, d * (d - 1) // 2)
        if self.params.constant:
            idx, val = np.append(idx, self._dim), np.append(val, 1.0)
        return np.ascontiguousarray(idx), np.ascontiguousarray(val)

    def scores(self, x: np.ndarray | SparseVector) -> np.ndarray:
        """The predicted reward of every label."""
        idx, val = self._expand(x)
        return label_scores(self.w_, idx, val, self.n_labels, self._exact)

    def decide(
        self, x: np.ndarray | SparseVector, rng: np.random.Generator, eligible: np.ndarray | None = None
    ) -> Decision:
        r = self.scores(x)
        gamma = self.params.gamma_scale * float(self.t_ + 1) ** self.params.gamma_exponent
        return igw_decision(r, gamma, rng, eligible)

    def learn(self, x: np.ndarray | SparseVector, decision: Decision, reward: bool | float) -> None:
        idx, val = self._expand(x)
        cols, vals = label_row(idx, val, self.n_labels, decision.label, self.w_.size, self._exact)
        h = 1.0 / decision.probs[decision.label] if self.params.weighting == "mtr" else 1.0
        nag_update(
            self.w_, self.g2_, self.scale_, self.totals_, cols, vals, float(reward), self.params.eta, h
        )
        self.t_ += 1
