"""Conservative one-versus-all with passive-aggressive bases (Chen et al., ICDM 2009; seed 004).

ALGORITHMS.md §6.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from service.learners.base import Decision, Learner, Params, learners, randargmax


class COVAParams(Params):
    """Hyperparameters of :class:`ConservativeOVA`.

    Parameters
    ----------
    base : {"pa", "pa1", "pa2"}, default "pa1"
        Binary base learner: PA, PA-I or PA-II (Crammer et al. 2006, seed 004 eqs. 8-12). PA-I was
        usually best in seed 004.
    C : float, default 1.0
        Aggressiveness of PA-I and PA-II ("we arbitrarily set C equal 1", seed 004).
    """

    base: Literal["pa", "pa1", "pa2"] = "pa1"
    C: float = Field(1.0, gt=0.0)


def pa_step(loss: np.ndarray | float, sqnorm: float, base: str, C: float) -> np.ndarray | float:
    """Step sizes ``tau`` of the PA family for hinge losses ``loss`` (seed 004, eqs. 10-12)."""
    if base == "pa":
        return loss / sqnorm
    if base == "pa1":
        return np.minimum(C, loss / sqnorm)
    return loss / (sqnorm + 1.0 / (2.0 * C))


@learners.register("cova")
class ConservativeOVA(Learner):
    """Conservative OVA: K binary linear scorers updated only from what a click reveals.

    Prediction is loss-based decoding with the hinge loss, ``argmin_r d_L(M(r), f(x))``, which
    equals ``argmax_r f_r(x)`` (ALGORITHMS.md §6, verified identity); ties at random. There is no
    exploration: the greedy label is shown with probability 1. Update (seed 004, Algorithm 1):

    * click (``yhat = y``): every scorer s takes a PA step on ``(x, +1 if s = yhat else -1)``;
    * no click: only scorer ``yhat`` takes a PA step on ``(x, -1)``.

    A PA step on ``(x, y)`` is ``w += tau y x`` with ``tau`` from :func:`pa_step`; nothing
    happens when the hinge loss is 0 or ``x = 0``.

    Attributes
    ----------
    W_ : ndarray of shape (K, d)
        Row s is the weight vector of binary scorer s.

    References
    ----------
    G. Chen, G. Chen, J. Zhang, S. Chen, C. Zhang. Beyond Banditron: a conservative and efficient
    reduction for online multiclass prediction with bandit setting model. ICDM 2009.

    Examples
    --------
    >>> import numpy as np
    >>> from service.learners import make_learner
    >>> m = make_learner("cova", 2, 3, {"base": "pa"})
    >>> x = np.array([1.0, 1.0])
    >>> d = m.decide(x, np.random.default_rng(0))
    >>> m.learn(x, d, False)
    >>> (m.W_[d.label] @ x).item()
    -1.0
    """

    name = "cova"
    Params = COVAParams
    params: COVAParams

    def _init(self) -> None:
        self.W_ = np.zeros((self.n_labels, self.n_features))

    def decide(self, x: np.ndarray, rng: np.random.Generator) -> Decision:
        greedy = randargmax(self.W_ @ x, rng)
        p = np.zeros(self.n_labels)
        p[greedy] = 1.0
        return Decision(p, greedy, {"greedy": greedy})

    def learn(self, x: np.ndarray, decision: Decision, reward: bool) -> None:
        self.t_ += 1
        sqnorm = float(x @ x)
        if sqnorm == 0.0:  # PA is 0/0 here; PA-I and PA-II would not move (ALGORITHMS.md §6)
            return
        yhat = decision.label
        if reward:
            # Scorer s takes a PA step on (x, +1 if s = yhat else -1). Only scorers with a positive
            # hinge loss move (usually none once the margins are met): adding the others' zero
            # steps would not change a single bit, as W starts at +0.0 and never holds -0.0. The K
            # scores are a Python list because a loop over K values beats a few numpy calls.
            for s, score in enumerate((self.W_ @ x).tolist()):
                ys = 1.0 if s == yhat else -1.0
                loss = 1.0 - ys * score
                if loss > 0.0:
                    self.W_[s] += (pa_step(loss, sqnorm, self.params.base, self.params.C) * ys) * x
        else:
            loss = max(0.0, 1.0 + float(self.W_[yhat] @ x))
            if loss > 0.0:
                tau = pa_step(loss, sqnorm, self.params.base, self.params.C)
                self.W_[yhat] -= float(tau) * x
