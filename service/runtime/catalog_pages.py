"""Pages of several slots over catalog candidates (issue 54 item 5, issue 53): ``POST /predict`` with
``slots`` and catalog candidates, decided slot by slot by the catalog's exploration.

**Which requests.** A page uses the catalog when a single decision with the same body would
(:func:`service.runtime.catalog_requests.catalog_request`: ``candidates``, ``filter`` or ``k``, or
neither ``actions`` nor ``candidates`` on a model with a catalog; then :class:`CatalogPageRequest`
takes the slots); its candidates are the same list
(sent ``actions`` first, then the catalog items) and the same checks apply (squarecb-adf, online
mode only, unknown or inactive ids 422). Fewer candidates than slots is a 422.

**The decision.** Slot ``s`` is one catalog decision (:func:`service.catalog_explore.decide_parts`:
inverse gap weighting over every candidate left, one ``rng.random()`` of the page's generator,
seeded by the decision id) on the context joined with the slot's features exactly as the CCB
reduction joins them (:func:`service.slots.slot_context`, what
:meth:`~service.slots.PageInput.slot_input` gives the slot), over the candidates the earlier slots
did not take and that the slot allows (its own ``eligible`` / ``excluded``, by id or position among
the request's candidates; its ``baseline`` checked, unused online, as for a page of sent actions).
Each slot reports the probability its item was drawn with given the earlier slots' items (exact:
the draw's own), so per-slot IPS with it is unbiased as for a page of sent actions
(:mod:`service.learners.ccb_adf`).

**What is stored** (a record per slot, :func:`service.pages.page_records`). The page's records keep
the chosen items only, never the catalog:

- ``x``: :meth:`service.slots.PageFeaturiser.pack` of the page whose candidates are the S chosen
  items in slot order (item of slot ``s`` is candidate ``s``), each with its features as the catalog
  held them at decision time, the request's context and the slots' features and ids; the same array
  in every slot's record, as for any page;
- slot ``s``'s decision: ``label = s``; ``probs`` over the S kept items, the item's conditional
  probability at ``s`` and 0 at the others (their probabilities in that slot are not kept, as a
  single catalog decision keeps only its item's); ``memo.catalog.candidates`` (how many candidates
  the slot was over) and ``memo.catalog.version`` (the catalog's version), the memo of a single
  catalog decision; ``page.*`` as for every page slot.

A one-slot page without slot features is stored as the single catalog decision of the same request
(:func:`service.pages.is_single`): the chosen item alone and ``probs = [p]``, the same record and
learning. Learning needs no catalog, and a later change of an item changes nothing learned.

**Learning.** Each slot learns as its shown item sent alone with the slot's context
(:func:`service.pages.learn_slot`, which knows a catalog page's slot by its ``memo.catalog.version``):
``squarecb-adf``'s step on that item's row, VW's MTR weight counting one candidate, as a single
catalog decision learns (:meth:`service.catalog_explore.CatalogDecision.learn_input`; why:
:mod:`service.catalog_explore`). Feedback per slot, a second reward's 409, expiry, activation,
``?wait`` and the decision log are the page machinery's, unchanged (:mod:`service.pages`); the
dsjson export writes the page as a CCB line whose ``_multi`` is the chosen items with their
features and whose ``_outcomes`` give each slot its item and probability
(:mod:`service.decision_log`). Per-slot off-policy evaluation leaves such pages out
(:mod:`service.slot_ope`: another policy's probability needs every candidate).

**The answer** (:class:`CatalogSlot`): per slot the chosen item, its position among the request's
candidates, its conditional probability, how many candidates the slot was over and the top ``k`` of
its ranking (``k`` as for single catalog decisions), never every probability.

**Consistency.** As for a single catalog decision: made with one reference to the catalog, in one
synchronous stretch (no await between ``catalog_request`` and :meth:`CatalogPageRequest.decide`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.actions import ActionInput
from service.catalog import Catalog, CatalogError
from service.catalog_explore import CatalogExploration, decide_parts
from service.features import FeatureError, SparseVector
from service.learners.base import Decision, ParamError
from service.learners.ccb_adf import PageDecision
from service.pages import CATALOG_VERSION
from service.runtime.catalog_requests import CatalogRequest, selection_memo
from service.sampling import decision_rng
from service.slots import MAX_SLOTS, PageInput, slot_context, slot_field

__all__ = ["CatalogPage", "CatalogPageRequest", "CatalogSlot"]


@dataclass(frozen=True, slots=True)
class CatalogSlot:
    """One slot of a page over catalog candidates, as answered.

    Attributes
    ----------
    slot_id : str
        The slot's id.
    item_id : str
        The chosen item's id.
    index : int
        Its position among the request's candidates (sent actions first).
    probability : float
        The probability it was drawn with, given the earlier slots' items.
    candidates : int
        How many candidates the slot was decided over (those left and allowed there).
    top : tuple of (str, int, float)
        The slot's ``k`` most probable candidates: id, position among the request's candidates,
        probability (descending; ties in candidate order).
    """

    slot_id: str
    item_id: str
    index: int
    probability: float
    candidates: int
    top: tuple[tuple[str, int, float], ...]


@dataclass(frozen=True, slots=True)
class CatalogPage:
    """A decided page over catalog candidates: what the records keep and what the answer says.

    Attributes
    ----------
    page : PageInput
        The chosen items (item of slot ``s`` is candidate ``s``) with the context and the slots.
    decision : PageDecision
        Slot ``s``'s decision over the chosen items (module docstring).
    slots : list of CatalogSlot
        The answer's slots, in page order.
    version : int
        The catalog's version the page saw.
    """

    page: PageInput
    decision: PageDecision
    slots: list[CatalogSlot]
    version: int


class CatalogPageRequest:
    """A page over the candidates of ``request`` (a predict's catalog request, selected and checked:
    :func:`~service.runtime.catalog_requests.catalog_request` without request-wide eligibility), with
    ``slots`` in page order (each a mapping or an object: ``id``, ``features``, ``eligible`` |
    ``excluded``, ``baseline``); decided by :meth:`decide` once the decision id is known, with no
    await in between."""

    def __init__(self, m: Any, request: CatalogRequest, slots: Sequence[Any]) -> None:
        if not 1 <= len(slots) <= MAX_SLOTS:
            raise FeatureError(f"slots: give 1 to {MAX_SLOTS} slots, got {len(slots)}")
        self.request = request
        self.total = int(request.positions.size)
        if self.total < len(slots):
            raise FeatureError(
                f"slots: {len(slots)} slots but {self.total} candidates: each slot shows its own item, so "
                "select at least as many candidates as slots"
            )
        self.featuriser = m.page_featuriser()
        self.vectors, self.ids = self.featuriser.slot_features(slots)
        self.slots = slots
        self.masks = [self._mask(s, slot) for s, slot in enumerate(slots)]

    def _mask(self, s: int, slot: Any) -> np.ndarray | None:
        """The candidates slot ``s`` allows (a boolean mask over the request's), None for all; its
        baseline checked (:meth:`CatalogRequest.allowed`). :class:`ParamError` naming ``slots.{s}``."""
        try:
            return self.request.allowed(
                slot_field(slot, "eligible"), slot_field(slot, "excluded"), slot_field(slot, "baseline")
            )
        except ParamError as exc:
            raise ParamError(f"slots.{s}: {exc}") from None

    def decide(self, decision_id: str) -> CatalogPage:
        """Every slot's catalog decision in page order (module docstring), the page's generator
        seeded by ``decision_id``; :class:`FeatureError` when a slot has no candidate left."""
        req = self.request
        rng = decision_rng(decision_id)
        exploration = CatalogExploration(top_k=req.k)
        n_slots = len(self.ids)
        taken = np.zeros(self.total, np.bool_)
        chosen: list[tuple[Catalog, int]] = []
        answers: list[CatalogSlot] = []
        decisions: list[Decision] = []
        for s in range(n_slots):
            mask = self.masks[s]
            allowed = ~taken if mask is None else mask & ~taken
            if not allowed.any():
                raise FeatureError(
                    f"slots.{s}: no candidate left for slot {self.ids[s]!r} (the earlier slots took every "
                    "candidate it allows)"
                )
            where = np.flatnonzero(allowed)  # the slot's candidates' positions in the request
            parts, at = [], 0
            for catalog, rows in req.parts:
                kept = rows[allowed[at : at + len(rows)]]
                at += len(rows)
                if len(kept):  # decide_parts numbers the non-empty parts only
                    parts.append((catalog, kept))
            context = slot_context(req.context, self.vectors[s])
            try:
                d = decide_parts(req.learner, parts, context, rng, exploration)
            except CatalogError as exc:
                raise FeatureError(str(exc)) from None
            chosen.append((parts[d.part][0], d.slot))
            index = int(where[d.index])
            taken[index] = True
            probs = np.zeros(n_slots)
            probs[s] = d.probability
            memo: dict[str, Any] = {"catalog.candidates": d.candidates, CATALOG_VERSION: req.version}
            if n_slots == 1:  # stored as the single catalog decision: its memo too, which rebuilds it
                eligible = slot_field(self.slots[0], "eligible")
                excluded = slot_field(self.slots[0], "excluded")
                memo |= {
                    "catalog.at": req.now, "catalog.index": d.index, "catalog.sent": req.n_sent,
                    "catalog.select": selection_memo(req.query, eligible, excluded),
                }  # fmt: skip
            decisions.append(Decision(probs, s, memo))
            at_top = where[list(d.top_index)].tolist()
            top = tuple((i, k, q) for (i, q), k in zip(d.top, at_top, strict=True))
            answers.append(CatalogSlot(self.ids[s], d.item_id, index, d.probability, d.candidates, top))
        page = PageInput(_chosen_input(req.context, chosen), self.vectors, self.ids)
        return CatalogPage(page, PageDecision(decisions), answers, req.version)


def _chosen_input(context: SparseVector, chosen: list[tuple[Catalog, int]]) -> ActionInput:
    """The chosen items, in slot order, as candidates sent with their features (copies of the
    catalogs' rows: a later change of an item leaves the record as decided)."""
    if len(chosen) == 1:  # bit for bit the single catalog decision's record (module docstring)
        catalog, row = chosen[0]
        return catalog.action_input(context, np.array([row], np.int64))
    vecs = [c.features(r) for c, r in chosen]
    ptr = np.concatenate(([0], np.cumsum([v.nnz for v in vecs]))).astype(np.int64)
    idx = np.concatenate([v.idx for v in vecs]).astype(np.int64)
    val = np.concatenate([v.val for v in vecs]).astype(np.float64)
    return ActionInput([c.id_of(r) for c, r in chosen], context, ptr, idx, val, chosen[0][0].hashing_bits)
