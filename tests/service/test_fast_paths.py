"""The speed-ups of the hot path equal the plain numpy textbook forms, draw for draw and bit for bit."""

from __future__ import annotations

import numpy as np

from lab.sim.datasets import load_dataset
from lab.sim.stream import run_stream
from service.kernels import gamma_mix_sample, rho_mix_sample
from service.learners.base import gamma_mix, make_learner, randargmax, randargmin, rho_mix, sample
from service.learners.cova import pa_step
from service.sampling import DecisionIds


def np_randargmax(v: np.ndarray, rng: np.random.Generator) -> int:
    i = int(np.argmax(v))
    ties = np.flatnonzero(v == v[i])
    return i if ties.size == 1 else int(ties[rng.integers(ties.size)])


def np_randargmin(v: np.ndarray, rng: np.random.Generator) -> int:
    return np_randargmax(-v, rng)


def np_sample(p: np.ndarray, rng: np.random.Generator) -> int:
    c = np.cumsum(p)
    return min(int(np.searchsorted(c, rng.random() * c[-1], side="right")), p.size - 1)


def test_helpers_equal_numpy_forms() -> None:
    g = np.random.default_rng(5)
    for trial in range(3000):
        k = int(g.integers(2, 12))
        v = g.integers(-2, 3, k) * (0.1 if trial % 2 else 1.0)  # many ties
        p = g.dirichlet(np.ones(k)) if trial % 3 else np.eye(k)[g.integers(k)]
        for fast, slow, arg in [
            (randargmax, np_randargmax, v),
            (randargmin, np_randargmin, v),
            (sample, np_sample, p),
        ]:
            r1, r2 = np.random.default_rng(trial), np.random.default_rng(trial)
            assert [fast(arg, r1) for _ in range(3)] == [slow(arg, r2) for _ in range(3)]
            assert r1.bit_generator.state == r2.bit_generator.state
        gamma, greedy = float(g.uniform(0.01, 0.49)), int(g.integers(k))
        expected = np.full(k, gamma / k)
        expected[greedy] += 1.0 - gamma
        assert gamma_mix(k, greedy, gamma).tobytes() == expected.tobytes()
        # Banditron's compiled sparse-path draw: the same label and distribution as gamma_mix + sample
        u = float(g.random()) if trial % 5 else float(trial % 2)  # the edges 0 and 1 too
        label, probs = gamma_mix_sample(greedy, k, gamma, u)
        assert probs.tobytes() == expected.tobytes()
        cdf = np.cumsum(expected)
        assert label == min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), k - 1)
        expected = np.full(k, gamma / (k - 1))
        expected[greedy] = 1.0 - gamma
        assert rho_mix(k, greedy, gamma).tobytes() == expected.tobytes()
        # the tree boosters' compiled draw: the same label and distribution as rho_mix + sample
        label, probs = rho_mix_sample(greedy, k, gamma, u)
        assert probs.tobytes() == expected.tobytes()
        r = np.random.default_rng(trial)
        u2 = float(np.random.default_rng(trial).random())
        assert (label, rho_mix_sample(greedy, k, gamma, u2)[0]) == (
            min(int(np.searchsorted(np.cumsum(expected), u * np.cumsum(expected)[-1], side="right")), k - 1),
            sample(rho_mix(k, greedy, gamma), r),
        )


def _dot(w: np.ndarray, x: np.ndarray) -> float:
    """``w @ x`` summed in index order (the service's order on every CPU; BLAS's depends on the CPU)."""
    s = 0.0
    for j in np.flatnonzero(x):
        s += float(w[j]) * float(x[j])
    return s


def textbook_cova_learn(self, x: np.ndarray, decision, reward: bool) -> None:
    """Seed 004, Algorithm 1, with every scorer's full PA step applied (zero steps included)."""
    self.t_ += 1
    sqnorm = _dot(x, x)
    if sqnorm == 0.0:
        return
    yhat = decision.label
    ys = np.full(self.n_labels, -1.0)
    ys[yhat] = 1.0
    if reward:
        scores = np.array([_dot(w, x) for w in self.W_])
        tau = pa_step(np.maximum(0.0, 1.0 - ys * scores), sqnorm, self.params.base, self.params.C)
        self.W_ += np.outer(tau * ys, x)
    else:
        loss = np.array(max(0.0, 1.0 + _dot(self.W_[yhat], x)))
        tau = pa_step(loss, sqnorm, self.params.base, self.params.C)
        self.W_[yhat] -= float(tau) * x


def test_cova_skipping_zero_steps_is_bit_identical() -> None:
    for name in ("car", "balance"):
        data = load_dataset(name)
        X, y = data.stream(1, 2)
        for base in ("pa", "pa1", "pa2"):
            params = {"base": base, "C": 0.3, "interactions": "none"}
            fast = make_learner("cova", data.d, data.n_labels, params, seed=2)
            slow = make_learner("cova", data.d, data.n_labels, params, seed=2)
            slow.learn = textbook_cova_learn.__get__(slow)
            a = run_stream(fast, X, y, DecisionIds.for_seed(3))
            b = run_stream(slow, X, y, DecisionIds.for_seed(3))
            assert np.array_equal(a, b) and fast.W_.tobytes() == slow.W_.tobytes()
