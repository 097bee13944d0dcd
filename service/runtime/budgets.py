"""What a model's spec may ask for: its learner, and the memory and work budgets checked at creation.

Every model is built by :func:`build_learner` (a bandit learner that fits the spec's actions), and
a spec is admitted only if its learned state fits the memory budgets (:func:`check_budget`,
``CLICKBOOST_MAX_MODEL_BYTES`` and ``CLICKBOOST_MAX_TOTAL_MODEL_BYTES``) and one event's work and
transient memory fit the event budgets (:func:`check_event_budget`). The registry checks both on
``PUT /models/{name}`` and on the models declared at start-up (:func:`check_declared`), before
anything is allocated (docs/ARCHITECTURE.md, "Costs and limits").
"""

from __future__ import annotations

from collections.abc import Mapping

from service.config import ModelSpec, Settings
from service.learners.base import Learner, ParamError, learners, make_learner

__all__ = [
    "DECISION_STEPS_PER_LABEL",
    "BudgetError",
    "bandit_class",
    "build_learner",
    "check_budget",
    "check_catalog_budget",
    "check_declared",
    "check_event_budget",
    "human_bytes",
    "state_nbytes",
]


class BudgetError(ParamError):
    """A model's learned state would exceed the memory budget (422 at creation)."""


def bandit_class(spec: ModelSpec) -> type[Learner]:
    """The learner class ``spec`` names; :class:`ParamError` if it is unknown, needs the true label
    (full information) or does not fit the model's kind of actions (labels or action features)."""
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
    bandit_class(spec)
    return make_learner(spec.learner, spec.dim, spec.k, spec.params, seed=spec.seed)


def state_nbytes(spec: ModelSpec) -> int:
    """Bytes of learned state ``spec`` asks for, without allocating it (:class:`ParamError` if invalid)."""
    return bandit_class(spec).state_nbytes(spec.dim, spec.k, spec.params)


def human_bytes(n: float) -> str:
    """``n`` bytes as the budget messages show them (``"1.5 MiB"``)."""
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


def check_catalog_budget(
    name: str, learned: int, catalog: int, items: int, settings: Settings, others: int
) -> None:
    """:class:`BudgetError` naming both sizes when model ``name``'s catalog of ``catalog`` bytes
    (``items`` items, after the write being checked), beside its ``learned`` bytes of learned state,
    would not fit the budget per model, or with ``others`` (what the process's other models hold)
    the budget of the process (issue 54: the catalog counts as the learned state does)."""
    what = (
        f"model {name!r} would hold a catalog of {human_bytes(catalog)} ({items:,} items) beside "
        f"{human_bytes(learned)} of learned state"
    )
    if learned + catalog > settings.max_model_bytes:
        raise BudgetError(
            f"{what}; the budget per model is {human_bytes(settings.max_model_bytes)} "
            "(CLICKBOOST_MAX_MODEL_BYTES)"
        )
    if others + learned + catalog > settings.max_total_model_bytes:
        raise BudgetError(
            f"{what}; this process's other models already hold {human_bytes(others)} of the "
            f"{human_bytes(settings.max_total_model_bytes)} budget (CLICKBOOST_MAX_TOTAL_MODEL_BYTES)"
        )


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
    cls = bandit_class(spec)
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
