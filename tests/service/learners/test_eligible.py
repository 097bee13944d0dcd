"""Eligible labels (issue 38) on long streams: every bandit learner serves only eligible labels, and
learning with masks is no worse than without (the online error over the rounds whose true label is
eligible, with and without the masks: ``-s`` prints the figures).

The contract-level checks (determinism, save/load, serialisation, exact enumeration of the
estimates over masked decisions) are in test_contract.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from service.learners.base import learners, make_learner
from service.sampling import DecisionIds, decision_rng

BANDIT = [name for name, cls in learners.items() if not cls.full_information]
D, K = 8, 6
#: labels 3..5 are ineligible on 60 % of the requests each ("often out of stock")
OFTEN_OUT = np.array([0.0, 0.0, 0.0, 0.6, 0.6, 0.6])


def teacher(seed: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Contexts, the teacher's scores of every label, and per-request eligible sets."""
    rng = np.random.default_rng(seed)
    X = (rng.random((n, D)) < 0.4).astype(np.float64)
    scores = X @ rng.normal(size=(D, K)) + rng.normal(scale=0.1, size=(n, K))
    sets = rng.random((n, K)) >= OFTEN_OUT
    return X, scores, sets


def online_error(name: str, masked: bool, seed: int = 0, n: int = 6000) -> float:
    """Online error of ``name`` on the stream (true label: the teacher's best), counted on the rounds
    whose true label is eligible: with ``masked`` the learner decides among the eligible labels
    (a round whose true label is not among them is learned from, never clicked, not counted),
    without it among all labels on the same rounds."""
    X, scores, sets = teacher(seed, n)
    y = np.argmax(scores, axis=1)
    m = make_learner(name, D, K, seed=1)
    ids = DecisionIds.for_seed(seed)
    errors = counted = 0
    for t in range(n):
        d = m.decide(X[t], decision_rng(ids.new()), sets[t] if masked else None)
        if sets[t][y[t]]:
            counted += 1
            errors += d.label != y[t]
        m.learn(X[t], d, d.label == y[t])
    return errors / counted


@pytest.mark.parametrize("name", BANDIT)
def test_10000_masked_predicts_serve_only_eligible_labels(name: str) -> None:
    X, scores, _ = teacher(1, 10_000)
    rng = np.random.default_rng(2)
    m = make_learner(name, D, K, seed=3)
    ids = DecisionIds.for_seed(4)
    for t in range(10_000):
        mask = rng.random(K) < rng.uniform(0.1, 1.0)
        mask[rng.integers(K)] = True
        d = m.decide(X[t], decision_rng(ids.new()), mask)
        assert mask[d.label] and d.probs[d.label] > 0
        assert not d.probs[~mask].any()
        assert abs(d.probs[mask].sum() - 1.0) <= 1e-12
        m.learn(X[t], d, d.label == int(np.argmax(np.where(mask, scores[t], -np.inf))))


@pytest.mark.parametrize("name", BANDIT)
def test_online_error_with_masks_is_no_worse_than_without(name: str) -> None:
    """Mean over three streams; the tolerance 0.01 is about two standard errors of that mean's
    difference (some 4,200 counted rounds per stream at errors near 0.2)."""
    with_masks = np.mean([online_error(name, True, seed) for seed in range(3)])
    without = np.mean([online_error(name, False, seed) for seed in range(3)])
    print(f"{name}: online error {with_masks:.4f} with masks, {without:.4f} without")
    assert with_masks <= without + 0.01
