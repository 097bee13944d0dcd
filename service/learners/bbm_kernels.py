"""Compiled exact boost-by-majority potential: the cost vectors of BanditBBM and OnlineMBBM.

Zhang, Jung, Tewari (AISTATS 2019), eqs. (8)-(9), and ALGORITHMS.md §2.6: learner ``i`` (1-based)
gets ``Gamma^i truth`` with ``Gamma^i[l, r] = phi^r_{N-i}(s^{i-1} + e_l)`` and
``phi^r_n(s) = E_{X ~ Mult(n, u^r)} L^r(s + X)``, ``u^r = (1-gamma)/k 1 + gamma e_r``.
:func:`service.learners.booster_costs.bbm_cost_matrix` evaluates every entry with a memoised Python
generating-function DP, which costs milliseconds per event when the vote states do not repeat (MNIST,
k = 10). This module computes the same numbers exactly (no sampling, no truncation) in compiled code:

* **Generating function** (§2.6). Condition on ``X_r = j ~ Bin(n, q)``, ``q = gamma + (1-gamma)/k``.
  The other ``m = n - j`` draws are uniform on the ``k - 1`` other labels. With the truth's final
  count ``c = s[r] + j`` and ``E_t(x) = sum_{y <= t} (sigma x)^y / y!``,
  ``P(correct | j) = m! / rho^m [x^m] prod_{l != r} Etilde_{c-1-s[l]}(x; w)``, where
  ``sigma = rho / (k - 1)`` and ``Etilde_t(x; w) = E_t(x) + w (sigma x)^{t+1} / (t+1)!`` marks with
  ``w`` a label tied with the truth at the top. Pessimistic ties take ``w = 0``. Random ties score
  ``1 / (1 + #tied others)`` ``= int_0^1 w^tau dw``; the integrand is a polynomial in ``w`` of known
  degree (the most labels that can tie within the draws), so Gauss-Legendre on [0, 1] with enough
  nodes integrates it exactly, and when a single group binds the terms are integrated one by one.
  All terms are non-negative (no cancellation, no division). The scale ``rho = N`` keeps the
  coefficients between ~1e-300 and e^N: no overflow up to N = 150.
* **Symmetry.** ``phi^r`` only depends on ``s[r]`` and the multiset of the other counts. So the
  labels with equal counts form groups, and ``Gamma[l, r]`` only depends on the group of r, the
  group of l and whether ``l == r``. For a truth group and ``j``, one product over the groups at
  degree ``m + 1`` gives the diagonal (``r`` bumped, at ``j - 1``). The same product at degree ``m``,
  and the leave-one-out products (prefix x one group with one label bumped x suffix), give the
  off-diagonal entries. Within a group, ``Etilde_t^mu`` is a sum of shifted powers ``E_t^p`` (the
  binomial theorem: the tie term is a monomial). Labels whose cap is beyond the degree form one
  closed-form exponential. When every label's cap is, ``P(correct | j) = 1`` for this ``j`` and every
  larger one.
* **Tables.** The powers ``E_t^p`` and ``E_t^p E_{t-1}`` (``t < N``, ``p < k``) only depend on
  (k, N). They are built once per (k, N) and shared: ``16 k N (N + 2)`` bytes, 9.5 MB at k = 26,
  N = 150. Above :data:`TABLE_BYTES`, the powers are multiplied out at each use instead.
* **Ties stay ties.** The cost vectors are summed by groups, so two labels whose costs are equal in
  exact arithmetic get equal floating-point costs (the §2.8 reduction breaks exact ties at random).

Agreement with the Python DP is within 1e-12 (absolute, on values in [0, 1]; in practice ~1e-14).
Only ``lgamma``, ``exp`` and the Gauss-Legendre nodes differ from CPython's arithmetic, in the last
bits. Conventions follow :mod:`service.kernels`: explicit signatures (compiled at import, from the
on-disk cache), ``nogil``, no ``fastmath``.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np
from numba import njit

from service._jit_cache import kernel
from service.learners.booster_kernels import LEARN, LEARNED, learn_forest, loss_iota

__all__ = [
    "MEMO_BYTES",
    "TABLE_BYTES",
    "CostMemo",
    "bbm_cost_vectors",
    "bbm_gamma_matrix",
    "bbm_learn",
    "cost_operands",
]

_OPTS = {"cache": True, "nogil": True, "boundscheck": False}

#: Largest pair of power tables kept per (k, N); beyond it the powers are multiplied out per use.
TABLE_BYTES = 64 << 20

_V = "float64[::1]"
_M = "float64[:, ::1]"
_T = "float64[:, :, ::1]"
_I = "int64[::1]"
#: :func:`cost_operands`: gamma, the tie rule, the tables (:func:`_tables`) and a memo's arrays
_COSTS = f"Tuple((float64, boolean, {_T}, {_T}, {_M}, {_V}, {_V}, {_M}, {_M}, int64[:, ::1], {_M}, {_T}))"


# --------------------------------------------------------------------------------------------
# Truncated polynomial arithmetic (a degree < 0 is the zero polynomial)
# --------------------------------------------------------------------------------------------


@kernel(f"int64({_V}, int64, {_V}, int64, {_V}, int64)")
def _mul(a: np.ndarray, da: int, b: np.ndarray, db: int, out: np.ndarray, deg: int) -> int:
    """``out = a b`` truncated at degree ``deg``; returns the degree of the result."""
    if da < 0 or db < 0 or deg < 0:
        return -1
    top = min(da + db, deg)
    for y in range(top + 1):
        acc = 0.0
        for i in range(max(0, y - db), min(y, da) + 1):
            acc += a[i] * b[y - i]
        out[y] = acc
    return top


@kernel(f"float64({_V}, int64, {_V}, int64, int64)")
def _coef(a: np.ndarray, da: int, b: np.ndarray, db: int, y: int) -> float:
    """``[x^y] a b``, one coefficient of a product (a dot product)."""
    if da < 0 or db < 0 or y < 0:
        return 0.0
    acc = 0.0
    for i in range(max(0, y - db), min(y, da) + 1):
        acc += a[i] * b[y - i]
    return acc


@kernel(f"int64({_M}, {_V}, int64, int64, float64, int64, {_V})")
def _tilde_power(
    powers: np.ndarray, e: np.ndarray, t: int, mu: int, w: float, deg: int, out: np.ndarray
) -> int:
    """``Etilde_t^mu`` truncated at ``deg`` from ``powers[p] = E_t^p``: by the binomial theorem, as the
    tie term ``w e_{t+1} x^{t+1}`` is a monomial (each term is a shifted power); returns the degree."""
    if deg < 0:
        return -1
    for y in range(deg + 1):
        out[y] = 0.0
    d = t + 1
    wc = w * e[d]
    coef = 1.0
    top = 0
    for tau in range(mu + 1):
        shift = d * tau
        if shift > deg:
            break
        p = mu - tau
        last = min(deg - shift, p * t)
        for y in range(last + 1):
            out[shift + y] += coef * powers[p, y]
        top = max(top, shift + last)
        if w == 0.0:
            break
        coef *= wc * (mu - tau) / (tau + 1)
    return top


@kernel(f"int64({_M}, {_M}, {_V}, int64, int64, float64, int64, {_V})")
def _tilde_bumped(
    powers: np.ndarray,
    powers2: np.ndarray,
    e: np.ndarray,
    t: int,
    mu: int,
    w: float,
    deg: int,
    out: np.ndarray,
) -> int:
    """``Etilde_t^{mu-1} Etilde_{t-1}`` truncated at ``deg``: a group with one label bumped by one vote.

    Expanding both tie terms, ``sum_tau C(mu-1, tau) (w e_{t+1})^tau x^{(t+1) tau}
    (E_t^{mu-1-tau} E_{t-1} + w e_t x^t E_t^{mu-1-tau})``, from ``powers2[p] = E_t^p E_{t-1}``."""
    if deg < 0:
        return -1
    for y in range(deg + 1):
        out[y] = 0.0
    d = t + 1
    p1 = mu - 1
    wt = w * e[t]
    wc = w * e[d]
    coef = 1.0
    top = -1
    for tau in range(p1 + 1):
        shift = d * tau
        if shift > deg:
            break
        p = p1 - tau
        if t >= 1:  # E_{t-1} = 0 when t = 0
            last = min(deg - shift, p * t + t - 1)
            for y in range(last + 1):
                out[shift + y] += coef * powers2[p, y]
            top = max(top, shift + last)
        if w != 0.0 and shift + t <= deg:
            c2 = coef * wt
            last = min(deg - shift - t, p * t)
            for y in range(last + 1):
                out[shift + t + y] += c2 * powers[p, y]
            top = max(top, shift + t + last)
        if w == 0.0:
            break
        coef *= wc * (p1 - tau) / (tau + 1)
    return top


@kernel(f"void({_M}, {_M}, int64, int64, {_V}, int64)")
def _fill_powers(powers: np.ndarray, powers2: np.ndarray, t: int, mu: int, e: np.ndarray, deg: int) -> None:
    """``powers[p] = E_t^p`` (``p <= mu``) and ``powers2[p] = E_t^p E_{t-1}`` (``p < mu``), truncated
    at ``deg``: the table's rows, multiplied out."""
    for y in range(deg + 1):
        powers[0, y] = 0.0
    powers[0, 0] = 1.0
    for p in range(1, mu + 1):
        _mul(powers[p - 1], min((p - 1) * t, deg), e, t, powers[p], deg)
    for p in range(mu):
        if _mul(powers[p], min(p * t, deg), e, t - 1, powers2[p], deg) < 0:
            powers2[p, 0] = 0.0


