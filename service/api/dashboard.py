"""The dashboard (issue 23): ``GET /dashboard``, a page showing what every model is doing, and the JSON
it polls, ``GET /models/{name}/stats`` and ``GET /replicas`` (admin key).

The page (``static/dashboard/``: HTML, one script, one style sheet) holds no data and loads nothing
from elsewhere (its Content-Security-Policy allows this origin only), so it is served without a key,
as are its files; every number on it comes from the two admin routes here and ``GET /models``,
asked with the key that the page's form keeps in the browser's session storage.

Where the numbers come from: counts from the store's counters (the same as ``GET /models``); the
per-minute history and the cumulative click rate over it from the store's activity alone
(:meth:`service.store.Store.read_activity`; the counters run up to a second ahead of it), which
every replica adds to, so every replica shows the same history; version, apply lag, checkpoint,
memory and evaluation jobs from the replica that answers (``replica`` in the answer); replicas from
their heartbeats (:meth:`service.store.Store.replicas`).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from fastapi.responses import RedirectResponse
from pydantic import BaseModel, Field
from starlette.staticfiles import StaticFiles

from service.api.auth import require_admin
from service.api.models import Evaluation, NamePath, model_counts
from service.api.predict import RuntimeDep
from service.api.schemas import ModelCounts, error_responses
from service.runtime import HEARTBEAT_SECONDS, HEARTBEAT_TTL_SECONDS
from service.store import ACTIVITY_MINUTES, Activity, Store

STATIC = Path(__file__).parent / "static" / "dashboard"
#: Where the page's script and style sheet are served (no key: they hold no data).
STATIC_PATH = "/dashboard/static"
#: The decisions per second shown are those of the last few minutes (the current one included).
RATE_MINUTES = 5
#: Evaluation jobs shown per model, newest first.
EVALUATIONS_SHOWN = 3
#: A page model's reward per slot is over the slot decisions of its decision log made in the last
#: SLOT_MINUTES minutes, at most SLOT_ENTRIES of them read (the oldest of the window first).
SLOT_MINUTES = 15
SLOT_ENTRIES = 2048
#: A replica whose last heartbeat is older than this many heartbeat intervals is shown as stale.
STALE_BEATS = 3
# The page may load and ask for nothing but this origin's files and JSON (and no frame may embed it).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

page = APIRouter(include_in_schema=False)
stats = APIRouter(
    prefix="/models",
    dependencies=[Depends(require_admin)],
    tags=["dashboard"],
    responses=error_responses(401, 403),
)
replicas = APIRouter(
    dependencies=[Depends(require_admin)], tags=["dashboard"], responses=error_responses(401, 403)
)


def static_files() -> StaticFiles:
    """The page's script and style sheet, from the package (mounted at :data:`STATIC_PATH`)."""
    return StaticFiles(directory=STATIC)


@page.get("/")
async def root() -> RedirectResponse:
    # Relative, so that the page is found behind a proxy that serves the API under a prefix.
    return RedirectResponse("dashboard", status_code=307)


@page.get("/dashboard")
async def dashboard() -> Response:
    """The page: no data in it (see the module docstring)."""
    html = (STATIC / "index.html").read_bytes()
    return Response(html, media_type="text/html", headers={"Content-Security-Policy": CSP})


# -- GET /models/{name}/stats ------------------------------------------------------------------------


class MinuteStats(BaseModel):
    """One minute of a model's activity, summed over every replica."""

    start: float = Field(description="Unix seconds at which the minute starts.")
    decisions: int
    clicks: int
    no_clicks: int
    expired: int
    ctr: float | None = Field(
        description="clicks / (clicks + no_clicks) of the minute; null without answers."
    )
    mean_reward: float | None = Field(
        description="(clicks + graded rewards) / (clicks + no_clicks + graded feedbacks) of the minute; "
        "null without answers."
    )
    graded: int = Field(description="Feedbacks of the minute with a graded reward strictly between 0 and 1.")
    cumulative_ctr: float | None = Field(
        description="Clicks / answered decisions of the minutes held up to the end of this one: since the "
        "model was created, or over the last 24 h for an older model; null before the first answer."
    )
    exploration: float | None = Field(
        description="Mean over the minute's decisions of 1 - max(probabilities): the share of traffic "
        "shown something other than the model's top label; null without decisions."
    )


