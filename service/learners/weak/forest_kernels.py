"""Compiled loops of :class:`~service.learners.weak.hoeffding_tree.HoeffdingForest` (issue 20).

Routing of every tree, the leaf statistics update and the VFDT split search (Domingos & Hulten
2000, with the rules of ALGORITHMS.md §2.8 spelled out in the forest's module docstring) as numba
loops over the forest's arrays, in the style of :mod:`service.kernels`: explicit signatures, so they
compile when this module is imported, from the on-disk cache (``cache=True``) after the first
time; no ``fastmath``; every sum runs in a fixed order, so replicas applying the same log stay
bit-identical.

Leaf statistics are sparse. A leaf keeps one *entry* per (class, feature) for which it has seen a
non-zero value since it was created: ``sum w x``, ``sum w x^2``, the smallest and largest non-zero
value and how many non-zero values it saw. The class weights ``sum w`` per (leaf, class) give the
zeros their share, so a Gaussian over all values (zeros included) needs no work for the zeros, and
the observed range includes 0 when the leaf saw fewer non-zero values of the feature than examples.
A dense row and its :class:`~service.features.SparseVector` therefore give the same statistics, and
an update costs O(nnz + entries of the leaf) per tree, not O(k d).

Entries live in one pool shared by all leaves: leaf ``r`` owns the segment
``[start, start + used)`` (capacity ``cap``) of ``key`` (``class * d + feature``, increasing within a
segment), ``count`` and ``moments`` (``sum w x``, ``sum w x^2``, min, max). A class's entries are
one run of its leaf's segment, so an update scans that run only, not the entries of every class
(on MNIST a leaf holds thousands of entries, a tenth of them per class), and the split search
visits the features in increasing order by merging the classes' runs. A segment that runs out
of room moves to the end of the pool with 25% slack; a split frees its leaf's segment. Freed space is
reclaimed by compacting the pool (segments slide down in pool order) when it is an eighth of the
pool; when the pool itself is full the update stops and reports how many entries it needs, and the
caller grows the arrays and resumes (each tree's update is all or nothing).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from service._jit_cache import kernel

__all__ = [
    "ADAPTIVE",
    "BY_EXAMPLES",
    "FOREST",
    "GROW_NODES",
    "GROW_ROWS",
    "MIN_BRANCH_FRACTION",
    "N_CANDIDATES",
    "OPERANDS",
    "compact",
    "distribution",
    "forest_distribution",
    "forest_update",
    "leaf_keeps",
]

N_CANDIDATES = 10  # candidate thresholds per numeric feature (ALGORITHMS.md §2.8)
MIN_BRANCH_FRACTION = 0.01  # a split needs more than this share of the leaf weight on both sides

GROW_NODES, GROW_ROWS = -1, -2  # what forest_update asks the caller to grow, besides entries
# the split schedule's flags (ours, both off in the papers' setting): the nmin adaptation after a failed
# evaluation, and the grace period counted in examples instead of weight (:func:`_try_split`)
ADAPTIVE, BY_EXAMPLES = 1, 2
# columns of ``pool`` (forest-wide counters), ``segment`` (per leaf row) and ``moments`` (per entry)
ROWS, END, GARBAGE = 0, 1, 2
START, USED, CAP = 0, 1, 2
SUM, SQUARES, LOW, HIGH = 0, 1, 2, 3
# the split search's scratch, floats ``fs`` and integers ``ks``: one column per observed class
WEIGHT, WLOGW, A, B, LOW_C, HIGH_C, LEFT, RANGE = 0, 1, 2, 3, 4, 5, 6, 7
CLASS, NONZERO, KIND, PTR, LIM, ENTRY = 0, 1, 2, 3, 4, 5
# kinds of a class's estimate of the feature at hand
POINT, GAUSSIAN, EXACT = 0, 1, 2

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_LOG2E = 1.0 / math.log(2.0)
_OPTS = {"cache": True, "nogil": True, "boundscheck": False}

_I1, _I2, _I3 = "int64[:]", "int64[:, :]", "int64[:, :, :]"
_F1, _F2 = "float64[:]", "float64[:, :]"
_S2, _K2 = "float64[:, ::1]", "int64[:, ::1]"  # the split search's scratch (made by forest_update)
_TABLES = f"{_I2}, {_F2}, {_I3}, {_I2}"  # feature, threshold, child, slot
_ENTRIES = f"{_I2}, {_I1}, int32[:], {_F2}"  # segment, key, count, moments


@njit(inline="always", **_OPTS)
def _lower(key: np.ndarray, lo: int, hi: int, v: int) -> int:
    """The first position in ``[lo, hi)`` whose key is at least ``v`` (``hi`` if none; sorted keys)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if key[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(inline="always", **_OPTS)  # inlined into its caller: a call per node costs more than the read
def _value(x: np.ndarray, idx: np.ndarray, val: np.ndarray, f: int) -> float:
    """``x[f]`` of a dense row (``x`` non-empty) or of the sparse vector ``(idx, val)`` (binary search)."""
    if x.size:
        return x[f]
    lo = _lower(idx, 0, idx.size, f)
    return val[lo] if lo < idx.size and idx[lo] == f else 0.0


@njit(inline="always", **_OPTS)  # inlined into its callers: one call per tree cost ~60 ns
def _leaf(
    feature: np.ndarray,
    threshold: np.ndarray,
    child: np.ndarray,
    i: int,
    x: np.ndarray,
    idx: np.ndarray,
    val: np.ndarray,
) -> int:
    """The leaf node of tree ``i`` that ``x`` reaches (``x[f] <= threshold`` goes left)."""
    node = 0
    f = feature[i, 0]
    if x.size:  # dense: read x directly (a call of _value per node made routing ~7x slower)
        while f >= 0:
            node = child[i, node, 1 if x[f] > threshold[i, node] else 0]
            f = feature[i, node]
        return node
    while f >= 0:
        node = child[i, node, 1 if _value(x, idx, val, f) > threshold[i, node] else 0]
        f = feature[i, node]
    return node


@njit(inline="always", **_OPTS)  # inlined: the boosters' decide kernels route in the same call
def distribution(routing: tuple) -> tuple[np.ndarray, np.ndarray]:
    """:func:`forest_distribution`'s loop, for compiled callers: ``routing`` is its arguments."""
    feature, threshold, child, slot, class_w, x, idx, val = routing
    n, k = feature.shape[0], class_w.shape[1]
    dist = np.empty((n, k))
    nodes = np.zeros(n, np.int64)
    # every tree one level per pass, not one tree to its leaf after the other: the trees' reads of
    # their node tables are independent, so their cache misses overlap (a deep tree's walk is a chain
    # of dependent misses; the same comparisons either way)
    moving = n
    while moving:
        moving = 0
        for i in range(n):
            node = nodes[i]
            f = feature[i, node]
            if f >= 0:
                v = x[f] if x.size else _value(x, idx, val, f)
                nodes[i] = child[i, node, 1 if v > threshold[i, node] else 0]
                moving += 1
    for i in range(n):
        r = slot[i, nodes[i]]
        for c in range(k):
            dist[i, c] = class_w[r, c] + 1.0
    return dist, nodes


# Two layouts: the forest's own arrays are C-contiguous, and a call on C-contiguous tables measured
# 4.5 us against 5.3 us on any-layout ones (20 trees on car, from Python); the any-layout version
# serves any other caller. The same comparisons either way.
_C_TABLES = "int64[:, ::1], float64[:, ::1], int64[:, :, ::1], int64[:, ::1]"
_DIST = "Tuple((float64[:, ::1], int64[::1]))"


@kernel(
    [
        f"{_DIST}({_C_TABLES}, float64[:, ::1], float64[::1], int64[::1], float64[::1])",
        f"{_DIST}({_TABLES}, {_F2}, {_F1}, {_I1}, {_F1})",
    ],
)
def forest_distribution(
    feature: np.ndarray,
    threshold: np.ndarray,
    child: np.ndarray,
    slot: np.ndarray,
    class_w: np.ndarray,
    x: np.ndarray,
    idx: np.ndarray,
    val: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Class weights of every tree's leaf for ``x`` plus the pseudo-count 1 per class, shape (N, k),
    and the leaf nodes, shape (N,). ``x`` is a dense row, or empty with ``(idx, val)`` sparse."""
    return distribution((feature, threshold, child, slot, class_w, x, idx, val))


@kernel("float64(float64)")
def _xlnx(v: float) -> float:
    return v * math.log(v) if v > 0.0 else 0.0  # natural log: math.log2 is 2.5x slower in numba


# -- the entry pool --------------------------------------------------------------------------------


@kernel(f"void({_ENTRIES}, {_I1})")
def compact(
    segment: np.ndarray, key: np.ndarray, count: np.ndarray, moments: np.ndarray, pool: np.ndarray
) -> None:
    """Slide every segment down over the freed space, in pool order (capacities are kept)."""
    owners = np.empty(pool[ROWS], np.int64)
    starts = np.empty(pool[ROWS], np.int64)
    m = 0
    for r in range(pool[ROWS]):
        if segment[r, CAP] > 0:
            owners[m] = r
            starts[m] = segment[r, START]
            m += 1
    order = np.argsort(starts[:m])  # starts are distinct
    q = 0
    for o in order:
        r = owners[o]
        s = segment[r, START]
        if s != q:  # q < s: copying upwards never overwrites what is still to be read
            for e in range(segment[r, USED]):
                key[q + e] = key[s + e]
                count[q + e] = count[s + e]
                for j in range(4):
                    moments[q + e, j] = moments[s + e, j]
            segment[r, START] = q
        q += segment[r, CAP]
    pool[END] = q
    pool[GARBAGE] = 0


@njit(inline="always", **_OPTS)  # inlined: called per non-zero value of every tree's update
def _add(e: int, first: bool, w: float, v: float, count: np.ndarray, moments: np.ndarray) -> None:
    """Fold the non-zero value ``v`` with weight ``w`` into entry ``e`` (a new one if ``first``)."""
    wv = w * v
    if first:
        count[e] = 1
        moments[e, SUM] = wv
        moments[e, SQUARES] = wv * v
        moments[e, LOW] = v
        moments[e, HIGH] = v
    else:
        count[e] += 1
        moments[e, SUM] += wv
        moments[e, SQUARES] += wv * v
        moments[e, LOW] = min(moments[e, LOW], v)
        moments[e, HIGH] = max(moments[e, HIGH], v)


@njit(inline="always", **_OPTS)
def _move(key: np.ndarray, count: np.ndarray, moments: np.ndarray, src: int, dst: int) -> None:
    key[dst] = key[src]
    count[dst] = count[src]
    for j in range(4):
        moments[dst, j] = moments[src, j]


@njit(inline="always", **_OPTS)  # inlined: a call per tree cost reference counts of its six arrays
def _merge(
    r: int,
    c: int,
    w: float,
    idx: np.ndarray,
    val: np.ndarray,
    nnz: int,
    d: int,
    segment: np.ndarray,
    key: np.ndarray,
    count: np.ndarray,
    moments: np.ndarray,
    pool: np.ndarray,
) -> int:
    """Fold the example's non-zero values (the first ``nnz`` of ``idx, val``: a count, not a slice,
    which would cost a reference count per tree) into leaf ``r``'s entries of class ``c`` (``d``
    features).

    Returns 0, or the number of entries the pool lacks (then nothing changed but a compaction).
    """
    start, used = segment[r, START], segment[r, USED]
    end = start + used
    base = c * d
    run = _lower(key, start, end, base)  # class c's run: the scans start there, not at the segment
    new = 0  # keys of x missing from the segment (both sorted: one merge pass)
    p = run
    for j in range(nnz):
        if val[j] == 0.0:
            continue
        kk = base + idx[j]
        while p < end and key[p] < kk:
            p += 1
        if p < end and key[p] == kk:
            p += 1
        else:
            new += 1
    if new == 0:
        p = run
        for j in range(nnz):
            if val[j] == 0.0:
                continue
            kk = base + idx[j]
            while key[p] < kk:
                p += 1
            _add(p, False, w, val[j], count, moments)
        return 0
    need = used + new
    if need <= segment[r, CAP]:  # in place, merging from the back
        q, p, j = start + need - 1, end - 1, nnz - 1
        while j >= 0:
            if val[j] == 0.0:
                j -= 1
                continue
            kk = base + idx[j]
            while p >= start and key[p] > kk:
                _move(key, count, moments, p, q)
                p -= 1
                q -= 1
            if p >= start and key[p] == kk:
                _add(p, False, w, val[j], count, moments)
                _move(key, count, moments, p, q)
                p -= 1
            else:
                key[q] = kk
                _add(q, True, w, val[j], count, moments)
            q -= 1
            j -= 1
        segment[r, USED] = need
        return 0
    cap = need + need // 4
    if pool[END] + cap > key.size and pool[GARBAGE] * 8 >= key.size:
        compact(segment, key, count, moments, pool)
        start = segment[r, START]
        end = start + used
    if pool[END] + cap > key.size:
        return cap
    q = pool[END]  # relocate to the end of the pool, merging from the front
    segment[r, START] = q
    pool[END] += cap
    pool[GARBAGE] += segment[r, CAP]
    segment[r, USED] = need
    segment[r, CAP] = cap
    p = start
    for j in range(nnz):
        if val[j] == 0.0:
            continue
        kk = base + idx[j]
        while p < end and key[p] < kk:
            _move(key, count, moments, p, q)
            p += 1
            q += 1
        if p < end and key[p] == kk:
            _move(key, count, moments, p, q)
            _add(q, False, w, val[j], count, moments)
            p += 1
        else:
            key[q] = kk
            _add(q, True, w, val[j], count, moments)
        q += 1
    while p < end:
        _move(key, count, moments, p, q)
        p += 1
        q += 1
    return 0


# -- the split search ------------------------------------------------------------------------------


@kernel(f"boolean(int64, {_I1}, int32[:], {_F2}, boolean, {_S2}, {_K2})")
def _estimates(
    nobs: int,
    n_class: np.ndarray,
    count: np.ndarray,
    moments: np.ndarray,
    binary: bool,
    fs: np.ndarray,
    ks: np.ndarray,
) -> bool:
    """Each observed class's estimate of a feature at the leaf, from its entries ``ks[ENTRY]`` (one
    position per observed class, -1 where the class saw no non-zero value of the feature).

    Reads the observed classes ``ks[CLASS]``, their weights ``fs[WEIGHT]``
    and examples ``n_class``; writes ``ks[KIND]``, ``fs[A]``, ``fs[B]`` per observed class: POINT where
    all its values are equal (at ``A``), EXACT for a 0/1 feature (``A`` is the weight of its zeros),
    else GAUSSIAN from the sums, zeros included (mean ``A``, ``B = 1 / (sd sqrt 2)``). Returns whether
    the feature's observed range at the leaf (zeros included) is non-degenerate; the range goes to
    ``fs[RANGE, :2]``.
    """
    lo, hi = np.inf, -np.inf
    nonzero = 0
    for j in range(nobs):  # in class order, as the entries of a feature were once stored
        e = ks[ENTRY, j]
        if e < 0:
            ks[NONZERO, j] = 0
            continue
        ks[NONZERO, j] = count[e]
        fs[A, j] = moments[e, SUM]
        fs[B, j] = moments[e, SQUARES]
        fs[LOW_C, j] = moments[e, LOW]
        fs[HIGH_C, j] = moments[e, HIGH]
        lo = min(lo, moments[e, LOW])
        hi = max(hi, moments[e, HIGH])
        nonzero += count[e]
    examples = 0
    for j in range(nobs):
        examples += n_class[ks[CLASS, j]]
    if nonzero < examples:  # the leaf also saw zeros
        lo = min(lo, 0.0)
        hi = max(hi, 0.0)
    fs[RANGE, 0] = lo
    fs[RANGE, 1] = hi
    if not hi > lo:
        return False
    for j in range(nobs):
        w, n, nz = fs[WEIGHT, j], n_class[ks[CLASS, j]], ks[NONZERO, j]
        if binary:  # the weight of x = 0 (x = 1 where non-zero), exactly where the class is pure
            ks[KIND, j] = EXACT
            fs[A, j] = w if nz == 0 else (0.0 if nz == n else min(max(w - fs[A, j], 0.0), w))
        elif nz == 0:
            ks[KIND, j] = POINT
            fs[A, j] = 0.0
        elif nz == n and fs[LOW_C, j] == fs[HIGH_C, j]:
            ks[KIND, j] = POINT
            fs[A, j] = fs[LOW_C, j]
        else:
            mean = fs[A, j] / w
            var = fs[B, j] / w - mean * mean
            ks[KIND, j] = GAUSSIAN if var > 0.0 else POINT
            fs[A, j] = mean
            if var > 0.0:
                fs[B, j] = _INV_SQRT2 / math.sqrt(var)
    return True


@kernel(f"float64(float64, int64, float64, float64, {_S2}, {_K2})")
def _split_entropy(
    theta: float, nobs: int, floor: float, cut: float, fs: np.ndarray, ks: np.ndarray
) -> float:
    """``sum over branches b of w_b H(b)`` in nats for ``x <= theta`` (estimates from :func:`_estimates`),
    or infinity when a branch holds at most ``floor`` or the sum is surely at least ``cut``.

    ``w_b H(b) = w_b ln w_b - sum_c l_cb ln l_cb``, summed branch by branch in class order, so a pure
    branch gives exactly 0 (``W ln W - W ln W``). The cut costs four logarithms instead of two per
    class: Shannon entropy is at least the collision entropy, ``H(b) >= -ln sum_c (l_cb / w_b)^2``.
    The left-branch weight of each observed class goes to ``fs[LEFT]``.
    """
    wl, wr, sl2, sr2 = 0.0, 0.0, 0.0, 0.0
    for j in range(nobs):
        w = fs[WEIGHT, j]
        kind = ks[KIND, j]
        if kind == POINT:
            left = w if theta >= fs[A, j] else 0.0
        elif kind == GAUSSIAN:  # Phi(z) = erfc(-z / sqrt 2) / 2
            left = w * (0.5 * math.erfc((fs[A, j] - theta) * fs[B, j]))
        else:
            left = fs[A, j]
        right = w - left
        fs[LEFT, j] = left
        wl += left
        wr += right
        sl2 += left * left
        sr2 += right * right
    if not min(wl, wr) > floor:
        return np.inf
    hl, hr = _xlnx(wl), _xlnx(wr)
    bound = (hl + hl - wl * math.log(sl2)) + (hr + hr - wr * math.log(sr2))
    if bound - 1e-9 * (abs(bound) + wl + wr) >= cut:  # the margin covers rounding: pruning stays exact
        return np.inf
    for j in range(nobs):
        w, left = fs[WEIGHT, j], fs[LEFT, j]
        if left == w:
            hl -= fs[WLOGW, j]
        elif left == 0.0:
            hr -= fs[WLOGW, j]
        else:
            hl -= _xlnx(left)
            hr -= _xlnx(w - left)
    return hl + hr


@kernel(
    f"void(int64, int64, int64, int64, float64, int64, {_TABLES}, {_I1}, {_I1}, {_F2}, {_F2}, {_I2}, "
    f"{_F1}, {_F1}, {_I2}, {_I1}, {_S2}, {_K2})",
)
def _split(
    i: int,
    node: int,
    r: int,
    f: int,
    theta: float,
    nobs: int,
    feature: np.ndarray,
    threshold: np.ndarray,
    child: np.ndarray,
    slot: np.ndarray,
    n_nodes: np.ndarray,
    n_leaves: np.ndarray,
    class_w: np.ndarray,
    stat_w: np.ndarray,
    n_class: np.ndarray,
    seen: np.ndarray,
    evaluated: np.ndarray,
    segment: np.ndarray,
    pool: np.ndarray,
    fs: np.ndarray,
    ks: np.ndarray,
) -> None:
    """Leaf ``node`` (row ``r``) of tree ``i`` becomes ``x[f] <= theta``: the left child keeps row ``r``,
    the right one takes the next free row; both start from the branch class weights ``fs[LEFT]`` and
    ``weight - fs[LEFT]`` (the inherited estimate) with empty statistics."""
    a = n_nodes[i]
    new = pool[ROWS]
    pool[ROWS] = new + 1
    feature[i, node] = f
    threshold[i, node] = theta
    child[i, node, 0] = a
    child[i, node, 1] = a + 1
    slot[i, node] = -1
    slot[i, a] = r
    slot[i, a + 1] = new
    n_nodes[i] = a + 2
    n_leaves[i] += 1
    pool[GARBAGE] += segment[r, CAP]
    for s in (r, new):
        for c in range(class_w.shape[1]):
            class_w[s, c] = 0.0
            stat_w[s, c] = 0.0
            n_class[s, c] = 0
        seen[s] = 0.0
        evaluated[s] = 0.0
        for j in range(3):
            segment[s, j] = 0
    for j in range(nobs):
        c = ks[CLASS, j]
        class_w[r, c] = fs[LEFT, j]
        class_w[new, c] = fs[WEIGHT, j] - fs[LEFT, j]


@kernel(
    f"void(int64, int64, int64, float64, float64, float64, int64, {_TABLES}, {_I1}, {_I1}, {_F2}, {_F2}, "
    f"{_I2}, {_F1}, {_F1}, {_ENTRIES}, boolean[:], {_I1}, {_S2}, {_K2})",
)
def _try_split(
    i: int,
    node: int,
    r: int,
    tie: float,
    delta: float,
    grace: float,
    schedule: int,
    feature: np.ndarray,
    threshold: np.ndarray,
    child: np.ndarray,
    slot: np.ndarray,
    n_nodes: np.ndarray,
    n_leaves: np.ndarray,
    class_w: np.ndarray,
    stat_w: np.ndarray,
    n_class: np.ndarray,
    seen: np.ndarray,
    evaluated: np.ndarray,
    segment: np.ndarray,
    key: np.ndarray,
    count: np.ndarray,
    moments: np.ndarray,
    binary: np.ndarray,
    pool: np.ndarray,
    fs: np.ndarray,
    ks: np.ndarray,
) -> None:
    """VFDT's split evaluation of leaf ``node`` (row ``r``) of tree ``i`` (ALGORITHMS.md §2.8).

    As MOA and its ports (the reference's VFDT, river): purity, the pre-split entropy, the range
    ``R = log2(#classes)`` and the ``n`` of the Hoeffding bound use the leaf's class weights including
    the estimate it inherited at creation; the branch weights use the statistics observed since.

    Features are scanned in increasing order, candidates in increasing threshold, and the first
    maximum wins, as in the textbook scan. Entropies are in nats (``math.log`` is 2.5x faster than
    ``math.log2`` here) and the margin is compared in bits. A candidate whose gain provably cannot
    change the outcome (the feature's best, the best overall, and when ``eps >= tie`` the second
    best) is dropped after the cheap bound of :func:`_split_entropy`: the result is the full scan's.

    ``schedule`` (flags, ours, both off in the papers' setting): with :data:`ADAPTIVE`, when the margin
    test fails, the next evaluation waits until the bound can pass, the *nmin adaptation* of
    García-Martín et al. (2018): ``eps`` falls below ``max(best - second, tie)`` once ``n >= R^2
    ln(1/delta) / (2 max(best - second, tie)^2)``, so the leaf waits for that weight (at least
    ``grace``) instead of ``grace``. On a failed evaluation the computed margin is exact (a pruned
    candidate could only have made it larger than ``eps``), so the wait is a function of the
    statistics alone, as the rest of the tree. With :data:`BY_EXAMPLES` the leaf's ``seen`` counts
    examples, not weight (the bound's ``n`` stays the weight: counting examples there too grew
    fewer, worse trees on MNIST), and the adaptive wait is turned into examples at the leaf's mean
    weight per example since its creation.
    """
    evaluated[r] = seen[r]
    k = class_w.shape[1]
    present, n = 0, 0.0
    for c in range(k):
        present += class_w[r, c] > 0.0
        n += class_w[r, c]
    if present < 2:  # a pure leaf is not split
        return
    h_pre = 0.0  # in nats; gains are turned into bits for the bound
    for c in range(k):
        if class_w[r, c] > 0.0:
            p = class_w[r, c] / n
            h_pre -= p * math.log(p)
    nobs, total = 0, 0.0
    for c in range(k):
        w = stat_w[r, c]
        total += w
        if w > 0.0:
            ks[CLASS, nobs] = c
            fs[WEIGHT, nobs] = w
            fs[WLOGW, nobs] = _xlnx(w)
            nobs += 1
    floor = MIN_BRANCH_FRACTION * total
    n_row = n_class[r]
    bits = math.log2(present)
    eps = math.sqrt(bits * bits * math.log(1.0 / delta) / (2.0 * n))  # the Hoeffding bound, in bits
    margin_matters = not eps < tie
    eps_nats = eps / _LOG2E
    best, second, best_theta, best_f = -np.inf, -np.inf, 0.0, -1
    d = binary.size
    start = segment[r, START]
    end = start + segment[r, USED]
    for j in range(nobs):  # each observed class's run of entries
        base = ks[CLASS, j] * d
        ks[PTR, j] = _lower(key, start, end, base)
        ks[LIM, j] = _lower(key, ks[PTR, j], end, base + d)
    while True:  # features seen non-zero at the leaf, in increasing order; the others have the range [0, 0]
        f = d
        for j in range(nobs):
            if ks[PTR, j] < ks[LIM, j]:
                f = min(f, key[ks[PTR, j]] - ks[CLASS, j] * d)
        if f == d:
            break
        for j in range(nobs):
            e = ks[PTR, j]
            if e < ks[LIM, j] and key[e] - ks[CLASS, j] * d == f:
                ks[ENTRY, j] = e
                ks[PTR, j] = e + 1
            else:
                ks[ENTRY, j] = -1
        if _estimates(nobs, n_row, count, moments, binary[f], fs, ks):
            lo, hi = fs[RANGE, 0], fs[RANGE, 1]
            # A candidate matters only if its gain can beat this feature's best so far and either the
            # best overall, or (when the margin decides) the second best or best - eps. Gains <= 0 never
            # matter: they cannot make a split, nor raise max(second, 0).
            cut = best if not margin_matters else min(best, max(second, best - eps_nats))
            cut = max(cut, 0.0)
            f_best, f_theta = -np.inf, 0.0
            for jc in range(1 if binary[f] else N_CANDIDATES):
                theta = 0.5 if binary[f] else lo + (hi - lo) * ((jc + 1.0) / (N_CANDIDATES + 1.0))
                h_cut = (h_pre - max(cut, f_best)) * total  # gain <= cut  <=>  h >= h_cut
                h = _split_entropy(theta, nobs, floor, h_cut, fs, ks)
                if h < np.inf:  # admissible, and not ruled out by the bound
                    gain = h_pre - h / total
                    if gain > f_best:
                        f_best, f_theta = gain, theta
                    if nobs == 1:  # one class: every admissible split has gain h_pre exactly
                        break
            if f_best > best:
                second, best, best_theta, best_f = best, f_best, f_theta, f
            elif f_best > second:
                second = f_best
            if nobs == 1 and second > -np.inf:  # best and second are both h_pre: nothing can change
                break
    if best_f < 0 or not best > 0.0:
        return
    margin = (best - max(second, 0.0)) * _LOG2E  # in bits
    if margin_matters and not margin > eps:  # over the second best or "no split"
        if schedule & ADAPTIVE:  # evaluated + grace = seen + max(grace, need - n): where eps < gap
            gap = max(margin, tie)
            need = bits * bits * math.log(1.0 / delta) / (2.0 * gap * gap)
            if schedule & BY_EXAMPLES:  # the weight still needed, in examples at the leaf's mean weight
                examples = 0
                for c in range(k):
                    examples += n_class[r, c]
                evaluated[r] = seen[r] + max(0.0, (need - n) * examples / total - grace)
            else:
                evaluated[r] = seen[r] + max(0.0, need - n - grace)
        return
    f = best_f
    for j in range(nobs):  # the best feature's entries, found in each class's run
        base = ks[CLASS, j] * d
        run = _lower(key, start, end, base)
        e = _lower(key, run, _lower(key, run, end, base + d), base + f)
        ks[ENTRY, j] = e if e < end and key[e] == base + f else -1
    _estimates(nobs, n_row, count, moments, binary[f], fs, ks)
    _split_entropy(best_theta, nobs, -1.0, np.inf, fs, ks)  # the branch weights the children inherit
    _split(
        i, node, r, f, best_theta, nobs, feature, threshold, child, slot, n_nodes, n_leaves,
        class_w, stat_w, n_class, seen, evaluated, segment, pool, fs, ks,
    )  # fmt: skip


# -- the update --------------------------------------------------------------------------------------


@njit(inline="always", **_OPTS)
def _mix(z: np.uint64) -> np.uint64:
    """SplitMix64's finaliser (Steele, Lea, Flood 2014): a bijection of 64-bit words that scatters
    every input bit over the output (wrapping unsigned arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def leaf_keeps(tree: int, node: int, features: np.ndarray, subspace: float) -> np.ndarray:
    """Whether leaf ``node`` of tree ``tree`` keeps statistics of each of ``features`` (ours): the
    draw of :func:`forest_update` with ``subspace < 1``, a hash of (tree, node, feature) below
    ``subspace`` 2^64, so every replica draws the same features and a state needs no record of them."""
    m = 2**64 - 1

    def mix(z: int) -> int:
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        return z ^ (z >> 31)

    salt = mix(mix(tree) ^ node)
    cut = int(np.uint64(subspace * 18446744073709551616.0)) if subspace < 1.0 else 2**64
    return np.array([mix(salt ^ int(f)) < cut for f in features], dtype=bool)


@kernel(f"Tuple(({_I1}, {_F1}))({_F1}, {_I1}, {_F1}, int64)")
def _nonzeros(x: np.ndarray, idx: np.ndarray, val: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """The non-zero entries of a dense row ``x`` (or the sparse ``(idx, val)`` as is), checked against d."""
    if x.size == 0:
        if idx.size and (idx[0] < 0 or idx[idx.size - 1] >= d):
            raise ValueError("sparse index out of range")
        return idx, val
    if x.size != d:
        raise ValueError("x has the wrong dimension")
    m = 0
    for f in range(d):
        m += x[f] != 0.0
    out_idx, out_val = np.empty(m, np.int64), np.empty(m)
    m = 0
    for f in range(d):
        if x[f] != 0.0:
            out_idx[m] = f
            out_val[m] = x[f]
            m += 1
    return out_idx, out_val


@njit(inline="always", **_OPTS)
def _touch(
    slot: np.ndarray,
    segment: np.ndarray,
    key: np.ndarray,
    count: np.ndarray,
    moments: np.ndarray,
    class_w: np.ndarray,
    stat_w: np.ndarray,
    seen: np.ndarray,
    trees: np.ndarray,
    nodes: np.ndarray,
    start: int,
) -> float:
    """A sum over what the update of trees ``trees[start:]`` at their leaves ``nodes`` reads first: each
    leaf's row and the start of its entries. Read in a loop of its own, the trees' cache misses
    overlap; in the update, each tree's wait for them comes after a chain of dependent reads and
    branches the processor cannot look past (on car, this update cost as much as the rest of the
    event). The caller stores the sum where nothing reads it, so the reads are not optimised away."""
    out = 0.0
    for t in range(start, trees.size):
        r = slot[trees[t], nodes[t]]
        e = segment[r, 0]
        out += class_w[r, 0] + stat_w[r, 0] + seen[r]
        if e < key.size:
            out += key[e] + count[e] + moments[e, 0]
    return out


#: The types of the forest's arrays that :func:`forest_update` takes, in its order
#: (:meth:`~service.learners.weak.hoeffding_tree.HoeffdingForest.arrays`), and of ``x`` as the
#: kernels take it (dense row, idx, val): for compiled callers that update the forest in their call.
FOREST = (
    f"{_TABLES}, {_I1}, {_I1}, {_F1}, {_F1}, {_F1}, {_F2}, {_F2}, {_I2}, {_F1}, {_F1}, boolean[:], "
    f"{_ENTRIES}, boolean[:], {_I1}"
)
OPERANDS = f"{_F1}, {_I1}, {_F1}"


@kernel(f"UniTuple(int64, 2)({FOREST}, {OPERANDS}, {_I1}, {_I1}, {_F1}, {_I1}, int64, int64, float64)")
def forest_update(
    feature: np.ndarray,
    threshold: np.ndarray,
    child: np.ndarray,
    slot: np.ndarray,
    n_nodes: np.ndarray,
    n_leaves: np.ndarray,
    grace: np.ndarray,
    tie: np.ndarray,
    delta: np.ndarray,
    class_w: np.ndarray,
    stat_w: np.ndarray,
    n_class: np.ndarray,
    seen: np.ndarray,
    evaluated: np.ndarray,
    active: np.ndarray,
    segment: np.ndarray,
    key: np.ndarray,
    count: np.ndarray,
    moments: np.ndarray,
    binary: np.ndarray,
    pool: np.ndarray,
    x: np.ndarray,
    idx: np.ndarray,
    val: np.ndarray,
    trees: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    nodes: np.ndarray,
    start: int,
    schedule: int,
    subspace: float,
) -> tuple[int, int]:
    """Tree ``trees[t]`` learns ``(x, labels[t])`` with weight ``weights[t]``, for ``t = start, ...``.

    Each tree: route ``x`` (or take ``nodes[t]`` when ``nodes`` is not empty), add the example to its
    leaf's statistics (only to its class weights where the leaf is not ``active``), and evaluate a
    split when the leaf has seen ``grace`` more weight since the last evaluation. Returns ``(-1, 0)``
    when done, or ``(t, m)`` when tree ``t`` needs the caller to grow the arrays first: ``m`` more
    entries than the pool holds (``m > 0``), or room for a split (:data:`GROW_NODES`,
    :data:`GROW_ROWS`). Trees before ``t`` are updated, ``t`` and after are not. ``schedule``: the
    evaluation schedule of :func:`_try_split` (flags). ``subspace`` < 1 (ours): a leaf keeps
    statistics, and so split candidates, only for the features :func:`leaf_keeps` draws for it, that
    share of them in expectation (a new draw at each leaf, as the random subspaces of an adaptive
    random forest); 1: every feature.
    """
    k = class_w.shape[1]
    nz_idx, nz_val = _nonzeros(x, idx, val, binary.size)
    for j in range(nz_idx.size):  # a feature stays "0/1" while every value seen is 0 or 1
        if nz_val[j] != 0.0 and nz_val[j] != 1.0:
            binary[nz_idx[j]] = False
    fs = np.empty((RANGE + 1, max(k, 2)))
    ks = np.empty((ENTRY + 1, k), np.int64)
    some = subspace < 1.0
    cut = np.uint64(subspace * 18446744073709551616.0) if some else np.uint64(0)  # subspace * 2^64
    # the non-zeros a leaf keeps (all of them without subspaces): one pair of arrays for _merge
    sub_idx, sub_val = nz_idx.copy(), nz_val.copy()
    if nodes.size:  # the leaves' rows and entries, read for every tree first (see _touch)
        fs[0, 0] = _touch(slot, segment, key, count, moments, class_w, stat_w, seen, trees, nodes, start)
    for t in range(start, trees.size):
        i, c, w = trees[t], labels[t], weights[t]
        if c < 0 or c >= k or i < 0 or i >= grace.size:
            raise ValueError("label or tree out of range")
        if n_nodes[i] + 2 > feature.shape[1]:  # room for a split of this tree
            return t, GROW_NODES
        if pool[ROWS] == class_w.shape[0]:
            return t, GROW_ROWS
        node = nodes[t] if nodes.size else _leaf(feature, threshold, child, i, x, idx, val)
        r = slot[i, node]
        if not active[r]:  # statistics dropped under the memory bound: the leaf only counts classes
            class_w[r, c] += w
            continue
        m = 0
        if some:  # the leaf's own features among the example's non-zeros
            salt = _mix(_mix(np.uint64(i)) ^ np.uint64(node))
            for j in range(nz_idx.size):
                if _mix(salt ^ np.uint64(nz_idx[j])) < cut:
                    sub_idx[m] = nz_idx[j]
                    sub_val[m] = nz_val[j]
                    m += 1
        else:
            m = nz_idx.size
        lack = _merge(r, c, w, sub_idx, sub_val, m, binary.size, segment, key, count, moments, pool)
        if lack:
            return t, lack
        stat_w[r, c] += w
        class_w[r, c] += w
        n_class[r, c] += 1
        seen[r] += 1.0 if schedule & BY_EXAMPLES else w
        if seen[r] - evaluated[r] >= grace[i]:
            _try_split(
                i, node, r, tie[i], delta[i], grace[i], schedule, feature, threshold, child, slot, n_nodes,
                n_leaves, class_w, stat_w, n_class, seen, evaluated, segment, key, count, moments, binary,
                pool, fs, ks,
            )  # fmt: skip
    return -1, 0
