"""OnlineMBBM (Jung, Goetz, Tewari, NeurIPS 2017): full-information parent of BanditBBM (§3.1)."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from service.learners.banditbbm import bbm_costs
from service.learners.base import Decision, as_mask, learners, over_ties, randargmax_ties, randargmin
from service.learners.bbm_kernels import bbm_gamma_matrix
from service.learners.booster_costs import Ties, TreeBooster, TreeBoosterParams, bbm_cost_matrix


class OnlineMBBMParams(TreeBoosterParams):
    """Hyperparameters of :class:`OnlineMBBM`.

    Defaults of the tree ranges are the seed-001 full-information row (grace ``U[50, 200]``,
    split confidence ``10^U[-11, log10 0.9]``; ALGORITHMS.md §2.10).

    Parameters
    ----------
    gamma : float, default 0.1
        Edge of the weak-learning condition.
    potential : {"exact", "mc"}, default "exact"
        Exact potential, or Monte Carlo with 100 draws (from the decision's generator in
        ``decide``, the learner's in ``learn``).
    ties : {"random", "pessimistic"}, default "pessimistic"
        Tie convention of the loss in the potential (pessimistic: Jung et al. 2017).
    """

    n_learners: int = Field(20, ge=1, le=150)
    grace: tuple[float, float] = (50.0, 200.0)
    split_confidence: tuple[float, float] = (1e-11, 0.9)
    gamma: float = Field(0.1, gt=0.0, lt=1.0)
    potential: Literal["exact", "mc"] = "exact"
    ties: Ties = "pessimistic"


@learners.register("online-mbbm")
class OnlineMBBM(TreeBooster):
    """Optimal online multiclass boost-by-majority; reads the true label (a reference, not a bandit).

    Input and rewards: A full-information reference: it learns the true label, not a reward. Needs
    input scaled to about [-1, 1]: what it learns changes with a feature's unit, so one raw number
    (a price, a count) beside one-hot features hurts it (``bench invariance``, docs/BENCHMARKS.md).

    Decide: for ``i = 1..N`` the cost matrix ``C^i = Gamma^i^T`` at ``s^{i-1}`` (eq. (9)); tree ``i``
    predicts the label of least expected cost under its class distribution (§3.3,
    ``randargmin_l sum_r pi(r) C[r, l]``); ``s^i = s^{i-1} + e_{l^i}``. The prediction is
    ``randargmax s^N``, shown; its ``probs`` are uniform over a tied majority (the marginal over that
    draw), the trees' own tie-breaks conditioned on (a reference: never served).
    Learn: tree ``i`` gets ``C^i[y, :]`` through the
    (label, weight) reduction, i.e. label ``y`` with weight ``sum_l (c[l] - c[y])``.

    References
    ----------
    Y. H. Jung, J. Goetz, A. Tewari. Online multiclass boosting. NeurIPS 2017.
    """

    name = "online-mbbm"
    full_information = True
    Params = OnlineMBBMParams
    params: OnlineMBBMParams

    def decide(self, x: np.ndarray, rng: np.random.Generator, eligible: np.ndarray | None = None) -> Decision:
        if as_mask(eligible, self.n_labels) is not None:
            raise ValueError(f"{self.name}: a full-information learner decides over every label")
        p = self.params
        dist, where = self._weak_distribution(x)
        n, k = dist.shape
        s = np.zeros(k, dtype=np.int64)
        weak = np.empty(n, dtype=np.int64)
        mc = rng if p.potential == "mc" else None
        for i in range(n):
            G = (
                bbm_gamma_matrix(n - 1 - i, s, p.gamma, p.ties == "pessimistic", n)
                if mc is None
                else bbm_cost_matrix(n - 1 - i, s, p.gamma, p.ties, mc)
            )
            weak[i] = randargmin(G @ dist[i], rng)
            s[weak[i]] += 1
        greedy, ties = randargmax_ties(s, rng)
        d = Decision(np.eye(k)[greedy], greedy, {"greedy": greedy, "weak": weak, **where})
        return over_ties(d, ties, 0.0, "gamma")  # 1 / t on each of t tied majorities

    def learn_full(self, x: np.ndarray, decision: Decision, y: int) -> None:
        self.t_ += 1
        p = self.params
        mc = self.rng_ if p.potential == "mc" else None
        C = bbm_costs(
            np.asarray(decision.memo["weak"]), self.n_labels, p.gamma, p.ties, np.eye(self.n_labels)[y], mc
        )
        self._train_trees(x, C, y, decision.memo)
