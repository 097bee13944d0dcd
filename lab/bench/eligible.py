"""``bench eligible``: learning with eligible-label masks is no worse than without (issue 38).

A simulated stream of ours: binary contexts (d = 8, 40 % ones), a linear teacher over K = 6 labels
with a little noise, the true label the teacher's best. Labels 3, 4 and 5 are "often out of stock":
each is ineligible on 60 % of the requests, independently. Every bandit learner at its defaults
runs the stream twice, deciding among the eligible labels (masked) and among all labels (unmasked),
learning from the click bit either way (click iff the served label is the true one). Both errors
are counted on the same rounds: those whose true label is eligible (a round whose true label is out
of stock is learned from, never clicked, and not counted). tests/service/learners/test_eligible.py
asserts the same comparison on three streams.
"""

from __future__ import annotations

import sys

import numpy as np

from lab.bench import benches, report
from service.learners.base import learners, make_learner
from service.sampling import DecisionIds, decision_rng

D, K = 8, 6
#: labels 3..5 are ineligible on 60 % of the requests each ("often out of stock")
OFTEN_OUT = np.array([0.0, 0.0, 0.0, 0.6, 0.6, 0.6])
SEEDS = 5


def bandit_learners() -> list[str]:
    """Every registered learner that learns from bandit feedback."""
    return [name for name, cls in learners.items() if not cls.full_information and not cls.actions]


def teacher(seed: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Contexts, the teacher's scores of every label, and per-request eligible sets."""
    rng = np.random.default_rng(seed)
    X = (rng.random((n, D)) < 0.4).astype(np.float64)
    scores = X @ rng.normal(size=(D, K)) + rng.normal(scale=0.1, size=(n, K))
    sets = rng.random((n, K)) >= OFTEN_OUT
    return X, scores, sets


def online_error(name: str, masked: bool, seed: int = 0, n: int = 6000) -> float:
    """Online error of ``name`` on the stream ``seed`` (true label: the teacher's best), counted on
    the rounds whose true label is eligible: with ``masked`` the learner decides among the eligible
    labels, without it among all labels on the same rounds."""
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


def bench_eligible(quick: bool) -> str:
    seeds, n = (1, 1500) if quick else (SEEDS, 6000)
    rows = []
    for name in bandit_learners():
        masked = np.array([online_error(name, True, s, n) for s in range(seeds)])
        plain = np.array([online_error(name, False, s, n) for s in range(seeds)])
        diff = masked - plain
        se = float(diff.std(ddof=1) / np.sqrt(seeds)) if seeds > 1 else float("nan")
        rows.append(
            [
                f"`{name}`",
                f"{100 * masked.mean():.1f}",
                f"{100 * plain.mean():.1f}",
                f"{100 * diff.mean():+.1f} ± {100 * se:.1f}",
                "yes" if diff.mean() <= 2 * se or diff.mean() <= 0 else "**no**",
            ]
        )
        print(" ".join(rows[-1]), file=sys.stderr, flush=True)
    table = report.table(["learner (defaults)", "masked", "unmasked", "masked − unmasked", "no worse"], rows)
    return (
        "## Eligible labels: learning with masks\n\n"
        f"`python -m service bench eligible{' --quick' if quick else ''}`. {report.machine()}\n\n"
        f"Online error (%) over the rounds whose true label is eligible, mean of {seeds} streams of "
        f"{n:,} rounds (d = {D}, K = {K}; labels 3-5 each ineligible on 60 % of the requests), the "
        'difference with its standard error over the streams; "no worse": the difference is at '
        "most two standard errors above 0. The stream is described in `lab/bench/eligible.py`.\n\n"
        f"{table}\n"
    )


benches.register("eligible")(bench_eligible)
