"""SquareCB over candidate actions with features (issue 39): inverse gap weighting over an online
normalised adaptive SGD regression of the reward on each candidate's row.

Foster & Rakhlin (ICML 2020) reduce contextual bandits to online square-loss regression; Vowpal
Wabbit's ``--cb_explore_adf --squarecb`` runs that reduction over its default regressor, SGD with
adaptive (AdaGrad), normalised (Ross, Mineiro & Langford 2013) and importance-invariant
(Karampatziakis & Langford 2011) updates. This learner does the same over the rows of
:mod:`service.actions`, with the regression of :func:`nag_update` (ours where it departs from VW's
``gd.cc``: float64 weights, the prediction not clipped to the labels' range, rewards rather than
costs, and the normalised rates of the NAG paper, where VW at ``--power_t 0.5`` takes the square
root of the multiplier and one power of the scale; :func:`service.learners.squarecb_sgd.vw_update`
is VW's own, found in issue 41, which this learner has not been re-tuned for).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from service._jit_cache import kernel
from service.actions import ActionInput, row_scores
from service.learners.action_base import ActionLearner
from service.learners.base import Decision, Params, learners
from service.learners.squarecb import igw_decision


@kernel(
    "void(float64[::1], float64[::1], float64[::1], float64[::1], int64[:], float64[:], float64, float64,"
    " float64)"
)
def nag_update(
    w: np.ndarray,
    g2: np.ndarray,
    scale: np.ndarray,
    totals: np.ndarray,
    idx: np.ndarray,
    val: np.ndarray,
    y: float,
    eta: float,
    h: float,
) -> None:
    """One square-loss step of normalised adaptive invariant SGD (after VW's ``gd.cc``, with the NAG
    paper's rates: see the module docstring) towards ``y`` on the row ``(idx, val)`` with importance
    weight ``h`` (1: an unweighted row, the same bits as without the weight).

    1. Normalisation (Ross, Mineiro & Langford 2013, NAG): each column keeps the largest ``|x_i|``
       seen, ``scale_i``; when a row exceeds it, ``w_i`` is scaled by ``scale_i / |x_i|`` first.
       ``totals = [sum of h ||x / scale||^2 over rows, sum of h]``.
    2. The prediction ``p = <w, x>`` and the gradient ``g = 2 (p - y)``; nothing moves when ``p = y``.
    3. AdaGrad (Duchi, Hazan & Singer 2011): ``g2_i += h (g x_i)^2``; a column's rate is
       ``1 / (sqrt(g2_i) scale_i^2)``.
    4. The importance-invariant step of the square loss (Karampatziakis & Langford 2011), with
       ``eta_t = eta rows / sum ||x / scale||^2`` and the row's sensitivity ``s = sum x_i^2 rate_i``:
       ``w_i += (y - p) (1 - exp(-2 eta_t h s)) / s * x_i rate_i`` (``2 eta_t h (y - p)`` in
       place of the fraction when ``eta_t h s < 1e-6``, its limit).
    """
    norm_x = 0.0
    for t in range(idx.size):
        i, v = idx[t], abs(val[t])
        if v > scale[i]:
            if scale[i] > 0.0:
                w[i] *= scale[i] / v
            scale[i] = v
        norm_x += (v / scale[i]) * (v / scale[i])
    totals[0] += h * norm_x
    totals[1] += h
    p = 0.0
    for t in range(idx.size):
        p += w[idx[t]] * val[t]
    if p == y:
        return
    g = 2.0 * (p - y)
    sens = 0.0
    for t in range(idx.size):
        i, v = idx[t], val[t]
        g2[i] += ((g * v) * (g * v)) * h
        sens += v * v / (math.sqrt(g2[i]) * scale[i] * scale[i])
    eta_t = eta * totals[1] / totals[0]
    eta_h = eta_t * h
    if eta_h * sens < 1e-6:
        step = 2.0 * eta_h * (y - p)
    else:
        step = (y - p) * (1.0 - math.exp(-2.0 * eta_h * sens)) / sens
    for t in range(idx.size):
        i, v = idx[t], val[t]
        w[i] += step * v / (math.sqrt(g2[i]) * scale[i] * scale[i])


class SquareCBADFParams(Params):
    """Hyperparameters of :class:`SquareCBADF`.

    Parameters
    ----------
    gamma_scale, gamma_exponent : float, default 10 and 0.5
        ``gamma_t = gamma_scale t^gamma_exponent``, ``t`` the events applied plus one (Vowpal
        Wabbit's ``--gamma_scale`` and ``--gamma_exponent`` and their defaults). Larger: greedier.
    eta : float, default 0.5
        The regression's learning rate (VW's ``-l``, default 0.5).
    context_pairs : int, default 0
        Most context non-zeros for which the rows also get every context pair times the action's
        features and the constant (:func:`service.actions.action_rows`; ours, as ``cova-adf``'s).
        0: none.
    """

    gamma_scale: float = Field(10.0, gt=0.0)
    gamma_exponent: float = Field(0.5, ge=0.0, le=1.0)
    eta: float = Field(0.5, gt=0.0)
    context_pairs: int = Field(0, ge=0, le=1000)

    omit_at: ClassVar[dict[str, Any]] = {"context_pairs": 0}


@learners.register("squarecb-adf")
class SquareCBADF(ActionLearner):
    """SquareCB over candidate actions (ours as a service learner; Foster & Rakhlin 2020 with VW's
    ``--cb_explore_adf --squarecb`` regressor).

    Decide: each candidate's predicted reward ``r_a = <w, row_a>`` (:mod:`service.actions`), the
    greedy candidate ``b`` (first maximiser) and ``p(a) = 1 / (n + gamma_t (r_b - r_a))`` for
    ``a != b``, the rest on ``b`` (:func:`service.learners.squarecb.igw_scores`); sample. Learn:
    one step of the regression towards the reward on the shown candidate's row
    (:func:`nag_update`); no probability is needed. Graded rewards are learned as they are
    (``graded = True``).

    Eligible candidates: the inverse gap weighting runs over the m eligible ones (``n`` replaced by
    m); the regression learns the shown candidate's reward, so ``learn`` needs no mask.

    Attributes
    ----------
    w_ : ndarray of shape (2**b,)
        The regression's weights.
    g2_ : ndarray of shape (2**b,)
        AdaGrad's sums of squared gradients per column.
    scale_ : ndarray of shape (2**b,)
        The largest ``|x_i|`` seen per column (normalisation).
    totals_ : ndarray of shape (2,)
        The sum of the rows' normalised squared norms, and the rows learned.

    References
    ----------
    D. Foster, A. Rakhlin. Beyond UCB: optimal and efficient contextual bandits with regression
    oracles. ICML 2020. S. Ross, P. Mineiro, J. Langford. Normalized online learning. UAI 2013.
    N. Karampatziakis, J. Langford. Online importance weight aware updates. UAI 2011.

    Examples
    --------
    >>> import numpy as np
    >>> from service.actions import ActionFeaturiser
    >>> from service.learners import make_learner
    >>> f = ActionFeaturiser(8, 100, 10)
    >>> x = f({"user": "a"}, [{"id": "x", "features": {"k": "1"}}, {"id": "y", "features": {"k": "2"}}])
    >>> m = make_learner("squarecb-adf", 256, 1)
    >>> d = m.decide(x, np.random.default_rng(0))
    >>> [float(p) for p in d.probs]  # no data yet: every gap 0, p = 1/n each
    [0.5, 0.5]
    """

    name = "squarecb-adf"
    graded = True
    kernels = (
        "service.kernels",
        "service.actions",
        "service.learners.squarecb",
        "service.learners.squarecb_adf",
    )
    Params = SquareCBADFParams
    params: SquareCBADFParams

    def _init(self) -> None:
        self.w_ = np.zeros(self.n_features)
        self.g2_ = np.zeros(self.n_features)
        self.scale_ = np.zeros(self.n_features)
        self.totals_ = np.zeros(2)

    def decide(
        self, x: ActionInput, rng: np.random.Generator, eligible: np.ndarray | None = None
    ) -> Decision:
        indptr, idx, val = x.rows(True, self.params.context_pairs)
        r = row_scores(self.w_, indptr, idx, val)
        gamma = self.params.gamma_scale * float(self.t_ + 1) ** self.params.gamma_exponent
        return igw_decision(r, gamma, rng, eligible)

    def learn(self, x: ActionInput, decision: Decision, reward: bool | float) -> None:
        idx, val = x.row(decision.label, True, self.params.context_pairs)
        nag_update(
            self.w_, self.g2_, self.scale_, self.totals_, idx, val, float(reward), self.params.eta, 1.0
        )
        self.t_ += 1
