"""BanditBoost: online boosting of binary weak learners with bandit feedback.

Chen, Lin, Lu, ICML 2014 (seed 000), Algorithm 1, eqs. (2)-(6); ALGORITHMS.md §4.1.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field, field_validator

from service.learners.base import Decision, Learner, Params, gamma_mix, learners, randargmax, sample
from service.learners.weak import BinaryFamily, weak_families


class BanditBoostParams(Params):
    """Hyperparameters of :class:`BanditBoost`.

    Parameters
    ----------
    weak : str, default "perceptron"
        Binary weak-learner family (:data:`service.learners.weak.weak_families`):
        ``"perceptron"`` or ``"naive_bayes"``.
    n_learners : int, default 100
        Number N of weak learners (seed 000 §4 uses 100).
    delta : float, default 0.05
        Exploration rate in (0, 1): ``p(k) = (1-delta) 1[k = H] + delta/K``. The analysis assumes
        ``delta <= gamma``; seed 000 Fig. 1 sweeps past it, so it is not enforced.
    gamma : float, default 0.1
        Assumed weak-learner edge in (0, 1/2); ``theta = gamma / (2 + gamma)`` (seed 000 §4: 0.1).
    """

    weak: str = "perceptron"
    n_learners: int = Field(100, ge=1)
    delta: float = Field(0.05, gt=0.0, lt=1.0)
    gamma: float = Field(0.1, gt=0.0, lt=0.5)

    @field_validator("weak")
    @classmethod
    def _known_family(cls, v: str) -> str:
        if v not in weak_families.names():
            raise ValueError(f"unknown weak learner family; known: {', '.join(weak_families.names())}")
        return v


@learners.register("banditboost")
class BanditBoost(Learner):
    """BanditBoost (seed 000, Algorithm 1): OSBoost weights turned into unbiased estimates.

    Round t:

    1. ``f_k = sum_i alpha_k^(i) h_k^(i)(x)``, ``H = argmax_k f_k`` (ties at random);
    2. ``p(k) = (1-delta) 1[k = H] + delta/K``; sample ``kappa ~ p``; the click reveals the one
       binary label ``y = +1`` if it is a hit, else ``-1``, for class kappa;
    3. for i = 1..N with decision-time scores ``h_i = h_kappa^(i)(x)``:
       ``z^(i-1) = sum_{j<i} (y h_j - theta)`` and ``w^(i) = min(1, (1-gamma)^(z^(i-1)/2)) / p(kappa)``
       (eqs. 2-4); weak learner i's model of class kappa trains on ``(x, y)`` with weight ``w^(i)``;
    4. if ``theta - y f_kappa > 0``: ``l^(i) = -y h_i / p(kappa)``, else 0 (subgradient 0 at the kink);
       ``alpha_kappa <- alpha_kappa * exp(-eta l) / Z`` with ``eta = delta^3 / K`` (eqs. 5-6).

    Classes other than kappa are not updated. ``E w^(i) = min(1, (1-gamma)^(z/2))`` and ``E l`` is
    the subgradient of ``max(0, theta - y_k f_k)`` (ALGORITHMS.md §8). The memo carries the
    decision-time scores of the sampled class and ``f_kappa``, so learn is exact when other updates
    landed in between.

    Attributes
    ----------
    alpha_ : ndarray of shape (N, K)
        Voting weights; each column lies on the simplex, initially uniform (1/N).
    weak_ : BinaryFamily
        The N x K binary weak learners.

    References
    ----------
    S.-T. Chen, H.-T. Lin, C.-J. Lu. Boosting with online binary learners for the multiclass bandit
    problem. ICML 2014.

    Examples
    --------
    >>> import numpy as np
    >>> from service.learners import make_learner
    >>> m = make_learner("banditboost", 3, 4, {"n_learners": 10, "delta": 0.2}, seed=0)
    >>> d = m.decide(np.array([1.0, 0.0, 1.0]), np.random.default_rng(0))
    >>> sorted(d.probs.round(2).tolist())
    [0.05, 0.05, 0.05, 0.85]
    >>> m.learn(np.array([1.0, 0.0, 1.0]), d, True)
    >>> m.alpha_.sum(axis=0).round(12).tolist()
    [1.0, 1.0, 1.0, 1.0]
    """

    name = "banditboost"
    Params = BanditBoostParams
    params: BanditBoostParams

    def _init(self) -> None:
        n = self.params.n_learners
        self.theta = self.params.gamma / (2.0 + self.params.gamma)
        self.eta = self.params.delta**3 / self.n_labels
        self.alpha_ = np.full((n, self.n_labels), 1.0 / n)
        family = weak_families.get(self.params.weak)
        self.weak_: BinaryFamily = family(n, self.n_labels, self.n_features, self.rng_)

    def decide(self, x: np.ndarray, rng: np.random.Generator) -> Decision:
        h = self.weak_.scores(x)  # (N, K)
        f = np.einsum("ik,ik->k", self.alpha_, h)
        greedy = randargmax(f, rng)
        p = gamma_mix(self.n_labels, greedy, self.params.delta)
        label = sample(p, rng)
        return Decision(p, label, {"greedy": greedy, "h": h[:, label].copy(), "f": float(f[label])})

    def learn(self, x: np.ndarray, decision: Decision, reward: bool) -> None:
        self.t_ += 1
        kappa = decision.label
        p = float(decision.probs[kappa])
        y = 1.0 if reward else -1.0
        h = np.asarray(decision.memo["h"], dtype=np.float64)
        self.weak_.update(x, kappa, y, osboost_weights(h, y, self.params.gamma) / p, self.rng_)
        grad = hinge_subgradient(h, y, float(decision.memo["f"]), self.theta) / p
        if grad.any():  # eq. (6): exponentiated-gradient step on class kappa's voting weights
            a = self.alpha_[:, kappa] * np.exp(-self.eta * grad)
            self.alpha_[:, kappa] = a / a.sum()


def osboost_weights(h: np.ndarray, y: float, gamma: float) -> np.ndarray:
    """OSBoost example weights ``w_bar^(i) = min(1, (1-gamma)^(z^(i-1)/2))`` (seed 000 eqs. 2-3).

    ``z^(i-1) = sum_{j<i} (y h_j - theta)`` with ``theta = gamma / (2 + gamma)``; ``z^(0) = 0``.
    Dividing by ``p(kappa)`` gives the unbiased bandit estimate of eq. (4).
    """
    theta = gamma / (2.0 + gamma)
    z = np.empty_like(h)
    z[0] = 0.0
    np.cumsum(y * h[:-1] - theta, out=z[1:])
    z *= 0.5 * math.log1p(-gamma)  # (1-gamma)^(z/2) = exp(z/2 log(1-gamma))
    np.exp(z, out=z)
    return np.minimum(z, 1.0, out=z)


def hinge_subgradient(h: np.ndarray, y: float, f: float, theta: float) -> np.ndarray:
    """Subgradient of ``max(0, theta - y sum_i alpha_i h_i)`` in alpha at margin ``f`` (seed 000 eq. 5).

    ``-y h`` where the hinge is active, 0 otherwise (0 at the kink, ALGORITHMS.md §4.1). Dividing by
    ``p(kappa)`` gives the unbiased bandit estimate ``l``.
    """
    return -y * h if theta - y * f > 0.0 else np.zeros_like(h)
