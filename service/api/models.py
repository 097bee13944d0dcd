"""``/models``: create, inspect, delete, reset, export and import models, export decision logs, run
off-policy evaluations (admin key)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Depends, HTTPException, Path, Query, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from service.api.auth import require_admin
from service.api.errors import RETRY_AFTER_SECONDS
from service.api.predict import RuntimeDep
from service.api.schemas import (
    CatalogInfo,
    ModelCounts,
    ModelElsewhere,
    ModelInfo,
    ModelList,
    PlacementInfo,
    PlacementRequest,
    RolloutInfo,
    RolloutRequest,
    StateImported,
    error_responses,
)
from service.catalog_replay import dsjson_candidates
from service.config import ModelName, ModelSpec
from service.decision_log import DsjsonWriter, LogRecord, sliced
from service.evaluations import MAX_POLICIES, Job, TooManyJobsError, check_policies
from service.learners.base import learners
from service.ope import MIN_ESS, EvaluationError
from service.runtime import ModelRuntime, Runtime
from service.store.base import Counts

router = APIRouter(
    prefix="/models",
    dependencies=[Depends(require_admin)],
    tags=["models"],
    responses=error_responses(401, 403),
)
# The name in the path is validated (422) on every route that takes one; every one reads the store
# first (read-your-writes across replicas), so 503 when it is down.
NAMED = error_responses(404, 421, 422, 503)

NamePath = Annotated[ModelName, Path(description="Model name: letters, digits, _ . - (at most 64).")]


def model_counts(c: Counts) -> ModelCounts:
    """The API's view of a model's counts in the store (``GET /models/{name}`` and its stats)."""
    return ModelCounts(
        decisions=c.decisions,
        clicks=c.clicks,
        no_clicks=c.no_clicks,
        expired=c.expired,
        pending=c.pending,
        ctr=c.ctr,
        graded=c.graded,
        reward_sum=c.reward_sum,
        mean_reward=c.mean_reward,
        deferred=c.deferred,
        activated=c.activated,
        dropped_unactivated=c.dropped_unactivated,
    )


async def _info(runtime: Runtime, m: ModelRuntime) -> ModelInfo:
    counts = model_counts(await runtime.store.counts(m.name))
    config = m.config()
    return ModelInfo(
        name=m.name,
        config=config,
        version=m.position,
        checksum=m.checksum(),
        counts=counts,
        state_bytes=m.learner.nbytes(),
        failure=m.failure,
        rollout=_rollout(m),
        catalog=_catalog(m),
    )


def _catalog(m: ModelRuntime) -> CatalogInfo | None:
    c, digest = m.catalog, m.catalog_checksum()
    if c is None or digest is None:
        return None
    return CatalogInfo(items=len(c), version=c.version, bytes=c.nbytes(), checksum=digest)


def _rollout(m: ModelRuntime) -> RolloutInfo | None:
    """The model's rollout state; None for a model online from the start (nothing to report)."""
    r, spec = m.rollout, m.spec
    if not r.persistent:
        return None
    return RolloutInfo(
        mode=r.mode,
        epsilon=spec.apprentice_epsilon,
        promote=spec.promote,
        min_decisions=spec.promote_min_decisions,
        confidence=spec.promote_confidence,
        epoch=r.epoch,
        changed=r.changed,
        estimates=r.report() if r.n else None,
    )


@router.get(
    "",
    response_model=ModelList,
    responses=error_responses(503),
    summary="List models and the bandit learners available",
)
async def list_models(runtime: RuntimeDep) -> ModelList:
    await runtime.sync_models()
    infos = [await _info(runtime, m) for _, m in sorted(runtime.models.items())]
    bandit = [name for name, cls in learners.items() if not cls.full_information]
    elsewhere = [ModelElsewhere(name=name, groups=groups) for name, groups in runtime.elsewhere().items()]
    return ModelList(models=infos, learners=bandit, elsewhere=elsewhere)


@router.put(
    "/{name}",
    response_model=ModelInfo,
    status_code=201,
    responses=error_responses(400, 409, 413, 421, 422, 503),  # created where it is held
    summary="Create a model",
)
async def create_model(name: NamePath, spec: ModelSpec, runtime: RuntimeDep) -> ModelInfo:
    """Create ``name`` from ``spec``; full-information learners are refused (422), a taken name is 409."""
    return await _info(runtime, await runtime.create_model(name, spec))


@router.get("/{name}", response_model=ModelInfo, responses=NAMED)
async def get_model(name: NamePath, runtime: RuntimeDep) -> ModelInfo:
    """Config, version (log position), checksum of the state, counts and running CTR."""
    return await _info(runtime, await runtime.resolve(name, fresh=True))


