"""Run a learner over shuffled streams of a dataset for several seeds (the ``simulate`` command).

Seed ``s`` fixes everything of run s: the stream order (:meth:`Dataset.stream`), the learner's own
generator (``seed=s``) and the decision ids (``DecisionIds.for_seed(s)``), so a run is reproducible
and replayable against the HTTP service.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lab.sim.datasets import Dataset
from lab.sim.stream import ready, run_stream
from service.learners.base import Learner, make_learner
from service.sampling import DecisionIds


@dataclass(frozen=True)
class Runs:
    """Outcome of several seeded runs.

    Attributes
    ----------
    correct : ndarray of shape (S, T), bool
        ``correct[s, t]``: whether the sampled label of round t of seed ``seeds[s]`` was right.
    seeds : tuple of int
    seconds : float
        Wall time spent inside the online loop (decide, ids, learn), all seeds together; each
        learner's kernels are loaded before (:func:`lab.sim.stream.ready`).
    learner : Learner
        The learner of the last seed after its run (its ``params`` are the validated hyperparameters).
    """

    correct: np.ndarray
    seeds: tuple[int, ...]
    seconds: float
    learner: Learner

    @property
    def examples_per_second(self) -> float:
        return float(self.correct.size / self.seconds) if self.seconds > 0 else float("inf")


def run_chunks(
    learner: Learner, chunks: Iterable[tuple[np.ndarray, np.ndarray]], ids: DecisionIds
) -> np.ndarray:
    """:func:`run_stream` over a stream delivered in ``(X, y)`` chunks (one learner, one id source)."""
    return np.concatenate([run_stream(learner, X, y, ids) for X, y in chunks])


def run_seeds(
    learner: str,
    params: Mapping[str, Any] | None,
    dataset: Dataset,
    seeds: Sequence[int],
    *,
    duplicate: int = 1,
    limit: int | None = None,
) -> Runs:
    """Run a fresh ``learner`` over ``dataset.stream(seed, duplicate, limit)`` for each seed."""
    rows, seconds, model = [], 0.0, None
    for seed in seeds:
        model = make_learner(learner, dataset.d, dataset.n_labels, params, seed=seed)
        X, y = dataset.stream(seed, duplicate, limit)
        ready(model)  # the kernels loaded before the clock: it times the learning
        start = time.perf_counter()
        rows.append(run_stream(model, X, y, DecisionIds.for_seed(seed)))
        seconds += time.perf_counter() - start
    if model is None:
        raise ValueError("at least one seed is needed")
    return Runs(np.array(rows), tuple(seeds), seconds, model)
