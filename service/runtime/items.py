"""A model's catalog kept through its event log (issue 54): the ``items`` events, their encoding,
the catalog in checkpoints, and the admin calls that change it (:class:`Items`).

An action-feature model's catalog (:class:`service.catalog.Catalog`, ``ModelRuntime.catalog``; None
for a label model) changes only by events of the model's own log, as its learned state does:

- the replica that takes a write checks and hashes the items once (:meth:`Catalog.hash_items`, in
  a thread), checks the memory budget, and appends the hashed items as ``items`` events of at most
  :data:`ITEMS_PER_EVENT` items each (:func:`put_events`); a removal is one ``items`` event naming
  the ids (:func:`remove_event`);
- every replica applies them in log order (:func:`apply_event`, called by
  ``ModelRuntime.apply``): the same operations in the same order, so every replica holds the same
  catalog, byte for byte (:meth:`Catalog.to_bytes`), and a removal acknowledged at log position
  ``p`` is applied by a replica before any event after ``p``;
- a checkpoint carries the catalog's canonical state under the keys ``catalog.*``
  (:func:`checkpoint_keys`, :func:`pop_catalog`), so a replica that starts from it has the catalog.

The event's bytes are :func:`service.serial.encode` of a flat dictionary (``op`` "put" with the
items' ids, entry counts, hashed buckets and values, flags, expiries and categorical features as
JSON; ``op`` "remove" with the ids; ``op`` "sweep", the sweeper's (:func:`sweep_event`), with the
time the items due then expire at and the version at or before which the history's retired rows
are forgotten): pickle-free, and every store keeps them as it keeps an import's state. Expiry and
forgetting go through the log, not each replica's clock, so the catalogs stay equal byte for byte.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from service import serial
from service.catalog import Catalog, CatalogError, HashedItems, added_bytes
from service.config import ModelSpec
from service.features import FeatureError
from service.runtime.budgets import check_catalog_budget
from service.store import Event

if TYPE_CHECKING:  # model.py imports this module: the room's types only for the checker
    from service.runtime.model import ModelRuntime
    from service.runtime.registry import Registry
    from service.runtime.replication import Replication
    from service.runtime.state import Shared

__all__ = [
    "ITEMS_PER_EVENT",
    "KIND",
    "Items",
    "apply_event",
    "checkpoint_keys",
    "new_catalog",
    "pop_catalog",
    "put_events",
    "remove_event",
    "sweep_event",
]

#: The event kind of a catalog change.
KIND = "items"
#: Items per ``items`` event: a 100,000-item bulk is 100 events of about 200 KB each at ten
#: features an item (16 bytes an entry, the id, the flags), far under every store's limit on one
#: value (Redis 512 MB, SQLite 1 GB). A replica applies one event between two turns of its event
#: loop, so this bounds how long a bulk holds a predict up: 1,000 shop items apply in about 6 ms
#: here, 5,000 in 30 to 180 ms (the larger inserts also cost more per item: 0.66 s against 0.25 s
#: for 100,000; measured in-process on the bench's shop items).
ITEMS_PER_EVENT = 1_000
_PREFIX = "catalog."


def new_catalog(spec: ModelSpec, max_named: int) -> Catalog | None:
    """An empty catalog for a model of ``spec``: an action-feature model's, None for a label model."""
    if spec.actions != "features":
        return None
    assert spec.hashing_bits is not None  # an action-feature model hashes
    return Catalog(spec.hashing_bits, max_named)


def _ids(ids: Sequence[str]) -> dict[str, np.ndarray]:
    raw = [i.encode() for i in ids]
    return {
        "id_lengths": np.array([len(r) for r in raw], np.int64),
        "ids": np.frombuffer(b"".join(raw), np.uint8).copy(),
    }


def _read_ids(state: Mapping[str, Any]) -> list[str]:
    raw = np.asarray(state["ids"], np.uint8).tobytes()
    ends = np.cumsum(np.asarray(state["id_lengths"], np.int64)).tolist()
    return [raw[a:b].decode() for a, b in zip([0, *ends[:-1]], ends, strict=True)]


def put_events(items: HashedItems) -> list[bytes]:
    """The states of the ``items`` events that register ``items`` (:data:`ITEMS_PER_EVENT` each)."""
    return [
        serial.encode(
            {
                "op": "put",
                **_ids(part.ids),
                "count": part.counts,
                "bucket": part.buckets,
                "val": part.values,
                "active": part.active,
                "expires": part.expires,
                "categorical": json.dumps(part.categorical, separators=(",", ":")),
            }
        )
        for part in items.chunks(ITEMS_PER_EVENT)
    ]


def remove_event(ids: Sequence[str]) -> bytes:
    """The state of the ``items`` event that removes ``ids``."""
    return serial.encode({"op": "remove", **_ids(ids)})


def sweep_event(now: float | None, forget_below: int | None) -> bytes:
    """The state of the ``items`` event of a sweep: expire the items due at ``now`` and forget the
    history's rows retired at or before version ``forget_below`` (either may be None)."""
    return serial.encode(
        {
            "op": "sweep",
            "now": -1.0 if now is None else now,
            "below": -1 if forget_below is None else forget_below,
        }
    )


def apply_event(catalog: Catalog | None, data: bytes, at: float = 0.0) -> None:
    """Apply the ``items`` event of state ``data``, appended at ``at``, to ``catalog``
    (``ModelRuntime.apply``). A removal of an id no longer there changes nothing (an earlier removal
    in the log took it)."""
    if catalog is None:
        raise CatalogError("an items event on a model with fixed labels")
    state = serial.decode(data)
    retired = catalog.history.retired
    _apply(catalog, state)
    if catalog.history.retired > retired:  # when it retired rows (the sweep forgets by this time)
        catalog.history.applied(catalog.version, at)


