"""Pairwise feature interactions (ours, issue 24): VW's ``-q`` / ``--interactions`` for our learners.

A linear scorer over ``x`` cannot express "feature i matters only together with feature j"; over
``x`` and the products ``x_i x_j`` (``i < j``) it can. Vowpal Wabbit users get this with ``-q``; a
C-OVA with pairs learns car and nursery far better than one without (docs/BENCHMARKS.md, quality).

The expanded vector has dimension ``d + P``: the input's ``d`` entries, then one column per pair.
When the ``d (d - 1) / 2`` pairs fit in ``2**bits`` columns, pair ``(i, j)`` has its own column (its
rank in row-major order of the upper triangle); otherwise (hashed input, large ``d``) it is hashed
into ``P = 2**bits`` columns, colliding products added, as VW hashes its interactions into its
weight table. Memory is O(d + P), never O(d^2); work per event is O(nnz^2) over the non-zeros.
Deterministic (a fixed integer hash), so replicas expand every input alike.
"""

from __future__ import annotations

import numpy as np

from service._jit_cache import kernel
from service.features import SparseVector
from service.kernels import first_max, merge_buckets, nonzeros, pa_update

__all__ = [
    "exact_pairs",
    "expand_pairs",
    "input_nonzeros",
    "pair_argmax",
    "pair_columns",
    "pair_pa_update",
    "pair_scores",
    "pairs_sparse",
]

_OPTS = {"cache": True, "nogil": True, "boundscheck": False}


def pair_columns(n_features: int, bits: int) -> int:
    """Columns ``P`` the pairs of ``n_features`` inputs take: all of them, or ``2**bits`` hashed."""
    exact = n_features * (n_features - 1) // 2
    return exact if exact <= 1 << bits else 1 << bits


def exact_pairs(n_features: int, bits: int) -> bool:
    """Whether every pair of ``n_features`` inputs gets its own column (none hashed)."""
    return pair_columns(n_features, bits) == n_features * (n_features - 1) // 2


def input_nonzeros(x: np.ndarray | SparseVector) -> tuple[np.ndarray, np.ndarray, int]:
    """The non-zero indices and values of a dense or sparse input, and its dimension."""
    if isinstance(x, SparseVector):
        return x.idx, x.val, x.dim
    idx, val = nonzeros(np.asarray(x, dtype=np.float64))
    return idx, val, x.shape[0]


