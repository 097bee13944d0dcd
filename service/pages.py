"""Page decisions in the stores and the event log (issue 53): one decision id, a record per slot.

A page of S slots (:mod:`service.slots`, decided by :class:`service.learners.ccb_adf.CCB`) is kept
as S ordinary decision records, one per slot, under ids derived from the page's one decision id
``D`` (:func:`slot_decision_id`): slot 0 is ``D`` itself and slot ``s >= 1`` is ``D`` with ``~s``
before its routing suffix (``abc~2`` on the one-process stores, ``abc~2.x3`` on Redis, where the
slot tag after the last dot keeps every slot of a page on the page's shard). ``~`` is not a
character of a decision id a client may choose (:func:`service.store.records.check_decision_id`),
so no other decision can take a slot's id, and slot 0 being ``D`` makes the page's id one namespace
with single decisions: :meth:`service.store.base.Store.put_page` inserts slot 0 only if ``D`` is
free, as ``put_decision`` does.

Why a record per slot: every guarantee of a single decision then holds per slot with no new
mechanism in any store. A slot's reward is its record's claim (:meth:`Store.claim_slot`: once, a
second one the duplicate outcome, 409), a slot without a reward in the window gets the model's
default reward at expiry (or is dropped under ``"drop"``), acknowledged rewards are in the log as
any feedback is, and the decision log keeps each slot's candidates, choice, conditional
probability and reward. Deferred activation covers the page by activating each slot's record
(:meth:`Store.activate_page`). The cost: the page's packed input is stored once per slot.

**A slot's record** (:func:`page_records`):

- ``x``: the page, :meth:`service.slots.PageFeaturiser.pack` (the slots' features and ids, then the
  context and candidates), the same array in every slot's record;
- ``decision``: slot ``s``'s own :class:`~service.learners.base.Decision` state (``probs``: the
  distribution it was drawn from given the earlier slots' choices; ``label``; ``memo.*``), so that
  everything that reads a decision record (the stores' decision log, off-policy evaluation) sees an
  ordinary decision, plus ``page.slot`` = ``s`` and the whole :class:`PageDecision` under
  ``page.`` (``page.slots``, ``page.{t}.probs``, ``page.{t}.label``, ``page.{t}.memo.*``).

**A slot's learn event** is the store's ordinary learn event of that record (``x``, ``decision``,
``reward``, ``outcome``), so it carries the page input and the page decision: a replica applies it
as ``CCB(learner).learn_slot(unpack_page(x), PageDecision.from_state(decision["page.*"]), s,
reward)`` (:func:`learn_slot`), the same bits on every replica. A graded reward that the learner
takes as a bit is drawn from the slot's own id (:func:`service.sampling.reward_bit`).

A page over catalog candidates (issue 54, :mod:`service.runtime.catalog_pages`) keeps its chosen
items only, as the page's candidates (item of slot ``s`` is candidate ``s``), and each slot's
decision has the slot's conditional probability at its item and the catalog memo
(:data:`CATALOG_VERSION`); its learn event is applied as the slot's item alone on the slot's input
(:func:`learn_slot`), as a single catalog decision learns.

A one-slot page without slot features is not a page here: it is stored as today's single decision
(its record and events byte for byte), and slot 0 of it is that decision (:func:`page_records`
returns the single record, :meth:`Store.claim_slot` claims ``D`` for slot 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from service.learners.base import Decision, Learner
from service.learners.ccb_adf import CCB, PageDecision
from service.serial import State, StateFormatError
from service.slots import PageInput, unpack_page
from service.store.records import DecisionRecord, Reward, slot_decision_id, split_slot_id

__all__ = [
    "CATALOG_VERSION",
    "PAGE_PREFIX",
    "is_single",
    "learn_slot",
    "page_decision_of",
    "page_records",
    "page_slot",
    "slot_decision_id",
    "slot_state",
    "split_slot_id",
]

#: The prefix of the page decision's keys in a slot's decision state.
PAGE_PREFIX = "page."
#: The memo key of a catalog decision's catalog version: in a slot's own memo, the slot of a page over
#: catalog candidates, which learns its item alone (:mod:`service.runtime.catalog_pages`).
CATALOG_VERSION = "catalog.version"


def is_single(page: PageInput) -> bool:
    """Whether ``page`` is stored as a single decision: one slot without features (the CCB reduction
    is then the action learner bit for bit, so the record is today's)."""
    return page.n_slots == 1 and page.slots[0].nnz == 0


def slot_state(decision: PageDecision, s: int) -> State:
    """Slot ``s``'s decision state (module docstring): its own decision, ``page.slot`` and the page
    decision under ``page.``."""
    out: State = dict(decision.slots[s].to_state())
    out[PAGE_PREFIX + "slot"] = s
    out.update({PAGE_PREFIX + k: v for k, v in decision.to_state().items()})
    return out


def page_slot(decision: Mapping[str, Any]) -> int | None:
    """The slot of a decision state made by :func:`slot_state`; None for a single decision."""
    s = decision.get(PAGE_PREFIX + "slot")
    return None if s is None else int(s)


def page_decision_of(decision: Mapping[str, Any]) -> PageDecision:
    """The page decision a slot's decision state carries (:class:`StateFormatError` if none)."""
    n = len(PAGE_PREFIX)
    inner = {k[n:]: v for k, v in decision.items() if k.startswith(PAGE_PREFIX) and k != PAGE_PREFIX + "slot"}
    if "slots" not in inner:
        raise StateFormatError("not a page slot's decision record (no page.slots)")
    return PageDecision.from_state(inner)


def page_records(
    record: DecisionRecord, page: PageInput, packed: Any, decision: PageDecision
) -> list[DecisionRecord]:
    """The records that keep ``page`` decided as ``decision``: ``record`` (the page's id, model,
    version, times, ``logged``, ``deferred``) once per slot, in slot order, with ``x = packed`` and
    the slot's decision state (:func:`slot_state`). ``packed``: what
    :meth:`service.runtime.model.ModelRuntime.pack_page` keeps of the page, the action input's pack
    for a one-slot page without slot features (:func:`is_single`), which is then ``[record]`` with
    the slot's decision alone: today's single record."""
    if is_single(page):
        return [replace(record, x=packed, decision=decision.slots[0].to_state())]
    return [
        replace(
            record,
            decision_id=slot_decision_id(record.decision_id, s),
            x=packed,
            decision=slot_state(decision, s),
        )
        for s in range(page.n_slots)
    ]


def learn_slot(learner: Learner, bits: int, x: Any, decision: Mapping[str, Any], reward: Reward) -> None:
    """Apply a slot's learn event to ``learner`` (an action learner of ``2**bits`` buckets): the CCB
    reduction's :meth:`~service.learners.ccb_adf.CCB.learn_slot` on the page and page decision the
    event carries; for a page over catalog candidates (its slot's memo has :data:`CATALOG_VERSION`)
    the slot's shown item alone on the slot's input, with the probability it was drawn with, as a
    single catalog decision learns (:mod:`service.runtime.catalog_pages`)."""
    s = page_slot(decision)
    if s is None:
        raise StateFormatError("not a page slot's learn event (no page.slot)")
    page, pd = unpack_page(x, bits), page_decision_of(decision)
    d = pd.slots[s]
    if CATALOG_VERSION in d.memo:  # a page over catalog candidates: the shown item alone
        alone = page.slot_input(s).alone(d.label)
        learner.learn(alone, Decision(np.array([d.probability]), 0, {}), reward)
        return
    CCB(learner).learn_slot(page, pd, s, reward)
