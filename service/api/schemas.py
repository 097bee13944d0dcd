"""Request and response bodies of the HTTP API (separate from the runtime's internal types)."""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    model_validator,
)

from service.config import GroupName
from service.features import MAX_FEATURE_CHARS
from service.placement import MISDIRECTED_HEADER
from service.slots import MAX_SLOTS
from service.store.base import ID_PATTERN, MAX_DECISION_ID_LENGTH, MAX_ID_LENGTH, check_decision_id


def _kind(value: Any) -> str | None:
    """Pick the one union branch to validate against, so errors name that branch only."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "named"
    return None


# One limit for names and string values on every route (service.features.MAX_FEATURE_CHARS).
#: A decision id a client chooses, and one the server handed out (its routing suffix included): the
#: rule of :func:`service.store.base.check_decision_id`, on every route that takes one.
ChosenId = Annotated[
    str,
    Field(min_length=1, max_length=MAX_ID_LENGTH, pattern=ID_PATTERN),
    AfterValidator(check_decision_id),
]
HandedOutId = Annotated[
    str,
    Field(min_length=1, max_length=MAX_DECISION_ID_LENGTH, pattern=ID_PATTERN),
    AfterValidator(functools.partial(check_decision_id, handed_out=True)),
]
FeatureName = Annotated[str, Field(min_length=1, max_length=MAX_FEATURE_CHARS)]
NamedValue = Annotated[
    Annotated[StrictBool, Tag("bool")]
    | Annotated[StrictFloat, Tag("number")]
    | Annotated[StrictStr, Field(max_length=MAX_FEATURE_CHARS), Tag("string")],
    Discriminator(
        _kind,
        custom_error_type="feature_value",
        custom_error_message="a feature value must be a number, string or bool",
    ),
]
CategoricalValue = StrictBool | Annotated[StrictStr, Field(max_length=MAX_FEATURE_CHARS)]
Features = Annotated[
    Annotated[list[StrictFloat], Tag("list")] | Annotated[dict[FeatureName, NamedValue], Tag("named")],
    Discriminator(
        _kind,
        custom_error_type="features_type",
        custom_error_message="features must be a list of numbers or an object of named features",
    ),
]


class ActionCandidate(BaseModel):
    """One candidate action of ``POST /predict`` for a model with ``"actions": "features"`` (issue 39)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    id: str = Field(min_length=1, max_length=256, description="The action's id, distinct within the request.")
    features: dict[FeatureName, NamedValue] = Field(
        default_factory=dict, description="The action's named features {name: number | string | bool}."
    )