@kernel("uint64(uint64)")
def _mix(z: int) -> int:
    """SplitMix64's finaliser: a well-spread 64-bit hash of a pair's rank."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@kernel("Tuple((int64[::1], float64[::1]))(int64[:], float64[:], int64, int64)")
def pairs_sparse(idx: np.ndarray, val: np.ndarray, d: int, p: int) -> tuple[np.ndarray, np.ndarray]:
    """The expanded sparse vector of the sparse input ``(idx, val)`` (strictly increasing ``idx``).

    Entries ``[idx, val]`` first, then, at ``d + column``, the products ``val[a] val[b]`` for
    ``a < b``. ``p`` is :func:`pair_columns`: when it equals ``d (d - 1) / 2`` a pair's column is its
    rank, which grows with ``(a, b)`` in this loop order, so the result is sorted as it is built;
    else the rank is hashed into ``p`` columns and collisions are merged (sorted, products added in
    loop order, zero sums dropped).
    """
    n = idx.size
    m = n + n * (n - 1) // 2
    out_i = np.empty(m, np.int64)
    out_v = np.empty(m, np.float64)
    for a in range(n):
        out_i[a] = idx[a]
        out_v[a] = val[a]
    exact = p == d * (d - 1) // 2
    t = n
    for a in range(n):
        i = idx[a]
        row = i * d - i * (i + 1) // 2 - i - 1  # rank of (i, j) is row + j
        for b in range(a + 1, n):
            rank = row + idx[b]
            if exact:
                out_i[t] = d + rank
            else:
                out_i[t] = d + np.int64(_mix(np.uint64(rank)) % np.uint64(p))
            out_v[t] = val[a] * val[b]
            t += 1
    if exact:
        # products of non-zeros are non-zero unless they underflow: keep the contract (no zeros)
        kept = 0
        for s in range(m):
            if out_v[s] != 0.0:
                out_i[kept] = out_i[s]
                out_v[kept] = out_v[s]
                kept += 1
        return out_i[:kept].copy(), out_v[:kept].copy()
    head_i, head_v = out_i[:n].copy(), out_v[:n].copy()
    tail_i, tail_v = merge_buckets(out_i[n:], out_v[n:])
    return np.concatenate((head_i, tail_i)), np.concatenate((head_v, tail_v))


def expand_pairs(x: np.ndarray | SparseVector, p: int, max_nnz: int = -1) -> SparseVector:
    """``x`` (dense or sparse, dimension ``d``) with its pairwise products: a :class:`SparseVector`
    of dimension ``d + p`` (:func:`pairs_sparse`). With ``max_nnz >= 0``, an input with more
    non-zeros than that gets no products (its entries alone, in the same ``d + p`` dimensions)."""
    idx, val, d = input_nonzeros(x)
    if 0 <= max_nnz < idx.size:
        return SparseVector(idx, val, d + p)
    out_i, out_v = pairs_sparse(idx, val, d, p)
    return SparseVector(out_i, out_v, d + p)


# The fused kernels of the exact case: the scores of the expanded vector (:func:`pairs_sparse` with
# ``p = d (d - 1) / 2``) without building it. They visit its entries in its order (the input's,
# then the products in loop order, zero products skipped as it drops them) with the same
# operations, so they compute its bits; building it cost as much as scoring it.
_WS = ("float64[::1, :]", "float64[:, :]")  # column-major first (C-OVA's layout with pairs)


@kernel([f"float64[::1]({w}, int64[:], float64[:], int64)" for w in _WS])
def pair_scores(W: np.ndarray, idx: np.ndarray, val: np.ndarray, d: int) -> np.ndarray:
    """The K scores of the exact expansion of the sparse input ``(idx, val)`` of dimension ``d``
    (``W`` of shape (K, d + d (d - 1) / 2)), each summed in the expansion's order."""
    k_labels = W.shape[0]
    out = np.zeros(k_labels)
    n = idx.size
    for a in range(n):
        c, v = idx[a], val[a]
        for k in range(k_labels):
            out[k] += W[k, c] * v
    for a in range(n):
        i = idx[a]
        row = d + i * d - i * (i + 1) // 2 - i - 1
        for b in range(a + 1, n):
            v = val[a] * val[b]
            if v == 0.0:
                continue
            c = row + idx[b]
            for k in range(k_labels):
                out[k] += W[k, c] * v
    return out


@kernel([f"UniTuple(int64, 2)({w}, int64[:], float64[:], int64)" for w in _WS])
def pair_argmax(W: np.ndarray, idx: np.ndarray, val: np.ndarray, d: int) -> tuple[int, int]:
    """:func:`service.kernels.sparse_argmax` of the exact expansion: the first maximiser and how
    many labels share its score."""
    return first_max(pair_scores(W, idx, val, d))


@kernel([f"void({w}, int64[:], float64[:], int64, int64, boolean, int64, float64)" for w in _WS])
def pair_pa_update(
    W: np.ndarray, idx: np.ndarray, val: np.ndarray, d: int, yhat: int, click: bool, base: int, C: float
) -> None:
    """:func:`service.kernels.pa_update` on the exact expansion of ``(idx, val)`` (built here, in
    compiled code: an update visits every entry of it anyway)."""
    e_idx, e_val = pairs_sparse(idx, val, d, d * (d - 1) // 2)
    pa_update(W, e_idx, e_val, yhat, click, base, C)
