"""Compiled glue of the tree boosters (issues 20, 41): AdaBandit's and BanditBBM's decisions and
learn events.

A booster's round is a handful of tiny array steps (a random argmax per tree, cumulative votes,
a random argmax per expert, the cost vectors, the reduction, the trees' update); as numpy calls
they cost a few microseconds each, more than the arithmetic. These loops do them in few calls, with
the arithmetic numpy did: comparisons, the sequential sums of ``np.cumsum`` and the orders of
numpy's reductions, so every round is bit for bit what it was (the stored reproduction runs stay
valid, ``tests/lab/test_results_pinned.py``). Same conventions as :mod:`service.kernels`: explicit
signatures (compiled at first use, from the on-disk cache), no ``fastmath``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from service._jit_cache import kernel
from service.kernels import _draw, rho_mix_sample
from service.learners.weak.forest_kernels import FOREST, OPERANDS, distribution, forest_update

__all__ = [
    "adabandit_decide",
    "adabandit_learn",
    "adabandit_learn_args",
    "adabandit_logistic_args",
    "adabandit_logistic_parts",
    "adabandit_step",
    "adabandit_votes",
    "bbm_decide",
    "bbm_majority",
    "cost_examples",
    "forest_learn_costs",
    "hedge_draw",
    "loss_iota",
    "pairwise_sum",
    "rows_argmax",
]

_OPTS = {"cache": True, "nogil": True, "boundscheck": False}
_M = "float64[:, ::1]"


@njit(inline="always", **_OPTS)  # inlined: a call per tree cost the reference counts of its arrays
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


@kernel("int64[::1](float64[:, :], float64[:])")
def rows_argmax(V: np.ndarray, U: np.ndarray) -> np.ndarray:
    """Row-wise random argmax of ``V`` (N, k), ties broken by the uniform draws ``U`` (N k, C order):
    :func:`service.learners.booster_costs.rand_rows_argmax` with its draws given."""
    n, k = V.shape
    out = np.empty(n, np.int64)
    for i in range(n):
        out[i] = _row_argmax(V, i, U, i * k)
    return out


@kernel("Tuple((int64[::1], float64[:, ::1], int64[::1]))(float64[:, :], float64[:], float64[:])")
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


@kernel("Tuple((int64[::1], int64[::1], int64))(float64[:, :], float64[:])")
def bbm_majority(dist: np.ndarray, U: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """BanditBBM's weak predictions (:func:`rows_argmax` with the draws ``U``), their vote counts
    (``np.bincount``) and the majority label when it is unique, else -1: the caller then draws
    among the tied labels as ``randargmax`` does, so the draws from the generator are the same."""
    n, k = dist.shape
    weak = rows_argmax(dist, U)
    counts = np.zeros(k, np.int64)
    for i in range(n):
        counts[weak[i]] += 1
    best, ties = 0, 1
    for c in range(1, k):
        if counts[c] > counts[best]:
            best, ties = c, 1
        elif counts[c] == counts[best]:
            ties += 1
    return weak, counts, best if ties == 1 else -1


@njit(**_OPTS)
def _pairwise_block(a: np.ndarray, lo: int, n: int) -> float:
    """numpy's ``pairwise_sum`` of ``a[lo:lo + n]`` for ``n <= 128``: sequential below 8 terms, else
    eight running sums combined as a tree, then the remainder."""
    if n < 8:
        res = 0.0
        for c in range(lo, lo + n):
            res += a[c]
        return res
    # eight scalars, not an array: no allocation per call (a learn event sums N rows)
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    c = 8
    while c < n - n % 8:
        b = lo + c
        r0, r1, r2, r3 = r0 + a[b], r1 + a[b + 1], r2 + a[b + 2], r3 + a[b + 3]
        r4, r5, r6, r7 = r4 + a[b + 4], r5 + a[b + 5], r6 + a[b + 6], r7 + a[b + 7]
        c += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while c < n:
        res += a[lo + c]
        c += 1
    return res


@njit(**_OPTS)
def _pairwise_sum(a: np.ndarray, lo: int, n: int) -> float:
    """``a[lo:lo + n].sum()`` in numpy's order, so the result is numpy's bit for bit: blocks of up to
    128 as :func:`_pairwise_block`, longer runs split in two at a multiple of 8 and the halves'
    sums added. The recursion runs on an explicit stack (numba's cache cannot hold a recursive
    function compiled into other functions)."""
    if n <= 128:
        return _pairwise_block(a, lo, n)
    los, ns, combine = np.empty(192, np.int64), np.empty(192, np.int64), np.zeros(192, np.bool_)
    vals = np.empty(96)
    los[0], ns[0] = lo, n
    top, nv = 1, 0
    while top > 0:
        top -= 1
        start, m = los[top], ns[top]
        if combine[top]:
            combine[top] = False
            nv -= 1
            vals[nv - 1] = vals[nv - 1] + vals[nv]
        elif m <= 128:
            vals[nv] = _pairwise_block(a, start, m)
            nv += 1
        else:
            half = m // 2
            half -= half % 8
            combine[top] = True  # after both halves: left + right
            los[top + 1], ns[top + 1] = start + half, m - half
            los[top + 2], ns[top + 2] = start, half
            top += 3
    return vals[0]


@kernel("float64(float64[:, :], int64, float64)")
def _pairwise_row_sum(A: np.ndarray, i: int, shift: float) -> float:
    """``(A[i] - shift).sum()`` in numpy's order (:func:`_pairwise_sum`)."""
    if A.shape[1] < 8:  # sequential: no copy of the row
        res = 0.0
        for c in range(A.shape[1]):
            res += A[i, c] - shift
        return res
    row = np.empty(A.shape[1])
    for c in range(row.size):
        row[c] = A[i, c] - shift
    return _pairwise_sum(row, 0, row.size)