class SlotRequest(BaseModel):
    """One slot of a page in ``POST /predict`` (issue 53): its id, features and what it may show."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    id: str = Field(min_length=1, max_length=256, description="The slot's id, distinct within the page.")
    features: dict[FeatureName, NamedValue] = Field(
        default_factory=dict,
        description="The slot's named features (its position, its size): crossed with the actions' as "
        "the context's are, in a namespace of their own.",
    )
    eligible: list[StrictInt | StrictStr] | None = Field(
        None,
        max_length=10_000,
        description="Only these actions may fill this slot (ids or 0-based indices); not with `excluded`.",
    )
    excluded: list[StrictInt | StrictStr] | None = Field(
        None,
        max_length=10_000,
        description="These actions may not fill this slot (ids or 0-based indices); not with `eligible`.",
    )
    baseline: StrictInt | Annotated[StrictStr, Field(max_length=256)] | None = Field(
        None,
        description="The action your current policy would show in this slot (id or index; must be "
        "eligible there).",
    )


class PredictRequest(BaseModel):
    """Body of ``POST /predict``."""

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {"model": "demo", "features": {"age": 31, "country": "fr", "mobile": True}},
                {"model": "digits", "features": [0.0, 0.5, 1.0]},
                {
                    "model": "shop",
                    "features": {"country": "fr", "mobile": True},
                    "actions": [
                        {"id": "sku-1", "features": {"brand": "acme", "price": 9.5}},
                        {"id": "sku-2", "features": {"brand": "zeta", "price": 12.0}},
                    ],
                },
            ]
        },
    )

    model: str | None = Field(None, max_length=64, description="Model name; omitted = the default model.")
    features: Features = Field(
        description="A list of d numbers (dense model) or named features {name: number | string | bool} "
        "(hashed model; strings one-hot as name=value)."
    )
    actions: list[ActionCandidate] | None = Field(
        None,
        max_length=10_000,
        description='The candidate actions of a model with "actions": "features" (at most '
        "CLICKBOOST_MAX_ACTIONS, ids distinct); the answer's labels are their ids, `label_index` the "
        "chosen one's position here, and `eligible`, `excluded` and `baseline` name action ids.",
    )
    candidates: list[Annotated[StrictStr, Field(min_length=1, max_length=256)]] | None = Field(
        None,
        max_length=10_000,
        description="Catalog item ids as candidates (issue 54; features from the model's catalog, "
        "`PUT /models/{name}/items/{id}`): an unknown, inactive or expired id is a 422 naming it. With "
        "neither `actions` nor `candidates`, every active item of the catalog is a candidate. With "
        "`actions` too, the decision is over the actions then these (an id in both is refused). A "
        "catalog decision is answered with the top `k` of the ranking, not every probability.",
    )
    filter: dict[FeatureName, CategoricalValue | list[CategoricalValue]] | None = Field(
        None,
        description="Keep the catalog items whose string or boolean feature `name` is one of the values "
        'given, for every name (e.g. `{"category": ["shoes", "bags"]}`); sent `actions` are not filtered.',
    )
    k: StrictInt | None = Field(
        None,
        description="Items of a catalog decision's `ranking` (default 10, at most 100).",
    )
    eligible: list[StrictInt | StrictStr] | None = Field(
        None,
        max_length=10_000,
        description="Only these labels may be served (names or 0-based indices); not with `excluded`.",
    )
    excluded: list[StrictInt | StrictStr] | None = Field(
        None,
        max_length=10_000,
        description="These labels may not be served (names or 0-based indices); not with `eligible`.",
    )
    baseline: StrictInt | Annotated[StrictStr, Field(max_length=200)] | None = Field(
        None,
        description="The label your current policy would show (name or 0-based index; must be eligible). "
        "Required while the model's rollout is logging or apprentice, ignored (but checked) when online.",
    )
    defer: StrictBool = Field(
        False,
        description="Learn from this decision only if `POST /decisions/{decision_id}/activate` arrives "
        "within its reward window (the page really showed it); otherwise it is dropped, not given the "
        "default reward. A feedback before the activation is held until it.",
    )
    slots: list[SlotRequest] | None = Field(
        None,
        min_length=1,
        max_length=MAX_SLOTS,
        description='A page of several slots, in page order, on a model with "actions": "features" '
        "(issue 53): each slot gets its own action among those the earlier slots left (none shown "
        "twice; at least as many actions as slots), decided with the slot's features; the answer is a "
        "`PageResponse` with one `decision_id` for the page, and each slot's reward is posted to "
        "`/feedback` with its `slot`. `eligible`, `excluded` and `baseline` are then given per slot. "
        "`defer` covers the whole page.",
    )
    decision_id: ChosenId | None = Field(
        None,
        description=f"A client-chosen decision id instead of a drawn one (1 to {MAX_ID_LENGTH} characters "
        "of A-Z, a-z, 0-9, `_`, `.`, `:`, `-`, not `.` or `..`); it seeds the sampling as a drawn one "
        "does. Taken once: 409 while a decision with it is pending or was answered within the claim "
        "TTL. Ids are one namespace for all models (the feedback names no model). The answer's "
        "`decision_id` is the one to send the feedback for (the Redis store appends `.{slot tag}`, "
        f"so it has up to {MAX_DECISION_ID_LENGTH} characters).",
    )


#: A named feature's value as :class:`PredictFast` reads it: the branches of ``NamedValue`` tried in
#: order. A JSON bool is only a StrictBool, a number only a StrictFloat, a string only the StrictStr,
#: so every value it accepts is read as ``NamedValue`` reads it; it only lacks the one error message.
#: Strings first: web contexts are mostly strings, and a branch that fails costs an error object.
_FastValue = Annotated[
    Annotated[StrictStr, Field(max_length=MAX_FEATURE_CHARS)] | StrictFloat | StrictBool,
    Field(union_mode="left_to_right"),
]


class PredictFast(PredictRequest):
    """:class:`PredictRequest` with its features read by plain unions, not by the discriminator
    function ``_kind`` (a Python call per feature value, about 40 % of validating 30 named features).

    It accepts a subset of what :class:`PredictRequest` accepts, each with the same value; what it
    refuses is parsed again by :class:`PredictRequest`, whose errors name the problem (issue 52).
    Not in the OpenAPI document.
    """

    features: Annotated[  # type: ignore[assignment]
        list[StrictFloat] | dict[FeatureName, _FastValue], Field(union_mode="left_to_right")
    ]


class RankedLabel(BaseModel):
    """One eligible label of a ``POST /predict`` answer's ``ranking``."""

    label: str
    label_index: int
    probability: float


