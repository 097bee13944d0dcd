"""The embedded default store: everything in this process's memory (one replica, no Redis).

Atomicity comes from asyncio: no method awaits (but ``read_decision_log`` before it reads its
page), so each runs to completion on the event loop before any other request is served. The
contract is :class:`service.store.base.Store`.
"""

from __future__ import annotations

import asyncio
import bisect
import copy
import heapq
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

import numpy as np

from service.store.base import (
    ACTIVITY_MINUTES,
    ActivateOutcome,
    ActivateStatus,
    Activity,
    Checkpoint,
    Claim,
    ClaimOutcome,
    ClaimStatus,
    Counts,
    DecisionExistsError,
    DecisionRecord,
    Event,
    LoggedDecision,
    ModelExistsError,
    Reward,
    Store,
    UnknownModelError,
    feedback_outcome,
)
from service.store.codec import catalog_of, eligible_of, rollout_of, slot_of


class _Model:
    """Everything the store keeps for one model."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.log: deque[Event] = deque()  # positions first_position .. last, contiguous
        self.last = 0
        self.checkpoint: Checkpoint | None = None
        self.counts = Counts()
        self.pending: set[str] = set()
        # Heap of (expires_at, decision_id); entries of decisions claimed by feedback stay until due
        # and are skipped then, so the heap holds at most one reward window of decisions.
        self.due: list[tuple[float, str]] = []
        # The decision log in creation order, entries ``[record, outcome, reward, outcome_at,
        # activated_at]``
        # (made into LoggedDecision when read); ``dlog[i]`` has sequence number ``dlog_base + i``,
        # the read cursor. The entries still pending by id, for their outcome.
        self.dlog: list[list[Any]] = []
        self.dlog_base = 0
        self.dlog_pending: dict[str, list[Any]] = {}
        self.activity: dict[int, Activity] = {}  # minute -> counts (see Store.add_activity)


class MemoryStore(Store):
    """In-process implementation of :class:`~service.store.base.Store`."""

    def __init__(self, claim_ttl: float = 86_400.0) -> None:
        super().__init__(claim_ttl)
        self._models: dict[str, _Model] = {}
        self._pending: dict[str, DecisionRecord] = {}
        self._claims: dict[str, Claim] = {}
        self._claim_order: deque[tuple[float, str]] = deque()  # (forget_at, id), made in time order
        # Feedback held for deferred decisions not activated yet: id -> (reward, the claim to be)
        self._held: dict[str, tuple[Reward, Claim]] = {}

    def _model(self, name: str) -> _Model:
        try:
            return self._models[name]
        except KeyError:
            raise UnknownModelError(f"unknown model {name!r}") from None

    # -- models -----------------------------------------------------------------------------

    async def create_model(self, name: str, config: Mapping[str, Any]) -> None:
        if name in self._models:
            raise ModelExistsError(f"model {name!r} already exists")
        self._models[name] = _Model(copy.deepcopy(dict(config)))

    async def get_model(self, name: str) -> dict[str, Any]:
        return copy.deepcopy(self._model(name).config)

    async def list_models(self) -> dict[str, dict[str, Any]]:
        return {name: copy.deepcopy(m.config) for name, m in self._models.items()}

    async def delete_model(self, name: str) -> None:
        m = self._model(name)
        for decision_id in m.pending:
            del self._pending[decision_id]
            self._held.pop(decision_id, None)
        del self._models[name]

    async def counts(self, name: str) -> Counts:
        m = self._model(name)
        return replace(m.counts, pending=len(m.pending))

    # -- decisions and feedback -------------------------------------------------------------

    async def put_decision(self, record: DecisionRecord) -> None:
        m = self._model(record.model)
        self._forget_old_claims(record.created_at)
        if record.decision_id in self._pending or record.decision_id in self._claims:
            raise DecisionExistsError(record.decision_id)
        record = replace(record, activated_at=None)
        self._pending[record.decision_id] = record
        m.pending.add(record.decision_id)
        heapq.heappush(m.due, (record.expires_at, record.decision_id))
        m.counts.decisions += 1
        m.counts.deferred += record.deferred
        if record.logged:
            entry = [record, None, None, None, None]
            m.dlog.append(entry)
            m.dlog_pending[record.decision_id] = entry

    async def put_page(self, records: Sequence[DecisionRecord]) -> None:
        # Every id checked before any is saved, and no await between: the page is saved whole or not.
        self._model(records[0].model)
        self._forget_old_claims(records[0].created_at)
        for record in records:
            if record.decision_id in self._pending or record.decision_id in self._claims:
                raise DecisionExistsError(records[0].decision_id)
        for record in records:
            await self.put_decision(record)

    async def get_decision(self, decision_id: str) -> DecisionRecord | None:
        return self._pending.get(decision_id)

    def _forget_old_claims(self, now: float) -> None:
        while self._claim_order and self._claim_order[0][0] <= now:
            _, decision_id = self._claim_order.popleft()
            self._claims.pop(decision_id, None)

    def _claim(self, record: DecisionRecord, outcome: str, reward: Reward | None, now: float) -> Claim:
        """Remove the pending record, append its learn event (unless ``reward`` is None), record the claim."""
        m = self._models[record.model]
        del self._pending[record.decision_id]
        self._held.pop(record.decision_id, None)
        m.pending.discard(record.decision_id)
        position = None
        if reward is not None:
            m.last += 1
            position = m.last
            m.log.append(
                Event(
                    position=position,
                    kind="learn",
                    at=now,
                    decision_id=record.decision_id,
                    x=record.x,
                    decision=record.decision,
                    reward=reward,
                    outcome=outcome,  # type: ignore[arg-type]
                )
            )
        entry = m.dlog_pending.pop(record.decision_id, None)
        if entry is not None:
            entry[1:4] = ("dropped" if reward is None else outcome, reward, now)
        activated = record.activated_at is not None
        claim = Claim(record.decision_id, record.model, outcome, position, now, record.deferred, activated)  # type: ignore[arg-type]
        self._claims[record.decision_id] = claim
        self._claim_order.append((now + self.claim_ttl, record.decision_id))
        return claim

    def _of_another(self, decision_id: str, model: str | None) -> bool:
        """Whether ``decision_id``'s claim or pending record is of a model other than ``model``."""
        known = self._claims.get(decision_id) or self._pending.get(decision_id)
        return model is not None and known is not None and known.model != model

    async def claim_and_append(
        self, decision_id: str, reward: Reward, now: float, model: str | None = None
    ) -> ClaimOutcome:
        self._forget_old_claims(now)
        if self._of_another(decision_id, model):
            return ClaimOutcome(ClaimStatus.UNKNOWN)
        claim = self._claims.get(decision_id)
        if claim is not None:
            status = ClaimStatus.EXPIRED if claim.outcome == "expired" else ClaimStatus.DUPLICATE
            return ClaimOutcome(status, claim)
        record = self._pending.get(decision_id)
        if record is None:
            return ClaimOutcome(ClaimStatus.UNKNOWN)
        if now >= record.expires_at:
            pending = Claim(decision_id, record.model, "expired", None, record.expires_at, record.deferred)
            return ClaimOutcome(ClaimStatus.EXPIRED, pending)
        if record.deferred and record.activated_at is None:  # held until the activation
            held = self._held.get(decision_id)
            if held is not None:
                return ClaimOutcome(ClaimStatus.DUPLICATE, held[1])
            to_be = Claim(decision_id, record.model, feedback_outcome(reward), None, now, True)
            self._held[decision_id] = (reward, to_be)
            return ClaimOutcome(ClaimStatus.HELD, to_be)
        return ClaimOutcome(ClaimStatus.ACCEPTED, self._learn(record, reward, now))

    def _learn(self, record: DecisionRecord, reward: Reward, now: float) -> Claim:
        """Claim ``record`` with a feedback of ``reward`` and count it."""
        m = self._models[record.model]
        claim = self._claim(record, feedback_outcome(reward), reward, now)
        if not isinstance(reward, bool):
            m.counts.graded += 1
            m.counts.graded_sum += reward
        elif reward:
            m.counts.clicks += 1
        else:
            m.counts.no_clicks += 1
        return claim

    async def activate(self, decision_id: str, now: float, model: str | None = None) -> ActivateOutcome:
        self._forget_old_claims(now)
        if self._of_another(decision_id, model):
            return ActivateOutcome(ActivateStatus.UNKNOWN)
        claim = self._claims.get(decision_id)
        if claim is not None:
            if claim.deferred and not claim.activated:
                return ActivateOutcome(ActivateStatus.EXPIRED, claim)
            return ActivateOutcome(ActivateStatus.ALREADY, claim, claim.deferred)
        record = self._pending.get(decision_id)
        if record is None:
            return ActivateOutcome(ActivateStatus.UNKNOWN)
        if not record.deferred or record.activated_at is not None:
            return ActivateOutcome(ActivateStatus.ALREADY, None, record.deferred)
        if now >= record.expires_at:
            pending = Claim(decision_id, record.model, "expired", None, record.expires_at, True)
            return ActivateOutcome(ActivateStatus.EXPIRED, pending)
        m = self._models[record.model]
        record = self._pending[decision_id] = replace(record, activated_at=now)
        m.counts.activated += 1
        entry = m.dlog_pending.get(decision_id)
        if entry is not None:
            entry[4] = now
        held = self._held.get(decision_id)
        if held is None:
            return ActivateOutcome(ActivateStatus.ACTIVATED)
        return ActivateOutcome(ActivateStatus.ACTIVATED, self._learn(record, held[0], now), reward=held[0])

    async def expire_due(
        self, model: str, now: float, default_reward: Literal["no_click", "drop"]
    ) -> list[Claim]:
        self._forget_old_claims(now)
        m = self._model(model)
        out: list[Claim] = []
        while m.due and m.due[0][0] <= now:
            _, decision_id = heapq.heappop(m.due)
            record = self._pending.get(decision_id)
            if record is None:  # claimed by feedback in time
                continue
            if record.deferred and record.activated_at is None:  # never shown: dropped, held feedback too
                out.append(self._claim(record, "expired", None, now))
                m.counts.dropped_unactivated += 1
                continue
            reward = False if default_reward == "no_click" else None
            out.append(self._claim(record, "expired", reward, now))
            m.counts.expired += 1
        return out

    # -- event log and checkpoints ------------------------------------------------------------

    async def append(self, model: str, event: Event) -> int:
        m = self._model(model)
        if event.kind == "learn":
            raise ValueError("learn events are appended by claim_and_append / expire_due only")
        m.last += 1
        m.log.append(replace(event, position=m.last))
        return m.last

    async def read_log(self, model: str, after: int, limit: int = 1000) -> list[Event]:
        m = self._model(model)
        if not m.log:
            return []
        first = m.log[0].position
        start = max(after + 1 - first, 0)
        return [m.log[i] for i in range(start, min(start + limit, len(m.log)))]

    async def log_position(self, model: str) -> int:
        return self._model(model).last

    async def put_checkpoint(self, model: str, checkpoint: Checkpoint) -> None:
        m = self._model(model)
        if m.checkpoint is None or checkpoint.position >= m.checkpoint.position:
            m.checkpoint = checkpoint

    async def get_checkpoint(self, model: str) -> Checkpoint | None:
        return self._model(model).checkpoint

    async def trim_log(self, model: str, upto: int) -> None:
        m = self._model(model)
        while m.log and m.log[0].position <= upto:
            m.log.popleft()

    # -- decision log -----------------------------------------------------------------------------

    async def read_decision_log(
        self,
        model: str,
        since: float = -math.inf,
        until: float = math.inf,
        after: str | None = None,
        limit: int = 256,
    ) -> tuple[list[LoggedDecision], str | None]:
        # The only await: the page itself is read in one step, so it is consistent, and an export
        # or an evaluation job paging through the log lets requests run between its pages.
        await asyncio.sleep(0)
        m = self._model(model)
        log = m.dlog
        if after is None:
            i = bisect.bisect_left(log, since, key=lambda e: e[0].created_at)
        else:
            i = max(int(after) + 1 - m.dlog_base, 0)
        page: list[LoggedDecision] = []
        while i < len(log) and len(page) < limit:
            r, outcome, reward, outcome_at, activated_at = log[i]
            if r.created_at >= until:
                return page, None
            if r.created_at >= since:
                probs = np.asarray(r.decision["probs"], dtype=np.float64)
                label = int(r.decision["label"])
                page.append(
                    LoggedDecision(
                        r.decision_id,
                        r.model_version,
                        r.created_at,
                        r.x,
                        probs,
                        label,
                        outcome,
                        reward,
                        outcome_at,
                        eligible_of(r.decision),
                        *rollout_of(r.decision),
                        r.deferred,
                        activated_at,
                        slot_of(r.decision),
                        catalog_of(r.decision),
                    )
                )
            i += 1
        return page, (str(m.dlog_base + i - 1) if i < len(log) else None)

    async def trim_decision_log(self, model: str, older_than: float | None, keep: int | None) -> int:
        m = self._model(model)
        log = m.dlog
        n = max(len(log) - keep, 0) if keep is not None else 0
        if older_than is not None:
            while n < len(log) and log[n][0].created_at < older_than:
                n += 1
        for entry in log[:n]:
            m.dlog_pending.pop(entry[0].decision_id, None)
        del log[:n]
        m.dlog_base += n
        return n

    # -- dashboard: per-minute activity -----------------------------------------------------------

    async def add_activity(self, model: str, minutes: Mapping[int, Activity]) -> None:
        held = self._model(model).activity
        new = False
        for minute, counts in minutes.items():
            if minute not in held:
                held[minute] = Activity()
                new = True
            held[minute].add(counts)
        if new:  # only a new minute can push an old one out
            cut = max(held) - ACTIVITY_MINUTES
            for minute in [m for m in held if m <= cut]:
                del held[minute]

    async def read_activity(self, model: str, since: int) -> dict[int, Activity]:
        held = self._model(model).activity
        return {m: replace(held[m]) for m in sorted(held) if m >= since}

    async def ping(self) -> None:
        return None
