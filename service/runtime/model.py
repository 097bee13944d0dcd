"""One model in this process (:class:`ModelRuntime`): its learner, its featuriser and the log
position it has applied, which is the model version.

Every change of the learned state comes from the model's event log (learn, reset, import,
rollout) through :meth:`ModelRuntime.apply` (or :meth:`~ModelRuntime.apply_batch`, the
follower's path), so replicas that applied the same prefix hold bit-identical models (same
:meth:`ModelRuntime.checksum`). Decisions only read the learner (:meth:`ModelRuntime.decide`).
"""

from __future__ import annotations

import asyncio
import copy
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from service.actions import ActionFeaturiser, ActionInput
from service.config import ModelSpec
from service.features import FeatureError, FeatureValue, Featuriser, SparseVector
from service.learners.base import Decision, Learner, ParamError, learner_from_state
from service.learners.ccb_adf import CCB, PageDecision
from service.page_rollout import check_baselines, serve_page
from service.pages import is_single, learn_slot, page_slot
from service.rollout import Rollout, served
from service.runtime.budgets import build_learner, state_nbytes
from service.runtime.items import apply_event, checkpoint_keys, new_catalog
from service.sampling import decision_rng, reward_bit
from service.serial import State, checksum, decode, encode
from service.slots import PageFeaturiser, PageInput
from service.store import Event
from service.store.base import Reward

