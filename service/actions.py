"""Action-feature input (issue 39): a context and a list of candidate actions, each with features.

A model with ``"actions": "features"`` (:class:`service.config.ModelSpec`) scores candidates that
arrive with each request instead of a fixed set of K labels, as Vowpal Wabbit's ``--cb_explore_adf``
and Personalizer's ``actions: [{id, features}]`` do. A request's input is an :class:`ActionInput`:
the hashed context (a :class:`~service.features.SparseVector`, named features as for a hashed label
model), each candidate's hashed features (hashed the same way, by a featuriser of their own) and the
candidates' ids.

**Rows.** Each candidate ``a`` gets one sparse row of dimension ``2**b``: every product of an entry
of the context augmented with a constant 1 and an entry of the action augmented with a constant 1,

    row_a = sum_{i in c+1, j in a+1} c_i a_j e_{h(i, j)},

so the row holds the constant (1 x 1), the context's own features (c x 1: a reward level per
context), the action's own features (1 x a: how good an item is on its own) and the context x
action products (as VW's ``-q`` between its shared and action namespaces). A learner may ask for
the rows without the context-only block (``cova-adf`` does: it moves every score alike). ``h``
hashes the pair of bucket ids (SplitMix64's finaliser, :func:`service.interactions._mix`) into
``2**b`` columns;
colliding products add up. Deterministic, so every replica
builds the same rows; a learner keeps one weight vector over them (ours: VW's ADF learners keep one
regressor over every action's features the same way).

**What a decision record keeps** (:meth:`ActionFeaturiser.pack`): the context's and each action's
non-zero buckets and values and the ids' UTF-8 bytes, in one flat float64 array, so the stores, the
decision log and replication carry it as any other ``x`` (``service.store.codec`` is untouched).
The rows are rebuilt from it bit for bit (:meth:`ActionFeaturiser.unpack`), which is cheaper to keep
than the rows: ``nc + sum na`` entries against ``sum (nc + 1)(na + 1)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from service._jit_cache import kernel
from service.features import CACHE_BYTES, FeatureError, FeatureValue, Featuriser, SparseVector
from service.interactions import _mix

__all__ = [
    "MAX_ACTION_ID",
    "MAX_ROW_ENTRIES",
    "ActionFeaturiser",
    "ActionInput",
    "action_rows",
    "pair_entries",
    "row_scores",
]

#: Longest action id, in characters (Personalizer's action ids allow 256).
MAX_ACTION_ID = 256
#: Most row entries (products) one request may build: ``sum_a (nc + 1)(na + 1)`` over its candidates.
#: 10 candidates of 10 features with 30 context features are 3,410; this bound (a few ms of work)
#: keeps one request's and one event's work on the event loop small whatever the limits on counts.
MAX_ROW_ENTRIES = 200_000


_ROWS = "Tuple((int64[::1], int64[::1], float64[::1]))"


#: High bit of a context pair's id: pair ids never equal the ids ``0 .. 2**b`` of single entries.
_PAIR_TAG = np.uint64(1) << np.uint64(63)


def pair_entries(nc: int, a_ptr: np.ndarray, context_block: bool) -> int:
    """Row entries the context pairs add to a request: ``nc (nc - 1) / 2`` pairs times each
    candidate's action entries (plus the constant with the context block)."""
    pairs = nc * (nc - 1) // 2
    n = a_ptr.size - 1
    return pairs * (int(a_ptr[-1] - a_ptr[0]) + (n if context_block else 0))


