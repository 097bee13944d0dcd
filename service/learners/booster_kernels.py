"""Compiled glue of the tree boosters' decisions (issue 20): the votes of AdaBandit and BanditBBM.

A booster's decision is a handful of tiny array steps (a random argmax per tree, cumulative votes,
a random argmax per expert); as numpy calls they cost a few microseconds each, more than the
arithmetic. These loops do them in one call each, with the arithmetic numpy did: comparisons, and
the sequential sums of ``np.cumsum``, so every decision is bit for bit what it was (the stored
reproduction runs stay valid, ``tests/lab/test_results_pinned.py``). Same conventions as
:mod:`service.kernels`: explicit signatures (compiled at import, from the on-disk cache), no
``fastmath``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["adabandit_votes", "cost_examples", "rows_argmax"]

_OPTS = {"cache": True, "nogil": True, "boundscheck": False}


@njit("int64(float64[:, :], int64, float64[:], int64)", **_OPTS)
def _row_argmax(V: np.ndarray, i: int, U: np.ndarray, offset: int) -> int:
    """Index of a maximum of row ``i`` of ``V``, the one with the largest ``U[offset + c]`` among ties
    (the first on equal draws), as ``argmax(where(row == max, u, -1))``."""
    k = V.shape[1]
    top = V[i, 0]
    for c in range(1, k):
        if V[i, c] > top:
            top = V[i, c]
    best, pick = -1.0, 0
    for c in range(k):
        score = U[offset + c] if V[i, c] == top else -1.0
        if score > best:
            best, pick = score, c
    return pick


@njit("int64[::1](float64[:, :], float64[:])", **_OPTS)
def rows_argmax(V: np.ndarray, U: np.ndarray) -> np.ndarray:
    """Row-wise random argmax of ``V`` (N, k), ties broken by the uniform draws ``U`` (N k, C order):
    :func:`service.learners.booster_costs.rand_rows_argmax` with its draws given."""
    n, k = V.shape
    out = np.empty(n, np.int64)
    for i in range(n):
        out[i] = _row_argmax(V, i, U, i * k)
    return out


@njit("Tuple((int64[::1], float64[:, ::1], int64[::1]))(float64[:, :], float64[:], float64[:])", **_OPTS)
def adabandit_votes(
    dist: np.ndarray, alpha: np.ndarray, U: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AdaBandit's weak predictions, cumulative votes and experts (seed 001, Algorithm 1).

    ``weak[i]`` is a random argmax of tree ``i``'s class weights ``dist[i]`` (draws ``U[:N k]``);
    ``votes[i] = sum_{j <= i} alpha[j] e_{weak[j]}``, summed in order as ``np.cumsum``; ``experts[i]``
    is a random argmax of ``votes[i]`` (draws ``U[N k:]``).
    """
    n, k = dist.shape
    weak = rows_argmax(dist, U)
    votes = np.zeros((n, k))
    experts = np.empty(n, np.int64)
    for i in range(n):
        for c in range(k):
            step = alpha[i] if c == weak[i] else 0.0
            votes[i, c] = (votes[i - 1, c] + step) if i > 0 else step
        experts[i] = _row_argmax(votes, i, U, (n + i) * k)
    return weak, votes, experts


@njit("float64(float64[:, :], int64, float64)", **_OPTS)
def _pairwise_row_sum(A: np.ndarray, i: int, shift: float) -> float:
    """``(A[i] - shift).sum()`` in numpy's order (``pairwise_sum``: sequential below 8 terms, else
    eight running sums combined as a tree, then the remainder), so the result is numpy's bit for bit."""
    n = A.shape[1]
    if n < 8:
        res = 0.0
        for c in range(n):
            res += A[i, c] - shift
        return res
    r = np.empty(8)
    for j in range(8):
        r[j] = A[i, j] - shift
    c = 8
    while c < n - n % 8:
        for j in range(8):
            r[j] += A[i, c + j] - shift
        c += 8
    res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    while c < n:
        res += A[i, c] - shift
        c += 1
    return res


@njit("Tuple((int64[::1], float64[::1]))(float64[:, :], float64, float64[:], int64, boolean)", **_OPTS)
def cost_examples(
    C: np.ndarray, clip: float, U: np.ndarray, prefer: int, divide: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The (label, weight) reduction of :func:`service.learners.booster_costs.costs_to_examples` with
    its draws ``U`` (N k) given and ``prefer = -1`` for none; works on a clipped copy of ``C``."""
    n, k = C.shape
    D = np.empty((n, k))
    labels = np.empty(n, np.int64)
    weights = np.empty(n)
    for i in range(n):
        low = np.inf
        for c in range(k):
            D[i, c] = min(max(C[i, c], -clip), clip)  # np.clip
            low = min(low, D[i, c])
        best, pick = -1.0, 0
        for c in range(k):
            score = U[i * k + c] if D[i, c] == low else -1.0
            if score > best:
                best, pick = score, c
        labels[i] = prefer if prefer >= 0 and D[i, prefer] == low else pick
        w = _pairwise_row_sum(D, i, low)
        if divide:
            w /= k - 1
        weights[i] = max(w, 1e-10)
    return labels, weights
