"""Arm selectors of bandit-aided AdaBoost.MH: UCB1 and EXP3.P (ALGORITHMS.md §7.2-7.4).

An arm is a feature: pulling arm j means searching only the stumps on feature j. The reward of a
pull is :func:`edge_reward` of the best stump found there.
"""

from __future__ import annotations

import math

import numpy as np

from service.learners.base import sample

__all__ = ["EXP3P", "UCB1", "edge_reward", "importance_weighted_reward"]


def edge_reward(edge: float) -> float:
    """``min(1, -1/2 ln(1 - edge^2))``, MultiBoost's "LOGEDGE" reward (§7.2); 1 when ``edge ~ 1``.

    ``-1/2 ln(1 - edge^2)`` is the decrease of ``log L_e``, the log exponential loss, that the stump
    achieves (the seed prints the opposite sign: erratum of §7.2).
    """
    if edge >= 1.0 - np.finfo(float).eps:
        return 1.0
    return min(1.0, -0.5 * math.log1p(-edge * edge))


def importance_weighted_reward(arm: int, reward: object, probs: np.ndarray) -> np.ndarray:
    """EXP3.P's estimate ``r_hat_j = r / p_j`` if ``j = arm`` else 0 (§7.4).

    ``E_{arm ~ p} r_hat_j = r_j`` for every j. Works on object arrays of ``Fraction`` too, which
    is how the test checks unbiasedness exactly (ALGORITHMS.md §8).
    """
    out = np.zeros_like(probs)
    out[arm] = reward / probs[arm]
    return out


class UCB1:
    """UCB1 as MultiBoost's "UCBK" (§7.3).

    Parameters
    ----------
    initial_rewards : ndarray of shape (M,)
        Reward of every arm pulled once under the initial weights: ``T_j = 1``, ``X_j = r_j`` and
        the round counter ``tau`` starts at 2.
    """

    def __init__(self, initial_rewards: np.ndarray) -> None:
        self.pulls = np.ones(initial_rewards.size)
        self.sums = np.asarray(initial_rewards, dtype=np.float64).copy()
        self.tau = 2

    def index(self) -> np.ndarray:
        """``B_j = X_j / T_j + sqrt(2 ln tau / T_j)``."""
        return self.sums / self.pulls + np.sqrt(2.0 * math.log(self.tau) / self.pulls)

    def select(self, rng: np.random.Generator) -> int:
        """The arm of largest index; ties to the lowest index (no randomness: ``rng`` unused)."""
        return int(np.argmax(self.index()))

    def update(self, arm: int, reward: float) -> None:
        """``T_j += 1``, ``X_j += r``, ``tau += 1`` for the pulled arm ``j``."""
        self.pulls[arm] += 1.0
        self.sums[arm] += reward
        self.tau += 1


class EXP3P:
    """EXP3.P (Auer et al. 2002) with the typos of seed 003's Algorithm 2 fixed (§7.4).

    Weights are kept as logarithms (``log w_j``) so that they never overflow; the probabilities
    are a softmax of them, mixed with the uniform distribution.

    Parameters
    ----------
    n_arms : int
        M.
    horizon : int
        T, the number of pulls planned.
    delta : float, default 0.1
        Confidence of the regret bound; sets ``alpha = 2 sqrt(ln(M T / delta))``.

    Notes
    -----
    Theory setting: ``gamma = min(3/5, 2 sqrt(3/5 M ln M / T))``. The update adds
    ``gamma/(3M) (r_hat_j + alpha / (p_j sqrt(M T)))`` to ``log w_j`` for **every** arm (the seed
    prints ``alpha/(p_j M T)`` and ``gamma/(3K)``; MultiBoost adds the bonus to the pulled arm only).
    """

    def __init__(self, n_arms: int, horizon: int, delta: float = 0.1) -> None:
        M, T = n_arms, max(1, horizon)
        self.n_arms = M
        self.horizon = T
        self.gamma = min(0.6, 2.0 * math.sqrt(0.6 * M * math.log(M) / T)) if M > 1 else 0.6
        self.alpha = 2.0 * math.sqrt(math.log(M * T / delta))
        self.log_w = np.full(M, self.alpha * self.gamma / 3.0 * math.sqrt(T / M))

    def probs(self) -> np.ndarray:
        """``p_j = (1 - gamma) w_j / sum_i w_i + gamma / M``."""
        w = np.exp(self.log_w - self.log_w.max())
        return (1.0 - self.gamma) * w / w.sum() + self.gamma / self.n_arms

    def select(self, rng: np.random.Generator) -> int:
        """Draw an arm from :meth:`probs` with one uniform from ``rng``."""
        return sample(self.probs(), rng)

    def update(self, arm: int, reward: float) -> None:
        """Update every arm's log-weight after ``arm`` was pulled and paid ``reward`` in [0, 1]."""
        p = self.probs()
        r_hat = importance_weighted_reward(arm, reward, p)
        M, T = self.n_arms, self.horizon
        self.log_w += self.gamma / (3.0 * M) * (r_hat + self.alpha / (p * math.sqrt(M * T)))