class ApplyStats(BaseModel):
    """How far this replica's model is behind the model's event log."""

    log_position: int = Field(description="Position of the last event in the log (the store's).")
    lag_events: int = Field(description="Events in the log this replica has not applied yet.")
    lag_seconds: float = Field(description="Age of the last applied event when it was applied.")


class CheckpointStats(BaseModel):
    """The last checkpoint round this replica ran (the lease holder stores the checkpoint)."""

    position: int = Field(description="Log position of the last checkpoint (0: none yet).")
    events_since: int = Field(description="Events applied since; a starting replica replays these.")
    seconds_since: float = Field(
        description="Seconds since that round (or since this replica loaded the model)."
    )


class MemoryStats(BaseModel):
    state_bytes: int = Field(description="Bytes of learned state held now.")
    budget_bytes: int = Field(description="Bytes counted against the process's budget for this model.")
    max_model_bytes: int = Field(description="The per-model budget (CLICKBOOST_MAX_MODEL_BYTES).")
    dropped: int = Field(
        description="(Update, feature) pairs the learner's bounded memory turned away so far: "
        "BanditBoost's lazy store for hashed input counts the features it could not keep once full "
        "(raise its max_store_bytes); 0 for the other learners."
    )


class SlotStats(BaseModel):
    """One slot (by its index in the page) of a page model's recent decisions (issue 53)."""

    slot: int = Field(description="The slot's 0-based index in its page.")
    decisions: int = Field(description="Slot decisions read (pending ones included).")
    answered: int = Field(description="Of them, those with a feedback (click, no click or a graded reward).")
    expired: int = Field(description="Of them, those given the default reward after the reward window.")
    mean_reward: float | None = Field(
        description="(clicks + graded rewards) / answered; null without answers."
    )


class ModelStats(BaseModel):
    """Body of ``GET /models/{name}/stats``: what the dashboard shows of one model."""

    name: str
    config: dict[str, Any] = Field(description="The model's configuration: learner, params, ...")
    replica: str = Field(
        description="The replica that answered: version, lag, checkpoint, memory and evaluations are its own."
    )
    version: int = Field(description="Log position this replica has applied.")
    counts: ModelCounts = Field(
        description="All-time counts, shared by every replica (as GET /models/{name})."
    )
    decisions_per_second: float = Field(
        description=f"Decisions per second over the last {RATE_MINUTES} minutes (or since the model was "
        "created)."
    )
    exploration: float | None = Field(
        description="Mean of 1 - max(probabilities) over the decisions of the minutes held (at most the "
        "last 24 h): the traffic spent exploring; null without decisions."
    )
    ctr_ceiling: float | None = Field(
        description="1 - exploration: the click rate this exploration allows when the top label is the "
        "one right answer (the exploration floor of the error, as a ceiling on the click rate)."
    )
    minutes: list[MinuteStats] = Field(
        description="Per-minute activity, oldest first, the current minute last."
    )
    apply: ApplyStats
    checkpoint: CheckpointStats
    memory: MemoryStats
    failure: str | None = Field(description="Set while this replica cannot apply the model's next event.")
    evaluations: list[Evaluation] = Field(
        description=f"The model's latest off-policy evaluation jobs on this replica (at most "
        f"{EVALUATIONS_SHOWN}, newest first)."
    )
    slots: list[SlotStats] | None = Field(
        None,
        description=f"A model with candidate actions that keeps a decision log: the reward per slot of "
        f"its pages (issue 53), over the slot decisions logged in the last {SLOT_MINUTES} minutes (at "
        f"most {SLOT_ENTRIES:,} read, oldest first; every replica shows the same); empty without "
        "pages; null for other models.",
    )


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


