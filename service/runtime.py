"""Models at run time: decide -> record; feedback -> event; events applied in log order.

A :class:`Runtime` serves every model of a store in one process (one replica). Each model is a
:class:`ModelRuntime`: the learner, its featuriser and the log position it has applied, which is
the model version. Every change of the learned state goes through the store's event log (learn,
reset, import), and each replica applies the log in order, so replicas that applied the same
prefix hold bit-identical models (same :meth:`ModelRuntime.checksum`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gc
import logging
import math
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import numpy as np

from service import _jit_cache
from service.actions import ActionFeaturiser, ActionInput
from service.config import ModelSpec, Settings, load_model_file
from service.decision_log import LogRecord, pages
from service.evaluations import Evaluations, remove_stale
from service.features import FeatureError, FeatureValue, Featuriser, SparseVector
from service.learners.base import Decision, Learner, ParamError, learner_from_state, learners, make_learner
from service.placement import Placement, PlacementError
from service.rollout import Rollout, served
from service.sampling import DecisionIds, decision_rng, reward_bit
from service.serial import State, checksum, decode, encode, encode_sparse
from service.store import (
    ACTIVITY_MINUTES,
    ActivateOutcome,
    ActivateStatus,
    Activity,
    Checkpoint,
    Claim,
    ClaimOutcome,
    ClaimStatus,
    DecisionExistsError,
    DecisionRecord,
    Event,
    Heartbeat,
    ModelExistsError,
    Store,
    StoreUnavailableError,
    UnknownModelError,
)
from service.store.base import Reward, Tail, check_decision_id

__all__ = [
    "DEMO_MODEL",
    "ModelRuntime",
    "Prediction",
    "Runtime",
    "build_learner",
    "check_declared",
    "check_event_id",
]

log = logging.getLogger("clickboost.runtime")

# Replication (docs/ARCHITECTURE.md, "Replication"): a replica on a shared store blocks this long on
# the logs per round of its tail loop (one read over every log, so an idle replica sends about one
# command per round whatever its number of models), and keeps at most this many decisions it could
# not record while the store was down (recorded when it is back; the oldest are dropped beyond
# that). For RECOVERY_SECONDS after it last saw the store down, a replica answers an unknown decision
# id with 503 rather than 404: it may be one that another replica made during the outage and is
# recording. Model creations and deletions come with the tail (the registry's stream); the whole list
# is read again every MODEL_RESYNC_SECONDS in case a notice was missed.
TAIL_BLOCK_SECONDS = 1.0
# After a round of the tail that brought a few events, the next read waits the setting
# follow_pause_seconds (0.02 by default), so that under load one read brings many events (issue 40): a
# round's fixed cost (two round trips: the log's new events, then the contexts they name; redis-py and
# the event loop; `bench redis-cost` measures what a follower spends per event under load) is
# shared by every event it brings. A replica that was idle still applies the first event of a burst at
# once, and one whose read of a log came back full (catching up: Tail.more) reads again at once; the
# others are at most this much staler (`bench staleness`, p99 target 100 ms).
MODEL_RESYNC_SECONDS = 30.0
# The expiry sweep on a shared store skips a model until its next pending decision is due (the
# store says when), or until a decision made meanwhile by another replica could be (its reward
# window), and trims its decision log at most every RETENTION_ACTIVE_SECONDS after activity and
# otherwise every RETENTION_RECHECK_SECONDS (or a tenth of the age limit): an idle model costs no
# command per second, a busy one a trim every few seconds (each forgets what came due meanwhile).
RETENTION_ACTIVE_SECONDS = 10.0
RETENTION_RECHECK_SECONDS = 3600.0
UNSAVED_MAX = 100_000
RECOVERY_SECONDS = 2.0
# The dashboard (docs/ARCHITECTURE.md, "Dashboard"): each replica counts decisions, clicks and
# expiries per minute in memory and adds them to the store every ACTIVITY_FLUSH_SECONDS (one write
# per model with activity, never one per request), and reports itself (a heartbeat: its applied
# version of every model) every HEARTBEAT_SECONDS, kept by the store for HEARTBEAT_TTL_SECONDS: a
# replica that stops reporting is listed with a growing age, then dropped.
ACTIVITY_FLUSH_SECONDS = 1.0
HEARTBEAT_SECONDS = 2.0
HEARTBEAT_TTL_SECONDS = 15.0
# Moving a model (Runtime.move_model): the groups joining it must report it caught up within this
# many seconds (their heartbeats come every HEARTBEAT_SECONDS), else the move is undone; a heartbeat
# older than MOVE_LIVE_SECONDS is a replica presumed gone (the dashboard calls it stale then too).
MOVE_TIMEOUT_SECONDS = 30.0
MOVE_LIVE_SECONDS = 3 * HEARTBEAT_SECONDS
# Checkpoints of states under this size are encoded on the event loop: that takes less than handing
# them to a thread (~20 us for 64 KiB against ~80 us per asyncio.to_thread); larger ones in a thread.
INLINE_CHECKPOINT_BYTES = 1 << 16


_Answer = TypeVar("_Answer", ClaimOutcome, ActivateOutcome)


class _LoadFailure(NamedTuple):
    incarnation: Any
    retry_at: float  # time.monotonic() of the next attempt
    attempts: int
    reason: str


def _backoff(failures: int) -> float:
    """Seconds before retrying after ``failures`` consecutive failures: 0.1 doubling, at most 60."""
    return min(0.1 * 2 ** (failures - 1), 60.0)


DEMO_MODEL = ModelSpec(  # the default learner
    hashing_bits=10,
    labels=["sports", "politics", "music"],
    reward_window_seconds=600,
)


def check_event_id(event_id: str) -> str:
    """``event_id`` if it is a valid client-chosen decision id (:func:`check_decision_id`, the one rule
    of every route and store), else :class:`ParamError` (422) naming the rule. The Redis store appends
    ".{slot tag}" to every id, and a tag has no dot, so the last dot still separates the tag and two
    (model, id) pairs never share a routed id."""
    try:
        return check_decision_id(event_id)
    except ValueError as exc:
        raise ParamError(str(exc)) from None


class ModelUnavailableError(Exception):
    """The store has the model but this process cannot load it (503; retried with back-off)."""


class BudgetError(ParamError):
    """A model's learned state would exceed the memory budget (422 at creation)."""


def _bandit_class(spec: ModelSpec) -> type[Learner]:
    try:
        cls = learners.get(spec.learner)
    except KeyError as exc:
        raise ParamError(str(exc)) from None
    if cls.full_information:
        bandit = ", ".join(n for n, c in learners.items() if not c.full_information)
        raise ParamError(
            f"learner {spec.learner!r} needs the true label (full information) and cannot learn from clicks; "
            f"bandit learners: {bandit}"
        )
    if cls.actions != (spec.actions == "features"):
        kind = "an action-feature" if cls.actions else "a label"
        fits = ", ".join(
            n
            for n, c in learners.items()
            if c.actions == (spec.actions == "features") and not c.full_information
        )
        raise ParamError(
            f"learner {spec.learner!r} is {kind} learner and cannot serve a model with "
            f'actions "{spec.actions}"; '
            f"learners that can: {fits}"
        )
    return cls


def build_learner(spec: ModelSpec) -> Learner:
    """A fresh learner for ``spec``; :class:`ParamError` if unknown, full-information or misconfigured."""
    _bandit_class(spec)
    return make_learner(spec.learner, spec.dim, spec.k, spec.params, seed=spec.seed)


def state_nbytes(spec: ModelSpec) -> int:
    """Bytes of learned state ``spec`` asks for, without allocating it (:class:`ParamError` if invalid)."""
    return _bandit_class(spec).state_nbytes(spec.dim, spec.k, spec.params)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError  # unreachable


def check_budget(name: str, spec: ModelSpec, settings: Settings, others: int = 0) -> int:
    """The state size of ``spec``; :class:`BudgetError` naming size and budget when it does not fit.

    ``others`` is what the process's other models already hold (their estimates).
    """
    need = state_nbytes(spec)
    what = (
        f"model {name!r} needs {human_bytes(need)} of learned state "
        f"({spec.learner}, {spec.k} labels x {spec.dim} features)"
    )
    if need > settings.max_model_bytes:
        raise BudgetError(
            f"{what}; the budget per model is {human_bytes(settings.max_model_bytes)} "
            "(CLICKBOOST_MAX_MODEL_BYTES)"
        )
    if others + need > settings.max_total_model_bytes:
        raise BudgetError(
            f"{what}; this process's models already hold {human_bytes(others)} of the "
            f"{human_bytes(settings.max_total_model_bytes)} budget (CLICKBOOST_MAX_TOTAL_MODEL_BYTES)"
        )
    return need


