"""The online protocol: one pass of decide -> feedback -> learn over a labelled stream.

The loop does what the service does for one request pair (``POST /predict`` then
``POST /feedback``): a decision id from :class:`service.sampling.DecisionIds`, sampling from
:func:`service.sampling.decision_rng` of that id, and the click bit ``sampled == true label``.
With the same ids the HTTP service reproduces this loop mistake for mistake.

A timed loop calls :func:`ready` before its clock starts, so that its examples per second measure
the learning, not the first call's loading of the compiled kernels (seconds in a fresh process).
"""

from __future__ import annotations

import numpy as np

from service import _jit_cache
from service.learners.base import Learner
from service.sampling import DecisionIds, decision_rng


def run_stream(learner: Learner, X: np.ndarray, y: np.ndarray, ids: DecisionIds) -> np.ndarray:
    """Run ``learner`` over the stream ``(X, y)`` in order.

    Parameters
    ----------
    learner : Learner
        Updated in place. Full-information learners receive the true label (``learn_full``);
        bandit learners only the click bit.
    X : ndarray of shape (T, d)
        Features (converted to float64 row by row).
    y : ndarray of shape (T,)
        True labels in ``0..K-1``.
    ids : DecisionIds
        Source of decision ids; ``DecisionIds.for_seed(seed)`` matches a replay against the service.

    Returns
    -------
    ndarray of shape (T,), bool
        ``correct[t]``: whether the sampled label of round t equals the true label.
    """
    X = np.asarray(X, dtype=np.float64)
    labels = np.asarray(y, dtype=np.int64)
    correct = np.empty(len(labels), dtype=bool)
    full = learner.full_information
    for t in range(len(labels)):
        x = X[t]
        d = learner.decide(x, decision_rng(ids.new()))
        yt = int(labels[t])
        hit = d.label == yt
        correct[t] = hit
        if full:
            learner.learn_full(x, d, yt)
        else:
            learner.learn(x, d, hit)
    return correct


def ready(learner: Learner) -> None:
    """Load ``learner``'s compiled kernels (from numba's cache, or compile them) and build its
    one-time tables, as the server does before a model serves (``Runtime.warm`` then
    :meth:`~service.learners.base.Learner.prepare`): call it before a clock starts.

    In a fresh process the first call of a kernel loads it, seconds for some learners: with that
    inside the clock a short run reported a small fraction of the learner's speed (issue 51;
    ``tests/lab/test_timed_loops.py``).
    """
    _jit_cache.warm(type(learner).kernel_modules(learner.params.model_dump()))
    learner.prepare()
