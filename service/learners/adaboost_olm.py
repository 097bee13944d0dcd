"""Adaboost.OLM (Jung, Goetz, Tewari, NeurIPS 2017): full-information parent of AdaBandit (§3.2)."""

from __future__ import annotations

import numpy as np

from service.learners.adabandit import expert_marginal
from service.learners.base import Decision, as_mask, learners, randargmax, randargmin, sample
from service.learners.booster_costs import (
    TreeBooster,
    TreeBoosterParams,
    hedge_update,
    logistic_alpha_grad,
    logistic_cost_matrices,
)


class AdaboostOLMParams(TreeBoosterParams):
    """Hyperparameters of :class:`AdaboostOLM`; tree ranges default to the full-information row of §2.10."""

    grace: tuple[float, float] = (50.0, 200.0)
    split_confidence: tuple[float, float] = (1e-11, 0.9)


@learners.register("adaboost-olm")
class AdaboostOLM(TreeBooster):
    """Adaptive online multiclass boosting with the logistic loss; reads the true label (a reference).

    Input and rewards: A full-information reference: it learns the true label, not a reward. Needs
    input scaled to about [-1, 1]: what it learns changes with a feature's unit, so one raw number
    (a price, a count) beside one-hot features hurts it (``bench invariance``, docs/BENCHMARKS.md).

    Decide: for ``i = 1..N`` the cost matrix ``C^i = Gamma^i^T`` of eq. (10) at ``s^{i-1}``; tree
    ``i`` predicts the label of least expected cost under its class distribution (§3.3);
    ``s^i = s^{i-1} + alpha^i e_{l^i}``, expert ``i`` predicts ``randargmax s^i``; the prediction is
    expert ``i_t ~ v``, shown. Its ``probs`` are that label's distribution over the expert draw and
    the experts' tie-breaks given the trees' votes (:func:`~service.learners.adabandit.expert_marginal`
    without exploration); the trees' own tie-breaks are conditioned on (a reference: never served).
    Learn with the truth ``y``: tree ``i`` gets
    ``C^i[y, :]`` (label ``y``, weight ``sum_l (c[l] - c[y])``); projected SGD on
    ``L^y(s^{i-1} + alpha e_{l^i})`` with ``eta_t = 2 sqrt 2 / ((k-1) sqrt t)`` (correct derivative);
    Hedge with rate 1 on ``1[y != yhat^i]``.

    Attributes
    ----------
    alpha_ : ndarray of shape (N,)
        Learner weights in [-2, 2], initially 0.
    log_v_ : ndarray of shape (N,)
        Log expert weights (maximum 0).

    References
    ----------
    Y. H. Jung, J. Goetz, A. Tewari. Online multiclass boosting. NeurIPS 2017.
    """

    name = "adaboost-olm"
    full_information = True
    Params = AdaboostOLMParams
    params: AdaboostOLMParams

    def _init(self) -> None:
        super()._init()
        self.alpha_ = np.zeros(self.params.n_learners)
        self.log_v_ = np.zeros(self.params.n_learners)

    def decide(self, x: np.ndarray, rng: np.random.Generator, eligible: np.ndarray | None = None) -> Decision:
        if as_mask(eligible, self.n_labels) is not None:
            raise ValueError(f"{self.name}: a full-information learner decides over every label")
        dist, where = self._weak_distribution(x)
        n, k = dist.shape
        s = np.zeros(k)
        weak = np.empty(n, dtype=np.int64)
        votes = np.empty((n, k))
        experts = np.empty(n, dtype=np.int64)
        for i in range(n):
            G = logistic_cost_matrices(s[None])[0]
            weak[i] = randargmin(G @ dist[i], rng)
            s[weak[i]] += self.alpha_[i]
            votes[i] = s
            experts[i] = randargmax(s, rng)
        v = np.exp(self.log_v_)
        expert = sample(v / v.sum(), rng)
        greedy = int(experts[expert])
        memo = {
            "greedy": greedy,
            "weak": weak,
            "alpha": self.alpha_.copy(),
            "votes": votes,
            "experts": experts,
            "expert": expert,
            **where,
        }
        # the label's distribution over the expert draw and the experts' ties, given the trees' votes
        return Decision(expert_marginal(votes, v, 0.0), greedy, memo)

    def learn_full(self, x: np.ndarray, decision: Decision, y: int) -> None:
        self.t_ += 1
        m = decision.memo
        k = self.n_labels
        weak, alpha, votes = np.asarray(m["weak"]), np.asarray(m["alpha"]), np.asarray(m["votes"])
        prev = np.vstack([np.zeros((1, k)), votes[:-1]])
        truth = np.eye(k)[y]
        self._train_trees(x, logistic_cost_matrices(prev)[:, :, y], y, decision.memo)
        eta = 2.0 * np.sqrt(2.0) / ((k - 1) * np.sqrt(self.t_))
        self.alpha_ = np.clip(self.alpha_ - eta * logistic_alpha_grad(prev, weak, alpha, truth), -2.0, 2.0)
        self.log_v_ = hedge_update(self.log_v_, (np.asarray(m["experts"]) != y).astype(float))
