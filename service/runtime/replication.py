"""Replication: each model applies its event log in order, here as on every replica (:class:`Replication`).

docs/ARCHITECTURE.md, "Replication": every change of a model's learned state is an event of its
log in the store (a feedback's learn, a reset, an import, a rollout switch), and every replica
applies the log in order, so replicas at the same position hold bit-identical models. This room
catches a model up (:meth:`Replication.catch_up`), runs the background loop that follows the logs
(:meth:`Replication.loop`: on a shared store one blocking read of every log per round), waits for
an event to be applied (``feedback?wait=true``, the admin calls: :meth:`Replication.wait_applied`)
and isolates failures: an event a model cannot apply marks that model failed (it keeps serving
decisions, and is reloaded with back-off), never the others. Checkpoints are
:mod:`service.runtime.checkpoints`'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from service.learners.base import Learner
from service.runtime.checkpoints import Checkpoints
from service.runtime.items import KIND as ITEMS_KIND
from service.runtime.model import ModelRuntime
from service.runtime.state import Shared, backoff
from service.store import Event, StoreUnavailableError, UnknownModelError
from service.store.base import Tail

if TYPE_CHECKING:
    from service.runtime.registry import Registry

__all__ = ["MODEL_RESYNC_SECONDS", "TAIL_BLOCK_SECONDS", "Replication"]

log = logging.getLogger("clickboost.runtime")

# A replica on a shared store blocks this long on the logs per round of its tail loop (one read over
# every log, so an idle replica sends about one command per round whatever its number of models).
# Model creations and deletions come with the tail (the registry's stream); the whole list is read
# again every MODEL_RESYNC_SECONDS in case a notice was missed.
TAIL_BLOCK_SECONDS = 1.0
# After a round of the tail that brought a few events, the next read waits the setting
# follow_pause_seconds (0.02 by default), so that under load one read brings many events (issue 40): a
# round's fixed cost (two round trips: the log's new events, then the contexts they name; redis-py and
# the event loop; `bench redis-cost` measures what a follower spends per event under load) is
# shared by every event it brings. A replica that was idle still applies the first event of a burst at
# once, and one whose read of a log came back full (catching up: Tail.more) reads again at once; the
# others are at most this much staler (`bench staleness`, p99 target 100 ms).
MODEL_RESYNC_SECONDS = 30.0


class Replication:
    """Applying the logs of this process's models.

    Parameters
    ----------
    shared : Shared
        The runtime's shared state.
    checkpoints : Checkpoints
        Where a model starts from (loaded) and what it writes every N events or T seconds.

    Attributes
    ----------
    registry : Registry
        Set by the runtime once built (the two call each other): a failed model is reloaded through
        it, and the loop syncs the list of models through it.
    """

    registry: Registry

    def __init__(self, shared: Shared, checkpoints: Checkpoints) -> None:
        self.shared = shared
        self.checkpoints = checkpoints

    async def catch_up(self, m: ModelRuntime) -> None:
        """Apply the log events after ``m.position`` in order; checkpoint every N events."""
        while True:
            events = await self.shared.store.read_log(m.name, m.position)
            if not events:
                break
            if events[0].position > m.position + 1:  # trimmed below us: start from the checkpoint
                await self.checkpoints.load(m)
                continue
            await self.apply_all(m, events)
        await self.checkpoints.maybe_write(m)

    async def apply_all(self, m: ModelRuntime, events: list[Event]) -> None:
        """Apply those of ``events`` (consecutive, read from ``m``'s log) that ``m`` has not applied
        yet (a concurrent catch_up may have). A learner whose learn is never heavy takes them in
        one synchronous batch (:meth:`ModelRuntime.apply_batch`: no round of the event loop per
        event, one compiled loop where it has one); any other one by one (:meth:`apply`)."""
        while m.frozen is not None:
            await m.frozen.wait()
        now = self.shared.clock()
        todo = [e for e in events if e.position > m.position]
        if not todo or todo[0].position != m.position + 1:
            return
        if type(m.learner).learn_is_heavy is Learner.learn_is_heavy:
            # A catalog's bulk is many ``items`` events (1,000 items, a few ms each to apply): the
            # loop gets a turn after each, so predicts wait for one event, not for the whole bulk
            # (issue 54: catalog changes do not stall predicts). Every decision still sees the
            # catalog of one log position, as a follower between two reads does.
            while todo:
                cut = next((i + 1 for i, e in enumerate(todo) if e.kind == ITEMS_KIND), len(todo))
                m.apply_batch(todo[:cut])
                m.last_apply_lag = max(now - todo[cut - 1].at, 0.0)
                todo = todo[cut:]
                if todo:
                    await asyncio.sleep(0)
                    while m.frozen is not None:
                        await m.frozen.wait()
                    todo = [e for e in todo if e.position > m.position]  # a catch_up may have run
                    if todo and todo[0].position != m.position + 1:
                        return
            return
        for event in todo:
            if event.position == m.position + 1:
                await self.apply(m, event)
                m.last_apply_lag = max(now - event.at, 0.0)

    async def apply(self, m: ModelRuntime, event: Event) -> None:
        """Apply ``event`` (the next one) to ``m``: on the event loop, or, for a learn its learner
        says is heavy (AdaBoost.MH's retrain), to a copy in a thread that then replaces the model:
        decisions go on with the model as it was, and no other event is applied meanwhile."""
        if event.kind != "learn" or not m.learner.learn_is_heavy():
            m.apply(event)
            return
        while m.frozen is not None:
            await m.frozen.wait()
        if event.position != m.position + 1:  # applied meanwhile
            return
        if not m.observe(event):  # a logging decision: evidence only, nothing learned
            m.position = event.position
            return
        m.frozen = asyncio.Event()
        try:
            learner = await asyncio.to_thread(m.learned, event)
            m.learner, m.position = learner, event.position
        finally:
            m.frozen.set()
            m.frozen = None

    async def wait_applied(self, m: ModelRuntime, position: int, timeout: float = 10.0) -> bool:
        """Catch up until ``m`` has applied ``position``; False if that took longer than ``timeout`` or
        an event failed here (see :meth:`catch_up_isolated`)."""
        deadline = time.monotonic() + timeout
        while True:
            # Isolated as in the background loop: an event this process cannot apply marks the model
            # failed (it retries with back-off); the caller's event is stored all the same.
            await self.catch_up_isolated(m)
            if m.position >= position:
                return True
            if m.failure is not None or time.monotonic() > deadline:
                return False
            await asyncio.sleep(self.shared.settings.tail_interval_seconds)

    async def _wait_for_events(self) -> None:
        """Until this process appended to a log (one-process stores), or the tail interval."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.shared.wake.wait(), self.shared.settings.tail_interval_seconds)
        self.shared.wake.clear()

    async def loop(self) -> None:
        """The background loop: apply every model's new events (on a shared store one read of
        every log per round, :meth:`_follow`), record the decisions the store missed while it was
        down, and sync the list of models; a store outage or a failure is logged and retried."""
        last_sync = time.monotonic()
        while True:
            try:
                if self.shared.unsaved:  # first thing once the store is back
                    await self.shared.save_unsaved()
                if self.shared.store.shared:
                    if await self._follow() or time.monotonic() - last_sync > MODEL_RESYNC_SECONDS:
                        await self.registry.sync_models()
                        last_sync = time.monotonic()
                    continue
                await self._wait_for_events()
                if time.monotonic() - last_sync > 1.0:
                    await self.registry.sync_models()
                    last_sync = time.monotonic()
                for m in list(self.shared.models.values()):
                    await self.catch_up_isolated(m)
            except StoreUnavailableError as exc:  # keep serving from memory; retry until it is back
                self.shared.store_failed()
                log.warning("%s; retrying", exc)
                await asyncio.sleep(self.shared.settings.tail_interval_seconds)
            except Exception:  # keep serving; the next round retries
                log.exception("applying the event log failed")

    async def _follow(self) -> bool:
        """One round of the tail on a shared store: wait for and apply the events of every model
        (one read from the store, whatever the number of models); retry failed models that are due.
        Returns whether models were created or deleted elsewhere (the caller syncs the list)."""
        # A failed model's log has an entry it cannot apply and a frozen one waits for its checkpoint:
        # reading them would return at once and spin. They are left out, and the round is short while
        # one is frozen or a retry comes soon; it also ends when a time-based checkpoint comes due.
        positions, timeout = {}, TAIL_BLOCK_SECONDS
        now, interval = time.monotonic(), self.shared.settings.tail_interval_seconds
        for name, m in self.shared.models.items():
            if m.failure is not None:
                timeout = min(timeout, max(m.retry_at - now, interval))
            elif m.frozen is not None:
                timeout = min(timeout, interval)
            else:
                positions[name] = m.position
                if m.position > m.checkpoint_position:
                    due = m.checkpoint_at + self.shared.settings.checkpoint_interval_seconds - now
                    timeout = min(timeout, max(due, interval))
        tail: Tail = await self.shared.store.tail(positions, timeout)
        for name, events in tail.events.items():
            m = self.shared.models.get(name)
            if m is not None and m.failure is None:
                await self._apply_isolated(m, events)
        for m in list(self.shared.models.values()):
            if m.failure is not None:
                if time.monotonic() >= m.retry_at:
                    await self.catch_up_isolated(m)
            elif m.frozen is None and m.position > m.checkpoint_position:
                await self.checkpoints.maybe_write(m)  # every T seconds with new events, however few
        if tail.events and not tail.more:
            await asyncio.sleep(self.shared.settings.follow_pause_seconds)
        return tail.models_changed

    async def _apply_isolated(self, m: ModelRuntime, events: list[Event]) -> None:
        """Apply ``events`` (read from ``m``'s log by the tail) as :meth:`catch_up` would; an event
        ``m`` cannot apply marks it failed, as in :meth:`catch_up_isolated`."""
        m.seen = max(m.seen, events[-1].position)
        m.trim_due = True
        try:
            if events[0].position > m.position + 1:  # trimmed below us: from the checkpoint
                await self.catch_up(m)
                return
            await self.apply_all(m, events)
            await self.checkpoints.maybe_write(m)
        except StoreUnavailableError:
            raise
        except UnknownModelError:  # deleted meanwhile; the next sync drops it
            return
        except Exception as exc:
            self._failed(m, exc)

    async def catch_up_isolated(self, m: ModelRuntime) -> None:
        """Apply ``m``'s log; an event it cannot apply marks it failed, never stops the others.

        A failed model keeps serving decisions from its last good state; it is retried with
        exponential back-off (0.1 s doubling to 60 s) from its checkpoint, so an event half
        applied before it raised leaves nothing behind.
        """
        if m.failure is not None:
            if time.monotonic() < m.retry_at:
                return
            try:  # start again from the checkpoint: a learn that raised may have left partial updates
                fresh = await self.registry.load(m.name, await self.shared.store.get_model(m.name))
            except UnknownModelError:
                self.shared.models.pop(m.name, None)
                return
            except StoreUnavailableError:
                raise
            except Exception as exc:
                self._failed(m, exc)
                return
            if self.shared.models.get(m.name) is m:
                self.shared.models[m.name] = fresh
            log.warning("model %r recovered at version %d", fresh.name, fresh.position)
            return
        try:
            await self.catch_up(m)
        except StoreUnavailableError:
            raise
        except UnknownModelError:  # deleted meanwhile; the next sync drops it
            return
        except Exception as exc:
            self._failed(m, exc)

    def _failed(self, m: ModelRuntime, exc: Exception) -> None:
        """Mark ``m`` failed by ``exc`` and schedule its next attempt (:func:`backoff`)."""
        m.failures += 1
        m.failure = f"event {m.position + 1} cannot be applied here: {type(exc).__name__}: {exc}"
        m.retry_at = time.monotonic() + backoff(m.failures)
        if m.failures == 1:  # one traceback per failure, then one line per retry
            log.exception("model %r failed; the other models go on", m.name)
        else:
            log.error("model %r still failing (attempt %d): %s", m.name, m.failures, m.failure)
