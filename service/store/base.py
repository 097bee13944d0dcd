"""The store interface: what every replica shares (DESIGN.md, "Request flow").

One interface, three implementations: :mod:`service.store.sqlite` (the embedded default: one
process, one file, kept across restarts), :mod:`service.store.memory` (one process, nothing kept:
tests and ``serve --memory``) and ``service.store.redis`` (several replicas). All three pass
``tests/service/store/test_contract.py``.

What the store holds, per model ``name``:

decision records
    ``{x, decision, model version, created_at, expires_at}`` written by ``POST /predict``, pending
    until claimed by feedback or by expiry. Implementations may forget a pending record after
    ``expires_at + grace`` (a TTL), never before. The id is new: ``put_decision`` inserts it only
    if absent (no pending record, no claim), atomically, else :class:`DecisionExistsError`.
deferred decisions (issue 38)
    A record made with ``deferred=True`` is learned from only if :meth:`Store.activate` arrives
    within its reward window (the page really showed it). A feedback before that is accepted and
    held in the pending record (:attr:`ClaimStatus.HELD`); the activation appends its learn event,
    or the feedback does when the decision is already active: once either way, in one atomic step.
    At expiry a deferred decision never activated is dropped (no learn event, no default reward,
    counted in ``dropped_unactivated``, logged "dropped"); an activated one without feedback takes
    the model's default reward as any other.
pages (issue 53)
    A page of several slots is a record per slot (:mod:`service.pages`): slot 0 under the page's
    id, slot ``s`` under :func:`slot_decision_id`. :meth:`Store.put_page` saves them whole or not
    at all; each slot's reward is its record's claim (:meth:`Store.claim_slot`), its expiry and
    default reward its record's; :meth:`Store.activate_page` activates every slot of a deferred page.
claims
    ``decision_id -> first outcome`` (click / no_click / expired), written in the same atomic step
    that appends the learn event, so a decision is learned from at most once. Kept for
    ``claim_ttl`` seconds so late duplicates get 409 (after that they get 404).
an append-only event log
    Positions 1, 2, 3, ... with no gaps. Every change of a model's learned state is an event
    (``learn``, ``reset``, ``import``, ``rollout``), as is every change of an action-feature model's
    catalog (``items``), and every replica applies the log in order, so the model
    version is the log position and replicas that applied the same prefix hold identical models.
checkpoints
    ``(position, serialised state)``: the model after applying events ``1..position``. A replica
    starts from the latest checkpoint and replays the log after it.
a decision log
    For the decisions recorded with ``logged=True``: features, probabilities, sampled label, model
    version and creation time, then the outcome once the decision is claimed (set in the claim's
    atomic step). Kept apart from the event log, which checkpoints trim: it is trimmed only by
    :meth:`Store.trim_decision_log` (age and count retention, oldest first, in bounded steps).
    Exported by :mod:`service.decision_log`.
model configs and counters
    The JSON config a model was created with, and decision/click/no-click/expired counts.
per-minute activity
    Decisions, clicks, no-clicks, expiries and exploration per minute (:class:`Activity`), the last
    :data:`ACTIVITY_MINUTES` minutes of each model: the history every replica's dashboard shows.
    Replicas add their counts in batches (:meth:`Store.add_activity`, about once a second), never
    on the request path.
replica heartbeats
    Each replica's last report (:class:`Heartbeat`: its applied version of every model), kept for a
    TTL; with one process (memory, SQLite) just that process's.

All methods are ``async`` (redis-py's asyncio client for Redis); the memory store never awaits
inside a method (but before reading a page of the decision log), and the SQLite store's awaits fall
only between whole transactions (an expiry sweep and a trim run in bounded steps) or before a read,
so each claim and each feedback is atomic. A page of the decision log is bounded work: every store
hands the event loop back for each one (an export reads the whole log). Times are Unix seconds
(float) passed in by the caller, so tests control the clock.
"""

from __future__ import annotations

import abc
import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

# The record types live in service.store.records; imported here too, where every store and caller
# has always found them.
from service.store import records
from service.store.records import (  # noqa: F401 (re-exported: records.__all__)
    ACTIVITY_MINUTES,
    ID_PATTERN,
    MAX_DECISION_ID_LENGTH,
    MAX_ID_LENGTH,
    MAX_ROUTE_SUFFIX,
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
    EventKind,
    Expiry,
    Heartbeat,
    LoggedDecision,
    LogOutcome,
    ModelExistsError,
    Outcome,
    Reward,
    StoreUnavailableError,
    Tail,
    UnknownModelError,
    check_decision_id,
    feedback_outcome,
    slot_decision_id,
    split_slot_id,
)

__all__ = ["Store", *records.__all__]


