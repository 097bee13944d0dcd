"""``POST /predict`` and ``POST /feedback``: the two calls a web app makes; and
``POST /decisions/{decision_id}/activate`` for the decisions it deferred (issue 38).

These two are the hot path. The functions take the raw :class:`Request` and return a
:class:`Response`, doing by hand what FastAPI's dependency injection would (key check, body
parsing with pydantic-core's JSON parser, the ``wait`` flag), and :func:`service.api.app.create_app`
declares them as plain Starlette routes, which :class:`HotRoutes` calls straight from the middleware
(issue 52); the decorated APIRoutes below, with ``openapi_extra`` describing body, parameter and
security scheme, define the documented contract. The answers are written by pydantic-core's
``to_json`` from plain dicts in the order of the response models' fields: the same bytes as the
models' ``model_dump_json``, without building the models.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, HTTPException, Path, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from pydantic_core import to_json
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from service.api import metrics
from service.api.auth import SECURITY, check_api_key
from service.api.json_scan import count_lists, may_exceed
from service.api.schemas import (
    ActivateResponse,
    CatalogPageResponse,
    CatalogPredictResponse,
    ErrorBody,
    FeedbackRequest,
    FeedbackResponse,
    HandedOutId,
    PageActivateResponse,
    PageResponse,
    PredictFast,
    PredictRequest,
    PredictResponse,
    SlotFeedbackResponse,
    error_responses,
)
from service.learners.base import ParamError
from service.runtime import Runtime
from service.runtime.catalog_requests import CatalogQuery
from service.runtime.requests import PageAnsweredError, PagePrediction, Prediction
from service.store import ActivateOutcome, ActivateStatus, Claim, ClaimOutcome, ClaimStatus

M = TypeVar("M", bound=BaseModel)

# /predict answers during a store outage (the decision is recorded once the store is back), so
# only /feedback documents 503.
router = APIRouter(tags=["decisions"], responses=error_responses(401, 413))
# The activation takes no body: no 413.
activation = APIRouter(tags=["decisions"], responses=error_responses(401))


async def get_runtime(request: Request) -> Runtime:
    # async: FastAPI runs plain-def dependencies in a thread pool, a costly hop per request
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


WAIT = {
    "name": "wait",
    "in": "query",
    "required": False,
    "schema": {"type": "boolean", "default": False},
    "description": "Return only after this process's model applied the update.",
}


def _wait(request: Request) -> bool:
    if not request.scope["query_string"]:  # the common case: no query to parse
        return False
    return request.query_params.get("wait", "false").lower() in ("1", "true", "yes", "on")


def _first(claim: Claim) -> dict[str, Any]:
    """A claim as the answers' ``first_outcome`` / ``learned`` (:class:`FirstOutcome`)."""
    return {"outcome": claim.outcome, "model": claim.model, "model_version": claim.position, "at": claim.at}


def _body(model: type[BaseModel]) -> dict[str, Any]:
    return {
        "required": True,
        "content": {"application/json": {"schema": _inlined(model.model_json_schema())}},
    }


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``$defs`` (nested models: an action of ``PredictRequest``) written in
    place of their ``$ref``: inside an operation's body a ``#/$defs/...`` pointer would resolve
    against the whole OpenAPI document, where no such key is."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return walk(defs[ref.removeprefix("#/$defs/")])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)


def parse(model: type[M], body: bytes, fast: type[M] | None = None) -> M:
    """Validate a JSON body with pydantic-core's parser (exact float64, no ``json.loads`` detour).

    ``fast``: a cheaper model that accepts a subset of what ``model`` accepts, with the same values
    (:class:`PredictFast`); tried first, and what it refuses is parsed by ``model``.

    Errors take the route FastAPI's own would (:class:`RequestValidationError`, locations under
    ``body``), so the handlers in :mod:`service.api.errors` answer them the same way.
    """
    if fast is not None:
        try:
            return fast.model_validate_json(body)
        except ValidationError:
            pass
    if not body.strip():
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required"}])
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False, include_input=False)]
        ) from None