@kernel(f"{_ROWS}(int64[:], float64[:], int64[:], int64[:], float64[:], int64, boolean, boolean)")
def action_rows(
    c_idx: np.ndarray,
    c_val: np.ndarray,
    a_ptr: np.ndarray,
    a_idx: np.ndarray,
    a_val: np.ndarray,
    bits: int,
    context_block: bool,
    pairs: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of the candidates (CSR: ``indptr``, ``idx``, ``val``) from the context ``(c_idx,
    c_val)`` and the actions' entries ``a_idx[a_ptr[a]:a_ptr[a + 1]]`` (each strictly increasing).

    Row ``a``: for every ``i`` in the context's buckets plus the constant (id 0; bucket ``c`` is id
    ``c + 1``) and every ``j`` in the action's plus the constant, the product of their values at
    column ``mix(i (2**b + 1) + j) mod 2**b``; in order of first appearance, collisions added (in loop
    order), zeros dropped.
    Without ``context_block`` the context-only products (``c x 1``, the same in every row) are left out.
    With ``pairs``, also every product of a context pair and an action entry (ours, issue 39: the label
    C-OVA's pairs ``x_i x_j`` of :mod:`service.interactions`, per action): for context ids ``i < j``
    the pair's id ``q = mix(i (2**b + 1) + j) | 2**63`` and, for every action id ``k`` (and the
    constant, with ``context_block``), the value ``c_i c_j a_k`` at column ``mix(q (2**b + 1) + k) mod
    2**b`` (64-bit arithmetic, wrapping), after the products above, pairs in row-major order.
    """
    n = a_ptr.size - 1
    nc = c_idx.size
    m = np.uint64((1 << bits) + 1)
    mask = np.uint64((1 << bits) - 1)
    n_pairs = nc * (nc - 1) // 2 if pairs else 0
    indptr = np.zeros(n + 1, np.int64)
    total = 0
    longest = 1
    for a in range(n):
        na = a_ptr[a + 1] - a_ptr[a]
        size = (nc + 1) * (na + 1) + n_pairs * (na + 1 if context_block else na)
        total += size
        longest = max(longest, size)
    out_i = np.empty(total, np.int64)
    out_v = np.empty(total, np.float64)
    # Colliding columns merge through an open-addressing table (a tenth of a sort's cost per row):
    # slot -> position in the output, valid while its stamp is the current row's.
    slots = 1
    while slots < 2 * longest:
        slots *= 2
    where = np.empty(slots, np.int64)
    stamp = np.full(slots, -1, np.int64)
    smask = np.uint64(slots - 1)
    t = 0
    p = q = 0
    for a in range(n):
        start = t
        lo, hi = a_ptr[a], a_ptr[a + 1]
        for ci in range(nc + 1 + n_pairs):
            if ci <= nc:
                i_id = np.uint64(0) if ci == 0 else np.uint64(c_idx[ci - 1] + 1)
                cv = 1.0 if ci == 0 else c_val[ci - 1]
                first = lo - 1 if ci == 0 or context_block else lo
            else:
                if ci == nc + 1:
                    p, q = 0, 1  # the pair (p, q), p < q, walked in row-major order
                else:
                    q += 1
                    if q == nc:
                        p += 1
                        q = p + 1
                i_id = _mix(np.uint64(c_idx[p] + 1) * m + np.uint64(c_idx[q] + 1)) | _PAIR_TAG
                cv = c_val[p] * c_val[q]
                first = lo - 1 if context_block else lo
            for aj in range(first, hi):
                j_id = np.uint64(0) if aj < lo else np.uint64(a_idx[aj] + 1)
                av = 1.0 if aj < lo else a_val[aj]
                h = _mix(i_id * m + j_id)
                col = np.int64(h & mask)
                s = np.int64((h >> np.uint64(40)) & smask)
                while stamp[s] == a and out_i[where[s]] != col:
                    s = (s + 1) & np.int64(smask)
                if stamp[s] == a:
                    out_v[where[s]] += cv * av
                else:
                    stamp[s] = a
                    where[s] = t
                    out_i[t] = col
                    out_v[t] = cv * av
                    t += 1
        kept = start  # zero sums dropped, in place
        for u in range(start, t):
            if out_v[u] != 0.0:
                out_i[kept] = out_i[u]
                out_v[kept] = out_v[u]
                kept += 1
        indptr[a + 1] = kept
        t = kept
    return indptr, out_i[: indptr[n]].copy(), out_v[: indptr[n]].copy()


@kernel("float64[::1](float64[::1], int64[:], int64[:], float64[:])")
def row_scores(w: np.ndarray, indptr: np.ndarray, idx: np.ndarray, val: np.ndarray) -> np.ndarray:
    """``<w, row_a>`` of every row, each summed in index order."""
    n = indptr.size - 1
    out = np.zeros(n)
    for a in range(n):
        s = 0.0
        for t in range(indptr[a], indptr[a + 1]):
            s += w[idx[t]] * val[t]
        out[a] = s
    return out


class ActionInput:
    """One request's context and candidates, as an action-feature learner takes it.

    Read-only by contract, as :class:`~service.features.SparseVector`. The rows are built once, when
    first asked for (a decision scores them all; a learn rebuilt from a record needs one).

    Attributes
    ----------
    ids : list of str
        The candidates' ids, in request order (a decision's label is an index into it).
    context : SparseVector
        The hashed context.
    a_ptr, a_idx, a_val : ndarray
        The candidates' hashed features (CSR: candidate ``a``'s entries are
        ``a_idx[a_ptr[a]:a_ptr[a + 1]]``, strictly increasing buckets).
    bits : int
        ``b``: the rows have ``2**b`` columns.
    """

    __slots__ = ("_kind", "_rows", "a_idx", "a_ptr", "a_val", "bits", "context", "ids")

    def __init__(
        self,
        ids: list[str],
        context: SparseVector,
        a_ptr: np.ndarray,
        a_idx: np.ndarray,
        a_val: np.ndarray,
        bits: int,
    ) -> None:
        self.ids = ids
        self.context = context
        self.a_ptr, self.a_idx, self.a_val = a_ptr, a_idx, a_val
        self.bits = bits
        self._rows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._kind = (True, False)

    @property
    def n(self) -> int:
        """Number of candidates."""
        return len(self.ids)

    @property
    def dim(self) -> int:
        """Columns of a row, ``2**bits``."""
        return 1 << self.bits

    def pairs(self, context_pairs: int, context_block: bool = True) -> bool:
        """Whether the rows get the context pairs (:func:`action_rows`) for a learner whose bound is
        ``context_pairs``: the context has 2 to ``context_pairs`` non-zeros and the request's rows,
        pairs included, stay within :data:`MAX_ROW_ENTRIES` (so a learner's ``event_steps`` holds).
        Decided on the whole request, so every candidate's row is built alike, alone or together."""
        nc = self.context.nnz
        if not 2 <= nc <= context_pairs:
            return False
        base = int(np.sum((nc + 1) * (np.diff(self.a_ptr) + 1)))
        return base + pair_entries(nc, self.a_ptr, context_block) <= MAX_ROW_ENTRIES

    def rows(
        self, context_block: bool = True, context_pairs: int = 0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every candidate's row (:func:`action_rows`), as CSR ``(indptr, idx, val)``; with or without
        the context-only block, with the context pairs when :meth:`pairs` says so for
        ``context_pairs`` (kept for the last kind asked for: a learner asks for one kind)."""
        kind = (context_block, self.pairs(context_pairs, context_block))
        if self._rows is None or self._kind != kind:
            self._rows = action_rows(
                self.context.idx,
                self.context.val,
                self.a_ptr,
                self.a_idx,
                self.a_val,
                self.bits,
                *kind,
            )
            self._kind = kind
        return self._rows

    def row(
        self, a: int, context_block: bool = True, context_pairs: int = 0
    ) -> tuple[np.ndarray, np.ndarray]:
        """Candidate ``a``'s row alone (``idx``, ``val``); built alone when the rows are not."""
        kind = (context_block, self.pairs(context_pairs, context_block))
        if self._rows is not None and self._kind == kind:
            indptr, idx, val = self._rows
            return idx[indptr[a] : indptr[a + 1]], val[indptr[a] : indptr[a + 1]]
        lo, hi = self.a_ptr[a], self.a_ptr[a + 1]
        ptr = np.array([0, hi - lo], dtype=np.int64)
        _, idx, val = action_rows(
            self.context.idx,
            self.context.val,
            ptr,
            self.a_idx[lo:hi],
            self.a_val[lo:hi],
            self.bits,
            *kind,
        )
        return idx, val

    def features(self, a: int) -> SparseVector:
        """Candidate ``a``'s hashed features."""
        lo, hi = self.a_ptr[a], self.a_ptr[a + 1]
        return SparseVector(self.a_idx[lo:hi], self.a_val[lo:hi], self.dim)

    def alone(self, a: int) -> ActionInput:
        """Candidate ``a`` as the one candidate of a request with the same context (a catalog
        page's slot learns its shown item so: :func:`service.pages.learn_slot`)."""
        lo, hi = int(self.a_ptr[a]), int(self.a_ptr[a + 1])
        ptr = np.array([0, hi - lo], dtype=np.int64)
        return ActionInput([self.ids[a]], self.context, ptr, self.a_idx[lo:hi], self.a_val[lo:hi], self.bits)


class ActionFeaturiser:
    """Turns a request's context and candidate actions into an :class:`ActionInput` for one model.

    Parameters
    ----------
    hashing_bits : int
        ``b``: contexts, actions and rows hash into ``2**b`` buckets.
    max_named : int
        Most named features of the context, and of each action.
    max_actions : int
        Most candidates a request may carry (``CLICKBOOST_MAX_ACTIONS``).
    """

    def __init__(self, hashing_bits: int, max_named: int, max_actions: int) -> None:
        self.hashing_bits = hashing_bits
        self.dim = 1 << hashing_bits
        self.max_actions = max_actions
        # The two caches share one model's budget of CACHE_BYTES (service.features).
        self.context = Featuriser(None, hashing_bits, max_named, CACHE_BYTES // 2)
        self.action = Featuriser(None, hashing_bits, max_named, CACHE_BYTES // 2)

    def __call__(
        self, features: Sequence[float] | Mapping[str, FeatureValue], actions: Sequence[Any] | None = None
    ) -> ActionInput:
        """The input of the context ``features`` and the candidate ``actions`` (``{"id": str,
        "features": {name: value}}`` each); :class:`FeatureError` (422) naming what does not fit."""
        if actions is None:
            raise FeatureError(
                "actions: this model scores candidate actions: "
                'send "actions": [{"id": ..., "features": {...}}]'
            )
        if not isinstance(features, Mapping):
            raise FeatureError("features: an action model takes named context features {name: value}")
        n = len(actions)
        if n == 0:
            raise FeatureError("actions: give at least one candidate action")
        if n > self.max_actions:
            raise FeatureError(
                f"actions: {n} candidates, at most {self.max_actions} allowed (CLICKBOOST_MAX_ACTIONS)"
            )
        context = self.context(features)
        ids: list[str] = []
        seen: set[str] = set()
        idx_parts, val_parts = [], []
        a_ptr = np.zeros(n + 1, dtype=np.int64)
        entries = 0
        for a, action in enumerate(actions):
            action_id, named = _action_fields(action, a)
            if action_id in seen:
                raise FeatureError(
                    f"actions.{a}.id: {action_id!r} is given twice (action ids must be distinct)"
                )
            seen.add(action_id)
            ids.append(action_id)
            try:
                v = self.action(named)
            except FeatureError as exc:
                raise FeatureError(f"actions.{a}.{exc}") from None
            idx_parts.append(v.idx)
            val_parts.append(v.val)
            a_ptr[a + 1] = a_ptr[a] + v.nnz
            entries += (context.nnz + 1) * (v.nnz + 1)
        if entries > MAX_ROW_ENTRIES:
            raise FeatureError(
                f"actions: {n} candidates with {context.nnz} context features make {entries:,} interaction "
                f"entries, at most {MAX_ROW_ENTRIES:,} per request (send fewer candidates or features)"
            )
        a_idx = np.concatenate(idx_parts) if n > 1 else idx_parts[0]
        a_val = np.concatenate(val_parts) if n > 1 else val_parts[0]
        return ActionInput(ids, context, a_ptr, a_idx.astype(np.int64, copy=False), a_val, self.hashing_bits)

    def pack(self, x: ActionInput) -> np.ndarray:
        """What a decision record keeps of ``x``: one flat float64 array,
        ``[n, nc, na_0..na_{n-1}, len_0..len_{n-1}, c_idx, c_val, a_idx, a_val, id bytes]`` (``len``:
        each id's UTF-8 length; every byte one value). Every number is exact in float64."""
        raw = [i.encode() for i in x.ids]
        nc = x.context.nnz
        head = np.array([x.n, nc, *np.diff(x.a_ptr).tolist(), *(len(r) for r in raw)], dtype=np.float64)
        id_bytes = np.frombuffer(b"".join(raw), dtype=np.uint8).astype(np.float64)
        return np.concatenate(
            (
                head,
                x.context.idx.astype(np.float64),
                x.context.val,
                x.a_idx.astype(np.float64),
                x.a_val,
                id_bytes,
            )
        )

    def unpack(self, stored: np.ndarray) -> ActionInput:
        """Inverse of :meth:`pack`: the input ``decide`` saw, bit for bit."""
        return unpack_actions(stored, self.hashing_bits)


def unpack_actions(stored: np.ndarray, bits: int) -> ActionInput:
    """:meth:`ActionFeaturiser.unpack` without a featuriser (the decision log, OPE, the export)."""
    n, nc = int(stored[0]), int(stored[1])
    na = stored[2 : 2 + n].astype(np.int64)
    lens = stored[2 + n : 2 + 2 * n].astype(np.int64)
    at = 2 + 2 * n
    c_idx = stored[at : at + nc].astype(np.int64)
    c_val = stored[at + nc : at + 2 * nc].copy()
    at += 2 * nc
    total = int(na.sum())
    a_idx = stored[at : at + total].astype(np.int64)
    a_val = stored[at + total : at + 2 * total].copy()
    at += 2 * total
    raw = stored[at : at + int(lens.sum())].astype(np.uint8).tobytes()
    ids, pos = [], 0
    for length in lens.tolist():
        ids.append(raw[pos : pos + length].decode())
        pos += length
    a_ptr = np.concatenate(([0], np.cumsum(na))).astype(np.int64)
    return ActionInput(ids, SparseVector(c_idx, c_val, 1 << bits), a_ptr, a_idx, a_val, bits)


def _action_fields(action: Any, a: int) -> tuple[str, Mapping[str, FeatureValue]]:
    """The id and the named features of candidate ``a`` (a mapping or an object with ``id`` and
    ``features``); :class:`FeatureError` naming what is wrong."""
    if isinstance(action, Mapping):
        action_id, named = action.get("id"), action.get("features", {})
    else:
        action_id, named = getattr(action, "id", None), getattr(action, "features", None)
    if not isinstance(action_id, str) or not 1 <= len(action_id) <= MAX_ACTION_ID:
        raise FeatureError(f"actions.{a}.id: a string of 1 to {MAX_ACTION_ID} characters is required")
    if named is None:
        named = {}
    if not isinstance(named, Mapping):
        raise FeatureError(f"actions.{a}.features: an object {{name: value}} is required")
    return action_id, named