class Store(abc.ABC):
    """Shared storage of models, decisions, event logs and checkpoints (see module docstring).

    Parameters
    ----------
    claim_ttl : float
        Seconds a claim is remembered after it was made (duplicates within it get 409).
    """

    def __init__(self, claim_ttl: float = 86_400.0) -> None:
        self.claim_ttl = claim_ttl
        # One-process stores: the heartbeats of this process's runtimes, each with when it was
        # recorded and its expiry (time.monotonic()); the Redis store keeps them in Redis instead.
        self._beats: dict[str, tuple[Heartbeat, float, float]] = {}
        self._placements: dict[str, dict[str, Any]] = {}  # likewise for placement overrides

    # -- models -----------------------------------------------------------------------------

    @abc.abstractmethod
    async def create_model(self, name: str, config: Mapping[str, Any]) -> None:
        """Store ``config`` (a JSON-able dict) for a new model; :class:`ModelExistsError` if taken."""

    @abc.abstractmethod
    async def get_model(self, name: str) -> dict[str, Any]:
        """The config of ``name``; :class:`UnknownModelError` if none."""

    @abc.abstractmethod
    async def list_models(self) -> dict[str, dict[str, Any]]:
        """All configs by name."""

    @abc.abstractmethod
    async def delete_model(self, name: str) -> None:
        """Remove the config, log, checkpoint, counters and pending decisions of ``name``.

        Raises :class:`UnknownModelError` if there is no such model.
        """

    @abc.abstractmethod
    async def counts(self, name: str) -> Counts:
        """The counters of ``name`` (all zero for a new model)."""

    # -- decisions and feedback -------------------------------------------------------------

    @abc.abstractmethod
    async def put_decision(self, record: DecisionRecord) -> None:
        """Save a pending decision and count it (a deferred one in ``deferred`` too).

        Insert if absent, atomically: :class:`DecisionExistsError` when the id has a pending record
        or a claim still known (two replicas saving one id: exactly one succeeds).
        """

    @abc.abstractmethod
    async def get_decision(self, decision_id: str) -> DecisionRecord | None:
        """The pending record of ``decision_id`` (``None`` once claimed or forgotten)."""

    @abc.abstractmethod
    async def claim_and_append(
        self, decision_id: str, reward: Reward, now: float, model: str | None = None
    ) -> ClaimOutcome:
        """Atomically claim a pending decision for feedback and append its learn event.

        In one atomic step: if ``decision_id`` was claimed before, return DUPLICATE (or EXPIRED
        when the first claim was the expiry) with the first claim; if there is no pending record,
        UNKNOWN; if ``now >= expires_at``, EXPIRED without claiming (:meth:`expire_due` will);
        otherwise remove the pending record, record the claim, append
        ``Event(kind="learn", reward=reward, outcome=feedback_outcome(reward))`` to the model's log,
        bump the click / no-click counter (a graded reward: ``graded`` and ``graded_sum``) and
        return ACCEPTED with the claim (its ``position`` is the event's). ``reward`` is the click
        bit or a float strictly between 0 and 1, kept exactly. Exactly one of any number of
        concurrent callers gets ACCEPTED.

        A deferred decision not activated yet: the first feedback is held in its record and HELD
        returned (the claim to be, position None); a later one is a DUPLICATE of it. Its learn
        event is appended by :meth:`activate` if that comes within the window.

        ``model``: the model the caller names (a Personalizer loop, ``/loops/NAME``): a decision of
        another model is UNKNOWN there, and nothing is claimed (None: any model's, as ``/feedback``).
        """

    @abc.abstractmethod
    async def activate(self, decision_id: str, now: float, model: str | None = None) -> ActivateOutcome:
        """Mark a deferred decision as shown, atomically; learn its held feedback if any.

        In one atomic step: a decision with a claim is ALREADY (deferred and activated, or not
        deferred) or EXPIRED (deferred and dropped unactivated); with no pending record and no
        claim, UNKNOWN; a pending one not deferred, or activated before, is ALREADY; a deferred one
        not activated with ``now >= expires_at`` is EXPIRED (the sweep drops it); otherwise it is
        activated now (``activated`` counted, its decision-log entry marked) and, if a feedback is
        held, claimed with it and its learn event appended as :meth:`claim_and_append` would
        (ACTIVATED with the claim and the reward). Exactly one of concurrent callers gets ACTIVATED.
        ``model`` as for :meth:`claim_and_append`: a decision of another model is UNKNOWN.
        """

    @abc.abstractmethod
    async def expire_due(
        self, model: str, now: float, default_reward: Literal["no_click", "drop"]
    ) -> list[Claim]:
        """Claim every pending decision of ``model`` with ``expires_at <= now`` as expired.

        Each is claimed atomically (a concurrent feedback cannot also claim it) with outcome
        ``expired``; with ``default_reward="no_click"`` a learn event with ``reward=False`` is
        appended for it, with ``"drop"`` nothing is appended (``position`` is ``None``). The
        expired counter is bumped. A deferred decision never activated is dropped whatever the
        default reward (a held feedback with it): no event, ``dropped_unactivated`` bumped instead,
        its claim ``deferred`` and not ``activated``. Returns the claims made, in log order.
        """

    # -- pages (issue 53): a record per slot under ids derived from the page's (service.pages) ----

    async def put_page(self, records: Sequence[DecisionRecord]) -> None:
        """Save a page's slot records (:func:`service.pages.page_records`, slot order; the first one's
        id is the page's) as :meth:`put_decision` saves one: the page is saved whole or not at all,
        :class:`DecisionExistsError` when its id is taken (or a slot's, by a page of the same id
        whose claims are still known).

        This default puts slot 0 first (insert if absent: the page's id is then this page's, and no
        other writer can make a slot id of it), then the others; the stores override it with one
        atomic step (memory, SQLite) or a check of every slot's key first (Redis).
        """
        first, *rest = records
        await self.put_decision(first)
        for record in rest:
            await self.put_decision(record)

    async def claim_slot(
        self, decision_id: str, slot: int, reward: Reward, now: float, model: str | None = None
    ) -> ClaimOutcome:
        """:meth:`claim_and_append` for slot ``slot`` of the page ``decision_id``: each slot's reward
        is taken once (a second is DUPLICATE), UNKNOWN for a slot the page does not have. Slot 0 of a
        single decision is the decision itself."""
        return await self.claim_and_append(slot_decision_id(decision_id, slot), reward, now, model)

    async def activate_page(
        self, decision_id: str, now: float, model: str | None = None
    ) -> list[ActivateOutcome]:
        """:meth:`activate` for every slot of the page ``decision_id``, in slot order (each atomic:
        exactly once per slot however many activations race; a retry after a failure activates the
        slots left). The slots are those whose record or claim is known: slot 0, 1, ... up to the
        first UNKNOWN (a page's claims are kept as long as a decision's). An unknown page gives
        ``[UNKNOWN]``."""
        out = [await self.activate(decision_id, now, model)]
        while out[-1].status is not ActivateStatus.UNKNOWN:
            out.append(await self.activate(slot_decision_id(decision_id, len(out)), now, model))
        return out if len(out) == 1 else out[:-1]

    async def expire(self, model: str, now: float, default_reward: Literal["no_click", "drop"]) -> Expiry:
        """:meth:`expire_due`, and when the next pending decision of ``model`` is due (if the store
        can tell at no extra cost: the shared store's sweep then skips a model until it is due)."""
        return Expiry(await self.expire_due(model, now, default_reward))

    # -- event log and checkpoints ------------------------------------------------------------

    @abc.abstractmethod
    async def append(self, model: str, event: Event) -> int:
        """Append a ``reset``, ``import``, ``rollout`` or ``items`` event (its ``position`` is ignored);
        return the position."""

    @abc.abstractmethod
    async def read_log(self, model: str, after: int, limit: int = 1000) -> list[Event]:
        """Events of ``model`` with positions ``after+1 ..`` in order, at most ``limit``."""

    @abc.abstractmethod
    async def log_position(self, model: str) -> int:
        """Position of the last appended event of ``model`` (0 for an empty log)."""

    @abc.abstractmethod
    async def put_checkpoint(self, model: str, checkpoint: Checkpoint) -> None:
        """Save ``checkpoint`` unless one at a later position is already stored."""

    @abc.abstractmethod
    async def get_checkpoint(self, model: str) -> Checkpoint | None:
        """The latest checkpoint of ``model``, if any."""

    @abc.abstractmethod
    async def trim_log(self, model: str, upto: int) -> None:
        """Forget events at positions ``<= upto`` (they are covered by a checkpoint)."""

    # -- decision log -----------------------------------------------------------------------------

    @abc.abstractmethod
    async def read_decision_log(
        self,
        model: str,
        since: float = -math.inf,
        until: float = math.inf,
        after: str | None = None,
        limit: int = 256,
    ) -> tuple[list[LoggedDecision], str | None]:
        """One page of ``model``'s decision log: entries with ``since <= created_at < until``.

        In the order of their creation times (the Redis store: of their arrival, which differs only
        under clock skew between replicas), at most ``limit``, starting after the cursor ``after``
        (None: from the start). Returns the page and the cursor to pass for the next one, None when
        there is no more. :class:`UnknownModelError` if there is no such model.
        """

    @abc.abstractmethod
    async def trim_decision_log(self, model: str, older_than: float | None, keep: int | None) -> int:
        """Forget the decision-log entries of ``model`` created before ``older_than`` and all but the
        newest ``keep`` (None: no such limit); return how many were forgotten.

        Oldest first, in bounded steps (never a scan of the whole log): the retention of
        ``CLICKBOOST_LOG_RETENTION``, applied by every expiry sweep. A store whose learn events name
        the entry that holds their features (Redis) keeps the entries that events still in its event
        log name, and forgets them at a sweep after the checkpoint that trims those events.
        """

    # -- dashboard: per-minute activity -----------------------------------------------------------

    @abc.abstractmethod
    async def add_activity(self, model: str, minutes: Mapping[int, Activity]) -> None:
        """Add ``minutes`` (minute number ``floor(unix seconds / 60)`` -> counts) to ``model``'s.

        Atomic per call, and additive: replicas add their own counts for the same minutes. Then
        forget the minutes more than :data:`ACTIVITY_MINUTES` before the latest minute held, so a
        model holds at most that many. :class:`UnknownModelError` if there is no such model.
        """

    @abc.abstractmethod
    async def read_activity(self, model: str, since: int) -> dict[int, Activity]:
        """``model``'s minutes ``>= since`` that hold any count, in increasing order.

        :class:`UnknownModelError` if there is no such model.
        """

    # -- lifecycle ------------------------------------------------------------------------------

    @abc.abstractmethod
    async def ping(self) -> None:
        """Raise if the store is unreachable (``GET /readyz``)."""

    async def close(self) -> None:  # noqa: B027 (optional hook: the memory store holds nothing)
        """Release connections."""

    # -- replication (several replicas on one shared store; no-ops for one process) -------------

    #: True when other processes may append to the logs (a replica must tail them).
    shared: bool = False

    async def prepare(self) -> None:  # noqa: B027 (optional hook)
        """Called once by a runtime before it uses the store (the Redis store migrates older key
        layouts here)."""

    def route(self, model: str, decision_id: str) -> str:
        """The id handed out for a decision of ``model`` drawn as ``decision_id`` (random, opaque).

        One-process stores use it as is; a sharded store appends what finds the decision's shard
        from the id alone (the feedback carries nothing else), at most :data:`MAX_ROUTE_SUFFIX`
        characters of the decision id's (:func:`check_decision_id`).
        """
        return decision_id

    async def tail(self, positions: Mapping[str, int], timeout: float) -> Tail:
        """The events appended after ``positions`` (model -> applied position), waiting up to
        ``timeout`` seconds for one when there are none yet.

        Only replicas of a shared store call it (one-process stores never see others' events): the
        default sleeps and finds nothing. The Redis store blocks on every log at once (``XREAD
        BLOCK``) and reports model creations and deletions made through other replicas.
        """
        await asyncio.sleep(timeout)
        return Tail()

    async def lease(self, name: str, holder: str, ttl: float) -> bool:
        """Take or renew the lease ``name`` for ``holder`` for ``ttl`` seconds; False if another holds it.

        One process owns every lease of the memory store, so the default always grants it.
        """
        return True

    async def heartbeat(self, beat: Heartbeat, ttl: float) -> None:
        """Record ``beat`` (replacing the replica's last one) for ``ttl`` seconds.

        The default keeps it in this process: a one-process store lists the process's own runtimes.
        """
        now = time.monotonic()
        self._beats[beat.replica] = (beat, now, now + ttl)

    async def replicas(self) -> list[Heartbeat]:
        """The live heartbeats (recorded less than their ``ttl`` ago) by replica id, ``age`` set."""
        now = time.monotonic()
        self._beats = {r: v for r, v in self._beats.items() if v[2] > now}
        return [replace(b, age=now - at) for _, (b, at, _) in sorted(self._beats.items())]

    async def forget_replica(self, replica: str) -> None:
        """Drop ``replica``'s heartbeat (a replica that stops cleanly is gone at once, not at its TTL)."""
        self._beats.pop(replica, None)

    async def placements(self) -> dict[str, dict[str, Any]]:
        """The placement overrides by model (:mod:`service.placement`): ``{"groups": [...]}``, the
        groups a moved model is placed on, with ``"joining": [...]`` while a move is under way.
        Models without one are placed by rendezvous hashing.

        The default keeps them in this process (placement needs a shared store; the settings refuse
        replica groups without one).
        """
        return dict(self._placements)

    async def set_placement(self, model: str, override: Mapping[str, Any] | None) -> None:
        """Store ``model``'s placement override (None: remove it) and tell the replicas, as a model
        creation is told (:meth:`tail` reports ``models_changed``)."""
        if override is None:
            self._placements.pop(model, None)
        else:
            self._placements[model] = dict(override)