__all__ = ["ModelRuntime"]


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
        self.catalog = new_catalog(spec, max_named)  # items registered once (issue 54); None: labels
        # Safe rollout (service.rollout): the mode and its evidence, changed only by log events
        self.rollout = Rollout(spec.rollout, spec.apprentice_epsilon, spec.promote_confidence)
        self.position = 0
        self.checkpoint_position = 0
        self.checkpoint_at = time.monotonic()
        self.last_apply_lag = 0.0
        self.budget_bytes = state_nbytes(spec) if budget_bytes is None else budget_bytes
        self._checksum: tuple[int, int, str] | None = None  # (position, id(learner), digest)
        self._catalog_checksum: tuple[int, int, str] | None = None  # (version, id(catalog), digest)
        self._pages: PageFeaturiser | None = None  # an action model's page featuriser, made when first used
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

    def featurise_page(
        self, features: Mapping[str, FeatureValue], actions: Sequence[Any], slots: Sequence[Any]
    ) -> PageInput:
        """The page of a request with ``slots`` (:class:`~service.slots.PageFeaturiser`, made at the
        first page); :class:`FeatureError` (422) on a label model or for what does not fit."""
        return self.page_featuriser()(features, actions, slots)

    def page_featuriser(self) -> PageFeaturiser:
        """The action model's :class:`~service.slots.PageFeaturiser` (made when first asked for);
        :class:`FeatureError` (422) on a label model."""
        if not isinstance(self.featurise, ActionFeaturiser):
            raise FeatureError(
                f"slots: model {self.name!r} has fixed labels; pages of several slots need a model with "
                '"actions": "features"'
            )
        if self._pages is None:
            f = self.featurise
            self._pages = PageFeaturiser(f.hashing_bits, f.context.max_named, f.max_actions)
        return self._pages

    def pack_page(self, page: PageInput) -> np.ndarray:
        """What a page's slot records keep of ``page`` (:meth:`PageFeaturiser.pack`), or for a page
        stored as a single decision (:func:`service.pages.is_single`) its action input's pack."""
        if is_single(page):
            return self.featurise.pack(page.actions)
        assert self._pages is not None
        return self._pages.pack(page)

    def decide_page(
        self,
        page: PageInput,
        decision_id: str,
        eligible: Sequence[np.ndarray | None] | None = None,
        baselines: Sequence[int | None] | None = None,
    ) -> PageDecision:
        """The page's decision, sampling seeded by ``decision_id``; no model change. Online: the
        learner's (:meth:`CCB.decide`: each slot among the candidates the earlier ones left). In
        logging and apprentice mode the page served around the slots' ``baselines`` (candidate
        indices, one per slot, required there; :func:`service.page_rollout.serve_page`).
        :class:`ParamError` (422) for baselines missing, repeated or not allowed in their slot."""
        r = self.rollout
        checked = check_baselines(baselines, page, eligible, r.mode)
        ccb, rng = CCB(self.learner), decision_rng(decision_id)
        if r.mode == "online":
            return ccb.decide(page, rng, eligible)
        assert checked is not None
        return serve_page(ccb, page, rng, eligible, r.mode, checked, r.epsilon, r.epoch)

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
                self._checksum = None
                self._learn_event(self.learner, event)
        elif event.kind == "rollout":
            assert event.state is not None
            self.rollout.apply_event(event.state, event.position, event.at)
        elif event.kind == "items":  # the catalog, kept apart from the learner (reset and import too)
            assert event.state is not None
            apply_event(self.catalog, event.state, event.at)
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
        is never heavy (:meth:`~service.runtime.replication.Replication.apply_all`)."""
        xs: list[Any] = []
        decisions: list[Decision] = []
        rewards: list[Reward] = []
        for event in events:
            if event.kind != "learn":
                self._learn_run(xs, decisions, rewards)
                self.apply(event)
                continue
            assert event.x is not None and event.decision is not None and event.reward is not None
            if page_slot(event.decision) is not None:  # a page's slot: learned on its own (CCB)
                self._learn_run(xs, decisions, rewards)
                self.apply(event)
                continue
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
        """What a checkpoint stores: the learner's state (views), the catalog's (``catalog.*``, a
        copy) and the rollout's keys unless the model has been online from the start."""
        state = {**self.learner.state(copy=False), **checkpoint_keys(self.catalog)}
        return {**state, **self.rollout.to_state()} if self.rollout.persistent else state

    def learned(self, event: Event) -> Learner:
        """A copy of the learner that has learned ``event`` (a learn), leaving the model as it was:
        run in a thread for a heavy learn (:meth:`~service.runtime.replication.Replication.apply`)."""
        assert event.x is not None and event.decision is not None and event.reward is not None
        twin = copy.deepcopy(self._learner)
        self._learn_event(twin, event)
        return twin

    def _learn_event(self, learner: Learner, event: Event) -> None:
        """``learner`` learns the learn ``event``: a single decision's as the learner's own learn, a
        page slot's through the CCB reduction on the page it carries (:func:`service.pages.learn_slot`)."""
        assert event.x is not None and event.decision is not None
        if page_slot(event.decision) is not None:
            assert self.spec.hashing_bits is not None  # pages are for action models, which hash
            learn_slot(learner, self.spec.hashing_bits, event.x, event.decision, self._reward(event))
            return
        x = self._input(self.featurise.unpack(event.x))
        learner.learn(x, Decision.from_state(event.decision), self._reward(event))

    def state_bytes(self) -> bytes:
        """Canonical serialised learned state (:mod:`service.serial`): what export returns."""
        return encode(self.learner.state(copy=False))

    def catalog_checksum(self) -> str | None:
        """sha256 of the catalog's canonical state (:meth:`Catalog.to_state`), equal on every replica
        at the same catalog version; None for a label model. Computed once per version: the learned
        state's :meth:`checksum` leaves the catalog out, as export does."""
        c = self.catalog
        if c is None:
            return None
        key = (c.version, id(c))
        if self._catalog_checksum is None or self._catalog_checksum[:2] != key:
            self._catalog_checksum = (*key, checksum(c.to_state()))
        return self._catalog_checksum[2]

    def checksum(self) -> str:
        """sha256 of the canonical serialised state: equal on every replica at the same version.

        Computed once per version (listing models never copies or re-hashes a state).
        """
        key = (self.position, id(self.learner))
        if self._checksum is None or self._checksum[:2] != key:
            self._checksum = (*key, checksum(self.learner.state(copy=False)))
        return self._checksum[2]
