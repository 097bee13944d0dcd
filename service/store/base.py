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
claims
    ``decision_id -> first outcome`` (click / no_click / expired), written in the same atomic step
    that appends the learn event, so a decision is learned from at most once. Kept for
    ``claim_ttl`` seconds so late duplicates get 409 (after that they get 404).
an append-only event log
    Positions 1, 2, 3, ... with no gaps. Every change of a model's learned state is an event
    (``learn``, ``reset``, ``import``), and every replica applies the log in order, so the model
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
import enum
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

__all__ = [
    "ACTIVITY_MINUTES",
    "ID_PATTERN",
    "MAX_DECISION_ID_LENGTH",
    "MAX_ID_LENGTH",
    "MAX_ROUTE_SUFFIX",
    "ActivateOutcome",
    "ActivateStatus",
    "Activity",
    "Claim",
    "ClaimOutcome",
    "ClaimStatus",
    "Counts",
    "DecisionExistsError",
    "DecisionRecord",
    "Event",
    "Expiry",
    "Heartbeat",
    "LoggedDecision",
    "ModelExistsError",
    "Reward",
    "Store",
    "StoreUnavailableError",
    "Tail",
    "UnknownModelError",
    "check_decision_id",
    "feedback_outcome",
]

EventKind = Literal["learn", "reset", "import", "rollout"]
#: "reward": feedback with a graded reward strictly between 0 and 1 (issue 38).
Outcome = Literal["click", "no_click", "reward", "expired"]
#: A logged decision's outcome: an expiry is "expired" when it taught the default reward (no click),
#: "dropped" when the model's ``default_reward`` is "drop".
LogOutcome = Literal["click", "no_click", "reward", "expired", "dropped"]
#: What a feedback teaches: the click bit, or a graded reward as a float strictly between 0 and 1
#: (a reward of exactly 0 or 1 is the bit, so it behaves bit for bit as a click / no click).
Reward = bool | float


def feedback_outcome(reward: Reward) -> Outcome:
    """The outcome a feedback of ``reward`` records: "click" / "no_click" for a bit, else "reward"."""
    if isinstance(reward, bool):
        return "click" if reward else "no_click"
    return "reward"


class UnknownModelError(KeyError):
    """The store holds no model of this name."""

    def __str__(self) -> str:
        return str(self.args[0])


class ModelExistsError(ValueError):
    """``create_model`` was asked for a name that is already taken."""


class DecisionExistsError(ValueError):
    """``put_decision`` was given an id that is taken: its pending record or its claim is still known
    (a client-chosen id reused, HTTP 409)."""

    def __init__(self, decision_id: str) -> None:
        super().__init__(
            f"decision id {decision_id!r} is taken (a decision with this id is pending or was answered "
            "recently); choose a new id"
        )
        self.decision_id = decision_id


class StoreUnavailableError(ConnectionError):
    """The shared store cannot be reached now; the caller may retry later (HTTP 503)."""


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """A pending decision: everything the learn event needs, saved at ``POST /predict``.

    Attributes
    ----------
    decision_id : str
        The opaque id returned to the client.
    model : str
        Name of the model that decided.
    x : ndarray, float64
        The featurised context as ``decide`` saw it, in the runtime's compact form
        (:meth:`service.features.Featuriser.pack`: the dense vector, or for hashed features the
        non-zero buckets); the store keeps it bit for bit.
    decision : dict
        ``Decision.to_state()``: probabilities, sampled label and memo.
    model_version : int
        Log position of the model when it decided.
    created_at, expires_at : float
        Unix seconds; feedback after ``expires_at`` is refused and the default reward applies.
    logged : bool
        Also keep the decision in the model's decision log (the model's ``log_decisions``).
    deferred : bool
        Learned from only if activated within the reward window (:meth:`Store.activate`).
    activated_at : float or None
        When a deferred decision was activated (as read back by ``get_decision``; None: not yet,
        or not deferred).
    """

    decision_id: str
    model: str
    x: np.ndarray
    decision: dict[str, Any]
    model_version: int
    created_at: float
    expires_at: float
    logged: bool = False
    deferred: bool = False
    activated_at: float | None = None