class PredictResponse(BaseModel):
    """Body of a ``POST /predict`` answer."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "decision_id": "q2v0yN3mVt0dQ1bB5mM0aQ",
                    "label": "sports",
                    "label_index": 0,
                    "probability": 0.9666666666666667,
                    "probabilities": [0.9666666666666667, 0.016666666666666666, 0.016666666666666666],
                    "ranking": [
                        {"label": "sports", "label_index": 0, "probability": 0.9666666666666667},
                        {"label": "politics", "label_index": 1, "probability": 0.016666666666666666},
                        {"label": "music", "label_index": 2, "probability": 0.016666666666666666},
                    ],
                    "model": "demo",
                    "model_version": 0,
                }
            ]
        }
    )

    decision_id: str = Field(description="Opaque id (128 random bits, URL-safe) to post the click for.")
    label: str = Field(description="Name of the sampled label: show this one.")
    label_index: int
    probability: float = Field(description="Probability with which `label` was sampled.")
    probabilities: list[float] = Field(
        description="The full distribution over labels (0 for the labels the request did not allow)."
    )
    ranking: list[RankedLabel] = Field(
        description="Every eligible label with its probability, most probable first (ties in label "
        "order): the order to fill several slots in."
    )
    model: str
    model_version: int = Field(description="Event-log position the model had applied when it decided.")


class SlotAnswer(BaseModel):
    """One slot of a :class:`PageResponse`, in page order."""

    id: str = Field(description="The slot's id, as the request gave it.")
    label: str = Field(description="The action to show in this slot (its id).")
    label_index: int = Field(description="Its position in the request's `actions`.")
    probability: float = Field(
        description="The probability it was drawn with in this slot, given the earlier slots' actions."
    )
    ranking: list[RankedLabel] = Field(
        description="Every action this slot could show (eligible there, not taken by an earlier slot) "
        "with its probability, most probable first (ties in request order)."
    )


class PageResponse(BaseModel):
    """Body of a ``POST /predict`` answer to a request with ``slots`` (issue 53)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "decision_id": "q2v0yN3mVt0dQ1bB5mM0aQ",
                    "model": "shop",
                    "model_version": 0,
                    "slots": [
                        {
                            "id": "hero",
                            "label": "sku-2",
                            "label_index": 1,
                            "probability": 0.5,
                            "ranking": [
                                {"label": "sku-1", "label_index": 0, "probability": 0.5},
                                {"label": "sku-2", "label_index": 1, "probability": 0.5},
                            ],
                        },
                        {
                            "id": "tile",
                            "label": "sku-1",
                            "label_index": 0,
                            "probability": 1.0,
                            "ranking": [{"label": "sku-1", "label_index": 0, "probability": 1.0}],
                        },
                    ],
                }
            ]
        }
    )

    decision_id: str = Field(description="The page's one id: post each slot's reward for it.")
    model: str
    model_version: int = Field(description="Event-log position the model had applied when it decided.")
    slots: list[SlotAnswer] = Field(description="The slots in the request's order, each with its action.")