def _apply(catalog: Catalog, state: Mapping[str, Any]) -> None:
    if state["op"] == "sweep":  # the sweeper's (service.runtime.sweeper): what it does is in the event
        if state["now"] >= 0:
            catalog.expire(float(state["now"]))
        if state["below"] >= 0:
            catalog.history.forget(int(state["below"]))
        return
    ids = _read_ids(state)
    if state["op"] == "remove":
        catalog.discard(ids)
        return
    cats = json.loads(state["categorical"])  # [[name, value], ...] per item: unpacked as the pairs
    catalog.insert(
        HashedItems(
            ids,
            np.asarray(state["count"], np.int64),
            np.asarray(state["bucket"], np.int64),
            np.asarray(state["val"], np.float64),
            np.asarray(state["active"], np.bool_),
            np.asarray(state["expires"], np.float64),
            cats,
        )
    )


def checkpoint_keys(catalog: Catalog | None) -> dict[str, Any]:
    """The catalog's canonical state under the checkpoint keys ``catalog.*``; {} without one or
    before its first change (a model's checkpoints stay its learner's state until then)."""
    if catalog is None or catalog.version == 0:
        return {}
    return {_PREFIX + k: v for k, v in catalog.to_state().items()}


def pop_catalog(state: dict[str, Any], spec: ModelSpec, max_named: int) -> Catalog | None:
    """The catalog of a checkpoint's ``state`` (its ``catalog.*`` keys, removed from ``state``): an
    empty one for an action-feature model whose checkpoint has none, None for a label model."""
    keys = [k for k in state if k.startswith(_PREFIX)]
    own = {k[len(_PREFIX) :]: state.pop(k) for k in keys}
    catalog = new_catalog(spec, max_named)
    if catalog is not None and own:
        catalog._load(own)
        if len(catalog.history):  # retired before this process: as if now (forgotten later, not sooner)
            catalog.history.applied(catalog.version, time.time())
    return catalog


class Items:
    """The admin calls on a model's catalog: register, remove, read.

    Parameters
    ----------
    shared : Shared
        The runtime's shared state.
    registry : Registry
        Finds the model (read-your-writes, as the other admin calls).
    replication : Replication
        Applies the appended events here before a call returns.
    """

    def __init__(self, shared: Shared, registry: Registry, replication: Replication) -> None:
        self.shared = shared
        self.registry = registry
        self.replication = replication

    @staticmethod
    def held(m: ModelRuntime) -> int:
        """What model ``m`` holds for the memory budget: its learned state's estimate and its catalog."""
        return m.budget_bytes + (m.catalog.nbytes() if m.catalog is not None else 0)

    async def model(self, name: str) -> tuple[ModelRuntime, Catalog]:
        """The model ``name`` with its catalog, its log applied here; :class:`FeatureError` (422)
        for a model with fixed labels."""
        m = await self.registry.resolve(name, fresh=True)
        if m.catalog is None:
            raise FeatureError(
                f"model {name!r} has fixed labels; a catalog of items needs a model with "
                '"actions": "features"'
            )
        return m, m.catalog

    async def put(self, name: str, items: Sequence[Mapping[str, Any]]) -> tuple[ModelRuntime, int]:
        """Register or replace ``items`` of model ``name``, all or nothing as to their content
        (:class:`CatalogError` naming ``items.{i}``, :class:`~service.runtime.budgets.BudgetError`
        naming both sizes, before anything is appended); the position of the last event, applied
        here when this returns. A bulk of more than :data:`ITEMS_PER_EVENT` items is several events:
        a store failure midway leaves the first ones in (a retry registers the same items again)."""
        m, catalog = await self.model(name)
        bits, max_named = catalog.hashing_bits, catalog.max_named
        # Hashed on a catalog of its own (no state shared with the thread) in a thread: 100,000
        # items take a second or two.
        hashed = await asyncio.to_thread(lambda: Catalog(bits, max_named).hash_items(items))
        new = sum(1 for i in hashed.ids if i not in catalog)
        others = sum(self.held(x) for n, x in self.shared.models.items() if n != name)
        need = catalog.nbytes() + added_bytes(catalog, hashed)
        check_catalog_budget(name, m.budget_bytes, need, len(catalog) + new, self.shared.settings, others)
        position = m.position
        for data in put_events(hashed):
            position = await self.shared.store.append(
                name,
                Event(0, KIND, at=self.shared.clock(), state=data),  # type: ignore[arg-type]
            )
        self.shared.wake.set()
        await self.replication.wait_applied(m, position)
        return m, position

    async def remove(self, name: str, item_id: str) -> tuple[ModelRuntime, int]:
        """Remove item ``item_id`` of model ``name`` (:class:`CatalogError` if it is not there); the
        position of the event, applied here when this returns: any replica serves without the item
        once it has applied that position."""
        m, catalog = await self.model(name)
        if item_id not in catalog:
            raise CatalogError(f"item {item_id!r} is not in the catalog of model {name!r}")
        event = Event(0, KIND, at=self.shared.clock(), state=remove_event([item_id]))  # type: ignore[arg-type]
        position = await self.shared.store.append(name, event)
        self.shared.wake.set()
        await self.replication.wait_applied(m, position)
        return m, position
