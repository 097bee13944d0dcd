"""Seeded runs: determinism, chunked streams, the per-seed ingredients."""

from __future__ import annotations

import numpy as np

from lab.sim.datasets import load_dataset
from lab.sim.simulate import run_chunks, run_seeds
from lab.sim.stream import run_stream
from service.learners.base import make_learner
from service.sampling import DecisionIds


def test_same_seed_same_result_and_seeds_differ() -> None:
    data = load_dataset("car")
    a = run_seeds("banditron", {"gamma": 0.1}, data, [0, 1], limit=800)
    b = run_seeds("banditron", {"gamma": 0.1}, data, [0, 1], limit=800)
    assert a.correct.shape == (2, 800) and np.array_equal(a.correct, b.correct)
    assert not np.array_equal(a.correct[0], a.correct[1])
    assert a.examples_per_second > 0


def test_run_seeds_is_the_documented_recipe() -> None:
    data = load_dataset("balance")
    runs = run_seeds("cova", {"base": "pa2"}, data, [3], duplicate=2)
    model = make_learner("cova", data.d, data.n_labels, {"base": "pa2"}, seed=3)
    X, y = data.stream(3, 2)
    assert np.array_equal(runs.correct[0], run_stream(model, X, y, DecisionIds.for_seed(3)))
    assert runs.learner.W_.tobytes() == model.W_.tobytes()


def test_chunked_stream_equals_one_stream() -> None:
    data = load_dataset("car")
    X, y = data.stream(0)
    whole = make_learner("banditron", data.d, data.n_labels, seed=5)
    parts = make_learner("banditron", data.d, data.n_labels, seed=5)
    expected = run_stream(whole, X, y, DecisionIds.for_seed(5))
    chunks = ((X[i : i + 300], y[i : i + 300]) for i in range(0, len(y), 300))
    assert np.array_equal(run_chunks(parts, chunks, DecisionIds.for_seed(5)), expected)
    assert whole.W_.tobytes() == parts.W_.tobytes()