@router.delete("/{name}", status_code=204, responses=error_responses(404, 422, 503))  # any replica
async def delete_model(name: NamePath, runtime: RuntimeDep) -> Response:
    await runtime.delete_model(name)
    return Response(status_code=204)


@router.post("/{name}/reset", response_model=ModelInfo, responses=NAMED)
async def reset_model(name: NamePath, runtime: RuntimeDep) -> ModelInfo:
    """Forget everything learned (through the event log; counts are kept)."""
    return await _info(runtime, await runtime.reset_model(name))


@router.post(
    "/{name}/rollout",
    response_model=ModelInfo,
    responses=error_responses(400, 404, 413, 421, 422, 503),
    summary="Switch the model's rollout mode",
)
async def set_rollout(name: NamePath, body: RolloutRequest, runtime: RuntimeDep) -> ModelInfo:
    """Switch the model's rollout mode through its log: every replica switches at the same version,
    and the evidence starts over (service.rollout). Answered once this replica applied it."""
    return await _info(runtime, await runtime.set_rollout(name, body.mode))


@router.get(
    "/{name}/placement",
    response_model=PlacementInfo,
    responses=error_responses(404, 409, 422, 503),
    summary="Where the model is held",
)
async def get_placement(name: NamePath, runtime: RuntimeDep) -> PlacementInfo:
    """The replica groups the model is placed on, with their addresses, and those joining it during
    a move; any replica answers (409 where placement is not configured)."""
    return await _placement(runtime, name)


@router.post(
    "/{name}/placement",
    response_model=PlacementInfo,
    responses=error_responses(400, 404, 409, 413, 422, 503),
    summary="Move the model to other replica groups",
)
async def move_model(name: NamePath, body: PlacementRequest, runtime: RuntimeDep) -> PlacementInfo:
    """Place the model on ``groups`` without losing an event: the groups joining load its checkpoint
    and follow its log; once they report it caught up the placement switches, and the groups left
    drop it. Answered after the switch; 409 (placement unchanged) at once when a joining group has no
    live replica, or when it does not catch up within 30 s. Any replica takes it."""
    await runtime.move_model(name, body.groups)
    return await _placement(runtime, name)


async def _placement(runtime: Runtime, name: str) -> PlacementInfo:
    groups, joining = await runtime.placement_of(name)
    placement = runtime.placement
    assert placement is not None  # placement_of raised otherwise
    return PlacementInfo(
        model=name,
        groups={g: list(placement.groups[g]) for g in groups},
        joining=joining,
        replica_group=placement.group,
    )


@router.get(
    "/{name}/state",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}}, **NAMED},
)
async def export_state(name: NamePath, runtime: RuntimeDep) -> Response:
    """The learned state in the canonical pickle-free encoding of ``service.serial``."""
    m = await runtime.resolve(name, fresh=True)
    headers = {"X-Model-Version": str(m.position), "X-Checksum": m.checksum()}
    return Response(m.state_bytes(), media_type="application/octet-stream", headers=headers)


@router.put(
    "/{name}/state",
    response_model=StateImported,
    responses=error_responses(400, 404, 413, 421, 422, 503),
)
async def import_state(
    name: NamePath,
    data: Annotated[bytes, Body(media_type="application/octet-stream", description="An exported state.")],
    runtime: RuntimeDep,
) -> StateImported:
    """Replace the learned state by an exported one, validated first (never unpickled)."""
    m = await runtime.import_state(name, data)
    return StateImported(name=m.name, version=m.position, checksum=m.checksum())


# A time bound of the log export: Unix seconds or an ISO 8601 date-time (UTC unless it says).
TimeBound = Annotated[float, Field(allow_inf_nan=False)] | datetime
LOG_MEDIA = "application/x-ndjson"


def _seconds(t: TimeBound | None, default: float) -> float:
    if t is None:
        return default
    if isinstance(t, datetime):
        return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()
    return t


