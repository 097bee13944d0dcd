"""Eligible labels (issue 38) on long streams: every bandit learner serves only eligible labels, and
learning with masks is no worse than without (the online error over the rounds whose true label is
eligible, with and without the masks: ``-s`` prints the figures).

The contract-level checks (determinism, save/load, serialisation, exact enumeration of the
estimates over masked decisions) are in test_contract.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from lab.bench.eligible import D, K, bandit_learners, online_error, teacher
from service.learners.base import make_learner
from service.sampling import DecisionIds, decision_rng

BANDIT = bandit_learners()


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
