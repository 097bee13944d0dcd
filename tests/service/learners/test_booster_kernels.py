"""The compiled glue of the tree boosters (service.learners.booster_kernels) equals the numpy steps it
replaced, bit for bit, on inputs with many ties and a wide dynamic range (the stored reproduction
runs rely on it); and the kernels compile at import, never at a call."""

from __future__ import annotations

import numpy as np
import pytest

from service.learners import booster_kernels as bk


def textbook_rows_argmax(V: np.ndarray, U: np.ndarray) -> np.ndarray:
    at_max = V.max(axis=1, keepdims=True) == V
    return np.argmax(np.where(at_max, U.reshape(V.shape), -1.0), axis=1)


def textbook_costs_to_examples(
    C: np.ndarray, clip: float, U: np.ndarray, prefer: int | None, divide: bool
) -> tuple[np.ndarray, np.ndarray]:
    C = np.clip(C, -clip, clip)
    low = C.min(axis=1)
    at_min = low[:, None] == C
    labels = np.argmax(np.where(at_min, U.reshape(C.shape), -1.0), axis=1)
    if prefer is not None:
        labels = np.where(at_min[:, prefer], prefer, labels)
    weights = (C - low[:, None]).sum(axis=1)
    if divide:
        weights /= C.shape[1] - 1
    return labels, np.maximum(weights, 1e-10)


def matrices(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Small integers (ties everywhere) or normals scaled over 16 orders of magnitude."""
    if rng.random() < 0.5:
        return rng.integers(-2, 3, (n, k)).astype(float)
    return rng.standard_normal((n, k)) * 10.0 ** rng.integers(-8, 8, (n, k))


@pytest.mark.parametrize("k", [2, 3, 4, 7, 8, 9, 10, 17, 26])
def test_kernels_equal_the_numpy_steps(k: int) -> None:
    rng = np.random.default_rng(k)
    for _ in range(300):
        n = int(rng.integers(1, 25))
        V = matrices(rng, n, k)
        U = rng.random(2 * n * k)
        np.testing.assert_array_equal(bk.rows_argmax(V, U), textbook_rows_argmax(V, U[: n * k]))

        alpha = rng.standard_normal(n) * rng.choice([0.0, 1e-9, 1.0, 1e6])
        weak, votes, experts = bk.adabandit_votes(V, alpha, U)
        ref_weak = textbook_rows_argmax(V, U[: n * k])
        ref_votes = np.zeros((n, k))
        ref_votes[np.arange(n), ref_weak] = alpha
        ref_votes = np.cumsum(ref_votes, axis=0)
        np.testing.assert_array_equal(weak, ref_weak)
        assert votes.tobytes() == ref_votes.tobytes()  # bit for bit, signed zeros included
        np.testing.assert_array_equal(experts, textbook_rows_argmax(ref_votes, U[n * k :]))

        clip = float(rng.choice([1.0, 100.0, 1e300]))
        prefer = None if rng.random() < 0.3 else int(rng.integers(k))
        divide = bool(rng.integers(2))
        labels, weights = bk.cost_examples(V, clip, U[: n * k], -1 if prefer is None else prefer, divide)
        ref_labels, ref_weights = textbook_costs_to_examples(V, clip, U[: n * k], prefer, divide)
        np.testing.assert_array_equal(labels, ref_labels)
        assert weights.tobytes() == ref_weights.tobytes()


@pytest.mark.parametrize("name", bk.__all__)
def test_kernels_are_compiled_at_import(name: str) -> None:
    kernel = getattr(bk, name)
    compiled = list(kernel.signatures)
    assert compiled, f"{name} has no compiled signature"
    V, U = np.ones((3, 4)), np.full(24, 0.5)
    args = {
        "rows_argmax": (V, U),
        "adabandit_votes": (V, np.ones(3), U),
        "cost_examples": (V, 1.0, U, 2, True),
    }[name]
    kernel(*args)
    kernel(*[a[:, ::1] if isinstance(a, np.ndarray) and a.ndim == 2 else a for a in args])
    assert list(kernel.signatures) == compiled
