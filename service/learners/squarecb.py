"""SquareCB with an exact online ridge-regression oracle per label (ours; Foster & Rakhlin, ICML 2020).

Not one of the seed papers: issue 24's "exploration that uses the scores" direction, built as its
own learner. SquareCB reduces contextual bandits to online square-loss regression: an oracle
predicts each label's click probability, and the label is drawn by *inverse gap weighting*.
Vowpal Wabbit's ``--squarecb`` uses the same rule over its SGD regressor; here the oracle is exact
recursive least squares (ridge regression updated by Sherman-Morrison), one per label, so a label's
scores are the ridge solution on every round it was served, not a gradient step towards it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numba import njit
from pydantic import Field

from service._jit_cache import kernel
from service.kernels import _draw
from service.learners.base import Decision, Learner, Params, as_mask, learners

_OPTS = {"cache": True, "nogil": True, "boundscheck": False}


@njit(inline="always", **_OPTS)
def _score(theta: np.ndarray, a: int, x: np.ndarray, constant: bool) -> float:
    """``<theta[a], (x, 1)>`` (the constant term last when ``constant``), summed in index order."""
    s = 0.0
    for j in range(x.size):
        s += theta[a, j] * x[j]
    if constant:
        s += theta[a, x.size]
    return s


@kernel(
    "Tuple((int64, int64, float64[::1]))(float64[:, ::1], float64[::1], boolean, float64, float64)",
)
def igw_sample(
    theta: np.ndarray, x: np.ndarray, constant: bool, gamma: float, u: float
) -> tuple[int, int, np.ndarray]:
    """The greedy label (first maximiser of the predicted clicks), the label drawn by the uniform
    ``u`` and the inverse-gap-weighted distribution (Foster & Rakhlin 2020, Algorithm 1):
    ``p(a) = 1 / (K + gamma (r_best - r_a))`` for ``a != best`` and the rest on ``best``."""
    if x.size + constant != theta.shape[1]:  # the loops below read theta without bounds checks
        raise ValueError("x has the wrong dimension")
    k = theta.shape[0]
    r = np.empty(k)
    best = 0
    for a in range(k):
        r[a] = _score(theta, a, x, constant)
        if r[a] > r[best]:
            best = a
    p = np.empty(k)
    rest = 0.0
    for a in range(k):
        if a != best:
            p[a] = 1.0 / (k + gamma * (r[best] - r[a]))
            rest += p[a]
    p[best] = 1.0 - rest
    return best, _draw(p, u), p


@kernel(
    "Tuple((int64, int64, float64[::1]))"
    "(float64[:, ::1], float64[::1], boolean, float64, float64, boolean[::1])",
)
def igw_sample_masked(
    theta: np.ndarray, x: np.ndarray, constant: bool, gamma: float, u: float, eligible: np.ndarray
) -> tuple[int, int, np.ndarray]:
    """:func:`igw_sample` over the eligible labels only: the best eligible label ``b`` (first
    maximiser among them), ``p(a) = 1 / (m + gamma (r_b - r_a))`` for the other eligible ``a`` (m
    eligible labels in place of K), the rest on ``b``, 0 outside the set, and the drawn label."""
    if x.size + constant != theta.shape[1] or eligible.size != theta.shape[0]:
        raise ValueError("x or eligible has the wrong dimension")
    k = theta.shape[0]
    r = np.zeros(k)
    for a in range(k):
        if eligible[a]:
            r[a] = _score(theta, a, x, constant)
    return igw_scores(r, gamma, u, eligible)


@kernel("Tuple((int64, int64, float64[::1]))(float64[::1], float64, float64, boolean[::1])")
def igw_scores(r: np.ndarray, gamma: float, u: float, eligible: np.ndarray) -> tuple[int, int, np.ndarray]:
    """Inverse gap weighting over the ``m`` eligible entries of the predicted rewards ``r``: ``b``
    the first maximiser among them, ``p(a) = 1 / (m + gamma (r_b - r_a))`` for the other eligible
    ``a``, the rest on ``b``, 0 outside the set; ``b``, the index drawn by the uniform ``u``, ``p``.
    Also the action-feature SquareCB's rule (:mod:`service.learners.squarecb_adf`)."""
    k = r.size
    best, m = -1, 0
    for a in range(k):
        if eligible[a]:
            m += 1
            if best < 0 or r[a] > r[best]:
                best = a
    p = np.zeros(k)
    rest = 0.0
    for a in range(k):
        if eligible[a] and a != best:
            p[a] = 1.0 / (m + gamma * (r[best] - r[a]))
            rest += p[a]
    p[best] = 1.0 - rest
    label = _draw(p, u)
    if p[label] == 0.0:  # _draw's cap at K - 1 on an ineligible last label: the last eligible one
        for a in range(k):
            if p[a] > 0.0:
                label = a
    return best, label, p


