"""The sweeper: expiry of unanswered decisions, decision-log retention, automatic promotion.

Every ``CLICKBOOST_SWEEP_INTERVAL_SECONDS`` the background loop gives each decision whose reward
window passed its model's default reward (a learn event, through the store's claim, so a late
feedback and the expiry never both count), forgets the decision-log entries past the retention
(``CLICKBOOST_LOG_RETENTION``), and promotes a model in logging or apprentice mode whose evidence
says it is due (:mod:`service.rollout`), and keeps each catalog (issue 54): the items whose
``expires_at`` passed are retired, and the retired rows no retained decision can need any more are
forgotten (:meth:`Sweeper.sweep_catalog`), both by an ``items`` event so that every replica does the
same at the same log position and the catalogs stay equal byte for byte.
"""

from __future__ import annotations

import asyncio
import logging
import math

from service.runtime.items import KIND as ITEMS
from service.runtime.items import sweep_event
from service.runtime.model import ModelRuntime
from service.runtime.replication import Replication
from service.runtime.reports import Reports
from service.runtime.state import Shared
from service.store import Event, StoreUnavailableError

__all__ = ["HISTORY_SLACK_SECONDS", "RETENTION_ACTIVE_SECONDS", "RETENTION_RECHECK_SECONDS", "Sweeper"]

log = logging.getLogger("clickboost.runtime")

# The expiry sweep on a shared store skips a model until its next pending decision is due (the
# store says when), or until a decision made meanwhile by another replica could be (its reward
# window), and trims its decision log at most every RETENTION_ACTIVE_SECONDS after activity and
# otherwise every RETENTION_RECHECK_SECONDS (or a tenth of the age limit): an idle model costs no
# command per second, a busy one a trim every few seconds (each forgets what came due meanwhile).
RETENTION_ACTIVE_SECONDS = 10.0
RETENTION_RECHECK_SECONDS = 3600.0
#: A catalog's retired rows are forgotten once retired this long before the oldest retained
#: decision: a decision is recorded at its replica's catalog version, which may lag the log (the
#: replication lag, a store outage served from memory) and its clock may differ from the appender's.
HISTORY_SLACK_SECONDS = 600.0


