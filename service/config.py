"""Settings (environment, prefix ``CLICKBOOST_``) and model specifications; both fail fast.

Settings are read once at start-up by :func:`load_settings`; a bad value stops the server with one
line naming the variable. A model is declared by a :class:`ModelSpec`, through ``PUT /models/{name}``
or in the TOML file given by ``--config`` / ``CLICKBOOST_CONFIG_FILE``::

    [models.news]
    learner = "banditron"
    params = { gamma = 0.05 }
    hashing_bits = 12
    labels = ["sports", "politics", "music"]
    reward_window_seconds = 600
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.features import DEFAULT_HASHING_BITS, MAX_HASHING_BITS
from service.placement import Placement

__all__ = [
    "ConfigError",
    "ModelSpec",
    "Retention",
    "Settings",
    "load_model_file",
    "load_settings",
    "parse_duration",
    "parse_retention",
]

ModelName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
GroupName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]


class ConfigError(ValueError):
    """Settings or a model file are invalid; the message names every problem."""


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([smhdw])")


def parse_duration(text: str) -> float | None:
    """Seconds of a duration such as ``90s``, ``15m``, ``36h``, ``7d``, ``2w``, ``1.5d``; None if
    ``text`` is not one."""
    match = _DURATION.fullmatch(text.strip())
    return float(match[1]) * _UNITS[match[2]] if match else None


@dataclass(frozen=True, slots=True)
class Retention:
    """How long the decision log keeps a decision: at most ``max_age`` seconds and ``max_count``
    decisions per model (None: no such limit)."""

    max_age: float | None
    max_count: int | None


RETENTION_SYNTAX = (
    "an age (a number and s, m, h, d or w: 36h, 7d), a count (a whole number: 100000) or both, "
    "comma-separated: 7d,1000000"
)


def parse_retention(text: str) -> Retention:
    """``CLICKBOOST_LOG_RETENTION``: ``"7d"``, ``"100000"`` or ``"7d,100000"`` (either order); a
    decision is kept while it is within both limits. ValueError naming the syntax otherwise."""
    limits: dict[str, float | int] = {}
    for part in (p.strip() for p in text.split(",")):
        seconds = parse_duration(part)
        if seconds is not None:
            kind, value = "age", seconds
        elif part.isascii() and part.isdigit():
            kind, value = "count", int(part)
        else:
            raise ValueError(f"{text!r}: {part!r} is neither an age nor a count; give {RETENTION_SYNTAX}")
        if not 0 < value < math.inf:
            raise ValueError(f"{text!r}: the {kind} {part!r} must be positive")
        if kind in limits:
            raise ValueError(f"{text!r}: two {kind}s; give {RETENTION_SYNTAX}")
        limits[kind] = value
    return Retention(limits.get("age"), limits.get("count"))  # type: ignore[arg-type]


def _errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        parts.append(f"{loc}: {err['msg']}" if loc else err["msg"])
    return "; ".join(parts)


class Settings(BaseSettings):
    """Server settings, from ``CLICKBOOST_*`` environment variables (``REDIS_URL`` unprefixed).

    Attributes
    ----------
    redis_url : str or None
        Shared store for several replicas; unset = the embedded memory store (one process).
    api_keys : str
        ``CLICKBOOST_API_KEY``: comma-separated keys accepted in ``X-API-Key`` for /predict and
        /feedback (several, so a key can be rotated without downtime).
    admin_key : str or None
        Key for /models (and accepted everywhere).
    decision_id_seed : int or None
        INSECURE, tests and replays only: decision ids from ``DecisionIds.for_seed(seed)``, so
        anyone who knows the seed can predict them. Unset in production (128 random bits per id).
    """

    model_config = SettingsConfigDict(env_prefix="CLICKBOOST_", extra="ignore", frozen=True)

    redis_url: str | None = Field(None, validation_alias=AliasChoices("REDIS_URL", "CLICKBOOST_REDIS_URL"))
    # One name for server and clients: the SDK sends the first key of CLICKBOOST_API_KEY. The plural
    # CLICKBOOST_API_KEYS, this setting's old name, is still read.
    api_keys: str = Field(
        "", validation_alias=AliasChoices("api_keys", "CLICKBOOST_API_KEY", "CLICKBOOST_API_KEYS")
    )
    admin_key: str | None = None
    config_file: Path | None = None
    demo: bool = False
    default_model: str | None = None
    decision_id_seed: int | None = Field(None, ge=0)
    max_body_bytes: int = Field(1_000_000, ge=1024)
    # Browser origins allowed to call the API (comma list, "*" for any); none by default.
    cors_origins: str = ""
    # Requests per second per API key (per client address without one), per replica; unset: no limit.
    rate_limit: float | None = Field(None, gt=0)
    # Log lines: "text" or "json" (one object per line), each with the request's X-Request-ID.
    log_format: Literal["text", "json"] = "text"
    max_named_features: int = Field(1000, ge=1)
    # Candidates per request of an action-feature model (issue 39); Personalizer allows 50.
    max_actions: int = Field(100, ge=1, le=10_000)
    # Answered ids are remembered this long (409 for duplicates, then 404); memory grows with rate x TTL.
    claim_ttl_seconds: float = Field(3600.0, gt=0)
    sweep_interval_seconds: float = Field(1.0, gt=0)
    tail_interval_seconds: float = Field(0.05, gt=0)
    # After a round of the tail that brought a few events, a replica on a shared store waits this long
    # before its next read, unless catching up: longer pauses share a read's fixed cost among more
    # events (less follower CPU per event under load) and make the replica staler by up to as much
    # (`bench redis-cost` and `bench staleness` measure both). 0.02: `bench staleness` probes land at
    # the start of a pause, and at 0.05 its p99 under load was above the 100 ms target.
    follow_pause_seconds: float = Field(0.02, ge=0, le=10)
    checkpoint_every: int = Field(1000, ge=1)
    checkpoint_interval_seconds: float = Field(60.0, gt=0)
    # The embedded store (no REDIS_URL): "sqlite" keeps everything in DATA_DIR/clickboost.sqlite3
    # across restarts; "memory" (tests, `serve --memory`) keeps nothing.
    store: Literal["sqlite", "memory"] = "sqlite"
    data_dir: Path = Path("data")
    # fsync of the SQLite store: "full" syncs every feedback's commit (survives power loss),
    # "normal" survives a killed process but may lose the last commits on power loss.
    sqlite_synchronous: Literal["full", "normal"] = "full"
    # Memory budgets checked before a model is allocated (422 at creation when over). 512 MiB: a
    # hashed linear model at the largest b = 22 with K = 10 holds 320 MiB of float64 weights.
    max_model_bytes: int = Field(512 * 2**20, ge=1024)
    max_total_model_bytes: int = Field(2 * 2**30, ge=1024)
    # Budget of one event's work on the event loop, checked at creation (422 when over): every
    # replica applies every event where requests wait (issue 42). Steps of Learner.event_steps, one
    # or two nanoseconds each on a loaded 2-core machine (20 M: 20-40 ms); bytes of
    # Learner.event_nbytes.
    max_event_steps: int = Field(20_000_000, ge=1)
    max_event_bytes: int = Field(64 * 2**20, ge=1024)
    # Connections (service.api.connections): the most held at once (None: the descriptor limit less
    # 128), the seconds a request has to send its headers, then its whole body (30: a body at its
    # largest, CLICKBOOST_MAX_BODY_BYTES = 1 MB, needs 33 kB/s).
    max_connections: int | None = Field(None, ge=1)
    header_timeout_seconds: float = Field(10.0, gt=0)
    body_timeout_seconds: float = Field(30.0, gt=0)
    # The decision log's retention per model (parse_retention): an age, a count or both. A week, and
    # 100,000 decisions so that the Redis store's memory stays bounded (a few hundred bytes each for
    # hashed contexts, 8 d bytes for dense ones).
    log_retention: str = "7d,100000"
    # Model placement (service.placement, docs/SCALING.md): this replica's group, every group's
    # addresses as clients reach them (JSON, the same on every replica: {"a": ["http://10.0.0.1:8000"],
    # "b": [...]}) and how many groups hold each model (unset: every group, i.e. no placement).
    replica_group: GroupName | None = None
    replica_groups: dict[GroupName, list[Annotated[str, Field(min_length=1)]]] = Field(default_factory=dict)
    placement_copies: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _check_placement(self) -> Settings:
        if not self.replica_groups:
            if self.replica_group is not None or self.placement_copies is not None:
                raise ValueError(
                    "CLICKBOOST_REPLICA_GROUP and CLICKBOOST_PLACEMENT_COPIES need CLICKBOOST_REPLICA_GROUPS "
                    '(every group\'s addresses, JSON: {"a": ["http://host:port"], ...})'
                )
            return self
        if self.redis_url is None:
            raise ValueError("CLICKBOOST_REPLICA_GROUPS: replica groups share their models through REDIS_URL")
        if self.replica_group not in self.replica_groups:
            raise ValueError(
                f"CLICKBOOST_REPLICA_GROUP must be one of CLICKBOOST_REPLICA_GROUPS' groups "
                f"({', '.join(sorted(self.replica_groups))}), got {self.replica_group!r}"
            )
        if empty := sorted(g for g, urls in self.replica_groups.items() if not urls):
            raise ValueError(f"CLICKBOOST_REPLICA_GROUPS: group {empty[0]!r} has no address")
        if self.placement_copies is not None and self.placement_copies > len(self.replica_groups):
            raise ValueError(
                f"CLICKBOOST_PLACEMENT_COPIES is {self.placement_copies}, more than the "
                f"{len(self.replica_groups)} groups of CLICKBOOST_REPLICA_GROUPS"
            )
        return self

    @property
    def placement(self) -> Placement | None:
        """The replica groups and this replica's, or None when placement is not configured."""
        if not self.replica_groups or self.replica_group is None:
            return None
        copies = self.placement_copies or len(self.replica_groups)
        return Placement(self.replica_group, self.replica_groups, copies)

    @field_validator("log_retention")
    @classmethod
    def _check_retention(cls, value: str) -> str:
        parse_retention(value)
        return value

    @property
    def retention(self) -> Retention:
        """:attr:`log_retention`, parsed."""
        return parse_retention(self.log_retention)

    @property
    def cors_origin_list(self) -> list[str]:
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]

    @property
    def api_key_set(self) -> frozenset[str]:
        return frozenset(k.strip() for k in self.api_keys.split(",") if k.strip())

    @property
    def has_keys(self) -> bool:
        return bool(self.api_key_set) and bool(self.admin_key)


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment (and ``overrides``); :class:`ConfigError` with every problem."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            f"CLICKBOOST_{'.'.join(str(p) for p in e['loc']).upper()}: {e['msg']}" if e["loc"] else e["msg"]
            for e in exc.errors()
        )
        raise ConfigError(f"bad settings: {problems}") from None


