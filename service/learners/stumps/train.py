"""The boosting loop: AdaBoost.MH where full search, UCB1 or EXP3.P picks the stumps to search.

ALGORITHMS.md §7: every iteration the selector names a set of features (all of them, or the one arm
a bandit pulls), the best stump on them is found by :meth:`StumpData.search`, it gets the
coefficient :func:`~service.learners.stumps.mh.alpha` and the weights are updated; a bandit is then paid
:func:`~service.learners.stumps.bandits.edge_reward` of that stump's edge.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np

from service.learners.stumps.bandits import EXP3P, UCB1, edge_reward
from service.learners.stumps.mh import Stump, StumpData, StumpEnsemble, alpha

__all__ = ["SEARCHES", "Search", "Step", "boost", "train"]

Search = Literal["full", "ucb", "exp3p"]
SEARCHES: tuple[str, ...] = ("full", "ucb", "exp3p")


@dataclass(frozen=True, slots=True)
class Step:
    """One boosting iteration.

    Attributes
    ----------
    t : int
        Iteration, from 1.
    stump : Stump
        The base classifier added.
    alpha : float
        Its coefficient.
    Z : float
        Normaliser of the reweighting.
    evaluations : int
        Candidate stumps (feature, threshold) examined so far, including a bandit's initial pulls.
    seconds : float
        Wall time spent so far in search and reweighting (excluding the consumer's own work).
    """

    t: int
    stump: Stump
    alpha: float
    Z: float
    evaluations: int
    seconds: float


def boost(
    data: StumpData,
    iterations: int,
    search: Search,
    rng: np.random.Generator,
    epsilon: float,
) -> Iterator[Step]:
    """Run ``iterations`` AdaBoost.MH iterations on ``data`` (updated in place), one Step each.

    Parameters
    ----------
    data : StumpData
        Presorted training data and weights.
    iterations : int
        T.
    search : {"full", "ucb", "exp3p"}
        ``full`` searches every feature; ``ucb`` and ``exp3p`` search the one feature the bandit
        pulls (arms = features, §7.2). UCB1 first pulls every arm once under the initial weights,
        as MultiBoost does (those evaluations are counted); EXP3.P uses ``horizon = iterations``.
    rng : numpy.random.Generator
        EXP3.P's draws (full search and UCB1 are deterministic).
    epsilon : float
        Smoothing of the coefficient (MultiBoost: ``0.01 / n``).
    """
    if search not in SEARCHES:
        raise ValueError(f"search must be one of {', '.join(SEARCHES)}, got {search!r}")
    start = time.perf_counter()
    evaluations = 0
    selector: UCB1 | EXP3P | None = None
    if search == "ucb":
        rewards = np.array([edge_reward(e) for e in data.feature_edges()])
        evaluations += int(data.n_thresholds.sum())
        selector = UCB1(rewards)
    elif search == "exp3p":
        selector = EXP3P(data.n_features, iterations)
    seconds = time.perf_counter() - start
    for t in range(1, iterations + 1):
        start = time.perf_counter()
        if selector is None:
            stump = data.search()
        else:
            arm = selector.select(rng)
            stump = data.search([arm])
            selector.update(arm, edge_reward(stump.edge))
        a = alpha(stump.edge, epsilon)
        Z = data.update(stump, a)
        evaluations += stump.evaluations
        seconds += time.perf_counter() - start
        yield Step(t, stump, a, Z, evaluations, seconds)


def train(
    data: StumpData,
    iterations: int,
    search: Search,
    rng: np.random.Generator,
    epsilon: float,
) -> StumpEnsemble:
    """The strong classifier after :func:`boost` (same arguments)."""
    steps = [(s.stump, s.alpha) for s in boost(data, iterations, search, rng, epsilon)]
    return StumpEnsemble.from_stumps(steps, data.Y.shape[1])
