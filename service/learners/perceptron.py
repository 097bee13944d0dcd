"""The multiclass Perceptron: a full-information reference (seed 004, Table I; seed 002, §2)."""

from __future__ import annotations

import numpy as np

from service.features import SparseVector
from service.kernels import perceptron_update
from service.learners.base import (
    Decision,
    Learner,
    as_mask,
    learners,
    over_ties,
    randargmax_ties,
    sparse_greedy_ties,
)


@learners.register("perceptron")
class Perceptron(Learner):
    """Multiclass Perceptron; reads the true label, so it is a reference, never served.

    Input and rewards: A full-information reference: it learns the true label, not a reward. Needs
    input scaled to about [-1, 1]: what it learns changes with a feature's unit, so one raw number
    (a price, a count) beside one-hot features hurts it (``bench invariance``, docs/BENCHMARKS.md).

    ``yhat = argmax_r (W x)_r`` (ties at random); on a mistake ``W[y] += x`` and ``W[yhat] -= x``.
    The Banditron's update is an unbiased estimate of exactly this update (seed 002, Lemma 4).

    Attributes
    ----------
    W_ : ndarray of shape (K, d)
        The weight matrix, initially zero.

    References
    ----------
    K. Crammer, Y. Singer. Ultraconservative online algorithms for multiclass problems. JMLR 2003.

    Examples
    --------
    >>> import numpy as np
    >>> from service.learners import make_learner
    >>> m = make_learner("perceptron", 2, 2)
    >>> x = np.array([1.0, -1.0])
    >>> m.learn_full(x, m.decide(x, np.random.default_rng(1)), 1)
    >>> m.decide(x, np.random.default_rng(1)).label
    1
    """

    name = "perceptron"
    full_information = True

    _column_major = ("W_",)

    def _init(self) -> None:
        self.W_ = np.zeros((self.n_labels, self.n_features))

    @property
    def accepts_sparse(self) -> bool:
        return True

    def decide(
        self, x: np.ndarray | SparseVector, rng: np.random.Generator, eligible: np.ndarray | None = None
    ) -> Decision:
        if as_mask(eligible, self.n_labels) is not None:
            raise ValueError(f"{self.name}: a full-information learner decides over every label")
        """The best row's label, drawn uniformly among ties and shown; the reported ``probs`` are the
        marginal over the tie-break (1 / t on each of t tied labels)."""
        if isinstance(x, SparseVector):
            greedy, ties = sparse_greedy_ties(self.W_, x.idx, x.val, rng)
        else:
            greedy, ties = randargmax_ties(self.W_ @ x, rng)
        p = np.zeros(self.n_labels)
        p[greedy] = 1.0
        return over_ties(Decision(p, greedy, {"greedy": greedy}), ties, 0.0, "gamma")

    def learn_full(self, x: np.ndarray | SparseVector, decision: Decision, y: int) -> None:
        self.t_ += 1
        if decision.label == y:
            return
        if isinstance(x, SparseVector):
            perceptron_update(self.W_, x.idx, x.val, int(y), decision.label)
        else:
            self.W_[y] += x
            self.W_[decision.label] -= x