async def slot_stats(store: Store, model: str, now: float) -> list[SlotStats]:
    """The reward per slot of ``model``'s pages from its decision log (:data:`SLOT_MINUTES`,
    :data:`SLOT_ENTRIES`): the per-minute activity every replica adds to has no slot, and the log
    has each slot's outcome, the same for every replica."""
    counts: dict[int, list[float]] = {}  # slot -> [decisions, answered, expired, reward sum]
    after: str | None = None
    read = 0
    while read < SLOT_ENTRIES:
        entries, after = await store.read_decision_log(model, now - 60.0 * SLOT_MINUTES, math.inf, after, 256)
        read += len(entries)
        for e in entries:
            if e.slot is None:
                continue
            c = counts.setdefault(e.slot, [0, 0, 0, 0.0])
            c[0] += 1
            if e.outcome == "expired":
                c[2] += 1
            elif e.outcome in ("click", "no_click", "reward") and e.reward is not None:
                c[1] += 1
                c[3] += float(e.reward)
        if after is None:
            break
    return [
        SlotStats(
            slot=s, decisions=int(c[0]), answered=int(c[1]), expired=int(c[2]), mean_reward=_ratio(c[3], c[1])
        )
        for s, c in sorted(counts.items())
    ]


@stats.get(
    "/{name}/stats",
    response_model=ModelStats,
    responses=error_responses(404, 421, 422, 503),
    summary="What a model is doing: counts, rates, per-minute history, lag, checkpoint, memory",
)
async def model_stats(
    name: NamePath,
    runtime: RuntimeDep,
    minutes: Annotated[
        int,
        Query(
            ge=1,
            le=ACTIVITY_MINUTES,
            description="Minutes of per-minute history to return (the current one last).",
        ),
    ] = 60,
) -> ModelStats:
    """The dashboard's view of model ``name`` (see :class:`ModelStats`); per-minute counts lag by up
    to a second (each replica adds its counts to the store about once a second)."""
    m = await runtime.resolve(name, fresh=True)
    store = runtime.store
    now = runtime.clock()
    c = await store.counts(m.name)
    config = await store.get_model(m.name)
    position = await store.log_position(m.name)
    current = math.floor(now / 60)
    held = await store.read_activity(m.name, current - ACTIVITY_MINUTES + 1)

    # Cumulative CTR at the end of each minute, from the history alone: the counters take an answer
    # at once and the history at the replica's next flush, so an answer is nearly always in one and
    # not the other, and their difference (issue 37) was drawn in every minute before the first.
    first = current - minutes + 1
    clicks = sum(a.clicks for t, a in held.items() if t < first)
    answered = sum(a.clicks + a.no_clicks for t, a in held.items() if t < first)
    series = []
    for t in range(first, current + 1):
        a = held.get(t, Activity())
        clicks += a.clicks
        answered += a.clicks + a.no_clicks
        series.append(
            MinuteStats(
                start=60.0 * t,
                decisions=a.decisions,
                clicks=a.clicks,
                no_clicks=a.no_clicks,
                expired=a.expired,
                ctr=_ratio(a.clicks, a.clicks + a.no_clicks),
                mean_reward=_ratio(a.clicks + a.graded_sum, a.clicks + a.no_clicks + a.graded),
                graded=a.graded,
                cumulative_ctr=_ratio(clicks, answered),
                exploration=_ratio(a.exploration, a.decisions),
            )
        )

    since = max(60.0 * (current - RATE_MINUTES + 1), float(config.get("created_at", -math.inf)))
    recent = sum(a.decisions for t, a in held.items() if t > current - RATE_MINUTES)
    exploration = _ratio(sum(a.exploration for a in held.values()), sum(a.decisions for a in held.values()))
    jobs = sorted(
        (j for j in runtime.evaluations.jobs.values() if j.model == m.name), key=lambda j: -j.created_at
    )
    return ModelStats(
        name=m.name,
        config=m.config(),
        replica=runtime.replica_id,
        version=m.position,
        counts=model_counts(c),
        decisions_per_second=recent / max(now - since, 1.0),  # not a spike in a model's first second
        exploration=exploration,
        ctr_ceiling=None if exploration is None else 1.0 - exploration,
        minutes=series,
        apply=ApplyStats(
            log_position=position,
            lag_events=max(position - m.position, 0),
            lag_seconds=m.last_apply_lag,
        ),
        checkpoint=CheckpointStats(
            position=m.checkpoint_position,
            events_since=m.position - m.checkpoint_position,
            seconds_since=time.monotonic() - m.checkpoint_at,
        ),
        memory=MemoryStats(
            state_bytes=m.learner.nbytes(),
            budget_bytes=m.budget_bytes,
            max_model_bytes=runtime.settings.max_model_bytes,
            dropped=m.learner.dropped(),
        ),
        failure=m.failure,
        evaluations=[Evaluation(**j.as_dict()) for j in jobs[:EVALUATIONS_SHOWN]],
        slots=await slot_stats(store, m.name, now)
        if m.spec.actions == "features" and m.spec.log_decisions
        else None,
    )


