"""A logged catalog decision's candidates rebuilt from the model's catalog (issue 54, item 5): what
off-policy evaluation (:mod:`service.ope`) and the dsjson export (:mod:`service.decision_log`) need
of a decision over thousands of items whose record keeps the chosen item alone.

A catalog decision's record (:mod:`service.runtime.catalog_requests`) keeps the context, the
chosen item's id, hashed features and probability, and in ``catalog`` the selection: the catalog's
``version``, the time expiry was judged at (``at``), the candidate count and the chosen one's
position (``index``), how many actions were sent with features (``sent``) and the request's ``ids``,
``filter``, ``eligible`` and ``excluded`` (``select``). :func:`rebuild` takes the model's catalog,
whose history keeps every row version (:mod:`service.catalog_history`), and returns the candidates
the decision was over:

1. the catalog *as of* the version (:func:`as_of`): the live rows that came in at or before it and
   the retired rows that lived at it, in the catalog's order (sequence numbers), hashed as they
   were; the live catalog itself when it has not changed since;
2. the selection applied to it as the request's was (:meth:`Catalog.select` of the ids or
   :meth:`Catalog.select_all` of the filter, expiry judged at ``at``; then ``eligible`` /
   ``excluded`` by id or position);
3. checked against the record: as many candidates, and the record's item at its position with the
   same hashed features.

Scored by the catalog's own kernel (:meth:`CatalogReplay.pmf`), the rebuilt candidates give the
model's probabilities bit for bit as the decision computed them (the kernel's sums depend on each
item's entries only, not on which catalog holds them), so the logged probability of the chosen
item is reproduced exactly by the model as it was then, and another policy's probability of it can
be computed (``tests/service/test_catalog_replay.py``).

What cannot be rebuilt, with the reason (:class:`ReplayError`): a decision at a version the
history no longer covers (forgotten past the decision log's retention: :mod:`service.runtime.sweeper`),
one at a version ahead of the catalog (a replica behind the log), one whose request sent actions
with features beside the catalog items (their features are not kept), one whose selection named
more ids than a record keeps, and a record made before selections were kept.

**Cost.** The live catalog at its own version costs the selection only; another version builds a
catalog of its rows (``python -m service lab bench catalog-history`` prints both for 10,000 items).
:class:`Snapshots` keeps the last few, since consecutive decisions mostly share a version.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.actions import ActionInput
from service.catalog import Catalog, CatalogError, rows_of
from service.catalog_explore import CatalogExploration, catalog_pairs
from service.catalog_items import HashedItems
from service.decision_log import Candidates
from service.features import SparseVector
from service.learners.squarecb import igw_scores
from service.learners.squarecb_adf import SquareCBADF

__all__ = [
    "CatalogReplay",
    "ReplayError",
    "Snapshots",
    "as_of",
    "dsjson_candidates",
    "rebuild",
]


class ReplayError(ValueError):
    """A logged catalog decision whose candidates cannot be rebuilt; the message says why."""


def _get(record: Any, key: str) -> Any:
    return record.get(key) if isinstance(record, Mapping) else getattr(record, key, None)


def as_of(catalog: Catalog, version: int) -> Catalog:
    """The catalog as it was at ``version`` (module docstring): ``catalog`` itself when nothing
    changed since, else a new catalog of the rows that lived then, in the same order;
    :class:`ReplayError` when the history no longer covers it or the catalog is behind it."""
    if version > catalog.version:
        raise ReplayError(
            f"the decision saw catalog version {version}, this replica's catalog is at "
            f"{catalog.version}: it has not applied the log up to it yet"
        )
    history = catalog.history
    if version < history.complete_from:
        raise ReplayError(
            f"the catalog's history before version {history.complete_from} is forgotten (kept while "
            f"the decision log keeps decisions); the decision saw version {version}"
        )
    live = catalog.live_slots()
    since = catalog._since[live]
    old = history.at_version(version)
    if not len(old) and bool((since <= version).all()):
        return catalog
    now = rows_of(catalog, live[since <= version])
    a, b = now.items, old.items
    order = np.argsort(np.concatenate((now.seq, old.seq)), kind="stable")
    counts = np.concatenate((a.counts, b.counts))
    starts = np.cumsum(counts) - counts
    take = np.repeat(starts[order] - (np.cumsum(counts[order]) - counts[order]), counts[order])
    take += np.arange(int(counts.sum()))
    ids, cats = a.ids + b.ids, a.categorical + b.categorical
    out = Catalog(catalog.hashing_bits, catalog.max_named)
    out.insert(
        HashedItems(
            [ids[i] for i in order.tolist()],
            counts[order],
            np.concatenate((a.buckets, b.buckets))[take],
            np.concatenate((a.values, b.values))[take],
            np.concatenate((a.active, b.active))[order],
            np.concatenate((a.expires, b.expires))[order],
            [cats[i] for i in order.tolist()],
        )
    )
    return out


class Snapshots:
    """The last ``size`` catalogs :func:`as_of` built, by version, for a pass over a log."""

    def __init__(self, catalog: Catalog, size: int = 4) -> None:
        self.catalog = catalog
        self.size = size
        self._kept: OrderedDict[int, Catalog] = OrderedDict()

    def __call__(self, version: int) -> Catalog:
        out = self._kept.get(version)
        if out is None:
            out = self._kept[version] = as_of(self.catalog, version)
            if len(self._kept) > self.size:
                self._kept.popitem(last=False)
        self._kept.move_to_end(version)
        return out


@dataclass(frozen=True)
class CatalogReplay:
    """A catalog decision's candidates, rebuilt (:func:`rebuild`).

    Attributes
    ----------
    context : SparseVector
        The context as the model hashed it.
    catalog : Catalog
        A catalog holding the candidates' rows as they were at the decision (the model's catalog
        when it has not changed since).
    slots : ndarray of int64
        The candidates' slots in ``catalog``, in the decision's order.
    index : int
        The chosen item's position among them.
    probability : float
        The probability the chosen item was drawn with (logged).
    """

    context: SparseVector
    catalog: Catalog
    slots: np.ndarray
    index: int
    probability: float

    def action_input(self) -> ActionInput:
        """The context and every candidate as an action-feature learner takes them."""
        return self.catalog.action_input(self.context, self.slots)

    def pmf(self, learner: SquareCBADF, exploration: CatalogExploration | None = None) -> np.ndarray:
        """``learner``'s distribution over the candidates as its catalog decision computes it
        (:func:`service.catalog_explore.decide_parts`: the catalog's kernel, gamma scaled by K,
        inverse gap weighting), bit for bit."""
        exploration = exploration or CatalogExploration()
        pairs = catalog_pairs(learner, self.catalog, self.context, self.slots)
        cost = self.catalog.scores(learner.w_, self.context, self.slots, pairs)
        gamma_t = learner.params.gamma_scale * float(learner.t_) ** learner.params.gamma_exponent
        gamma = exploration.gamma(gamma_t, cost.size)
        return igw_scores(-cost, gamma, 0.0, np.ones(cost.size, np.bool_))[2]


def _positions(names: list[str | int], ids: list[str], what: str) -> list[int]:
    where = {i: k for k, i in enumerate(ids)}
    out = []
    for name in names:
        k = name if isinstance(name, int) else where.get(name)
        if k is None or not 0 <= k < len(ids):
            raise ReplayError(f"{what}: {name!r} is not one of the rebuilt candidates")
        out.append(k)
    return out


def rebuild(
    catalog: Catalog, record: Any, hashing_bits: int | None = None, snapshots: Snapshots | None = None
) -> CatalogReplay:
    """The candidates of the catalog decision ``record`` (a decision-log record or its JSON), rebuilt
    from ``catalog`` (module docstring); :class:`ReplayError` saying why they cannot be.
    ``snapshots``: reuse the catalogs built for earlier records."""
    memo = _get(record, "catalog")
    if memo is None:
        raise ReplayError("not a catalog decision's record")
    select = memo.get("select")
    if select is None or memo.get("at") is None or memo.get("index") is None:
        raise ReplayError("the record was made before catalog decisions kept their selection")
    if memo.get("sent"):
        raise ReplayError(
            f"the request sent {memo['sent']} actions with their features beside the catalog items; "
            "a record keeps the chosen one's only"
        )
    if "unkept" in select:
        raise ReplayError(f"the request named {select['unkept']} ids and labels, more than a record keeps")
    cat = snapshots(memo["version"]) if snapshots is not None else as_of(catalog, memo["version"])
    at = float(memo["at"])
    try:
        if select["ids"] is None:
            slots = cat.select_all(select["filter"], at)
        else:
            slots = cat.select(select["ids"], at)
            if select["filter"] is not None:
                slots = slots[np.isin(slots, cat.select_all(select["filter"], at))]
    except CatalogError as exc:
        raise ReplayError(
            f"the selection does not apply to the catalog at version {memo['version']}: {exc}"
        ) from None
    given = select["eligible"] if select["eligible"] is not None else select["excluded"]
    if given is not None:
        ids = [cat.id_of(int(s)) for s in slots]
        keep = np.zeros(slots.size, np.bool_)
        keep[_positions(given, ids, "eligible" if select["eligible"] is not None else "excluded")] = True
        slots = slots[~keep if select["eligible"] is None else keep]
    features = _get(record, "features")
    bits = hashing_bits if hashing_bits is not None else catalog.hashing_bits
    context = SparseVector(
        np.asarray(features["idx"], np.int64), np.asarray(features["val"], np.float64), 1 << bits
    )
    out = CatalogReplay(context, cat, slots, int(memo["index"]), float(_get(record, "probs")[0]))
    _check(out, record, memo)
    return out


def _check(out: CatalogReplay, record: Any, memo: Mapping[str, Any]) -> None:
    """:class:`ReplayError` unless the rebuilt candidates match what the record says of them."""
    if out.slots.size != memo["candidates"]:
        raise ReplayError(f"rebuilt {out.slots.size} candidates, the decision had {memo['candidates']}")
    shown = _get(record, "actions")[0]
    slot = int(out.slots[out.index]) if out.index < out.slots.size else -1
    v = out.catalog.features(slot) if slot >= 0 else None
    if (
        v is None
        or out.catalog.id_of(slot) != shown["id"]
        or v.idx.tolist() != list(shown["idx"])
        or v.val.tolist() != list(shown["val"])
    ):
        raise ReplayError(
            f"the rebuilt candidate at position {out.index} is not the record's item {shown['id']!r}"
        )


def dsjson_candidates(
    catalog: Catalog,
) -> Callable[[Any], tuple[list[tuple[list[int], list[float]]], int] | None]:
    """For the dsjson export with every candidate (:class:`service.decision_log.DsjsonWriter`): a
    record's candidates rebuilt from ``catalog`` (each one's hashed buckets and values, in order)
    and the shown item's position; None for a record that cannot be rebuilt (its line then keeps
    the chosen item alone)."""
    snapshots = Snapshots(catalog)

    def candidates(record: Any) -> Candidates | None:
        try:
            rep = rebuild(catalog, record, snapshots=snapshots)
        except ReplayError:
            return None
        vectors = [rep.catalog.features(s) for s in rep.slots.tolist()]
        return [(v.idx.tolist(), v.val.tolist()) for v in vectors], rep.index

    return candidates