@kernel(f"int64({_I}, int64, {_I}, {_I}, int64, int64)")
def _tie_degree(act: np.ndarray, nact: int, mo: np.ndarray, vals: np.ndarray, c: int, M: int) -> int:
    """Degree in ``w`` of the products at one ``(truth group, j)``: the most labels that can tie with
    the truth at ``c`` within degree ``M`` (diagonal) or ``M - 1`` with one label bumped (off-diagonal).

    A tie of a label of group ``act[h]`` costs ``d = c - vals`` draws (0: already at ``c``), so the
    most ties within a budget take the cheapest first: ``act`` is by increasing count, so by
    decreasing ``d``. A bumped label costs ``d - 1``, one less than the others of its group.
    """
    best = 0
    for bumped in range(-1, nact):
        budget = M if bumped < 0 else M - 1
        if bumped >= 0 and (budget < 0 or c - vals[act[bumped]] == 0):
            continue  # no off-diagonal entry, or the bumped label is above c
        tau = 0
        for h in range(nact - 1, -1, -1):
            d = c - vals[act[h]]
            cnt = mo[act[h]]
            if h == bumped:
                cnt -= 1
                if d - 1 <= budget:  # the bumped label, one draw cheaper
                    tau += 1
                    budget -= d - 1
            take = cnt if d == 0 else min(cnt, budget // d)
            tau += take
            budget -= take * d
        best = max(best, tau)
    return best


@kernel(f"UniTuple(float64, 3)({_V}, int64, {_M}, {_M}, {_V}, int64, int64, boolean, int64)")
def _one_group(
    f0: np.ndarray,
    df: int,
    powers: np.ndarray,
    powers2: np.ndarray,
    e: np.ndarray,
    t: int,
    mu: int,
    pessimistic: bool,
    M: int,
) -> tuple[float, float, float]:
    """``int_0^1 [x^y] F Etilde_t(w)^mu dw`` at ``y = M`` and ``y = M - 1``, and the same with one
    label bumped at ``M - 1``, when only one group binds: the binomial terms ``C(mu, tau) (w
    e_{t+1})^tau x^{(t+1) tau} E_t^{mu-tau}`` integrate to a weight ``1 / (tau + 1)`` each."""
    m = M - 1
    if t < 0:  # count equal to c: w^mu, and the bumped label is above c
        top = f0[M] if df >= M else 0.0
        low = f0[m] if 0 <= m <= df else 0.0
        return top / (mu + 1), low / (mu + 1), 0.0
    d = t + 1
    dsum = 0.0
    psum = 0.0
    cf = 1.0
    for tau in range(mu + 1):
        sh = d * tau
        if sh > M:
            break
        dr = (mu - tau) * t
        dsum += cf * _coef(f0, df, powers[mu - tau], dr, M - sh) / (tau + 1)
        psum += cf * _coef(f0, df, powers[mu - tau], dr, m - sh) / (tau + 1)
        if pessimistic:
            break
        cf *= e[d] * (mu - tau) / (tau + 1)
    loo = 0.0
    cf = 1.0
    for tau in range(mu):
        sh = d * tau
        if sh > m:
            break
        p = mu - 1 - tau
        loo += cf * _coef(f0, df, powers2[p], p * t + t - 1, m - sh) / (tau + 1)
        if pessimistic:
            break
        loo += cf * e[t] * _coef(f0, df, powers[p], p * t, m - sh - t) / (tau + 2)  # bumped one tied
        cf *= e[d] * (mu - 1 - tau) / (tau + 1)
    return dsum, psum, loo


# --------------------------------------------------------------------------------------------
# Tables that only depend on (k, N)
# --------------------------------------------------------------------------------------------


@kernel(f"Tuple(({_T}, {_T}, {_M}, {_V}, {_V}))(int64, int64, boolean)")
def _build_tables(
    k: int, top: int, with_powers: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Powers ``tab[t, p] = E_t^p`` and ``tab2[t, p] = E_t^p E_{t-1}`` (``t < top``, ``p < k``,
    degree ``<= top``), the exponentials ``expo[mu, y] = (mu sigma)^y / y!``, ``fs[y] = y! / rho^y``
    and ``lgf[y] = log y!``, with ``rho = top`` and ``sigma = rho / (k - 1)``."""
    rho = float(top)
    sigma = rho / (k - 1)
    expo = np.empty((k, top + 2))
    for mu in range(k):
        expo[mu, 0] = 1.0
        for y in range(1, top + 2):
            expo[mu, y] = expo[mu, y - 1] * (mu * sigma) / y
    fs = np.empty(top + 2)
    lgf = np.empty(top + 2)
    fs[0] = 1.0
    for y in range(top + 2):
        lgf[y] = math.lgamma(y + 1.0)
        if y > 0:
            fs[y] = fs[y - 1] * (y / rho)
    if not with_powers:
        return np.zeros((0, 0, 0)), np.zeros((0, 0, 0)), expo, fs, lgf
    tab = np.empty((top, k, top + 2))
    tab2 = np.empty((top, k, top + 2))
    for t in range(top):
        _fill_powers(tab[t], tab2[t], t, k - 1, expo[1], top)
    return tab, tab2, expo, fs, lgf


@lru_cache(maxsize=8)
def _tables(k: int, top: int) -> tuple[np.ndarray, ...]:
    """The tables of (k, N) and the Gauss-Legendre rules on [0, 1] with 1..k/2+1 nodes (row ``G``:
    the ``G`` nodes and weights), built on first use and shared by every later call: never written
    after this (they are not flagged read-only because numba's signatures take writeable arrays)."""
    with_powers = 16 * k * top * (top + 2) <= TABLE_BYTES
    tab, tab2, expo, fs, lgf = _build_tables(k, top, with_powers)
    g_max = k // 2 + 1  # at most k - 1 others tie, plus the bumped label: degree <= k in w
    glx = np.zeros((g_max + 1, g_max))
    glw = np.zeros((g_max + 1, g_max))
    for g in range(1, g_max + 1):
        x, w = np.polynomial.legendre.leggauss(g)
        glx[g, :g] = 0.5 * (x + 1.0)
        glw[g, :g] = 0.5 * w
    return tab, tab2, expo, fs, lgf, glx, glw


# --------------------------------------------------------------------------------------------
# The cost matrix of one vote state, by groups of equal counts
# --------------------------------------------------------------------------------------------


@njit(inline="always", **_OPTS)  # inlined, as _memo_slot: called per learner of every event
def _groups(s: np.ndarray, grp: np.ndarray, vals: np.ndarray, mult: np.ndarray) -> int:
    """Labels grouped by equal counts: ``vals`` (increasing) and ``mult`` of each group, ``grp[l]``
    the group of label ``l``; returns the number of groups (insertion: k is small)."""
    k = s.size
    D = 0
    for lab in range(k):
        v = s[lab]
        pos = 0
        while pos < D and vals[pos] < v:
            pos += 1
        if pos < D and vals[pos] == v:
            mult[pos] += 1
            continue
        for g in range(D, pos, -1):
            vals[g] = vals[g - 1]
            mult[g] = mult[g - 1]
        vals[pos] = v
        mult[pos] = 1
        D += 1
    for lab in range(k):
        g = 0
        while vals[g] != s[lab]:
            g += 1
        grp[lab] = g
    return D


@kernel(
    f"void(int64, int64, float64, boolean, int64[::1], int64[::1], int64, int64[::1], {_T}, {_T}, {_M}, "
    f"{_V}, {_V}, {_M}, {_M}, {_V}, {_M}, {_T}, {_M}, int64[:, ::1], {_M})",
)
def _state_gamma(
    n: int,
    k: int,
    gamma: float,
    pessimistic: bool,
    vals: np.ndarray,
    mult: np.ndarray,
    D: int,
    want: np.ndarray,
    tab: np.ndarray,
    tab2: np.ndarray,
    expo: np.ndarray,
    fs: np.ndarray,
    lgf: np.ndarray,
    glx: np.ndarray,
    glw: np.ndarray,
    diag: np.ndarray,
    off: np.ndarray,
    ws: np.ndarray,
    pwbuf: np.ndarray,
    iw: np.ndarray,
    fw: np.ndarray,
) -> None:
    """``Gamma[l, r] = phi^r_n(s + e_l)`` of one state given by its groups (:func:`_groups`):
    ``diag[a] = Gamma[r, r]`` and ``off[a, b] = Gamma[l, r]`` for ``r`` in group ``a`` and ``l != r``
    in group ``b``, for the truth groups ``a`` with ``want[a]`` (the others are left as they are).

    For each truth group and ``j`` (draws of the truth), the product over the other groups at
    degree ``M = n - j + 1`` gives the diagonal at ``j - 1``; its degree-``m = n - j`` coefficient
    and the leave-one-out products (one label of a group bumped) give the off-diagonal at ``j``.
    """
    e = expo[1]  # one label's series, (sigma x)^y / y!
    tabulated = tab.shape[0] > 0
    pre, suf, phi, xb, ybuf = ws[0], ws[1], ws[2], ws[3], ws[4, 0]
    act, dpre, dsuf, dphi, dx, mo, isact, pw_at = iw[0], iw[1], iw[2], iw[3], iw[4], iw[5], iw[6], iw[7]
    pmf, loo, oacc = fw[0], fw[1], fw[2]
    # X_r ~ Bin(n, q), in log space (no overflow of C(n, j), no underflow of q^j before the product)
    q = gamma + (1.0 - gamma) / k
    lq, l1q = math.log(q), math.log1p(-q)
    for j in range(n + 1):
        pmf[j] = math.exp(lgf[n] - lgf[j] - lgf[n - j] + j * lq + (n - j) * l1q)
    for a in range(D):
        if not want[a]:
            continue
        vmax = -1
        for g in range(D):
            mo[g] = mult[g] - (1 if g == a else 0)  # the others' multiset
            if mo[g] > 0:
                vmax = vals[g]
            oacc[g] = 0.0
        dacc = 0.0
        # below j_lo another label already beats the truth's final count: P(correct) = 0
        j_lo = max(0, vmax - vals[a] + (1 if pessimistic else 0))
        for j in range(j_lo, n + 2):
            c = vals[a] + j  # the truth's final count (off-diagonal entries; diagonal: j - 1 draws)
            m = n - j
            M = m + 1
            nact = 0
            for g in range(D):
                isact[g] = 0
                if mo[g] > 0 and c - 1 - vals[g] < M:  # cap below the degree: it binds
                    act[nact] = g
                    isact[g] = 1
                    nact += 1
            if nact == 0:
                # every cap beyond the degree: P(correct) = 1 here and for every larger j
                for jj in range(j, n + 2):
                    if jj >= 1:
                        dacc += pmf[jj - 1]
                    if jj <= n:
                        for g in range(D):
                            oacc[g] += pmf[jj]
                break
            mufree = 0
            for g in range(D):
                if mo[g] > 0 and isact[g] == 0:
                    mufree += mo[g]
            # Gauss-Legendre with G nodes is exact to degree 2G - 1 in w (pessimistic: w = 0 only)
            n_nodes = 1 if pessimistic else _tie_degree(act, nact, mo, vals, c, M) // 2 + 1
            if not tabulated:  # E_t^p (p <= mu) and E_t^p E_{t-1} (p < mu) per active group
                row = 0
                for h in range(nact):
                    t, mu = c - 1 - vals[act[h]], mo[act[h]]
                    pw_at[h] = row
                    if t >= 0:
                        _fill_powers(
                            pwbuf[row : row + mu + 1], pwbuf[row + mu + 1 : row + 2 * mu + 1], t, mu, e, M
                        )
                    row += 2 * mu + 1
            f0 = expo[mufree]  # the free labels: an exponential
            df = M if mufree > 0 else 0
            dsum = 0.0
            psum = 0.0
            for h in range(nact):
                loo[h] = 0.0
            if nact == 1:  # one binding group: integrate over w term by term, no nodes
                t = c - 1 - vals[act[0]]
                if t >= 0 and not tabulated:
                    powers = pwbuf[pw_at[0] : pw_at[0] + mo[act[0]] + 1]
                    powers2 = pwbuf[pw_at[0] + mo[act[0]] + 1 : pw_at[0] + 2 * mo[act[0]] + 1]
                elif t >= 0:
                    powers, powers2 = tab[t], tab2[t]
                else:
                    powers, powers2 = pwbuf[:0], pwbuf[:0]  # not read when t < 0
                dsum, psum, loo[0] = _one_group(f0, df, powers, powers2, e, t, mo[act[0]], pessimistic, M)
                n_nodes = 0
            for node in range(n_nodes):
                w = 0.0 if pessimistic else glx[n_nodes, node]
                om = 1.0 if pessimistic else glw[n_nodes, node]
                for h in range(nact):
                    t, mu = c - 1 - vals[act[h]], mo[act[h]]
                    if t < 0:  # count equal to c (random ties only): no draws, a sure tie
                        phi[h, 0] = w**mu
                        dphi[h] = 0
                        dx[h] = -1  # the bumped label is above c
                        continue
                    if tabulated:
                        powers, powers2 = tab[t], tab2[t]
                    else:
                        powers = pwbuf[pw_at[h] : pw_at[h] + mu + 1]
                        powers2 = pwbuf[pw_at[h] + mu + 1 : pw_at[h] + 2 * mu + 1]
                    dphi[h] = _tilde_power(powers, e, t, mu, w, M, phi[h])
                    dx[h] = _tilde_bumped(powers, powers2, e, t, mu, w, m, xb[h])
                # prefix products F Phi_0 ... Phi_{h-1}
                for h in range(1, nact):
                    if h == 1:
                        dpre[h] = _mul(f0, df, phi[0], dphi[0], pre[h], M)
                    else:
                        dpre[h] = _mul(pre[h - 1], dpre[h - 1], phi[h - 1], dphi[h - 1], pre[h], M)
                last = nact - 1
                head = f0 if last == 0 else pre[last]
                dhead = df if last == 0 else dpre[last]
                dsum += om * _coef(head, dhead, phi[last], dphi[last], M)
                if m < 0:
                    continue
                psum += om * _coef(head, dhead, phi[last], dphi[last], m)
                # suffix products Phi_h ... Phi_last, truncated at m
                for h in range(last - 1, 0, -1):
                    if h + 1 == last:
                        dsuf[h] = _mul(phi[h], dphi[h], phi[last], dphi[last], suf[h], m)
                    else:
                        dsuf[h] = _mul(phi[h], dphi[h], suf[h + 1], dsuf[h + 1], suf[h], m)
                # leave-one-out: prefix x (group h with one label bumped) x suffix, at degree m
                for h in range(nact):
                    if dx[h] < 0:
                        continue
                    head = f0 if h == 0 else pre[h]
                    dhead = df if h == 0 else dpre[h]
                    if h == last:
                        loo[h] += om * _coef(head, dhead, xb[h], dx[h], m)
                        continue
                    dy = _mul(head, dhead, xb[h], dx[h], ybuf, m)
                    if h + 1 == last:
                        loo[h] += om * _coef(ybuf, dy, phi[last], dphi[last], m)
                    else:
                        loo[h] += om * _coef(ybuf, dy, suf[h + 1], dsuf[h + 1], m)
            if j >= 1:
                dacc += pmf[j - 1] * fs[M] * dsum
            if m >= 0:
                base = pmf[j] * fs[m]
                for g in range(D):
                    if isact[g] == 0:
                        oacc[g] += base * psum  # a free group: one more vote changes nothing
                for h in range(nact):
                    oacc[act[h]] += base * loo[h]
        diag[a] = min(max(1.0 - dacc, 0.0), 1.0)
        for b in range(D):
            off[a, b] = min(max(1.0 - oacc[b], 0.0), 1.0)


@kernel(f"Tuple(({_T}, {_M}, int64[:, ::1], {_M}))(int64, int64, boolean)")
def _workspace(k: int, top: int, tabulated: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Scratch of :func:`_state_gamma`: polynomial rows per group, power rows (without a table),
    integer rows and float rows (the binomial pmf, the leave-one-out sums, the accumulators)."""
    ws = np.empty((5, k, top + 2))
    pwbuf = np.empty((0, 0)) if tabulated else np.empty((3 * k, top + 2))
    iw = np.zeros((8, k), np.int64)
    fw = np.zeros((3, max(k, top + 2)))
    return ws, pwbuf, iw, fw


@njit(inline="always", **_OPTS)
def _memo_slot(n: int, vals: np.ndarray, mult: np.ndarray, D: int, keys: np.ndarray) -> int:
    """The row of the memo (:class:`CostMemo`) that holds the state ``(n, groups)``: found, or newly
    claimed (the table is emptied first when it is half full); -1 without a memo.

    A key row is ``n, D, vals[:D], mult[:D]`` (``n = -1``: free). Open addressing, linear probing.
    """
    cap = keys.shape[0] - 1  # the last row counts the rows in use
    if cap <= 0:
        return -1
    h = n * 1000003 + D
    for g in range(D):
        h = (h * 31 + vals[g]) * 31 + mult[g]
    first = (h & 0x7FFFFFFFFFFFFFFF) % cap
    slot = first
    while keys[slot, 0] >= 0:
        same = keys[slot, 0] == n and keys[slot, 1] == D
        g = 0
        while same and g < D:
            same = keys[slot, 2 + g] == vals[g] and keys[slot, 2 + D + g] == mult[g]
            g += 1
        if same:
            return slot
        slot = (slot + 1) % cap
    if 2 * (keys[cap, 0] + 1) > cap:  # half full: start afresh (states of long runs keep changing)
        for row in range(cap):
            keys[row, 0] = -1
        keys[cap, 0] = 0
        slot = first
    keys[cap, 0] += 1
    keys[slot, 0] = n
    keys[slot, 1] = D
    for g in range(D):
        keys[slot, 2 + g] = vals[g]
        keys[slot, 2 + D + g] = mult[g]
    keys[slot, 2 + 2 * D :] = 0  # no group of this state computed yet (the flags follow the key)
    return slot


@kernel(
    f"float64[:, ::1](int64[::1], int64, {_V}, float64, boolean, {_T}, {_T}, {_M}, {_V}, {_V}, {_M}, {_M}, "
    f"int64[:, ::1], {_M}, {_T})",
)
def _cost_vectors(
    weak: np.ndarray,
    k: int,
    truth: np.ndarray,
    gamma: float,
    pessimistic: bool,
    tab: np.ndarray,
    tab2: np.ndarray,
    expo: np.ndarray,
    fs: np.ndarray,
    lgf: np.ndarray,
    glx: np.ndarray,
    glw: np.ndarray,
    keys: np.ndarray,
    mdiag: np.ndarray,
    moff: np.ndarray,
) -> np.ndarray:
    """All learners' cost vectors ``Gamma^i truth`` (eq. (9) at ``s^{i-1}``, ``n = N - 1 - i``).

    With a memo (``keys, mdiag, moff`` of :class:`CostMemo`, else empty), the ``diag`` and ``off``
    rows of a truth group are computed once per state and reused: :func:`_state_gamma` computes each
    truth group on its own, so a reused row is bit for bit the row it would compute again.
    """
    n_learners = weak.size
    top = expo.shape[1] - 2
    ws, pwbuf, iw, fw = _workspace(k, top, tab.shape[0] > 0)
    s = np.zeros(k, np.int64)
    grp = np.empty(k, np.int64)
    vals = np.empty(k, np.int64)
    mult = np.empty(k, np.int64)
    want = np.empty(k, np.int64)
    wsum = np.empty(k)
    diag = np.empty(k)
    off = np.empty((k, k))
    out = np.empty((n_learners, k))
    for i in range(n_learners):
        n = n_learners - 1 - i
        D = _groups(s, grp, vals, mult)
        for g in range(D):
            want[g] = 0
        for r in range(k):
            if truth[r] != 0.0:  # a zero weight needs no column of Gamma
                want[grp[r]] = 1
        slot = _memo_slot(n, vals, mult, D, keys)
        if slot >= 0:  # compute only the wanted groups the memo lacks (flags after the key)
            missing = 0
            for g in range(D):
                if want[g] and keys[slot, 2 + 2 * D + g] == 0:
                    missing += 1
                else:
                    want[g] = 0
            if missing:
                _state_gamma(
                    n, k, gamma, pessimistic, vals, mult, D, want, tab, tab2, expo, fs, lgf, glx, glw,
                    diag, off, ws, pwbuf, iw, fw,
                )  # fmt: skip
                for a in range(D):
                    if want[a]:
                        keys[slot, 2 + 2 * D + a] = 1
                        mdiag[slot, a] = diag[a]
                        for b in range(D):
                            moff[slot, a, b] = off[a, b]
            for g in range(D):
                want[g] = 0
            for r in range(k):
                if truth[r] != 0.0:
                    want[grp[r]] = 1
            for a in range(D):
                if want[a]:
                    diag[a] = mdiag[slot, a]
                    for b in range(D):
                        off[a, b] = moff[slot, a, b]
        else:
            _state_gamma(
                n, k, gamma, pessimistic, vals, mult, D, want, tab, tab2, expo, fs, lgf, glx, glw,
                diag, off, ws, pwbuf, iw, fw,
            )  # fmt: skip
        # Gamma^i truth by truth groups, the same operations for labels with the same count and
        # weight: costs equal in exact arithmetic are equal in floating point (ties stay ties)
        for g in range(D):
            wsum[g] = 0.0
        for r in range(k):
            wsum[grp[r]] += truth[r]
        for lab in range(k):
            b = grp[lab]
            acc = 0.0
            for a in range(D):
                if want[a] == 0:
                    continue
                if a != b:
                    acc += off[a, b] * wsum[a]
                elif mult[b] > 1:
                    acc += off[b, b] * (wsum[b] - truth[lab]) + diag[b] * truth[lab]
                else:
                    acc += diag[b] * truth[lab]
            out[i, lab] = acc
        s[weak[i]] += 1
    return out


@kernel(
    f"float64[:, ::1](int64, int64[::1], float64, boolean, {_T}, {_T}, {_M}, {_V}, {_V}, {_M}, {_M})",
)
def _gamma_matrix(
    n: int,
    s: np.ndarray,
    gamma: float,
    pessimistic: bool,
    tab: np.ndarray,
    tab2: np.ndarray,
    expo: np.ndarray,
    fs: np.ndarray,
    lgf: np.ndarray,
    glx: np.ndarray,
    glw: np.ndarray,
) -> np.ndarray:
    """``Gamma[l, r] = phi^r_n(s + e_l)`` of one state, the full (k, k) matrix (9)."""
    k = s.size
    ws, pwbuf, iw, fw = _workspace(k, expo.shape[1] - 2, tab.shape[0] > 0)
    grp = np.empty(k, np.int64)
    vals = np.empty(k, np.int64)
    mult = np.empty(k, np.int64)
    diag = np.empty(k)
    off = np.empty((k, k))
    D = _groups(s - s.min(), grp, vals, mult)  # shift-invariant: small counts
    want = np.ones(k, np.int64)
    _state_gamma(
        n,
        k,
        gamma,
        pessimistic,
        vals,
        mult,
        D,
        want,
        tab,
        tab2,
        expo,
        fs,
        lgf,
        glx,
        glw,
        diag,
        off,
        ws,
        pwbuf,
        iw,
        fw,
    )
    G = np.empty((k, k))
    for lab in range(k):
        for r in range(k):
            G[lab, r] = diag[grp[r]] if lab == r else off[grp[r], grp[lab]]
    return G


class CostMemo:
    """Rows of ``Gamma`` already computed by :func:`bbm_cost_vectors`, per vote state (issue 20).

    A booster meets the same few states again and again (the vote counts of its first learners), and
    each costs the exact potential's sums: the memo keeps, per state ``(n, counts)``, the ``diag`` and
    ``off`` rows of each truth group computed so far. Reused rows are bit for bit the recomputed ones,
    so the memo changes no result; it is a cache, not learned state. It belongs to one booster (one
    ``k``, ``N``, ``gamma`` and tie rule) and is not shared between threads.

    Parameters
    ----------
    k, n_learners : int
        Labels and learners.
    gamma : float
    pessimistic : bool
        The booster's edge and tie rule (checked at each use).
    rows : int, default 4096
        States kept, at most half of ``2 rows`` slots; the table is emptied when it is full. Fewer
        when the slots would exceed :data:`MEMO_BYTES`.
    """

    def __init__(self, k: int, n_learners: int, gamma: float, pessimistic: bool, rows: int = 4096) -> None:
        self.config = (int(k), int(n_learners), float(gamma), bool(pessimistic))
        slots = max(min(2 * rows, MEMO_BYTES // (8 * (3 * k + 2 + k * k))), 0)
        self.keys = np.full((slots + 1, 2 + 3 * k), -1, dtype=np.int64)
        self.keys[slots, 0] = 0  # rows in use
        self.diag = np.zeros((slots, k))
        self.off = np.zeros((slots, k, k))


#: Bound of a :class:`CostMemo`'s tables, in bytes.
MEMO_BYTES = 16 << 20
_NO_MEMO = (np.zeros((1, 2), dtype=np.int64), np.zeros((0, 0)), np.zeros((0, 0, 0)))


def bbm_cost_vectors(
    weak: np.ndarray,
    k: int,
    gamma: float,
    pessimistic: bool,
    truth: np.ndarray,
    memo: CostMemo | None = None,
) -> np.ndarray:
    """Cost vectors ``Gamma^i truth`` of all N learners, exactly (Zhang et al. 2019, eqs. (8)-(9)).

    ``Gamma^i[l, r] = phi^r_{N-i}(s^{i-1} + e_l)`` with the boost-by-majority potential of
    ALGORITHMS.md §2.6, ``s^{i-1}`` the votes of the first ``i - 1`` learners. Equals
    :func:`service.learners.banditbbm.bbm_costs` with ``rng=None``: each entry of ``Gamma`` to
    1e-12, so each cost to ``1e-12 sum |truth|``. Labels with equal counts and equal weights in
    ``truth`` get bit-identical costs.

    Parameters
    ----------
    weak : ndarray of shape (N,), int
        The learners' votes ``l^i`` in ``0..k-1``, in order.
    k : int
        Number of labels (>= 2).
    gamma : float
        Edge in ``(0, 1)``: the baseline ``u^r = (1-gamma)/k 1 + gamma e_r``.
    pessimistic : bool
        Tie convention of the zero-one loss: pessimistic (a tie is a loss), else random
        (``1 - 1/#tied`` when the truth is among the tied).
    truth : ndarray of shape (k,)
        ``iota_hat`` (bandit, eq. (5)) or ``e_y`` (full information). Columns of ``Gamma`` with a
        zero weight are not computed.
    memo : CostMemo, optional
        Rows of ``Gamma`` computed before for the same ``k``, N, ``gamma`` and tie rule; read and
        extended. The result is the same with or without it.

    Returns
    -------
    ndarray of shape (N, k)
        Row ``i`` is ``Gamma^{i+1} truth`` (0-based ``i``; ``N - 1 - i`` learners remain).

    Notes
    -----
    The first call for a (k, N) builds its tables (``k N^3 / 2`` operations: 0.2 s at k = 26,
    N = 150), kept for later calls (at most 8 pairs); the kernel releases the GIL.
    """
    weak = np.ascontiguousarray(weak, dtype=np.int64)
    truth = np.ascontiguousarray(truth, dtype=np.float64)
    return _cost_vectors(weak, int(k), truth, *cost_operands(k, weak.size, gamma, pessimistic, memo))


def cost_operands(
    k: int, n_learners: int, gamma: float, pessimistic: bool, memo: CostMemo | None
) -> tuple[Any, ...]:
    """The arguments of the compiled cost vectors after ``truth`` (:func:`_cost_vectors`; the
    ``costs`` of :func:`bbm_learn`): ``gamma``, the tie rule, the tables of (k, N) and the memo's
    arrays (empty without one; a memo must be of this ``k``, N, ``gamma`` and tie rule)."""
    top = max(int(n_learners), 1)
    arrays = _NO_MEMO
    if memo is not None:
        if memo.config != (int(k), top, float(gamma), bool(pessimistic)):
            raise ValueError(f"memo of {memo.config} used for {(k, top, gamma, pessimistic)}")
        arrays = (memo.keys, memo.diag, memo.off)
    return (float(gamma), bool(pessimistic), *_tables(int(k), top), *arrays)


@kernel(f"{LEARNED}({LEARN}, float64[:], int64, int64, boolean, int64[::1], {_COSTS})")
def bbm_learn(
    frame: tuple, probs: np.ndarray, label: int, greedy: int, reward: bool, weak: np.ndarray, costs: tuple
) -> tuple[int, int, int]:
    """BanditBBM's learn in one call (seed 001, Algorithm 2) with the unclicked rounds' labels of the
    reduction: ``iota = 1 - ell`` from the loss estimate (4) (``booster_kernels.loss_iota``), the
    cost vectors (9) (:func:`_cost_vectors` with ``costs``, :func:`cost_operands`), and the trees'
    update with the clicked label preferred (``booster_kernels.learn_forest`` on ``frame``,
    ``booster_kernels.LEARN``): the arithmetic of the calls it replaced, bit for bit. Returns
    ``booster_kernels.LEARNED``.
    """
    _, iota = loss_iota(probs, label, greedy, reward)
    C = _cost_vectors(weak, probs.size, iota, *costs)
    return learn_forest(frame, C, label if reward else -1, np.empty(0, np.int64))


def bbm_gamma_matrix(
    n: int, s: np.ndarray, gamma: float, pessimistic: bool, n_learners: int | None = None
) -> np.ndarray:
    """The cost matrix (9) of one state: ``Gamma[l, r] = phi^r_n(s + e_l)``, exactly.

    Equals :func:`service.learners.booster_costs.bbm_cost_matrix` (``rng=None``) to 1e-12 per
    entry, for the callers that need the whole matrix (OnlineMBBM's decision, ``Gamma @ pi``). Its
    entries are bit for bit those :func:`bbm_cost_vectors` uses for the same state and N.

    Parameters
    ----------
    n : int
        Learners still to vote (``0 <= n < n_learners``).
    s : ndarray of shape (k,), int
        Votes so far.
    gamma, pessimistic
        As in :func:`bbm_cost_vectors`.
    n_learners : int, optional
        N, which fixes the tables (and so the last bits: pass the booster's N so that every call
        of a booster uses the same arithmetic); default ``n + 1``.
    """
    s = np.ascontiguousarray(s, dtype=np.int64)
    top = int(n_learners) if n_learners is not None else int(n) + 1
    if not 0 <= n < top:
        raise ValueError(f"need 0 <= n < n_learners, got n={n}, n_learners={top}")
    return _gamma_matrix(int(n), s, float(gamma), bool(pessimistic), *_tables(int(s.size), top))
