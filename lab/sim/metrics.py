"""The two evaluation protocols of the seed papers and cumulative learning curves.

``online``
    Mistakes of the *sampled* label divided by T over one pass: the "cumulative error rate" of seed
    004 (Table I) and seed 002 (Fig. 1), and the online error of seed 000.
``last20``
    Accuracy of the sampled label on the last ``int(0.2 T)`` rounds; the first 80% are not counted
    (seed 001, ``pi224/banditboosting``: "test 20 perc. acc"; ALGORITHMS.md §2.10).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Eval = Literal["online", "last20"]
EVALS: tuple[Eval, ...] = ("online", "last20")


def online_error(correct: np.ndarray) -> float:
    """Cumulative error rate of one pass: ``1 - mean(correct)``."""
    return float(1.0 - np.mean(correct))


def last20_accuracy(correct: np.ndarray) -> float:
    """Accuracy on the last ``int(0.2 T)`` rounds (at least one round)."""
    n = max(int(0.2 * len(correct)), 1)
    return float(np.mean(correct[-n:]))


def error(correct: np.ndarray, how: Eval) -> float:
    """The error of protocol ``how``: online error, or ``1 - last20_accuracy``."""
    return online_error(correct) if how == "online" else 1.0 - last20_accuracy(correct)


def curve_points(T: int, n: int = 60) -> np.ndarray:
    """About ``n`` log-spaced round counts ``1 <= t <= T`` (distinct integers, T included)."""
    return np.unique(np.geomspace(1, T, n).round().astype(np.int64))


def cumulative_error(correct: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Cumulative error rate after ``t`` rounds, for each ``t`` in ``points``."""
    mistakes = np.cumsum(~np.asarray(correct, dtype=bool))
    return mistakes[points - 1] / points


def loglog_slope(points: np.ndarray, err: np.ndarray, lo: int, hi: int) -> float:
    """Least-squares slope of ``log10 err`` against ``log10 t`` over ``lo <= t <= hi``."""
    keep = (points >= lo) & (points <= hi) & (err > 0)
    return float(np.polyfit(np.log10(points[keep]), np.log10(err[keep]), 1)[0])
