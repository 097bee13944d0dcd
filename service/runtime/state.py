"""What the rooms of a runtime share (:class:`Shared`): the store, the settings, the clock, the
models this process holds, and the two things a request and the replication loop both touch
(the decisions not recorded while the store was down, and when it last failed).

Each room (:mod:`service.runtime`) holds the one :class:`Shared` of its :class:`Runtime
<service.runtime.lifecycle.Runtime>` and keeps the rest of its state to itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import deque
from collections.abc import Callable

from service.config import Settings
from service.runtime.model import ModelRuntime
from service.store import DecisionExistsError, DecisionRecord, Store, UnknownModelError

__all__ = ["UNSAVED_MAX", "Shared", "backoff"]

# A replica keeps at most this many decisions it could not record while the store was down
# (recorded when it is back; the oldest are dropped beyond that).
UNSAVED_MAX = 100_000


def backoff(failures: int) -> float:
    """Seconds before retrying after ``failures`` consecutive failures: 0.1 doubling, at most 60."""
    return min(0.1 * 2 ** (failures - 1), 60.0)


class Shared:
    """The state every room of one runtime reads and writes; ``store``, ``settings`` and ``clock``
    are the :class:`~service.runtime.lifecycle.Runtime`'s (a test may replace the clock on the
    runtime: every room reads it here)."""

    def __init__(self, store: Store, settings: Settings, clock: Callable[[], float]) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.models: dict[str, ModelRuntime] = {}  # the models this process serves, by name
        self.replica_id = uuid.uuid4().hex[:12]  # holder name of this process's leases
        self.placement = settings.placement  # None: every replica holds every model
        self.started_mono = time.monotonic()
        self.ready = False  # the models loaded and the loops running
        self.loading = False  # between open() and the end of load(): requests get 503
        # Set when this process appended to a log, so that the loop of a one-process store applies
        # the event at once rather than at its next interval.
        self.wake = asyncio.Event()
        self.store_down_at = -float("inf")  # time.monotonic() when the store last failed us
        # a decision's record, or a page's slot records (saved whole: store.put_page)
        self.unsaved: deque[DecisionRecord | tuple[DecisionRecord, ...]] = deque(maxlen=UNSAVED_MAX)
        self._flush_lock = asyncio.Lock()

    def store_failed(self) -> None:
        """Note that the store failed us now (see :data:`~service.runtime.requests.RECOVERY_SECONDS`)."""
        self.store_down_at = time.monotonic()

    async def save_unsaved(self) -> None:
        """Record the decisions and pages made while the store was down (their reward windows run as
        usual)."""
        async with self._flush_lock:
            while self.unsaved:
                first = self.unsaved[0]
                # UnknownModelError: its model was deleted meanwhile; DecisionExistsError: saved by
                # an earlier attempt whose reply was lost, or a client-chosen id taken meanwhile.
                with contextlib.suppress(UnknownModelError, DecisionExistsError):
                    if isinstance(first, tuple):
                        await self.store.put_page(first)
                    else:
                        await self.store.put_decision(first)
                self.unsaved.popleft()