class Sweeper:
    """Expiry, retention and promotion of this process's models.

    Parameters
    ----------
    shared : Shared
        The runtime's shared state.
    replication : Replication
        Applies the events an expiry or a promotion appended.
    reports : Reports
        Counts the expiries per minute for the dashboard.
    """

    def __init__(self, shared: Shared, replication: Replication, reports: Reports) -> None:
        self.shared = shared
        self.replication = replication
        self.reports = reports
        self.retention = shared.settings.retention

    async def loop(self) -> None:
        """The background loop: :meth:`sweep` every sweep interval; failures are logged and retried."""
        while True:
            await asyncio.sleep(self.shared.settings.sweep_interval_seconds)
            try:
                await self.sweep(scheduled=True)
            except StoreUnavailableError as exc:  # the next round retries
                log.warning("expiring decisions: %s", exc)
            except Exception:
                log.exception("expiring decisions failed")

    async def sweep(self, scheduled: bool = False) -> int:
        """Give every decision whose reward window passed its model's default reward; return how many.

        Then forget the decision-log entries past the retention (``CLICKBOOST_LOG_RETENTION``),
        oldest first: each sweep removes what aged out since the last one.

        ``scheduled`` (the background loop): skip the models with nothing due. A store that says
        when a model's next pending decision is due (the shared store) is asked again only then, or
        once a decision made since by another replica could be due (the model's reward window, or
        earlier for this replica's own decisions); the retention runs after a decision or an event
        of the model (at most every :data:`RETENTION_ACTIVE_SECONDS`), and at least every
        :data:`RETENTION_RECHECK_SECONDS` (or tenth of the age limit). Other stores are swept every
        round.
        """
        store = self.shared.store
        n = 0
        now = self.shared.clock()
        max_age, max_count = self.retention.max_age, self.retention.max_count
        older_than = None if max_age is None else now - max_age
        recheck = (
            RETENTION_RECHECK_SECONDS if max_age is None else min(RETENTION_RECHECK_SECONDS, max_age / 10)
        )
        for m in list(self.shared.models.values()):
            if not scheduled or now >= m.next_expiry:
                expiry = await store.expire(m.name, now, m.spec.default_reward)
                n += len(expiry.claims)
                if expiry.claims:
                    m.trim_due = True
                    # a deferred decision never activated is dropped, not expired (issue 38)
                    unshown = sum(c.deferred and not c.activated for c in expiry.claims)
                    self.reports.minute(m.name, now).expired += len(expiry.claims) - unshown
                    await self.replication.catch_up(m)
                if expiry.next_due is not None:
                    m.next_expiry = min(expiry.next_due, now + m.spec.reward_window_seconds)
            if m.rollout.due(m.spec.promote, m.spec.promote_min_decisions):
                await self.promote(m)
            active = m.trim_due and now >= m.trimmed_at + RETENTION_ACTIVE_SECONDS
            if not scheduled or active or now >= m.next_trim:
                m.trim_due = False
                await store.trim_decision_log(m.name, older_than, max_count)
                m.trimmed_at, m.next_trim = now, (now + recheck if store.shared else now)
            await self.sweep_catalog(m, now)
        return n

    async def sweep_catalog(self, m: ModelRuntime, now: float) -> bool:
        """Append the ``items`` event that retires ``m``'s items expired at ``now`` and forgets the
        retired rows that no retained decision can need (those retired by events appended
        :data:`HISTORY_SLACK_SECONDS` before the oldest decision the log keeps); whether it did. The
        holder of the model's catalog lease appends it; the others apply it from the log."""
        cat = m.catalog
        if cat is None or not (len(cat) or len(cat.history)):
            return False
        due = cat.due(now)
        below = None
        # The store is read only when a forget could drop something: no row is retired before the
        # oldest decision came in, whenever that was.
        if cat.history.due(cat.history.forget_below(now - HISTORY_SLACK_SECONDS)):
            oldest = now
            if m.spec.log_decisions:
                entries, _ = await self.shared.store.read_decision_log(m.name, -math.inf, math.inf, None, 1)
                oldest = min(oldest, entries[0].created_at) if entries else oldest
            v = cat.history.forget_below(oldest - HISTORY_SLACK_SECONDS)
            below = v if cat.history.due(v) else None
        if not due and below is None:
            return False
        lease = max(3 * self.shared.settings.sweep_interval_seconds, 10.0)
        if not await self.shared.store.lease(f"catalog:{m.name}", self.shared.replica_id, lease):
            return False
        state = sweep_event(now if due else None, below)
        await self.shared.store.append(m.name, Event(0, ITEMS, at=now, state=state))  # type: ignore[arg-type]
        await self.replication.catch_up(m)
        return True

    async def promote(self, m: ModelRuntime) -> None:
        """Append the automatic promotion of ``m`` to online (:mod:`service.rollout`): by the holder
        of its rollout lease only, once per epoch; every replica switches when it applies the event,
        which names the epoch so that a duplicate does nothing."""
        lease = max(3 * self.shared.settings.sweep_interval_seconds, 10.0)
        if not await self.shared.store.lease(f"rollout:{m.name}", self.shared.replica_id, lease):
            return
        r = m.rollout
        r.requested = r.epoch
        evidence = {"position": m.position, **r.report()}
        event = Event(
            0, "rollout", at=self.shared.clock(), state=r.event("online", "auto", r.epoch, evidence)
        )
        position = await self.shared.store.append(m.name, event)
        log.info("model %r promoted to online at log position %d: %s", m.name, position, evidence)
        await self.replication.catch_up(m)