class CatalogPredictResponse(BaseModel):
    """Body of a ``POST /predict`` answer over catalog candidates (issue 54): the chosen item and the
    top ``k`` of the ranking; the other candidates' probabilities are not sent (thousands of them)."""

    decision_id: str = Field(description="Opaque id to post the click for.")
    label: str = Field(description="Id of the chosen item: show this one.")
    label_index: int = Field(description="Its position among the candidates (sent actions first).")
    probability: float = Field(description="Probability with which `label` was drawn (exact).")
    ranking: list[RankedLabel] = Field(
        description="The `k` most probable candidates, most probable first (ties in candidate order)."
    )
    candidates: int = Field(description="How many candidates the decision was over.")
    catalog_version: int = Field(description="Version of the catalog the decision saw (-1: none).")
    model: str
    model_version: int = Field(description="Event-log position the model had applied when it decided.")


class CatalogSlotAnswer(SlotAnswer):
    """One slot of a :class:`CatalogPageResponse`, in page order: a :class:`SlotAnswer` whose item is
    a catalog candidate, with the top ``k`` of the slot's ranking."""

    label_index: int = Field(description="Its position among the request's candidates (sent actions first).")
    ranking: list[RankedLabel] = Field(
        description="The `k` most probable candidates of this slot (left by the earlier slots and "
        "eligible here), most probable first (ties in candidate order); its item's probability is exact."
    )
    candidates: int = Field(description="How many candidates this slot was decided over.")


class CatalogPageResponse(BaseModel):
    """Body of a ``POST /predict`` answer to a request with ``slots`` over catalog candidates (issue
    54): per slot the chosen item, its probability given the earlier slots' items and the top ``k``
    of the slot's ranking; the other candidates' probabilities are not sent."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "decision_id": "q2v0yN3mVt0dQ1bB5mM0aQ",
                    "model": "shop",
                    "model_version": 12,
                    "catalog_version": 3,
                    "slots": [
                        {
                            "id": "hero",
                            "label": "sku-17",
                            "label_index": 17,
                            "probability": 0.41,
                            "ranking": [{"label": "sku-17", "label_index": 17, "probability": 0.41}],
                            "candidates": 10000,
                        }
                    ],
                }
            ]
        }
    )

    decision_id: str = Field(description="The page's one id: post each slot's reward for it.")
    model: str
    model_version: int = Field(description="Event-log position the model had applied when it decided.")
    catalog_version: int = Field(description="Version of the catalog the page saw.")
    slots: list[CatalogSlotAnswer] = Field(
        description="The slots in the request's order, each with its item."
    )


class FeedbackRequest(BaseModel):
    """Body of ``POST /feedback``: exactly one of ``click`` and ``reward`` (issue 38)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"decision_id": "q2v0yN3mVt0dQ1bB5mM0aQ", "click": True},
                {"decision_id": "q2v0yN3mVt0dQ1bB5mM0aQ", "reward": 0.3},
            ]
        },
    )

    decision_id: HandedOutId = Field(description="The `decision_id` a `POST /predict` answered.")
    slot: (
        Annotated[StrictInt, Field(ge=0, lt=MAX_SLOTS)]
        | Annotated[StrictStr, Field(min_length=1, max_length=256)]
        | None
    ) = Field(
        None,
        description="The slot of a page this reward is for (issue 53): its 0-based index in the page "
        "(one store call) or its id as the request gave it. Each slot's reward is taken once. "
        "Omitted: slot 0, which for a decision without slots is the decision itself.",
    )
    click: StrictBool | None = Field(None, description="Whether the user clicked (the reward 1 or 0).")
    reward: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        strict=True,
        description="A graded reward in [0, 1] instead of the click bit; 0 and 1 are no click and click.",
    )

    @model_validator(mode="after")
    def _one_of(self) -> FeedbackRequest:
        if self.click is None and self.reward is None:
            raise ValueError("give click (true/false) or reward (a number in [0, 1])")
        if self.click is not None and self.reward is not None:
            raise ValueError("give click or reward, not both")
        return self

    @property
    def value(self) -> bool | float:
        """What the decision is rewarded: the click bit, or the graded reward."""
        return self.click if self.click is not None else float(self.reward)  # type: ignore[arg-type]


