"""Typed answers of the service (API contract of issue 3) as frozen dataclasses.

Plain dataclasses instead of pydantic keep the SDK's only dependency httpx. Each ``from_json``
checks the fields the contract promises and raises :class:`~clickboost_client.errors.ProtocolError` naming the
first missing or mistyped one; fields the server adds beyond the contract are kept in ``raw``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from clickboost_client.errors import ProtocolError

T = TypeVar("T")


def _get(body: Any, key: str, kind: type[T] | tuple[type, ...], what: str) -> Any:
    if not isinstance(body, dict) or key not in body:
        raise ProtocolError(f"{what} answer lacks {key!r}: {body!r:.200}")
    value = body[key]
    # bool is an int in Python: never accept it where a number is expected.
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        raise ProtocolError(f"{what} answer has {key}={value!r}, expected {kind}")
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


_NUM = (int, float)


@dataclass(frozen=True)
class Prediction:
    """Answer of ``POST /predict``: one sampled label, its probability and the decision id.

    ``server`` is the base URL of the replica that answered (set by the SDK; the SDK sends the
    decision's feedback there first).
    """

    decision_id: str
    label: str
    label_index: int
    probability: float
    probabilities: tuple[float, ...]
    model: str
    model_version: int
    server: str = field(default="", compare=False)
    #: Every eligible label, most probable first: ``(label, label_index, probability)``; for a
    #: catalog decision the top ``k``.
    ranking: tuple[tuple[str, int, float], ...] = field(default=(), compare=False)
    #: A catalog decision's (issue 54; its ``probabilities`` are empty): how many candidates, and the
    #: catalog version it saw; None for other decisions.
    candidates: int | None = field(default=None, compare=False)
    catalog_version: int | None = field(default=None, compare=False)

    @classmethod
    def from_json(cls, body: Any) -> Prediction:
        catalog = isinstance(body, dict) and "candidates" in body and "probabilities" not in body
        probs = [] if catalog else _get(body, "probabilities", list, "predict")
        if not all(isinstance(p, _NUM) and not isinstance(p, bool) for p in probs):
            raise ProtocolError(f"predict answer has non-numeric probabilities: {probs!r:.200}")
        ranking = _ranking(body.get("ranking", []) if isinstance(body, dict) else [], "predict")
        return cls(
            decision_id=_get(body, "decision_id", str, "predict"),
            label=_get(body, "label", str, "predict"),
            label_index=_get(body, "label_index", int, "predict"),
            probability=float(_get(body, "probability", _NUM, "predict")),
            probabilities=tuple(float(p) for p in probs),
            model=_get(body, "model", str, "predict"),
            model_version=_get(body, "model_version", int, "predict"),
            ranking=ranking,
            candidates=_get(body, "candidates", int, "predict") if catalog else None,
            catalog_version=_get(body, "catalog_version", int, "predict") if catalog else None,
        )


def _ranking(ranked: Any, what: str) -> tuple[tuple[str, int, float], ...]:
    """A ``ranking`` of an answer as ``(label, label_index, probability)`` triples."""
    try:
        return tuple((str(r["label"]), int(r["label_index"]), float(r["probability"])) for r in ranked)
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"{what} answer has a malformed ranking: {ranked!r:.200}") from exc


@dataclass(frozen=True)
class SlotChoice:
    """One slot of a :class:`Page`: the action shown there and its probability given the earlier
    slots' actions."""

    id: str
    label: str
    label_index: int
    probability: float
    #: The actions this slot could show (eligible there, not taken by an earlier slot), most probable
    #: first: ``(label, label_index, probability)``.
    ranking: tuple[tuple[str, int, float], ...] = field(default=(), compare=False)
    #: A page over catalog candidates' slot (issue 54; its ``ranking`` is the top ``k``): how many
    #: candidates the slot was decided over; None for a page of sent actions.
    candidates: int | None = field(default=None, compare=False)

    @classmethod
    def from_json(cls, body: Any) -> SlotChoice:
        catalog = isinstance(body, dict) and "candidates" in body
        return cls(
            id=_get(body, "id", str, "page slot"),
            label=_get(body, "label", str, "page slot"),
            label_index=_get(body, "label_index", int, "page slot"),
            probability=float(_get(body, "probability", _NUM, "page slot")),
            ranking=_ranking(body.get("ranking", []), "page slot"),
            candidates=_get(body, "candidates", int, "page slot") if catalog else None,
        )


@dataclass(frozen=True)
class Page:
    """Answer of ``POST /predict`` with ``slots`` (issue 53): one decision id for the page and each
    slot's action (or catalog item), in the request's order (no action in two slots). Post each
    slot's reward with ``feedback(decision_id, ..., slot=...)``. ``server`` as for
    :class:`Prediction`."""

    decision_id: str
    model: str
    model_version: int
    slots: tuple[SlotChoice, ...]
    server: str = field(default="", compare=False)
    #: A page over catalog candidates' (issue 54): the catalog version it saw; None otherwise.
    catalog_version: int | None = field(default=None, compare=False)

    @classmethod
    def from_json(cls, body: Any) -> Page:
        catalog = isinstance(body, dict) and "catalog_version" in body
        return cls(
            decision_id=_get(body, "decision_id", str, "predict"),
            model=_get(body, "model", str, "predict"),
            model_version=_get(body, "model_version", int, "predict"),
            slots=tuple(SlotChoice.from_json(s) for s in _get(body, "slots", list, "predict")),
            catalog_version=_get(body, "catalog_version", int, "predict") if catalog else None,
        )

    @property
    def labels(self) -> tuple[str, ...]:
        """The action shown in each slot, in page order."""
        return tuple(s.label for s in self.slots)


@dataclass(frozen=True)
class FeedbackResult:
    """Answer of ``POST /feedback``: the event is durably recorded (and applied, with ``wait``).

    ``click`` is the bit given (None when a graded ``reward`` was given); ``reward`` what is learned
    (1 click, 0 no click, or the graded reward). ``held``: the decision is deferred and not activated
    yet, so the feedback waits for :meth:`Client.activate` (``model_version`` None until then).
    ``slot``: the page's slot it was for, as given (None: a decision without slots).
    """

    decision_id: str
    click: bool | None
    model: str
    model_version: int | None
    reward: float | None = None
    held: bool = False
    slot: int | str | None = None

    @classmethod
    def from_json(cls, body: Any) -> FeedbackResult:
        reward = body.get("reward") if isinstance(body, dict) else None
        if reward is not None and (not isinstance(reward, _NUM) or isinstance(reward, bool)):
            raise ProtocolError(f"feedback answer has reward={reward!r}, expected a number")
        return cls(
            decision_id=_get(body, "decision_id", str, "feedback"),
            click=_get(body, "click", (bool, type(None)), "feedback"),
            model=_get(body, "model", str, "feedback"),
            model_version=_get(body, "model_version", (int, type(None)), "feedback"),
            reward=None if reward is None else float(reward),
            held=bool(body.get("held", False)),
            slot=body.get("slot"),
        )


@dataclass(frozen=True)
class ActivateResult:
    """Answer of ``POST /decisions/{decision_id}/activate``.

    ``status``: ``activated`` (now), ``already_active`` (before) or ``not_deferred`` (the decision
    was not deferred: nothing to do). ``learned``: the decision's outcome if it has one (the held
    feedback learned now, or what came before), as the server's ``FirstOutcome``. ``slots``: for a
    page, each slot's ``{"slot", "status", "learned"}`` (every slot activated by the one call; the
    page's ``status`` is ``activated`` when a slot was activated now); None for a decision.
    """

    decision_id: str
    status: str
    learned: dict[str, Any] | None = None
    slots: tuple[dict[str, Any], ...] | None = None

    @classmethod
    def from_json(cls, body: Any) -> ActivateResult:
        learned = body.get("learned") if isinstance(body, dict) else None
        if learned is not None and not isinstance(learned, dict):
            raise ProtocolError(f"activate answer has learned={learned!r}, expected an object or null")
        return cls(
            decision_id=_get(body, "decision_id", str, "activate"),
            status=_get(body, "status", str, "activate"),
            learned=learned,
            slots=tuple(_get(body, "slots", list, "activate")) if "slots" in body else None,
        )


@dataclass(frozen=True)
class ModelCounts:
    """Decision counters of a model; ``ctr`` = clicks / (clicks + no_clicks), None before any answer.

    ``deferred``, ``activated``, ``dropped_unactivated``: decisions made with ``defer``, those
    activated in their window, those dropped at expiry without an activation (0 from older servers).
    """

    decisions: int
    clicks: int
    no_clicks: int
    expired: int
    pending: int
    ctr: float | None
    deferred: int = 0
    activated: int = 0
    dropped_unactivated: int = 0

    @classmethod
    def from_json(cls, body: Any) -> ModelCounts:
        ctr = body.get("ctr") if isinstance(body, dict) else None
        if ctr is not None and (not isinstance(ctr, _NUM) or isinstance(ctr, bool)):
            raise ProtocolError(f"model counts have ctr={ctr!r}, expected a number or null")
        return cls(
            *(
                _get(body, k, int, "model counts")
                for k in ("decisions", "clicks", "no_clicks", "expired", "pending")
            ),
            ctr=None if ctr is None else float(ctr),
            **{k: _get(body, k, int, "model counts") for k in _DEFER_COUNTS if k in body},
        )


_DEFER_COUNTS = ("deferred", "activated", "dropped_unactivated")


@dataclass(frozen=True)
class ModelInfo:
    """A model as ``GET /models/{name}`` describes it: configuration, version (event-log position),
    checksum (sha256 of the canonical serialised state) and counters.

    The answers of ``PUT /models/{name}/state`` carry only name, version and checksum: there
    ``config`` is empty and ``counts`` None. ``raw`` is the whole body as sent.
    """

    name: str
    version: int
    checksum: str
    config: dict[str, Any] = field(default_factory=dict)
    counts: ModelCounts | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Any) -> ModelInfo:
        name = _get(body, "name", str, "model")
        return cls(
            name=name,
            version=_get(body, "version", int, "model"),
            checksum=_get(body, "checksum", str, "model"),
            config=_get(body, "config", dict, "model") if "config" in body else {},
            counts=ModelCounts.from_json(body["counts"]) if "counts" in body else None,
            raw=dict(body),
        )