#: Steps a decision takes per label beyond the learner's arithmetic: the answer's probabilities and
#: ranking (an object per label), the decision record's probabilities and the per-label lists of the
#: exploration helpers. A predict over one input feature (banditron) took 0.4 ms at 10 labels and
#: 223 ms at 10,000 on the loaded test machine (22 us per label; issue 51 saw 56 ms, 5.6 us per
#: label): 5,000 steps of about a nanosecond, so the default budget admits about 4,000 labels.
DECISION_STEPS_PER_LABEL = 5_000


def check_event_budget(name: str, spec: ModelSpec, settings: Settings) -> None:
    """:class:`BudgetError` naming the figure when one event of ``spec`` would take more work or
    memory than the budget (``CLICKBOOST_MAX_EVENT_STEPS``, ``CLICKBOOST_MAX_EVENT_BYTES``).

    The work is the learner's (:meth:`Learner.event_steps`: a decision and its learn) plus the
    decision's answer and record, :data:`DECISION_STEPS_PER_LABEL` per label (issue 51). Checked
    when a model is created, not when one is loaded: a model that exists keeps serving. A hashed
    model's input is at most the named features a request may bring.
    """
    cls = _bandit_class(spec)
    width = spec.dim if spec.hashing_bits is None else min(spec.dim, settings.max_named_features)
    what = f"model {name!r} ({spec.learner}, {spec.k} labels x {width} input features)"
    steps = cls.event_steps(width, spec.k, spec.params)
    answer = DECISION_STEPS_PER_LABEL * spec.k
    if steps + answer > settings.max_event_steps:
        raise BudgetError(
            f"{what} needs about {steps:,} steps per event, and {answer:,} more to answer a decision "
            f"over its {spec.k:,} labels; the budget is {settings.max_event_steps:,} "
            "(CLICKBOOST_MAX_EVENT_STEPS): every replica applies every event on its event loop"
        )
    need = cls.event_nbytes(width, spec.k, spec.params)
    if need > settings.max_event_bytes:
        raise BudgetError(
            f"{what} allocates {human_bytes(need)} per event; the budget is "
            f"{human_bytes(settings.max_event_bytes)} (CLICKBOOST_MAX_EVENT_BYTES)"
        )


def check_declared(declared: Mapping[str, ModelSpec], settings: Settings) -> None:
    """The checks of a creation by ``PUT`` (parameters, the memory and event budgets) on the models
    declared at start-up (config file, demo), in order, each adding to what the process holds:
    :class:`ParamError` (a :class:`BudgetError` naming the model and both sizes) for the first that
    fails, before anything is allocated."""
    held = 0
    for name, spec in declared.items():
        held += check_budget(name, spec, settings, held)
        check_event_budget(name, spec, settings)


class NoSuchModelError(UnknownModelError):
    """No model of this name (or no name and no default): ``known`` lists the process's models,
    which the answer shows to the admin key only (:mod:`service.api.errors`)."""

    def __init__(self, message: str, known: list[str]) -> None:
        super().__init__(message)
        self.known = known