class FeedbackResponse(BaseModel):
    """Body of a ``POST /feedback`` answer: the learn event is durably in the model's log (or, for a
    deferred decision not activated yet, the feedback is durably held until the activation)."""

    decision_id: str
    click: bool | None = Field(description="The click bit given; null when a reward was given.")
    reward: float = Field(description="The reward learned from: 1 click, 0 no click, or the reward given.")
    model: str
    model_version: int | None = Field(
        description="Log position of this feedback's learn event; null while it is held."
    )
    held: bool = Field(
        False,
        description="True: the decision is deferred and not activated yet; the feedback is learned when "
        "`POST /decisions/{decision_id}/activate` arrives within the reward window, else dropped.",
    )


class SlotFeedbackResponse(FeedbackResponse):
    """Body of a ``POST /feedback`` answer for one slot of a page (a request with ``slot``)."""

    slot: int | str = Field(description="The slot, as the request named it.")


class FirstOutcome(BaseModel):
    """How a decision was first answered (body of 409 / 410 answers)."""

    outcome: Literal["click", "no_click", "reward", "expired"]
    model: str
    model_version: int | None = Field(description="Log position of its learn event; null when dropped.")
    at: float


class ActivateResponse(BaseModel):
    """Body of a ``POST /decisions/{decision_id}/activate`` answer."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"decision_id": "q2v0yN3mVt0dQ1bB5mM0aQ", "status": "activated", "learned": None},
                {"decision_id": "q2v0yN3mVt0dQ1bB5mM0aQ", "status": "not_deferred", "learned": None},
            ]
        }
    )

    decision_id: str
    status: Literal["activated", "already_active", "not_deferred"] = Field(
        description="`activated`: now (it will be learned: from its feedback, held or to come, or from "
        "the model's default reward at expiry); `already_active`: activated before (nothing changes); "
        "`not_deferred`: the decision was not deferred, activation is not needed (nothing changes)."
    )
    learned: FirstOutcome | None = Field(
        None,
        description="The decision's outcome if it has one: the held feedback learned at this activation, "
        "or the feedback or expiry that came before.",
    )


class SlotActivation(BaseModel):
    """One slot of a :class:`PageActivateResponse`."""

    slot: int = Field(description="The slot's 0-based index in the page.")
    status: Literal["activated", "already_active", "not_deferred"]
    learned: FirstOutcome | None = Field(None, description="The slot's outcome if it has one.")


class PageActivateResponse(ActivateResponse):
    """Body of a ``POST /decisions/{decision_id}/activate`` answer for a page of several slots: the
    page's status (every slot is activated by this one call) and each slot's."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "decision_id": "q2v0yN3mVt0dQ1bB5mM0aQ",
                    "status": "activated",
                    "learned": None,
                    "slots": [
                        {"slot": 0, "status": "activated", "learned": None},
                        {
                            "slot": 1,
                            "status": "activated",
                            "learned": {"outcome": "click", "model": "shop", "model_version": 7, "at": 1.7e9},
                        },
                    ],
                }
            ]
        }
    )

    slots: list[SlotActivation] = Field(
        description="Each slot, by index: its status and its outcome if it has one (a held feedback "
        "learned now, or one that came before)."
    )


