"""The Banditron (Kakade, Shalev-Shwartz, Tewari, ICML 2008; seed 002, ALGORITHMS.md §5)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from service.features import SparseVector
from service.kernels import (
    banditron_update,
    banditron_update_dense_batch,
    banditron_update_sparse_batch,
    gamma_mix_sample,
    sparse_argmax,
    sparse_scores,
)
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
    sparse_greedy_ties,
)


class BanditronParams(Params):
    """Hyperparameters of :class:`Banditron`.

    Parameters
    ----------
    gamma : float, default 0.05
        Exploration rate in (0, 0.5): ``p(r) = (1-gamma) 1[r = greedy] + gamma/K``.
    tie_break : {"random", "first"}, default "random"
        Ties of the greedy argmax: uniform at random, or the first maximiser as in DOGMA's
        MATLAB ``max`` (for parity with that code).
    """

    gamma: float = Field(0.05, gt=0.0, lt=0.5)
    tie_break: Literal["random", "first"] = "random"


@learners.register("banditron")
class Banditron(Learner):
    """Banditron: a multiclass Perceptron fed an unbiased estimate of its update.

    Input and rewards: Learns a click bit: a graded reward reaches it as a Bernoulli(reward) bit
    (:func:`service.sampling.reward_bit`), unbiased but noisier than the value (issue 50). Needs
    input scaled to about [-1, 1]: what it learns changes with a feature's unit, so one raw number
    (a price, a count) beside one-hot features hurts it (``bench invariance``, docs/BENCHMARKS.md).

    Round t (seed 002, Algorithm 1 with the erratum of ALGORITHMS.md §5 applied):

    1. ``yhat = argmax_r (W x)_r``;
    2. ``P(r) = (1-gamma) 1[r = yhat] + gamma/K``; sample ``ytilde ~ P``;
    3. ``W += U~`` with ``U~[r] = x (1[y = ytilde] 1[ytilde = r] / P(r) - 1[yhat = r])``.

    ``E U~`` is the Perceptron update ``x (1[y = r] - 1[yhat = r])`` (seed 002, Lemma 4). The form
    printed in the seed's Algorithm 1, with ``1[yhat = r]`` in the first term, is biased and is not
    implemented.

    Graded rewards (issue 38): its update is built on the click bit, so it learns the Bernoulli(r)
    bit the runtime draws for a reward r in (0, 1) from the decision id
    (:func:`service.sampling.reward_bit`, ``graded = False``): unbiased for the reward in expectation.

    Eligible labels (ours): ``yhat`` is the best eligible label and ``P(r) = (1-gamma) 1[r = yhat]
    + gamma/m`` on the m eligible labels, 0 elsewhere; the update is the same with that ``P``, so
    ``E U~`` is the Perceptron update towards a true label in the set (one outside it is never
    clicked: only ``yhat`` loses x, as the Perceptron with the truth restricted to the set would).

    Attributes
    ----------
    W_ : ndarray of shape (K, d)
        The weight matrix, initially zero.

    References
    ----------
    S. M. Kakade, S. Shalev-Shwartz, A. Tewari. Efficient bandit algorithms for online multiclass
    prediction. ICML 2008.

    Examples
    --------
    >>> import numpy as np
    >>> from service.learners import make_learner
    >>> m = make_learner("banditron", 3, 2, {"gamma": 0.1}, seed=0)
    >>> d = m.decide(np.array([1.0, 0.0, 1.0]), np.random.default_rng(0))
    >>> [float(p) for p in d.probs], round(float(d.conditional[d.memo["greedy"]]), 6)  # a new model: a tie
    ([0.5, 0.5], 0.95)
    """

    name = "banditron"
    kernels = ("service.kernels",)
    Params = BanditronParams
    params: BanditronParams

    _column_major = ("W_",)

    def _init(self) -> None:
        self.W_ = np.zeros((self.n_labels, self.n_features))

    @property
    def accepts_sparse(self) -> bool:
        return True

    def decide(
        self, x: np.ndarray | SparseVector, rng: np.random.Generator, eligible: np.ndarray | None = None
    ) -> Decision:
        """Ties: with ``tie_break = "random"`` the greedy label is drawn uniformly among the tied
        maximisers, then the label from ``P`` around it; the reported ``probs`` are the marginal
        over that tie-break (``(1 - gamma) / t`` on each of t ties plus ``gamma / K``), the
        probability each label was drawn with, and ``P`` given the greedy label, which the update
        divides by, is kept in ``memo["conditional"]`` (:func:`~service.learners.base.over_ties`).
        ``"first"`` draws nothing for a tie: ``P`` is then the distribution itself."""
        gamma = self.params.gamma
        mask = as_mask(eligible, self.n_labels)
        if mask is not None:
            scores = sparse_scores(self.W_, x.idx, x.val) if isinstance(x, SparseVector) else self.W_ @ x
            greedy, ties = masked_argmax_ties(scores, mask, rng, first=self.params.tie_break == "first")
            return masked_decision(greedy, mask, gamma, "gamma", rng, {"greedy": greedy}, ties, keep=True)
        if isinstance(x, SparseVector):
            # Compiled loops over the K x nnz weights of the non-zero features only; the same draws
            # as the dense path.
            if self.params.tie_break == "random":
                greedy, ties = sparse_greedy_ties(self.W_, x.idx, x.val, rng)
            else:
                greedy, ties = sparse_argmax(self.W_, x.idx, x.val)[0], []
            label, p = gamma_mix_sample(greedy, self.n_labels, gamma, rng.random())
            return over_ties(Decision(p, label, {"greedy": greedy}), ties, gamma, "gamma", keep=True)
        scores = self.W_ @ x
        if self.params.tie_break == "random":
            greedy, ties = randargmax_ties(scores, rng)
        else:
            greedy, ties = int(np.argmax(scores)), []
        p = gamma_mix(self.n_labels, greedy, gamma)
        return over_ties(Decision(p, sample(p, rng), {"greedy": greedy}), ties, gamma, "gamma", keep=True)

    def learn(self, x: np.ndarray | SparseVector, decision: Decision, reward: bool) -> None:
        self.t_ += 1
        # Row yhat always loses x; row ytilde gains x / P(ytilde) on a click (seed 002, eq. of U~).
        # Sparse: the same element-wise arithmetic on the non-zero columns (w - 0 = w exactly).
        # P is the distribution given yhat (Decision.conditional), as the paper's update conditions on it
        greedy, label = int(decision.memo["greedy"]), decision.label
        p = decision.conditional
        if isinstance(x, SparseVector):
            banditron_update(self.W_, x.idx, x.val, greedy, label, reward, float(p[label]))
            return
        self.W_[greedy] -= x
        if reward:
            self.W_[label] += x / p[label]

    def learn_batch(
        self, xs: Sequence[np.ndarray | SparseVector], decisions: Sequence[Decision], rewards: Sequence[bool]
    ) -> None:
        """:meth:`learn` for each event in order, in one compiled loop (bit for bit the same)."""
        n = len(xs)
        if n < 2 or not (
            all(isinstance(x, SparseVector) for x in xs) or all(isinstance(x, np.ndarray) for x in xs)
        ):
            super().learn_batch(xs, decisions, rewards)
            return
        greedy = np.fromiter((d.memo["greedy"] for d in decisions), dtype=np.int64, count=n)
        label = np.fromiter((d.label for d in decisions), dtype=np.int64, count=n)
        p = np.fromiter((d.conditional[d.label] for d in decisions), dtype=np.float64, count=n)
        click = np.fromiter(rewards, dtype=np.bool_, count=n)
        if isinstance(xs[0], SparseVector):
            start = np.zeros(n + 1, dtype=np.int64)
            np.cumsum([x.idx.size for x in xs], out=start[1:])  # type: ignore[union-attr]
            idx = np.concatenate([x.idx for x in xs])  # type: ignore[union-attr]
            val = np.concatenate([x.val for x in xs])  # type: ignore[union-attr]
            banditron_update_sparse_batch(self.W_, idx, val, start, greedy, label, click, p)
        else:
            X = np.stack(xs).astype(np.float64, copy=False)  # type: ignore[arg-type]
            banditron_update_dense_batch(self.W_, X, greedy, label, click, p)
        self.t_ += n