def igw_decision(
    r: np.ndarray, gamma: float, rng: np.random.Generator, eligible: np.ndarray | None
) -> Decision:
    """:func:`igw_scores` of the predicted rewards ``r`` over the ``eligible`` entries (None: all)
    as a :class:`Decision` whose memo holds the greedy entry (and the mask, when there is one)."""
    mask = as_mask(eligible, r.size)
    allowed = np.ones(r.size, dtype=np.bool_) if mask is None else np.ascontiguousarray(mask)
    greedy, label, p = igw_scores(r, gamma, rng.random(), allowed)
    memo = {"greedy": greedy} if mask is None else {"greedy": greedy, "eligible": mask}
    return Decision(p, label, memo)


@kernel("void(float64[:, :, ::1], float64[:, ::1], int64, float64[::1], boolean, float64)")
def ridge_update(
    A_inv: np.ndarray, theta: np.ndarray, a: int, x: np.ndarray, constant: bool, y: float
) -> None:
    """Recursive least squares for label ``a`` on ``(x, y)``: with ``u = A^-1 x`` and ``s = x' u``,
    ``theta += u (y - theta' x) / (1 + s)`` and ``A^-1 -= u u' / (1 + s)`` (Sherman-Morrison).

    ``A^-1`` stays exactly symmetric: entry (i, j) subtracts ``(u_i u_j) w``, the same floats as
    entry (j, i). Zeros of ``x`` are skipped in ``A^-1 x`` (a sparse row costs O(D nnz) there).
    """
    d = x.size
    n = theta.shape[1]
    if d + constant != n or a < 0 or a >= theta.shape[0]:
        raise ValueError("x has the wrong dimension, or the label is out of range")
    u = np.zeros(n)
    for j in range(d):
        v = x[j]
        if v != 0.0:
            for i in range(n):
                u[i] += A_inv[a, i, j] * v
    if constant:
        for i in range(n):
            u[i] += A_inv[a, i, d]
    s = 0.0
    for j in range(d):
        s += x[j] * u[j]
    if constant:
        s += u[d]
    w = 1.0 / (1.0 + s)
    e = (y - _score(theta, a, x, constant)) * w
    for i in range(n):
        ui = u[i]
        for j in range(n):
            A_inv[a, i, j] -= (ui * u[j]) * w
        theta[a, i] += ui * e


class SquareCBParams(Params):
    """Hyperparameters of :class:`SquareCB`.

    Parameters
    ----------
    gamma_scale, gamma_exponent : float, default 10 and 0.5
        The learning rate of the inverse gap weighting, ``gamma_t = gamma_scale t^gamma_exponent``
        with ``t`` the feedback events applied plus one (Vowpal Wabbit's ``--gamma_scale`` and
        ``--gamma_exponent``, whose defaults these are too). Larger: greedier.
    ridge : float, default 3
        The ridge ``lambda`` of each label's regression: ``A = lambda I + sum x x'``.
    constant : bool, default True
        Append a constant feature 1 (an intercept per label), as Vowpal Wabbit does.

    The defaults are the best setting of ``clickboost sweep-defaults`` (car, dna, nursery): its grid
    crosses ``gamma_scale`` in {3, 10, 30, 100} with ``ridge`` in {0.3, 1, 3}.
    """

    gamma_scale: float = Field(10.0, gt=0.0)
    gamma_exponent: float = Field(0.5, ge=0.0, le=1.0)
    ridge: float = Field(3.0, gt=0.0)
    constant: bool = True