class ErrorBody(BaseModel):
    """Every error answer: a one-line ``detail`` naming the problem."""

    detail: str
    errors: list[dict[str, Any]] | None = None
    first_outcome: FirstOutcome | None = None


class MisdirectedBody(ErrorBody):
    """A 421 answer (model placement, :meth:`service.placement.MisdirectedError.body`): where the
    model is held."""

    model: str
    groups: dict[str, list[str]] = Field(
        description="The groups the model is placed on -> their replicas' addresses (send it there)."
    )
    replica_group: str = Field(description="The group of the replica that answered.")


class ModelCounts(BaseModel):
    decisions: int
    clicks: int
    no_clicks: int
    expired: int
    pending: int
    ctr: float | None = Field(description="clicks / (clicks + no_clicks); null before the first answer.")
    graded: int = Field(0, description="Feedbacks with a graded reward strictly between 0 and 1.")
    reward_sum: float = Field(0.0, description="Sum of the feedbacks' rewards (a click counts 1).")
    mean_reward: float | None = Field(
        None, description="reward_sum / (clicks + no_clicks + graded); null before the first answer."
    )
    deferred: int = Field(0, description="Decisions made with `defer`: learned only if activated.")
    activated: int = Field(0, description="Deferred decisions activated within their reward window.")
    dropped_unactivated: int = Field(
        0, description="Deferred decisions never activated: dropped at expiry, nothing learned."
    )


class CatalogInfo(BaseModel):
    """An action-feature model's catalog in ``GET /models/{name}`` (issue 54)."""

    items: int = Field(description="Items registered (active or not, expired ones until removed).")
    version: int = Field(description="Changes applied to the catalog, equal on replicas of one log.")
    bytes: int = Field(description="What the memory budget counts for the catalog.")
    checksum: str = Field(
        description="sha256 of the catalog's canonical state: equal on every replica at the same version."
    )


class ModelInfo(BaseModel):
    """Body of ``GET /models/{name}``."""

    name: str
    config: dict[str, Any]
    version: int
    checksum: str = Field(description="sha256 of the canonical serialised learned state.")
    counts: ModelCounts
    state_bytes: int = Field(description="Bytes of learned state held now.")
    failure: str | None = Field(
        None,
        description="Set while this replica cannot apply the model's next event: it serves its last "
        "good state and retries with back-off; null when healthy.",
    )
    rollout: RolloutInfo | None = Field(
        None, description="Safe rollout: the mode and, outside online mode or once it left it, the evidence."
    )
    catalog: CatalogInfo | None = Field(
        None, description="The catalog of an action-feature model; null for a model with fixed labels."
    )


class Interval(BaseModel):
    """An estimated mean reward and its anytime-valid interval (``service.rollout``)."""

    value: float | None = Field(
        description="The IPS estimate; null where the log only bounds it (the learner in logging mode)."
    )
    low: float
    high: float


class RolloutEstimates(BaseModel):
    """The evidence of the current rollout epoch, from the decisions with a known reward."""

    n: int = Field(description="Decisions of this epoch with a known reward.")
    learner: Interval = Field(description="The learner's own policy's mean reward.")
    baseline: Interval = Field(description="The baseline's mean reward.")
    difference: Interval = Field(description="Learner minus baseline.")