class ModelRuntime:
    """One model in this process: learner + featuriser + applied log position.

    Parameters
    ----------
    name : str
        The model's name.
    spec : ModelSpec
        Its configuration.
    incarnation : str
        Random id of this creation of ``name`` (a deleted and re-created model is a new one).
    max_named : int
        Limit on named features per request (of the context, and of each candidate action).
    budget_bytes : int, optional
        The state's size as checked against the budget (computed when not given).
    max_actions : int, default 100
        Limit on candidate actions per request of an action-feature model (``CLICKBOOST_MAX_ACTIONS``).
    """

    def __init__(
        self,
        name: str,
        spec: ModelSpec,
        incarnation: str,
        max_named: int,
        budget_bytes: int | None = None,
        max_actions: int = 100,
    ) -> None:
        self.name = name
        self.spec = spec
        self.incarnation = incarnation
        # An action-feature model's input is the context with the request's candidates (issue 39)
        self.featurise: Featuriser | ActionFeaturiser = (
            ActionFeaturiser(spec.hashing_bits, max_named, max_actions)  # type: ignore[arg-type]
            if spec.actions == "features"
            else Featuriser(spec.n_features, spec.hashing_bits, max_named)
        )
        self.labels = spec.label_names
        self.label_index = {name: i for i, name in enumerate(self.labels)}  # label name -> index
        self.learner = build_learner(spec)
        # Safe rollout (service.rollout): the mode and its evidence, changed only by log events
        self.rollout = Rollout(spec.rollout, spec.apprentice_epsilon, spec.promote_confidence)
        self.position = 0
        self.checkpoint_position = 0
        self.checkpoint_at = time.monotonic()
        self.last_apply_lag = 0.0
        self.budget_bytes = state_nbytes(spec) if budget_bytes is None else budget_bytes
        self._checksum: tuple[int, int, str] | None = None  # (position, id(learner), digest)
        # Isolated failures: an event this process cannot apply stops this model only.
        self.failure: str | None = None
        self.failures = 0  # consecutive failed attempts
        self.retry_at = 0.0  # time.monotonic() of the next attempt
        # Set while a checkpoint encodes the learner's arrays in a thread: no event is applied to
        # them meanwhile (decisions only read them and go on).
        self.frozen: asyncio.Event | None = None
        # Shared store: the last log position seen by the tail (the heartbeat's "behind"), and the
        # sweep's schedule (clock time of the next expiry and decision-log retention passes; a
        # decision or an event since the last pass makes the retention due).
        self.seen = 0
        self.next_expiry = -math.inf
        self.next_trim = -math.inf
        self.trimmed_at = -math.inf
        self.trim_due = True

    def config(self) -> dict[str, Any]:
        """The model's spec as the API shows it (``GET /models``, the dashboard's stats): the stored
        spec, whose ``rollout`` is the mode the log is replayed from, with ``rollout`` the mode now
        (changed since by the admin route or a promotion): one value wherever it is shown."""
        return {**self.spec.model_dump(mode="json", exclude_none=True), "rollout": self.rollout.mode}

    @property
    def learner(self) -> Learner:
        """The model's learner; one assigned here takes the layout of sparse input when the model
        hashes its features (:meth:`Learner.use_sparse_layout`: speed only, no bit changes)."""
        return self._learner

    @learner.setter
    def learner(self, learner: Learner) -> None:
        if self.spec.hashing_bits is not None:
            learner.use_sparse_layout()
        self._learner = learner

    def _input(self, x: Any) -> Any:
        """``x`` as the learner takes it: sparse where it can, else dense (an action model's
        :class:`~service.actions.ActionInput` as it is)."""
        if isinstance(x, SparseVector) and not self.learner.accepts_sparse:
            return x.dense()
        return x

    def featurise_request(
        self, features: Sequence[float] | Mapping[str, FeatureValue], actions: Sequence[Any] | None
    ) -> np.ndarray | SparseVector | ActionInput:
        """The learner's input for a request: its features, with its candidate ``actions`` for an
        action-feature model (:class:`~service.features.FeatureError`, 422, when a model is sent what
        it does not take)."""
        if isinstance(self.featurise, ActionFeaturiser):
            return self.featurise(features, actions)
        if actions is not None:
            raise FeatureError(
                f"actions: model {self.name!r} has fixed labels ({', '.join(self.labels[:5])}"
                f"{', ...' if len(self.labels) > 5 else ''}); candidate actions need a model with "
                '"actions": "features"'
            )
        return self.featurise(features)

    def names(self, x: Any) -> list[str]:
        """The names of the decision's labels: the model's labels, or the request's action ids."""
        return x.ids if isinstance(x, ActionInput) else self.labels

    def decide(
        self,
        x: np.ndarray | SparseVector | ActionInput,
        decision_id: str,
        eligible: np.ndarray | None = None,
        baseline: str | int | None = None,
    ) -> Decision:
        """The decision served for ``x``, sampling seeded by ``decision_id`` (no model change),
        among the ``eligible`` labels (a mask, :meth:`label_mask`; None: all): the learner's own,
        or in logging and apprentice mode the distribution around the request's ``baseline``
        (:func:`service.rollout.served`; :class:`ParamError` when it is missing or not eligible).
        For an action-feature model the labels are the request's candidates (``x.ids``)."""
        b = self.baseline_index(baseline, eligible, self.names(x))
        rng = decision_rng(decision_id)
        x = self._input(x)
        own = self.learner.decide(x, rng, eligible)
        r = self.rollout
        if r.mode == "online":
            return own
        assert b is not None
        return served(self.learner, x, own, r.mode, b, r.epsilon, r.epoch, rng)

    def baseline_index(
        self, baseline: str | int | None, eligible: np.ndarray | None, names: list[str] | None = None
    ) -> int | None:
        """The index of the request's ``baseline`` label (a name or an index); :class:`ParamError`
        (422) when it is unknown or not eligible, or missing while the model serves baselines.
        ``names``: the labels to look it up in (an action model's candidate ids; default the
        model's labels)."""
        if baseline is None:
            if self.rollout.mode != "online":
                raise ParamError(
                    f"baseline is required: model {self.name!r} is in {self.rollout.mode} mode "
                    "(give the label your current policy would show, as a name or an index)"
                )
            return None
        labels, lookup, what = self._lookup(names)
        k = len(labels)
        if isinstance(baseline, int):
            if not 0 <= baseline < k:
                raise ParamError(
                    f"unknown baseline {what} index {baseline} ({self._has(labels, what, True)})"
                )
            index = baseline
        elif baseline in lookup:
            index = lookup[baseline]
        else:
            raise ParamError(f"unknown baseline {what} {baseline!r} ({self._has(labels, what)})")
        if eligible is not None and not eligible[index]:
            raise ParamError(f"baseline {what} {labels[index]!r} is not eligible for this request")
        return index

    def _lookup(self, names: list[str] | None) -> tuple[list[str], Mapping[str, int], str]:
        """The labels to look names up in, their index, and what they are called in messages."""
        if names is None or names is self.labels:
            return self.labels, self.label_index, "label"
        return names, {n: i for i, n in enumerate(names)}, "action"

    def _has(self, labels: list[str], what: str, by_index: bool = False) -> str:
        if what == "action":
            return f"this request's actions are {', '.join(labels[:10])}{', ...' if len(labels) > 10 else ''}"
        if by_index:
            return f"model {self.name!r} has labels 0..{len(labels) - 1}"
        return f"model {self.name!r} has {', '.join(labels)}"

    def label_mask(
        self,
        eligible: Sequence[str | int] | None,
        excluded: Sequence[str | int] | None,
        names: list[str] | None = None,
    ) -> np.ndarray | None:
        """The mask of the labels a request allows: ``eligible`` ones, or all but the ``excluded``
        ones (names or indices; at most one of the two); None when every label is allowed.
        :class:`ParamError` (422) naming an unknown label, or when no label is left. ``names``:
        an action model's candidate ids (default the model's labels)."""
        if eligible is None and excluded is None:
            return None
        if eligible is not None and excluded is not None:
            raise ParamError("give eligible or excluded labels, not both")
        given = eligible if eligible is not None else excluded
        assert given is not None
        labels, lookup, what = self._lookup(names)
        k = len(labels)
        mask = np.zeros(k, dtype=bool)
        for item in given:
            if isinstance(item, int):
                if not 0 <= item < k:
                    raise ParamError(f"unknown {what} index {item} ({self._has(labels, what, True)})")
                mask[item] = True
            elif item in lookup:
                mask[lookup[item]] = True
            else:
                raise ParamError(f"unknown {what} {item!r} ({self._has(labels, what)})")
        if excluded is not None:
            mask = ~mask
        if not mask.any():
            why = "eligible is empty" if eligible is not None else f"every {what} is excluded"
            raise ParamError(f"no eligible {what}: {why}")
        return None if mask.all() else mask

    def _reward(self, event: Event) -> Reward:
        """What the learner learns from the learn ``event``: the click bit, or a graded reward
        itself when the learner takes one, else the Bernoulli bit the decision id draws for it
        (:func:`service.sampling.reward_bit`: the same on every replica)."""
        reward = event.reward
        assert reward is not None
        if isinstance(reward, bool) or self._learner.graded:
            return reward
        return reward_bit(event.decision_id, reward)

    def observe(self, event: Event) -> bool:
        """Add the learn ``event`` to the rollout evidence when its decision was made in logging or
        apprentice mode; return whether the learner learns from it (not from a logging decision)."""
        assert event.decision is not None and event.reward is not None
        mode = event.decision.get("memo.rollout")
        if mode is None:
            return True
        self.rollout.observe(Decision.from_state(event.decision), float(event.reward))
        return mode != "logging"

    def apply(self, event: Event) -> None:
        """Apply the next event of the log (its position must be ``self.position + 1``)."""
        if event.kind == "learn":
            assert event.x is not None and event.decision is not None and event.reward is not None
            if self.observe(event):
                x = self._input(self.featurise.unpack(event.x))
                self._checksum = None
                self.learner.learn(x, Decision.from_state(event.decision), self._reward(event))
        elif event.kind == "rollout":
            assert event.state is not None
            self.rollout.apply_event(event.state, event.position, event.at)
        else:
            if event.kind == "reset":
                self.learner = build_learner(self.spec)
            else:
                assert event.state is not None
                self.learner = learner_from_state(self.learner.config(), decode(event.state))
            if self.rollout.mode != "online":  # evidence about the learner replaced does not carry over
                self.rollout.restart()
        self.position = event.position

    def apply_batch(self, events: Sequence[Event]) -> None:
        """Apply ``events``, the next ones of the log in order (the first at ``self.position + 1``),
        as :meth:`apply` one by one would, bit for bit: each run of learn events goes to the
        learner in one :meth:`Learner.learn_batch` call (issue 40). Only for a learner whose learn
        is never heavy (:meth:`Runtime._apply_all`)."""
        xs: list[Any] = []
        decisions: list[Decision] = []
        rewards: list[Reward] = []
        for event in events:
            if event.kind != "learn":
                self._learn_run(xs, decisions, rewards)
                self.apply(event)
                continue
            assert event.x is not None and event.decision is not None and event.reward is not None
            # the rollout's evidence reads only the decision and reward, never the learner
            if self.observe(event):
                xs.append(self._input(self.featurise.unpack(event.x)))
                decisions.append(Decision.from_state(event.decision))
                rewards.append(self._reward(event))
        self._learn_run(xs, decisions, rewards)
        if events:
            self.position = events[-1].position

    def _learn_run(self, xs: list[Any], decisions: list[Decision], rewards: list[Reward]) -> None:
        """Learn a run of collected learn events and empty the lists."""
        if xs:
            self._checksum = None
            self.learner.learn_batch(xs, decisions, rewards)
            xs.clear()
            decisions.clear()
            rewards.clear()

    def checkpoint_state(self) -> State:
        """What a checkpoint stores: the learner's state (views), and the rollout's keys unless the
        model has been online from the start (its checkpoints are then the learner's state alone)."""
        state = self.learner.state(copy=False)
        return {**state, **self.rollout.to_state()} if self.rollout.persistent else state

    def learned(self, event: Event) -> Learner:
        """A copy of the learner that has learned ``event`` (a learn), leaving the model as it was:
        run in a thread for a heavy learn (:meth:`Runtime._apply`)."""
        assert event.x is not None and event.decision is not None and event.reward is not None
        x = self._input(self.featurise.unpack(event.x))
        twin = copy.deepcopy(self._learner)
        twin.learn(x, Decision.from_state(event.decision), self._reward(event))
        return twin

    def state_bytes(self) -> bytes:
        """Canonical serialised learned state (:mod:`service.serial`): what export returns."""
        return encode(self.learner.state(copy=False))

    def checksum(self) -> str:
        """sha256 of the canonical serialised state: equal on every replica at the same version.

        Computed once per version (listing models never copies or re-hashes a state).
        """
        key = (self.position, id(self.learner))
        if self._checksum is None or self._checksum[:2] != key:
            self._checksum = (*key, checksum(self.learner.state(copy=False)))
        return self._checksum[2]


@dataclass(frozen=True, slots=True)
class Prediction:
    """What ``POST /predict`` returns."""

    decision_id: str
    model: str
    decision: Decision
    model_version: int
    label: str
    labels: list[str]  # the model's label names, by index