@router.post(
    "/predict",
    response_model=PredictResponse | PageResponse | CatalogPredictResponse | CatalogPageResponse,
    responses={
        400: {"model": ErrorBody},
        404: {"model": ErrorBody},
        409: {"model": ErrorBody, "description": "The client-chosen `decision_id` is taken"},
        **error_responses(421),
        422: {"model": ErrorBody},
    },
    summary="Sample a label for a context",
    openapi_extra={"requestBody": _body(PredictRequest), **SECURITY},
)
async def predict(request: Request) -> Response:
    """Featurise the context, let the model decide, record the decision for its reward window.

    The body is a :class:`PredictRequest`, parsed by hand for speed (a 784-float body costs about
    half as much as FastAPI's ``json.loads`` + validation).
    """
    check_api_key(request)
    raw = await request.body()
    most = request.app.state.settings.max_actions
    if may_exceed(raw, most):  # counted before the parse: 10,000 candidates cost 100+ ms to parse
        message = f"actions: more than {most} candidates, at most {most} allowed (CLICKBOOST_MAX_ACTIONS)"
        count_lists(raw, {"actions": (most, message)}, lambda m: HTTPException(422, m))
    body = parse(PredictRequest, raw, PredictFast)
    runtime: Runtime = request.app.state.runtime
    if body.slots is not None:
        return await predict_page(runtime, body)
    p = await runtime.predict(
        body.model,
        body.features,
        body.eligible,
        body.excluded,
        body.baseline,
        event_id=body.decision_id,
        defer=body.defer,
        actions=body.actions,
        catalog=_catalog_query(body),
    )
    metrics.DECISIONS.labels(p.model).inc()
    if p.catalog is not None:
        return Response(to_json(_catalog_answer(p)), media_type="application/json")
    d = p.decision
    probs = d.probs.tolist()
    mask = d.memo.get("eligible")
    shown = range(len(probs)) if mask is None else mask.nonzero()[0].tolist()
    labels = p.labels
    out = {  # PredictResponse's fields, in its order
        "decision_id": p.decision_id,
        "label": p.label,
        "label_index": d.label,
        "probability": d.probability,
        "probabilities": probs,
        "ranking": [  # RankedLabel's fields
            {"label": labels[i], "label_index": i, "probability": probs[i]}
            for i in sorted(shown, key=lambda i: -probs[i])  # stable: ties in label order
        ],
        "model": p.model,
        "model_version": p.model_version,
    }
    return Response(to_json(out), media_type="application/json")


async def predict_page(runtime: Runtime, body: PredictRequest) -> Response:
    """``POST /predict`` with ``slots`` (issue 53): the page decided by :meth:`Runtime.predict_page`,
    answered as a :class:`PageResponse` (each slot's action, its probability given the earlier
    slots' actions, and its ranking)."""
    for field in ("eligible", "excluded", "baseline"):
        if getattr(body, field) is not None:
            raise ParamError(
                f"{field}: with slots, give eligible, excluded and baseline per slot (slots[i].{field})"
            )
    assert body.slots is not None
    p = await runtime.predict_page(
        body.model,
        body.features,
        body.actions,
        body.slots,
        event_id=body.decision_id,
        defer=body.defer,
        catalog=_catalog_query(body),
    )
    metrics.DECISIONS.labels(p.model).inc(len(p.decision.slots))
    if p.catalog is not None:
        return Response(to_json(_catalog_page_answer(p)), media_type="application/json")
    labels = p.labels
    slots = []
    for s in p.slots:
        d = s.decision
        probs = d.probs.tolist()
        slots.append(
            {  # SlotAnswer's fields, in its order
                "id": s.slot_id,
                "label": s.label,
                "label_index": d.label,
                "probability": d.probability,
                "ranking": [
                    {"label": labels[i], "label_index": i, "probability": probs[i]} for i in s.ranking
                ],
            }
        )
    out = {"decision_id": p.decision_id, "model": p.model, "model_version": p.model_version, "slots": slots}
    return Response(to_json(out), media_type="application/json")


def _catalog_query(body: PredictRequest) -> CatalogQuery | None:
    """The body's catalog fields (issue 54), or None when it has none."""
    if body.candidates is None and body.filter is None and body.k is None:
        return None
    return CatalogQuery(body.candidates, body.filter, body.k)


def _catalog_answer(p: Prediction) -> dict[str, Any]:
    """A catalog decision's answer (:class:`CatalogPredictResponse`'s fields, in its order)."""
    c = p.catalog
    assert c is not None
    return {
        "decision_id": p.decision_id,
        "label": p.label,
        "label_index": c.index,
        "probability": p.decision.probability,
        "ranking": [{"label": i, "label_index": k, "probability": q} for i, k, q in c.top],
        "candidates": c.candidates,
        "catalog_version": c.version,
        "model": p.model,
        "model_version": p.model_version,
    }


