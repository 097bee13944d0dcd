"""Conservative OVA (ALGORITHMS.md §6): decoding identity and an oracle of the PA family."""

from __future__ import annotations

import numpy as np
import pytest

from service.learners.base import make_learner


def loss_based_decoding(f: np.ndarray) -> np.ndarray:
    """d_L(M(r), f) = (1 - f_r)_+ + sum_{s != r} (1 + f_s)_+ for every r (seed 004, eqs. 5-6)."""
    k = f.size
    return np.array(
        [max(0.0, 1 - f[r]) + sum(max(0.0, 1 + f[s]) for s in range(k) if s != r) for r in range(k)]
    )


@pytest.mark.parametrize("case", range(300))
def test_argmin_of_loss_based_decoding_is_argmax_of_scores(case: int) -> None:
    rng = np.random.default_rng(case)
    k, d = int(rng.integers(2, 10)), 4
    m = make_learner("cova", d, k, {"interactions": "none"})
    m.W_ = rng.normal(scale=rng.choice([0.1, 1.0, 5.0]), size=(k, d))
    x = rng.normal(size=d)
    dec = m.decide(x, np.random.default_rng(case))
    dl = loss_based_decoding(m.W_ @ x)
    assert dl[dec.label] == pytest.approx(dl.min())
    assert dec.probs[dec.label] == 1.0


def test_first_round_is_a_uniform_guess() -> None:
    m = make_learner("cova", 3, 5, {"interactions": "none"})
    assert np.all(loss_based_decoding(m.W_ @ np.ones(3)) == 5)
    labels = [m.decide(np.ones(3), np.random.default_rng(s)).label for s in range(2000)]
    assert np.bincount(labels, minlength=5).min() > 320  # 400 expected each


def textbook_pa(w: list[float], x: list[float], y: float, base: str, C: float) -> list[float]:
    """One PA / PA-I / PA-II step (Crammer et al. 2006), scalar code."""
    margin = sum(wi * xi for wi, xi in zip(w, x, strict=True))
    loss = max(0.0, 1.0 - y * margin)
    sq = sum(xi * xi for xi in x)
    if loss == 0.0 or sq == 0.0:
        return w
    tau = {"pa": loss / sq, "pa1": min(C, loss / sq), "pa2": loss / (sq + 1 / (2 * C))}[base]
    return [wi + tau * y * xi for wi, xi in zip(w, x, strict=True)]


@pytest.mark.parametrize("base", ["pa", "pa1", "pa2"])
@pytest.mark.parametrize("C", [0.1, 1.0])
def test_oracle_conservative_ova_loop(base: str, C: float) -> None:
    rng = np.random.default_rng(7)
    k, d = 4, 6
    m = make_learner("cova", d, k, {"base": base, "C": C, "interactions": "none"})
    W = [[0.0] * d for _ in range(k)]
    Wtrue = rng.normal(size=(k, d))
    for t in range(400):
        x = rng.normal(size=d) if t % 50 else np.zeros(d)
        y = int(np.argmax(Wtrue @ x)) if t % 7 else int(rng.integers(k))
        dec = m.decide(x, np.random.default_rng(t))
        yhat = dec.label
        scores = [sum(W[r][j] * x[j] for j in range(d)) for r in range(k)]
        assert scores[yhat] == pytest.approx(max(scores))
        if yhat == y:  # every scorer: +1 for yhat, -1 for the others
            W = [textbook_pa(W[s], list(x), 1.0 if s == yhat else -1.0, base, C) for s in range(k)]
        else:  # only scorer yhat, label -1
            W[yhat] = textbook_pa(W[yhat], list(x), -1.0, base, C)
        m.learn(x, dec, yhat == y)
    np.testing.assert_allclose(m.W_, np.array(W), rtol=1e-10, atol=1e-12)
