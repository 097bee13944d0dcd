"""Issue 50's "Ties" must-show over HTTP: a new model with K = 3 labels (every label tied) answers 300
identical predicts with the probability each label is really drawn with, and draws them so."""

from __future__ import annotations

import math

import pytest

from service.config import DEFAULT_LEARNER
from tests.service.api.conftest import app_client, make_app

pytestmark = pytest.mark.anyio

N = 300


def binomial_bounds(n: int, p: float, tail: float) -> tuple[int, int]:
    """The smallest ``lo`` and largest ``hi`` with ``P(X < lo) <= tail`` and ``P(X > hi) <= tail`` for
    ``X ~ Binomial(n, p)`` (exact sums)."""
    pmf = [math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(n + 1)]
    lo, acc = 0, 0.0
    while acc + pmf[lo] <= tail:
        acc += pmf[lo]
        lo += 1
    hi, acc = n, 0.0
    while acc + pmf[hi] <= tail:
        acc += pmf[hi]
        hi -= 1
    return lo, hi


@pytest.mark.parametrize(
    "spec",
    [{"learner": "cova", "params": {"epsilon": 0.02}}, {"learner": DEFAULT_LEARNER[0]}],
    ids=["cova-floor-0.02", "default"],
)
async def test_a_new_model_reports_the_true_probability_of_tied_labels(spec: dict) -> None:
    labels = ["a", "b", "c"]
    async with app_client(make_app()) as c:
        r = await c.put("/models/m", json={"n_features": 3, "labels": labels, **spec})
        assert r.status_code == 201, r.text
        counts = dict.fromkeys(labels, 0)
        for _ in range(N):
            r = await c.post("/predict", json={"model": "m", "features": [1.0, 0.5, 2.0]})
            assert r.status_code == 200, r.text
            d = r.json()
            assert all(abs(p - 1 / 3) <= 1e-9 for p in d["probabilities"]), d["probabilities"]
            assert abs(d["probability"] - 1 / 3) <= 1e-9
            counts[d["label"]] += 1
    lo, hi = binomial_bounds(N, 1 / 3, 1e-6)
    assert all(lo <= n <= hi for n in counts.values()), (counts, lo, hi)