def _catalog_page_answer(p: PagePrediction) -> dict[str, Any]:
    """A page over catalog candidates' answer (:class:`CatalogPageResponse`'s fields, in its order)."""
    c = p.catalog
    assert c is not None
    slots = [
        {  # CatalogSlotAnswer's fields, in its order
            "id": s.slot_id,
            "label": s.item_id,
            "label_index": s.index,
            "probability": s.probability,
            "ranking": [{"label": i, "label_index": k, "probability": q} for i, k, q in s.top],
            "candidates": s.candidates,
        }
        for s in c.slots
    ]
    return {
        "decision_id": p.decision_id,
        "model": p.model,
        "model_version": p.model_version,
        "catalog_version": c.version,
        "slots": slots,
    }


@router.post(
    "/feedback",
    response_model=FeedbackResponse | SlotFeedbackResponse,
    responses={
        400: {"model": ErrorBody},
        404: {"model": ErrorBody, "description": "Unknown (or long forgotten) decision id"},
        409: {"model": ErrorBody, "description": "Already answered; the body gives the first outcome"},
        410: {"model": ErrorBody, "description": "Reward window passed; the default reward applies"},
        422: {"model": ErrorBody},
        **error_responses(503),
    },
    summary="Report whether the user clicked, or a graded reward in [0, 1]",
    openapi_extra={
        "requestBody": _body(FeedbackRequest),
        "parameters": [WAIT],
        **SECURITY,
    },
)
async def feedback(request: Request) -> Response:
    """Claim the decision exactly once and append its learn event to the model's log.

    200 once the event is durably in the log; with ``?wait=true`` once this process's model has
    applied it too.
    """
    check_api_key(request)
    body = parse(FeedbackRequest, await request.body())
    runtime: Runtime = request.app.state.runtime
    if body.slot is not None:
        try:
            out, _ = await runtime.feedback_slot(body.decision_id, body.slot, body.value, _wait(request))
        except PageAnsweredError as exc:
            metrics.FEEDBACK.labels(ClaimStatus.DUPLICATE.value).inc()
            return JSONResponse({"detail": str(exc)}, status_code=409)
        return _feedback_answer(body, out)
    out, _ = await runtime.feedback(body.decision_id, body.value, _wait(request))
    return _feedback_answer(body, out)


def _feedback_answer(body: FeedbackRequest, out: ClaimOutcome) -> Response:
    """The answer to a feedback (:class:`FeedbackResponse`, or :class:`SlotFeedbackResponse` for a
    slot of a page) or its error (404, 409 and 410 with the first outcome)."""
    claim = out.claim
    held = out.status is ClaimStatus.HELD
    what = f"decision {body.decision_id!r}" + ("" if body.slot is None else f" slot {body.slot!r}")
    if claim is not None and (held or out.status is ClaimStatus.ACCEPTED):
        metrics.FEEDBACK.labels(out.status.value if held else claim.outcome).inc()
        ok = {  # FeedbackResponse's fields, in its order (SlotFeedbackResponse's: and the slot)
            "decision_id": body.decision_id,
            "click": body.click,
            "reward": float(body.value),
            "model": claim.model,
            "model_version": claim.position,
            "held": held,
        }
        if body.slot is not None:
            ok["slot"] = body.slot
        return Response(to_json(ok), media_type="application/json")
    metrics.FEEDBACK.labels(out.status.value).inc()
    if claim is None:
        detail = f"unknown decision id {body.decision_id!r}"
        if body.slot:  # a slot past slot 0 of a page no longer pending, or of no page
            detail += f" (or it has no slot {body.slot!r})"
        return JSONResponse({"detail": detail}, status_code=404)
    first = _first(claim)
    if out.status is ClaimStatus.EXPIRED:
        detail = f"{what}: reward window passed; the model's default reward applies"
        return JSONResponse({"detail": detail, "first_outcome": first}, status_code=410)
    detail = f"{what} was already answered ({claim.outcome}); not learned twice"
    return JSONResponse({"detail": detail, "first_outcome": first}, status_code=409)


DecisionPath = Annotated[HandedOutId, Path(description="The `decision_id` a `POST /predict` answered.")]


