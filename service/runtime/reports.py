"""What this replica reports for the dashboard: per-minute activity and heartbeats (:class:`Reports`).

docs/ARCHITECTURE.md, "Dashboard": each replica counts decisions, clicks and expiries per minute in
memory (the request path and the sweeper call :meth:`Reports.minute`, a dictionary increment) and
adds them to the store every :data:`ACTIVITY_FLUSH_SECONDS` (one write per model with activity,
never one per request), and reports itself (a heartbeat: its applied version of every model) every
:data:`HEARTBEAT_SECONDS`, kept by the store for :data:`HEARTBEAT_TTL_SECONDS`: a replica that stops
reporting is listed with a growing age, then dropped. ``GET /models/{name}/stats`` and
``GET /replicas`` (:mod:`service.api.dashboard`) read what every replica reported.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import time

from service.runtime.state import Shared
from service.store import ACTIVITY_MINUTES, Activity, Heartbeat, StoreUnavailableError, UnknownModelError

__all__ = ["ACTIVITY_FLUSH_SECONDS", "HEARTBEAT_SECONDS", "HEARTBEAT_TTL_SECONDS", "Reports"]

log = logging.getLogger("clickboost.runtime")

ACTIVITY_FLUSH_SECONDS = 1.0
HEARTBEAT_SECONDS = 2.0
HEARTBEAT_TTL_SECONDS = 15.0


class Reports:
    """The per-minute counts of this process's models and its heartbeats.

    Parameters
    ----------
    shared : Shared
        The runtime's shared state.
    """

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        # What this replica says of itself in its heartbeats
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.started_at = shared.clock()
        # Per-minute counts gathered since the last flush: model -> minute -> counts
        self._activity: dict[str, dict[int, Activity]] = {}

    def minute(self, model: str, at: float) -> Activity:
        """The counts of ``model`` for the minute of ``at`` gathered since the last flush."""
        minutes = self._activity.setdefault(model, {})
        minute = math.floor(at / 60)
        counts = minutes.get(minute)
        if counts is None:
            counts = minutes[minute] = Activity()
        return counts

    def _keep(self, model: str, minutes: dict[int, Activity]) -> None:
        """Put counts that could not be flushed back, for the next flush (bounded: the minutes the
        store would keep)."""
        oldest = math.floor(self.shared.clock() / 60) - ACTIVITY_MINUTES
        for minute, counts in minutes.items():
            if minute > oldest:
                held = self._activity.setdefault(model, {}).setdefault(minute, Activity())
                held.add(counts)

    async def flush_activity(self) -> None:
        """Add the per-minute counts gathered since the last flush to the store (one write per model
        with activity); if the store is down they are kept for the next flush, and the error raised."""
        pending, self._activity = list(self._activity.items()), {}
        for i, (name, minutes) in enumerate(pending):
            try:
                await self.shared.store.add_activity(name, minutes)
            except UnknownModelError:  # deleted meanwhile: its counts went with it
                continue
            except StoreUnavailableError:
                for rest in pending[i:]:
                    self._keep(*rest)
                raise

    async def heartbeat(self) -> Heartbeat:
        """This replica's report: its applied version of each model and how far the log is ahead."""
        store = self.shared.store
        models = {}
        for name, m in list(self.shared.models.items()):
            if store.shared:  # what the tail has read and not applied: no read per model
                models[name] = (m.position, max(m.seen - m.position, 0))
                continue
            try:
                behind = await store.log_position(name) - m.position
            except UnknownModelError:  # deleted meanwhile
                continue
            models[name] = (m.position, max(behind, 0))
        p = self.shared.placement
        return Heartbeat(
            self.shared.replica_id, self.host, self.pid, self.started_at, models,
            group=None if p is None else p.group, placement=None if p is None else p.fingerprint(),
        )  # fmt: skip

    async def beat(self) -> None:
        """Store this replica's heartbeat (listed by ``GET /replicas`` for the TTL)."""
        await self.shared.store.heartbeat(await self.heartbeat(), HEARTBEAT_TTL_SECONDS)

    async def check_placement_agrees(self) -> None:
        """Log an error for every live replica whose placement settings (its heartbeat's
        fingerprint of every group's addresses and the copies) differ from this one's: the two place
        models differently, so some models are held by no replica or answered by two groups. Only
        logged, at start (``GET /replicas`` says it at any time): a rolling change of the groups
        passes through such states, and refusing to serve would turn it into an outage."""
        try:
            beats = await self.shared.store.replicas()
        except StoreUnavailableError:
            return
        placement = self.shared.placement
        mine = None if placement is None else placement.fingerprint()
        for b in beats:
            if b.replica != self.shared.replica_id and b.placement != mine and b.fingerprinted:
                log.error(
                    "replica %s (%s pid %s, group %s) has other replica-group settings than this "
                    "replica (placement fingerprint %s here, %s there): set CLICKBOOST_REPLICA_GROUPS "
                    "and CLICKBOOST_PLACEMENT_COPIES alike on every replica",
                    b.replica, b.host, b.pid, b.group, mine, b.placement,
                )  # fmt: skip

    async def loop(self) -> None:
        """The background loop: flush the counts every second, store a heartbeat every two."""
        last_beat = time.monotonic()
        while True:
            await asyncio.sleep(ACTIVITY_FLUSH_SECONDS)
            try:
                await self.flush_activity()
                if time.monotonic() - last_beat >= HEARTBEAT_SECONDS:
                    last_beat = time.monotonic()
                    await self.beat()
            except StoreUnavailableError as exc:  # the next round retries
                log.warning("dashboard counts and heartbeat: %s", exc)
            except Exception:
                log.exception("dashboard counts and heartbeat failed")

    async def forget(self) -> None:
        """At shutdown: the last second's counts, and gone from the replica list at once, not at the
        TTL."""
        await self.flush_activity()
        await self.shared.store.forget_replica(self.shared.replica_id)
