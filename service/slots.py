"""Multi-slot input (issue 53): one page's context, candidate actions and slots, each with features.

A page shows several things at once (a hero banner over three tiles, a carousel): a request names
its **slots** in order, each with features of its own (its position, its size), beside the context
and the candidates of an action model (:mod:`service.actions`). Vowpal Wabbit's
``--ccb_explore_adf`` takes the same input (a ``ccb shared`` line, ``ccb action`` lines and ``ccb
slot`` lines) and Personalizer's multi-slot rank its JSON form.

**Slot features** are hashed into the model's ``2**b`` buckets as context features are, then moved
to a namespace of their own: bucket ``j`` of a slot feature becomes ``mix((j + 1) ^ SLOT_TAG) mod
2**b`` (SplitMix64's finaliser, as :mod:`service.actions` hashes its pairs), so a slot's
``position=hero`` and a context's ``position=hero`` are two features. Slot ``s``'s input
(:meth:`PageInput.slot_input`) is the page's :class:`~service.actions.ActionInput` with the slot's
features added to the context: its rows then hold the slot's own features, the slot x action
products and the context x action products, as VW's CCB adds a slot's features to the shared
example before its ``-q`` crosses the shared and action namespaces (``inject_slot_features`` in
``conditional_contextual_bandit.cc``). A slot without features gets the page's input itself, so a
one-slot page without slot features is bit for bit the single-slot request.

**What a decision record keeps** (:meth:`PageFeaturiser.pack`): the slots' non-zero buckets and
values (already in the slot namespace) before the page's packed :class:`~service.actions.ActionInput`,
in one flat float64 array.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from service.actions import MAX_ROW_ENTRIES, ActionFeaturiser, ActionInput, unpack_actions
from service.features import CACHE_BYTES, FeatureError, FeatureValue, Featuriser, SparseVector
from service.kernels import merge_buckets

__all__ = [
    "MAX_SLOTS",
    "SLOT_TAG",
    "PageFeaturiser",
    "PageInput",
    "page_entries",
    "slot_buckets",
    "slot_context",
    "slot_field",
]

#: Most slots a page may have (Personalizer's multi-slot rank takes up to 50 actions; pages have few slots).
MAX_SLOTS = 50
#: The slot namespace's tag: a slot feature's bucket is rehashed with it (module docstring).
SLOT_TAG = np.uint64(0x5107_5107_5107_5107)


def slot_buckets(buckets: np.ndarray, bits: int) -> np.ndarray:
    """Buckets ``j`` of slot features moved to the slot namespace: ``mix((j + 1) ^ SLOT_TAG) mod
    2**bits`` (SplitMix64's finaliser over uint64, wrapping)."""
    z = (buckets.astype(np.uint64) + np.uint64(1)) ^ SLOT_TAG
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z & np.uint64((1 << bits) - 1)).astype(np.int64)


class PageInput:
    """One page: the context and candidates (:attr:`actions`) and the slots' features, in order.

    Read-only by contract, as :class:`~service.actions.ActionInput`. Each slot's input is built
    once, when first asked for; slots with the same features share one.

    Attributes
    ----------
    actions : ActionInput
        The context and the candidates (candidate ``a`` is index ``a`` in every slot).
    slots : list of SparseVector
        Each slot's features, hashed into the slot namespace (:func:`slot_buckets`).
    ids : list of str
        The slots' ids (``"0"``, ``"1"``, ... when the request gave none).
    """

    __slots__ = ("_inputs", "actions", "ids", "slots")

    def __init__(self, actions: ActionInput, slots: list[SparseVector], ids: list[str] | None = None) -> None:
        self.actions = actions
        self.slots = slots
        self.ids = [str(s) for s in range(len(slots))] if ids is None else ids
        self._inputs: dict[bytes, ActionInput] = {}

    @property
    def n_slots(self) -> int:
        """Number of slots."""
        return len(self.slots)

    @property
    def n(self) -> int:
        """Number of candidates."""
        return self.actions.n

    def slot_input(self, s: int) -> ActionInput:
        """Slot ``s``'s input: the candidates with the slot's features added to the context (colliding
        buckets added, zero sums dropped: :func:`service.kernels.merge_buckets`); the page's own
        input for a slot without features."""
        slot = self.slots[s]
        if slot.nnz == 0:
            return self.actions
        key = slot.idx.tobytes() + slot.val.tobytes()
        got = self._inputs.get(key)
        if got is None:
            x = self.actions
            got = ActionInput(x.ids, slot_context(x.context, slot), x.a_ptr, x.a_idx, x.a_val, x.bits)
            self._inputs[key] = got
        return got


