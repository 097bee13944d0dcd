"""The exact distribution of a decision's label, by enumerating the decision's randomness (issue 50).

A ``decide`` draws from its generator in two ways: ``integers(m)`` for a tie-break (uniform among m
tied labels) and ``random()`` for the sampling draw (a uniform in [0, 1)). :func:`exact_draws` runs
``decide`` once per path of tie-break choices (each path weighted by the product of its ``1 / m``)
and, on each path, once per point of a stratified grid of ``random()`` values (the midpoints
``(j + 1/2) / N``, weight ``1 / N`` each). The label frequencies it returns are then the exact
probabilities of the draw up to the grid's resolution: a label whose sampling interval has length
``p`` gets between ``p N - 1`` and ``p N + 1`` midpoints, so ``|frequency - p| <= 1 / N``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from service.learners.base import Decision


class UnsupportedDraw(TypeError):
    """The decide drew in a way the enumeration does not cover (vectors of uniforms, two samples)."""


@dataclass
class Replay:
    """A stand-in generator: ``integers(m)`` replays ``script`` (0 once past its end, recording the m
    asked), ``random()`` returns ``u`` and may be called once per decision."""

    script: list[int]
    u: float
    asked: list[int] = field(default_factory=list)
    randoms: int = 0

    def integers(self, high: int) -> np.int64:
        i = len(self.asked)
        self.asked.append(int(high))
        choice = self.script[i] if i < len(self.script) else 0
        assert 0 <= choice < high
        return np.int64(choice)

    def random(self, size: object = None) -> float:
        if size is not None or self.randoms:
            raise UnsupportedDraw("the decision draws more than one uniform")
        self.randoms += 1
        return self.u


@dataclass
class Exact:
    """What :func:`exact_draws` found: the label frequencies, every reported distribution, the paths."""

    freq: np.ndarray
    reported: list[np.ndarray]
    paths: int


def exact_draws(
    decide: Callable[[Replay], Decision],
    k: int,
    grid: int = 2000,
    replay: Callable[[list[int], float], Replay] = Replay,
) -> Exact:
    """The exact label distribution of ``decide(rng)`` over its tie-breaks and its sampling draw (module
    docstring), and what it reported on every run; ``replay`` makes the stand-in generators."""
    freq = np.zeros(k)
    reported: list[np.ndarray] = []
    paths = 0
    pending: list[list[int]] = [[]]
    while pending:
        script = pending.pop()
        probe = replay(script, 0.5)
        decide(probe)  # type: ignore[arg-type]
        if len(probe.asked) > len(script):  # a choice point not scripted yet: branch on it
            pending.extend([*script, c] for c in range(probe.asked[len(script)]))
            continue
        weight = 1.0 / float(np.prod(probe.asked)) if probe.asked else 1.0
        paths += 1
        for j in range(grid if probe.randoms else 1):
            rng = replay(script, (j + 0.5) / grid)
            d = decide(rng)  # type: ignore[arg-type]
            assert rng.asked == probe.asked  # the same path
            freq[d.label] += weight / (grid if probe.randoms else 1)
            reported.append(np.asarray(d.probs, dtype=np.float64))
    return Exact(freq, reported, paths)


def exact_draws_given(
    decide: Callable[[Replay], Decision], k: int, given: Callable[[Decision], object], grid: int = 500
) -> dict[object, Exact]:
    """:func:`exact_draws` conditioned on ``given(decision)`` (a part of the decision's randomness
    that its probabilities condition on, e.g. the trees' votes): each value's label frequencies,
    normalised by its probability, and what the runs with that value reported."""
    runs: dict[object, list[tuple[float, Decision]]] = {}
    pending: list[list[int]] = [[]]
    while pending:
        script = pending.pop()
        probe = Replay(script, 0.5)
        decide(probe)  # type: ignore[arg-type]
        if len(probe.asked) > len(script):
            pending.extend([*script, c] for c in range(probe.asked[len(script)]))
            continue
        weight = 1.0 / float(np.prod(probe.asked)) if probe.asked else 1.0
        n = grid if probe.randoms else 1
        for j in range(n):
            d = decide(Replay(script, (j + 0.5) / grid))  # type: ignore[arg-type]
            runs.setdefault(given(d), []).append((weight / n, d))
    out = {}
    for key, rs in runs.items():
        freq = np.zeros(k)
        for w, d in rs:
            freq[d.label] += w
        out[key] = Exact(freq / freq.sum(), [np.asarray(d.probs, dtype=np.float64) for _, d in rs], len(rs))
    return out


def assert_honest(found: Exact, grid: int = 2000) -> None:
    """Every run reported the same distribution, and it is the exact one (within the grid's 1 / N)."""
    first = found.reported[0]
    for p in found.reported[1:]:
        np.testing.assert_allclose(p, first, rtol=0, atol=1e-15)
    np.testing.assert_allclose(found.freq, first, rtol=0, atol=1.0 / grid + 1e-12)