@kernel("float64(float64[::1])")
def pairwise_sum(a: np.ndarray) -> float:
    """``a.sum()`` of a contiguous vector, numpy's bits (:func:`_pairwise_sum`; for the tests)."""
    return _pairwise_sum(a, 0, a.size)


@kernel("int64(float64[::1], float64)")
def hedge_draw(v: np.ndarray, u: float) -> int:
    """An expert drawn with probability ``v / v.sum()`` by the uniform draw ``u``: ``sample(v /
    v.sum(), rng)`` of :mod:`service.learners.base` (CDF summed left to right, the first value
    above ``u`` times the total, capped at N - 1), its floats bit for bit."""
    total = _pairwise_sum(v, 0, v.size)
    p = np.empty(v.size)
    for i in range(v.size):
        p[i] = v[i] / total  # v / v.sum()
    return _draw(p, u)


@kernel("Tuple((int64[::1], float64[::1]))(float64[:, :], float64, float64[:], int64, boolean)")
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


# -- AdaBandit's learning step (seed 001, eqs. (10), (11); booster_costs.logistic_*) ----------------
# numpy's SIMD tanh and the BLAS products ``@`` stay numpy calls between these kernels: a compiled
# tanh (libm) or dot product (another summation order, no FMA) would move the last bits of every
# round, and with them the stored runs. One tanh call and two products replace ~40 small numpy calls.


