"""A catalog of items kept on the server for one action-feature model (issue 54): registered once,
hashed once, scored for a context in one compiled call.

An action-feature model (:mod:`service.actions`) scores the candidates a request carries; every
request parses and hashes the same items again. A :class:`Catalog` holds them instead: an item is
registered once with its named features (as a candidate's ``features``), an ``active`` flag and an
optional ``expires_at``, and is hashed then, by a featuriser that hashes exactly as
:class:`service.actions.ActionFeaturiser`'s action featuriser does (same buckets, values and order),
so weights learned from candidates sent with features score catalog items and the reverse.

**Layout** (arrays, one row per slot; a slot is an item's place, kept while it lives):

- ``start``, ``count``: the item's entries ``voc[start:start + count]``, ``val[...]`` (CSR without
  a pointer array, so a replaced item's new entries go to the pool's end and its old ones become a
  hole); ``voc`` is an int32 index into the **vocabulary**, the distinct buckets the items use
  (``bucket``, with ``col0`` the column of the constant x bucket product, which does not depend on
  the context), so a bucket shared by many items (``category=shoes``, a numeric ``price``) is
  projected on the context once per request, not once per item (:func:`catalog_scores`);
- ``active``, ``expires`` (``inf``: never) and ``alive`` per slot; the ids in a list and a dict;
- for each categorical feature name (string and boolean values), an int32 code per slot (-1: the
  item has none) and the values, for filters (:meth:`Catalog.select_all`).

Holes are reclaimed by :meth:`Catalog._compact` when they outnumber what lives (deterministic: a
function of the operations applied). The compact layout is the canonical state: :meth:`to_bytes`
writes it (:func:`service.serial.encode`), so replicas that applied the same operations, or loaded
the same bytes, hold the same items in the same order and score them alike bit for bit.

**Order.** The whole catalog is selected in slot order, which is registration order (a replaced
item keeps its place): a decision's tie-breaking and sampling read candidates in that order.

**History** (issue 54, item 5; :mod:`service.catalog_history`). Each slot also keeps its item's
sequence number (its place in the order) and the version its row came in with, and the catalog
keeps the rows it retires (replaced, removed, expired) with the versions they lived in, so that the
catalog at an earlier version, hence a logged decision's candidates, can be rebuilt
(:mod:`service.catalog_replay`). Both are part of the canonical state.

Memory per item: :meth:`Catalog.nbytes` for a budget, and ``python -m service lab bench catalog``
(tracemalloc of a 100,000-item registration beside it); per retired row: ``bench catalog-history``.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from service import serial
from service._jit_cache import kernel
from service.actions import ActionInput
from service.catalog_history import History, Rows, row_bytes
from service.catalog_items import CATEGORICAL, CatalogError, HashedItems, hash_items
from service.features import FeatureValue, Featuriser, SparseVector
from service.interactions import _mix

__all__ = [
    "Catalog",
    "CatalogError",
    "HashedItems",
    "added_bytes",
    "catalog_scores",
    "context_side",
    "describe",
]

#: Format of :meth:`Catalog.to_bytes`.
FORMAT = 1
#: Holes tolerated beyond what lives before a compaction (slots, entries, vocabulary): small
#: catalogs never compact, large ones when half of a pool is holes.
SLACK = 1024
#: A Python int beyond the small ones, as a dictionary keeps a bucket (``sys.getsizeof(2**40)``).
_INT_BYTES = 32
#: A dictionary entry (key and value pointers, hash, index; ``sys.getsizeof`` of a dictionary of
#: 100,000 ids over their number, between resizes 26 to 38 bytes).
_ENTRY_BYTES = 40
_PAIR_TAG = np.uint64(1) << np.uint64(63)  # service.actions' tag of a context pair's id


@kernel("int64[::1](int64[::1], int64)")
def _constant_columns(bucket: np.ndarray, bits: int) -> np.ndarray:
    """Column of the constant x bucket product of each bucket among ``2**bits``
    (:func:`service.actions.action_rows`: the pair of ids ``(0, bucket + 1)``)."""
    mask = np.uint64((1 << bits) - 1)
    out = np.empty(bucket.size, np.int64)
    for v in range(bucket.size):
        out[v] = np.int64(_mix(np.uint64(bucket[v] + 1)) & mask)
    return out


@kernel("Tuple((uint64[::1], float64[::1]))(int64[:], float64[:], int64, boolean)")
def context_side(
    c_idx: np.ndarray, c_val: np.ndarray, bits: int, pairs: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The context's ids and values as :func:`service.actions.action_rows` pairs them with an
    action's: the context's buckets (id ``c + 1``) and, with ``pairs``, every context pair ``p < q``
    in row-major order, id ``mix((c_p + 1)(2**b + 1) + c_q + 1) | 2**63``, value ``c_p c_q``. The
    constant (id 0) is not in it (:func:`catalog_scores` adds it)."""
    nc = c_idx.size
    n = nc + (nc * (nc - 1) // 2 if pairs else 0)
    ids = np.empty(n, np.uint64)
    vals = np.empty(n)
    m = np.uint64((1 << bits) + 1)
    for i in range(nc):
        ids[i] = np.uint64(c_idx[i] + 1)
        vals[i] = c_val[i]
    t = nc
    if pairs:
        for p in range(nc):
            for q in range(p + 1, nc):
                ids[t] = _mix(np.uint64(c_idx[p] + 1) * m + np.uint64(c_idx[q] + 1)) | _PAIR_TAG
                vals[t] = c_val[p] * c_val[q]
                t += 1
    return ids, vals


@kernel(
    "float64[::1](float64[::1], uint64[::1], float64[::1], int64[::1], int64[::1], int64[::1], int32[::1],"
    " float64[::1], int64[::1], int64[::1], int64[::1], int64)"
)
def catalog_scores(
    w: np.ndarray,
    ctx_id: np.ndarray,
    ctx_val: np.ndarray,
    slots: np.ndarray,
    start: np.ndarray,
    count: np.ndarray,
    voc: np.ndarray,
    val: np.ndarray,
    bucket: np.ndarray,
    col0: np.ndarray,
    refs: np.ndarray,
    bits: int,
) -> np.ndarray:
    """``<w, row_a>`` of every item ``a`` of ``slots``, ``row_a`` the row :func:`service.actions.action_rows`
    builds for the context ``(ctx_id, ctx_val)`` (:func:`context_side`) and the item's entries, with
    the context-only block (as ``squarecb-adf`` scores).

    The row is ``sum_{i in c+1, j in a+1} c_i a_j e_{h(i, j)}``, so its score factors by the action's
    entries (ours, issue 54):

        <w, row_a> = u_1 + sum_{j in a} a_j u_j,   u_j = w[h(0, j)] + sum_{i in c} c_i w[h(i, j)],

    ``u_1`` the constant's (``j`` = 0). ``u_j`` depends on the context and the bucket only: it is
    computed once per call for every bucket the selected items use (``refs``: how many entries
    use each bucket), and an item then costs one product per entry, not ``(nc + 1)(na + 1)`` hashed
    products. ``h(0, j)`` is
    ``col0`` (computed at registration). Columns as in ``action_rows``: ``mix(i (2**b + 1) + j) mod
    2**b`` with ids ``bucket + 1``.

    **Rounding.** The real number is ``row_scores``' exactly (a colliding column's merged value
    ``w (v + v')`` is ``w v + w v'``; a dropped zero adds nothing), only the order of the sums
    differs. Both are sums of the ``n = (nc' + 1)(na + 1)`` products ``w c_i a_j`` (``nc'``: context
    entries, pairs included) with at most ``n + 2`` roundings on any term's path, so each is within
    ``gamma_{n+2} B`` of it (Higham 2002, eq. 3.5 and Lemma 3.3; ``gamma_k = k u / (1 - k u)``,
    ``u = 2**-53``, ``B = sum |w c_i a_j|``): they differ by at most ``2 gamma_{n+2} B``
    (``tests/service/test_catalog.py`` checks it against ``row_scores``).
    """
    m = np.uint64((1 << bits) + 1)
    mask = np.uint64((1 << bits) - 1)
    nc = ctx_id.size
    base = np.empty(nc, np.uint64)
    for i in range(nc):
        base[i] = ctx_id[i] * m
    u1 = w[0]  # (0, 0) hashes to column 0
    for i in range(nc):
        u1 += ctx_val[i] * w[np.int64(_mix(base[i]) & mask)]
    # The buckets the selected items use (every bucket a live item uses when the selection has as
    # many entries: cheaper than marking them), then their projections, context entry by context
    # entry (independent reads of w, which the processor overlaps), then one product per entry.
    entries = 0
    for a in range(slots.size):
        entries += count[slots[a]]
    if entries >= bucket.size:
        used = refs > 0
    else:
        used = np.zeros(bucket.size, np.bool_)
        for a in range(slots.size):
            s = slots[a]
            for e in range(start[s], start[s] + count[s]):
                used[voc[e]] = True
    which = np.flatnonzero(used)
    u = np.zeros(bucket.size)
    for v in which:
        u[v] = w[col0[v]]
    for i in range(nc):
        b, c = base[i], ctx_val[i]
        for v in which:
            u[v] += c * w[np.int64(_mix(b + np.uint64(bucket[v] + 1)) & mask)]
    out = np.empty(slots.size)
    for a in range(slots.size):
        s = slots[a]
        acc = u1
        for e in range(start[s], start[s] + count[s]):
            acc += val[e] * u[voc[e]]
        out[a] = acc
    return out


def _grow(arr: np.ndarray, need: int, fill: Any = 0) -> np.ndarray:
    """``arr`` with room for ``need`` rows (doubling), new rows set to ``fill``."""
    if need <= arr.shape[-1]:
        return arr
    size = max(need, 2 * arr.shape[-1], 16)
    out = np.full((*arr.shape[:-1], size), fill, dtype=arr.dtype)
    out[..., : arr.shape[-1]] = arr
    return out


class Catalog:
    """The items of one action-feature model, hashed once (module docstring).

    Parameters
    ----------
    hashing_bits : int
        ``b`` of the model: items hash into ``2**b`` buckets, as its candidates do.
    max_named : int, default 1000
        Most named features of an item (the model's ``CLICKBOOST_MAX_NAMED_FEATURES``).

    Not safe across threads: the kernels release the GIL and read the arrays a mutation writes in
    place (a replaced item's ``start`` and ``count``), so a caller mutates and scores on one thread,
    or scores a copy (:meth:`from_bytes`) while another one changes.

    Attributes
    ----------
    version : int
        Mutating calls applied (:meth:`put`, :meth:`put_many`, :meth:`remove`, :meth:`expire`),
        kept through :meth:`to_bytes`.
    """

    def __init__(self, hashing_bits: int, max_named: int = 1000) -> None:
        self.hashing_bits = hashing_bits
        self.max_named = max_named
        # Hashes exactly as ActionFeaturiser.action (the cache changes nothing computed)
        self._featuriser = Featuriser(None, hashing_bits, max_named)
        self.version = 0
        self._reset()

    def _reset(self) -> None:
        self._ids: list[str | None] = []
        self._id_bytes = 0  # sys.getsizeof of the live ids
        self._slot: dict[str, int] = {}
        self._n = 0  # slots used (live and dead)
        self._alive = np.zeros(0, np.bool_)
        self._active = np.zeros(0, np.bool_)
        self._expires = np.zeros(0)
        self._start = np.zeros(0, np.int64)
        self._count = np.zeros(0, np.int64)
        self._voc = np.zeros(0, np.int32)
        self._val = np.zeros(0)
        self._n_entries = 0  # entries used (live and holes)
        self._live = 0  # entries of registered items
        self._bucket = np.zeros(0, np.int64)
        self._col0 = np.zeros(0, np.int64)
        self._refs = np.zeros(0, np.int64)
        self._voc_of: dict[int, int] = {}
        self._cat_names: list[str] = []
        self._cat_index: dict[str, int] = {}
        self._cat_codes = np.zeros((0, 0), np.int32)  # name x slot
        self._cat_values: list[list[str | bool]] = []
        self._cat_code_of: list[dict[tuple[type, str | bool], int]] = []
        # Row versions (service.catalog_history): each slot's place in the order and the version its
        # row came in with; the rows retired, for decisions made at an earlier version.
        self._seq, self._since, self._next_seq = np.zeros(0, np.int64), np.zeros(0, np.int64), 0
        self.history = History()

    # -- size ------------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Items registered (active or not)."""
        return len(self._slot)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._slot

    @property
    def entries(self) -> int:
        """Hashed entries of the registered items (holes not counted)."""
        return self._live

    def array_bytes(self) -> int:
        """Bytes of the arrays, capacity included."""
        arrays = (
            self._alive, self._active, self._expires, self._start, self._count, self._voc, self._val,
            self._bucket, self._col0, self._refs, self._cat_codes, self._seq, self._since,
        )  # fmt: skip
        return int(sum(a.nbytes for a in arrays))

    def nbytes(self) -> int:
        """What the catalog holds, for a memory budget: the arrays, the ids' strings (kept count of)
        and the containers indexing ids and buckets (``sys.getsizeof``, O(1)), each bucket's int
        key counted at :data:`_INT_BYTES`, and the retired rows (:meth:`History.nbytes`). The
        categorical values and the featuriser's cache (its own bound) are left out. ``bench catalog``
        compares it with tracemalloc's count."""
        return (
            self.array_bytes()
            + self.history.nbytes()
            + self._id_bytes
            + sys.getsizeof(self._ids)
            + sys.getsizeof(self._slot)
            + sys.getsizeof(self._voc_of)
            + _INT_BYTES * len(self._voc_of)
        )

    # -- registration ----------------------------------------------------------------------------

    def put(
        self,
        item_id: str,
        features: Mapping[str, FeatureValue],
        active: bool = True,
        expires_at: float | None = None,
    ) -> bool:
        """Register item ``item_id`` (or replace it, keeping its place); whether it was replaced.
        :class:`CatalogError` naming what does not fit, and then nothing changed."""
        return bool(
            self.put_many([{"id": item_id, "features": features, "active": active, "expires_at": expires_at}])
        )

    def put_many(self, items: Iterable[Mapping[str, Any]]) -> int:
        """Register or replace every item of ``items`` (``{"id", "features", "active"?,
        "expires_at"?}`` each), in order, as one change; how many replaced one already there.

        All or nothing: every item is checked and hashed first (:meth:`hash_items`), and a
        :class:`CatalogError` naming ``items.{i}`` leaves the catalog as it was. An id given twice
        is refused.
        """
        return self.insert(self.hash_items(items))

    def hash_items(self, items: Iterable[Mapping[str, Any]]) -> HashedItems:
        """``items`` checked and hashed (:class:`HashedItems`), the catalog unchanged: what
        :meth:`insert` takes, here or on another replica. :class:`CatalogError` naming ``items.{i}``."""
        return hash_items(self._featuriser, items)

    def insert(self, items: HashedItems) -> int:
        """Register or replace the hashed ``items`` in order, as one change (as :meth:`put_many`
        would have); how many replaced one already there (their rows retired into the history).
        Never fails on items :meth:`hash_items` gave."""
        ids = items.ids
        if not ids:
            return 0
        counts, buckets = items.counts, items.buckets
        voc = self._vocabulary(buckets)
        # Vectorised over the items (a follower applies 5,000 an event on its event loop): the
        # replaced ones' entries released, the new ones' slots made in order, then the rows set.
        slots = np.fromiter((self._slot.get(i, -1) for i in ids), np.int64, len(ids))
        old = slots >= 0
        replaced = int(old.sum())
        if replaced:  # released first, so a replaced item's vocabulary refs stay counted
            self.history.add(rows_of(self, slots[old]), self.version + 1)
            self._release_entries(slots[old])
        self._new_slots([i for i, s in zip(ids, slots.tolist(), strict=True) if s < 0])
        slots[~old] = np.arange(self._n - (len(ids) - replaced), self._n)
        at = self._n_entries
        self._n_entries += int(buckets.size)
        self._voc = _grow(self._voc, self._n_entries)
        self._val = _grow(self._val, self._n_entries)
        self._voc[at : self._n_entries] = voc
        self._val[at : self._n_entries] = items.values
        np.add.at(self._refs, voc, 1)
        self._live += int(buckets.size)
        self._start[slots] = at + np.concatenate(([0], np.cumsum(counts)[:-1]))
        self._count[slots] = counts
        self._active[slots], self._expires[slots] = items.active, items.expires
        self._since[slots] = self.version + 1
        _categorise(self, slots, items.categorical)
        self.version += 1
        self._maybe_compact()
        return replaced

    def remove(self, item_id: str) -> None:
        """Remove item ``item_id``; :class:`CatalogError` if it is not registered."""
        if item_id not in self._slot:
            raise CatalogError(f"item {item_id!r} is not in the catalog")
        self.discard([item_id])

    def discard(self, ids: Iterable[str]) -> list[str]:
        """Remove those of ``ids`` that are registered (one change, if any); their ids. An id not
        there is passed over: a removal applied from a log, where an earlier one may have taken it."""
        return self._retire([s for i in dict.fromkeys(ids) if (s := self._slot.get(i)) is not None])

    def expire(self, now: float) -> list[str]:
        """Remove the items whose ``expires_at`` is at or before ``now`` (one change, if any); their ids."""
        n = self._n
        return self._retire(np.flatnonzero(self._alive[:n] & (self._expires[:n] <= now)).tolist())

    def due(self, now: float) -> bool:
        """Whether an item's ``expires_at`` is at or before ``now`` (:meth:`expire` would remove it)."""
        return bool((self._alive[: self._n] & (self._expires[: self._n] <= now)).any())

    def _retire(self, slots: list[int]) -> list[str]:
        """Remove the items of ``slots`` (one change, if any), their rows kept in the history."""
        if not slots:
            return []
        self.history.add(rows_of(self, np.asarray(slots, np.int64)), self.version + 1)
        gone = [self._ids[s] for s in slots]
        for s in slots:
            self._release(s, keep_slot=False)
        self.version += 1
        self._maybe_compact()
        return gone  # type: ignore[return-value]

    def _vocabulary(self, buckets: np.ndarray) -> np.ndarray:
        """Vocabulary indices of ``buckets``, new buckets appended (in order of first appearance)."""
        uniq, first, inverse = np.unique(buckets, return_index=True, return_inverse=True)
        codes = np.empty(uniq.size, np.int32)
        new = []
        for u, b in enumerate(uniq.tolist()):
            v = self._voc_of.get(b)
            if v is None:
                new.append(u)
            else:
                codes[u] = v
        if new:
            fresh = np.asarray(new)[np.argsort(first[new], kind="stable")]  # first appearance
            at = len(self._voc_of)
            n = at + fresh.size
            self._bucket = _grow(self._bucket, n)
            self._col0 = _grow(self._col0, n)
            self._refs = _grow(self._refs, n)
            added = uniq[fresh]
            self._bucket[at:n] = added
            self._col0[at:n] = _constant_columns(np.ascontiguousarray(added), self.hashing_bits)
            codes[fresh] = np.arange(at, n, dtype=np.int32)
            for v, b in zip(range(at, n), added.tolist(), strict=True):
                self._voc_of[b] = v
        return codes[inverse.reshape(-1)]

    def _new_slots(self, ids: list[str]) -> None:
        """Slots for the new items ``ids``, in order, at the end."""
        n0 = self._n
        self._n = n = n0 + len(ids)
        self._alive = _grow(self._alive, n)
        self._active = _grow(self._active, n)
        self._expires = _grow(self._expires, n, math.inf)
        self._start = _grow(self._start, n)
        self._count = _grow(self._count, n)
        self._cat_codes = _grow(self._cat_codes, n, -1)
        self._seq, self._since = _grow(self._seq, n), _grow(self._since, n)
        self._seq[n0:n] = np.arange(self._next_seq, self._next_seq + n - n0)
        self._next_seq += n - n0
        self._alive[n0:n] = True
        self._ids.extend(ids)
        self._id_bytes += sum(map(sys.getsizeof, ids))
        self._slot.update(zip(ids, range(n0, n), strict=True))

    def _release_entries(self, slots: np.ndarray) -> None:
        """Turn the entries of ``slots`` into holes (the slots stay: their items are replaced)."""
        counts = self._count[slots]
        take = np.repeat(self._start[slots] - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
        voc = self._voc[take + np.arange(int(counts.sum()))]
        np.add.at(self._refs, voc, -1)
        self._live -= voc.size
        self._count[slots] = 0
        self._cat_codes[:, slots] = -1

    def _release(self, slot: int, keep_slot: bool) -> None:
        """Turn ``slot``'s entries into a hole (and the slot too unless ``keep_slot``)."""
        lo = int(self._start[slot])
        voc = self._voc[lo : lo + int(self._count[slot])]
        np.add.at(self._refs, voc, -1)
        self._live -= voc.size
        self._count[slot] = 0
        self._cat_codes[:, slot] = -1
        if not keep_slot:
            self._alive[slot] = False
            self._active[slot] = False
            del self._slot[self._ids[slot]]  # type: ignore[arg-type]
            self._id_bytes -= sys.getsizeof(self._ids[slot])
            self._ids[slot] = None

    # -- compaction and serialisation ------------------------------------------------------------

    def _maybe_compact(self) -> None:
        # Unused vocabulary comes from released entries only, so the entries' rule bounds it too.
        live = len(self._slot)
        if self._n - live > live + SLACK or self._n_entries - self._live > self._live + 16 * SLACK:
            self._compact()

    def _compact(self) -> None:
        """Rebuild the arrays without holes: the canonical layout (:meth:`to_state`)."""
        version = self.version
        self._load(self.to_state())
        self.version = version

    def to_state(self) -> dict[str, Any]:
        """The canonical state (:func:`service.serial.encode` takes it): live items in slot order,
        their entries in that order, the vocabulary in order of first use, each categorical name's
        values in order of first use, without holes. Independent of the holes and capacities."""
        return _canonical_state(self)

    def _load(self, state: Mapping[str, Any]) -> None:
        """Take the arrays of a canonical state (:meth:`to_state`)."""
        _load_canonical(self, state)

    def to_bytes(self) -> bytes:
        """The canonical state's bytes (:func:`service.serial.encode`): the same items registered by
        the same operations give the same bytes, whatever holes either side had."""
        return serial.encode(self.to_state())

    @classmethod
    def from_bytes(cls, data: bytes, max_named: int = 1000) -> Catalog:
        """The catalog :meth:`to_bytes` wrote (compact; its :meth:`to_bytes` gives ``data`` back)."""
        state = serial.decode(data)
        out = cls(int(state["hashing_bits"]), max_named)
        out._load(state)
        return out

    # -- lookup ----------------------------------------------------------------------------------

    def select(self, ids: Sequence[str], now: float | None = None) -> np.ndarray:
        """The slots of the items ``ids``, in that order; :class:`CatalogError` naming
        ``candidates.{i}`` for an unknown, inactive or expired id or one given twice."""
        slots = np.empty(len(ids), np.int64)
        seen: set[str] = set()
        for i, item_id in enumerate(ids):
            slot = self._slot.get(item_id)
            if slot is None:
                raise CatalogError(f"candidates.{i}: item {item_id!r} is not in the catalog")
            if not self._active[slot]:
                raise CatalogError(f"candidates.{i}: item {item_id!r} is inactive")
            if now is not None and self._expires[slot] <= now:
                raise CatalogError(f"candidates.{i}: item {item_id!r} expired")
            if item_id in seen:
                raise CatalogError(f"candidates.{i}: item {item_id!r} is given twice")
            seen.add(item_id)
            slots[i] = slot
        return slots

    def select_all(
        self,
        where: Mapping[str, str | bool | Sequence[str | bool]] | None = None,
        now: float | None = None,
    ) -> np.ndarray:
        """The slots of every active, unexpired item (at ``now``) whose categorical features match
        ``where`` (``name: value`` or ``name: [values]``: the item's value of ``name`` is one of them;
        every name must match), in slot order."""
        n = self._n
        keep = self._alive[:n] & self._active[:n]
        if now is not None:
            keep &= self._expires[:n] > now
        for name, wanted in (where or {}).items():
            k = self._cat_index.get(name)
            values = list(wanted) if isinstance(wanted, list | tuple) else [wanted]
            for x in values:
                if not isinstance(x, CATEGORICAL):
                    raise CatalogError(f"where.{name}: a string or a boolean (or a list of them) is required")
            if k is None:
                return np.zeros(0, np.int64)
            codes = [c for x in values if (c := self._cat_code_of[k].get((type(x), x))) is not None]
            keep &= np.isin(self._cat_codes[k, :n], np.asarray(codes, np.int32))
        return np.flatnonzero(keep)

    @property
    def n_slots(self) -> int:
        """Slots in use, live or not: every slot :meth:`select` and :meth:`select_all` give is below it."""
        return self._n

    def id_of(self, slot: int) -> str:
        """The id of the item in ``slot``."""
        item_id = self._ids[slot]
        if item_id is None:
            raise CatalogError(f"slot {slot} holds no item")
        return item_id

    def features(self, slot: int) -> SparseVector:
        """The hashed features of the item in ``slot`` (what the action featuriser gives for them)."""
        lo, hi = int(self._start[slot]), int(self._start[slot] + self._count[slot])
        return SparseVector(self._bucket[self._voc[lo:hi]], self._val[lo:hi].copy(), 1 << self.hashing_bits)

    def action_input(self, context: SparseVector, slots: np.ndarray) -> ActionInput:
        """The items of ``slots`` as candidates sent with their features would arrive
        (:class:`service.actions.ActionInput`): a decision's shown item for ``learn``, or an oracle."""
        vecs = [self.features(int(s)) for s in slots]
        ptr = np.concatenate(([0], np.cumsum([v.nnz for v in vecs]))).astype(np.int64)
        idx = np.concatenate([v.idx for v in vecs]) if vecs else np.zeros(0, np.int64)
        val = np.concatenate([v.val for v in vecs]) if vecs else np.zeros(0)
        ids = [self.id_of(int(s)) for s in slots]
        return ActionInput(ids, context, ptr, idx.astype(np.int64), val, self.hashing_bits)

    def scores(
        self, w: np.ndarray, context: SparseVector, slots: np.ndarray, pairs: bool = False
    ) -> np.ndarray:
        """``<w, row_a>`` of the items of ``slots`` for ``context`` (:func:`catalog_scores`), with the
        context pairs when ``pairs``."""
        ids, vals = context_side(context.idx, context.val, self.hashing_bits, pairs)
        return catalog_scores(
            w, ids, vals, np.ascontiguousarray(slots, np.int64), self._start, self._count, self._voc,
            self._val, self._bucket, self._col0, self._refs, self.hashing_bits,
        )  # fmt: skip

    def live_slots(self) -> np.ndarray:
        """The slots of every registered item (active or not, expired or not), in slot order."""
        return np.flatnonzero(self._alive[: self._n])

    def slot_of(self, item_id: str) -> int | None:
        """The slot of item ``item_id``, None if it is not registered."""
        return self._slot.get(item_id)

    def entry_counts(self, slots: np.ndarray) -> np.ndarray:
        """Hashed entries of each item of ``slots``."""
        return self._count[slots]


# The canonical state, an item's view and a budget's estimate live outside the class to keep Catalog
# readable (issue 52's 400-line bound).


def added_bytes(cat: Catalog, items: HashedItems) -> int:
    """About what ``cat``'s :meth:`~Catalog.nbytes` grows by when ``items`` are inserted, spare
    capacity aside: a new item's slot (the arrays' row, a categorical code per name, its id and its
    list and dictionary entries, :data:`_ENTRY_BYTES` for the latter), 12 bytes per hashed entry (a
    replaced item's old entries stay as a hole until a compaction), a new bucket's rows and key,
    and a replaced item's row kept in the history (:func:`service.catalog_history.row_bytes`).
    For a memory budget, before the items are applied."""
    new = [i for i in items.ids if i not in cat._slot]
    old = np.fromiter((s for i in items.ids if (s := cat._slot.get(i)) is not None), np.int64)
    names = set(cat._cat_names).union(k for item in items.categorical for k, _ in item)
    slot = 1 + 1 + 8 + 8 + 8 + 4 * len(names) + 8 + 16 + _ENTRY_BYTES  # 16: sequence number, since
    buckets = np.unique(items.buckets).tolist()
    fresh = sum(1 for b in buckets if b not in cat._voc_of)
    return (
        len(new) * slot
        + sum(sys.getsizeof(i) for i in new)
        + 12 * int(items.buckets.size)
        + fresh * (3 * 8 + _INT_BYTES + _ENTRY_BYTES)
        + sum(row_bytes(cat.id_of(s), int(cat._count[s]), len(names)) for s in old.tolist())
    )


def rows_of(cat: Catalog, slots: np.ndarray) -> Rows:
    """The current rows of the items of ``slots`` (:class:`~service.catalog_history.Rows`, ``hi``
    -1: still live): what the history keeps of them when they are retired, and what a rebuild
    takes of the live catalog (:mod:`service.catalog_replay`)."""
    counts = cat._count[slots]
    take = np.repeat(cat._start[slots] - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))
    cats: list[list[tuple[str, str | bool]]] = [[] for _ in range(slots.size)]
    for k, name in enumerate(cat._cat_names):
        col = cat._cat_codes[k, slots]
        values = cat._cat_values[k]
        for i in np.flatnonzero(col >= 0).tolist():
            cats[i].append((name, values[col[i]]))
    ids: list[str] = [cat._ids[s] for s in slots.tolist()]  # type: ignore[misc]  # live slots
    items = HashedItems(
        ids, counts.copy(), cat._bucket[cat._voc[take]], cat._val[take].copy(), cat._active[slots].copy(),
        cat._expires[slots].copy(), cats,
    )  # fmt: skip
    return Rows(items, cat._seq[slots].copy(), cat._since[slots].copy(), np.full(slots.size, -1, np.int64))


def describe(cat: Catalog, slot: int) -> dict[str, Any]:
    """What ``cat`` keeps of the item in ``slot``: its id, ``active``, ``expires_at`` (None:
    never), its categorical features (``{name: value}``; numbers are kept hashed only) and how
    many hashed entries it has."""
    expires = float(cat._expires[slot])
    codes = cat._cat_codes[:, slot] if cat._cat_codes.shape[1] > slot else ()
    return {
        "id": cat.id_of(slot),
        "active": bool(cat._active[slot]),
        "expires_at": None if math.isinf(expires) else expires,
        "categorical": {
            cat._cat_names[k]: cat._cat_values[k][c]
            for k, c in enumerate(np.asarray(codes).tolist())
            if c >= 0
        },
        "entries": int(cat._count[slot]),
    }


def _categorise(cat: Catalog, slots: np.ndarray, cats: list[list[tuple[str, str | bool]]]) -> None:
    """Code in ``cat`` the categorical features ``cats[i]`` of the item in ``slots[i]``: names and each
    name's values numbered in order of first appearance."""
    by_name: dict[str, tuple[list[int], list[str | bool]]] = {}
    for slot, pairs in zip(slots.tolist(), cats, strict=True):
        for name, value in pairs:
            group = by_name.get(name)
            if group is None:
                group = by_name[name] = ([], [])
            group[0].append(slot)
            group[1].append(value)
    for name, (where, values) in by_name.items():
        k = cat._cat_index.get(name)
        if k is None:
            k = cat._cat_index[name] = len(cat._cat_names)
            cat._cat_names.append(name)
            cat._cat_values.append([])
            cat._cat_code_of.append({})
            codes = np.full((k + 1, max(cat._cat_codes.shape[1], cat._n)), -1, np.int32)
            codes[:k] = cat._cat_codes
            cat._cat_codes = codes
        code_of, known = cat._cat_code_of[k], cat._cat_values[k]
        out = np.empty(len(values), np.int32)
        for j, value in enumerate(values):
            code = code_of.get((type(value), value))
            if code is None:
                code = code_of[(type(value), value)] = len(known)
                known.append(value)
            out[j] = code
        cat._cat_codes[k, where] = out


def _canonical_state(cat: Catalog) -> dict[str, Any]:
    """:meth:`Catalog.to_state` of ``cat``."""
    n = cat._n
    live = np.flatnonzero(cat._alive[:n])
    counts = cat._count[live]
    starts = cat._start[live]
    take = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts) + np.arange(
        int(counts.sum())
    )
    voc = cat._voc[take]
    used, first, inverse = np.unique(voc, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(used.size, np.int32)
    rank[order] = np.arange(used.size, dtype=np.int32)
    raw = [cat._ids[s].encode() for s in live.tolist()]  # type: ignore[union-attr]
    cats: dict[str, list[str | bool]] = {}
    codes = np.full((len(cat._cat_names), live.size), -1, np.int32)
    for k, name in enumerate(cat._cat_names):
        col = cat._cat_codes[k, live]
        present = col >= 0
        if not present.any():
            continue
        used_c, first_c, inv_c = np.unique(col[present], return_index=True, return_inverse=True)
        order_c = np.argsort(first_c, kind="stable")
        rank_c = np.empty(used_c.size, np.int32)
        rank_c[order_c] = np.arange(used_c.size, dtype=np.int32)
        codes[len(cats), present] = rank_c[inv_c.reshape(-1)]
        cats[name] = [cat._cat_values[k][c] for c in used_c[order_c].tolist()]
    return {
        "format": FORMAT,
        "hashing_bits": cat.hashing_bits,
        "version": cat.version,
        "id_lengths": np.array([len(r) for r in raw], np.int64),
        "ids": np.frombuffer(b"".join(raw), np.uint8).copy(),
        "active": cat._active[live].copy(),
        "expires": cat._expires[live].copy(),
        "count": counts.astype(np.int64),
        "voc": rank[inverse.reshape(-1)] if voc.size else np.zeros(0, np.int32),
        "val": cat._val[take].copy(),
        "vocabulary": cat._bucket[used[order]].copy(),
        "categorical": json.dumps(list(cats.items()), separators=(",", ":")),
        "categorical_codes": codes[: len(cats)].copy(),
        "seq": cat._seq[live].copy(),
        "since": cat._since[live].copy(),
        "next_seq": cat._next_seq,
        **{f"history.{k}": v for k, v in cat.history.to_state().items()},
    }


def _load_canonical(cat: Catalog, state: Mapping[str, Any]) -> None:
    """``cat`` takes the arrays of ``state`` (:meth:`Catalog.to_state`)."""
    if state.get("format") != FORMAT or state.get("hashing_bits") != cat.hashing_bits:
        raise CatalogError(
            f"a catalog of format {state.get('format')} at {state.get('hashing_bits')} hashing bits "
            f"cannot be loaded here (format {FORMAT}, {cat.hashing_bits} bits)"
        )
    # What this process noted of the events it applied (a compaction reloads the state)
    times, retired = cat.history.times, cat.history.retired
    cat._reset()
    lengths = np.asarray(state["id_lengths"], np.int64)
    raw = np.asarray(state["ids"], np.uint8).tobytes()
    ends = np.cumsum(lengths).tolist()
    cat._ids = [raw[a:b].decode() for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    cat._id_bytes = sum(sys.getsizeof(i) for i in cat._ids)
    n = cat._n = len(cat._ids)
    cat._slot = {item_id: s for s, item_id in enumerate(cat._ids)}
    cat._alive = np.ones(n, np.bool_)
    cat._active = np.asarray(state["active"], np.bool_).copy()
    cat._expires = np.asarray(state["expires"], np.float64).copy()
    cat._count = np.asarray(state["count"], np.int64).copy()
    cat._start = np.concatenate(([0], np.cumsum(cat._count)[:-1])).astype(np.int64)
    cat._voc = np.asarray(state["voc"], np.int32).copy()
    cat._val = np.asarray(state["val"], np.float64).copy()
    cat._n_entries = cat._live = int(cat._voc.size)
    cat._bucket = np.asarray(state["vocabulary"], np.int64).copy()
    cat._col0 = _constant_columns(cat._bucket, cat.hashing_bits)
    cat._refs = np.bincount(cat._voc, minlength=cat._bucket.size).astype(np.int64)
    cat._voc_of = {b: v for v, b in enumerate(cat._bucket.tolist())}
    cats = json.loads(state["categorical"])
    cat._cat_codes = np.asarray(state["categorical_codes"], np.int32).reshape(len(cats), n).copy()
    for name, values in cats:
        cat._cat_index[name] = len(cat._cat_names)
        cat._cat_names.append(name)
        cat._cat_values.append(list(values))
        cat._cat_code_of.append({(type(x), x): c for c, x in enumerate(values)})
    cat.version = int(state["version"])
    # A state written before row versions (issue 54, item 5): the order is the slots', and no
    # decision before this version can be rebuilt (its retired rows were not kept).
    cat._seq = np.asarray(state.get("seq", np.arange(n)), np.int64).copy()
    cat._since = np.asarray(state.get("since", np.zeros(n)), np.int64).copy()
    cat._next_seq = int(state.get("next_seq", n))
    rows = {k[8:]: v for k, v in state.items() if k.startswith("history.")}
    cat.history = History.from_state(rows) if rows else History()
    cat.history.times, cat.history.retired = times, retired
    if not rows:
        cat.history.complete_from = cat.version
