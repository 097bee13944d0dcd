"""``POST /predict`` and ``POST /feedback``: the two calls a web app makes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from service.api import metrics
from service.api.auth import require_api_key
from service.api.schemas import ErrorBody, FeedbackRequest, FeedbackResponse, PredictRequest, PredictResponse
from service.runtime import Runtime
from service.store import ClaimStatus

router = APIRouter(dependencies=[Depends(require_api_key)], tags=["decisions"])


def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


@router.post(
    "/predict",
    response_model=PredictResponse,
    responses={404: {"model": ErrorBody}, 422: {"model": ErrorBody}},
    summary="Sample a label for a context",
)
async def predict(body: PredictRequest, runtime: RuntimeDep) -> PredictResponse:
    """Featurise the context, let the model decide, record the decision for its reward window."""
    p = await runtime.predict(body.model, body.features)
    metrics.DECISIONS.labels(p.model).inc()
    d = p.decision
    return PredictResponse(
        decision_id=p.decision_id,
        label=p.label,
        label_index=d.label,
        probability=d.probability,
        probabilities=d.probs.tolist(),
        model=p.model,
        model_version=p.model_version,
    )


@router.post(
    "/feedback",
    response_model=FeedbackResponse,
    responses={
        404: {"model": ErrorBody, "description": "Unknown (or long forgotten) decision id"},
        409: {"model": ErrorBody, "description": "Already answered; the body gives the first outcome"},
        410: {"model": ErrorBody, "description": "Reward window passed; the default reward applies"},
    },
    summary="Report whether the user clicked",
)
async def feedback(
    body: FeedbackRequest,
    runtime: RuntimeDep,
    wait: Annotated[
        bool, Query(description="Return only after this process's model applied the update.")
    ] = False,
) -> FeedbackResponse | JSONResponse:
    """Claim the decision exactly once and append its learn event to the model's log."""
    out, _ = await runtime.feedback(body.decision_id, body.click, wait)
    claim = out.claim
    if out.status is ClaimStatus.ACCEPTED and claim is not None and claim.position is not None:
        metrics.FEEDBACK.labels(claim.outcome).inc()
        return FeedbackResponse(
            decision_id=body.decision_id, click=body.click, model=claim.model, model_version=claim.position
        )
    metrics.FEEDBACK.labels(out.status.value).inc()
    if claim is None:
        return JSONResponse({"detail": f"unknown decision id {body.decision_id!r}"}, status_code=404)
    first = {"outcome": claim.outcome, "model": claim.model, "model_version": claim.position, "at": claim.at}
    if out.status is ClaimStatus.EXPIRED:
        detail = f"decision {body.decision_id!r}: reward window passed; the model's default reward applies"
        return JSONResponse({"detail": detail, "first_outcome": first}, status_code=410)
    detail = f"decision {body.decision_id!r} was already answered ({claim.outcome}); not learned twice"
    return JSONResponse({"detail": detail, "first_outcome": first}, status_code=409)
