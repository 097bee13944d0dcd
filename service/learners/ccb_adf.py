"""Conditional contextual bandits over an action learner (issue 53): Vowpal Wabbit's
``--ccb_explore_adf`` reduction, for pages of several slots.

A page has S slots in order and n >= S candidate actions. The reduction (VW's
``conditional_contextual_bandit.cc``, ``learn_or_predict``; its wiki page "Conditional Contextual
Bandit") makes S contextual-bandit decisions in a row with one action learner: slot ``s`` is decided
among the candidates the slots before it left (and that the slot allows), on the input whose
context carries the slot's features (:meth:`service.slots.PageInput.slot_input`: the rows then hold
context x action and slot x action products, as VW's CCB adds a slot's features to the shared
example that ``-q`` crosses with the actions). Each slot's decision is the learner's own, so it
reports the distribution the slot's action was drawn from given the earlier slots' choices, ties
included (:func:`service.learners.base.over_ties`); the page's probability is their product (the
chain rule). Each slot's reward is learned by the learner as a single-slot event on that slot's
input, with that conditional decision (VW: one ``cb_adf`` learn per labelled slot, with the
probability in the slot's label).

Why this is honest for off-policy evaluation: the action of slot ``s`` is drawn from ``p_s(. |
a_1..a_{s-1})``, the reported distribution, so for any function ``f`` of slot ``s``'s action
``E[f(a_s) / p_s(a_s | prefix) 1[a_s = a]] = f(a)`` for every candidate ``a`` left to slot ``s``
given the prefix (IPS per slot with the conditional probability; VW's ``--ccb_explore_adf`` log
carries exactly these). ``tests/service/learners/test_ccb_adf.py`` checks it by enumerating every
ordered choice of a two- and a three-slot page with its exact probability.

Differences from VW, on purpose: VW also adds a slot-index feature to the shared example and copies
every interaction with it (``insert_ccb_interactions``: ``-q ua`` becomes ``ua`` and ``ua`` x slot
index, plus every namespace x slot index), so each slot gets its own copy of every weight; here a
slot is known by the features the caller gives it (its position, its size) and the rows cross them
with the actions only, so what is learned about an item in one slot carries to the others. Like VW,
a single slot without features is the single-slot learner itself (VW: "If the reduction has not yet
seen a multi slot example, it will behave the same as if it were CB"): a one-slot page decides,
reports and learns bit for bit what the action learner does on the request alone.

Graded rewards: learned as values when the action learner learns values (``learner.graded``:
``squarecb-adf``, the default, does), else as the Bernoulli bit the runtime draws for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.features import FeatureError
from service.learners.base import Decision, Learner, ParamError
from service.serial import State, StateFormatError
from service.slots import PageInput

__all__ = ["CCB", "PageDecision"]


@dataclass(slots=True)
class PageDecision:
    """What :meth:`CCB.decide` returns: one :class:`~service.learners.base.Decision` per slot, in order.

    Slot ``s``'s ``probs`` (over the page's n candidates, 0 on those earlier slots took and on those
    the slot does not allow) is the distribution its action was drawn from given the earlier slots'
    actions; ``label`` the candidate shown there.
    """

    slots: list[Decision] = field(default_factory=list)

    @property
    def labels(self) -> list[int]:
        """The candidate shown in each slot."""
        return [d.label for d in self.slots]

    @property
    def probabilities(self) -> list[float]:
        """Each slot's action's probability given the earlier slots' actions."""
        return [d.probability for d in self.slots]

    def to_state(self) -> State:
        """Flat dictionary for :mod:`service.serial` (``slots`` and each slot's decision under ``s.``)."""
        out: State = {"slots": len(self.slots)}
        for s, d in enumerate(self.slots):
            out.update({f"{s}.{k}": v for k, v in d.to_state().items()})
        return out

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> PageDecision:
        """Inverse of :meth:`to_state`."""
        try:
            n = int(state["slots"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StateFormatError(f"bad page decision record: {exc}") from None
        slots = []
        for s in range(n):
            prefix = f"{s}."
            slots.append(
                Decision.from_state({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})
            )
        return cls(slots)


class CCB:
    """Conditional contextual bandits (VW's ``--ccb_explore_adf``) over an action learner.

    Holds no state of its own: the model is the action learner's (its weights, counters and
    generator), so checkpoints, replication and ``state_nbytes`` are the learner's.

    Parameters
    ----------
    learner : Learner
        An action learner (``learner.actions``), e.g. ``make_learner("squarecb-adf", 2**b, 1)``, the
        served default of action models.

    References
    ----------
    Vowpal Wabbit's ``--ccb_explore_adf``: ``vowpalwabbit/core/src/reductions/
    conditional_contextual_bandit.cc`` (``learn_or_predict``, ``build_cb_example``,
    ``inject_slot_features``) and its wiki page "Conditional Contextual Bandit"; it has no paper of
    its own. The default action learner: D. Foster, A. Rakhlin, Beyond UCB: optimal and efficient
    contextual bandits with regression oracles, ICML 2020. The per-slot estimate is inverse
    propensity scoring (D. Horvitz, D. Thompson, JASA 1952) with each slot's conditional probability.

    Examples
    --------
    >>> import numpy as np
    >>> from service.learners import make_learner
    >>> from service.slots import PageFeaturiser
    >>> f = PageFeaturiser(8, 100, 10)
    >>> page = f(
    ...     {"user": "a"},
    ...     [{"id": i, "features": {"kind": i}} for i in ("x", "y", "z")],
    ...     [{"id": p, "features": {"position": p}} for p in ("hero", "tile")],
    ... )
    >>> ccb = CCB(make_learner("squarecb-adf", 256, 1))
    >>> d = ccb.decide(page, np.random.default_rng(0))
    >>> len(set(d.labels)), d.probabilities  # two distinct items; 1/3, then 1/2 of the two left
    (2, [0.3333333333333333, 0.5])
    >>> ccb.learn(page, d, [1.0, 0.0])  # a reward per slot, each with its slot's features
    >>> ccb.learner.t_
    2
    """

    def __init__(self, learner: Learner) -> None:
        if not learner.actions:
            raise ParamError(f"{learner.name} is a label learner: pages need an action learner")
        self.learner = learner

    @property
    def graded(self) -> bool:
        """Whether a graded reward is learned as a value (the action learner's :attr:`Learner.graded`)."""
        return self.learner.graded

    def decide_slot(
        self,
        page: PageInput,
        s: int,
        taken: np.ndarray,
        rng: np.random.Generator,
        eligible: np.ndarray | None = None,
    ) -> Decision:
        """Slot ``s``'s decision given the candidates ``taken`` (a boolean mask of the n) by the slots
        before it: the learner's decision on the slot's input over the candidates it allows
        (``eligible``, None for all) and that are not taken. Must not change the model; draws from
        ``rng`` as the learner's ``decide`` does. :class:`FeatureError` if no candidate is left."""
        allowed = ~taken if eligible is None else np.asarray(eligible, dtype=np.bool_) & ~taken
        if not allowed.any():
            raise FeatureError(
                f"slots.{s}: no candidate action left for slot {page.ids[s]!r} (the earlier slots took "
                "every action it allows)"
            )
        # every candidate allowed: no mask, so a one-slot page draws what a single decision draws
        return self.learner.decide(page.slot_input(s), rng, None if allowed.all() else allowed)

    def decide(
        self,
        page: PageInput,
        rng: np.random.Generator,
        eligible: Sequence[np.ndarray | None] | None = None,
    ) -> PageDecision:
        """Every slot's decision in order (:meth:`decide_slot`), one generator for the page; no
        candidate fills two slots. ``eligible``: per slot a boolean mask of the n candidates, or None
        for all. :class:`FeatureError` with fewer candidates than slots or when a slot has none left."""
        n, n_slots = page.n, page.n_slots
        if n < n_slots:
            raise FeatureError(
                f"slots: {n_slots} slots but {n} candidate actions: each slot shows its own action, so "
                "send at least as many actions as slots"
            )
        if eligible is not None and len(eligible) != n_slots:
            raise ValueError(f"eligible: one mask (or None) per slot, {n_slots}, got {len(eligible)}")
        taken = np.zeros(n, dtype=np.bool_)
        out = PageDecision()
        for s in range(n_slots):
            d = self.decide_slot(page, s, taken, rng, None if eligible is None else eligible[s])
            taken[d.label] = True
            out.slots.append(d)
        return out

    def learn_slot(self, page: PageInput, decision: PageDecision, s: int, reward: bool | float) -> None:
        """Learn slot ``s``'s reward: the learner's single-slot update on the slot's input with the
        slot's conditional decision. Slots may be learned in any order, each once."""
        self.learner.learn(page.slot_input(s), decision.slots[s], reward)

    def learn(self, page: PageInput, decision: PageDecision, rewards: Sequence[bool | float | None]) -> None:
        """Learn every slot's reward in slot order (None: the slot has none, nothing is learned)."""
        if len(rewards) != page.n_slots:
            raise ValueError(f"rewards: one per slot, {page.n_slots}, got {len(rewards)}")
        for s, reward in enumerate(rewards):
            if reward is not None:
                self.learn_slot(page, decision, s, reward)
