"""SquareCB over an online SGD regression with hashed pairwise features (ours; issue 41): Vowpal
Wabbit's ``--cbify K --cb_explore_adf --squarecb -q ::`` as a label learner.

:mod:`service.learners.squarecb` solves each label's ridge regression exactly, which costs
``K (d + 1)^2`` floats: it cannot take pairs of a wide input, let alone of a hashed one. This learner
keeps VW's regressor instead: one hashed weight table shared by the labels, each label's row the
input (with its pairwise products, :mod:`service.interactions`, and a constant) crossed with the
label id, as VW's cbify builds one example per label; VW's SGD with adaptive, normalised and
importance-invariant updates of the click's cost (:func:`vw_update`, which tracks VW's own ``gd``
to float32 precision: tests/service/learners/test_squarecb_sgd.py) and inverse gap weighting
(:func:`service.learners.squarecb.igw_scores`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from numba import njit
from pydantic import Field

from service._jit_cache import kernel
from service.features import SparseVector
from service.interactions import _mix, input_nonzeros, pairs_sparse
from service.learners.base import Decision, Learner, Params, learners
from service.learners.squarecb import igw_decision

_OPTS = {"cache": True, "nogil": True, "boundscheck": False}


@njit(inline="always", **_OPTS)
def _base(j: int, k: int, mask: int, exact: bool) -> int:
    """Label 0's column of expanded feature ``j``: ``j K`` when every (feature, label) has its own
    column, else ``j`` hashed into the table (``mask + 1`` columns, a power of two). Label ``a``'s
    is ``(base + a) & mask`` (:func:`_column`): a feature's labels sit side by side, as VW offsets a
    feature's hash by the action, so scoring K labels reads one or two cache lines per feature."""
    if exact:
        return j * k
    return np.int64(_mix(np.uint64(j)) & np.uint64(mask))


@njit(inline="always", **_OPTS)
def _column(j: int, a: int, k: int, mask: int, exact: bool) -> int:
    """The table column of expanded feature ``j`` crossed with label ``a`` (:func:`_base`)."""
    return (_base(j, k, mask, exact) + a) & mask


@kernel("float64[::1](float64[::1], int64[::1], float64[::1], int64, boolean)")
def label_scores(w: np.ndarray, idx: np.ndarray, val: np.ndarray, k: int, exact: bool) -> np.ndarray:
    """Each label's predicted reward ``r_a = sum_t w[column(idx_t, a)] val_t``, summed in ``idx``'s
    order (colliding columns simply add, as the merged row of :func:`label_row` does)."""
    mask = w.size - 1
    r = np.zeros(k)
    for t in range(idx.size):
        v = val[t]
        base = _base(idx[t], k, mask, exact)
        if base < 0 or (exact and base + k - 1 > mask):  # the loops read w without bounds checks
            raise ValueError("a feature's column is outside the weight table")
        for a in range(k):
            r[a] += w[(base + a) & mask] * v
    return r


