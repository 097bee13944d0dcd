"""AdaBandit (Zhang, Jung, Tewari, AISTATS 2019, Algorithm 3; seed 001, ALGORITHMS.md §2.7)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import Field

from service.learners.base import Decision, as_mask, learners, masked_decision
from service.learners.booster_costs import BanditTreeBoosterParams, TreeBooster, masked_rows_argmax
from service.learners.booster_kernels import (
    adabandit_decide,
    adabandit_learn,
    adabandit_learn_args,
    adabandit_logistic_parts,
    hedge_draw,
)


class AdaBanditParams(BanditTreeBoosterParams):
    """Hyperparameters of :class:`AdaBandit` (see :class:`BanditTreeBoosterParams`).

    Parameters
    ----------
    rho : float, default 0.01
        Exploration rate of eq. (2) (see :class:`BanditTreeBoosterParams`).
    lr_scale : float, default 10
        The constant ``c`` of the alpha learning rate ``eta_t = c rho / (k^2 sqrt t)`` (ALGORITHMS.md
        §2.7: the paper's rate has the form ``Theta(rho / (k^2 sqrt t))``; ``c = 1`` is the reference
        code's rate).

    N = 20, rho = 0.01, c = 10 were the best setting of ``clickboost sweep-defaults`` on car, dna
    and nursery; on the four tuning sets (digits added) with the trees' split schedule of the
    defaults, N = 50 with c = 1 ranks first by less than the standard error of the difference, at
    about three times the CPU time, so N = 20 stays (docs/BENCHMARKS.md). The grid stops at rho =
    0.01 (lab/sweep.py says why). The trees' split schedule at the defaults is ours
    (:class:`BanditTreeBoosterParams`, issue 41).
    """

    rho: float = Field(0.01, gt=0.0, lt=1.0)
    lr_scale: float = Field(10.0, gt=0.0)


def expert_marginal(
    votes: np.ndarray, v: np.ndarray, rho: float, mask: np.ndarray | None = None
) -> np.ndarray:
    """The distribution of AdaBandit's label over its expert draw and the experts' tie-breaks: expert
    ``i`` drawn with probability ``v_i / sum v`` predicts a label uniform over the maximisers of
    ``votes[i]`` (among the eligible labels of ``mask``) and the label is drawn from eq. (2)'s mix
    around it. Per expert that is :func:`~service.learners.base.tie_marginal`, ``rho / (m - 1)`` on
    the m eligible labels plus ``(1 - rho - rho / (m - 1)) / t_i`` on its t_i tied ones (``rho``
    capped at ``(m - 1) / m`` under a mask), and the experts' are averaged with their weights."""
    k = votes.shape[1]
    allowed = np.ones(k, dtype=bool) if mask is None else mask
    m = int(allowed.sum())
    rho = rho if mask is None else min(rho, (m - 1) / m)
    off = rho / (m - 1) if m > 1 else 0.0
    masked = np.where(allowed, votes, -np.inf)
    ties = allowed & (masked == masked.max(axis=1, keepdims=True))
    w = v / v.sum()
    return np.where(allowed, off, 0.0) + ((w / ties.sum(axis=1)) * (1.0 - rho - off)) @ ties


@learners.register("adabandit")
class AdaBandit(TreeBooster):
    """Adaptive online boosting from bandit feedback with Hoeffding-tree weak learners.

    Input and rewards: Learns a click bit: a graded reward reaches it as a Bernoulli(reward) bit
    (:func:`service.sampling.reward_bit`), unbiased but noisier than the value (issue 50). Needs
    input scaled to about [-1, 1]: what it learns changes with a feature's unit, so one raw number
    (a price, a count) beside one-hot features hurts it (``bench invariance``, docs/BENCHMARKS.md).

    Decide (Algorithm 1 with Algorithm 3's settings): tree ``i`` predicts ``l^i`` (randargmax of its
    class distribution); votes ``s^i = sum_{j <= i} alpha^j e_{l^j}``; expert ``i`` predicts
    ``randargmax s^i``; an expert index ``i_t`` is drawn with probability ``v^i / sum v``; its
    prediction is the greedy label ``yhat`` explored with eq. (2).

    Reported probabilities (issue 50): ``probs`` is the label's distribution over the expert draw and
    the experts' tie-breaks given the trees' votes (:func:`expert_marginal`; a new model, whose
    ``alpha`` is 0, ties every expert on every label: 1/K each). Eq. (2)'s mix around ``yhat``, which
    estimator (4) divides by (the paper's ``p_t`` is the mix given the drawn expert), is kept in
    ``memo["conditional"]``. The trees' own tie-breaks (a leaf that has seen nothing ties its
    labels) are conditioned on, not averaged over: those draws are independent of the reward, so
    ``probs`` remains a valid propensity for IPS, but with trees tied and ``alpha`` not 0 it is not
    the marginal over them (an exact one sums over up to ``K^N`` vote vectors).

    Learn from the click bit: ``ell_hat`` by eq. (4) and ``iota_hat = 1 - ell_hat``; tree ``i`` gets
    the cost vector ``Gamma^i iota_hat`` (eqs. (5), (10) at ``s^{i-1}``) through the (label, weight)
    reduction of §2.8; ``alpha^i`` takes a projected SGD step (11) with the correct derivative and
    ``eta_t = lr_scale * rho / (k^2 sqrt t)``; Hedge with rate 1 on ``ell_hat[yhat^i]`` in the log domain.

    Graded rewards (issue 38): its update is built on the click bit, so it learns the Bernoulli(r)
    bit the runtime draws for a reward r in (0, 1) from the decision id
    (:func:`service.sampling.reward_bit`, ``graded = False``): unbiased for the reward in expectation.

    Eligible labels (ours): every tree's prediction ``l^i`` and every expert's is its random argmax
    over the eligible labels (a tree whose favourite is ineligible votes for its next best), so
    ``yhat`` and the experts Hedge scores are eligible, and eq. (2) spreads ``rho`` over the m
    eligible labels (``rho`` capped at ``(m-1)/m``). Estimator (4) divides by those probabilities
    and is unbiased for every true label in the set; the costs (10) are taken at the masked votes.

    All quantities of the round (weak predictions, ``alpha``, votes, expert predictions and index)
    come from the decision memo, so the update is exact even when the model moved since the decision.
    The SGD step is applied to the current ``alpha`` with the gradient taken at the decision's.

    Attributes
    ----------
    alpha_ : ndarray of shape (N,)
        Learner weights in [-2, 2], initially 0.
    log_v_ : ndarray of shape (N,)
        Log expert weights (maximum 0), initially 0.

    References
    ----------
    D. Zhang, Y. H. Jung, A. Tewari. Online multiclass boosting with bandit feedback. AISTATS 2019.

    Examples
    --------
    >>> import numpy as np
    >>> from service.learners import make_learner
    >>> m = make_learner("adabandit", 2, 3, {"n_learners": 4, "rho": 0.3}, seed=0)
    >>> d = m.decide(np.array([0.0, 1.0]), np.random.default_rng(0))
    >>> round(float(d.probs.max()), 6), float(d.conditional.max())  # new: every expert ties
    (0.333333, 0.7)
    >>> sorted(d.memo)
    ['alpha', 'conditional', 'expert', 'experts', 'greedy', 'leaves', 'tree_nodes', 'votes', 'weak']
    """

    name = "adabandit"
    kernels = ("service.kernels", "service.learners.booster_kernels", "service.learners.weak.forest_kernels")
    Params = AdaBanditParams
    params: AdaBanditParams

    @classmethod
    def event_steps(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """Each learn builds the N (K, K) logistic cost matrices and multiplies them (numpy):
        about 40 N K^2 steps (55-85 ms at N = 20, K = 300 on the loaded test machine)."""
        n = cls.Params.parse(cls.name, params).n_learners
        return 40 * n * n_labels**2 + n * (n_features + n_labels)

    @classmethod
    def event_nbytes(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """Two (N, K, K) float64 arrays per learn (the cost matrices and their off-diagonal part)."""
        n = cls.Params.parse(cls.name, params).n_learners
        return 16 * n * n_labels**2 + super().event_nbytes(n_features, n_labels, params)

    def _init(self) -> None:
        super()._init()
        self.alpha_ = np.zeros(self.params.n_learners)
        self.log_v_ = np.zeros(self.params.n_learners)
        self._scratch: tuple[np.ndarray, ...] | None = None

    #: Most array elements of a learn event's scratch kept between events (about 0.5 MB); a wider
    #: model allocates it per event, where the allocations are a small share of the arithmetic
    SCRATCH_KEPT = 65_536

    def _learn_scratch(self) -> tuple[np.ndarray, ...]:
        """The arrays a learn event's kernels and numpy calls write (ell, iota, z, tanh z, G, off,
        on, onsum, G iota, off iota): scratch, not state. Kept between events for a small model
        (each array returned to Python or allocated by numpy cost a microsecond of a ~35 us event
        on car, issue 41), made afresh for a wide one."""
        if self._scratch is not None:
            return self._scratch
        n, k = self.params.n_learners, self.n_labels
        per = n * (k * (k - 1) // 2 + k)
        arrays = (
            np.empty(k), np.empty(k), np.empty(per), np.empty(per), np.empty((n, k, k)), np.empty((n, k)),
            np.empty((n, k)), np.empty(n), np.empty((n, k)), np.empty(n),
        )  # fmt: skip
        if sum(a.size for a in arrays) <= self.SCRATCH_KEPT:
            self._scratch = arrays
        return arrays

    def decide(self, x: np.ndarray, rng: np.random.Generator, eligible: np.ndarray | None = None) -> Decision:
        mask = as_mask(eligible, self.n_labels)
        if mask is not None:
            return self._decide_masked(x, rng, mask)
        # the draws of the round in one go, in their order: a random argmax per tree, then per expert
        # (two rand_rows_argmax calls), the expert (sample(v / v.sum(), rng)), then the label
        n, k = self.params.n_learners, self.n_labels
        U = rng.random(2 * n * k + 2)
        p, weak, leaves = np.empty(k), np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        votes, experts = np.empty((n, k)), np.empty(n, dtype=np.int64)
        v = np.exp(self.log_v_)
        label, greedy, expert = adabandit_decide(
            self.trees_.routing(x), self.alpha_, v, U, self.params.rho, p, weak, leaves, votes, experts
        )
        memo = {
            "greedy": greedy,
            "weak": weak,
            "alpha": self.alpha_.copy(),
            "votes": votes,
            "experts": experts,
            "expert": expert,
            "leaves": leaves,
            "tree_nodes": self.trees_.n_nodes_.copy(),
            "conditional": p,
        }
        return Decision(expert_marginal(votes, v, self.params.rho), label, memo)

    def _decide_masked(self, x: np.ndarray, rng: np.random.Generator, mask: np.ndarray) -> Decision:
        """:meth:`decide` among the eligible labels: the same draws and steps in numpy, with every
        tree's and every expert's argmax over the eligible labels (:func:`masked_rows_argmax`)."""
        dist, memo = self._weak_distribution(x)
        n, k = dist.shape
        U = rng.random(2 * n * k + 1)
        weak = masked_rows_argmax(dist, mask, U[: n * k])
        votes = np.zeros((n, k))
        votes[np.arange(n), weak] = self.alpha_
        votes = np.cumsum(votes, axis=0)
        experts = masked_rows_argmax(votes, mask, U[n * k : 2 * n * k])
        expert = int(hedge_draw(np.exp(self.log_v_), U[2 * n * k]))
        greedy = int(experts[expert])
        memo |= {"greedy": greedy, "weak": weak, "alpha": self.alpha_.copy(), "votes": votes}
        memo |= {"experts": experts, "expert": expert}
        d = masked_decision(greedy, mask, self.params.rho, "rho", rng, memo)
        d.memo["conditional"] = d.probs
        return Decision(expert_marginal(votes, np.exp(self.log_v_), self.params.rho, mask), d.label, d.memo)

    def learn(self, x: np.ndarray, decision: Decision, reward: bool) -> None:
        self.t_ += 1
        m = decision.memo
        weak = np.asarray(m["weak"], dtype=np.int64)
        k = self.n_labels
        # loss_estimate, iota_hat, then logistic_cost_matrices and logistic_alpha_grad at s^{i-1},
        # compiled around one numpy tanh and numpy's two products, so the bits are theirs
        # (booster_kernels says why)
        ell, iota, z, t, G, off, on, onsum, Giota, offiota = self._learn_scratch()
        adabandit_learn_args(
            decision.conditional, int(decision.label), int(m["greedy"]), bool(reward),
            np.asarray(m["votes"], dtype=np.float64), weak, np.asarray(m["alpha"], dtype=np.float64),
            ell, iota, z,
        )  # fmt: skip
        adabandit_logistic_parts(np.tanh(z, out=t), weak, k, G, off, on, onsum)
        # the operations of lr_scale * rho / (k**2 * np.sqrt(t)) on Python floats (no numpy scalars)
        eta = self.params.lr_scale * self.params.rho / (k * k * math.sqrt(self.t_))
        # the trees' update and the alpha step with Hedge in one compiled call (booster_kernels)
        prefer = int(decision.label) if reward else -1
        self._learn_forest(
            adabandit_learn, x, m, np.matmul(G, iota, out=Giota), prefer, np.matmul(off, iota, out=offiota),
            onsum, iota, weak, float(eta), ell,
            np.asarray(m["experts"], dtype=np.int64), self.alpha_, self.log_v_,
        )  # fmt: skip
