"""``POST /predict`` over a model's catalog (issue 54): catalog ids as candidates, or the whole
active catalog, decided by :func:`service.catalog_explore.decide_parts`.

**Which requests.** A request to an action-feature model uses the catalog when it gives
``candidates`` (catalog item ids), a ``filter`` or ``k``, or when it gives neither ``actions`` nor
``candidates`` and the model has a catalog (then every active, unexpired item is a candidate). A
request with ``actions`` alone is today's (:mod:`service.actions`), byte for byte.

**Mixed.** ``actions`` (sent with their features) and catalog items may be given together: the
decision is over the sent actions, in their order, then the catalog items (``candidates`` in their
order, or the selected catalog in registration order); ``label_index`` and the ranking's indices
are positions in that list. The sent actions are hashed by a catalog of their own (the same hashing
as the model's catalog and its action featuriser), so every candidate's cost comes from the same
kernel. An id both sent and selected from the catalog is refused (which features would be meant?).

**Selection.** ``candidates``: an unknown, inactive or expired id, or one given twice, is a 422
naming it (:meth:`Catalog.select`). ``filter`` (``{name: value or [values]}`` on items' string and
boolean features, :meth:`Catalog.select_all`) keeps the catalog items whose value of every name
is one of those given (the listed ``candidates``, or the whole catalog); the sent actions are not
filtered. ``eligible`` / ``excluded`` name candidates by id or position, as for actions.

**What is recorded** (:meth:`CatalogRequest.decide`): the decision as if the chosen item alone had
been sent with its features (its features as the catalog held them at decision time, and the
context), with the probability it was drawn with: the learn event therefore needs no catalog, a
later change of the item cannot change what is learned, and the decision log and its dsjson
export keep the chosen item's id, features and probability (the rest of the catalog is not copied
into each record: 10,000 items would be megabytes per decision). The memo adds what rebuilds the
candidates from the catalog's history (:mod:`service.catalog_replay`): the catalog's version
(``catalog.version``), the time expiry was judged at (``catalog.at``), how many candidates there
were (``catalog.candidates``) and the chosen one's position among them (``catalog.index``), how
many actions were sent with features (``catalog.sent``), and the selection as given
(``catalog.select``: the JSON of ``{"ids", "filter", "eligible", "excluded"}``, bytes as a uint8
array so that the store's decision layouts do not vary per request). A selection naming more than
:data:`MEMO_NAMES` ids and labels together is not kept (``{"unkept": n}``): a record of 10,000
named ids would be 100 KB or more, and the decision log keeps 100,000 records; such a decision's
rebuild says so. The learner
learns it as the shown item sent alone (:meth:`CatalogDecision.learn_input
<service.catalog_explore.CatalogDecision.learn_input>`; why: :mod:`service.catalog_explore`).

**Consistency.** Selection, scoring, the draw and the copy of the chosen item's features run in one
synchronous stretch on the event loop with one reference to the model's catalog. The catalog
changes only when the model applies an ``items`` event of its log (:mod:`service.runtime.items`),
on the event loop too, between two requests (the items are hashed beforehand in a thread, on a
catalog of their own), so no change lands inside a decision and every decision sees one version;
no lock is needed, and a write costs predicts only the time its event takes to apply.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.actions import ActionFeaturiser, ActionInput, _action_fields
from service.catalog import Catalog, CatalogError
from service.catalog_explore import CatalogExploration, decide_parts
from service.features import FeatureError, FeatureValue, SparseVector
from service.learners.base import Decision, ParamError
from service.learners.squarecb_adf import SquareCBADF
from service.sampling import decision_rng

__all__ = [
    "DEFAULT_TOP",
    "MAX_TOP",
    "MEMO_NAMES",
    "CatalogAnswer",
    "CatalogQuery",
    "CatalogRequest",
    "catalog_request",
    "selection_memo",
]

#: Items of the ranking an answer carries by default, and at most (an answer stays a few KB).
DEFAULT_TOP = 10
MAX_TOP = 100
#: Candidate ids, eligible and excluded labels a record's memo keeps at most (module docstring): a
#: thousand ids of 20 characters are about 23 KB, as a decision over 100 actions of 10 features.
MEMO_NAMES = 1_000


@dataclass(frozen=True, slots=True)
class CatalogQuery:
    """What a predict asks of the catalog (the body's ``candidates``, ``filter`` and ``k``)."""

    candidates: Sequence[str] | None = None
    where: Mapping[str, Any] | None = None
    k: int | None = None


@dataclass(frozen=True, slots=True)
class CatalogAnswer:
    """What a catalog decision's answer carries beside the chosen item.

    Attributes
    ----------
    top : tuple of (str, int, float)
        The ``k`` most probable candidates: id, position among the candidates, probability
        (descending; ties in candidate order).
    candidates : int
        How many candidates the decision was over (after ``eligible`` / ``excluded``).
    version : int
        The catalog's version the decision saw.
    index : int
        The chosen item's position among the candidates.
    """

    top: tuple[tuple[str, int, float], ...]
    candidates: int
    version: int
    index: int


def catalog_request(
    m: Any,
    features: Sequence[float] | Mapping[str, FeatureValue],
    actions: Sequence[Any] | None,
    query: CatalogQuery | None,
    eligible: Sequence[str | int] | None,
    excluded: Sequence[str | int] | None,
    baseline: str | int | None,
    clock: Callable[[], float],
) -> CatalogRequest | None:
    """The catalog request of a predict to model ``m`` (a :class:`~service.runtime.model.ModelRuntime`),
    selected and checked (items expired at ``clock()`` left out); None when the request does not use
    the catalog (module docstring), at the cost of two checks."""
    catalog: Catalog | None = m.catalog  # one reference for the whole decision (module docstring)
    if query is None and (actions is not None or catalog is None or len(catalog) == 0):
        return None  # today's request (or today's 422 asking for actions: the catalog is empty)
    if catalog is None:  # a label model (an action-feature model always has one, maybe empty)
        raise FeatureError(
            f"candidates: model {m.name!r} has fixed labels; catalog candidates need a model with "
            '"actions": "features"'
        )
    query = query or CatalogQuery()
    if actions is not None and query.candidates is None and query.where is None:
        raise ParamError(  # a k alone would turn today's request into a catalog decision
            "k: the top k answers catalog decisions (candidates, filter, or neither actions nor "
            "candidates); a request with actions alone answers every probability"
        )
    return CatalogRequest(m, catalog, features, actions, query, eligible, excluded, baseline, clock())


class CatalogRequest:
    """One predict over catalog items (and sent actions), selected and checked when made; decided
    by :meth:`decide` once the decision id is known. No await may come between the two (module
    docstring: the catalog is read once)."""

    def __init__(
        self,
        m: Any,
        catalog: Catalog,
        features: Sequence[float] | Mapping[str, FeatureValue],
        actions: Sequence[Any] | None,
        query: CatalogQuery,
        eligible: Sequence[str | int] | None,
        excluded: Sequence[str | int] | None,
        baseline: str | int | None,
        now: float,
    ) -> None:
        self.m = m
        self.learner = m.learner
        if not isinstance(self.learner, SquareCBADF):
            raise ParamError(
                f"candidates: model {m.name!r} uses {self.learner.name}; catalog decisions are made by "
                "squarecb-adf"
            )
        if m.rollout.mode != "online":
            raise ParamError(
                f"candidates: model {m.name!r} is in {m.rollout.mode} mode; catalog decisions are served "
                "in online mode only"
            )
        k = DEFAULT_TOP if query.k is None else query.k
        if not 1 <= k <= MAX_TOP:
            raise ParamError(f"k: the top k of the ranking, 1 to {MAX_TOP} (got {k})")
        self.k = k
        f: ActionFeaturiser = m.featurise
        if not isinstance(features, Mapping):
            raise FeatureError("features: an action model takes named context features {name: value}")
        self.context: SparseVector = f.context(features)  # type: ignore[assignment]
        self.catalog = catalog
        self.version, self.now = catalog.version, now
        self.n_sent = 0 if actions is None else len(actions)
        self.query = query  # a one-slot page's memo names its slot's eligibility (catalog_pages)
        self.selection = selection_memo(query, eligible, excluded)
        self.parts: list[tuple[Catalog, np.ndarray]] = []
        sent = self._sent(f, actions) if actions is not None else None
        if sent is not None:
            self.parts.append((sent, np.arange(len(sent), dtype=np.int64)))
        if query.candidates is not None or query.where is not None or actions is None:
            self.parts.append((catalog, self._select(query, now)))
        self._check_overlap(sent)
        self._where: list[np.ndarray] | None = None  # built by the first id _position looks up
        self._restrict(eligible, excluded, baseline)

    # -- selection -------------------------------------------------------------------------------

    def _sent(self, f: ActionFeaturiser, actions: Sequence[Any]) -> Catalog:
        """The sent actions hashed into a catalog of their own (the action featuriser's hashing)."""
        if len(actions) > f.max_actions:
            raise FeatureError(
                f"actions: {len(actions)} candidates, at most {f.max_actions} allowed "
                "(CLICKBOOST_MAX_ACTIONS)"
            )
        sent = Catalog(f.hashing_bits, f.action.max_named)
        try:
            fields = (_action_fields(a, n) for n, a in enumerate(actions))
            sent.put_many({"id": i, "features": v} for i, v in fields)
        except CatalogError as exc:
            raise FeatureError(f"actions{str(exc).removeprefix('items')}") from None
        return sent

    def _select(self, query: CatalogQuery, now: float) -> np.ndarray:
        catalog = self.catalog
        try:
            if query.candidates is None:
                return catalog.select_all(query.where, now)
            if not query.candidates:
                raise FeatureError("candidates: give at least one catalog item id")
            slots = catalog.select(query.candidates, now)
            if query.where is not None:
                slots = slots[np.isin(slots, catalog.select_all(query.where, now))]
            return slots
        except CatalogError as exc:
            raise FeatureError(str(exc).replace("where.", "filter.", 1)) from None

    def _check_overlap(self, sent: Catalog | None) -> None:
        if sent is None or len(self.parts) < 2:
            return
        catalog, slots = self.parts[1]
        chosen = np.zeros(catalog.n_slots, np.bool_)
        chosen[slots] = True
        for a in range(len(sent)):
            slot = catalog.slot_of(sent.id_of(a))
            if slot is not None and chosen[slot]:
                raise FeatureError(
                    f"actions.{a}.id: {sent.id_of(a)!r} is also a catalog candidate; send an item either "
                    "with its features or by its catalog id"
                )

    def _position(self, name: str | int, what: str) -> int:
        """The position among the candidates of ``name`` (an id or a position); :class:`ParamError`."""
        total = sum(len(s) for _, s in self.parts)
        if isinstance(name, int):
            if not 0 <= name < total:
                raise ParamError(f"{what}: unknown candidate index {name} (this request has {total})")
            return name
        if self._where is None:  # per part, each slot's position among the candidates (-1: none)
            self._where, offset = [], 0
            for catalog, slots in self.parts:
                where = np.full(catalog.n_slots, -1, np.int64)
                where[slots] = offset + np.arange(len(slots))
                self._where.append(where)
                offset += len(slots)
        for (catalog, _), where in zip(self.parts, self._where, strict=True):
            slot = catalog.slot_of(name)
            if slot is not None and where[slot] >= 0:
                return int(where[slot])
        raise ParamError(f"{what}: {name!r} is not one of this request's candidates")

    def _restrict(
        self,
        eligible: Sequence[str | int] | None,
        excluded: Sequence[str | int] | None,
        baseline: str | int | None,
    ) -> None:
        """Keep the ``eligible`` candidates (or all but the ``excluded``); check the ``baseline``.
        ``self.positions``: each kept candidate's position in the request's list."""
        total = sum(len(s) for _, s in self.parts)
        if total == 0:
            raise FeatureError("candidates: no active catalog item is selected (check the filter)")
        keep = self.allowed(eligible, excluded, baseline)
        self.positions = np.arange(total, dtype=np.int64) if keep is None else np.flatnonzero(keep)
        if keep is not None:
            offset, parts = 0, []
            for catalog, slots in self.parts:
                parts.append((catalog, slots[keep[offset : offset + len(slots)]]))
                offset += len(slots)
            self.parts = parts

    def allowed(
        self,
        eligible: Sequence[str | int] | None,
        excluded: Sequence[str | int] | None,
        baseline: str | int | None,
    ) -> np.ndarray | None:
        """The candidates ``eligible`` (or all but the ``excluded``) allow, a boolean mask over the
        request's list (None: all), the ``baseline`` checked; :class:`ParamError`. A page's slots
        (:mod:`service.runtime.catalog_pages`) ask it per slot."""
        total = sum(len(s) for _, s in self.parts)
        keep: np.ndarray | None = None
        if eligible is not None and excluded is not None:
            raise ParamError("give eligible or excluded labels, not both")
        given = eligible if eligible is not None else excluded
        if given is not None:
            what = "eligible" if eligible is not None else "excluded"
            keep = np.zeros(total, np.bool_)
            keep[[self._position(x, what) for x in given]] = True
            if excluded is not None:
                keep = ~keep
            if not keep.any():
                why = "eligible is empty" if eligible is not None else "every candidate is excluded"
                raise ParamError(f"no eligible action: {why}")
        if baseline is not None:
            b = self._position(baseline, "baseline")
            if keep is not None and not keep[b]:
                raise ParamError(f"baseline action {baseline!r} is not eligible for this request")
        return keep

    # -- the decision ----------------------------------------------------------------------------

    def decide(self, decision_id: str) -> tuple[ActionInput, Decision, CatalogAnswer]:
        """The decision, sampled with ``decision_id`` as seed: what the record keeps (the chosen
        item alone with its features, as sent with them; module docstring), the decision over it
        (its probability), and the answer's top ``k``."""
        rng = decision_rng(decision_id)
        # decide_parts numbers the non-empty parts only (every sent action may be excluded)
        parts = [(c, rows) for c, rows in self.parts if len(rows)]
        d = decide_parts(self.learner, parts, self.context, rng, CatalogExploration(top_k=self.k))
        catalog = parts[d.part][0]
        x = catalog.action_input(self.context, np.array([d.slot], np.int64))
        memo = {
            "catalog.candidates": d.candidates, "catalog.version": self.version, "catalog.at": self.now,
            "catalog.index": d.index, "catalog.sent": self.n_sent, "catalog.select": self.selection,
        }  # fmt: skip
        pos = self.positions
        top = tuple((item_id, int(pos[i]), q) for (item_id, q), i in zip(d.top, d.top_index, strict=True))
        answer = CatalogAnswer(top, d.candidates, self.version, int(pos[d.index]))
        return x, Decision(np.array([d.probability]), 0, memo), answer


def selection_memo(
    query: CatalogQuery, eligible: Sequence[str | int] | None, excluded: Sequence[str | int] | None
) -> np.ndarray:
    """The memo's ``catalog.select`` (module docstring): the JSON of the selection as given, as a
    uint8 array, or of ``{"unkept": n}`` above :data:`MEMO_NAMES` names."""
    names = sum(len(x) for x in (query.candidates, eligible, excluded) if x is not None)
    if names > MEMO_NAMES:
        doc: dict[str, Any] = {"unkept": names}
    else:
        doc = {
            "ids": None if query.candidates is None else list(query.candidates),
            "filter": None if query.where is None else dict(query.where),
            "eligible": None if eligible is None else list(eligible),
            "excluded": None if excluded is None else list(excluded),
        }
    return np.frombuffer(json.dumps(doc, separators=(",", ":")).encode(), np.uint8).copy()