@learners.register("squarecb")
class SquareCB(Learner):
    """SquareCB (ours): inverse gap weighting over per-label ridge regressions of the click.

    Input and rewards: Learns a graded reward as a value (``graded = True``), no coin (issue 50).
    Needs input scaled to about [-1, 1]: what it learns changes with a feature's unit, so one raw
    number (a price, a count) beside one-hot features hurts it (``bench invariance``,
    docs/BENCHMARKS.md). Its ridge penalty weighs every feature's weight alike.

    Round t: each label's predicted click ``r_a = <theta_a, x>``, the greedy label ``b`` (first
    maximiser), ``p(a) = 1 / (K + gamma_t (r_b - r_a))`` for ``a != b`` and ``p(b)`` the rest
    (Foster & Rakhlin 2020, Algorithm 1, with predicted rewards instead of losses); sample. Learn:
    the served label's regression takes ``(x, click)`` exactly (recursive least squares); the
    others are untouched. Not from the seed papers; the regression oracle is the textbook ridge
    estimator ``theta_a = A_a^-1 sum_{rounds a served} click x`` with ``A_a = ridge I + sum x x'``.

    Graded rewards (issue 38): the regression takes the reward value itself in place of the click
    (``graded = True``); a reward of 0 or 1 is the click bit.

    Eligible labels (ours): the inverse gap weighting runs over the m eligible labels (``K`` replaced
    by m, ``b`` the best eligible label), 0 elsewhere. The regression learns the served label's
    click as before; it needs no probability, so the mask changes nothing in ``learn``.

    Memory is ``K D^2`` floats (``D = d + 1`` with the constant), so this learner is for dense
    inputs of up to a few thousand features; the service refuses a model beyond its state budget.

    Attributes
    ----------
    A_inv_ : ndarray of shape (K, D, D)
        Each label's inverse regularised Gram matrix, initially ``I / ridge``.
    theta_ : ndarray of shape (K, D)
        Each label's ridge solution, initially 0.

    References
    ----------
    D. Foster, A. Rakhlin. Beyond UCB: optimal and efficient contextual bandits with regression
    oracles. ICML 2020.

    Examples
    --------
    >>> import numpy as np
    >>> from service.learners import make_learner
    >>> m = make_learner("squarecb", 2, 3, seed=0)
    >>> d = m.decide(np.array([1.0, 0.0]), np.random.default_rng(0))
    >>> [round(float(p), 6) for p in d.probs]  # no data yet: every gap 0, p = 1/K each
    [0.333333, 0.333333, 0.333333]
    """

    name = "squarecb"
    graded = True
    kernels = ("service.learners.squarecb",)
    Params = SquareCBParams
    params: SquareCBParams

    @classmethod
    def event_steps(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """A decision scores every label, ``K (d + 1)``; a learn updates one label's ``(d + 1)^2``
        inverse (Sherman-Morrison: a product and a rank-one update)."""
        n = n_features + 1
        return n_labels * n + 2 * n * n

    def _init(self) -> None:
        n = self.n_features + int(self.params.constant)
        self.A_inv_ = np.repeat((np.eye(n) / self.params.ridge)[None], self.n_labels, axis=0)
        self.theta_ = np.zeros((self.n_labels, n))

    def _gamma(self) -> float:
        return self.params.gamma_scale * float(self.t_ + 1) ** self.params.gamma_exponent

    def decide(self, x: np.ndarray, rng: np.random.Generator, eligible: np.ndarray | None = None) -> Decision:
        x = np.ascontiguousarray(x, dtype=np.float64)
        mask = as_mask(eligible, self.n_labels)
        if mask is not None:
            greedy, label, p = igw_sample_masked(
                self.theta_, x, self.params.constant, self._gamma(), rng.random(), np.ascontiguousarray(mask)
            )
            return Decision(p, label, {"greedy": greedy, "eligible": mask})
        greedy, label, p = igw_sample(self.theta_, x, self.params.constant, self._gamma(), rng.random())
        return Decision(p, label, {"greedy": greedy})

    def learn(self, x: np.ndarray, decision: Decision, reward: bool | float) -> None:
        x = np.ascontiguousarray(x, dtype=np.float64)
        y = float(reward)
        ridge_update(self.A_inv_, self.theta_, decision.label, x, self.params.constant, y)
        self.t_ += 1  # after the update: a refused row is not an event
