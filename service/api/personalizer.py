"""Azure Personalizer's API on clickboost's models (issue 38, part 6): rank, reward, activate.

An application written for Azure Personalizer moves over by changing its endpoint and key
(docs/PERSONALIZER.md). These routes take Personalizer's request bodies, answer its shapes and
status codes (201 for a rank, 204 for a reward or an activation) and its error body
``{"error": {"code": ..., "message": ...}}``, which the two official Python clients turn into their
own exception types. They are left out of clickboost's OpenAPI document: their contract is
Personalizer's REST reference, checked by those clients (tests/service/api/test_personalizer.py).

Paths (all ``POST``), each under two prefixes: none, for the default model (``runtime.get(None)``:
``CLICKBOOST_DEFAULT_MODEL``, else the demo model, else the only model), and ``/loops/{name}`` for
model ``name`` (one server, many learning loops); the root paths on a server with no default model
answer 404 naming both ways (:data:`NO_DEFAULT_MODEL`), and any other path under ``/personalizer/``
a 404 in Personalizer's shape (:data:`NO_ROUTE`). ``{v}`` is one of :data:`API_VERSIONS`; the paths
without it are those of ``azure-ai-personalizer`` (which adds ``?api-version=2022-09-01-preview``):

- ``/personalizer/{v}/rank`` and ``/personalizer/rank``;
- ``/personalizer/{v}/events/{eventId}/reward`` and ``/personalizer/events/{eventId}/reward``;
- ``/personalizer/{v}/events/{eventId}/activate`` and ``/personalizer/events/{eventId}/activate``;
- multi-slot (the v1.1 previews and the unversioned paths): ``/personalizer[/{v}]/multislot/rank``,
  ``.../multislot/events/{eventId}/reward`` and ``/activate``.

The mapping:

- ``contextFeatures`` (a list of objects) become named features (:func:`context_features`), so the
  model must hash named features (``hashing_bits``);
- on a label model ``actions[].id`` are the model's labels (an unknown id: 400 naming it) and the
  action features are checked, not scored; on an action-feature model (``"actions": "features"``)
  any ids are taken and each action's ``features`` (flattened as ``contextFeatures``) are scored;
  the request's actions less ``excludedActions`` are the eligible ones of the decision;
- the answer's ``ranking`` lists every action with its probability, the eligible ones most probable
  first (ties in label order), then the excluded ones with probability 0; ``rewardActionId`` is
  the sampled label; the first action not excluded (a multi-slot rank: the slot's
  ``baselineAction``) is the baseline a model in logging or apprentice rollout serves
  (:mod:`service.rollout`: Personalizer's apprentice mode, with its own promotion rule);
- ``eventId``: the client's (taken once: 409 when reused; the characters of
  :func:`service.runtime.check_event_id`, else 400) or one drawn here; the decision id is
  ``store.route(model, eventId)`` and seeds the sampling as any drawn id does;
  ``deferActivation`` defers the decision (:meth:`Runtime.predict`), ``activate`` activates it
  (204; 404 unknown; 410 dropped), and a reward before the activation is held for it (204);
- a multi-slot rank of several slots (or of one with features) on an action-feature model is a
  page (issue 53, :meth:`Runtime.predict_page`): one event, each slot's action drawn among those
  the earlier slots left and the slot allows (its ``excludedActions``), its features (flattened
  as ``contextFeatures``) scored with the context's, a record per slot; its ``baselineAction`` is
  the slot's baseline (one per slot: the page your application would show); a label model ranks
  one slot (several: 400 naming the action-feature models), as does a rank of one slot without
  features, a single decision that keeps its slot id; ``activate`` activates every slot;
- a reward ``value`` must be a JSON number in [0, 1] (:data:`REWARD_RULE`): Personalizer allowed
  [-1, 1], and a value outside, or a string or a bool, is refused with 400, never converted,
  clipped or rescaled behind the caller's back; a multi-slot reward gives values for any of the
  event's slots, each named once (a ``slotId`` the event does not have: 400, nothing of the call
  learned); a second reward for an event, or for a slot, is 409 (learned once), an unknown event
  404, one past its window 410;
- limits, 400 naming them: a feature name or string value of at most
  :data:`~service.features.MAX_FEATURE_CHARS` characters (as on ``POST /predict``), at most
  ``CLICKBOOST_MAX_NAMED_FEATURES`` features per context or action; at most as many actions (and
  ``excludedActions``) as the model has labels, or ``CLICKBOOST_MAX_ACTIONS`` on an action-feature
  model, and :data:`~service.slots.MAX_SLOTS` slots (and rewards), counted before the body is
  parsed (:func:`_count_lists`);
- a reward or an activation finds the events of its own loop only: an event ranked through another
  is unknown there (404), on every store;
- ``?wait=true`` on a reward or an activation (an extension, as on ``POST /feedback``) answers
  once this process's model has applied it.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from service.actions import ActionFeaturiser
from service.api import metrics
from service.api.auth import HEADER, SUBSCRIPTION_HEADER, check_api_key
from service.api.errors import RETRY_AFTER_SECONDS
from service.api.hygiene import _is_json
from service.api.json_scan import Caps, count_lists
from service.api.personalizer_bodies import (
    REWARD_RULE,
    MultiSlotRankRequest,
    MultiSlotRewardRequest,
    PersonalizerError,
    RankableAction,
    RankRequest,
    RewardRequest,
    context_features,
)
from service.api.predict import parse
from service.features import FeatureError
from service.learners.base import ParamError
from service.pages import page_slot
from service.placement import MisdirectedError
from service.runtime import ModelRuntime, ModelUnavailableError, Runtime
from service.runtime.requests import PageAnsweredError
from service.slots import MAX_SLOTS
from service.store import (
    ActivateStatus,
    ClaimOutcome,
    ClaimStatus,
    DecisionExistsError,
    StoreUnavailableError,
    UnknownModelError,
)
from service.store.base import check_decision_id

#: The versioned paths served; multi-slot exists from the v1.1 previews on.
API_VERSIONS = ("v1.0", "v1.1-preview.1", "v1.1-preview.2", "v1.1-preview.3")
MULTISLOT_VERSIONS = API_VERSIONS[1:]
#: The prefix of a named model's paths: the client's endpoint is ``http://host:port/loops/NAME``.
LOOP_PREFIX = "/loops/{name}"
#: The answer of the root endpoint when the server has no default model (several models, none named).
NO_DEFAULT_MODEL = (
    "this endpoint serves the default model, and the server has none: set CLICKBOOST_DEFAULT_MODEL=NAME "
    "on the server, or give the client the endpoint http://HOST:PORT/loops/NAME to rank with model NAME"
)
#: The answer of a path under /personalizer/ that is none of the routes (an endpoint given with
#: /personalizer/v1.0 at its end, for one: the client adds that part itself).
NO_ROUTE = (
    "no Personalizer route at {path}: give the client the endpoint without /personalizer/... "
    "(http://HOST:PORT, or http://HOST:PORT/loops/NAME); the client adds the API's paths itself"
)
KEY_HEADERS = (SUBSCRIPTION_HEADER, HEADER)
M = TypeVar("M", bound=BaseModel)
R = TypeVar("R", "RankRequest", "MultiSlotRankRequest")
MAX_LISTED_LABELS = 10
#: The key of a multi-slot rank's slot id in its decision's memo (:meth:`Runtime.predict`).
SLOT_MEMO = "personalizer_slot"


def _listed(labels: list[str]) -> str:
    shown = ", ".join(repr(label) for label in labels[:MAX_LISTED_LABELS])
    more = len(labels) - MAX_LISTED_LABELS
    return shown + (f" and {more} more" if more > 0 else "")


def _eligible(m: ModelRuntime, actions: list[RankableAction], excluded: list[str] | None) -> list[str]:
    """The request's action ids less the excluded ones, checked against the model's labels."""
    ids = [a.id for a in actions]
    seen: set[str] = set()
    for i, action_id in enumerate(ids):
        if action_id in seen:
            raise PersonalizerError(400, f"actions[{i}].id {action_id!r} is given twice")
        seen.add(action_id)
        if m.spec.actions == "labels" and action_id not in m.label_index:
            raise PersonalizerError(
                400,
                f"actions[{i}].id {action_id!r} is not a label of model {m.name!r}: action ids must be "
                f"its labels ({_listed(m.labels)})",
            )
    out = set(excluded or ())
    for action_id in out - seen:
        raise PersonalizerError(400, f"excludedActions: {action_id!r} is not one of the request's actions")
    eligible = [a for a in ids if a not in out]
    if not eligible:
        raise PersonalizerError(400, "excludedActions: every action is excluded; nothing to rank")
    return eligible


def _ranking(
    m: ModelRuntime, probs: list[float], ids: list[str], eligible: list[str]
) -> list[dict[str, Any]]:
    """Every action with its probability: the eligible ones most probable first (ties in label
    order, as ``POST /predict``'s ranking), then the excluded ones with probability 0."""
    index = m.label_index if m.spec.actions == "labels" else {a: i for i, a in enumerate(ids)}
    allowed = set(eligible)
    ranked = sorted(eligible, key=lambda a: (-probs[index[a]], index[a]))
    return [
        *({"id": a, "probability": probs[index[a]]} for a in ranked),
        *({"id": a, "probability": 0.0} for a in ids if a not in allowed),
    ]


def _check_version(request: Request, multislot: bool) -> None:
    version = request.path_params.get("version")
    served = MULTISLOT_VERSIONS if multislot else API_VERSIONS
    if version == "personalizer":  # an endpoint given with /personalizer at its end
        raise PersonalizerError(404, NO_ROUTE.format(path=request.url.path))
    if version is not None and version not in served:
        what = "multi-slot API" if multislot else "API"
        message = f"unknown Personalizer {what} version {version!r}; served: {', '.join(served)}"
        raise PersonalizerError(404, message)


def _checked(request: Request, multislot: bool) -> None:
    """The key (401) and the path's API version (404)."""
    check_api_key(request, KEY_HEADERS)
    _check_version(request, multislot)


#: Lists read item by item before a body is parsed (:func:`_count_lists`): key -> (most, message).
async def _request(request: Request, model: type[M], caps: Caps) -> M:
    """The body: refused (415) unless JSON, as on clickboost's own JSON routes (a ``text/plain``
    body would let a page post cross-origin without a CORS preflight), its ``caps`` lists counted
    (:func:`_count_lists`), then parsed as ``model``."""
    body = await request.body()
    if body and not _is_json(request.headers.get("content-type", "").encode("latin-1")):
        got = request.headers.get("content-type") or "none"
        message = f"the body must be JSON: send Content-Type: application/json (got {got})"
        raise PersonalizerError(415, message)
    if body.strip():
        _count_lists(body, caps)
    return parse(model, body)


def _count_lists(body: bytes, caps: Caps) -> None:
    """400 with the cap's message when a top-level list of ``caps`` in the JSON object ``body`` has
    more items than its cap, found before anything is parsed into models
    (:func:`service.api.json_scan.count_lists`; issue 51: a rank of 10,000 actions, refused anyway,
    held the event loop for about 200 ms of parsing)."""
    count_lists(body, caps, lambda message: PersonalizerError(400, message))


def _validation_message(exc: RequestValidationError) -> str:
    problems = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"] if p != "body"]
        if err["type"] == "missing" and not loc:
            return "empty body: expected a JSON object"
        if err["type"] == "json_invalid":
            return f"malformed JSON: {err.get('ctx', {}).get('error', 'invalid JSON')}"
        # a reward's value: a JSON number, never a string or a bool converted (issue 51)
        msg = (
            "a JSON number is required, not a string or a bool" if err["type"] == "float_type" else err["msg"]
        )
        problems.append(f"{'.'.join(loc) or 'body'}: {msg}")
    return "; ".join(problems)


Endpoint = Callable[[Request], Awaitable[Response]]


def _personalizer_errors(endpoint: Endpoint) -> Endpoint:
    """Answer every failure of ``endpoint`` in Personalizer's error shape, not clickboost's
    ``{"detail": ...}``: the official clients read ``error.code`` and ``error.message``."""

    @functools.wraps(endpoint)
    async def answer(request: Request) -> Response:
        try:
            return await endpoint(request)
        except PersonalizerError as exc:
            return exc.response()
        except HTTPException as exc:  # the key check
            return PersonalizerError(exc.status_code, exc.detail, dict(exc.headers or {})).response()
        except RequestValidationError as exc:
            return PersonalizerError(400, _validation_message(exc)).response()
        except (FeatureError, ParamError) as exc:
            return PersonalizerError(400, str(exc)).response()
        except UnknownModelError as exc:
            return PersonalizerError(404, str(exc)).response()
        except PageAnsweredError as exc:  # a slot named by id once no slot of its page is pending
            return PersonalizerError(409, str(exc)).response()
        except MisdirectedError as exc:  # model placement: its holders' addresses in the header
            return PersonalizerError(421, str(exc), exc.headers()).response()
        except ModelUnavailableError as exc:
            return PersonalizerError(503, str(exc), {"Retry-After": str(RETRY_AFTER_SECONDS)}).response()
        except StoreUnavailableError:
            # as clickboost's own 503: the cause goes to the log (service.api.errors), not to clients
            message = "shared store unavailable, nothing recorded; retry later"
            return PersonalizerError(503, message, {"Retry-After": str(RETRY_AFTER_SECONDS)}).response()

    return answer


async def _model(request: Request) -> tuple[Runtime, ModelRuntime]:
    """The runtime and the model the path names (the default model without ``/loops/{name}``)."""
    runtime: Runtime = request.app.state.runtime
    name = request.path_params.get("name")
    try:
        m = await runtime.resolve(name)
    except UnknownModelError:
        if name is not None or runtime.settings.default_model is not None:
            raise
        # the root endpoint on a server of several models: say how to name one (issue 51)
        raise PersonalizerError(404, NO_DEFAULT_MODEL) from None
    if m.spec.hashing_bits is None:
        raise PersonalizerError(
            400,
            f"model {m.name!r} takes a list of {m.spec.n_features} numbers; the Personalizer routes need "
            "a model that hashes named features (hashing_bits)",
        )
    return runtime, m


# -- endpoints -------------------------------------------------------------------------------------


def _caps(m: ModelRuntime) -> dict[str, tuple[int, str]]:
    """The most items of a rank's lists for model ``m``, counted before the body is parsed
    (:func:`_count_lists`): its labels (the action ids are distinct labels) or, for an action-feature
    model, ``CLICKBOOST_MAX_ACTIONS`` actions; :data:`~service.slots.MAX_SLOTS` slots."""
    if isinstance(m.featurise, ActionFeaturiser):
        most = m.featurise.max_actions
        why = f"at most {most:,} per rank (CLICKBOOST_MAX_ACTIONS)"
    else:
        most = len(m.labels)
        why = f"model {m.name!r} has {most:,} labels and action ids are distinct labels"
    return {
        "actions": (most, f"actions: more than {most:,} actions; {why}"),
        "excludedActions": (
            most,
            f"excludedActions: more than {most:,}, more than the actions can be ({why})",
        ),
        "slots": (MAX_SLOTS, f"slots: more than {MAX_SLOTS} slots, at most {MAX_SLOTS} per page"),
    }


def _max_named(m: ModelRuntime) -> int:
    """Most named features of a context (and of each action) for model ``m``."""
    f = m.featurise
    return f.context.max_named if isinstance(f, ActionFeaturiser) else f.max_named


async def _rank_request(request: Request, model: type[R], multislot: bool) -> tuple[Runtime, ModelRuntime, R]:
    """The key, the version, the model the path names, then the body with its lists counted
    against the model's caps (:func:`_caps`) before it is parsed."""
    _checked(request, multislot)
    runtime, m = await _model(request)
    return runtime, m, await _request(request, model, _caps(m))


async def _decide(
    runtime: Runtime,
    m: ModelRuntime,
    body: RankRequest | MultiSlotRankRequest,
    excluded: list[str] | None,
    baseline: str | None = None,
    slot: str | None = None,
) -> tuple[str, str, list[dict[str, Any]]]:
    """Decide among the request's actions less ``excluded``: (eventId, rewardActionId, ranking).

    ``baseline`` (default: the first action not excluded, Personalizer's baseline) is what a model
    in logging or apprentice rollout serves (:mod:`service.rollout`); online it is only checked.
    ``slot``: a multi-slot rank's slot id, kept in the decision for its reward to name.

    The event id is the client's or one drawn here as ``POST /predict`` draws its ids; either way
    the decision id is ``store.route(model, eventId)`` (:meth:`Runtime.predict`), so a reward or an
    activation finds the decision from the model and the event id alone, and the answer's
    ``eventId`` is what the client sent or will send back."""
    eligible = _eligible(m, body.actions, excluded)
    baseline = eligible[0] if baseline is None else baseline
    event_id = runtime.ids.new() if body.event_id is None else body.event_id
    most = _max_named(m)
    features = context_features(body.context_features, "contextFeatures", most)
    # Flattened on every model, so that the limits hold on every route; scored only by an
    # action-feature model (issue 39).
    named = [context_features(a.features, f"actions[{i}].features", most) for i, a in enumerate(body.actions)]
    defer = bool(body.defer_activation)
    actions = None
    if m.spec.actions == "features":
        actions = [{"id": a.id, "features": f} for a, f in zip(body.actions, named, strict=True)]
    memo = None if slot is None else {SLOT_MEMO: slot}
    try:
        p = await runtime.predict(
            m.name,
            features,
            eligible,
            None,
            baseline,
            event_id=event_id,
            defer=defer,
            actions=actions,
            memo=memo,
        )
    except DecisionExistsError:  # pending or answered: a client-chosen id is taken once
        raise PersonalizerError(409, f"eventId {event_id!r} is taken: an event id is ranked once") from None
    metrics.DECISIONS.labels(p.model).inc()
    ranking = _ranking(m, p.decision.probs.tolist(), [a.id for a in body.actions], eligible)
    return event_id, p.label, ranking


@_personalizer_errors
async def rank(request: Request) -> Response:
    """Rank the request's actions for its context: 201 with ``ranking``, ``eventId``, ``rewardActionId``."""
    runtime, m, body = await _rank_request(request, RankRequest, multislot=False)
    event_id, chosen, ranking = await _decide(runtime, m, body, body.excluded_actions)
    return JSONResponse({"ranking": ranking, "eventId": event_id, "rewardActionId": chosen}, status_code=201)


def _check_slots(body: MultiSlotRankRequest) -> None:
    """400 naming the first problem of the slots: an id given twice, an excluded action that is not
    one of the request's, a ``baselineAction`` that is not one of them, is excluded from its slot
    or is another slot's too (Personalizer's rule: each slot its own baseline)."""
    ids = {a.id for a in body.actions}
    seen: dict[str, int] = {}
    baselines: dict[str, int] = {}
    for s, slot in enumerate(body.slots):
        where = f"slots[{s}]"
        if slot.id in seen:
            raise PersonalizerError(
                400, f"{where}.id {slot.id!r} is slots[{seen[slot.id]}]'s too: slot ids are distinct"
            )
        seen[slot.id] = s
        for action_id in slot.excluded_actions or ():
            if action_id not in ids:
                raise PersonalizerError(
                    400, f"{where}.excludedActions: {action_id!r} is not one of the request's actions"
                )
        baseline = slot.baseline_action
        if baseline not in ids:
            raise PersonalizerError(400, f"{where}.baselineAction {baseline!r} is not one of the actions")
        if baseline in (slot.excluded_actions or ()):
            raise PersonalizerError(400, f"{where}.baselineAction {baseline!r} is excluded")
        if baseline in baselines:
            raise PersonalizerError(
                400,
                f"{where}.baselineAction {baseline!r} is slots[{baselines[baseline]}]'s too: each slot has "
                "its own baseline (the page your application would show without Personalizer)",
            )
        baselines[baseline] = s


async def _decide_page(
    runtime: Runtime, m: ModelRuntime, body: MultiSlotRankRequest, slots: list[dict[str, Any]]
) -> tuple[str, list[str]]:
    """Decide the page (:meth:`Runtime.predict_page`: each slot among the actions the earlier slots
    left, one event for the page, a record per slot): (eventId, each slot's rewardActionId).
    ``slots``: the request's, with their features flattened."""
    event_id = runtime.ids.new() if body.event_id is None else body.event_id
    most = _max_named(m)
    features = context_features(body.context_features, "contextFeatures", most)
    actions = [
        {"id": a.id, "features": context_features(a.features, f"actions[{i}].features", most)}
        for i, a in enumerate(body.actions)
    ]
    # one slot: its id in the memo as a one-slot rank keeps it, should the page be stored as one decision
    memo = {SLOT_MEMO: slots[0]["id"]} if len(slots) == 1 else None
    try:
        p = await runtime.predict_page(
            m.name, features, actions, slots, event_id=event_id, defer=bool(body.defer_activation), memo=memo
        )
    except DecisionExistsError:
        raise PersonalizerError(409, f"eventId {event_id!r} is taken: an event id is ranked once") from None
    metrics.DECISIONS.labels(p.model).inc(len(p.slots))  # a decision per slot, as the stores count them
    return event_id, [slot.label for slot in p.slots]


@_personalizer_errors
async def rank_multi_slot(request: Request) -> Response:
    """A multi-slot rank: 201 with ``eventId`` and ``slots: [{id, rewardActionId}]``, in page order.

    A page of slots on an action-feature model (:func:`_decide_page`), each slot's features scored
    with the context's; a rank of one slot without features (or on a label model, which ranks one
    slot) is a single decision, as a rank is, its slot id kept for the reward to name."""
    runtime, m, body = await _rank_request(request, MultiSlotRankRequest, multislot=True)
    _check_slots(body)
    most = _max_named(m)
    slots = [
        {
            "id": slot.id,
            "features": context_features(slot.features, f"slots[{s}].features", most),
            "excluded": slot.excluded_actions,
            "baseline": slot.baseline_action,
        }
        for s, slot in enumerate(body.slots)
    ]
    if len(slots) == 1 and (m.spec.actions == "labels" or not slots[0]["features"]):
        (slot,) = body.slots
        event_id, chosen, _ = await _decide(
            runtime, m, body, slot.excluded_actions, slot.baseline_action, slot.id
        )
        labels = [chosen]
    else:
        event_id, labels = await _decide_page(runtime, m, body, slots)
    answer = {
        "eventId": event_id,
        "slots": [
            {"id": slot.id, "rewardActionId": label} for slot, label in zip(body.slots, labels, strict=True)
        ],
    }
    return JSONResponse(answer, status_code=201)


def _wait(request: Request) -> bool:
    return request.query_params.get("wait", "false").lower() in ("1", "true", "yes", "on")


async def _event(request: Request) -> tuple[Runtime, str, str, str]:
    """The runtime, the decision id of the path's event (``store.route(model, eventId)``, as the
    rank made it), the event id (400 unless it is one a rank takes: :func:`check_decision_id`) and
    the model, which a reward or an activation names: an event of another loop is unknown there."""
    runtime, m = await _model(request)
    event_id = request.path_params["eventId"]
    try:
        check_decision_id(event_id)
    except ValueError as exc:
        raise PersonalizerError(400, f"eventId: {exc}") from None
    return runtime, runtime.store.route(m.name, event_id), event_id, m.name


def _check_value(value: float, where: str = "reward value") -> None:
    if not 0.0 <= value <= 1.0:  # NaN too
        raise PersonalizerError(400, f"{where} {value!r} is outside [0, 1]: {REWARD_RULE}")


def _claimed(out: ClaimOutcome, event_id: str, slot: str | None = None, learned: Sequence[str] = ()) -> None:
    """Count a reward's claim outcome; nothing when it was taken (or held for the activation), else
    404 / 409 / 410 naming why not (``slot``: the slot of a page's reward; ``learned``: the slots
    whose rewards the same call had taken before)."""
    claim = out.claim
    held = out.status is ClaimStatus.HELD  # deferred, not activated yet: learned at the activation
    if claim is not None and (held or out.status is ClaimStatus.ACCEPTED):
        metrics.FEEDBACK.labels(out.status.value if held else claim.outcome).inc()
        return
    metrics.FEEDBACK.labels(out.status.value).inc()
    what = f"event {event_id!r}" if slot is None else f"slot {slot!r} of event {event_id!r}"
    taken = f" (the rewards of {', '.join(map(repr, learned))} were taken)" if learned else ""
    if claim is None:
        raise PersonalizerError(
            404, f"unknown event id {event_id!r} (never ranked here, or long forgotten){taken}"
        )
    if out.status is ClaimStatus.EXPIRED:
        raise PersonalizerError(
            410, f"{what}: reward window passed; the model's default reward was applied{taken}"
        )
    raise PersonalizerError(
        409, f"{what} was already answered ({claim.outcome}); a reward is learned once{taken}"
    )


async def _learn(request: Request, value: float) -> Response:
    """Claim the event's decision with reward ``value``: 204, or 404 / 409 / 410 naming why not."""
    _check_value(value)
    runtime, decision_id, event_id, model = await _event(request)
    out, _ = await runtime.feedback(decision_id, value, _wait(request), model)
    _claimed(out, event_id)
    return Response(status_code=204)


@_personalizer_errors
async def reward(request: Request) -> Response:
    """Report the reward of an event's ``rewardActionId``: 204 once it is stored."""
    _checked(request, multislot=False)
    body = await _request(request, RewardRequest, {})
    return await _learn(request, body.value)


@_personalizer_errors
async def reward_multi_slot(request: Request) -> Response:
    """The rewards of an event's slots: ``{"reward": [{"slotId", "value"}]}``, any of its slots, each
    named once; 204 once every one is stored. A slot the event does not have is 400 and nothing of
    the call is learned; a slot rewarded before is 409 (a slot's reward is learned once: the
    call's other slots are, and the message names them)."""
    _checked(request, multislot=True)
    caps = {"reward": (MAX_SLOTS, f"reward: more than {MAX_SLOTS} slots, at most {MAX_SLOTS} per page")}
    body = await _request(request, MultiSlotRewardRequest, caps)
    seen: dict[str, int] = {}
    for i, entry in enumerate(body.reward):
        _check_value(entry.value, f"reward[{i}].value")
        first = seen.setdefault(entry.slot_id, i)
        if first != i:
            message = f"reward[{i}].slotId {entry.slot_id!r} is reward[{first}]'s too: a value per slot"
            raise PersonalizerError(400, message)
    runtime, decision_id, event_id, model = await _event(request)
    record = await runtime.store.get_decision(decision_id)
    if record is not None and record.model != model:  # another loop's event: unknown here
        return await _learn(request, body.reward[0].value)
    if record is not None and page_slot(record.decision) is None:  # a single decision, pending
        slot = record.decision.get(f"memo.{SLOT_MEMO}")
        for i, entry in enumerate(body.reward):
            if entry.slot_id != slot:
                ranked = f"for slot {slot!r}" if slot is not None else "without slots (a single-slot rank)"
                raise PersonalizerError(
                    400,
                    f"reward[{i}].slotId {entry.slot_id!r} is not the slot of event {event_id!r}, "
                    f"ranked {ranked}",
                )
        return await _learn(request, body.reward[0].value)
    # A page (or nothing pending): every slot id checked against the page's before anything is claimed.
    indices = [await runtime.requests.slot_index(decision_id, entry.slot_id) for entry in body.reward]
    if all(index is None for index in indices):  # no slot pending: unknown, or every slot answered
        return await _learn(request, body.reward[0].value)  # the event's own first outcome
    learned: list[str] = []
    for entry, index in zip(body.reward, indices, strict=True):
        slot = entry.slot_id if index is None else index
        out, _ = await runtime.feedback_slot(decision_id, slot, entry.value, _wait(request), model)
        _claimed(out, event_id, entry.slot_id, learned)
        learned.append(entry.slot_id)
    return Response(status_code=204)


async def _activate(request: Request, multislot: bool) -> Response:
    """Say that a ``deferActivation`` event was shown: 204, and it is learned from (its held reward
    now, else the reward to come, else the model's default reward at expiry); a multi-slot event's
    every slot (:meth:`Runtime.activate_page`). An event that was not deferred, or is active
    already, is a harmless 204 too."""
    _checked(request, multislot)
    runtime, decision_id, event_id, model = await _event(request)
    wait = _wait(request)
    if multislot:
        outs = await runtime.activate_page(decision_id, wait, model)
    else:
        outs = [await runtime.activate(decision_id, wait, model)]
    for out in outs:
        metrics.ACTIVATIONS.labels(out.status.value if out.deferred else "not_deferred").inc()
    if outs[0].status is ActivateStatus.UNKNOWN:
        raise PersonalizerError(404, f"unknown event id {event_id!r} (never ranked here, or long forgotten)")
    if any(out.status is ActivateStatus.EXPIRED for out in outs):
        raise PersonalizerError(
            410, f"event {event_id!r}: deferred and not activated within its reward window; dropped"
        )
    return Response(status_code=204)


@_personalizer_errors
async def activate(request: Request) -> Response:
    """Activate an event (:func:`_activate`)."""
    return await _activate(request, multislot=False)


@_personalizer_errors
async def activate_multi_slot(request: Request) -> Response:
    """Activate a multi-slot event, every slot of it (:func:`_activate`)."""
    return await _activate(request, multislot=True)


def _add(router: APIRouter, path: str, endpoint: Endpoint) -> None:
    for prefix in ("", LOOP_PREFIX):
        for version in ("", "/{version}"):
            router.add_api_route(
                f"{prefix}/personalizer{version}{path}", endpoint, methods=["POST"], include_in_schema=False
            )


async def no_route(request: Request) -> Response:
    """Any other path under ``/personalizer/``: 404 in Personalizer's shape, naming the endpoint to
    give (FastAPI's ``{"detail": "Not Found"}`` would reach the clients as an unreadable error)."""
    return PersonalizerError(404, NO_ROUTE.format(path=request.url.path)).response()


router = APIRouter(tags=["personalizer"])
# Multi-slot first: "/personalizer/multislot/rank" would otherwise match "/personalizer/{version}/rank".
_add(router, "/multislot/rank", rank_multi_slot)
_add(router, "/multislot/events/{eventId}/reward", reward_multi_slot)
_add(router, "/multislot/events/{eventId}/activate", activate_multi_slot)
_add(router, "/rank", rank)
_add(router, "/events/{eventId}/reward", reward)
_add(router, "/events/{eventId}/activate", activate)
# Last: only what no route above matched.
for _prefix in ("", LOOP_PREFIX):
    router.add_api_route(
        f"{_prefix}/personalizer/{{rest:path}}", no_route, methods=["POST"], include_in_schema=False
    )