# -- GET /replicas -----------------------------------------------------------------------------------


class ReplicaModel(BaseModel):
    version: int = Field(description="Log position the replica had applied when it reported.")
    lag: int = Field(description="Events the log held beyond that version when it reported.")


class Replica(BaseModel):
    """A replica, as its last heartbeat described it."""

    id: str
    host: str
    pid: int
    started_at: float = Field(description="Unix seconds, by the replica's clock.")
    seen_seconds_ago: float = Field(description="Age of its last heartbeat, by the store's clock.")
    stale: bool = Field(
        description=f"No heartbeat for {STALE_BEATS} intervals: the process is stuck or gone (it is "
        f"dropped {HEARTBEAT_TTL_SECONDS:g} s after its last heartbeat)."
    )
    models: dict[str, ReplicaModel] = Field(
        description="The models it serves (a model it cannot load is missing)."
    )
    group: str | None = Field(None, description="Its replica group (model placement), null without.")
    placement: str | None = Field(
        None,
        description="Fingerprint of its placement settings (every group's addresses and the copies), "
        "null without placement: every replica of a deployment must report the same.",
    )


class ReplicaList(BaseModel):
    """Body of ``GET /replicas``."""

    answered_by: str = Field(description="The id of the replica that answered.")
    heartbeat_seconds: float = Field(description="How often each replica reports.")
    placement_agrees: bool = Field(
        description="Every listed replica reports the same placement settings. False: some replicas "
        "were given other CLICKBOOST_REPLICA_GROUPS or CLICKBOOST_PLACEMENT_COPIES (or run without "
        "them), so they place models differently; each replica's `placement` says which. Replicas of "
        "an earlier release (a group, no fingerprint) are left out."
    )
    replicas: list[Replica]


@replicas.get(
    "/replicas",
    response_model=ReplicaList,
    responses=error_responses(503),
    summary="The replicas serving the models, from their heartbeats",
)
async def list_replicas(runtime: RuntimeDep) -> ReplicaList:
    """Every replica that reported in the last ``HEARTBEAT_TTL_SECONDS`` (with the embedded stores:
    this process), its applied version of each model and its lag."""
    beats = await runtime.store.replicas()
    return ReplicaList(
        answered_by=runtime.replica_id,
        heartbeat_seconds=HEARTBEAT_SECONDS,
        placement_agrees=len({b.placement for b in beats if b.fingerprinted}) <= 1,
        replicas=[
            Replica(
                id=b.replica,
                host=b.host,
                pid=b.pid,
                started_at=b.started_at,
                seen_seconds_ago=b.age,
                stale=b.age > STALE_BEATS * HEARTBEAT_SECONDS,
                models={
                    name: ReplicaModel(version=v, lag=lag) for name, (v, lag) in sorted(b.models.items())
                },
                group=b.group,
                placement=b.placement,
            )
            for b in beats
        ],
    )