class RolloutInfo(BaseModel):
    """A model's safe-rollout state (``service.rollout``), the same on every replica at a version."""

    mode: Literal["online", "logging", "apprentice"]
    epsilon: float = Field(description="The learner's share of the traffic in apprentice mode.")
    promote: Literal["manual", "auto"]
    min_decisions: int
    confidence: float = Field(description="Level of the intervals, valid however often they are read.")
    epoch: int = Field(description="Rollout events, resets and imports so far; the evidence is this epoch's.")
    changed: dict[str, Any] | None = Field(
        description="The last rollout event applied: position (model version), at, mode, reason (admin "
        "or auto) and, for an automatic promotion, the evidence it was decided on."
    )
    estimates: RolloutEstimates | None = Field(
        description="From the decisions made in logging or apprentice mode this epoch; null when none."
    )


class RolloutRequest(BaseModel):
    """Body of ``POST /models/{name}/rollout``."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["online", "logging", "apprentice"]


class PlacementRequest(BaseModel):
    """Body of ``POST /models/{name}/placement``: the replica groups to place the model on."""

    model_config = ConfigDict(extra="forbid")

    groups: list[GroupName] = Field(min_length=1, description="Group names of CLICKBOOST_REPLICA_GROUPS.")


class PlacementInfo(BaseModel):
    """Where a model is held (service.placement)."""

    model: str
    groups: dict[str, list[str]] = Field(
        description="The groups it is placed on (requests go there) -> their replicas' addresses."
    )
    joining: list[str] = Field(description="Groups loading it for a move under way (empty otherwise).")
    replica_group: str = Field(description="The group of the replica that answered.")


class ModelElsewhere(BaseModel):
    """A model held by other replica groups (model placement)."""

    name: str
    groups: dict[str, list[str]] = Field(description="The groups that hold it -> their replicas' addresses.")


class ModelList(BaseModel):
    models: list[ModelInfo] = Field(description="The models this replica holds.")
    learners: list[str] = Field(description="Bandit learners a model can use.")
    elsewhere: list[ModelElsewhere] = Field(
        default_factory=list,
        description="Model placement: the deployment's models that this replica's group does not hold, "
        "with the groups that do (ask them for their details); empty without placement.",
    )


class StateImported(BaseModel):
    name: str
    version: int
    checksum: str


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for error ``codes``, each an :class:`ErrorBody` (421: a
    :class:`MisdirectedBody`) with its meaning."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        out[code] = {"model": ErrorBody, "description": ERROR_MEANINGS[code]}
        if code in (429, 503):
            out[code]["headers"] = {"Retry-After": RETRY_AFTER_HEADER}
        if code == 421:
            out[code]["model"] = MisdirectedBody
            out[code]["headers"] = {MISDIRECTED_HEADER: REPLICAS_HEADER}
    return out


RETRY_AFTER_HEADER = {"description": "Seconds to wait before retrying", "schema": {"type": "integer"}}
REPLICAS_HEADER = {
    "description": "Comma-separated addresses of the replicas that hold the model",
    "schema": {"type": "string"},
}


ERROR_MEANINGS = {
    400: "Malformed JSON or an empty body",
    401: "Missing or invalid X-API-Key (the admin key for /models)",
    403: "Admin routes closed: API keys are configured but CLICKBOOST_ADMIN_KEY is not",
    404: "Unknown model",
    409: "Name taken",
    421: "Model placement: this replica's group does not hold the model; the body's `groups` and the "
    f"`{MISDIRECTED_HEADER}` header give the addresses of the replicas that do (nothing was recorded)",
    413: "Body over CLICKBOOST_MAX_BODY_BYTES (a state import with the admin key: over "
    "CLICKBOOST_MAX_MODEL_BYTES)",
    415: "The body is neither a JSON array nor JSON lines (its Content-Type says which)",
    422: "Wrong shape, type or value; `detail` names it, `errors` lists every problem",
    429: "Too many: evaluation jobs queued or running on this replica (at most "
    "service.evaluations.MAX_JOBS); retry after `Retry-After` seconds",
    503: "The shared store is unreachable, or the model cannot be loaded on this replica: nothing "
    "was recorded; retry after `Retry-After` seconds",
}