@dataclass(frozen=True, slots=True)
class LoggedDecision:
    """One entry of a model's decision log, as the store keeps it.

    :mod:`service.decision_log` turns it into the exported record (label names, features unpacked).

    Attributes
    ----------
    decision_id : str
        The decision's id.
    model_version : int
        Log position of the model when it decided.
    created_at : float
        Unix seconds of the decision.
    x : ndarray, float64
        The packed features of the decision record, bit for bit.
    probs : ndarray, float64
        The distribution the label was sampled from.
    label : int
        The sampled label (0-based).
    outcome : {"click", "no_click", "reward", "expired", "dropped"} or None
        None while the decision is pending.
    reward : bool, float or None
        The reward learned from: the click bit or the graded reward (a float in (0, 1)), False for
        an expiry with the default reward; None while pending and for a dropped decision.
    outcome_at : float or None
        Unix seconds of the claim (feedback or expiry).
    eligible : ndarray of bool or None
        The labels the request allowed (``memo.eligible`` of the decision); None: every label.
    learner_probs : ndarray, float64, or None
        For a decision served in logging or apprentice mode (:mod:`service.rollout`): the learner's
        own distribution (``memo.policy``), beside the served ``probs``; None otherwise.
    baseline : int or None
        Likewise, the request's baseline label (``memo.baseline``).
    deferred : bool
        The decision was deferred (learned only if activated in its window).
    activated_at : float or None
        Unix seconds of its activation; None while not activated (and for one not deferred).
    """

    decision_id: str
    model_version: int
    created_at: float
    x: np.ndarray
    probs: np.ndarray
    label: int
    outcome: LogOutcome | None = None
    reward: Reward | None = None
    outcome_at: float | None = None
    eligible: np.ndarray | None = None
    learner_probs: np.ndarray | None = None
    baseline: int | None = None
    deferred: bool = False
    activated_at: float | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a model's append-only log.

    Attributes
    ----------
    position : int
        1-based position in the model's log; the model version after applying this event.
    kind : {"learn", "reset", "import", "rollout"}
        ``learn``: apply ``learner.learn(x, decision, reward)``. ``reset``: replace the model by
        a fresh one from its config. ``import``: replace the learned state by ``state``.
        ``rollout``: switch the model's rollout mode (:mod:`service.rollout`), ``state`` its JSON.
    decision_id : str
        For ``learn``: the decision learned from; empty otherwise.
    x, decision, reward
        For ``learn``: the record's features and decision, and the click bit (the default reward
        for expired decisions) or the graded reward, a float in (0, 1) (outcome "reward"; the
        runtime turns it into what each learner learns, :meth:`service.runtime.ModelRuntime.apply`).
        ``None`` otherwise.
    outcome : {"click", "no_click", "reward", "expired"} or None
        For ``learn``: why the reward is what it is.
    state : bytes or None
        For ``import``: the state encoded by :func:`service.serial.encode`; for ``rollout``: the
        change as JSON (:meth:`service.rollout.Rollout.event`). Every store keeps it as it keeps an
        import's.
    at : float
        Unix seconds when the event was appended.
    """

    position: int
    kind: EventKind
    at: float
    decision_id: str = ""
    x: np.ndarray | None = None
    decision: dict[str, Any] | None = None
    reward: Reward | None = None
    outcome: Outcome | None = None
    state: bytes | None = None


class ClaimStatus(enum.Enum):
    """Result of :meth:`Store.claim_and_append`."""

    ACCEPTED = "accepted"  # claimed now; the learn event is in the log at ``position``
    DUPLICATE = "duplicate"  # claimed before by feedback; ``claim`` says the first outcome
    EXPIRED = "expired"  # reward window passed (claimed by expiry, or due to be)
    UNKNOWN = "unknown"  # no such pending decision and no claim (never existed, or forgotten)
    # a deferred decision not activated yet: the feedback is held in its record (``claim`` says it,
    # position None) and learned when the activation comes within the window, else dropped
    HELD = "held"


@dataclass(frozen=True, slots=True)
class Claim:
    """The first (and only) outcome of a decision (or a feedback held for a deferred decision)."""

    decision_id: str
    model: str
    outcome: Outcome
    # log position of its learn event; None when the default reward is "drop", for a deferred
    # decision dropped unactivated, and for a held feedback
    position: int | None
    at: float
    deferred: bool = False  # the decision was deferred
    activated: bool = False  # ... and activated (a deferred claim not activated was dropped)


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    """What :meth:`Store.claim_and_append` did; ``claim`` is set unless the status is UNKNOWN."""

    status: ClaimStatus
    claim: Claim | None = None


class ActivateStatus(enum.Enum):
    """Result of :meth:`Store.activate`."""

    ACTIVATED = "activated"  # activated now (``reward`` set when a held feedback was learned now)
    ALREADY = "already"  # active already: activated before, or not deferred (``deferred`` False)
    EXPIRED = "expired"  # deferred, never activated, and its reward window passed: dropped
    UNKNOWN = "unknown"  # no such pending decision and no claim


@dataclass(frozen=True, slots=True)
class ActivateOutcome:
    """What :meth:`Store.activate` did.

    Attributes
    ----------
    status : ActivateStatus
    claim : Claim or None
        The decision's claim if it has one: the one made now when a held feedback was learned at
        this activation (ACTIVATED), the earlier one (ALREADY, EXPIRED), or the expiry to come
        (EXPIRED before the sweep, position None).
    deferred : bool
        Whether the decision was deferred (an activation of one that was not is a harmless ALREADY).
    reward : bool, float or None
        The held feedback's reward, learned at this activation (ACTIVATED only).
    """

    status: ActivateStatus
    claim: Claim | None = None
    deferred: bool = True
    reward: Reward | None = None


@dataclass(frozen=True, slots=True)
class Expiry:
    """What :meth:`Store.expire` did: the claims made, and when the next pending decision is due.

    ``next_due`` is the earliest ``expires_at`` still pending (``math.inf``: none), or None when the
    store does not say (the caller then sweeps again next round).
    """

    claims: list[Claim]
    next_due: float | None = None


@dataclass(frozen=True, slots=True)
class Tail:
    """What :meth:`Store.tail` found: new events by model (in log order, after the positions asked
    for, possibly not all of them yet), whether models were created or deleted meanwhile, and whether
    a log had more new events than one read brings (``more``: the caller reads again at once)."""

    events: dict[str, list[Event]] = field(default_factory=dict)
    models_changed: bool = False
    more: bool = False


@dataclass(slots=True)
class Counts:
    """Per-model counters, shared by every replica."""

    decisions: int = 0
    clicks: int = 0
    no_clicks: int = 0
    expired: int = 0
    pending: int = 0
    graded: int = 0  # feedbacks with a graded reward strictly between 0 and 1 (issue 38)
    graded_sum: float = 0.0  # the sum of their rewards
    deferred: int = 0  # decisions made deferred (issue 38)
    activated: int = 0  # deferred decisions activated within their window
    dropped_unactivated: int = 0  # deferred decisions dropped at expiry, never activated

    @property
    def ctr(self) -> float | None:
        """Clicks / click-bit answers (expired and graded ones excluded); ``None`` before the first."""
        answered = self.clicks + self.no_clicks
        return self.clicks / answered if answered else None

    @property
    def reward_sum(self) -> float:
        """The sum of the rewards of every feedback: a click counts 1, a graded reward its value."""
        return self.clicks + self.graded_sum

    @property
    def mean_reward(self) -> float | None:
        """:attr:`reward_sum` / feedbacks (expired ones excluded); ``None`` before the first."""
        answered = self.clicks + self.no_clicks + self.graded
        return self.reward_sum / answered if answered else None


#: Minutes of per-minute activity kept per model (24 h): older minutes are forgotten as newer ones come.
ACTIVITY_MINUTES = 1440

# Decision ids: one rule for every route and every store (issue 51). An id a client chooses
# (``POST /predict``'s ``decision_id``, a Personalizer rank's ``eventId``, the ``eventId`` of a reward's
# or an activation's path) is 1 to MAX_ID_LENGTH characters (Personalizer's eventId limit) safe in a
# URL path segment and in a store key (no slash: the routes; no braces: Redis hash tags), and not "."
# or "..", which a client's HTTP library would resolve as path segments. The id the server hands out
# is that id or a drawn one plus the store's routing suffix (:meth:`Store.route`, at most
# MAX_ROUTE_SUFFIX characters), so the routes that take it back (``POST /feedback``,
# ``POST /decisions/{id}/activate``) accept MAX_DECISION_ID_LENGTH: the longest chosen id works on
# every store.
#: The longest decision id a client may choose.
MAX_ID_LENGTH = 256
#: The most characters :meth:`Store.route` appends (the Redis store: a dot and a slot tag of 1 to 4).
MAX_ROUTE_SUFFIX = 5
#: The longest decision id the server hands out.
MAX_DECISION_ID_LENGTH = MAX_ID_LENGTH + MAX_ROUTE_SUFFIX
#: The characters of a decision id (of both kinds), as a regular expression for one or more.
ID_PATTERN = r"^[A-Za-z0-9_.:-]+$"
_ID = re.compile(ID_PATTERN)


def check_decision_id(value: str, handed_out: bool = False) -> str:
    """``value`` if it is a decision id a client may choose (``handed_out``: one the server handed
    out, with its routing suffix), else :class:`ValueError` naming the rule and its limit."""
    limit = MAX_DECISION_ID_LENGTH if handed_out else MAX_ID_LENGTH
    if isinstance(value, str) and 0 < len(value) <= limit and _ID.match(value) and value not in (".", ".."):
        return value
    what = "a decision id as handed out" if handed_out else "a decision id"
    shown = repr(value[:80]) + ("..." if len(value) > 80 else "") if isinstance(value, str) else repr(value)
    size = "" if not isinstance(value, str) else f" ({len(value)} characters)"
    raise ValueError(
        f"{shown}{size} is not {what}: 1 to {limit} characters of A-Z, a-z, 0-9, '_', '.', ':', '-', "
        "and not '.' or '..'"
    )


@dataclass(slots=True)
class Activity:
    """What happened to one model in one minute, summed over every replica.

    Attributes
    ----------
    decisions, clicks, no_clicks, expired : int
        Decisions made, feedbacks with and without a click, decisions given the default reward.
    exploration : float
        Sum over the decisions of ``1 - max(probabilities)``: the chance that the label shown was not
        the model's top choice. Divided by ``decisions``, the share of traffic spent exploring.
    graded, graded_sum : int, float
        Feedbacks with a graded reward strictly between 0 and 1, and the sum of their rewards.
    """

    decisions: int = 0
    clicks: int = 0
    no_clicks: int = 0
    expired: int = 0
    exploration: float = 0.0
    graded: int = 0
    graded_sum: float = 0.0

    def add(self, other: Activity) -> None:
        """Add ``other``'s counts to these."""
        self.decisions += other.decisions
        self.clicks += other.clicks
        self.no_clicks += other.no_clicks
        self.expired += other.expired
        self.exploration += other.exploration
        self.graded += other.graded
        self.graded_sum += other.graded_sum


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A replica's report of itself, refreshed every few seconds while it runs.

    Attributes
    ----------
    replica : str
        The replica's id (``Runtime.replica_id``).
    host : str
        Host name of its machine.
    pid : int
        Its process id there.
    started_at : float
        Unix seconds when it started (by its own clock).
    models : dict
        Model name -> ``(version, behind)``: the log position it had applied and how many events the
        log held beyond it, both read at the time of the report.
    age : float
        Seconds since the report was recorded, by the store's clock (set when listed; 0 when sent).
    group : str or None
        Its replica group (``CLICKBOOST_REPLICA_GROUP``; :mod:`service.placement`), None without.
    placement : str or None
        :meth:`service.placement.Placement.fingerprint` of its placement settings, None without.
    """

    replica: str
    host: str
    pid: int
    started_at: float
    models: dict[str, tuple[int, int]]
    age: float = 0.0
    group: str | None = None
    placement: str | None = None

    @property
    def fingerprinted(self) -> bool:
        """Whether its placement settings can be compared: a replica of an earlier release reports a
        group without a fingerprint (it is left out of the comparison during a rolling upgrade)."""
        return self.placement is not None or self.group is None

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-able data (``age`` left out: the store knows it)."""
        return {
            "replica": self.replica,
            "host": self.host,
            "pid": self.pid,
            "started_at": self.started_at,
            "models": {name: list(v) for name, v in self.models.items()},
            "group": self.group,
            "placement": self.placement,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], age: float) -> Heartbeat:
        """The report :meth:`to_json` gave, recorded ``age`` seconds ago."""
        models = {str(name): (int(v[0]), int(v[1])) for name, v in doc["models"].items()}
        group = doc.get("group")  # absent from the reports of earlier releases
        placement = doc.get("placement")  # likewise
        return cls(
            str(doc["replica"]),
            str(doc["host"]),
            int(doc["pid"]),
            float(doc["started_at"]),
            models,
            age,
            None if group is None else str(group),
            None if placement is None else str(placement),
        )


@dataclass(slots=True)
class Checkpoint:
    """A model's serialised state after applying log positions ``1..position``."""

    position: int
    state: bytes = field(repr=False)


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

    async def expire(self, model: str, now: float, default_reward: Literal["no_click", "drop"]) -> Expiry:
        """:meth:`expire_due`, and when the next pending decision of ``model`` is due (if the store
        can tell at no extra cost: the shared store's sweep then skips a model until it is due)."""
        return Expiry(await self.expire_due(model, now, default_reward))

    # -- event log and checkpoints ------------------------------------------------------------

    @abc.abstractmethod
    async def append(self, model: str, event: Event) -> int:
        """Append a ``reset``, ``import`` or ``rollout`` event (its ``position`` is ignored); return the
        position."""

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
