"""Compiled loops of the linear learners on sparse input (issue 19): O(K nnz) per event, no temporaries.

A hashed request has a few dozen non-zero buckets out of up to 2**22, so the work per event is tiny
and numpy's per-call overhead (fancy-indexing copies, a few microseconds per call) dominated it.
These loops are compiled with numba (a maintained JIT for numpy code, with wheels on PyPI) with
explicit signatures, so they compile when this module is imported, from the on-disk cache
(``cache=True``) after the first time: the service imports the learners before it turns ready, so
no request pays a compilation. No ``fastmath`` (no reassociation, no fused multiply-add): every loop
sums in index order with IEEE arithmetic, so replicas applying the same log stay bit-identical.

The weight matrices are the learners' ``W_`` of shape (K, d); ``idx`` holds strictly
increasing column indices and ``val`` their values (:class:`service.features.SparseVector`).
The element-wise updates are those of the dense textbook learner on the non-zero columns
(``w - 0 = w`` elsewhere), so they match it bit for bit; sums over nnz terms instead of d (scores,
``||x||^2``) differ from a dense BLAS dot in the last bits only (``tests/service/learners/test_sparse.py``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from service._jit_cache import kernel

__all__ = [
    "banditron_update",
    "banditron_update_dense_batch",
    "banditron_update_sparse_batch",
    "gamma_mix_sample",
    "merge_buckets",
    "nonzeros",
    "pa_update",
    "pcg64_doubles",
    "perceptron_update",
    "sort_distinct",
    "sparse_argmax",
    "sparse_scores",
]

_W = "float64[:, :]"
_WF = "float64[::1, :]"  # column-major: one column's K weights contiguous, so the label loop vectorises
_IDX = "int64[:]"
_VAL = "float64[:]"
_OPTS = {"cache": True, "nogil": True, "boundscheck": False}

#: ``base`` codes of :func:`pa_update` (C-OVA's linear bases, seed 004 eqs. 10-12 and the Perceptron).
PA_BASES = {"pa": 0, "pa1": 1, "pa2": 2, "perceptron": 3}


@kernel([f"float64[::1]({w}, {_IDX}, {_VAL})" for w in (_WF, _W)])
def sparse_scores(W: np.ndarray, idx: np.ndarray, val: np.ndarray) -> np.ndarray:
    """``W[:, idx] @ val``: the K scores of a sparse input.

    Each score sums its terms in index order, as one loop per label would, whatever the layout.
    With column-major ``W`` the K sums advance together (labels inner), so they are K independent
    chains of additions and one column's K weights are read together. With row-major ``W`` (a
    dense model) that inner loop would stride across the rows, 6x slower than numpy's BLAS on a
    dense row of 8,192; there four labels advance together along their own rows instead.
    """
    k_labels = W.shape[0]
    out = np.zeros(k_labels)
    if W.strides[1] == W.itemsize and W.strides[0] != W.itemsize:  # row-major (K > 1)
        k = 0
        while k + 4 <= k_labels:
            r0, r1, r2, r3 = W[k], W[k + 1], W[k + 2], W[k + 3]
            s0, s1, s2, s3 = 0.0, 0.0, 0.0, 0.0
            for j in range(idx.size):
                c, v = idx[j], val[j]
                s0 += r0[c] * v
                s1 += r1[c] * v
                s2 += r2[c] * v
                s3 += r3[c] * v
            out[k], out[k + 1], out[k + 2], out[k + 3] = s0, s1, s2, s3
            k += 4
        while k < k_labels:
            row, s = W[k], 0.0
            for j in range(idx.size):
                s += row[idx[j]] * val[j]
            out[k] = s
            k += 1
        return out
    for j in range(idx.size):
        c, v = idx[j], val[j]
        for k in range(k_labels):
            out[k] += W[k, c] * v
    return out


@kernel("UniTuple(int64, 2)(float64[::1])")
def first_max(scores: np.ndarray) -> tuple[int, int]:
    """The first maximiser of ``scores`` and how many share its value (NaN never counts)."""
    best, first, count = -np.inf, 0, 0
    for k in range(scores.size):
        s = scores[k]
        if s > best:
            best, first, count = s, k, 1
        elif s == best:
            count += 1
    return first, count


@kernel([f"UniTuple(int64, 2)({w}, {_IDX}, {_VAL})" for w in (_WF, _W)])
def sparse_argmax(W: np.ndarray, idx: np.ndarray, val: np.ndarray) -> tuple[int, int]:
    """The first maximiser of the scores ``W[:, idx] @ val`` and how many labels share its score
    (so a caller draws a tie-break only on a tie, as :func:`service.learners.base.randargmax`)."""
    return first_max(sparse_scores(W, idx, val))


@kernel(f"void({_W}, {_IDX}, {_VAL}, int64, int64, boolean, float64)")
def banditron_update(
    W: np.ndarray, idx: np.ndarray, val: np.ndarray, greedy: int, label: int, click: bool, p: float
) -> None:
    """Banditron's ``W += U~`` on the non-zero columns: row ``greedy`` loses x, row ``label`` gains
    ``x / p`` on a click (seed 002, Algorithm 1 with the erratum of ALGORITHMS.md §5)."""
    for j in range(idx.size):
        W[greedy, idx[j]] -= val[j]
    if click:
        for j in range(idx.size):
            W[label, idx[j]] += val[j] / p


@kernel(f"void({_W}, {_W}, {_IDX}, {_IDX}, boolean[:], {_VAL})")
def banditron_update_dense_batch(
    W: np.ndarray, X: np.ndarray, greedy: np.ndarray, label: np.ndarray, click: np.ndarray, p: np.ndarray
) -> None:
    """Banditron's dense update for the rows of ``X`` in order (issue 40: a follower's batch), each
    the element-wise arithmetic of ``W[greedy] -= x; W[label] += x / p`` (numpy's order, bit for
    bit: subtraction, then a division and an addition per element, no fused steps)."""
    d = X.shape[1]
    for i in range(X.shape[0]):
        g = greedy[i]
        for j in range(d):
            W[g, j] -= X[i, j]
        if click[i]:
            r, q = label[i], p[i]
            for j in range(d):
                W[r, j] += X[i, j] / q


@kernel(f"void({_W}, {_IDX}, {_VAL}, {_IDX}, {_IDX}, {_IDX}, boolean[:], {_VAL})")
def banditron_update_sparse_batch(
    W: np.ndarray,
    idx: np.ndarray,
    val: np.ndarray,
    start: np.ndarray,
    greedy: np.ndarray,
    label: np.ndarray,
    click: np.ndarray,
    p: np.ndarray,
) -> None:
    """:func:`banditron_update` for events ``i`` in order, event ``i``'s non-zeros being
    ``idx[start[i]:start[i + 1]]`` and ``val[...]`` (a follower's batch, issue 40)."""
    for i in range(greedy.size):
        g, a, b = greedy[i], start[i], start[i + 1]
        for j in range(a, b):
            W[g, idx[j]] -= val[j]
        if click[i]:
            r, q = label[i], p[i]
            for j in range(a, b):
                W[r, idx[j]] += val[j] / q


@njit(**_OPTS)  # compiled into its callers
def _draw(p: np.ndarray, u: float) -> int:
    """:func:`service.learners.base.sample_list`'s label: the CDF summed left to right, the first
    value above ``u`` times the total, capped at K - 1."""
    k = p.size
    c = np.empty(k)
    acc = 0.0
    for i in range(k):
        acc = p[i] if i == 0 else acc + p[i]
        c[i] = acc
    target = u * c[k - 1]
    for i in range(k):
        if c[i] > target:
            return i
    return k - 1


@kernel("Tuple((int64, float64[::1]))(int64, int64, float64, float64)")
def gamma_mix_sample(greedy: int, k_labels: int, gamma: float, u: float) -> tuple[int, np.ndarray]:
    """Banditron's exploration (seed 002): ``p = gamma / K`` everywhere plus ``1 - gamma`` on
    ``greedy``, and the label the uniform draw ``u`` picks from it, with the arithmetic of
    :func:`service.learners.base.sample_list` (CDF summed left to right, the first value above
    ``u`` times the total, capped at K - 1): the same label and probabilities, bit for bit."""
    p = np.full(k_labels, gamma / k_labels)
    p[greedy] += 1.0 - gamma
    return _draw(p, u), p


@kernel("Tuple((int64, float64[::1]))(int64, int64, float64, float64)")
def rho_mix_sample(greedy: int, k_labels: int, rho: float, u: float) -> tuple[int, np.ndarray]:
    """The tree boosters' exploration (Zhang, Jung, Tewari 2019, eq. (2)): ``p = rho / (K - 1)``
    everywhere and ``1 - rho`` on ``greedy``, and the label the uniform draw ``u`` picks from it, as
    :func:`service.learners.base.rho_mix` then ``sample_list``: the same floats and label, bit for bit."""
    p = np.full(k_labels, rho / (k_labels - 1))
    p[greedy] = 1.0 - rho
    return _draw(p, u), p


@kernel(f"void({_W}, {_IDX}, {_VAL}, int64, int64)")
def perceptron_update(W: np.ndarray, idx: np.ndarray, val: np.ndarray, y: int, yhat: int) -> None:
    """The multiclass Perceptron's mistake update: row ``y`` gains x, row ``yhat`` loses it."""
    for j in range(idx.size):
        W[y, idx[j]] += val[j]
    for j in range(idx.size):
        W[yhat, idx[j]] -= val[j]


@kernel("float64(float64, float64, int64, float64)")
def _step(loss: float, sqnorm: float, base: int, C: float) -> float:
    """``tau`` of :func:`service.learners.cova.pa_step` for one hinge loss."""
    if base == 3:
        return 1.0 if loss >= 1.0 else 0.0
    if base == 0:
        return loss / sqnorm
    if base == 1:
        return min(C, loss / sqnorm)
    return loss / (sqnorm + 1.0 / (2.0 * C))


@kernel([f"void({w}, {_IDX}, {_VAL}, int64, boolean, int64, float64)" for w in (_WF, _W)])
def pa_update(
    W: np.ndarray, idx: np.ndarray, val: np.ndarray, yhat: int, click: bool, base: int, C: float
) -> None:
    """Conservative OVA's update with PA / PA-I / PA-II / Perceptron bases (seed 004, Algorithm 1).

    Click: every scorer s takes a step on ``(x, +1 if s = yhat else -1)``; no click: scorer ``yhat``
    takes a step on ``(x, -1)``. A step is ``w += tau y x`` where the hinge loss is positive; nothing
    moves when ``x = 0`` (ALGORITHMS.md §6).
    """
    sqnorm = 0.0
    for j in range(idx.size):
        sqnorm += val[j] * val[j]
    if sqnorm == 0.0:
        return
    first = 0 if click else yhat
    last = W.shape[0] if click else yhat + 1
    # A step of one scorer moves no other scorer's score, so all are taken first (sparse_scores)
    scores = sparse_scores(W, idx, val) if click else np.zeros(0)
    for s in range(first, last):
        if click:
            score = scores[s]
        else:
            score = 0.0
            for j in range(idx.size):
                score += W[s, idx[j]] * val[j]
        ys = 1.0 if s == yhat and click else -1.0
        loss = 1.0 - ys * score
        if loss > 0.0:
            c = _step(loss, sqnorm, base, C) * ys
            for j in range(idx.size):
                W[s, idx[j]] += c * val[j]


@kernel("boolean(int64[:])")
def sort_distinct(buckets: np.ndarray) -> bool:
    """Sort ``buckets`` in place; whether no two are equal (the featuriser's fast path)."""
    buckets.sort()
    for i in range(1, buckets.size):  # noqa: SIM110 (a loop numba compiles; not all() of a generator)
        if buckets[i] == buckets[i - 1]:
            return False
    return True


@kernel("Tuple((int64[::1], float64[::1]))(int64[:], float64[:])")
def merge_buckets(buckets: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sparse vector of ``(bucket, value)`` pairs: sorted buckets, colliding values added in
    request order (as a dense ``x[b] += v`` would), zero sums dropped."""
    n = buckets.size
    order = np.argsort(buckets, kind="mergesort")  # stable: equal buckets keep request order
    idx = np.empty(n, np.int64)
    val = np.empty(n, np.float64)
    m = -1
    for i in order:
        if m >= 0 and idx[m] == buckets[i]:
            val[m] += values[i]
        else:
            m += 1
            idx[m] = buckets[i]
            val[m] = values[i]
    kept = 0
    for i in range(m + 1):
        if val[i] != 0.0:
            idx[kept] = idx[i]
            val[kept] = val[i]
            kept += 1
    return idx[:kept].copy(), val[:kept].copy()


# PCG64 (numpy's: 128-bit LCG, XSL-RR output) in two 64-bit halves, for the decision generator's
# bulk draws (``DecisionRng.random(size)``); numba has no 128-bit integers.
_MULT_HI = np.uint64(0x2360ED051FC65DA4)
_MULT_LO = np.uint64(0x4385DF649FCCF645)
_LOW32 = np.uint64(0xFFFFFFFF)
_U32 = np.uint64(32)
_U63 = np.uint64(63)
_U58 = np.uint64(58)
_U11 = np.uint64(11)


@kernel("void(uint64[:], float64[:])")
def pcg64_doubles(state: np.ndarray, out: np.ndarray) -> None:
    """Fill ``out`` with the doubles numpy's ``PCG64`` draws next (``(next64 >> 11) 2^-53``) and
    advance ``state`` = ``[state_hi, state_lo, inc_hi, inc_lo]`` in place past them."""
    hi, lo, inc_hi, inc_lo = state[0], state[1], state[2], state[3]
    for i in range(out.size):
        # (hi, lo) * MULT mod 2^128: the full 64x64 product of the low halves from 32-bit pieces
        a1, a0 = lo >> _U32, lo & _LOW32
        b1, b0 = _MULT_LO >> _U32, _MULT_LO & _LOW32
        p00, p01, p10 = a0 * b0, a0 * b1, a1 * b0
        mid = (p00 >> _U32) + (p01 & _LOW32) + (p10 & _LOW32)
        top = a1 * b1 + (p01 >> _U32) + (p10 >> _U32) + (mid >> _U32)
        new_hi = top + hi * _MULT_LO + lo * _MULT_HI
        new_lo = lo * _MULT_LO
        lo = new_lo + inc_lo
        hi = new_hi + inc_hi + (np.uint64(1) if lo < new_lo else np.uint64(0))
        x = hi ^ lo
        rot = hi >> _U58
        r = (x >> rot) | (x << ((np.uint64(64) - rot) & _U63))
        out[i] = np.float64(r >> _U11) * (1.0 / 9007199254740992.0)
    state[0], state[1] = hi, lo


@njit(**_OPTS)
def _nonzeros(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = 0
    for j in range(x.size):
        if x[j] != 0.0:
            n += 1
    idx = np.empty(n, np.int64)
    val = np.empty(n)
    n = 0
    for j in range(x.size):
        if x[j] != 0.0:
            idx[n] = j
            val[n] = x[j]
            n += 1
    return idx, val


@kernel(f"Tuple((int64[::1], float64[::1]))({_VAL})")
def nonzeros(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sparse form ``(idx, val)`` of a dense vector: its non-zero entries in index order."""
    return _nonzeros(x)