def slot_context(context: SparseVector, slot: SparseVector) -> SparseVector:
    """The context of a slot's input: ``context`` with the slot's features added (colliding buckets
    added, zero sums dropped: :func:`service.kernels.merge_buckets`); ``context`` itself for a slot
    without features. A page over catalog items scores each slot on it
    (:mod:`service.runtime.catalog_pages`)."""
    if slot.nnz == 0:
        return context
    idx, val = merge_buckets(np.concatenate((context.idx, slot.idx)), np.concatenate((context.val, slot.val)))
    return SparseVector(idx, val, context.dim)


class PageFeaturiser:
    """Turns a request's context, candidates and slots into a :class:`PageInput` for one model.

    Parameters
    ----------
    hashing_bits : int
        ``b``: contexts, actions, slots and rows hash into ``2**b`` buckets.
    max_named : int
        Most named features of the context, of each action and of each slot.
    max_actions : int
        Most candidates a request may carry.
    """

    def __init__(self, hashing_bits: int, max_named: int, max_actions: int) -> None:
        self.hashing_bits = hashing_bits
        self.actions = ActionFeaturiser(hashing_bits, max_named, max_actions)
        self.slot = Featuriser(None, hashing_bits, max_named, CACHE_BYTES // 4)

    def __call__(
        self,
        features: Mapping[str, FeatureValue],
        actions: Sequence[Any],
        slots: Sequence[Any],
    ) -> PageInput:
        """The page of the context ``features``, the candidate ``actions`` (``{"id", "features"}``
        each) and the ``slots`` (``{"id"?, "features"?}`` each, in page order); :class:`FeatureError`
        naming what does not fit, fewer candidates than slots included."""
        n_slots = len(slots)
        if not 1 <= n_slots <= MAX_SLOTS:
            raise FeatureError(f"slots: give 1 to {MAX_SLOTS} slots, got {n_slots}")
        if len(actions) < n_slots:
            raise FeatureError(
                f"slots: {n_slots} slots but {len(actions)} candidate actions: each slot shows its own "
                "action, so send at least as many actions as slots"
            )
        x = self.actions(features, actions)
        vectors, ids = self.slot_features(slots)
        entries = page_entries(x, vectors)
        if entries > MAX_ROW_ENTRIES:
            raise FeatureError(
                f"slots: {n_slots} slots over {x.n} candidates with {x.context.nnz} context features make "
                f"{entries:,} interaction entries, at most {MAX_ROW_ENTRIES:,} per request (send fewer "
                "slots, candidates or features)"
            )
        return PageInput(x, vectors, ids)

    def slot_features(self, slots: Sequence[Any]) -> tuple[list[SparseVector], list[str]]:
        """Each slot's hashed features (in the slot namespace) and id, in page order;
        :class:`FeatureError` naming ``slots.{s}`` for what does not fit."""
        vectors: list[SparseVector] = []
        ids: list[str] = []
        for s, slot in enumerate(slots):
            slot_id, named = _slot_fields(slot, s)
            if slot_id in ids:
                raise FeatureError(f"slots.{s}.id: {slot_id!r} is given twice (slot ids must be distinct)")
            ids.append(slot_id)
            try:
                v = self.slot(named)
            except FeatureError as exc:
                raise FeatureError(f"slots.{s}.{exc}") from None
            assert isinstance(v, SparseVector)
            moved, val = merge_buckets(slot_buckets(v.idx, self.hashing_bits), v.val)
            vectors.append(SparseVector(moved, val, v.dim))
        return vectors, ids

    def pack(self, page: PageInput) -> np.ndarray:
        """What a decision record keeps of ``page``: ``[S, nnz_0..nnz_{S-1}, len_0..len_{S-1}, idx,
        val per slot, slot id bytes, then ActionFeaturiser.pack(page.actions)]``; every number exact
        in float64."""
        raw = [i.encode() for i in page.ids]
        head = [page.n_slots, *(v.nnz for v in page.slots), *(len(r) for r in raw)]
        parts = [np.array(head, dtype=np.float64)]
        for v in page.slots:
            parts += [v.idx.astype(np.float64), v.val]
        parts.append(np.frombuffer(b"".join(raw), dtype=np.uint8).astype(np.float64))
        parts.append(self.actions.pack(page.actions))
        return np.concatenate(parts)

    def unpack(self, stored: np.ndarray) -> PageInput:
        """Inverse of :meth:`pack`: the page ``decide`` saw, bit for bit."""
        return unpack_page(stored, self.hashing_bits)


def page_entries(x: ActionInput, slots: list[SparseVector]) -> int:
    """At most how many row entries the page's slot inputs build in all (the rows of each distinct
    slot input once; :func:`service.actions.action_rows` builds ``(nc + 1)(na + 1)`` per candidate,
    merging can only lower it): one request's bound, :data:`service.actions.MAX_ROW_ENTRIES`,
    holds for a whole page, so a learner's per-event budget holds for a page's decision."""
    per_context = int(np.sum(np.diff(x.a_ptr) + 1))
    distinct = {(v.idx.tobytes(), v.val.tobytes()): v.nnz for v in slots}
    return sum((x.context.nnz + nnz + 1) * per_context for nnz in distinct.values())


def unpack_page(stored: np.ndarray, bits: int) -> PageInput:
    """:meth:`PageFeaturiser.unpack` without a featuriser."""
    n_slots = int(stored[0])
    nnz = stored[1 : 1 + n_slots].astype(np.int64).tolist()
    lens = stored[1 + n_slots : 1 + 2 * n_slots].astype(np.int64).tolist()
    at = 1 + 2 * n_slots
    slots = []
    for k in nnz:
        slots.append(
            SparseVector(stored[at : at + k].astype(np.int64), stored[at + k : at + 2 * k].copy(), 1 << bits)
        )
        at += 2 * k
    raw = stored[at : at + sum(lens)].astype(np.uint8).tobytes()
    at += sum(lens)
    ids, pos = [], 0
    for length in lens:
        ids.append(raw[pos : pos + length].decode())
        pos += length
    return PageInput(unpack_actions(stored[at:], bits), slots, ids)


def slot_field(slot: Any, name: str) -> Any:
    """Field ``name`` of a request's slot: a mapping or an object (a parsed body's slot), None if absent."""
    if isinstance(slot, Mapping):
        return slot.get(name)
    return getattr(slot, name, None)


def _slot_fields(slot: Any, s: int) -> tuple[str, Mapping[str, FeatureValue]]:
    """The id (default ``str(s)``) and the named features of slot ``s`` (a mapping or an object with
    ``id`` and ``features``); :class:`FeatureError` naming what is wrong."""
    if isinstance(slot, Mapping):
        slot_id, named = slot.get("id", str(s)), slot.get("features", {})
    else:
        slot_id, named = getattr(slot, "id", str(s)), getattr(slot, "features", None)
    if not isinstance(slot_id, str) or not 1 <= len(slot_id) <= 256:
        raise FeatureError(f"slots.{s}.id: a string of 1 to 256 characters is required")
    if named is None:
        named = {}
    if not isinstance(named, Mapping):
        raise FeatureError(f"slots.{s}.features: an object {{name: value}} is required")
    return slot_id, named
