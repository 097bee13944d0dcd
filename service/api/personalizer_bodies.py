"""Personalizer's request bodies and their translation into clickboost's named features.

The models of the bodies the routes of :mod:`service.api.personalizer` take (Personalizer's REST
reference: ``RankRequest``, ``MultiSlotRankRequest``, the rewards), :func:`context_features` (its
``contextFeatures``, an action's or a slot's ``features``, as named features) and the error every
route answers with, :class:`PersonalizerError`, in Personalizer's shape.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictFloat

from service.features import MAX_FEATURE_CHARS, FeatureValue

REWARD_RULE = (
    "clickboost learns rewards in [0, 1]; map a Personalizer reward r in [-1, 1] to (r + 1) / 2 "
    "before sending it"
)
#: Personalizer's error codes by status (its clients read ``error.code`` and ``error.message``).
CODES = {
    400: "BadRequest",
    401: "Unauthorized",
    404: "ResourceNotFound",
    409: "Conflict",
    410: "Gone",
    421: "MisdirectedRequest",
    415: "UnsupportedMediaType",
    503: "ServiceUnavailable",
}
#: Characters of a long feature name or action id quoted in an error message.
MAX_QUOTED = 40


class PersonalizerError(Exception):
    """An answer in Personalizer's error shape: ``status`` and a one-line ``message``."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers

    def response(self) -> JSONResponse:
        body = {"error": {"code": CODES[self.status], "message": self.message}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


# -- bodies ----------------------------------------------------------------------------------------


class _Body(BaseModel):
    # Unknown fields are refused (400 naming them): a misspelt "excludedAction" must not be ignored.
    model_config = ConfigDict(extra="forbid")


class RankableAction(_Body):
    """An action: its id and its features. For a label model the id is a label and the features
    are accepted, not used; a model with ``"actions": "features"`` (issue 39) scores the action from
    its features (flattened as ``contextFeatures``), and any id goes."""

    id: str = Field(min_length=1, max_length=256)
    features: list[dict[str, Any]] | None = None


class RankRequest(_Body):
    """Body of a rank (Personalizer's ``RankRequest``)."""

    context_features: list[dict[str, Any]] | None = Field(None, alias="contextFeatures")
    actions: list[RankableAction] = Field(min_length=1)
    excluded_actions: list[str] | None = Field(None, alias="excludedActions")
    event_id: str | None = Field(None, alias="eventId", min_length=1, max_length=256)
    defer_activation: bool | None = Field(None, alias="deferActivation")


class SlotRequest(_Body):
    """One slot of a multi-slot rank: its id (distinct in the rank), its features (scored by an
    action-feature model on a page, flattened as ``contextFeatures``; checked, not used, on a rank of
    one slot without them or on a label model), the actions it may not show and its
    ``baselineAction`` (an action of the rank, not excluded from the slot, no other slot's)."""

    id: str = Field(min_length=1, max_length=256)
    features: list[dict[str, Any]] | None = None
    excluded_actions: list[str] | None = Field(None, alias="excludedActions")
    baseline_action: str = Field(alias="baselineAction", min_length=1, max_length=256)


class MultiSlotRankRequest(_Body):
    """Body of a multi-slot rank: one event for the page, each slot's action among those the earlier
    slots left (Personalizer's ``MultiSlotRankRequest``)."""

    context_features: list[dict[str, Any]] | None = Field(None, alias="contextFeatures")
    actions: list[RankableAction] = Field(min_length=1)
    slots: list[SlotRequest] = Field(min_length=1)
    event_id: str | None = Field(None, alias="eventId", min_length=1, max_length=256)
    defer_activation: bool | None = Field(None, alias="deferActivation")


class RewardRequest(_Body):
    """Body of a reward: the ``value``, a JSON number (see :data:`REWARD_RULE`); a string or a bool
    is refused, not converted (issue 51)."""

    value: StrictFloat


class SlotReward(_Body):
    """One slot's reward: the ``slotId`` and its ``value`` (as :class:`RewardRequest`'s)."""

    slot_id: str = Field(alias="slotId", min_length=1, max_length=256)
    value: StrictFloat


class MultiSlotRewardRequest(_Body):
    """Body of a multi-slot reward: a value for some or all of the event's slots, each slot named
    once (Personalizer's ``MultiSlotRewardRequest``)."""

    reward: list[SlotReward] = Field(min_length=1)


# -- translation -----------------------------------------------------------------------------------


def context_features(
    objects: list[dict[str, Any]] | None, where: str = "contextFeatures", most: int | None = None
) -> dict[str, FeatureValue]:
    """Personalizer's ``contextFeatures`` (or an action's ``features``) as clickboost's named features.

    Nested objects are flattened with dots (``{"user": {"tier": "gold"}}`` -> ``user.tier``); a
    string, number or bool is the value of its name (a string one-hot encodes as ``name=value``,
    :mod:`service.features`); in a list, a string is one more one-hot value of the list's name (a
    set of categories: ``{"tags": ["a", "b"]}`` -> ``tags=a`` and ``tags=b``) and anything else
    takes its index (``{"v": [0.5, 2]}`` -> ``v.0``, ``v.1``); ``null`` is no feature. A name
    given twice is refused (400) rather than summed or overwritten, and so are a flattened name or
    a string value longer than :data:`~service.features.MAX_FEATURE_CHARS` (as on ``POST
    /predict``) and more than ``most`` features (stopping there). ``where`` names the field in the
    messages.

    >>> context_features([{"user": {"tier": "gold", "visits": 3}}, {"tags": ["a", "b"]}, {"x": None}])
    {'user.tier': 'gold', 'user.visits': 3, 'tags=a': 1.0, 'tags=b': 1.0}
    """
    out: dict[str, FeatureValue] = {}

    def put(name: str, value: FeatureValue) -> None:
        if name in out:
            raise PersonalizerError(400, f"{where}: feature {_quoted(name)} is given twice")
        if most is not None and len(out) == most:
            raise PersonalizerError(
                400, f"{where}: more than {most:,} features, at most {most:,} (CLICKBOOST_MAX_NAMED_FEATURES)"
            )
        out[name] = value

    def walk(name: str, value: Any) -> None:
        if value is None:
            return
        _check_length(where, "feature name", name)  # at every level: a nested name grows no further
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{name}.{key}", inner)
        elif isinstance(value, list):
            for i, inner in enumerate(value):
                if isinstance(inner, str):  # the bucket of the string feature name=inner
                    _check_length(where, f"a string value of {_quoted(name)}", inner)
                    put(f"{name}={inner}", 1.0)
                else:
                    walk(f"{name}.{i}", inner)
        else:
            if isinstance(value, str):
                _check_length(where, f"the string value of {_quoted(name)}", value)
            put(name, value)

    for obj in objects or ():
        for key, value in obj.items():
            walk(key, value)
    return out


def _quoted(text: str) -> str:
    """``text`` quoted for a message, cut to :data:`MAX_QUOTED` characters."""
    return repr(text) if len(text) <= MAX_QUOTED else repr(text[:MAX_QUOTED]) + "..."


def _check_length(where: str, what: str, text: str) -> None:
    """400 naming ``where``, ``what`` and the limit when ``text`` is over
    :data:`~service.features.MAX_FEATURE_CHARS` characters."""
    if len(text) > MAX_FEATURE_CHARS:
        raise PersonalizerError(
            400,
            f"{where}: {what} {_quoted(text)} has {len(text):,} characters, at most {MAX_FEATURE_CHARS:,} "
            "(the limit on feature names and string values)",
        )
