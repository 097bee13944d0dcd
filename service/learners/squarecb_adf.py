"""SquareCB over candidate actions with features (issues 39 and 50): Vowpal Wabbit's
``--cb_explore_adf --squarecb`` on VW's own regressor.

Foster & Rakhlin (ICML 2020) reduce contextual bandits to online square-loss regression; VW's
``--cb_explore_adf --squarecb`` runs that reduction over its default regressor (``gd.cc``: adaptive,
normalised and importance-invariant SGD), regressing each shown action's cost with ``--cb_type mtr``.
This learner does the same over the rows of :mod:`service.actions` (which hold what VW's ``-q``
between a shared context namespace and an action namespace holds: the constant, the context's and
the action's own features and their products), with VW's regression step
:func:`service.learners.squarecb_sgd.vw_update` (checked against the ``vowpalwabbit`` package
itself: tests/service/learners/test_squarecb_adf.py). Normalised updates make it learn the same
from a feature whatever its unit (Ross, Mineiro & Langford 2013): a price in cents or in dollars.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from service.actions import ActionInput, row_scores
from service.learners.action_base import ActionLearner
from service.learners.base import Decision, Params, learners
from service.learners.squarecb import igw_decision
from service.learners.squarecb_sgd import COST_RANGE, vw_update

#: The column of the rows' constant entry (1 x 1): the pair of ids (0, 0) hashes to 0
#: (:func:`service.actions.action_rows`; SplitMix64's finaliser maps 0 to 0).
CONSTANT_COLUMN = 0


class SquareCBADFParams(Params):
    """Hyperparameters of :class:`SquareCBADF`.

    Parameters
    ----------
    gamma_scale, gamma_exponent : float, default 300 and 0.5
        ``gamma_t = gamma_scale t^gamma_exponent``, ``t`` the events learned (VW's
        ``--gamma_scale`` and ``--gamma_exponent``; VW's defaults are 10 and 0.5). Larger:
        greedier. 300: the best of ``bench actions``' sweep on its tuning streams (100 to 3000, with
        and without context pairs; docs/BENCHMARKS.md, "Tuning streams").
    eta : float, default 0.5
        The regression's learning rate (VW's ``-l``, default 0.5).
    context_pairs : int, default 0
        Most context non-zeros for which the rows also get every context pair times the action's
        features and the constant (``c_i c_j a_k``, :func:`service.actions.action_rows`; VW offers
        the like as ``--interactions uua``). 0: none. With a bound of 16 they won about 5 points of
        reward on the tuning stream whose reward needs them (``dayparts``) and lost about 2 on each
        of the others, so the default leaves them out; a caller who knows such a structure sets it.
    """

    gamma_scale: float = Field(300.0, gt=0.0)
    gamma_exponent: float = Field(0.5, ge=0.0, le=1.0)
    eta: float = Field(0.5, gt=0.0)
    context_pairs: int = Field(0, ge=0, le=1000)

    omit_at: ClassVar[dict[str, Any]] = {"context_pairs": 0}


@learners.register("squarecb-adf")
class SquareCBADF(ActionLearner):
    """SquareCB over candidate actions on VW's regressor (ours as a service learner; Foster & Rakhlin
    2020 as VW's ``--cb_explore_adf --squarecb`` runs it).

    Input and rewards: Learns a graded reward as a value (``graded = True``), no coin (issue 50).
    Any feature scale but for hash collisions: its updates are normalised per column (VW's), so
    multiplying a feature by a constant changes nothing it learns unless the feature shares its
    hashed column with another of another unit (``bench invariance``: data sets posed as actions at
    2**18 columns; more ``hashing_bits`` make that rarer).

    Decide: each candidate's predicted cost ``c_a = <w, row_a>`` (:mod:`service.actions`, the rows
    with their context-only block, as VW's shared features are in every action's line), the greedy
    candidate ``b`` (first minimiser), ``p(a) = 1 / (n + gamma_t (c_a - c_b))`` for ``a != b``
    and the rest on ``b`` (:func:`service.learners.squarecb.igw_scores`), ``gamma_t`` with ``t``
    the events learned (VW's counter: the first decision is uniform); sample. The gaps are taken
    between the raw predictions, as VW's explorer takes them.

    Learn: one step of VW's regression (:func:`service.learners.squarecb_sgd.vw_update`, its
    prediction clipped to the costs' range [0, 1]) towards the cost ``1 - reward`` on the shown
    candidate's row, from zero weights (every candidate starts at cost 0: VW's optimism), with
    VW's ``mtr`` importance weight: ``--squarecb`` sets the probability to 1, so the weight is
    ``events / candidates``, both summed over every event learned (VW's ``event_sum`` and
    ``action_sum``). Graded rewards are learned as values (``graded = True``): no coin is drawn.

    Eligible candidates: the inverse gap weighting runs over the m eligible ones (``n`` replaced by
    m); ``learn`` needs no mask.

    Attributes
    ----------
    w_, g2_, scale_ : ndarray of shape (2**b,)
        The regression's weights, AdaGrad's sums and the normalisation's scales per column.
    totals_ : ndarray of shape (2,)
        The normalisation's weighted sum of squared norms, and the weights' sum.
    counts_ : ndarray of shape (2,)
        Events learned and the candidates they had (the importance weight's ratio).

    References
    ----------
    D. Foster, A. Rakhlin. Beyond UCB: optimal and efficient contextual bandits with regression
    oracles. ICML 2020. S. Ross, P. Mineiro, J. Langford. Normalized online learning. UAI 2013.
    N. Karampatziakis, J. Langford. Online importance weight aware updates. UAI 2011. VW's
    ``cb_explore_adf_squarecb.cc``, ``cb_adf.cc`` (``learn_MTR``) and ``gd.cc``.

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
    >>> m.learn(x, d, 0.0)  # reward 0: the shown candidate's cost rises
    >>> bool(m.costs(x)[d.label] > m.costs(x)[1 - d.label])
    True
    """

    name = "squarecb-adf"
    graded = True
    #: 2: VW's regression of the cost (``counts_`` added); 1 regressed the reward with the NAG
    #: paper's rates (:meth:`upgrade_state`).
    schema_version = 2
    kernels = (
        "service.kernels",
        "service.actions",
        "service.learners.squarecb",
        "service.learners.squarecb_sgd",
    )
    Params = SquareCBADFParams
    params: SquareCBADFParams

    def _init(self) -> None:
        self.w_ = np.zeros(self.n_features)
        self.g2_ = np.zeros(self.n_features)
        self.scale_ = np.zeros(self.n_features)
        self.totals_ = np.zeros(2)
        self.counts_ = np.zeros(2)

    def upgrade_state(self, state: dict[str, Any], version: int) -> None:
        """A model stored under schema 1 regressed the reward ``r = <w, row>``; its predictions
        carry over as costs ``1 - r``: ``w`` negated and 1 added at the constant's column (every
        row holds the constant 1 there; a product colliding with it shifts by its weight's share).
        AdaGrad's sums, the scales and the totals mean what they meant; the counts start afresh."""
        del version
        w = np.asarray(state["w_"], dtype=np.float64)
        state["w_"] = -w
        state["w_"][CONSTANT_COLUMN] += 1.0
        state["counts_"] = np.zeros(2)

    def costs(self, x: ActionInput) -> np.ndarray:
        """Every candidate's predicted cost, raw (not clipped)."""
        return row_scores(self.w_, *x.rows(True, self.params.context_pairs))

    def decide(
        self, x: ActionInput, rng: np.random.Generator, eligible: np.ndarray | None = None
    ) -> Decision:
        gamma = self.params.gamma_scale * float(self.t_) ** self.params.gamma_exponent
        # -cost: the gaps r_b - r_a are the costs' differences exactly (1 - cost would round them)
        return igw_decision(-self.costs(x), gamma, rng, eligible)

    def learn(self, x: ActionInput, decision: Decision, reward: bool | float) -> None:
        idx, val = x.row(decision.label, True, self.params.context_pairs)
        self.counts_ += (1.0, x.n)
        h = self.counts_[0] / self.counts_[1]
        vw_update(
            self.w_, self.g2_, self.scale_, self.totals_, np.ascontiguousarray(idx),
            np.ascontiguousarray(val), 1.0 - float(reward), self.params.eta, h, *COST_RANGE,
        )  # fmt: skip
        self.t_ += 1