class Runtime:
    """All models of a store, served by this process.

    Parameters
    ----------
    store : Store
        Shared storage (memory or Redis).
    settings : Settings
        Server settings.
    clock : callable
        Unix time in seconds (tests pass a fake clock).
    """

    def __init__(self, store: Store, settings: Settings, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.settings = settings
        self.retention = settings.retention
        self.clock = clock
        self.models: dict[str, ModelRuntime] = {}
        seed = settings.decision_id_seed
        self.ids = DecisionIds() if seed is None else DecisionIds.for_seed(seed)
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.ready = False
        self.warming: str | None = None  # what compiles now, for /readyz and the log
        self.loading = False  # between open() and the end of load(): requests get 503
        self._warm_lock = asyncio.Lock()
        self._started_mono = time.monotonic()
        self.replica_id = uuid.uuid4().hex[:12]  # holder name of this process's leases
        self.evaluations = Evaluations(self.replica_id)  # off-policy evaluation jobs of this process
        self.checkpoints_written = 0
        self._checkpoints: dict[str, asyncio.Task[None]] = {}  # in flight, at most one per model
        self._unsaved: deque[DecisionRecord] = deque(maxlen=UNSAVED_MAX)
        self._flush_lock = asyncio.Lock()
        self._store_down_at = -float("inf")  # time.monotonic() when the store last failed us
        # Models in the store this process cannot load (a bad checkpoint, over its memory budget)
        self._load_failures: dict[str, _LoadFailure] = {}
        # What this replica says of itself in its heartbeats
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.started_at = clock()
        # Per-minute counts gathered since the last flush: model -> minute -> counts
        self._activity: dict[str, dict[int, Activity]] = {}
        # Model placement (service.placement): None when every replica holds every model. Else the
        # store's overrides (moved models) as of the last sync, and the models of the store that this
        # replica's group does not hold (their requests get 421 without asking the store).
        self.placement = settings.placement
        self._overrides: dict[str, dict[str, Any]] = {}
        self._elsewhere: set[str] = set()

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """:meth:`open`, then :meth:`load`: the service is ready when this returns."""
        await self.open()
        await self.load()

    async def open(self) -> None:
        """The quick part of start-up, whose failures stop the server: import the learners, prepare
        the store, validate and create the declared models (config file, demo)."""
        # Importing a learner compiles nothing (its kernels compile when first needed), so this is
        # quick; the registry imports the learner modules on first use.
        self.loading = True
        if removed := await asyncio.to_thread(remove_stale):
            log.info("removed %d evaluation copies of logs left by stopped servers", len(removed))
        await asyncio.to_thread(learners.names)
        await self.store.prepare()
        declared: dict[str, ModelSpec] = {}
        if self.settings.config_file is not None:
            declared.update(load_model_file(self.settings.config_file))
        if self.settings.demo:
            declared.setdefault("demo", DEMO_MODEL)
        check_declared(declared, self.settings)  # fail fast: params, sizes
        for name, spec in declared.items():
            with contextlib.suppress(ModelExistsError):
                await self.store.create_model(name, self._config(spec))

    async def load(self) -> None:
        """Compile the kernels the models need (a minute on a cold cache: the server answers
        ``/healthz`` meanwhile, and ``/readyz`` says what it is doing), load every model, start the
        loops; then the service is ready."""
        await self.sync_models()
        await self.store.heartbeat(await self.heartbeat(), HEARTBEAT_TTL_SECONDS)  # listed once ready
        await self._check_placement_agrees()
        self._tasks = [
            asyncio.create_task(self._tail_loop()),
            asyncio.create_task(self._sweep_loop()),
            asyncio.create_task(self._report_loop()),
        ]
        self.ready = True
        self.loading = False
        # uvicorn's "running on" line comes when the port is bound, before the models are loaded
        since = time.monotonic() - self._started_mono
        log.info("ready: %d model(s) served, %.1f s after start", len(self.models), since)
        # What start-up made (numba's types and compiled kernels, pydantic's models, the routes:
        # ~160k objects) lives as long as the process: out of the collector's view, a full collection
        # scans only what came later, where it took ~80 ms of the event loop here, often enough
        # under an export to hold predicts (tests/service/api/test_stalls.py). Collected first, so
        # that no garbage is kept for good.
        gc.collect()
        gc.freeze()

    async def stop(self) -> None:
        """Stop the background loops, then wait for the checkpoints in flight to be stored."""
        self.ready = False
        # Cancel until done: on Python 3.11 ``asyncio.wait_for`` can swallow a cancellation that
        # arrives as the awaited event fires, and the loop would then run on (shutdown would hang).
        while any(not t.done() for t in self._tasks):
            for task in self._tasks:
                task.cancel()
            await asyncio.wait(self._tasks, timeout=0.1)
        self._tasks = []
        await self.evaluations.close()
        # Waited for, not cancelled: the store is closed next, and a stored checkpoint spares the
        # next start a replay.
        while pending := [t for t in self._checkpoints.values() if not t.done()]:
            await asyncio.wait(pending)
        try:  # the last second's counts; and gone from the replica list at once, not at the TTL
            await self.flush_activity()
            await self.store.forget_replica(self.replica_id)
        except StoreUnavailableError as exc:
            log.warning("at shutdown: %s", exc)

    def _config(self, spec: ModelSpec) -> dict[str, Any]:
        # Every parameter stored, defaults resolved now: a later release that moves a default does
        # not change a model that exists (its checkpoint and log were made under these).
        params = _bandit_class(spec).Params.parse(spec.learner, spec.params).complete()
        return {
            "spec": spec.model_copy(update={"params": params}).model_dump(mode="json"),
            "params_complete": True,
            "incarnation": uuid.uuid4().hex,
            "created_at": self.clock(),
        }

    def holds(self, name: str) -> bool:
        """Whether this replica's group loads ``name`` (always, without placement)."""
        return self.placement is None or self.placement.holds(name, self._overrides.get(name))

    async def sync_models(self) -> None:
        """Load models created elsewhere, drop deleted ones, reload re-created ones; with placement,
        hold only the models placed on this replica's group (drop those moved away)."""
        configs = await self.store.list_models()
        if self.placement is not None:
            self._overrides = await self.store.placements()
            self._elsewhere = {name for name in configs if not self.holds(name)}
            configs = {name: config for name, config in configs.items() if name not in self._elsewhere}
        for name in list(self.models):
            if name not in configs or configs[name]["incarnation"] != self.models[name].incarnation:
                del self.models[name]
        for name in set(self._load_failures) - set(configs):
            del self._load_failures[name]
        for name, config in configs.items():
            if name not in self.models:
                await self._load_isolated(name, config)

    async def sync_model(self, name: str, now: bool = False) -> ModelRuntime | None:
        """Read-your-writes for one name: load it if the store has it (and, with placement, this
        replica's group holds it), forget it if not. ``now``: load it even while a failed load of it
        backs off (the model's own creation: a background sync may have listed the name before the
        store held the rest of it, and the creating request must not answer 503 for that)."""
        try:
            config = await self.store.get_model(name)
        except UnknownModelError:
            self.models.pop(name, None)
            self._load_failures.pop(name, None)
            self._elsewhere.discard(name)
            return None
        if self.placement is not None:
            override = (await self.store.placements()).get(name)
            self._overrides.pop(name, None)
            if override is not None:
                self._overrides[name] = override
            if not self.holds(name):
                self.models.pop(name, None)
                self._load_failures.pop(name, None)
                self._elsewhere.add(name)
                return None
            self._elsewhere.discard(name)
        m = self.models.get(name)
        if m is None or m.incarnation != config["incarnation"]:
            self.models.pop(name, None)
            await self._load_isolated(name, config, now)
        return self.models.get(name)

    async def _load_isolated(self, name: str, config: Mapping[str, Any], now: bool = False) -> None:
        """Load a model; a model this process cannot load is skipped (logged, retried later, or at
        once with ``now``)."""
        incarnation = config.get("incarnation")
        failed = self._load_failures.get(name)
        if failed is not None and failed.incarnation != incarnation:
            failed = None  # a new model of that name: a fresh start
        if failed is not None and not now and time.monotonic() < failed.retry_at:
            return  # backing off
        try:
            self.models[name] = await self._load(name, config)
        except StoreUnavailableError:
            raise
        except Exception as exc:
            attempts = failed.attempts + 1 if failed is not None else 1
            reason = f"{type(exc).__name__}: {exc}"
            retry_at = time.monotonic() + _backoff(attempts)
            self._load_failures[name] = _LoadFailure(incarnation, retry_at, attempts, reason)
            log.error("model %r cannot be loaded here (attempt %d): %s", name, attempts, reason)
            return
        self._load_failures.pop(name, None)

    async def warm(self, spec: ModelSpec) -> None:
        """Compile (or load from numba's cache) the kernels a model of ``spec`` calls, in a thread,
        before it serves: no request compiles. :attr:`warming` says what is compiling meanwhile."""
        modules = _bandit_class(spec).kernel_modules(spec.params)
        cold = _jit_cache.cold(modules)  # flags of modules open() imported: no await when warm
        if not cold:
            return
        cached = await asyncio.to_thread(_jit_cache.cached, cold)
        verb = "loading" if cached else "compiling"
        self.warming = f"{verb} the kernels of {spec.learner} ({', '.join(cold)})"
        started = time.monotonic()
        log.info("%s%s", self.warming, "" if cached else ": once per install, cached afterwards")
        try:
            async with self._warm_lock:  # one compilation at a time: they share numba's lock anyway
                await asyncio.to_thread(_jit_cache.warm, cold, log.info)
        finally:
            self.warming = None
        log.info("kernels of %s ready in %.1f s", spec.learner, time.monotonic() - started)

    def status(self) -> tuple[bool, str]:
        """(ready, what it is doing): ``/readyz``'s answer before the store check."""
        if self.ready:
            # a default model that does not exist fails every request that names none: not ready,
            # rather than a refusal to start, since it may be created through this server (PUT)
            default = self.settings.default_model
            known = self.models.keys() | self._elsewhere | self._load_failures.keys()
            if default is not None and default not in known:
                return False, (
                    f"the default model {default!r} (CLICKBOOST_DEFAULT_MODEL) does not exist: "
                    f"create it (PUT /models/{default}) or change the setting"
                )
            return True, "ready"
        if self.warming is not None:
            return False, f"{self.warming}, {time.monotonic() - self._started_mono:.0f} s since start"
        return False, "starting: loading models"

    def _held(self, name: str) -> int:
        """State bytes the process's models other than ``name`` hold (their estimates)."""
        return sum(m.budget_bytes for n, m in self.models.items() if n != name)

    async def _load(self, name: str, config: Mapping[str, Any]) -> ModelRuntime:
        spec = ModelSpec.model_validate(config["spec"])
        # a parameter the stored spec lacks reads the value it had then (Params.legacy): stored before
        # parameters were stored complete, or complete before the parameter existed (issue 41's
        # grace_unit and subspace, whose defaults are not what the trees did before)
        spec = spec.model_copy(update={"params": _bandit_class(spec).Params.legacy(spec.params)})
        need = check_budget(name, spec, self.settings, self._held(name))  # before allocating
        await self.warm(spec)
        s = self.settings
        m = ModelRuntime(name, spec, config["incarnation"], s.max_named_features, need, s.max_actions)
        await asyncio.to_thread(m.learner.prepare)  # one-time tables: seconds for some learners
        await self._from_checkpoint(m)
        await self.catch_up(m)
        return m

    async def _from_checkpoint(self, m: ModelRuntime) -> None:
        """Load the latest checkpoint into ``m`` (decoded and validated in a thread)."""
        cp = await self.store.get_checkpoint(m.name)
        if cp is None or cp.position <= m.position:
            return
        config = m.learner.config()
        hashed = m.spec.hashing_bits is not None
        rollout = Rollout(m.spec.rollout, m.spec.apprentice_epsilon, m.spec.promote_confidence)

        def load() -> Learner:
            state = decode(cp.state)
            keys = [k for k in state if k.startswith("rollout.")]
            if keys:  # the rollout's mode and evidence at the checkpoint (ModelRuntime.checkpoint_state)
                rollout.load({k: state.pop(k) for k in keys})
            learner = learner_from_state(config, state)
            if hashed:  # here, not in the setter on the event loop: a copy of up to K 2**22 weights
                learner.use_sparse_layout()
            return learner

        learner = await asyncio.to_thread(load)
        if cp.position > m.position:  # else a concurrent catch_up got further meanwhile
            m.learner, m.rollout = learner, rollout
            m.position = m.checkpoint_position = cp.position

    # -- applying the log -----------------------------------------------------------------------

    async def catch_up(self, m: ModelRuntime) -> None:
        """Apply the log events after ``m.position`` in order; checkpoint every N events."""
        while True:
            events = await self.store.read_log(m.name, m.position)
            if not events:
                break
            if events[0].position > m.position + 1:  # trimmed below us: start from the checkpoint
                await self._from_checkpoint(m)
                continue
            await self._apply_all(m, events)
        await self._maybe_checkpoint(m)

    async def _apply_all(self, m: ModelRuntime, events: list[Event]) -> None:
        """Apply those of ``events`` (consecutive, read from ``m``'s log) that ``m`` has not applied
        yet (a concurrent catch_up may have). A learner whose learn is never heavy takes them in
        one synchronous batch (:meth:`ModelRuntime.apply_batch`: no round of the event loop per
        event, one compiled loop where it has one); any other one by one (:meth:`_apply`)."""
        while m.frozen is not None:
            await m.frozen.wait()
        now = self.clock()
        todo = [e for e in events if e.position > m.position]
        if not todo or todo[0].position != m.position + 1:
            return
        if type(m.learner).learn_is_heavy is Learner.learn_is_heavy:
            m.apply_batch(todo)
            m.last_apply_lag = max(now - todo[-1].at, 0.0)
            return
        for event in todo:
            if event.position == m.position + 1:
                await self._apply(m, event)
                m.last_apply_lag = max(now - event.at, 0.0)

    async def _apply(self, m: ModelRuntime, event: Event) -> None:
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

    async def _maybe_checkpoint(self, m: ModelRuntime) -> None:
        """Every N events or T seconds: checkpoint ``m`` at its position (see :meth:`_checkpoint`),
        unless a checkpoint of it is in flight (then the first round after that one starts it).

        Called where ``m`` has applied its events without error, so its state is the state at
        ``m.position``. A state under :data:`INLINE_CHECKPOINT_BYTES` is encoded here and this
        round waits until it is stored, as before. A larger one is encoded in a thread, with no
        copy: ``m`` is frozen (no event applied) until then, while decisions, which only read the
        state, go on; this round does not wait.
        """
        s = self.settings
        elapsed = time.monotonic() - m.checkpoint_at
        if m.position - m.checkpoint_position < s.checkpoint_every and not (
            m.position > m.checkpoint_position and elapsed >= s.checkpoint_interval_seconds
        ):
            return
        if m.name in self._checkpoints:
            return
        position, state = m.position, m.checkpoint_state()
        m.checkpoint_position, m.checkpoint_at = position, time.monotonic()
        small = sum(v.nbytes for v in state.values() if isinstance(v, np.ndarray)) < INLINE_CHECKPOINT_BYTES
        if small:
            snapshot: State | bytes = encode_sparse(state)
        else:
            snapshot, m.frozen = state, asyncio.Event()
        task = asyncio.create_task(self._checkpoint(m, position, snapshot))
        self._checkpoints[m.name] = task
        task.add_done_callback(lambda _: self._checkpoints.pop(m.name, None))
        if small:
            await asyncio.shield(task)  # a cancelled caller leaves it to finish; stop() waits for it

    async def _checkpoint(self, m: ModelRuntime, position: int, snapshot: State | bytes) -> None:
        """The holder of the model's checkpoint lease stores ``snapshot`` (``m``'s state at
        ``position``: views of its frozen arrays, encoded here in a thread, or the encoding
        already), then trims the log up to ``position``. ``m`` is thawed once encoded.

        Replicas that do not hold the lease only restart their count, so one replica writes
        checkpoints while it lives and another takes over within ``3 T`` after it stops. The lease
        saves work, not correctness: the state at a position is the same on every replica.
        Failures are logged; the next checkpoint is due N events or T seconds later.
        """
        lease = 3 * self.settings.checkpoint_interval_seconds
        try:
            try:
                if not await self.store.lease(f"checkpoint:{m.name}", self.replica_id, lease):
                    return
                data = snapshot
                if not isinstance(data, bytes):
                    data = await asyncio.to_thread(encode_sparse, data)
            finally:
                if m.frozen is not None:
                    m.frozen.set()
                    m.frozen = None
            if (await self.store.get_model(m.name))["incarnation"] != m.incarnation:
                return  # deleted and re-created meanwhile (deleted: UnknownModelError)
            await self.store.put_checkpoint(m.name, Checkpoint(position, data))
            # Only once the checkpoint is stored, and the event at its position stays: a replica
            # behind the checkpoint must find a first event past its own position in the log, which
            # tells it to load the checkpoint. Trimmed up to the checkpoint itself, an idle log
            # reads empty to such a replica, which then stays behind until the next event is
            # appended (the flake of the kill -9 test: a replica left at 411 of 419 once the load
            # ended, the lease holder's last checkpoint at 419).
            await self.store.trim_log(m.name, position - 1)
            self.checkpoints_written += 1
        except UnknownModelError:  # deleted meanwhile
            pass
        except StoreUnavailableError as exc:
            self._store_down_at = time.monotonic()
            log.warning("checkpoint of model %r: %s", m.name, exc)
        except Exception:
            log.exception("checkpoint of model %r failed", m.name)

    async def wait_applied(self, m: ModelRuntime, position: int, timeout: float = 10.0) -> bool:
        """Catch up until ``m`` has applied ``position``; False if that took longer than ``timeout`` or
        an event failed here (see :meth:`_catch_up_isolated`)."""
        deadline = time.monotonic() + timeout
        while True:
            # Isolated as in the background loop: an event this process cannot apply marks the model
            # failed (it retries with back-off); the caller's event is stored all the same.
            await self._catch_up_isolated(m)
            if m.position >= position:
                return True
            if m.failure is not None or time.monotonic() > deadline:
                return False
            await asyncio.sleep(self.settings.tail_interval_seconds)

    async def _wait_for_events(self) -> None:
        """Until this process appended to a log (one-process stores), or the tail interval."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), self.settings.tail_interval_seconds)
        self._wake.clear()

    async def _save_unsaved(self) -> None:
        """Record the decisions made while the store was down (their reward windows run as usual)."""
        async with self._flush_lock:
            while self._unsaved:
                # UnknownModelError: its model was deleted meanwhile; DecisionExistsError: saved by
                # an earlier attempt whose reply was lost, or a client-chosen id taken meanwhile.
                with contextlib.suppress(UnknownModelError, DecisionExistsError):
                    await self.store.put_decision(self._unsaved[0])
                self._unsaved.popleft()

    async def _tail_loop(self) -> None:
        last_sync = time.monotonic()
        while True:
            try:
                if self._unsaved:  # first thing once the store is back
                    await self._save_unsaved()
                if self.store.shared:
                    if await self._follow() or time.monotonic() - last_sync > MODEL_RESYNC_SECONDS:
                        await self.sync_models()
                        last_sync = time.monotonic()
                    continue
                await self._wait_for_events()
                if time.monotonic() - last_sync > 1.0:
                    await self.sync_models()
                    last_sync = time.monotonic()
                for m in list(self.models.values()):
                    await self._catch_up_isolated(m)
            except StoreUnavailableError as exc:  # keep serving from memory; retry until it is back
                self._store_down_at = time.monotonic()
                log.warning("%s; retrying", exc)
                await asyncio.sleep(self.settings.tail_interval_seconds)
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
        now, interval = time.monotonic(), self.settings.tail_interval_seconds
        for name, m in self.models.items():
            if m.failure is not None:
                timeout = min(timeout, max(m.retry_at - now, interval))
            elif m.frozen is not None:
                timeout = min(timeout, interval)
            else:
                positions[name] = m.position
                if m.position > m.checkpoint_position:
                    due = m.checkpoint_at + self.settings.checkpoint_interval_seconds - now
                    timeout = min(timeout, max(due, interval))
        tail: Tail = await self.store.tail(positions, timeout)
        for name, events in tail.events.items():
            m = self.models.get(name)
            if m is not None and m.failure is None:
                await self._apply_isolated(m, events)
        for m in list(self.models.values()):
            if m.failure is not None:
                if time.monotonic() >= m.retry_at:
                    await self._catch_up_isolated(m)
            elif m.frozen is None and m.position > m.checkpoint_position:
                await self._maybe_checkpoint(m)  # every T seconds with new events, however few
        if tail.events and not tail.more:
            await asyncio.sleep(self.settings.follow_pause_seconds)
        return tail.models_changed

    async def _apply_isolated(self, m: ModelRuntime, events: list[Event]) -> None:
        """Apply ``events`` (read from ``m``'s log by the tail) as :meth:`catch_up` would; an event
        ``m`` cannot apply marks it failed, as in :meth:`_catch_up_isolated`."""
        m.seen = max(m.seen, events[-1].position)
        m.trim_due = True
        try:
            if events[0].position > m.position + 1:  # trimmed below us: from the checkpoint
                await self.catch_up(m)
                return
            await self._apply_all(m, events)
            await self._maybe_checkpoint(m)
        except StoreUnavailableError:
            raise
        except UnknownModelError:  # deleted meanwhile; the next sync drops it
            return
        except Exception as exc:
            self._failed(m, exc)

    async def _catch_up_isolated(self, m: ModelRuntime) -> None:
        """Apply ``m``'s log; an event it cannot apply marks it failed, never stops the others.

        A failed model keeps serving decisions from its last good state; it is retried with
        exponential back-off (0.1 s doubling to 60 s) from its checkpoint, so an event half
        applied before it raised leaves nothing behind.
        """
        if m.failure is not None:
            if time.monotonic() < m.retry_at:
                return
            try:  # start again from the checkpoint: a learn that raised may have left partial updates
                fresh = await self._load(m.name, await self.store.get_model(m.name))
            except UnknownModelError:
                self.models.pop(m.name, None)
                return
            except StoreUnavailableError:
                raise
            except Exception as exc:
                self._failed(m, exc)
                return
            if self.models.get(m.name) is m:
                self.models[m.name] = fresh
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
        m.failures += 1
        m.failure = f"event {m.position + 1} cannot be applied here: {type(exc).__name__}: {exc}"
        m.retry_at = time.monotonic() + _backoff(m.failures)
        if m.failures == 1:  # one traceback per failure, then one line per retry
            log.exception("model %r failed; the other models go on", m.name)
        else:
            log.error("model %r still failing (attempt %d): %s", m.name, m.failures, m.failure)

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.sweep_interval_seconds)
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
        n = 0
        now = self.clock()
        max_age, max_count = self.retention.max_age, self.retention.max_count
        older_than = None if max_age is None else now - max_age
        recheck = (
            RETENTION_RECHECK_SECONDS if max_age is None else min(RETENTION_RECHECK_SECONDS, max_age / 10)
        )
        for m in list(self.models.values()):
            if not scheduled or now >= m.next_expiry:
                expiry = await self.store.expire(m.name, now, m.spec.default_reward)
                n += len(expiry.claims)
                if expiry.claims:
                    m.trim_due = True
                    # a deferred decision never activated is dropped, not expired (issue 38)
                    unshown = sum(c.deferred and not c.activated for c in expiry.claims)
                    self._minute(m.name, now).expired += len(expiry.claims) - unshown
                    await self.catch_up(m)
                if expiry.next_due is not None:
                    m.next_expiry = min(expiry.next_due, now + m.spec.reward_window_seconds)
            if m.rollout.due(m.spec.promote, m.spec.promote_min_decisions):
                await self._promote(m)
            active = m.trim_due and now >= m.trimmed_at + RETENTION_ACTIVE_SECONDS
            if not scheduled or active or now >= m.next_trim:
                m.trim_due = False
                await self.store.trim_decision_log(m.name, older_than, max_count)
                m.trimmed_at, m.next_trim = now, (now + recheck if self.store.shared else now)
        return n

    async def _promote(self, m: ModelRuntime) -> None:
        """Append the automatic promotion of ``m`` to online (:mod:`service.rollout`): by the holder
        of its rollout lease only, once per epoch; every replica switches when it applies the event,
        which names the epoch so that a duplicate does nothing."""
        lease = max(3 * self.settings.sweep_interval_seconds, 10.0)
        if not await self.store.lease(f"rollout:{m.name}", self.replica_id, lease):
            return
        r = m.rollout
        r.requested = r.epoch
        evidence = {"position": m.position, **r.report()}
        event = Event(0, "rollout", at=self.clock(), state=r.event("online", "auto", r.epoch, evidence))
        position = await self.store.append(m.name, event)
        log.info("model %r promoted to online at log position %d: %s", m.name, position, evidence)
        await self.catch_up(m)

    # -- dashboard: activity and heartbeats -------------------------------------------------------

    def _minute(self, model: str, at: float) -> Activity:
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
        oldest = math.floor(self.clock() / 60) - ACTIVITY_MINUTES
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
                await self.store.add_activity(name, minutes)
            except UnknownModelError:  # deleted meanwhile: its counts went with it
                continue
            except StoreUnavailableError:
                for rest in pending[i:]:
                    self._keep(*rest)
                raise

    async def heartbeat(self) -> Heartbeat:
        """This replica's report: its applied version of each model and how far the log is ahead."""
        models = {}
        for name, m in list(self.models.items()):
            if self.store.shared:  # what the tail has read and not applied: no read per model
                models[name] = (m.position, max(m.seen - m.position, 0))
                continue
            try:
                behind = await self.store.log_position(name) - m.position
            except UnknownModelError:  # deleted meanwhile
                continue
            models[name] = (m.position, max(behind, 0))
        p = self.placement
        return Heartbeat(
            self.replica_id, self.host, self.pid, self.started_at, models,
            group=None if p is None else p.group, placement=None if p is None else p.fingerprint(),
        )  # fmt: skip

    async def _check_placement_agrees(self) -> None:
        """Log an error for every live replica whose placement settings (its heartbeat's
        fingerprint of every group's addresses and the copies) differ from this one's: the two place
        models differently, so some models are held by no replica or answered by two groups. Only
        logged, at start (``GET /replicas`` says it at any time): a rolling change of the groups
        passes through such states, and refusing to serve would turn it into an outage."""
        try:
            beats = await self.store.replicas()
        except StoreUnavailableError:
            return
        mine = None if self.placement is None else self.placement.fingerprint()
        for b in beats:
            if b.replica != self.replica_id and b.placement != mine and b.fingerprinted:
                log.error(
                    "replica %s (%s pid %s, group %s) has other replica-group settings than this "
                    "replica (placement fingerprint %s here, %s there): set CLICKBOOST_REPLICA_GROUPS "
                    "and CLICKBOOST_PLACEMENT_COPIES alike on every replica",
                    b.replica, b.host, b.pid, b.group, mine, b.placement,
                )  # fmt: skip

    async def _report_loop(self) -> None:
        last_beat = time.monotonic()
        while True:
            await asyncio.sleep(ACTIVITY_FLUSH_SECONDS)
            try:
                await self.flush_activity()
                if time.monotonic() - last_beat >= HEARTBEAT_SECONDS:
                    last_beat = time.monotonic()
                    await self.store.heartbeat(await self.heartbeat(), HEARTBEAT_TTL_SECONDS)
            except StoreUnavailableError as exc:  # the next round retries
                log.warning("dashboard counts and heartbeat: %s", exc)
            except Exception:
                log.exception("dashboard counts and heartbeat failed")

    # -- requests -------------------------------------------------------------------------------

    def elsewhere(self) -> dict[str, dict[str, list[str]]]:
        """With placement, the models of the deployment that this replica's group does not hold (as of
        the last sync), each with its groups and their addresses (what a 421 for it names); else {}."""
        if self.placement is None:
            return {}
        return {
            name: self.placement.misdirected(name, self._overrides.get(name)).groups
            for name in sorted(self._elsewhere)
        }

    def get(self, name: str | None) -> ModelRuntime:
        """The model called ``name``, or the default model; :class:`UnknownModelError` if none,
        :class:`ModelUnavailableError` (503, retry) while the server is starting,
        :class:`~service.placement.MisdirectedError` (421) if this replica's group does not hold it."""
        if self.loading:
            raise ModelUnavailableError(f"the server is not ready yet ({self.status()[1]}); retry")
        if name is None:
            name = self.settings.default_model or ("demo" if self.settings.demo else None)
            if name is None:
                if len(self.models) != 1:
                    raise NoSuchModelError("no model given and no default model", sorted(self.models))
                return next(iter(self.models.values()))
        try:
            return self.models[name]
        except KeyError:
            if self.placement is not None and name in self._elsewhere:
                raise self.placement.misdirected(name, self._overrides.get(name)) from None
            failed = self._load_failures.get(name)
            if failed is not None:
                raise ModelUnavailableError(
                    f"model {name!r} cannot be loaded on this replica ({failed.reason}); "
                    "retried with back-off"
                ) from None
            raise NoSuchModelError(f"unknown model {name!r}", sorted(self.models)) from None

    async def resolve(self, name: str | None, fresh: bool = False) -> ModelRuntime:
        """:meth:`get`, but a name this process does not know is looked up in the store first, so
        a model just created through another replica is served at once (read-your-writes).

        ``fresh`` (the admin routes) checks the store even for a known name and applies its log,
        so a model deleted, re-created or reset through another replica is seen at once; the hot
        path learns of a deletion from the store's answer to the decision it records.
        """
        if fresh and name is not None and self.store.shared:
            m = await self.sync_model(name)
            if m is None:
                self.get(name)  # raises: unknown, or known but not loadable here
            if m.failure is None:  # resets and imports through other replicas, applied now
                await self._catch_up_isolated(m)
        try:
            return self.get(name)
        except UnknownModelError:
            if name is None or not self.store.shared:
                raise
            await self.sync_model(name)
            return self.get(name)

    async def predict(
        self,
        name: str | None,
        features: Sequence[float] | Mapping[str, FeatureValue],
        eligible: Sequence[str | int] | None = None,
        excluded: Sequence[str | int] | None = None,
        baseline: str | int | None = None,
        *,
        event_id: str | None = None,
        defer: bool = False,
        actions: Sequence[Any] | None = None,
        memo: Mapping[str, str] | None = None,
    ) -> Prediction:
        """Featurise, decide among the labels the request allows (:meth:`ModelRuntime.label_mask`),
        record the pending decision (the reward window starts now), also in the decision log when
        the model keeps one. The mask travels in the decision's memo, so the learn event and the
        decision log carry it. ``baseline``: the label the caller's own policy would show, served
        in logging and apprentice mode (:meth:`ModelRuntime.decide`).

        ``event_id``: a client-chosen id (:func:`check_event_id`, else :class:`ParamError`); the
        decision id is then ``store.route(model, event_id)``, deterministic, and seeds the sampling
        as a drawn id does. It is taken once: :class:`DecisionExistsError` (409) while its pending
        record or its claim is known (the store inserts it only if absent). While the store is down
        the decision is served and saved once it is back, as any other (learning from it is then
        best effort: an id found taken then is not saved). ``defer``: the decision is learned only
        if :meth:`activate` comes within its reward window (issue 38).

        ``actions``: the candidates of an action-feature model (issue 39, :mod:`service.actions`),
        ``{"id", "features"}`` each; ``eligible``, ``excluded`` and ``baseline`` then name action
        ids (or indices in the request), and the prediction's labels are the candidates' ids.

        ``memo``: kept in the decision's memo beside the learner's (``store.get_decision`` reads it
        back): a multi-slot rank's slot id, which its reward must name (issue 51).
        """
        m = await self.resolve(name)
        x = m.featurise_request(features, actions)
        names = m.names(x)
        mask = m.label_mask(eligible, excluded, names)
        drawn = self.ids.new() if event_id is None else check_event_id(event_id)
        decision_id = self.store.route(m.name, drawn)
        d = m.decide(x, decision_id, mask, baseline)
        if memo:
            d.memo = {**d.memo, **memo}
        now = self.clock()
        record = DecisionRecord(
            decision_id,
            m.name,
            m.featurise.pack(x),
            d.to_state(),
            m.position,
            now,
            now + m.spec.reward_window_seconds,
            m.spec.log_decisions,
            defer,
        )
        try:
            await self.store.put_decision(record)
        except StoreUnavailableError:  # keep serving: the tail loop records it once the store is back
            self._store_down_at = time.monotonic()
            self._unsaved.append(record)
        except UnknownModelError:  # deleted through another replica: stop serving it now
            if self.models.get(m.name) is m:
                del self.models[m.name]
            raise UnknownModelError(f"unknown model {m.name!r} (deleted)") from None
        m.trim_due = True
        m.next_expiry = min(m.next_expiry, record.expires_at)
        counts = self._minute(m.name, now)
        counts.decisions += 1
        # max of a short list costs a fraction of numpy's max call (~0.3 against ~1.5 us)
        p = d.probs
        counts.exploration += 1.0 - (max(p.tolist()) if p.size <= 64 else float(p.max()))
        return Prediction(decision_id, m.name, d, m.position, names[d.label], names)

    async def feedback(
        self, decision_id: str, reward: Reward, wait: bool, model: str | None = None
    ) -> tuple[ClaimOutcome, bool]:
        """Claim the decision and append its learn event; with ``wait``, apply it here first.

        ``reward``: the click bit, or a graded reward in [0, 1] (0 and 1 are taken as the bit, so
        they behave exactly as a click / no click). A deferred decision not activated yet holds the
        feedback (HELD): it is learned when :meth:`activate` comes within the window. ``model``: the
        model the caller names (a Personalizer loop): a decision of another is UNKNOWN.

        Returns the store's outcome and whether the event has been applied by this process.
        """
        if not isinstance(reward, bool) and reward in (0.0, 1.0):
            reward = reward == 1.0
        out = await self._answered(lambda now: self.store.claim_and_append(decision_id, reward, now, model))
        applied = False
        if out.status is ClaimStatus.ACCEPTED and out.claim is not None:
            applied = await self._learned(out.claim, reward, wait)
        return out, applied

    async def activate(
        self, decision_id: str, wait: bool = False, model: str | None = None
    ) -> ActivateOutcome:
        """Mark the deferred decision ``decision_id`` as shown (``POST /decisions/{id}/activate``).

        Within its reward window it will be learned: now, from a feedback held for it (the outcome's
        ``claim`` and ``reward``; with ``wait`` applied here before this returns), or from the
        feedback to come, or at expiry from the model's default reward. After the window a deferred
        decision never activated is EXPIRED (dropped); one not deferred is a harmless ALREADY.
        ``model`` as for :meth:`feedback`.
        """
        out = await self._answered(lambda now: self.store.activate(decision_id, now, model))
        if out.status is ActivateStatus.ACTIVATED and out.claim is not None and out.reward is not None:
            await self._learned(out.claim, out.reward, wait)
        return out

    async def _answered(self, call: Callable[[float], Awaitable[_Answer]]) -> _Answer:
        """``call(now)`` against the store for a decision id a client sent (feedback, activation):
        the decisions made while the store was down are saved first; an unknown id is 503, not 404,
        for :data:`RECOVERY_SECONDS` after the store was last seen down."""
        try:
            if self._unsaved:  # the decision may be one of them
                await self._save_unsaved()
            out = await call(self.clock())
        except StoreUnavailableError:
            self._store_down_at = time.monotonic()
            raise
        if out.status.value == "unknown" and time.monotonic() - self._store_down_at < RECOVERY_SECONDS:
            raise StoreUnavailableError(
                "the store is just back; decisions made meanwhile may not be saved yet"
            )
        return out

    async def _learned(self, claim: Claim, reward: Reward, wait: bool) -> bool:
        """Count a feedback just learned in its minute and let the model apply its event (with
        ``wait``: here, before returning whether it did)."""
        counts = self._minute(claim.model, claim.at)
        if claim.outcome == "click":
            counts.clicks += 1
        elif claim.outcome == "no_click":
            counts.no_clicks += 1
        else:
            counts.graded += 1
            counts.graded_sum += reward
        m = self.models.get(claim.model)
        if wait and m is not None and claim.position is not None:
            return await self.wait_applied(m, claim.position)
        self._wake.set()
        return False

    # -- administration -------------------------------------------------------------------------

    async def create_model(self, name: str, spec: ModelSpec) -> ModelRuntime:
        """Create ``name``: :class:`ModelExistsError` if taken, :class:`ParamError` if invalid,
        :class:`BudgetError` if its state would not fit (checked before anything is allocated)."""
        check_budget(name, spec, self.settings, self._held(name))  # before the store has it
        check_event_budget(name, spec, self.settings)
        if self.placement is not None:  # created where it is held, so that it is answered from there
            override = (await self.store.placements()).get(name)
            if not self.placement.holds(name, override):
                raise self.placement.misdirected(name, override)
        await self.store.create_model(name, self._config(spec))
        m = await self.sync_model(name, now=True)
        return m if m is not None else self.get(name)  # raises: deleted meanwhile, or not loadable

    async def delete_model(self, name: str) -> None:
        await self.store.delete_model(name)
        self.models.pop(name, None)
        self._elsewhere.discard(name)

    async def placement_of(self, name: str) -> tuple[list[str], list[str]]:
        """The groups ``name`` is placed on and those joining it (a move under way), from the store;
        :class:`~service.placement.PlacementError` without placement."""
        placement = self._placement()
        await self.store.get_model(name)  # UnknownModelError: 404
        override = (await self.store.placements()).get(name)
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
        target = list(dict.fromkeys(groups))
        unknown = [g for g in target if g not in placement.groups]
        if not target or unknown or len(target) != len(groups):
            known = ", ".join(sorted(placement.groups))
            raise ParamError(f"groups must be distinct names among {known}; got {list(groups)}")
        await self.store.get_model(name)  # UnknownModelError: 404
        before = (await self.store.placements()).get(name)
        current = placement.serving(name, before)
        joining = [g for g in target if g not in current]
        if joining:
            # a group with no live replica cannot catch up: say so now, not after the timeout
            live = {b.group for b in await self.store.replicas() if b.age < MOVE_LIVE_SECONDS}
            if absent := [g for g in joining if g not in live]:
                raise PlacementError(
                    f"model {name!r} not moved, placement unchanged: group {absent[0]} has no live replica"
                )
            await self.store.set_placement(name, {"groups": current, "joining": joining})
            try:
                await self._caught_up(name, joining, timeout)
            except PlacementError:
                await self.store.set_placement(name, before)
                raise
        await self.store.set_placement(name, {"groups": target})
        log.info("model %r moved from groups %s to %s", name, current, target)

    async def _caught_up(self, name: str, groups: list[str], timeout: float) -> None:
        """Until every live replica of ``groups`` (at least one each) reports ``name`` at the log
        position of now; :class:`PlacementError` after ``timeout`` seconds."""
        position = await self.store.log_position(name)
        deadline = time.monotonic() + timeout
        while True:
            beats = [
                b for b in await self.store.replicas() if b.group in groups and b.age < MOVE_LIVE_SECONDS
            ]
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
        if self.placement is None:
            raise PlacementError(
                "model placement is not configured on this replica (CLICKBOOST_REPLICA_GROUPS): "
                "every replica holds every model"
            )
        return self.placement

    async def decision_log(
        self, name: str, since: float = -math.inf, until: float = math.inf
    ) -> AsyncIterator[list[LogRecord]]:
        """The decision log of ``name`` created in ``[since, until)``, as pages of records read
        from the store one at a time (:mod:`service.decision_log`). The model is looked up as by
        the other admin calls (:meth:`resolve` with ``fresh``); reading starts at the first page."""
        m = await self.resolve(name, fresh=True)
        return pages(self.store, m.name, m.spec, since, until)

    async def reset_model(self, name: str) -> ModelRuntime:
        """Replace the learned state by a fresh learner's, through the log (counts are kept)."""
        m = await self.resolve(name, fresh=True)
        position = await self.store.append(name, Event(0, "reset", at=self.clock()))
        await self.wait_applied(m, position)
        return m

    async def set_rollout(self, name: str, mode: str) -> ModelRuntime:
        """Switch ``name`` to the rollout ``mode`` through its log (every replica at the same
        position); the evidence starts over (:mod:`service.rollout`)."""
        m = await self.resolve(name, fresh=True)
        event = Event(0, "rollout", at=self.clock(), state=m.rollout.event(mode, "admin"))  # type: ignore[arg-type]
        position = await self.store.append(name, event)
        await self.wait_applied(m, position)
        return m

    async def import_state(self, name: str, data: bytes) -> ModelRuntime:
        """Replace the learned state by ``data`` (validated first; never unpickled)."""
        m = await self.resolve(name, fresh=True)
        learner_from_state(m.learner.config(), decode(data))  # raises StateFormatError / ParamError
        position = await self.store.append(name, Event(0, "import", at=self.clock(), state=data))
        await self.wait_applied(m, position)
        return m
