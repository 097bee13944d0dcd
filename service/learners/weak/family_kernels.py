"""Compiled loops of the binary weak-learner families (issue 20): whole N x K families per call.

BanditBoost scores all N x K binary models of a family every round and updates the N models of one
class (ALGORITHMS.md §4.1); in numpy that is a dozen calls of a few microseconds each per event, in
Python loops far more. These loops do a round's work in one call each, on the non-zero features of
the input only: a :class:`service.features.SparseVector` as ``idx``/``val``, a dense vector reduced
to its non-zeros first (:func:`service.kernels.nonzeros`; inside the compiled call on the hot
paths), so both forms go through the same arithmetic and give the same bits.

Conventions of :mod:`service.kernels`: explicit signatures, so everything compiles when the module
is imported (from the on-disk cache after the first time); ``cache=True, nogil=True``; no
``fastmath``, and every sum runs in index order, so the results are deterministic and replicas
stay bit-identical. Model arrays are feature-major, ``(d, K, N)``: the weights of one input feature
for all N x K models are contiguous, so a score is a run of axpys over contiguous rows, one per
non-zero (vectorised without reassociating any sum), and an update of class k touches N contiguous
values per non-zero. The lazy Perceptron store for hashed input keeps the same rows for the
features learned so far only, ``(rows, K, N)`` with a slot per feature (``perceptron_lazy_*``).
Helpers without a signature are compiled into their callers.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from service._jit_cache import kernel
from service.kernels import _nonzeros

__all__ = [
    "nb_refresh",
    "nb_scores",
    "nb_update",
    "nb_votes",
    "perceptron_lazy_scores",
    "perceptron_lazy_start",
    "perceptron_lazy_update",
    "perceptron_lazy_update_dense",
    "perceptron_lazy_votes",
    "perceptron_lazy_votes_dense",
    "perceptron_scores",
    "perceptron_update",
    "perceptron_update_dense",
    "perceptron_votes",
    "perceptron_votes_dense",
    "perceptron_votes_greedy_dense",
]

_OPTS = {"cache": True, "nogil": True, "boundscheck": False}
_IDX = "int64[:]"
_VAL = "float64[:]"
_ALPHA = "float64[:, :]"

#: The perceptron's lazy scale is folded back into its vector below this: the vector's entries
#: grow as 1 / scale, far from overflow here (|u| <= 1), and the fold is O(d), so it must be rare.
SCALE_FLOOR = 1e-100
#: Naive Bayes variance floor: absolute, plus this times the model's overall feature variance (§4.3).
VAR_FLOOR = 1e-9


@njit(**_OPTS)
def _add_rows(acc: np.ndarray, rows: np.ndarray, idx: np.ndarray, val: np.ndarray) -> None:
    """``acc += sum_t val[t] rows[idx[t]]``, the terms added to each ``acc[r]`` in t order.

    Four rows per pass with the running sum in a register: the same additions in the same order
    as one row at a time, with a quarter of the loads and stores of ``acc``.
    """
    m = acc.size
    t = 0
    while t + 4 <= idx.size:
        r0, r1, r2, r3 = rows[idx[t]], rows[idx[t + 1]], rows[idx[t + 2]], rows[idx[t + 3]]
        v0, v1, v2, v3 = val[t], val[t + 1], val[t + 2], val[t + 3]
        for r in range(m):
            s = acc[r]
            s += v0 * r0[r]
            s += v1 * r1[r]
            s += v2 * r2[r]
            s += v3 * r3[r]
            acc[r] = s
        t += 4
    while t < idx.size:
        row = rows[idx[t]]
        v = val[t]
        for r in range(m):
            acc[r] += v * row[r]
        t += 1


@njit(**_OPTS)
def _votes(alpha: np.ndarray, h: np.ndarray, f: np.ndarray) -> None:
    """``f_k = sum_i alpha[i, k] h[k, i]`` (seed 000 Alg. 1 step 1), summed in i order."""
    n_labels, n_learners = h.shape
    for k in range(n_labels):
        s = 0.0
        for i in range(n_learners):
            s += alpha[i, k] * h[k, i]
        f[k] = s


# -- projected OGD Perceptrons with a lazy scale: u = scale V, ||u||^2 kept in sqnorm --------------


@njit(**_OPTS)
def _unit(val: np.ndarray) -> tuple[np.ndarray, float]:
    """``x / max(1, ||x||)`` on the non-zeros (ALGORITHMS.md §4.3) and its squared norm."""
    sq = 0.0
    for t in range(val.size):
        sq += val[t] * val[t]
    xs = val.copy()
    if sq > 1.0:
        norm = math.sqrt(sq)
        sq = 0.0
        for t in range(val.size):
            xs[t] = val[t] / norm
            sq += xs[t] * xs[t]
    return xs, sq


@njit(**_OPTS)
def _perceptron_scores(
    V: np.ndarray, scale: np.ndarray, idx: np.ndarray, val: np.ndarray, h: np.ndarray
) -> None:
    d, n_labels, n_learners = V.shape
    xs, _ = _unit(val)
    acc = h.reshape(n_labels * n_learners)
    acc[:] = 0.0
    _add_rows(acc, V.reshape(d, n_labels * n_learners), idx, xs)
    for k in range(n_labels):
        for i in range(n_learners):
            h[k, i] *= scale[k, i]


@kernel(f"float64[:, ::1](float64[:, :, ::1], float64[:, ::1], {_IDX}, {_VAL})")
def perceptron_scores(V: np.ndarray, scale: np.ndarray, idx: np.ndarray, val: np.ndarray) -> np.ndarray:
    """Scores ``<u_k^(i), x / max(1, ||x||)>`` of all models, shape (K, N); ``u = scale V``."""
    h = np.empty(scale.shape)
    _perceptron_scores(V, scale, idx, val, h)
    return h


_PV = f"float64[:, :, ::1], float64[:, ::1], {_ALPHA}"
_OUT = "float64[:, ::1], float64[::1]"


@kernel(f"void({_PV}, {_IDX}, {_VAL}, {_OUT})")
def perceptron_votes(
    V: np.ndarray,
    scale: np.ndarray,
    alpha: np.ndarray,
    idx: np.ndarray,
    val: np.ndarray,
    h: np.ndarray,
    f: np.ndarray,
) -> None:
    """:func:`perceptron_scores` into ``h`` (K, N) and the alpha-weighted votes into ``f`` (K,).

    The outputs are arguments: numba returning two new arrays to Python costs more than the
    scoring of a small family.
    """
    _perceptron_scores(V, scale, idx, val, h)
    _votes(alpha, h, f)


@kernel(f"void({_PV}, {_VAL}, {_OUT})")
def perceptron_votes_dense(
    V: np.ndarray, scale: np.ndarray, alpha: np.ndarray, x: np.ndarray, h: np.ndarray, f: np.ndarray
) -> None:
    """:func:`perceptron_votes` of a dense input."""
    idx, val = _nonzeros(x)
    _perceptron_scores(V, scale, idx, val, h)
    _votes(alpha, h, f)


@kernel(f"int64({_PV}, {_VAL}, {_OUT})")
def perceptron_votes_greedy_dense(
    V: np.ndarray, scale: np.ndarray, alpha: np.ndarray, x: np.ndarray, h: np.ndarray, f: np.ndarray
) -> int:
    """:func:`perceptron_votes_dense`, then the maximiser of the votes ``f`` when it is unique, else
    -1 (a tie, or a NaN): the caller then draws among the ties as ``randargmax`` does, so the
    draws from the decision's generator are the same (BanditBoost's decide, one call less)."""
    idx, val = _nonzeros(x)
    _perceptron_scores(V, scale, idx, val, h)
    _votes(alpha, h, f)
    best, ties = 0, 1
    for k in range(1, f.size):
        if f[k] > f[best]:
            best, ties = k, 1
        elif f[k] == f[best]:
            ties += 1
    for k in range(f.size):
        if math.isnan(f[k]):
            return -1
    return best if ties == 1 else -1


@njit(**_OPTS)
def _perceptron_update(
    V: np.ndarray,
    scale: np.ndarray,
    sqnorm: np.ndarray,
    n: np.ndarray,
    idx: np.ndarray,
    val: np.ndarray,
    k: int,
    y: float,
    w: np.ndarray,
) -> None:
    n_learners = V.shape[2]
    xs, sqx = _unit(val)
    acc = np.zeros(n_learners)  # the models' current scores (the mistake test uses the live model)
    _add_rows(acc, V[:, k, :], idx, xs)
    coef = np.zeros(n_learners)
    moved = False
    for i in range(n_learners):
        a = scale[k, i]
        score = a * acc[i]
        if y * score <= 0.0 and w[i] > 0.0:
            n[k, i] += 1
            c = w[i] * y / math.sqrt(n[k, i])
            # ||u + c x||^2 from the kept ||u||^2 and the score u.x: O(1) instead of O(d)
            q = max(sqnorm[k, i] + 2.0 * c * score + c * c * sqx, 0.0)
            coef[i] = c / a  # u + c x = a (V + (c / a) x)
            moved = True
            if q > 1.0:  # projection onto the unit ball: only the scale changes
                scale[k, i] = a / math.sqrt(q)
                sqnorm[k, i] = 1.0
            else:
                sqnorm[k, i] = q
    if not moved:
        return
    for t in range(idx.size):  # coef = 0 for the models that did not move: +-0 keeps their values
        v = xs[t]
        for i in range(n_learners):
            V[idx[t], k, i] += coef[i] * v
    for i in range(n_learners):
        if scale[k, i] < SCALE_FLOOR:
            _renormalise(V, scale, sqnorm, k, i)


@njit(**_OPTS)
def _renormalise(V: np.ndarray, scale: np.ndarray, sqnorm: np.ndarray, k: int, i: int) -> None:
    a = scale[k, i]
    sq = 0.0
    for j in range(V.shape[0]):
        V[j, k, i] *= a
        sq += V[j, k, i] * V[j, k, i]
    scale[k, i] = 1.0
    sqnorm[k, i] = sq  # exact again: drops the rounding the incremental norm has gathered


_PU = "float64[:, :, ::1], float64[:, ::1], float64[:, ::1], int64[:, ::1]"


@kernel(f"void({_PU}, {_IDX}, {_VAL}, int64, float64, float64[:])")
def perceptron_update(
    V: np.ndarray,
    scale: np.ndarray,
    sqnorm: np.ndarray,
    n: np.ndarray,
    idx: np.ndarray,
    val: np.ndarray,
    k: int,
    y: float,
    w: np.ndarray,
) -> None:
    """Projected Perceptron steps of the N models of class k on ``(x, y)`` with weights ``w``.

    On a margin mistake ``y <u, x> <= 0`` with ``w > 0``: ``u <- (u + c x) / max(1, ||u + c x||)``,
    ``c = w y / sqrt(n)`` (ALGORITHMS.md §4.3), in O(nnz): ``u = scale V`` and ``||u||^2`` is kept,
    so the step moves V on the non-zeros and the projection only rescales.
    """
    _perceptron_update(V, scale, sqnorm, n, idx, val, k, y, w)


@kernel(f"void({_PU}, {_VAL}, int64, float64, float64[:])")
def perceptron_update_dense(
    V: np.ndarray,
    scale: np.ndarray,
    sqnorm: np.ndarray,
    n: np.ndarray,
    x: np.ndarray,
    k: int,
    y: float,
    w: np.ndarray,
) -> None:
    """:func:`perceptron_update` of a dense input."""
    idx, val = _nonzeros(x)
    _perceptron_update(V, scale, sqnorm, n, idx, val, k, y, w)


# -- the same Perceptrons on a lazy store: rows only for the features an update touched ------------
# For hashed input (d = 2**18 and more) the (d, K, N) array above is gigabytes, of which a web
# stream touches a few features. The lazy store keeps ``slot`` (d,) int32: 0 for a feature never
# materialised, else 1 + its row in ``rows`` (capacity, K, N), feature-major as V above; rows are
# used in the order features were first touched. A feature without a row weighs 0 in every model.
# When an update first touches a feature, its row starts at a random draw of a counter-based
# generator keyed by (seed, feature), stored divided by each model's scale so that u = scale V.

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_TWO_PI = 2.0 * math.pi


@njit(**_OPTS)
def _mix64(z: np.uint64) -> np.uint64:
    """SplitMix64's finaliser (Steele, Lea, Flood 2014): a bijection of 64-bit words."""
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@njit(**_OPTS)
def _start_row(seed: np.uint64, j: int, sigma: float, out: np.ndarray) -> None:
    """``out[m] = sigma z_m``, ``z_m ~ N(0, 1)`` for model ``m = k N + i``, a function of (seed, j, m).

    Feature j's stream is SplitMix64 from ``key = mix(mix(seed + G) + (j + 1) G)``: word c is
    ``mix(key + c G)``, c = 1, 2, ... (G = 0x9E3779B97F4A7C15). Words 2p + 1 and 2p + 2 give
    ``u1 = (w >> 11) + 1`` and ``u2 = w >> 11`` times 2**-53 (u1 in (0, 1], u2 in [0, 1)), and
    Box-Muller gives ``z_2p = r cos(2 pi u2)``, ``z_2p+1 = r sin(2 pi u2)``, ``r = sqrt(-2 ln u1)``.
    """
    key = _mix64(_mix64(seed + _GOLDEN) + np.uint64(j + 1) * _GOLDEN)
    m = out.size
    for p in range((m + 1) // 2):
        a = _mix64(key + np.uint64(2 * p + 1) * _GOLDEN)
        b = _mix64(key + np.uint64(2 * p + 2) * _GOLDEN)
        u1 = float((a >> np.uint64(11)) + np.uint64(1)) * 2.0**-53
        u2 = float(b >> np.uint64(11)) * 2.0**-53
        r = math.sqrt(-2.0 * math.log(u1))
        t = _TWO_PI * u2
        out[2 * p] = sigma * (r * math.cos(t))
        if 2 * p + 1 < m:
            out[2 * p + 1] = sigma * (r * math.sin(t))


@kernel("float64[::1](uint64, int64, float64, int64)")
def perceptron_lazy_start(seed: int, j: int, sigma: float, m: int) -> np.ndarray:
    """The random start of feature j in the m = K N models (model ``k N + i``), see :func:`_start_row`."""
    out = np.empty(m)
    _start_row(np.uint64(seed), j, sigma, out)
    return out


@njit(**_OPTS)
def _kept(slot: np.ndarray, idx: np.ndarray, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows and values of the non-zeros whose feature has a row, in index order."""
    count = 0
    for t in range(idx.size):
        if slot[idx[t]] > 0:
            count += 1
    ridx = np.empty(count, np.int64)
    rval = np.empty(count)
    count = 0
    for t in range(idx.size):
        s = slot[idx[t]]
        if s > 0:
            ridx[count] = s - 1
            rval[count] = xs[t]
            count += 1
    return ridx, rval


@njit(**_OPTS)
def _lazy_scores(
    slot: np.ndarray, rows: np.ndarray, scale: np.ndarray, idx: np.ndarray, val: np.ndarray, h: np.ndarray
) -> None:
    cap, n_labels, n_learners = rows.shape
    xs, _ = _unit(val)
    ridx, rval = _kept(slot, idx, xs)
    acc = h.reshape(n_labels * n_learners)
    acc[:] = 0.0
    _add_rows(acc, rows.reshape(cap, n_labels * n_learners), ridx, rval)
    for k in range(n_labels):
        for i in range(n_learners):
            h[k, i] *= scale[k, i]


_SLOT = "int32[::1], float64[:, :, ::1]"


@kernel(f"float64[:, ::1]({_SLOT}, float64[:, ::1], {_IDX}, {_VAL})")
def perceptron_lazy_scores(
    slot: np.ndarray, rows: np.ndarray, scale: np.ndarray, idx: np.ndarray, val: np.ndarray
) -> np.ndarray:
    """:func:`perceptron_scores` on the lazy store: a feature without a row contributes 0.

    The same additions in the same order as the dense store holding these rows (and zeros
    elsewhere) would make, bar the sign of an exact zero; nothing is materialised.
    """
    h = np.empty(scale.shape)
    _lazy_scores(slot, rows, scale, idx, val, h)
    return h


_LV = f"{_SLOT}, float64[:, ::1], {_ALPHA}"


@kernel(f"void({_LV}, {_IDX}, {_VAL}, {_OUT})")
def perceptron_lazy_votes(
    slot: np.ndarray,
    rows: np.ndarray,
    scale: np.ndarray,
    alpha: np.ndarray,
    idx: np.ndarray,
    val: np.ndarray,
    h: np.ndarray,
    f: np.ndarray,
) -> None:
    """:func:`perceptron_lazy_scores` into ``h`` (K, N) and the alpha-weighted votes into ``f`` (K,)."""
    _lazy_scores(slot, rows, scale, idx, val, h)
    _votes(alpha, h, f)


@kernel(f"void({_LV}, {_VAL}, {_OUT})")
def perceptron_lazy_votes_dense(
    slot: np.ndarray,
    rows: np.ndarray,
    scale: np.ndarray,
    alpha: np.ndarray,
    x: np.ndarray,
    h: np.ndarray,
    f: np.ndarray,
) -> None:
    """:func:`perceptron_lazy_votes` of a dense input."""
    idx, val = _nonzeros(x)
    _lazy_scores(slot, rows, scale, idx, val, h)
    _votes(alpha, h, f)


@njit(**_OPTS)
def _renormalise_rows(
    rows: np.ndarray, used: int, scale: np.ndarray, sqnorm: np.ndarray, k: int, i: int
) -> None:
    """:func:`_renormalise` over the rows in use (row order), O(rows)."""
    a = scale[k, i]
    sq = 0.0
    for r in range(used):
        rows[r, k, i] *= a
        sq += rows[r, k, i] * rows[r, k, i]
    scale[k, i] = 1.0
    sqnorm[k, i] = sq


@njit(**_OPTS)
def _lazy_update(
    slot: np.ndarray,
    rows: np.ndarray,
    used: int,
    scale: np.ndarray,
    sqnorm: np.ndarray,
    n: np.ndarray,
    idx: np.ndarray,
    val: np.ndarray,
    k: int,
    y: float,
    w: np.ndarray,
    seed: np.uint64,
    sigma: float,
    max_rows: int,
) -> tuple[int, int, int]:
    cap, n_labels, n_learners = rows.shape
    xs, _ = _unit(val)
    ridx, rval = _kept(slot, idx, xs)
    acc = np.zeros(n_learners)  # the live scores: features without a row contribute 0
    _add_rows(acc, rows[:, k, :], ridx, rval)
    moves = np.zeros(n_learners, np.bool_)
    moved = False
    for i in range(n_learners):
        score = scale[k, i] * acc[i]
        if y * score <= 0.0 and w[i] > 0.0:
            moves[i] = True
            moved = True
    if not moved:  # no step: nothing touches the store
        return 0, used, 0
    new = idx.size - ridx.size
    if new > 0 and used + new > cap and cap < max_rows:
        return min(used + new, max_rows), used, 0  # the caller grows rows and calls again
    dropped = 0
    if new > 0:
        start = np.empty(n_labels * n_learners)
        added = 0
        for t in range(idx.size):
            j = idx[t]
            if slot[j] != 0:
                continue
            if used == cap:  # full at the bound: feature j keeps weight 0 and is not learned
                dropped += 1
                continue
            _start_row(seed, j, sigma, start)
            for kk in range(n_labels):
                for i in range(n_learners):
                    g = start[kk * n_learners + i]
                    rows[used, kk, i] = g / scale[kk, i]
                    sqnorm[kk, i] += g * g
            used += 1
            slot[j] = used
            added += 1
        if added > 0:
            for kk in range(n_labels):  # the starts may leave a model just outside the unit ball
                for i in range(n_learners):
                    if sqnorm[kk, i] > 1.0:
                        scale[kk, i] /= math.sqrt(sqnorm[kk, i])
                        sqnorm[kk, i] = 1.0
                        if scale[kk, i] < SCALE_FLOOR:
                            _renormalise_rows(rows, used, scale, sqnorm, kk, i)
            ridx, rval = _kept(slot, idx, xs)
            acc[:] = 0.0
            _add_rows(acc, rows[:, k, :], ridx, rval)
    sqx = 0.0  # ||x||^2 on the features with a row (all of x unless some were dropped)
    for t in range(rval.size):
        sqx += rval[t] * rval[t]
    coef = np.zeros(n_learners)
    for i in range(n_learners):
        if not moves[i]:
            continue
        a = scale[k, i]
        score = a * acc[i]
        n[k, i] += 1
        c = w[i] * y / math.sqrt(n[k, i])
        q = max(sqnorm[k, i] + 2.0 * c * score + c * c * sqx, 0.0)
        coef[i] = c / a
        if q > 1.0:
            scale[k, i] = a / math.sqrt(q)
            sqnorm[k, i] = 1.0
        else:
            sqnorm[k, i] = q
    for t in range(ridx.size):
        r = ridx[t]
        v = rval[t]
        for i in range(n_learners):
            rows[r, k, i] += coef[i] * v
    for i in range(n_learners):
        if scale[k, i] < SCALE_FLOOR:
            _renormalise_rows(rows, used, scale, sqnorm, k, i)
    return 0, used, dropped


_LU = f"{_SLOT}, int64, float64[:, ::1], float64[:, ::1], int64[:, ::1]"
_LU_TAIL = "int64, float64, float64[:], uint64, float64, int64"


@kernel(f"UniTuple(int64, 3)({_LU}, {_IDX}, {_VAL}, {_LU_TAIL})")
def perceptron_lazy_update(
    slot: np.ndarray,
    rows: np.ndarray,
    used: int,
    scale: np.ndarray,
    sqnorm: np.ndarray,
    n: np.ndarray,
    idx: np.ndarray,
    val: np.ndarray,
    k: int,
    y: float,
    w: np.ndarray,
    seed: int,
    sigma: float,
    max_rows: int,
) -> tuple[int, int, int]:
    """:func:`perceptron_update` on the lazy store, O(K N nnz) with new features, O(N nnz) without.

    ``used`` rows of ``rows`` are in use. The mistake test reads the live models (a feature
    without a row contributes 0). If no model of class k moves, nothing changes. Otherwise each
    feature of x without a row gets the next one, holding its random start (:func:`_start_row`,
    ``sigma``) divided by each model's scale, for all K x N models, whose ``||u||^2`` gain its
    squares; a model the starts took outside the unit ball is projected back (rescaled). A feature
    arriving when all ``max_rows`` rows are in use is dropped: it keeps weight 0 and the step
    skips it. Then the step of :func:`perceptron_update` on the features with a row, from the
    scores after the starts.

    Returns ``(need, used, dropped)``: ``need > 0`` asks the caller to grow ``rows`` to at least
    ``need`` rows (it is below ``max_rows`` and the new features need more) and call again, nothing
    changed; else the rows in use after the step and the features dropped by it.
    """
    return _lazy_update(
        slot, rows, used, scale, sqnorm, n, idx, val, k, y, w, np.uint64(seed), sigma, max_rows
    )


@kernel(f"UniTuple(int64, 3)({_LU}, {_VAL}, {_LU_TAIL})")
def perceptron_lazy_update_dense(
    slot: np.ndarray,
    rows: np.ndarray,
    used: int,
    scale: np.ndarray,
    sqnorm: np.ndarray,
    n: np.ndarray,
    x: np.ndarray,
    k: int,
    y: float,
    w: np.ndarray,
    seed: int,
    sigma: float,
    max_rows: int,
) -> tuple[int, int, int]:
    """:func:`perceptron_lazy_update` of a dense input."""
    idx, val = _nonzeros(x)
    return _lazy_update(
        slot, rows, used, scale, sqnorm, n, idx, val, k, y, w, np.uint64(seed), sigma, max_rows
    )


# -- weighted naive Bayes -------------------------------------------------------------------------
# Statistics (state): W (K, N, 2), S and M2 (K, N, 2, d), binary (d,). Derived caches: ratio
# (K, N, 2, d) = log P(x_j = 1 | c) - log P(x_j = 0 | c), zeros (K, N, 2) = sum_j log P(x_j = 0 | c)
# over binary j, slope (d, K, N) = ratio_+ - ratio_- (0 for numeric j), offset (K, N) = log prior
# odds + zeros_+ - zeros_- - 1/2 sum_j log(var_+ / var_-), and gauss (4, n_numeric, K, N): mean and
# precision of each side (all 0 until both sides have mass), so the log-odds of x are
#   offset + sum_{binary j} slope_j x_j - 1/2 sum_{numeric j} ((x_j - m_+)^2 p_+ - (x_j - m_-)^2 p_-).

_NB_STATS = "float64[:, :, ::1], float64[:, :, :, ::1], float64[:, :, :, ::1], boolean[::1], int64[::1]"
_NB_CACHE = (
    "float64[:, :, :, ::1], float64[:, :, ::1], float64[:, :, ::1], float64[:, ::1], float64[:, :, :, ::1]"
)


@njit(**_OPTS)
def _numeric_values(numeric: np.ndarray, idx: np.ndarray, val: np.ndarray) -> np.ndarray:
    """x at the numeric features (sorted), from the sorted non-zeros: a merge, O(n_numeric + nnz)."""
    xn = np.zeros(numeric.size)
    t = 0
    for r in range(numeric.size):
        while t < idx.size and idx[t] < numeric[r]:
            t += 1
        if t < idx.size and idx[t] == numeric[r]:
            xn[r] = val[t]
    return xn


@njit(**_OPTS)
def _nb_scores(
    slope: np.ndarray,
    offset: np.ndarray,
    numeric: np.ndarray,
    gauss: np.ndarray,
    idx: np.ndarray,
    val: np.ndarray,
    h: np.ndarray,
) -> None:
    d, n_labels, n_learners = slope.shape
    m = n_labels * n_learners
    acc = h.reshape(m)
    acc[:] = 0.0
    _add_rows(acc, slope.reshape(d, m), idx, val)
    off = offset.reshape(m)
    for r in range(m):
        acc[r] += off[r]
    xn = _numeric_values(numeric, idx, val)
    g = gauss.reshape(4, numeric.size, m)
    for q in range(numeric.size):
        v = xn[q]
        for r in range(m):
            dp = v - g[0, q, r]
            dm = v - g[2, q, r]
            acc[r] -= 0.5 * (dp * dp * g[1, q, r] - dm * dm * g[3, q, r])
    for r in range(m):
        acc[r] = math.tanh(0.5 * acc[r])  # 2 P(+1 | x) - 1


_NB_SCORE = "float64[:, :, ::1], float64[:, ::1], int64[::1], float64[:, :, :, ::1]"


@kernel(f"float64[:, ::1]({_NB_SCORE}, {_IDX}, {_VAL})")
def nb_scores(
    slope: np.ndarray,
    offset: np.ndarray,
    numeric: np.ndarray,
    gauss: np.ndarray,
    idx: np.ndarray,
    val: np.ndarray,
) -> np.ndarray:
    """Scores ``2 P(+1 | x) - 1`` of all naive Bayes models, shape (K, N), from the caches."""
    h = np.empty(offset.shape)
    _nb_scores(slope, offset, numeric, gauss, idx, val, h)
    return h


@kernel(f"void({_NB_SCORE}, {_ALPHA}, {_IDX}, {_VAL}, {_OUT})")
def nb_votes(
    slope: np.ndarray,
    offset: np.ndarray,
    numeric: np.ndarray,
    gauss: np.ndarray,
    alpha: np.ndarray,
    idx: np.ndarray,
    val: np.ndarray,
    h: np.ndarray,
    f: np.ndarray,
) -> None:
    """:func:`nb_scores` into ``h`` (K, N) and the alpha-weighted votes into ``f`` (K,)."""
    _nb_scores(slope, offset, numeric, gauss, idx, val, h)
    _votes(alpha, h, f)


@njit(**_OPTS)
def _nb_refresh_side(
    W: np.ndarray,
    S: np.ndarray,
    binary: np.ndarray,
    ratio: np.ndarray,
    zeros: np.ndarray,
    k: int,
    c: int,
) -> None:
    d = S.shape[3]
    n_binary = 0
    for j in range(d):
        n_binary += binary[j]
    for i in range(S.shape[1]):
        wc = W[k, i, c]
        total = 0.0
        for j in range(d):
            if binary[j]:
                s = S[k, i, c, j]
                log_zero = math.log1p(wc - s)  # log(W - S + 1); minus log(W + 2) below
                ratio[k, i, c, j] = math.log1p(s) - log_zero
                total += log_zero
        zeros[k, i, c] = total - n_binary * math.log(wc + 2.0)


@njit(**_OPTS)
def _nb_refresh_class(
    W: np.ndarray,
    S: np.ndarray,
    M2: np.ndarray,
    binary: np.ndarray,
    numeric: np.ndarray,
    ratio: np.ndarray,
    zeros: np.ndarray,
    slope: np.ndarray,
    offset: np.ndarray,
    gauss: np.ndarray,
    k: int,
) -> None:
    d = S.shape[3]
    for i in range(S.shape[1]):
        for j in range(d):
            slope[j, k, i] = ratio[k, i, 0, j] - ratio[k, i, 1, j] if binary[j] else 0.0
        w_pos, w_neg = W[k, i, 0], W[k, i, 1]
        log_var = 0.0
        both = w_pos > 0.0 and w_neg > 0.0  # Gaussians count once both sides have mass
        for q in range(numeric.size):
            if not both:
                for e in range(4):
                    gauss[e, q, k, i] = 0.0
                continue
            j = numeric[q]
            m_pos, m_neg = S[k, i, 0, j] / w_pos, S[k, i, 1, j] / w_neg
            total = w_pos + w_neg
            pooled = (S[k, i, 0, j] + S[k, i, 1, j]) / total
            overall = (
                M2[k, i, 0, j]
                + M2[k, i, 1, j]
                + (w_pos * (m_pos - pooled) ** 2 + w_neg * (m_neg - pooled) ** 2)
            ) / total
            floor = VAR_FLOOR * (1.0 + overall)
            v_pos = M2[k, i, 0, j] / w_pos + floor
            v_neg = M2[k, i, 1, j] / w_neg + floor
            gauss[0, q, k, i] = m_pos
            gauss[1, q, k, i] = 1.0 / v_pos
            gauss[2, q, k, i] = m_neg
            gauss[3, q, k, i] = 1.0 / v_neg
            log_var += math.log(v_pos) - math.log(v_neg)
        prior = math.log1p(w_pos) - math.log1p(w_neg)
        offset[k, i] = prior + zeros[k, i, 0] - zeros[k, i, 1] - 0.5 * log_var


@kernel(f"void({_NB_STATS}, {_NB_CACHE}, int64)")
def nb_refresh(
    W: np.ndarray,
    S: np.ndarray,
    M2: np.ndarray,
    binary: np.ndarray,
    numeric: np.ndarray,
    ratio: np.ndarray,
    zeros: np.ndarray,
    slope: np.ndarray,
    offset: np.ndarray,
    gauss: np.ndarray,
    k: int,
) -> None:
    """Recompute every cache of class k's N models from the statistics."""
    _nb_refresh_side(W, S, binary, ratio, zeros, k, 0)
    _nb_refresh_side(W, S, binary, ratio, zeros, k, 1)
    _nb_refresh_class(W, S, M2, binary, numeric, ratio, zeros, slope, offset, gauss, k)


@kernel(f"boolean({_NB_STATS}, {_NB_CACHE}, {_IDX}, {_VAL}, int64, int64, float64[:])")
def nb_update(
    W: np.ndarray,
    S: np.ndarray,
    M2: np.ndarray,
    binary: np.ndarray,
    numeric: np.ndarray,
    ratio: np.ndarray,
    zeros: np.ndarray,
    slope: np.ndarray,
    offset: np.ndarray,
    gauss: np.ndarray,
    idx: np.ndarray,
    val: np.ndarray,
    k: int,
    c: int,
    w: np.ndarray,
) -> bool:
    """Add ``(x, side c)`` with weights ``w`` to the N models of class k and refresh their caches.

    Returns False, changing nothing, if x turns a binary feature numeric (a value other than 0
    and 1): the caller switches that feature for every model first. The statistics move on the
    non-zeros (and the numeric features' Welford sums); the caches are O(N d): the Bernoulli
    ``log P(x_j = 0 | c) = log((W_c - S_cj + 1) / (W_c + 2))`` of every feature moves with ``W_c``.
    """
    for t in range(idx.size):
        if binary[idx[t]] and val[t] != 0.0 and val[t] != 1.0:
            return False
    n_learners = S.shape[1]
    xn = _numeric_values(numeric, idx, val)
    for q in range(numeric.size):  # weighted Welford (West 1979) on the numeric features
        j = numeric[q]
        v = xn[q]
        for i in range(n_learners):
            w_old = W[k, i, c]
            s = S[k, i, c, j]
            mean_old = s / (w_old if w_old > 0.0 else 1.0)
            w_new = w_old + w[i]
            mean_new = (s + w[i] * v) / (w_new if w_new > 0.0 else 1.0)
            M2[k, i, c, j] += w[i] * (v - mean_old) * (v - mean_new)
    for t in range(idx.size):
        j = idx[t]
        for i in range(n_learners):
            S[k, i, c, j] += w[i] * val[t]
    for i in range(n_learners):
        W[k, i, c] += w[i]
    _nb_refresh_side(W, S, binary, ratio, zeros, k, c)
    _nb_refresh_class(W, S, M2, binary, numeric, ratio, zeros, slope, offset, gauss, k)
    return True
