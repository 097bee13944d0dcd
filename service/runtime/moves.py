"""Moving a model between replica groups without losing an event (:class:`Moves`).

docs/SCALING.md, "Model placement": ``GET /models/{name}/placement`` (:meth:`Moves.placement_of`)
and ``PUT /models/{name}/placement`` (:meth:`Moves.move_model`, :mod:`service.api.models`). The
groups joining a model load it and follow its log while the others serve it; once every live
replica of each joining group reports (heartbeat) the log position of the start of the move, the
placement switches. Which models this replica holds, from the placement the store keeps, is the
registry's (:meth:`~service.runtime.registry.Registry.holds`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from service.learners.base import ParamError
from service.placement import Placement, PlacementError
from service.runtime.reports import HEARTBEAT_SECONDS
from service.runtime.state import Shared

__all__ = ["MOVE_LIVE_SECONDS", "MOVE_TIMEOUT_SECONDS", "Moves"]

log = logging.getLogger("clickboost.runtime")

# The groups joining a model must report it caught up within this many seconds (their heartbeats
# come every HEARTBEAT_SECONDS), else the move is undone; a heartbeat older than MOVE_LIVE_SECONDS is
# a replica presumed gone (the dashboard calls it stale then too).
MOVE_TIMEOUT_SECONDS = 30.0
MOVE_LIVE_SECONDS = 3 * HEARTBEAT_SECONDS


class Moves:
    """The placement of a model across replica groups, read and changed through the store.

    Parameters
    ----------
    shared : Shared
        The runtime's shared state.
    """

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    async def placement_of(self, name: str) -> tuple[list[str], list[str]]:
        """The groups ``name`` is placed on and those joining it (a move under way), from the store;
        :class:`~service.placement.PlacementError` without placement."""
        placement = self._placement()
        store = self.shared.store
        await store.get_model(name)  # UnknownModelError: 404
        override = (await store.placements()).get(name)
        serving = placement.serving(name, override)
        return serving, [g for g in placement.loading(name, override) if g not in serving]

    async def move_model(
        self, name: str, groups: Sequence[str], timeout: float = MOVE_TIMEOUT_SECONDS
    ) -> None:
        """Place ``name`` on ``groups``, losing no event (docs/SCALING.md, "Model placement").

        The groups not holding it yet join first: they load its latest checkpoint and follow its
        log while the others go on serving it. Once every live replica of each joining group
        reports (heartbeat) the log position read after they were told, the placement switches to
        ``groups``, and the replicas of the groups left drop the model at their next sync (at once:
        the registry's stream tells them). Every event is in the log throughout, and feedback is
        accepted by any replica, so none is lost whichever replica serves meanwhile.

        A joining group without a live replica (at once), or one not caught up within ``timeout``
        seconds, undoes the move (:class:`~service.placement.PlacementError`, 409); :class:`ParamError`
        (422) for an unknown group.
        """
        placement = self._placement()
        store = self.shared.store
        target = list(dict.fromkeys(groups))
        unknown = [g for g in target if g not in placement.groups]
        if not target or unknown or len(target) != len(groups):
            known = ", ".join(sorted(placement.groups))
            raise ParamError(f"groups must be distinct names among {known}; got {list(groups)}")
        await store.get_model(name)  # UnknownModelError: 404
        before = (await store.placements()).get(name)
        current = placement.serving(name, before)
        joining = [g for g in target if g not in current]
        if joining:
            # a group with no live replica cannot catch up: say so now, not after the timeout
            live = {b.group for b in await store.replicas() if b.age < MOVE_LIVE_SECONDS}
            if absent := [g for g in joining if g not in live]:
                raise PlacementError(
                    f"model {name!r} not moved, placement unchanged: group {absent[0]} has no live replica"
                )
            await store.set_placement(name, {"groups": current, "joining": joining})
            try:
                await self._caught_up(name, joining, timeout)
            except PlacementError:
                await store.set_placement(name, before)
                raise
        await store.set_placement(name, {"groups": target})
        log.info("model %r moved from groups %s to %s", name, current, target)

    async def _caught_up(self, name: str, groups: list[str], timeout: float) -> None:
        """Until every live replica of ``groups`` (at least one each) reports ``name`` at the log
        position of now; :class:`PlacementError` after ``timeout`` seconds."""
        store = self.shared.store
        position = await store.log_position(name)
        deadline = time.monotonic() + timeout
        while True:
            beats = [b for b in await store.replicas() if b.group in groups and b.age < MOVE_LIVE_SECONDS]
            absent = [g for g in groups if g not in {b.group for b in beats}]
            behind = [b for b in beats if b.models.get(name, (-1, 0))[0] < position]
            if not absent and not behind:
                return
            if time.monotonic() > deadline:
                why = (
                    f"group {absent[0]} has no live replica"
                    if absent
                    else f"{len(behind)} replica(s) of groups {', '.join(groups)} did not reach position "
                    f"{position} within {timeout:.0f} s"
                )
                raise PlacementError(f"model {name!r} not moved, placement unchanged: {why}")
            await asyncio.sleep(0.1)

    def _placement(self) -> Placement:
        """The placement settings; :class:`PlacementError` (409) when there are none."""
        if self.shared.placement is None:
            raise PlacementError(
                "model placement is not configured on this replica (CLICKBOOST_REPLICA_GROUPS): "
                "every replica holds every model"
            )
        return self.shared.placement
