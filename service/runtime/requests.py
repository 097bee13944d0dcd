"""The request path: ``POST /predict``, ``POST /feedback`` and the activation, route to store.

Which route calls what (the handlers in :mod:`service.api.predict` parse the body, call the
runtime and shape the answer; :mod:`service.api.personalizer`'s rank, reward and activate call
the same three):

- ``POST /predict`` -> ``Runtime.predict`` = :meth:`RequestPath.predict`: find the model
  (:meth:`Registry.resolve <service.runtime.registry.Registry.resolve>`: this process's models,
  the store asked for a name it does not know yet), featurise the request
  (:meth:`ModelRuntime.featurise_request <service.runtime.model.ModelRuntime.featurise_request>`),
  decide (:meth:`ModelRuntime.decide <service.runtime.model.ModelRuntime.decide>`: the learner's
  distribution, sampled with the decision id as seed; the model is only read), then one store call,
  ``store.put_decision``: the pending decision and its reward window (kept in memory and recorded
  later while the store is down), and a count for the dashboard.
- ``POST /feedback`` -> ``Runtime.feedback`` = :meth:`RequestPath.feedback`: one store call,
  ``store.claim_and_append``, claims the decision exactly once (whichever of feedback and expiry
  comes first) and appends its learn event to the model's log in the same step; the answer is 200
  once the event is stored. The model learns when it applies its log: the tail loop
  (:mod:`service.runtime.replication`) does it on every replica, or this call does it at once with
  ``?wait=true`` (:meth:`Replication.wait_applied
  <service.runtime.replication.Replication.wait_applied>`).
- ``POST /decisions/{id}/activate`` -> ``Runtime.activate`` = :meth:`RequestPath.activate`: a
  deferred decision shown (issue 38), ``store.activate``, learned as a feedback if one was held.

Pages of several slots (issue 53, :mod:`service.pages`): ``POST /predict`` with ``slots`` ->
``Runtime.predict_page`` = :meth:`RequestPath.predict_page` (featurise the page, decide every slot
with :meth:`ModelRuntime.decide_page <service.runtime.model.ModelRuntime.decide_page>`, one store
call ``store.put_page``: a record per slot); ``POST /feedback`` with ``slot`` ->
:meth:`RequestPath.feedback_slot` (``store.claim_slot``: each slot's reward once); the activation
route -> :meth:`RequestPath.activate_page` (``store.activate_page``: every slot of a page, or the
one decision).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from service.features import FeatureValue
from service.learners.base import Decision, ParamError
from service.learners.ccb_adf import PageDecision
from service.pages import is_single, page_records, page_slot
from service.runtime.catalog_pages import CatalogPage, CatalogPageRequest
from service.runtime.catalog_requests import CatalogAnswer, CatalogQuery, catalog_request
from service.runtime.errors import check_event_id
from service.runtime.model import ModelRuntime
from service.runtime.registry import Registry
from service.runtime.replication import Replication
from service.runtime.reports import Reports
from service.runtime.state import Shared
from service.sampling import DecisionIds
from service.slots import MAX_SLOTS, slot_field, unpack_page
from service.store import (
    ActivateOutcome,
    ActivateStatus,
    Claim,
    ClaimOutcome,
    ClaimStatus,
    DecisionRecord,
    StoreUnavailableError,
    UnknownModelError,
)
from service.store.base import Reward, slot_decision_id

__all__ = [
    "RECOVERY_SECONDS",
    "SLOT_ID_MEMO",
    "PageAnsweredError",
    "PagePrediction",
    "Prediction",
    "RequestPath",
    "SlotPrediction",
    "UnknownSlotError",
]

# For RECOVERY_SECONDS after it last saw the store down, a replica answers an unknown decision id
# with 503 rather than 404: it may be one that another replica made during the outage and is still
# recording (docs/ARCHITECTURE.md, "When Redis is down").
RECOVERY_SECONDS = 2.0

#: The memo key that keeps a slot's id in the record of a one-slot page stored as a single decision
#: (:func:`service.pages.is_single`: its record is today's, which has no page to read the id from);
#: set only for an id other than the default "0", so a page of one default slot is today's record
#: byte for byte.
SLOT_ID_MEMO = "slot_id"

_Answer = TypeVar("_Answer", ClaimOutcome, ActivateOutcome, list[ActivateOutcome])


class UnknownSlotError(ParamError):
    """A feedback names a slot that its page does not have (422, naming the page's slots)."""


class PageAnsweredError(Exception):
    """A feedback names a slot by its id, and no slot of the page is pending any more (every one
    answered or expired): the id cannot be checked against the page's slots, nothing is learned
    (409; naming the slot by its index gives that slot's own first outcome)."""


@dataclass(frozen=True, slots=True)
class Prediction:
    """What ``POST /predict`` returns."""

    decision_id: str
    model: str
    decision: Decision
    model_version: int
    label: str
    labels: list[str]  # the model's label names, by index
    catalog: CatalogAnswer | None = None  # a catalog decision's top k (service.runtime.catalog_requests)


@dataclass(frozen=True, slots=True)
class SlotPrediction:
    """One slot of a :class:`PagePrediction`, in page order."""

    slot_id: str
    decision: Decision  # the slot's decision: probs given the earlier slots' choices
    label: str  # the chosen candidate's id
    ranking: list[int]  # the candidates left to the slot and allowed there, most probable first


@dataclass(frozen=True, slots=True)
class PagePrediction:
    """What ``POST /predict`` with ``slots`` returns (issue 53)."""

    decision_id: str
    model: str
    decision: PageDecision
    model_version: int
    labels: list[str]  # the request's candidate ids, by index (a catalog page's: the chosen items)
    slots: list[SlotPrediction]  # empty for a page over catalog candidates: its answer is ``catalog``
    catalog: CatalogPage | None = None  # a page over catalog candidates (service.runtime.catalog_pages)


def _slot_masks(
    m: ModelRuntime, names: list[str], slots: Sequence[Any]
) -> tuple[list[np.ndarray | None] | None, list[int | None] | None]:
    """Each slot's eligible mask over the page's candidates ``names`` and its baseline's index
    (:meth:`ModelRuntime.label_mask`, :meth:`ModelRuntime.baseline_index`), None for a page where no
    slot gives one; a :class:`ParamError` naming ``slots.{s}``."""
    masks: list[np.ndarray | None] = []
    baselines: list[int | None] = []
    for s, slot in enumerate(slots):
        try:
            mask = m.label_mask(slot_field(slot, "eligible"), slot_field(slot, "excluded"), names)
            masks.append(mask)
            baselines.append(m.baseline_index(slot_field(slot, "baseline"), mask, names))
        except ParamError as exc:
            raise ParamError(f"slots.{s}: {exc}") from None
    return (
        None if all(k is None for k in masks) else masks,
        None if all(b is None for b in baselines) else baselines,
    )


def _ranking(d: Decision, allowed: np.ndarray) -> list[int]:
    """The candidates ``allowed`` (a boolean mask), most probable first, ties in candidate order."""
    probs = d.probs.tolist()
    return sorted(allowed.nonzero()[0].tolist(), key=lambda i: -probs[i])


def _as_bit(reward: Reward) -> Reward:
    """A reward of 0.0 or 1.0 as the click bit (so it behaves exactly as a click / no click)."""
    if not isinstance(reward, bool) and reward in (0.0, 1.0):
        return reward == 1.0
    return reward


def _no_such_slot(decision_id: str, slot: int | str, ids: list[str]) -> str:
    """The message of an :class:`UnknownSlotError`: the slot named and the page's slots."""
    named = f"index {slot}" if isinstance(slot, int) else repr(slot)
    listed = ", ".join(repr(i) for i in ids[:10]) + (", ..." if len(ids) > 10 else "")
    return (
        f"slot: decision {decision_id!r} has no slot {named}; its {len(ids)} slot(s), by index from 0: "
        f"{listed}"
    )


class RequestPath:
    """Decisions, their feedback and their activation.

    Parameters
    ----------
    shared : Shared
        The runtime's shared state.
    registry : Registry
        Finds the model a request names.
    replication : Replication
        Applies a feedback's event before the answer when the caller waits for it.
    reports : Reports
        Counts decisions and feedback per minute for the dashboard.
    """

    def __init__(
        self, shared: Shared, registry: Registry, replication: Replication, reports: Reports
    ) -> None:
        self.shared = shared
        self.registry = registry
        self.replication = replication
        self.reports = reports
        seed = shared.settings.decision_id_seed
        self.ids = DecisionIds() if seed is None else DecisionIds.for_seed(seed)

    async def predict(
        self,
        name: str | None,
        features: Sequence[float] | Mapping[str, FeatureValue],
        eligible: Sequence[str | int] | None = None,
        excluded: Sequence[str | int] | None = None,
        baseline: str | int | None = None,
        *,
        event_id: str | None = None,
        defer: bool = False,
        actions: Sequence[Any] | None = None,
        memo: Mapping[str, str] | None = None,
        catalog: CatalogQuery | None = None,
    ) -> Prediction:
        """Featurise, decide among the labels the request allows (:meth:`ModelRuntime.label_mask`),
        record the pending decision (the reward window starts now), also in the decision log when
        the model keeps one. The mask travels in the decision's memo, so the learn event and the
        decision log carry it. ``baseline``: the label the caller's own policy would show, served
        in logging and apprentice mode (:meth:`ModelRuntime.decide`).

        ``event_id``: a client-chosen id (:func:`check_event_id`, else :class:`ParamError`); the
        decision id is then ``store.route(model, event_id)``, deterministic, and seeds the sampling
        as a drawn id does. It is taken once: :class:`DecisionExistsError` (409) while its pending
        record or its claim is known (the store inserts it only if absent). While the store is down
        the decision is served and saved once it is back, as any other (learning from it is then
        best effort: an id found taken then is not saved). ``defer``: the decision is learned only
        if :meth:`activate` comes within its reward window (issue 38).

        ``actions``: the candidates of an action-feature model (issue 39, :mod:`service.actions`),
        ``{"id", "features"}`` each; ``eligible``, ``excluded`` and ``baseline`` then name action
        ids (or indices in the request), and the prediction's labels are the candidates' ids.

        ``memo``: kept in the decision's memo beside the learner's (``store.get_decision`` reads it
        back): a multi-slot rank's slot id, which its reward must name (issue 51).

        ``catalog``: the request's catalog candidates, filter and top k (issue 54); a request that
        uses the model's catalog is decided by :mod:`service.runtime.catalog_requests`.
        """
        m = await self.registry.resolve(name)
        cat = catalog_request(m, features, actions, catalog, eligible, excluded, baseline, self.shared.clock)
        if cat is None:
            x = m.featurise_request(features, actions)
            names = m.names(x)
            mask = m.label_mask(eligible, excluded, names)
        drawn = self.ids.new() if event_id is None else check_event_id(event_id)
        decision_id = self.shared.store.route(m.name, drawn)
        top = None
        if cat is None:
            d = m.decide(x, decision_id, mask, baseline)
        else:  # no await since catalog_request: the catalog read once (catalog_requests' docstring)
            x, d, top = cat.decide(decision_id)
            names = x.ids
        if memo:
            d.memo = {**d.memo, **memo}
        now = self.shared.clock()
        record = DecisionRecord(
            decision_id,
            m.name,
            m.featurise.pack(x),
            d.to_state(),
            m.position,
            now,
            now + m.spec.reward_window_seconds,
            m.spec.log_decisions,
            defer,
        )
        await self._save(m, record)
        counts = self.reports.minute(m.name, now)
        counts.decisions += 1
        # max of a short list costs a fraction of numpy's max call (~0.3 against ~1.5 us)
        p = d.probs
        if top is not None:  # the record keeps the chosen item alone: the most probable is in the top
            counts.exploration += 1.0 - top.top[0][2]
        else:
            counts.exploration += 1.0 - (max(p.tolist()) if p.size <= 64 else float(p.max()))
        return Prediction(decision_id, m.name, d, m.position, names[d.label], names, top)

    async def _save(self, m: ModelRuntime, record: DecisionRecord | tuple[DecisionRecord, ...]) -> None:
        """Store a decision's pending record (``store.put_decision``) or a page's slot records
        (``store.put_page``); while the store is down keep serving: the tail loop records it once the
        store is back (:meth:`Shared.save_unsaved`)."""
        try:
            if isinstance(record, tuple):
                await self.shared.store.put_page(record)
            else:
                await self.shared.store.put_decision(record)
        except StoreUnavailableError:
            self.shared.store_failed()
            self.shared.unsaved.append(record)
        except UnknownModelError:  # deleted through another replica: stop serving it now
            if self.shared.models.get(m.name) is m:
                del self.shared.models[m.name]
            raise UnknownModelError(f"unknown model {m.name!r} (deleted)") from None
        m.trim_due = True
        m.next_expiry = min(m.next_expiry, (record[0] if isinstance(record, tuple) else record).expires_at)

    async def predict_page(
        self,
        name: str | None,
        features: Sequence[float] | Mapping[str, FeatureValue],
        actions: Sequence[Any] | None,
        slots: Sequence[Any],
        *,
        event_id: str | None = None,
        defer: bool = False,
        memo: Mapping[str, str] | None = None,
        catalog: CatalogQuery | None = None,
    ) -> PagePrediction:
        """Decide a page of several slots (issue 53): each slot's candidate among those the earlier
        slots left, none shown twice (:meth:`ModelRuntime.decide_page`, the CCB reduction), one
        decision id for the page, a pending record per slot (:func:`service.pages.page_records`,
        ``store.put_page``: whole or not at all), each with its reward window from now.

        ``slots``: in page order, each a mapping or an object with ``id`` (default its index as a
        string), ``features`` (named; default none), and per slot ``eligible`` or ``excluded``
        (candidate ids or indices in ``actions``: :meth:`ModelRuntime.label_mask`) and ``baseline``
        (the candidate the caller's own policy would show there, :meth:`ModelRuntime.baseline_index`).
        A slot's problems are :class:`ParamError` / :class:`FeatureError` (422) naming ``slots.{s}``;
        fewer candidates than slots, or a slot with none left, a :class:`FeatureError`.

        ``event_id``, ``defer`` and ``memo`` as for :meth:`predict`; ``defer`` covers the whole
        page (:meth:`activate_page`), ``memo`` goes into every slot's decision. A one-slot page
        without slot features is stored as :meth:`predict` stores its decision (the same record, the
        same learning), its slot's id kept in the memo (:data:`SLOT_ID_MEMO`) unless it is "0".
        While the store is down the page is served and saved later, as a decision is.

        ``catalog``: as for :meth:`predict`; a page that uses the model's catalog is decided by
        :mod:`service.runtime.catalog_pages` (each slot over the catalog candidates left, the chosen
        items alone kept) and its prediction's ``catalog`` holds the answer.
        """
        m = await self.registry.resolve(name)
        request = catalog_request(m, features, actions, catalog, None, None, None, self.shared.clock)
        cat = None if request is None else CatalogPageRequest(m, request, slots)
        if cat is None:
            page = m.featurise_page(features, actions or (), slots)
            masks, baselines = _slot_masks(m, page.actions.ids, slots)
        drawn = self.ids.new() if event_id is None else check_event_id(event_id)
        decision_id = self.shared.store.route(m.name, drawn)
        chosen = None
        if cat is None:
            d = m.decide_page(page, decision_id, masks, baselines)
        else:  # no await since catalog_request: the catalog read once (catalog_pages' docstring)
            chosen = cat.decide(decision_id)
            page, d = chosen.page, chosen.decision
        extra = dict(memo or {})
        if is_single(page) and page.ids[0] != "0":
            extra[SLOT_ID_MEMO] = page.ids[0]
        if extra:
            for sd in d.slots:
                sd.memo = {**sd.memo, **extra}
        now = self.shared.clock()
        base = DecisionRecord(
            decision_id,
            m.name,
            np.zeros(0),  # each slot's record keeps the page's pack (page_records)
            {},
            m.position,
            now,
            now + m.spec.reward_window_seconds,
            m.spec.log_decisions,
            defer,
        )
        records = page_records(base, page, m.pack_page(page), d)
        await self._save(m, records[0] if len(records) == 1 else tuple(records))
        counts = self.reports.minute(m.name, now)
        names = page.actions.ids
        taken = np.zeros(page.n, dtype=np.bool_)
        out = []
        for s, sd in enumerate(d.slots):  # counted per slot, as the stores count a page's records
            counts.decisions += 1
            if chosen is not None:  # the records keep the chosen items alone: the most probable is the top's
                counts.exploration += 1.0 - chosen.slots[s].top[0][2]
                continue
            counts.exploration += 1.0 - float(sd.probs.max())
            allowed = ~taken if masks is None or masks[s] is None else masks[s] & ~taken
            out.append(SlotPrediction(page.ids[s], sd, names[sd.label], _ranking(sd, allowed)))
            taken[sd.label] = True
        return PagePrediction(decision_id, m.name, d, m.position, names, out, chosen)

    async def feedback(
        self, decision_id: str, reward: Reward, wait: bool, model: str | None = None
    ) -> tuple[ClaimOutcome, bool]:
        """Claim the decision and append its learn event; with ``wait``, apply it here first.

        ``reward``: the click bit, or a graded reward in [0, 1] (0 and 1 are taken as the bit, so
        they behave exactly as a click / no click). A deferred decision not activated yet holds the
        feedback (HELD): it is learned when :meth:`activate` comes within the window. ``model``: the
        model the caller names (a Personalizer loop): a decision of another is UNKNOWN.

        Returns the store's outcome and whether the event has been applied by this process.
        """
        reward = _as_bit(reward)
        out = await self._answered(
            lambda now: self.shared.store.claim_and_append(decision_id, reward, now, model)
        )
        applied = False
        if out.status is ClaimStatus.ACCEPTED and out.claim is not None:
            applied = await self._learned(out.claim, reward, wait)
        return out, applied

    async def feedback_slot(
        self, decision_id: str, slot: int | str, reward: Reward, wait: bool, model: str | None = None
    ) -> tuple[ClaimOutcome, bool]:
        """:meth:`feedback` for one slot of the page ``decision_id`` (``store.claim_slot``): each slot's
        reward is taken once, a second one is DUPLICATE with the first outcome; a slot without one
        gets the model's default reward at expiry. A single decision is slot 0 of itself.

        ``slot``: the slot's index in the page (0-based, the request's order: one store call), or its
        id as the request gave it (read from a pending record of the page first:
        :meth:`slot_index`). :class:`UnknownSlotError` (422) for a slot the page does not have;
        :class:`PageAnsweredError` (409) for an id once no slot of the page is pending.
        """
        reward = _as_bit(reward)
        resolved: list[int | None] = []

        async def claim(now: float) -> ClaimOutcome:
            # resolved after the pages made while the store was down are saved (_answered)
            index = slot if isinstance(slot, int) else await self.slot_index(decision_id, slot)
            resolved.append(index)
            return await self.shared.store.claim_slot(decision_id, index or 0, reward, now, model)

        out = await self._answered(claim)
        index = resolved[-1]
        if index is None and out.status in (ClaimStatus.DUPLICATE, ClaimStatus.EXPIRED):
            raise PageAnsweredError(
                f"decision {decision_id!r}: no slot of it is pending (every one answered or expired), so "
                f"slot {slot!r} cannot be checked against its slots; nothing learned (name the slot by "
                "its index to see its first outcome)"
            )
        if out.status is ClaimStatus.UNKNOWN and index:
            record = await self._pending_slot(decision_id)
            if record is not None:  # the page is known: say which slots it has
                raise UnknownSlotError(_no_such_slot(decision_id, index, await self._slot_ids(record)))
        applied = False
        if out.status is ClaimStatus.ACCEPTED and out.claim is not None:
            applied = await self._learned(out.claim, reward, wait)
        return out, applied

    async def slot_index(self, decision_id: str, slot_id: str) -> int | None:
        """The index of the slot ``slot_id`` in the page ``decision_id``, read from one of its pending
        records (every slot's record holds the page's slot ids); None when no record of the page is
        pending (every slot answered or expired, or no such page). :class:`UnknownSlotError` when the
        page has no such slot."""
        record = await self._pending_slot(decision_id)
        if record is None:
            return None
        ids = await self._slot_ids(record)
        if slot_id not in ids:
            raise UnknownSlotError(_no_such_slot(decision_id, slot_id, ids))
        return ids.index(slot_id)

    async def _pending_slot(self, decision_id: str) -> DecisionRecord | None:
        """A pending record of the page ``decision_id`` (the lowest slot's), or None when none is.

        The slots are read one after the other from slot 0 (a page's slot count is known only once a
        record is read), so a request holds one store connection at a time: usually a read or two;
        :data:`~service.slots.MAX_SLOTS` reads when every slot is answered."""
        for s in range(MAX_SLOTS):
            record = await self.shared.store.get_decision(slot_decision_id(decision_id, s))
            if record is not None:
                return record
        return None

    async def _slot_ids(self, record: DecisionRecord) -> list[str]:
        """The slot ids of the page a pending slot record belongs to (:data:`SLOT_ID_MEMO` or "0" for a
        record stored as a single decision)."""
        if page_slot(record.decision) is None:
            return [str(record.decision.get(f"memo.{SLOT_ID_MEMO}", "0"))]
        m = await self.registry.resolve(record.model)
        assert m.spec.hashing_bits is not None  # pages are for action models, which hash
        return unpack_page(record.x, m.spec.hashing_bits).ids

    async def activate_page(
        self, decision_id: str, wait: bool = False, model: str | None = None
    ) -> list[ActivateOutcome]:
        """:meth:`activate` for every slot of the page ``decision_id`` (``store.activate_page``), in
        slot order: the deferred page is learned as a whole, each slot from its feedback (held ones
        now) or its default reward. A single decision gives one outcome, as :meth:`activate`; an
        unknown id ``[UNKNOWN]``."""
        outs = await self._answered(lambda now: self.shared.store.activate_page(decision_id, now, model))
        for out in outs:
            if out.status is ActivateStatus.ACTIVATED and out.claim is not None and out.reward is not None:
                await self._learned(out.claim, out.reward, wait)
        return outs

    async def activate(
        self, decision_id: str, wait: bool = False, model: str | None = None
    ) -> ActivateOutcome:
        """Mark the deferred decision ``decision_id`` as shown (``POST /decisions/{id}/activate``).

        Within its reward window it will be learned: now, from a feedback held for it (the outcome's
        ``claim`` and ``reward``; with ``wait`` applied here before this returns), or from the
        feedback to come, or at expiry from the model's default reward. After the window a deferred
        decision never activated is EXPIRED (dropped); one not deferred is a harmless ALREADY.
        ``model`` as for :meth:`feedback`.
        """
        out = await self._answered(lambda now: self.shared.store.activate(decision_id, now, model))
        if out.status is ActivateStatus.ACTIVATED and out.claim is not None and out.reward is not None:
            await self._learned(out.claim, out.reward, wait)
        return out

    async def _answered(self, call: Callable[[float], Awaitable[_Answer]]) -> _Answer:
        """``call(now)`` against the store for a decision id a client sent (feedback, activation):
        the decisions made while the store was down are saved first; an unknown id is 503, not 404,
        for :data:`RECOVERY_SECONDS` after the store was last seen down."""
        try:
            if self.shared.unsaved:  # the decision may be one of them
                await self.shared.save_unsaved()
            out = await call(self.shared.clock())
        except StoreUnavailableError:
            self.shared.store_failed()
            raise
        status = (out[0] if isinstance(out, list) else out).status
        if status.value == "unknown" and time.monotonic() - self.shared.store_down_at < RECOVERY_SECONDS:
            raise StoreUnavailableError(
                "the store is just back; decisions made meanwhile may not be saved yet"
            )
        return out

    async def _learned(self, claim: Claim, reward: Reward, wait: bool) -> bool:
        """Count a feedback just learned in its minute and let the model apply its event (with
        ``wait``: here, before returning whether it did)."""
        counts = self.reports.minute(claim.model, claim.at)
        if claim.outcome == "click":
            counts.clicks += 1
        elif claim.outcome == "no_click":
            counts.no_clicks += 1
        else:
            counts.graded += 1
            counts.graded_sum += reward
        m = self.shared.models.get(claim.model)
        if wait and m is not None and claim.position is not None:
            return await self.replication.wait_applied(m, claim.position)
        self.shared.wake.set()
        return False
