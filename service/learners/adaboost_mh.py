"""A boosted policy retrained from click logs: bandit-aided AdaBoost.MH served with ε-exploration.

Seed 003 (ALGORITHMS.md §7) is a batch algorithm; this learner turns it into a service policy. The
served model is an AdaBoost.MH stump ensemble; every ``retrain_every`` feedback events it is
retrained from scratch on the logged decisions, with the stump search of ``search`` (UCB1 or EXP3.P
keeps each retrain cheap: one feature per iteration instead of all of them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from service.learners.base import (
    Decision,
    Learner,
    Params,
    as_mask,
    gamma_mix,
    learners,
    masked_argmax_ties,
    masked_decision,
    over_ties,
    randargmax_ties,
    sample,
)
from service.learners.stumps.mh import StumpData, StumpEnsemble
from service.learners.stumps.train import train


class AdaBoostMHParams(Params):
    """Hyperparameters of :class:`AdaBoostMH`.

    Parameters
    ----------
    epsilon : float, default 0.05
        Exploration: ``p(r) = (1 - epsilon) 1[r = greedy] + epsilon / K`` (the Banditron's form).
    retrain_every : int, default 500
        Feedback events between two retrains.
    iterations : int, default 100
        Boosting iterations T of every retrain.
    search : {"ucb", "exp3p", "full"}, default "ucb"
        Stump search of the retrain (§7.2-7.4).
    max_log : int, default 10000
        The retrain uses the most recent ``max_log`` logged rows (bounds its cost and the state).
    max_log_bytes : int, default 128 MiB
        Bound of the log's memory: it keeps at most ``max_log_bytes // (8 d + 9 K)`` rows (x as
        float64, a sign and a weight per label), at least 2. It binds only for wide inputs
        (mnist's d = 784 at ``max_log`` = 10,000 takes 63 MB; a hashed model at b = 18, 2 MB a
        row, keeps 64 rows).
    """

    epsilon: float = Field(0.05, gt=0.0, lt=1.0)
    retrain_every: int = Field(500, ge=1)
    iterations: int = Field(100, ge=1)
    search: Literal["ucb", "exp3p", "full"] = "ucb"
    max_log: int = Field(10000, ge=2)
    max_log_bytes: int = Field(128 * 2**20, ge=1)


def log_rows(params: AdaBoostMHParams, n_features: int, n_labels: int) -> int:
    """Rows the click log keeps: ``max_log``, or fewer when they would exceed ``max_log_bytes``."""
    return max(2, min(params.max_log, params.max_log_bytes // (8 * n_features + 9 * n_labels)))


@learners.register("adaboost-mh")
class AdaBoostMH(Learner):
    """ε-greedy over an AdaBoost.MH stump ensemble retrained from importance-weighted click logs.

    Input and rewards: Learns a click bit: a graded reward reaches it as a Bernoulli(reward) bit
    (:func:`service.sampling.reward_bit`), unbiased but noisier than the value (issue 50). Any
    feature scale: a stump splits one feature at a threshold, which moves with the feature's unit
    (``bench invariance``, docs/BENCHMARKS.md).

    Logging. Decision t shows label ``l`` with probability ``p = P(l)``. The click bit reveals one
    entry of the AdaBoost.MH label matrix: ``Y[t, l] = +1`` on a click, ``-1`` otherwise; nothing
    about the other labels. That entry gets the weight ``c / p`` with the share-point constant
    ``c = 1/2`` if ``Y = +1`` and ``c = 1/(2(K-1))`` if ``Y = -1`` (§7.1), every other entry weight 0.
    Over the draw of ``l`` the expected weight matrix is exactly the share-point initial weights
    of the fully labelled row, so the exponential loss of the logged data is an unbiased estimate
    of the full-information one, and the retrain is AdaBoost.MH on it (weights normalised to 1).

    Graded rewards (issue 38): its update is built on the click bit, so it learns the Bernoulli(r)
    bit the runtime draws for a reward r in (0, 1) from the decision id
    (:func:`service.sampling.reward_bit`, ``graded = False``): unbiased for the reward in expectation.

    Eligible labels (ours): the greedy label is the best eligible one and ``epsilon / m`` spreads over
    the m eligible labels. The logged entry keeps its weight ``c / p`` with that ``p``, so the
    expected weight matrix is the share-point weights on the eligible entries and 0 on the others
    (never shown, never revealed): the retrain's loss is unbiased for the loss restricted to the
    labels each row allowed.

    Retraining. Every ``retrain_every`` events the model is replaced by ``iterations`` rounds of
    AdaBoost.MH (``epsilon_alpha = 0.01 / n``, MultiBoost) on the last :func:`log_rows` rows; EXP3.P
    draws come from ``rng_``, so the retrain is deterministic given the state.

    Warm start. :meth:`warm_start` logs labelled rows with every entry of ``Y`` known and the
    share-point weights, then retrains.

    Attributes
    ----------
    X_log_, Y_log_, W_log_ : ndarray of shapes (capacity, d), (capacity, K), (capacity, K)
        Ring buffer of logged rows (capacity doubles up to :func:`log_rows`); row ``i`` of the
        ``min(n_logged_, log_rows)`` valid ones holds x, the revealed signs (0 = unknown) and the
        initial weights.
    n_logged_ : int
        Rows logged so far (the next goes to row ``n_logged_ % log_rows``).
    features_, thresholds_, alphas_, votes_ : ndarray of shapes (T,), (T,), (T,), (T, K)
        The served ensemble ``f_l(x) = sum_t alphas_t votes_tl (+1 if x[features_t] > thresholds_t
        else -1)``; empty (all scores 0, uniform greedy tie) before the first retrain.

    References
    ----------
    R. Busa-Fekete, B. Kégl. Fast boosting using adversarial bandits. ICML 2010 (seed 003).

    Examples
    --------
    >>> import numpy as np
    >>> from service.learners import make_learner
    >>> m = make_learner("adaboost-mh", 2, 3, {"epsilon": 0.3}, seed=0)
    >>> m.warm_start(np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]), np.array([0, 1, 2]))
    >>> d = m.decide(np.array([0.0, 1.0]), np.random.default_rng(0))
    >>> d.probs.round(2).tolist()
    [0.8, 0.1, 0.1]
    """

    name = "adaboost-mh"
    Params = AdaBoostMHParams
    params: AdaBoostMHParams
    _growable: ClassVar[frozenset[str]] = frozenset(
        {"X_log_", "Y_log_", "W_log_", "features_", "thresholds_", "alphas_", "votes_"}
    )

    @classmethod
    def event_steps(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """A decision scores the K labels with each of the ``iterations`` stumps (``T K``), more than
        a learn, which logs one row (``d + K``; the retrain runs off the event loop, see
        :meth:`learn_is_heavy`)."""
        p = AdaBoostMHParams.parse(cls.name, params)
        return p.iterations * n_labels + n_features + n_labels

    @classmethod
    def growth_nbytes(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """The click log at :func:`log_rows` rows (x float64, label int8, weight float64 per label) and
        an ensemble of ``iterations`` stumps (feature, threshold, alpha, K votes)."""
        p = AdaBoostMHParams.parse(cls.name, params)
        rows = log_rows(p, n_features, n_labels)
        return rows * (8 * n_features + 9 * n_labels) + p.iterations * (24 + 8 * n_labels)

    def _init(self) -> None:
        d, K = self.n_features, self.n_labels
        self.X_log_ = np.zeros((0, d))
        self.Y_log_ = np.zeros((0, K), dtype=np.int8)
        self.W_log_ = np.zeros((0, K))
        self.n_logged_ = 0
        self._set_model(StumpEnsemble(np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros((0, K))))

    def _set_model(self, model: StumpEnsemble) -> None:
        self.features_ = model.features
        self.thresholds_ = model.thresholds
        self.alphas_ = model.alphas
        self.votes_ = model.votes

    def scores(self, x: np.ndarray) -> np.ndarray:
        """``f(x)``, shape (K,)."""
        model = StumpEnsemble(self.features_, self.thresholds_, self.alphas_, self.votes_)
        return model.scores(x[None, :])[0]

    def decide(self, x: np.ndarray, rng: np.random.Generator, eligible: np.ndarray | None = None) -> Decision:
        """The greedy label is the best score, drawn uniformly among ties (a model not trained yet
        ties every label), then the label from the ``epsilon`` mix around it. The reported
        ``probs`` are the marginal over the tie-break (``(1 - epsilon) / t`` on each of t ties plus
        ``epsilon / K``); the mix given the greedy label, whose ``1 / p`` weights the logged row as
        it always did, is kept in ``memo["conditional"]`` (:func:`~service.learners.base.over_ties`)."""
        eps = self.params.epsilon
        mask = as_mask(eligible, self.n_labels)
        if mask is not None:
            greedy, ties = masked_argmax_ties(self.scores(x), mask, rng)
            return masked_decision(greedy, mask, eps, "gamma", rng, {}, ties, keep=True)
        greedy, ties = randargmax_ties(self.scores(x), rng)
        p = gamma_mix(self.n_labels, greedy, eps)
        return over_ties(Decision(p, sample(p, rng)), ties, eps, "gamma", keep=True)

    def learn(self, x: np.ndarray, decision: Decision, reward: bool) -> None:
        self.t_ += 1
        K, label = self.n_labels, decision.label
        y_row = np.zeros(K, dtype=np.int8)
        w_row = np.zeros(K)
        y_row[label] = 1 if reward else -1
        share = 0.5 if reward else 0.5 / (K - 1)
        w_row[label] = share / decision.conditional[label]  # importance weight 1/p (snapshot of decide)
        self._log(x[None, :], y_row[None, :], w_row[None, :])
        if self.t_ % self.params.retrain_every == 0:
            self.retrain()

    def learn_is_heavy(self) -> bool:
        """The learn that retrains: ``iterations`` rounds over up to ``max_log`` rows (a quarter of a
        second at car's size, minutes at K = 10,000), run off the event loop by the runtime."""
        return (self.t_ + 1) % self.params.retrain_every == 0

    def warm_start(self, X: np.ndarray, y: np.ndarray) -> None:
        """Log fully labelled rows (every sign known, share-point weights) and retrain."""
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.int64)
        K = self.n_labels
        Y = np.full((y.size, K), -1, dtype=np.int8)
        Y[np.arange(y.size), y] = 1
        W = np.where(Y > 0, 0.5, 0.5 / (K - 1))
        cap = log_rows(self.params, self.n_features, K)
        for lo in range(0, y.size, cap):
            self._log(X[lo : lo + cap], Y[lo : lo + cap], W[lo : lo + cap])
        self.retrain()

    def _log(self, X: np.ndarray, Y: np.ndarray, W: np.ndarray) -> None:
        """Append rows (at most the log's capacity) to the ring buffer, growing it by doubling."""
        cap, m = log_rows(self.params, self.n_features, self.n_labels), X.shape[0]
        need = min(cap, self.n_logged_ + m)
        if need > self.X_log_.shape[0]:
            size = min(cap, max(need, 2 * self.X_log_.shape[0], 16))
            grow = size - self.X_log_.shape[0]
            self.X_log_ = np.concatenate([self.X_log_, np.zeros((grow, self.n_features))])
            self.Y_log_ = np.concatenate([self.Y_log_, np.zeros((grow, self.n_labels), dtype=np.int8)])
            self.W_log_ = np.concatenate([self.W_log_, np.zeros((grow, self.n_labels))])
        rows = (self.n_logged_ + np.arange(m)) % cap
        self.X_log_[rows] = X
        self.Y_log_[rows] = Y
        self.W_log_[rows] = W
        self.n_logged_ += m

    def retrain(self) -> None:
        """Replace the model by AdaBoost.MH trained on the logged rows (§7; deterministic)."""
        n = min(self.n_logged_, log_rows(self.params, self.n_features, self.n_labels))
        if n < 2:
            return
        data = StumpData(self.X_log_[:n], self.Y_log_[:n], self.W_log_[:n])
        p = self.params
        self._set_model(train(data, p.iterations, p.search, self.rng_, 0.01 / n))