@router.get(
    "/{name}/log",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "One JSON object per line (service.decision_log): the decision-log records, or "
            "with format=dsjson Vowpal Wabbit's decision-service lines of the decisions with a reward",
            "content": {LOG_MEDIA: {"schema": {"type": "string"}}},
        },
        **NAMED,
    },
    summary="Export the decision log",
)
async def export_log(
    name: NamePath,
    runtime: RuntimeDep,
    since: Annotated[
        TimeBound | None,
        Query(
            description="Decisions made at or after this time: Unix seconds, or ISO 8601 (UTC if no offset)."
        ),
    ] = None,
    until: Annotated[
        TimeBound | None,
        Query(description="Decisions made before this time: Unix seconds, or ISO 8601 (UTC if no offset)."),
    ] = None,
    fmt: Annotated[
        Literal["jsonl", "dsjson"],
        Query(alias="format", description="jsonl: every record; dsjson: Vowpal Wabbit's --dsjson lines."),
    ] = "jsonl",
    candidates: Annotated[
        Literal["chosen", "all"],
        Query(
            description="dsjson: a catalog decision's line carries the chosen item (chosen) or every "
            "candidate, rebuilt from the catalog's history (all: a line per decision of up to megabytes "
            "for a catalog of 10,000 items; one that cannot be rebuilt keeps the chosen item)."
        ),
    ] = "chosen",
) -> StreamingResponse:
    """Stream the model's retained decisions in creation order, read from the store a page at a time.

    The first page is read before the answer starts, so an unknown model is 404 and a store that is
    down 503; a failure later ends the stream early.
    """
    pages = await runtime.decision_log(name, _seconds(since, -math.inf), _seconds(until, math.inf))
    first = await anext(pages)
    rebuilt = None
    if fmt == "dsjson" and candidates == "all":  # each line's candidates from the catalog (issue 54)
        m = await runtime.resolve(name)
        rebuilt = None if m.catalog is None else dsjson_candidates(m.catalog)
    encode = LogRecord.to_json if fmt == "jsonl" else DsjsonWriter(rebuilt).line  # a page: at its last slot

    async def lines() -> AsyncIterator[str]:
        page: list[LogRecord] | None = first
        while page is not None:
            async for chunk in sliced(page, encode):
                text = "".join(f"{line}\n" for line in chunk if line is not None)
                if text:
                    yield text
            page = await anext(pages, None)

    return StreamingResponse(lines(), media_type=LOG_MEDIA)


class EvaluationRequest(BaseModel):
    """``POST /models/{name}/evaluations``: policies to estimate on the model's decision log."""

    model_config = ConfigDict(extra="forbid", strict=True)  # no bool -> 0.0, no "5" -> 5

    policies: list[str] = Field(
        min_length=1,
        max_length=MAX_POLICIES,
        description="uniform, first (the first allowed label or candidate), baseline (the caller's "
        "baseline logged with each decision), constant:LABEL_INDEX (label models), model:NAME (a model's "
        "current state, frozen), or LEARNER[:param=value,...] (a learner: replayed)",
        examples=[["uniform", "cova", "banditboost:delta=0.05"]],
    )
    since: float | None = Field(
        None, allow_inf_nan=False, description="Decisions made at or after this time (Unix seconds)."
    )
    until: float | None = Field(
        None, allow_inf_nan=False, description="Decisions made before this time (Unix seconds)."
    )
    runs: int = Field(
        5, ge=2, le=50, description="Replays per learning policy (their spread gives its interval)."
    )


class PolicyEstimate(BaseModel):
    """One policy's click rate by one estimator (service.ope.Estimate)."""

    value: float = Field(
        description="Estimated click rate: the estimator's own value "
        "(IPS on a few heavy weights can exceed 1)."
    )
    low: float = Field(description="95 % interval, lower end, within [0, 1].")
    high: float = Field(description="95 % interval, upper end, within [0, 1].")
    n: int = Field(
        description="Events it rests on: logged decisions, or a replay's accepted ones (mean over runs)."
    )
    ess: float = Field(
        description="Effective sample size: (Σw)²/Σw² of the importance weights (IPS, SNIPS, DR), "
        "or the events a replay matched (mean over runs)."
    )
    warning: str | None = Field(
        description=f"Set when `ess` is below {MIN_ESS}: too few logged events support the estimate "
        "for it to tell; null otherwise."
    )
    runs: int | None = Field(None, description="Replay: replays run.")
    spread: float | None = Field(
        None, description="Replay: standard deviation of the click rate between runs."
    )
    acceptance: float | None = Field(None, description="Replay: share of the logged events accepted.")
    catalog: float | None = Field(
        None, description="Catalog decisions weighed, their candidates rebuilt from the catalog (issue 54)."
    )
    catalog_skipped: float | None = Field(
        None,
        description="Catalog decisions left out: their history forgotten (past the decision log's "
        "retention) or otherwise not rebuilt; a replay leaves every catalog decision out.",
    )