#: The served default learner (issue 50): SquareCB over Vowpal Wabbit's normalised, adaptive,
#: importance-invariant SGD regression with hashed pairs (VW's ``--squarecb -q ::``, ours as a label
#: learner) at its defaults. Its updates are normalised per feature (Ross, Mineiro & Langford 2013),
#: so a feature's unit (a price, a count, a timestamp's scale) does not change what it learns; it
#: learns a graded reward as a value, and its inverse-gap-weighted probabilities are the ones it
#: draws from. Chosen on the tuning sets only (car, dna, nursery, digits) and on rescaled copies of
#: them: ``python -m service bench default-learner`` and ``bench invariance`` (docs/BENCHMARKS.md).
#: Until issue 50 it was C-OVA with the floor 0.02, which a single raw number stopped from learning.
DEFAULT_LEARNER: tuple[str, dict[str, Any]] = ("squarecb-sgd", {})
#: The default learner of an action-feature model (``"actions": "features"``, issues 39 and 50):
#: SquareCB over VW's regressor (``squarecb-adf``, VW's ``--cb_explore_adf --squarecb``) at its
#: defaults (``gamma_scale`` 300). Normalised updates: a feature's unit (a price in dollars or cents)
#: does not change what it learns; graded rewards are learned as values. Chosen on the tuning catalog
#: streams only (click and graded rewards, prices, dayparts): mean reward 53.4 % against 48.6 % for
#: ``cova-adf``, which learned 30 % where prices came in dollars (``python -m service bench actions``,
#: docs/BENCHMARKS.md, "Tuning streams"). Until issue 50 it was ``cova-adf``.
DEFAULT_ACTION_LEARNER: tuple[str, dict[str, Any]] = ("squarecb-adf", {})


