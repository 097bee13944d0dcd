"""The served label default learns the same whatever a feature's unit (issue 50).

Property: multiplying every input column by its own constant in [1e-3, 1e4] leaves every decision
of :data:`service.config.DEFAULT_LEARNER` the same (the label drawn, and the probabilities to float
rounding) over a whole learning stream: VW's normalised updates (Ross, Mineiro & Langford 2013)
make the learned scores invariant. Checked over many random scale draws (hypothesis), dense and
named (hashed) inputs, click bits and graded rewards; not one hand-picked scale.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from service.config import DEFAULT_LEARNER
from service.features import Featuriser
from service.learners.base import make_learner

ROUNDS, D, K = 300, 6, 4


def _stream(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Dense rows with a few zeros, and each row's liked label (a linear teacher)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(ROUNDS, D)) * (rng.random((ROUNDS, D)) < 0.8)
    y = np.argmax(X @ rng.normal(size=(D, K)), axis=1)
    return X, y


def _run(rows: list, y: np.ndarray, d: int, seed: int, graded: bool) -> tuple[list[int], np.ndarray]:
    model = make_learner(DEFAULT_LEARNER[0], d, K, DEFAULT_LEARNER[1], seed=seed)
    labels, probs = [], []
    for t, x in enumerate(rows):
        decision = model.decide(x, np.random.default_rng([seed, t]))
        labels.append(decision.label)
        probs.append(decision.probs)
        hit = decision.label == y[t]
        reward = (0.9 if hit else 0.2) if graded else bool(hit)
        model.learn(x, decision, reward)
    return labels, np.array(probs)


scale_logs = st.lists(st.floats(-3.0, 4.0), min_size=D, max_size=D)


@settings(max_examples=25, deadline=None)
@given(logs=scale_logs, seed=st.integers(0, 10**6), graded=st.booleans())
def test_dense_columns_rescaled_give_the_same_decisions(logs: list[float], seed: int, graded: bool) -> None:
    X, y = _stream(seed)
    base_labels, base_probs = _run(list(X), y, D, seed, graded)
    labels, probs = _run(list(X * 10.0 ** np.array(logs)), y, D, seed, graded)
    assert labels == base_labels
    np.testing.assert_allclose(probs, base_probs, rtol=1e-6, atol=1e-9)


@settings(max_examples=25, deadline=None)
@given(logs=scale_logs, seed=st.integers(0, 10**6))
def test_named_numbers_rescaled_give_the_same_decisions(logs: list[float], seed: int) -> None:
    """Named features hashed as a web app sends them: a string feature and raw numbers in any unit."""
    X, y = _stream(seed)
    featurise = Featuriser(None, 16, 64)
    kinds = ["fr", "de", "us"]

    def rows(scale: np.ndarray) -> list:
        return [
            featurise(
                {
                    "country": kinds[int(abs(x[0]) * 10) % 3],
                    **{f"n{j}": float(x[j] * scale[j]) for j in range(D)},
                }
            )
            for x in X
        ]

    base_labels, base_probs = _run(rows(np.ones(D)), y, 1 << 16, seed, False)
    labels, probs = _run(rows(10.0 ** np.array(logs)), y, 1 << 16, seed, False)
    assert labels == base_labels
    np.testing.assert_allclose(probs, base_probs, rtol=1e-6, atol=1e-9)