@kernel("Tuple((int64[::1], float64[::1]))(int64[::1], float64[::1], int64, int64, int64, boolean)")
def label_row(
    idx: np.ndarray, val: np.ndarray, k: int, a: int, size: int, exact: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Label ``a``'s row in the table: the column of :func:`_column` of each entry, in ``idx``'s
    order. Hashed columns may repeat: :func:`vw_update` takes each entry as VW takes a colliding
    feature (merging them, a sort of about 190,000 entries for isolet's pairs, took 49 ms)."""
    cols = np.empty(idx.size, np.int64)
    for t in range(idx.size):
        cols[t] = _column(idx[t], a, k, size - 1, exact)
    return cols, val.copy()


@kernel(
    "float64(float64[::1], float64[::1], float64[::1], float64[::1], int64[::1], float64[::1], float64,"
    " float64, float64, float64, float64)"
)
def vw_update(
    w: np.ndarray,
    g2: np.ndarray,
    scale: np.ndarray,
    totals: np.ndarray,
    idx: np.ndarray,
    val: np.ndarray,
    y: float,
    eta: float,
    h: float,
    lo: float,
    hi: float,
) -> float:
    """One square-loss step of Vowpal Wabbit's default regression towards ``y`` on the row
    ``(idx, val)`` with importance weight ``h``; returns the prediction it stepped from.

    VW's ``gd.cc`` at its defaults (``--adaptive --normalized --invariant``, ``--power_t 0.5``,
    ``-l eta``), in its order:

    1. The prediction ``p = <w, x>``, clipped to ``[lo, hi]`` (VW clips to the labels' range);
       nothing moves, not even the normaliser, when ``p = y``.
    2. Per column: AdaGrad's ``g2_i += h 4 (p - y)^2 x_i^2``; the scale ``s_i`` (largest ``|x_i|``
       seen; a new one rescales ``w_i`` by ``s_old / |x_i|``); ``n += x_i^2 / s_i^2``; the rate
       ``rate_i = 1 / (sqrt(g2_i) s_i)``.
    3. ``totals += [h n, h]``; the multiplier ``m = sqrt(totals[1] / totals[0])`` and the row's
       sensitivity ``q = m sum_i x_i^2 rate_i``.
    4. The importance-invariant step of the square loss (Karampatziakis & Langford 2011),
       ``u = (y - p) (1 - exp(-2 eta h q)) / q`` (``2 eta h (y - p)`` when ``eta h q < 1e-6``),
       and ``w_i += m u x_i rate_i``.

    Ours: float64 and exact square roots (VW: float32 and a fast inverse square root), and
    ``[lo, hi]`` fixed (VW's grows with the labels seen). A column may repeat: each entry is a
    feature of its own in every step, as in VW, and the last loop reads the column's final rate.
    """
    p = 0.0
    for t in range(idx.size):
        p += w[idx[t]] * val[t]
    p = min(max(p, lo), hi)
    if p == y:
        return p
    gs = h * 4.0 * (p - y) * (p - y)
    norm_x = 0.0
    q = 0.0
    for t in range(idx.size):
        i, v = idx[t], val[t]
        x2 = v * v
        g2[i] += gs * x2
        a = abs(v)
        if a > scale[i]:
            if scale[i] > 0.0:
                w[i] *= scale[i] / a
            scale[i] = a
        norm_x += x2 / (scale[i] * scale[i])
        q += x2 / (math.sqrt(g2[i]) * scale[i])
    totals[0] += h * norm_x
    totals[1] += h
    m = math.sqrt(totals[1] / totals[0])
    q *= m
    eh = eta * h
    if eh * q < 1e-6:
        u = 2.0 * eh * (y - p)
    else:
        u = (y - p) * (1.0 - math.exp(-2.0 * eh * q)) / q
    u *= m
    for t in range(idx.size):
        i, v = idx[t], val[t]
        w[i] += u * v / (math.sqrt(g2[i]) * scale[i])
    return p


@kernel(
    "Tuple((float64[::1], float64[::1]))(float64[::1], float64[::1], float64[::1], int64[::1], float64[::1],"
    " int64, boolean, float64[::1], float64, float64, float64, boolean)"
)
def label_sensitivities(
    g2: np.ndarray,
    scale: np.ndarray,
    totals: np.ndarray,
    idx: np.ndarray,
    val: np.ndarray,
    k: int,
    exact: bool,
    p: np.ndarray,
    y_lo: float,
    y_hi: float,
    eta: float,
    both: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """How far one unit of importance weight would move each label's prediction ``p[a]`` of its row
    towards ``y_lo`` and, with ``both``, towards ``y_hi`` (else zeros), in one pass over ``z``
    without building the K rows: VW's stateless ``gd`` sensitivity, which RegCB's confidence
    bounds search over. It is ``eta`` times steps 2-3 of :func:`vw_update` with weight 1 on
    copies: ``eta m sum_i x_i^2 / (sqrt(g2_i + 4 (p - y)^2 x_i^2) s_i)`` with ``s_i`` the scale
    raised to ``|x_i|`` if lower and ``m = sqrt((totals[1] + 1) / (totals[0] + sum_i x_i^2 / s_i^2))``.
    Nothing stored changes."""
    mask = g2.size - 1
    norm = np.zeros(k)
    q_lo = np.zeros(k)
    q_hi = np.zeros(k)
    gs_lo = 4.0 * (p - y_lo) * (p - y_lo)
    gs_hi = 4.0 * (p - y_hi) * (p - y_hi)
    for t in range(idx.size):
        v = val[t]
        x2 = v * v
        base = _base(idx[t], k, mask, exact)
        if base < 0 or (exact and base + k - 1 > mask):  # the loops read the table without bounds checks
            raise ValueError("a feature's column is outside the weight table")
        for a in range(k):
            i = (base + a) & mask
            s = max(scale[i], abs(v))
            norm[a] += x2 / (s * s)
            q_lo[a] += x2 / (math.sqrt(g2[i] + gs_lo[a] * x2) * s)
            if both:
                q_hi[a] += x2 / (math.sqrt(g2[i] + gs_hi[a] * x2) * s)
    out_lo = np.empty(k)
    out_hi = np.empty(k)
    for a in range(k):
        m = math.sqrt((totals[1] + 1.0) / (totals[0] + norm[a]))
        out_lo[a] = eta * q_lo[a] * m
        out_hi[a] = eta * q_hi[a] * m
    return out_lo, out_hi


class SquareCBSGDParams(Params):
    """Hyperparameters of :class:`SquareCBSGD`.

    Parameters
    ----------
    gamma_scale, gamma_exponent : float, default 100 and 0.5
        ``gamma_t = gamma_scale t^gamma_exponent``, ``t`` the events applied plus one (VW's
        ``--gamma_scale`` and ``--gamma_exponent``; VW's defaults are 10 and 0.5). Larger: greedier.
    eta : float, default 0.5
        The regression's learning rate (VW's ``-l``, default 0.5).
    interactions : {"none", "pairs", "quadratic"}, default "pairs"
        ``"pairs"`` adds every product ``x_i x_j`` (``i < j``) of two non-zero inputs;
        ``"quadratic"`` adds the squares ``x_i^2`` too, as VW's ``-q ::`` on one namespace does.
        Either costs O(K nnz^2) work per event.
    bits : int, default 18
        The weight table has ``2**bits`` columns (VW's ``-b``, default 18). When the expanded
        input's dimension times K fits, each (feature, label) has its own column; else they are
        hashed into the table, as VW hashes. Memory: ``3 * 8 * 2**bits`` bytes whatever d and K.
    constant : bool, default True
        Add a constant feature 1 (an intercept per label), as VW does.
    weighting : {"mtr", "none"}, default "none"
        ``"mtr"``: the served label's row is learned with importance weight ``1 / (K p(label))``,
        as VW's squarecb does (``--cb_type mtr`` scales ``1 / p`` by its events per action);
        ``"none"``: ``1 / K``.

    The defaults are the best setting of ``clickboost sweep-defaults squarecb-sgd`` (car, dna,
    nursery, digits; its grid crosses ``gamma_scale`` in {3, 10, 30, 100} with the three
    ``interactions`` and both ``weighting``): mean online error 0.0584, against 0.0741 at VW's
    settings (10, quadratic, mtr) and 0.1047 for VW's own best (``--regcb -q ::``). Issue 50
    widened ``gamma_scale`` to 300 and 1000 (0.0578 and 0.0587 with pairs): 300 ranks first by
    0.0006, less than the shuffles' spread, and the default stays at 100, whose inverse gap
    weighting keeps about three times the exploration mass for the logs' off-policy evaluation.
    """

    gamma_scale: float = Field(100.0, gt=0.0)
    gamma_exponent: float = Field(0.5, ge=0.0, le=1.0)
    eta: float = Field(0.5, gt=0.0)
    interactions: Literal["none", "pairs", "quadratic"] = "pairs"
    bits: int = Field(18, ge=4, le=26)
    constant: bool = True
    weighting: Literal["mtr", "none"] = "none"


#: The click's cost ``1 - reward`` is regressed, as VW's cbify does (cost 0 for the label, 1 else),
#: and predictions are clipped to this range: zero weights predict cost 0, so a label not yet
#: learned looks as good as the best (VW's optimism at the start).
COST_RANGE = (0.0, 1.0)


@learners.register("squarecb-sgd")
class SquareCBSGD(Learner):
    """SquareCB over VW's SGD regression of the click's cost, with hashed pairs (ours; Foster &
    Rakhlin 2020 with VW's ``--cbify K --cb_explore_adf --squarecb -q ::`` regressor).

    Input and rewards: Learns a graded reward as a value (``graded = True``), no coin (issue 50).
    Any feature scale: its updates are normalised per feature (VW's), so multiplying a feature by a
    constant changes nothing it learns (``bench invariance``, docs/BENCHMARKS.md).

    The input ``x`` (dense or hashed, dimension d) is expanded to ``z``: its non-zeros, then with
    ``interactions="pairs"`` each product ``x_i x_j`` at its pair's rank (``d + rank``), with
    ``"quadratic"`` also each square ``x_i^2`` (at ``d + P + i``, ``P`` the pairs), then the
    constant 1. Label ``a``'s row is ``z`` crossed with ``a``: feature ``j`` at column ``j K + a``
    of the weight table, or, when ``dim(z) K`` does not fit, at ``(h(j) + a) mod 2**bits`` with
    ``h`` a hash of ``j`` (VW offsets a feature's hash by the action alike; a colliding entry stays
    an entry of its own, as in VW). Round t: the predicted cost ``c_a = <w, row_a>`` clipped to
    [0, 1], the predicted reward ``r_a = 1 - c_a``, the greedy label ``b`` (first maximiser),
    ``p(a) = 1 / (K + gamma_t (r_b - r_a))`` for ``a != b`` and the rest on ``b`` (Foster &
    Rakhlin 2020, Algorithm 1); sample. Learn: one step of VW's default regression
    (:func:`vw_update`) towards the cost ``1 - reward`` on the served label's row, with importance
    weight ``1 / (K p(label))`` (VW's ``mtr``; ``weighting="none"``: ``1 / K``). Graded rewards are
    learned as they are (``graded = True``).

    Eligible labels: the inverse gap weighting runs over the m eligible labels (K replaced by m);
    ``learn`` is unchanged (its weight is the served label's probability under the mask).

    Ours where beyond the paper: the regressor (VW's, in float64, with the cost range fixed), the
    gaps taken between clipped predictions (VW's explorer takes its regressor's raw scores), the
    crossing of features with labels and the exact columns of small inputs.

    Attributes
    ----------
    w_, g2_, scale_ : ndarray of shape (2**bits,)
        The table: weights, AdaGrad's sums and the normalisation's scales of each column.
    totals_ : ndarray of shape (2,)
        The normalisation's weighted sum of squared norms, and the weights' sum.

    References
    ----------
    Foster & Rakhlin (ICML 2020), SquareCB; Ross, Mineiro & Langford (UAI 2013), normalised
    updates; Karampatziakis & Langford (UAI 2011), importance-invariant updates; VW's ``gd.cc``.

    Examples
    --------
    >>> import numpy as np
    >>> from service.learners import make_learner
    >>> m = make_learner("squarecb-sgd", 3, 2, seed=0)
    >>> x = np.array([1.0, 0.0, 2.0])
    >>> d = m.decide(x, np.random.default_rng(0))
    >>> [float(p) for p in d.probs]  # no data yet: every gap 0, p = 1/K each
    [0.5, 0.5]
    >>> m.learn(x, d, False)  # a miss: the served label's predicted cost rises
    >>> bool(m.scores(x)[d.label] < m.scores(x)[1 - d.label])
    True
    """

    name = "squarecb-sgd"
    graded = True
    kernels = (
        "service.kernels",
        "service.interactions",
        "service.learners.squarecb",
        "service.learners.squarecb_sgd",
    )
    Params = SquareCBSGDParams
    params: SquareCBSGDParams

    @classmethod
    def _extra(cls, n_features: int, interactions: str) -> int:
        """The columns ``interactions`` adds to the input's (before the constant)."""
        pairs = n_features * (n_features - 1) // 2 if interactions != "none" else 0
        return pairs + (n_features if interactions == "quadratic" else 0)

    @classmethod
    def _expanded(cls, n_features: int, params: Mapping[str, Any] | None) -> int:
        """The non-zeros of ``z`` at most: the input's, its pairs (and squares), the constant."""
        interactions = cls.Params.parse(cls.name, params).interactions
        return n_features + cls._extra(n_features, interactions) + 1

    @classmethod
    def event_steps(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """Every label's row of ``z`` scored, one row learned: about ``(K + 1) dim(z)`` steps, with
        ``dim(z)`` quadratic in the non-zeros under pairs (so the budget bounds the pairs of the
        widest request)."""
        return (n_labels + 1) * cls._expanded(n_features, params)

    @classmethod
    def event_nbytes(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """``z`` and a row of it (indices and values) at a time."""
        return 32 * cls._expanded(n_features, params) + super().event_nbytes(n_features, n_labels, params)

    def _init(self) -> None:
        d = self.n_features
        self._pairs = self.params.interactions != "none"
        self._squares = self.params.interactions == "quadratic"
        self._dim = d + self._extra(d, self.params.interactions)  # the constant goes at index _dim
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
        """``z``'s non-zeros: the input's, its pairs' (rank order), its squares', the constant."""
        idx, val, d = input_nonzeros(x)
        if d != self.n_features:
            raise ValueError(f"x has dimension {d}, the model {self.n_features}")
        idx, val = np.asarray(idx, np.int64), np.asarray(val, np.float64)
        parts_i, parts_v = [], []
        if self._pairs:
            parts_i, parts_v = [idx], [val]
            idx, val = pairs_sparse(idx, val, d, d * (d - 1) // 2)
        if self._squares:
            first = parts_i[0]
            idx = np.concatenate((idx, first + (d + d * (d - 1) // 2)))
            val = np.concatenate((val, parts_v[0] * parts_v[0]))
        if self.params.constant:
            idx, val = np.append(idx, self._dim), np.append(val, 1.0)
        return np.ascontiguousarray(idx), np.ascontiguousarray(val)

    def costs(self, x: np.ndarray | SparseVector) -> np.ndarray:
        """Every label's predicted cost, clipped to [0, 1]."""
        idx, val = self._expand(x)
        return np.clip(label_scores(self.w_, idx, val, self.n_labels, self._exact), *COST_RANGE)

    def scores(self, x: np.ndarray | SparseVector) -> np.ndarray:
        """The predicted reward of every label, ``1 - cost``."""
        return 1.0 - self.costs(x)

    def decide(
        self, x: np.ndarray | SparseVector, rng: np.random.Generator, eligible: np.ndarray | None = None
    ) -> Decision:
        r = self.scores(x)
        gamma = self.params.gamma_scale * float(self.t_ + 1) ** self.params.gamma_exponent
        return igw_decision(r, gamma, rng, eligible)

    def _step(self, x: np.ndarray | SparseVector, label: int, reward: bool | float, h: float) -> None:
        """:func:`vw_update` of ``label``'s row towards the cost ``1 - reward`` with weight ``h``."""
        idx, val = self._expand(x)
        cols, vals = label_row(idx, val, self.n_labels, label, self.w_.size, self._exact)
        vw_update(
            self.w_, self.g2_, self.scale_, self.totals_, cols, vals,
            1.0 - float(reward), self.params.eta, h, *COST_RANGE,
        )  # fmt: skip
        self.t_ += 1

    def learn(self, x: np.ndarray | SparseVector, decision: Decision, reward: bool | float) -> None:
        k = self.n_labels
        p = decision.probs[decision.label] if self.params.weighting == "mtr" else 1.0
        self._step(x, decision.label, reward, 1.0 / (k * p))