class Evaluation(BaseModel):
    """An evaluation job and, once done, its estimates (policy -> estimator -> estimate)."""

    id: str
    model: str
    policies: list[str]
    since: float | None
    until: float | None
    runs: int
    replica: str = Field(description="The replica running it: jobs live in the process that started them.")
    state: Literal["queued", "running", "done", "failed"] = Field(
        description="Jobs of a replica run one at a time, in the order they came."
    )
    created_at: float
    finished_at: float | None
    events: int = Field(description="Logged decisions with a reward the estimates rest on.")
    results: dict[str, dict[str, PolicyEstimate]] | None
    error: str | None


@router.post(
    "/{name}/evaluations",
    status_code=202,
    response_model=Evaluation,
    responses=error_responses(400, 404, 413, 421, 422, 429, 503),
    summary="Start an off-policy evaluation on the decision log",
)
async def start_evaluation(name: NamePath, body: EvaluationRequest, runtime: RuntimeDep) -> Evaluation:
    """Estimate, from the model's retained decision log in ``[since, until)``, the click rate each
    policy would have had (service.ope: IPS, SNIPS and doubly robust for fixed policies, replay for
    learners). Runs in a separate worker process, after the replica's earlier jobs; poll
    ``GET .../evaluations/{id}``. 429 when the replica has ``MAX_JOBS`` queued or running."""
    m = await runtime.resolve(name, fresh=True)
    try:
        check_policies(body.policies, m.learner.n_features, m.learner.n_labels, m.learner.actions)
    except EvaluationError as exc:
        raise RequestValidationError(
            [{"type": "value_error", "loc": ("body", "policies"), "msg": str(exc)}]
        ) from None
    snapshots: dict[str, tuple[dict[str, object], bytes]] = {}
    for text in body.policies:
        if text.startswith("model:"):  # a model's current state, frozen now: same input and labels
            other = await runtime.resolve(text.partition(":")[2] or name, fresh=True)
            if (other.spec.n_features, other.spec.hashing_bits, other.learner.n_labels) != (
                m.spec.n_features,
                m.spec.hashing_bits,
                m.learner.n_labels,
            ):
                raise RequestValidationError(
                    [
                        {
                            "type": "value_error",
                            "loc": ("body", "policies"),
                            "msg": f"policy {text!r}: model "
                            f"{other.name!r} takes other inputs or labels than {m.name!r}",
                        }
                    ]
                )
            snapshots[other.name] = (other.learner.config(), other.state_bytes())
    since = -math.inf if body.since is None else body.since
    until = math.inf if body.until is None else body.until

    async def records() -> AsyncIterator[list[LogRecord]]:
        pages = await runtime.decision_log(m.name, since, until)
        async for page in pages:
            yield page

    def catalog() -> bytes | None:  # the model's catalog once the log is read (service.catalog_ope)
        return None if m.catalog is None or m.catalog.version == 0 else m.catalog.to_bytes()

    try:
        job = runtime.evaluations.start(
            m.name, body.policies, body.since, body.until, body.runs, records, snapshots, catalog
        )
    except TooManyJobsError as exc:
        raise HTTPException(429, str(exc), headers={"Retry-After": str(RETRY_AFTER_SECONDS)}) from None
    return Evaluation(**job.as_dict())


@router.get(
    "/{name}/evaluations/{job}",
    response_model=Evaluation,
    responses=error_responses(404, 422),  # jobs live in this process: no store read
    summary="An off-policy evaluation's state and results",
)
async def get_evaluation(
    name: NamePath, job: Annotated[str, Path(max_length=64)], runtime: RuntimeDep
) -> Evaluation:
    """The job ``job`` of model ``name`` on this replica (404 if this replica has none such)."""
    return Evaluation(**_job(runtime, name, job).as_dict())


@router.delete(
    "/{name}/evaluations/{job}",
    status_code=204,
    responses=error_responses(404, 422),
    summary="Cancel and forget an off-policy evaluation",
)
async def cancel_evaluation(
    name: NamePath, job: Annotated[str, Path(max_length=64)], runtime: RuntimeDep
) -> Response:
    """Stop the job ``job`` of model ``name`` on this replica if it is queued or running (its
    worker process is stopped), and forget it."""
    runtime.evaluations.cancel(_job(runtime, name, job).id)
    return Response(status_code=204)


def _job(runtime: Runtime, name: str, job: str) -> Job:
    found = runtime.evaluations.jobs.get(job)
    if found is None or found.model != name:
        raise HTTPException(
            404, f"no evaluation {job!r} of model {name!r} on this replica ({runtime.replica_id})"
        )
    return found