@activation.post(
    "/decisions/{decision_id}/activate",
    response_model=ActivateResponse | PageActivateResponse,
    responses={
        404: {"model": ErrorBody, "description": "Unknown (or long forgotten) decision id"},
        410: {
            "model": ErrorBody,
            "description": "Deferred and not activated within its reward window: dropped",
        },
        422: {"model": ErrorBody},
        **error_responses(503),
    },
    summary="Say that a deferred decision was shown: learn from it",
    openapi_extra={"parameters": [WAIT], **SECURITY},
)
async def activate(request: Request, decision_id: DecisionPath) -> Response:
    """Activate a decision made with ``defer`` (issue 38): it is learned from only if this arrives
    within its reward window. A feedback already held for it is learned now (with ``?wait=true``
    applied by this process's model before the answer); otherwise its feedback, or at expiry the
    model's default reward. Idempotent: a second activation is 200 ``already_active``; a decision
    that was not deferred is 200 ``not_deferred``. Key as ``/feedback``.
    """
    check_api_key(request)
    runtime: Runtime = request.app.state.runtime
    outs = await runtime.activate_page(decision_id, _wait(request))
    out = outs[0]
    metrics.ACTIVATIONS.labels(out.status.value if out.deferred else "not_deferred").inc()
    if out.status is ActivateStatus.UNKNOWN:
        return JSONResponse({"detail": f"unknown decision id {decision_id!r}"}, status_code=404)
    claim = out.claim
    if out.status is ActivateStatus.EXPIRED:
        detail = (
            f"decision {decision_id!r}: deferred and not activated within its reward window; "
            "dropped, nothing learned"
        )
        body: dict[str, Any] = {"detail": detail}
        if claim is not None:
            body["first_outcome"] = _first(claim)
        return JSONResponse(body, status_code=410)
    if len(outs) > 1:
        return _page_activated(decision_id, outs)
    ok = ActivateResponse(
        decision_id=decision_id,
        status=_activation_status(out),
        learned=None if claim is None else _first(claim),  # type: ignore[arg-type]
    )
    return Response(ok.model_dump_json(), media_type="application/json")


def _activation_status(out: ActivateOutcome) -> str:
    """An activation's ``status`` in the answer (:class:`ActivateResponse`)."""
    if not out.deferred:
        return "not_deferred"
    return "activated" if out.status is ActivateStatus.ACTIVATED else "already_active"


def _page_activated(decision_id: str, outs: list[ActivateOutcome]) -> Response:
    """The answer to the activation of a page of several slots (:class:`PageActivateResponse`): every
    slot activated by the one call; the page's status is ``activated`` when a slot was activated now."""
    statuses = [_activation_status(o) for o in outs]
    status = "activated" if "activated" in statuses else statuses[0]
    ok = PageActivateResponse(
        decision_id=decision_id,
        status=status,  # type: ignore[arg-type]
        learned=None,
        slots=[
            {"slot": s, "status": st, "learned": None if o.claim is None else _first(o.claim)}  # type: ignore[misc]
            for s, (o, st) in enumerate(zip(outs, statuses, strict=True))
        ],
    )
    return Response(ok.model_dump_json(), media_type="application/json")


Handler = Callable[[Request, Exception], Any]


class HotRoutes:
    """Pure ASGI, the innermost middleware: a request for one of the app's plain Starlette routes
    (``POST /predict`` and ``POST /feedback``, declared in :func:`service.api.app.create_app`) goes
    straight to its endpoint, past FastAPI's and Starlette's inner layers (exception middleware,
    exit stack, router, route, request-response wrapper), which cost a pair tens of microseconds
    (issue 52). What those layers do for such a route is done here: the scope gets its
    ``endpoint``, and an exception is answered by the app's handler for it, as Starlette's
    exception middleware would (a handler's own status code first for an ``HTTPException``, then
    the exception's classes in order); an exception without a handler goes on to the server-error
    middleware (500). Every outer middleware (metrics, request ids, 415, rate limit, body limit,
    CORS) runs as for any route.

    Parameters
    ----------
    app : ASGI app
    routes : sequence of BaseRoute
        The app's routes, read at the first request: the plain routes' paths and endpoints.
    handlers : mapping
        The app's exception handlers (exception class or status code -> handler).
    """

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute], handlers: Mapping[Any, Handler]) -> None:
        self.app = app
        self.routes = routes
        self.handlers = handlers
        self._endpoints: dict[str, Callable[[Request], Any]] | None = None

    def _handler(self, exc: Exception) -> Handler | None:
        if isinstance(exc, HTTPException) and exc.status_code in self.handlers:
            return self.handlers[exc.status_code]
        for cls in type(exc).__mro__:
            if cls in self.handlers:
                return self.handlers[cls]
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._endpoints is None:
            self._endpoints = {
                r.path: r.endpoint
                for r in self.routes
                if type(r) is Route and r.methods == {"POST"} and not r.param_convertors
            }
        endpoint = None
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            endpoint = self._endpoints.get(scope["path"])
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        scope["endpoint"] = endpoint
        scope["path_params"] = {}
        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
        except Exception as exc:
            handler = self._handler(exc)
            if handler is None:
                raise
            response = handler(request, exc)  # the handlers are quick: no thread hop for a sync one
            if inspect.isawaitable(response):
                response = await response
        await response(scope, receive, send)
