"""What the stores keep and answer, as values: decision records, events, claims, outcomes, counts,
activity, heartbeats, checkpoints, the store's errors and the rule of a decision id.

The interface that reads and writes them is :class:`service.store.base.Store` (its module says what
the store holds and what each implementation guarantees); every name here is also importable from
:mod:`service.store.base`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
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
    "Checkpoint",
    "Claim",
    "ClaimOutcome",
    "ClaimStatus",
    "Counts",
    "DecisionExistsError",
    "DecisionRecord",
    "Event",
    "EventKind",
    "Expiry",
    "Heartbeat",
    "LogOutcome",
    "LoggedDecision",
    "ModelExistsError",
    "Outcome",
    "Reward",
    "StoreUnavailableError",
    "Tail",
    "UnknownModelError",
    "check_decision_id",
    "feedback_outcome",
    "slot_decision_id",
    "split_slot_id",
]

EventKind = Literal["learn", "reset", "import", "rollout", "items"]
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
    slot : int or None
        For a slot of a page (issue 53, :mod:`service.pages`): its index; ``x`` is then the packed
        page and ``probs`` the slot's distribution given the earlier slots' choices. None: a single
        decision.
    catalog : dict or None
        For a decision over a model's catalog (issue 54): its selection
        (:func:`service.store.codec.catalog_of`), which rebuilds its candidates
        (:mod:`service.catalog_replay`); None otherwise.
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
    slot: int | None = None
    catalog: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a model's append-only log.

    Attributes
    ----------
    position : int
        1-based position in the model's log; the model version after applying this event.
    kind : {"learn", "reset", "import", "rollout", "items"}
        ``learn``: apply ``learner.learn(x, decision, reward)``. ``reset``: replace the model by
        a fresh one from its config. ``import``: replace the learned state by ``state``.
        ``rollout``: switch the model's rollout mode (:mod:`service.rollout`), ``state`` its JSON.
        ``items``: change the model's catalog (:mod:`service.runtime.items`), ``state`` the items
        hashed or the ids removed, :func:`service.serial.encode`'s bytes.
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
        change as JSON (:meth:`service.rollout.Rollout.event`); for ``items``: the catalog change
        (up to a few MB). Every store keeps it as it keeps an import's.
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


#: What separates a page's id from a slot's index in the id of the slot's record (issue 53,
#: :mod:`service.pages`): not a character of :data:`ID_PATTERN`, so no client id can take it.
SLOT_MARK = "~"


def slot_decision_id(decision_id: str, s: int) -> str:
    """The id of slot ``s``'s record of the page handed out as ``decision_id`` (:mod:`service.pages`):
    the id itself for slot 0, else ``~s`` inserted before the last dot (the routing suffix on Redis,
    so the slot's record is on the page's shard), or appended when there is no dot."""
    if s == 0:
        return decision_id
    head, dot, tail = decision_id.rpartition(".")
    if not dot:
        return f"{decision_id}{SLOT_MARK}{s}"
    return f"{head}{SLOT_MARK}{s}.{tail}"


def split_slot_id(record_id: str) -> tuple[str, int]:
    """Inverse of :func:`slot_decision_id`: the page's id and the slot of a record id (slot 0 for an
    id without the mark, which is also a single decision's)."""
    if SLOT_MARK not in record_id:
        return record_id, 0
    head, _, rest = record_id.partition(SLOT_MARK)
    index, dot, tail = rest.partition(".")
    return head + dot + tail, int(index)


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