class ModelSpec(BaseModel):
    """How to build a model: the body of ``PUT /models/{name}``.

    Without ``learner`` the model gets :data:`DEFAULT_LEARNER` (``params`` given then set that
    learner's parameters); the stored spec names the learner and every parameter, so a later
    release's default never changes a model that exists.

    Exactly one of ``n_features`` (dense list input) and ``hashing_bits`` (named features hashed
    into ``2**hashing_bits`` buckets, see :mod:`service.features`); ``labels`` names the labels
    (their number is K), otherwise ``n_labels`` gives K and the labels are "0".."K-1".

    ``actions = "features"`` (issue 39, :mod:`service.actions`): no fixed labels; each request
    brings its candidate actions with their features, hashed with the context into ``2**hashing_bits``
    columns (``hashing_bits`` required; no ``n_features``, ``labels`` or ``n_labels``), and the
    learner must be an action-feature one (default :data:`DEFAULT_ACTION_LEARNER`).
    """

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={
            "examples": [
                {
                    "hashing_bits": 12,
                    "labels": ["sports", "politics", "music"],
                    "seed": 0,
                    "reward_window_seconds": 600,
                    "default_reward": "no_click",
                    "log_decisions": True,
                }
            ]
        },
    )

    actions: Literal["labels", "features"] = Field(
        "labels",
        description="labels: a fixed set of labels (labels / n_labels); features: each POST /predict "
        "brings its candidate actions with their features (`actions`), scored from context x action "
        "interactions (needs hashing_bits and an action-feature learner).",
    )
    learner: str = Field(
        DEFAULT_LEARNER[0],
        description="A bandit learner's registered name (GET /models lists them). Left out: "
        f"`{DEFAULT_LEARNER[0]}` at its defaults for labels, `{DEFAULT_ACTION_LEARNER[0]}` for action "
        "features (README: choosing a learner); the model is stored with the learner it got.",
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="The learner's hyperparameters; those left out take the learner's defaults, and the "
        "model is stored with every one of them (GET shows them), so a later release's defaults never "
        "change a model that exists.",
    )
    n_features: int | None = Field(None, ge=1, le=1_000_000, description="Dimension of dense inputs.")
    hashing_bits: int | None = Field(
        None,
        ge=1,
        le=MAX_HASHING_BITS,
        description=f"Named features -> 2**b buckets (e.g. {DEFAULT_HASHING_BITS}).",
    )
    labels: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        None, min_length=2, max_length=10_000
    )
    n_labels: int | None = Field(None, ge=2, le=10_000)
    seed: int = Field(0, ge=0, le=2**63 - 1, description="Seed of the learner's own generator.")
    reward_window_seconds: float = Field(3600.0, gt=0, le=30 * 86_400)
    default_reward: Literal["no_click", "drop"] = Field(
        "no_click", description="What an unanswered decision teaches when its window passes."
    )
    log_decisions: bool = Field(
        True,
        description="Keep every decision and its outcome in the model's decision log "
        "(GET /models/{name}/log; CLICKBOOST_LOG_RETENTION).",
    )

    # Safe rollout (issue 38 part 5; service.rollout, docs/ARCHITECTURE.md "Safe rollout")
    rollout: Literal["online", "logging", "apprentice"] = Field(
        "online",
        description="online: serve and learn the learner's decisions; logging: serve each request's "
        "`baseline`, learn nothing, log the learner's would-be distribution; apprentice: serve the "
        "baseline with probability 1 - apprentice_epsilon and the learner's draw otherwise, and learn "
        "from every decision. Changed later by POST /models/{name}/rollout or an automatic promotion.",
    )
    # 0.2: the learner's evidence grows as epsilon (its IPS terms reach 1 / epsilon) while the
    # reward given up is at most epsilon times the learner's shortfall: `bench rollout` prints the
    # trade-off on car (decisions until promotion against the reward while in apprentice mode).
    apprentice_epsilon: float = Field(
        0.2, gt=0.0, lt=1.0, description="The learner's share of the traffic in apprentice mode."
    )
    # Manual by default: what users see changes only when an operator asks, unless they opt in.
    promote: Literal["manual", "auto"] = Field(
        "manual",
        description="auto: switch to online once the lower confidence bound of (learner - baseline) "
        "is above 0 over at least promote_min_decisions decisions of apprentice mode.",
    )
    # 1000: the intervals are valid at any n, but a learner should be judged on more than its first
    # minutes of traffic (a drift in the day's mix, say); about a minute at 20 decisions a second.
    promote_min_decisions: int = Field(1000, ge=1, le=10**12)
    promote_confidence: float = Field(
        0.95, ge=0.5, lt=1.0, description="Level of the rollout intervals (anytime-valid; service.rollout)."
    )

    @model_validator(mode="before")
    @classmethod
    def _default_learner(cls, data: Any) -> Any:
        """No learner: the default one, with its parameters under those given."""
        if isinstance(data, dict) and data.get("learner") is None:
            default = DEFAULT_ACTION_LEARNER if data.get("actions") == "features" else DEFAULT_LEARNER
            params = data.get("params") or {}
            if isinstance(params, dict):  # else the field's validation says what is wrong
                params = {**default[1], **params}
            data = {**data, "learner": default[0], "params": params}
        return data

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.actions == "features":
            if self.hashing_bits is None or self.n_features is not None:
                raise ValueError(
                    'actions "features" hashes named features: give hashing_bits, not n_features'
                )
            if self.labels is not None or self.n_labels is not None:
                raise ValueError(
                    'actions "features": the candidates come with each request; give no labels, n_labels'
                )
            return self
        if (self.n_features is None) == (self.hashing_bits is None):
            raise ValueError("give exactly one of n_features (dense lists) and hashing_bits (named features)")
        if self.labels is None and self.n_labels is None:
            raise ValueError("give labels or n_labels")
        if self.labels is not None:
            if len(set(self.labels)) != len(self.labels):
                raise ValueError("labels must be distinct")
            if self.n_labels is not None and self.n_labels != len(self.labels):
                raise ValueError(f"n_labels is {self.n_labels} but {len(self.labels)} labels are named")
        return self

    @property
    def k(self) -> int:
        if self.actions == "features":  # one scorer of every candidate's row
            return 1
        return len(self.labels) if self.labels is not None else int(self.n_labels or 0)

    @property
    def label_names(self) -> list[str]:
        if self.actions == "features":  # named by each request's candidates
            return []
        return list(self.labels) if self.labels is not None else [str(i) for i in range(self.k)]

    @property
    def dim(self) -> int:
        return self.n_features if self.n_features is not None else 1 << int(self.hashing_bits or 0)


def load_model_file(path: Path) -> dict[str, ModelSpec]:
    """The ``[models.NAME]`` tables of a TOML file; :class:`ConfigError` naming the bad entries."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    models = data.get("models", {})
    if set(data) - {"models"} or not isinstance(models, dict):
        raise ConfigError(f"{path}: expected only [models.NAME] tables")
    out: dict[str, ModelSpec] = {}
    problems = []
    for name, spec in models.items():
        try:
            out[_model_name(name)] = ModelSpec.model_validate(spec)
        except (ValidationError, ValueError) as exc:
            msg = _errors(exc) if isinstance(exc, ValidationError) else str(exc)
            problems.append(f"models.{name}: {msg}")
    if problems:
        raise ConfigError(f"{path}: " + "; ".join(problems))
    return out


class _Name(BaseModel):
    name: ModelName


def _model_name(name: str) -> str:
    try:
        return _Name(name=name).name
    except ValidationError:
        raise ValueError(f"invalid model name {name!r} (letters, digits, _ . -; at most 64)") from None