@kernel("float64[::1](float64[:, :], int64[:], float64[:])")
def adabandit_logistic_args(votes: np.ndarray, weak: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """The arguments ``z / 2`` of the sigmoids of AdaBandit's round, for one ``np.tanh`` call.

    With ``S[i] = s^{i-1}`` (``S[0] = 0``, ``S[i] = votes[i-1]``) and ``sj[i] = S[i, weak[i]] +
    alpha[i]``, per learner ``i``: ``(S[i, a] - S[i, b]) / 2`` for ``a < b`` (the cost matrices
    (10)), then ``(sj[i] - S[i, a]) / 2`` for every ``a`` (the derivative (11)), each as ``0.5 * (a -
    b)``, numpy's order. The other half of the arguments are these negated, exactly, and tanh is
    odd (bit for bit: ``tests/service/learners/test_booster_kernels.py``), so they are not computed.
    """
    n, k = votes.shape
    per = k * (k - 1) // 2 + k
    z = np.empty(n * per)
    for i in range(n):
        j = i * per
        for a in range(k):
            sa = votes[i - 1, a] if i > 0 else 0.0
            for b in range(a + 1, k):
                sb = votes[i - 1, b] if i > 0 else 0.0
                z[j] = 0.5 * (sa - sb)
                j += 1
        sj = (votes[i - 1, weak[i]] if i > 0 else 0.0) + alpha[i]
        for a in range(k):
            z[j] = 0.5 * (sj - (votes[i - 1, a] if i > 0 else 0.0))
            j += 1
    return z


@kernel("Tuple((float64[::1], float64[::1]))(float64[:], int64, int64, boolean)")
def loss_iota(probs: np.ndarray, label: int, greedy: int, reward: bool) -> tuple[np.ndarray, np.ndarray]:
    """The loss estimate (4) of :func:`service.learners.booster_costs.loss_estimate`, its floats bit
    for bit (the same operations in the same order), and ``iota = 1 - ell`` (eq. (5)'s input)."""
    k = probs.size
    ell = np.zeros(k)
    if reward:
        q = 1.0 / probs[label]
        for c in range(k):
            ell[c] = q
        ell[label] -= q
        ell[greedy] -= q  # label == greedy: -1/p here, cancelled below
    if label == greedy:
        ell[greedy] += 1.0 / probs[greedy]
    iota = np.empty(k)
    for c in range(k):
        iota[c] = 1.0 - ell[c]
    return ell, iota


@kernel(
    "void(float64[:], int64, int64, boolean, float64[:, :], int64[:], float64[:], float64[::1], "
    "float64[::1], float64[::1])",
)
def adabandit_learn_args(
    probs: np.ndarray,
    label: int,
    greedy: int,
    reward: bool,
    votes: np.ndarray,
    weak: np.ndarray,
    alpha: np.ndarray,
    ell: np.ndarray,
    iota: np.ndarray,
    z: np.ndarray,
) -> None:
    """AdaBandit's learn up to its one ``np.tanh``: :func:`loss_iota` and
    :func:`adabandit_logistic_args` in one call, written to ``ell`` (k), ``iota`` (k) and ``z``
    (N (k(k-1)/2 + k)), the learner's scratch (an array returned to Python costs about a
    microsecond, issue 41)."""
    e, i = loss_iota(probs, label, greedy, reward)
    ell[:] = e
    iota[:] = i
    z[:] = adabandit_logistic_args(votes, weak, alpha)


@kernel(
    "void(float64[::1], int64[:], int64, float64[:, :, ::1], float64[:, ::1], float64[:, ::1], float64[::1])"
)
def adabandit_logistic_parts(
    t: np.ndarray,
    weak: np.ndarray,
    k: int,
    G: np.ndarray,
    off: np.ndarray,
    on: np.ndarray,
    onsum: np.ndarray,
) -> None:
    """From ``t = tanh(`` :func:`adabandit_logistic_args` ``)``: the cost matrices ``G`` (N, K, K) of
    ``logistic_cost_matrices``, and the two parts of ``logistic_alpha_grad`` before its product:
    ``off`` (N, K) and ``on.sum(axis=1)`` (N), each sigmoid as ``0.5 * (1 + tanh(z / 2))``, with
    ``tanh(-z / 2) = -tanh(z / 2)``. Written to ``G``, ``off`` and ``onsum``; ``on`` (N, K) is
    scratch.

    ``G``'s diagonal is minus its column sums taken in row order (numpy's reduction over a
    non-contiguous axis); ``on``'s row sums in numpy's pairwise order (:func:`_pairwise_row_sum`).
    """
    n = weak.size
    per = k * (k - 1) // 2 + k
    for i in range(n):
        j = i * per
        for a in range(k):
            G[i, a, a] = 0.0
            for b in range(a + 1, k):
                G[i, a, b] = 0.5 * (1.0 + t[j])
                G[i, b, a] = 0.5 * (1.0 + -t[j])
                j += 1
        for a in range(k):
            off[i, a] = 0.0 if a == weak[i] else 0.5 * (1.0 + t[j])
            on[i, a] = 0.0 if a == weak[i] else 0.5 * (1.0 + -t[j])
            j += 1
        for b in range(k):
            s = G[i, 0, b]
            for a in range(1, k):
                s += G[i, a, b]
            G[i, b, b] = -s
        onsum[i] = _pairwise_row_sum(on, i, 0.0)


@kernel(
    "void(float64[::1], float64[::1], float64[::1], float64[::1], float64[:], int64[:], float64, "
    "float64[:], int64[:])",
)
def adabandit_step(
    alpha: np.ndarray,
    log_v: np.ndarray,
    off_iota: np.ndarray,
    onsum: np.ndarray,
    iota: np.ndarray,
    weak: np.ndarray,
    eta: float,
    ell: np.ndarray,
    experts: np.ndarray,
) -> None:
    """In place: the projected SGD step (11) on ``alpha`` with the gradient ``off @ iota - onsum *
    iota[weak]`` (``logistic_alpha_grad``), clipped to [-2, 2] as ``np.clip``; then Hedge with rate 1
    on ``ell[experts]`` (``hedge_update``: ``log_v - loss``, shifted so its maximum is 0)."""
    for i in range(alpha.size):
        grad = off_iota[i] - onsum[i] * iota[weak[i]]
        alpha[i] = min(max(alpha[i] - eta * grad, -2.0), 2.0)
    top = -np.inf
    for i in range(log_v.size):
        log_v[i] = log_v[i] - 1.0 * ell[experts[i]]
        top = max(top, log_v[i])
    for i in range(log_v.size):
        log_v[i] -= top


#: The first argument of every fused learn kernel, one tuple (``TreeBooster._learn_forest`` makes it;
#: a tuple costs numba's dispatch no more than its items would): the forest's arrays
#: (:meth:`HoeffdingForest.arrays`), ``x``'s operands, the trees, the decision's leaves and node
#: counts, the split schedule and subspace, the cost clip, the reduction's N k draws, whether its
#: weights are divided by k - 1, and the N labels and weights it writes (arrays of the learner's,
#: reused: an array returned to Python costs more than the whole reduction).
LEARN = (
    f"Tuple((Tuple(({FOREST})), Tuple(({OPERANDS})), int64[:], int64[:], int64[:], int64, float64, float64, "
    "float64[:], boolean, int64[::1], float64[::1]))"
)
#: What they return: forest_update's (start, lack) and whether the decision's leaves were used
#: (``TreeBooster._learn_forest`` resumes an update stopped for room).
LEARNED = "UniTuple(int64, 3)"


@njit(inline="always", **_OPTS)
def learn_forest(frame: tuple, C: np.ndarray, prefer: int, given: np.ndarray) -> tuple[int, int, int]:
    """Every tree learns its cost vector (a row of ``C``) through the (label, weight) reduction
    (:func:`cost_examples`, ``prefer = -1``: none; ``given``, when not empty, replaces its labels,
    the weights stay), written to the frame's labels and weights, then
    :func:`~service.learners.weak.forest_kernels.forest_update` on ``frame`` (:data:`LEARN`). The
    decision's leaves are used when the trees' node counts are still those at decision time (no
    tree has split since), else ``x`` is routed again. Returns :data:`LEARNED`."""
    forest, xs, trees, leaves, known, schedule, subspace, clip, U, divide, labels, weights = frame
    got, w = cost_examples(C, clip, U, prefer, divide)
    for i in range(labels.size):
        labels[i] = given[i] if given.size else got[i]
        weights[i] = w[i]
    n_nodes = forest[4]
    same = known.size == n_nodes.size
    for i in range(known.size if same else 0):
        same = same and known[i] == n_nodes[i]
    nodes = leaves if same else leaves[:0]
    start, lack = forest_update(*forest, *xs, trees, labels, weights, nodes, 0, schedule, subspace)
    return start, lack, int(same)


@kernel(
    f"{LEARNED}({LEARN}, float64[:, :], int64, float64[::1], float64[::1], float64[:], int64[:], float64, "
    "float64[:], int64[:], float64[::1], float64[::1])",
)
def adabandit_learn(
    frame: tuple,
    C: np.ndarray,
    prefer: int,
    off_iota: np.ndarray,
    onsum: np.ndarray,
    iota: np.ndarray,
    weak: np.ndarray,
    eta: float,
    ell: np.ndarray,
    experts: np.ndarray,
    alpha: np.ndarray,
    log_v: np.ndarray,
) -> tuple[int, int, int]:
    """AdaBandit's learn after its ``np.tanh`` and products (issue 41): the trees learn their cost
    vectors ``C`` (:func:`learn_forest` on ``frame``, :data:`LEARN`), then :func:`adabandit_step`, in
    one call. Returns :data:`LEARNED`."""
    out = learn_forest(frame, C, prefer, np.empty(0, np.int64))
    adabandit_step(alpha, log_v, off_iota, onsum, iota, weak, eta, ell, experts)
    return out


# -- decide in one call: the forest's routing, the votes and the sampled label (issue 20) -----------
# A round of the tree boosters on car is a few microseconds of arithmetic per call and about as much
# again per call from Python; these run decide's calls, with the same arithmetic, in one.
#: HoeffdingForest.routing(x): the routing tables, the class weights and x as the kernels take it
_ROUTING = (
    "Tuple((int64[:, ::1], float64[:, ::1], int64[:, :, ::1], int64[:, ::1], float64[:, ::1], "
    "float64[:], int64[:], float64[:]))"
)


#: The arrays a decide kernel fills (the decision's, for its memo): an array returned to Python cost
#: more than the arithmetic of the whole decision (its type is unpickled at each return)
_I = "int64[::1]"
_OUT = f"float64[::1], {_I}, {_I}"  # p, weak, leaves


@kernel(f"UniTuple(int64, 3)({_ROUTING}, float64[:], float64[::1], float64[:], float64, {_OUT}, {_M}, {_I})")
def adabandit_decide(
    routing: tuple,
    alpha: np.ndarray,
    v: np.ndarray,
    U: np.ndarray,
    rho: float,
    p: np.ndarray,
    weak: np.ndarray,
    leaves: np.ndarray,
    votes: np.ndarray,
    experts: np.ndarray,
) -> tuple[int, int, int]:
    """AdaBandit's decide (seed 001, Algorithms 1 and 3) with its ``2 N k + 2`` uniform draws ``U``:
    the trees' class weights for ``x`` (``routing``: :meth:`HoeffdingForest.routing`, as
    :func:`~service.learners.weak.forest_kernels.forest_distribution` takes it), :func:`adabandit_votes`
    (draws ``U[:2 N k]``), the expert drawn from the Hedge weights ``v`` (:func:`hedge_draw`,
    ``U[2 N k]``) and the label sampled around its prediction (:func:`~service.kernels.rho_mix_sample`,
    ``U[2 N k + 1]``).

    Fills ``p`` (k), ``weak``, ``leaves`` (the trees' leaves of ``x``), ``votes`` (N, k) and
    ``experts``; returns (label, greedy, expert).
    """
    dist, nodes = distribution(routing)
    n, k = dist.shape
    m = 2 * n * k
    w, s, e = adabandit_votes(dist, alpha, U[:m])
    expert = hedge_draw(v, U[m])
    greedy = e[expert]
    label, probs = rho_mix_sample(greedy, k, rho, U[m + 1])
    p[:] = probs
    weak[:] = w
    leaves[:] = nodes
    votes[:] = s
    experts[:] = e
    return label, greedy, expert


@kernel(f"UniTuple(int64, 2)({_ROUTING}, float64[:], float64, float64, {_OUT}, {_I})")
def bbm_decide(
    routing: tuple,
    U: np.ndarray,
    rho: float,
    u: float,
    p: np.ndarray,
    weak: np.ndarray,
    leaves: np.ndarray,
    counts: np.ndarray,
) -> tuple[int, int]:
    """BanditBBM's decide (seed 001, Algorithm 2): the trees' class weights for ``x`` (``routing`` as
    in :func:`adabandit_decide`), :func:`bbm_majority` with the draws ``U`` (N k) and, when the
    majority is unique and the sampling draw ``u`` was taken (``u >= 0``), the label sampled around
    it (:func:`~service.kernels.rho_mix_sample`).

    Fills ``weak``, ``leaves``, the vote ``counts`` (k) and ``p`` (k, only when it returns a label);
    returns (label, greedy): label -1 when the majority ties (greedy -1: the caller draws among the
    ties first, then samples) or ``u < 0``.
    """
    dist, nodes = distribution(routing)
    w, c, greedy = bbm_majority(dist, U)
    weak[:] = w
    leaves[:] = nodes
    counts[:] = c
    if greedy < 0 or u < 0.0:
        return -1, greedy
    label, probs = rho_mix_sample(greedy, c.size, rho, u)
    p[:] = probs
    return label, greedy


@kernel(f"{LEARNED}({LEARN}, float64[:, :], int64, int64[::1])")
def forest_learn_costs(frame: tuple, C: np.ndarray, prefer: int, given: np.ndarray) -> tuple[int, int, int]:
    """:func:`learn_forest` (``TreeBooster._train_trees``, the learners that compute their cost
    vectors ``C`` outside): every tree learns a row of ``C``. Returns :data:`LEARNED`."""
    return learn_forest(frame, C, prefer, given)
