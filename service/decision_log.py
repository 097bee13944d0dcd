"""The decision log's record and its two export formats (``GET /models/{name}/log``, ``clickboost export``).

A model with ``log_decisions`` (the default) keeps every decision in its store's decision log, apart
from the event log that checkpoints trim, for ``CLICKBOOST_LOG_RETENTION`` (docs/ARCHITECTURE.md,
"The decision log"). Exported, one decision is one :class:`LogRecord`.

**JSON lines** (``format=jsonl``, the default): one object per line, with exactly these fields::

    {"decision_id": "q2v0yN3mVt0dQ1bB5mM0aQ", "model": "news", "model_version": 41,
     "created_at": 1764079200.125, "features": {"idx": [17, 803], "val": [1.0, 31.0], "dim": 1024},
     "probs": [0.0167, 0.9667, 0.0167], "label_index": 1, "label": "politics",
     "outcome": "click", "reward": 1, "outcome_at": 1764079203.5, "eligible": null,
     "learner_probs": null, "baseline": null, "deferred": false, "activated_at": null}

decision_id : str
    The id ``POST /predict`` answered with.
model : str
    The model's name.
model_version : int
    The model's event-log position when it decided.
created_at : float
    Unix seconds of the decision.
features : list of float, or {"idx": list of int, "val": list of float, "dim": int}
    The context as the model saw it: a dense model's d numbers; for a hashed model the
    featuriser's packed form (:meth:`service.features.Featuriser.pack`): the non-zero buckets in
    increasing order, their values, and ``dim = 2**hashing_bits``.
probs : list of float
    The distribution over the K labels the label was sampled from.
label_index : int
    The sampled (shown) label, 0-based.
label : str
    Its name.
outcome : "click", "no_click", "reward", "expired", "dropped" or null
    null while pending; "reward": feedback gave a graded reward strictly between 0 and 1;
    "expired": the reward window passed and the model learned its default reward (no click);
    "dropped": it passed with ``default_reward = "drop"``, or it was deferred and never activated
    (nothing learned).
reward : 1, 0, a number in (0, 1), or null
    The reward learned from: 1 click, 0 no click or expired, the graded reward itself; null when
    pending or dropped.
outcome_at : float or null
    Unix seconds of the feedback or the expiry.
eligible : list of int, or null
    The label indices the request allowed (``eligible`` / ``excluded`` of ``POST /predict``),
    increasing; null: every label. ``probs`` is 0 outside them. Records exported before this field
    existed read as null.
learner_probs : list of float, or null
    For a decision served in logging or apprentice mode (safe rollout, :mod:`service.rollout`): the
    learner's own distribution, beside the served ``probs``, so that off-policy evaluation can
    judge the learner on the baseline's traffic; null otherwise (and in records exported before).
baseline : int or null
    Likewise, the index of the request's baseline label.
deferred : bool
    The decision was made with ``defer`` (issue 38): learned only if activated within its window.
    Records exported before this field existed read as false.
activated_at : float or null
    Unix seconds of its activation (``POST /decisions/{id}/activate``); null while not activated and
    for a decision not deferred.
page : object (only in the records of a page's slots)
    A page of several slots (issue 53, :mod:`service.pages`) is one record per slot: its
    ``decision_id`` is the slot's record id (the page's id for slot 0), ``features`` and ``actions``
    the page's context and candidates, ``probs`` the slot's distribution given the earlier slots'
    choices (0 on the candidates they took), ``label`` the slot's item and ``outcome`` / ``reward``
    the slot's own; ``page`` is ``{"id": the page's decision id, "slot": its index, "slot_id",
    "slots": how many the page has, "slot_features": {"idx", "val"}}`` (the slot's hashed features, in
    the slot namespace of :mod:`service.slots`). A single decision's record has no ``page`` key.
catalog : object (only in the records of catalog decisions)
    A decision over the model's catalog (issue 54) keeps the chosen item alone in ``actions``
    (``probs`` its probability among every candidate); ``catalog`` says what rebuilds the others
    from the catalog's history (:mod:`service.catalog_replay`): ``{"version": the catalog's,
    "candidates": how many, "at": the time expiry was judged at, "index": the chosen one's position,
    "sent": actions sent with features, "select": {"ids", "filter", "eligible", "excluded"} as the
    request gave them, or {"unkept": n} beyond ``MEMO_NAMES`` names}``; the fields after ``candidates`` are
    null in records made before they were kept.

Numbers are written as the shortest text that reads back as the same double, so features and
probabilities round-trip bit for bit.

**Vowpal Wabbit's decision-service JSON** (``format=dsjson``), for ``vw --dsjson --cb_explore_adf``:
one line per decision with a reward (pending and dropped decisions are left out)::

    {"_label_cost": -1, "_label_probability": 0.9667, "_label_Action": 2, "_labelIndex": 1,
     "a": [2, 1, 3], "p": [0.9667, 0.0167, 0.0167],
     "c": {"x": {"b17": 1.0, "b803": 31.0},
           "_multi": [{"a": {"id": "0"}}, {"a": {"id": "1"}}, {"a": {"id": "2"}}]},
     "EventId": "q2v0yN3mVt0dQ1bB5mM0aQ", "Timestamp": "2025-11-25T14:00:00.125000Z"}

VW minimises a cost, so ``_label_cost`` is ``-reward`` (click -1, otherwise 0);
``_label_probability`` is the shown label's probability, ``_label_Action`` its 1-based action id
and ``_labelIndex`` its index in ``_multi``; ``a`` lists the action ids, the shown one first, and
``p`` their probabilities in that order. The context is namespace ``x``: for a hashed model the
feature names are gone after hashing, so its features are the buckets ``b<index>``; for a dense
one ``f<i>``, non-zeros only. Each action of ``_multi`` has the one feature ``id`` with the label
index as a string, which VW makes a feature of its own per action (``id2``); a number would be one
feature scaled by the index. Interactions such as ``-q xa`` let VW learn per-action weights. A
decision restricted to some labels lists only those in ``_multi`` (action ids are positions there).
An action-feature model's actions (``actions``) carry their own hashed features, namespace ``a``
(``{"a": {"b17": 1.0, ...}}``), so ``vw --cb_explore_adf -q xa`` learns the same kind of context x
action model as the server (:mod:`service.actions`); an action without features gets the feature
``none`` (an example with no feature at all would read as the end of the multi-line example).

**Catalog decisions in dsjson** (issue 54): by default a catalog decision's line carries its chosen
item alone (``_multi`` of one action), as its record does. With ``candidates=all``
(:class:`DsjsonWriter` given the rebuild, ``GET /models/{name}/log?format=dsjson&candidates=all``,
``clickboost export --candidates all``) it carries every candidate the decision was over, rebuilt
from the catalog's history, in the decision's order: ``_labelIndex`` is the chosen one's position,
``a`` and ``p`` hold it alone with its probability (the other candidates' logged probabilities were
never kept; VW learns from the chosen action's cost and probability). Why not the default: a line
over a 10,000-item catalog is megabytes, and a rebuild at a version the export has not met yet
builds that catalog (``bench catalog-history``) on the server's event loop; a record whose
candidates cannot be rebuilt keeps its chosen item.

**Pages in dsjson** (issue 53): one line per page whose every slot has a reward, in Vowpal Wabbit's
conditional contextual bandit form (``vw --ccb_explore_adf --dsjson``), written when the page's last
slot record is read (:class:`DsjsonWriter`)::

    {"Version": "1", "EventId": "q2v0yN3mVt0dQ1bB5mM0aQ", "Timestamp": "2025-11-25T14:00:00.125000Z",
     "c": {"x": {"b17": 1.0}, "_multi": [{"a": {"b5": 1.0}}, {"a": {"b9": 1.0}}, {"a": {"b2": 1.0}}],
           "_slots": [{"_id": "hero", "s": {"b40": 1.0}}, {"_id": "tile", "s": {"b77": 1.0}}]},
     "_outcomes": [{"_id": "hero", "_label_cost": -1, "_a": [2, 0, 1], "_p": [0.5, 0.25, 0.25]},
                   {"_id": "tile", "_label_cost": 0, "_a": [0, 1], "_p": [0.9, 0.1]}]}

``_multi`` holds the candidates (namespace ``a``), ``_slots`` each slot's id and hashed features
(namespace ``s``), and ``_outcomes`` per slot the cost ``-reward``, the candidates it could show (0-based
positions in ``_multi``, its item first) and their probabilities given the earlier slots' items: VW's
CCB learns each slot as a ``cb_adf`` example with the slot's features added to the shared ones, as
the server's reduction does (:mod:`service.learners.ccb_adf`). A page with a slot pending or dropped
is left out, as single decisions without a reward are.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any, TypeVar

import numpy as np

from service.actions import ActionInput, unpack_actions
from service.config import ModelSpec
from service.slots import unpack_page
from service.store import LoggedDecision, Store
from service.store.base import LogOutcome, split_slot_id

T = TypeVar("T")
U = TypeVar("U")
#: A catalog decision's candidates for its dsjson line: each one's hashed entries (buckets,
#: values), in the decision's order, and the shown item's position (:mod:`service.catalog_replay`).
Candidates = tuple[list[tuple[list[int], list[float]]], int]

__all__ = ["FORMATS", "DsjsonWriter", "LogRecord", "pages", "sliced"]

#: Export formats: ``jsonl`` (:meth:`LogRecord.to_json`) and ``dsjson`` (:meth:`LogRecord.to_dsjson`).
FORMATS = ("jsonl", "dsjson")
#: Records per page read from the store (a page of dense d=784 contexts is about 1 MB of JSON). The
#: store reads one page of a log at a time and pauses between two, so the page size bounds how much
#: of the event loop exports take together, however many run (at 256, records that decode fast held
#: predicts behind four exports: p99 5 -> 8 ms; at 64, once the compact codec decoded them faster
#: still, one export moved a predict's p99 from 2.5 to 7-9.5 ms here, at 32 to 4-6 ms).
PAGE = 32  #: The longest a page of records is converted or encoded before the event loop gets a turn.
SLICE_SECONDS = 0.001


async def sliced(items: Iterable[T], fn: Callable[[T], U]) -> AsyncIterator[list[U]]:
    """``fn`` of every item, in lists of what :data:`SLICE_SECONDS` of work gives, pausing that long
    between two, so that requests go on while a log is converted or encoded (a page of wide dense
    records is milliseconds of JSON). The lists may be empty."""
    out: list[U] = []
    deadline = time.perf_counter() + SLICE_SECONDS
    for item in items:
        out.append(fn(item))
        if time.perf_counter() >= deadline:
            yield out
            out = []
            await asyncio.sleep(SLICE_SECONDS)
            deadline = time.perf_counter() + SLICE_SECONDS
    yield out


def _line(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), allow_nan=False)


def _reward(reward: bool | float | None) -> int | float | None:
    """The record's ``reward``: 1 / 0 for a click bit, the number itself for a graded reward."""
    return int(reward) if isinstance(reward, bool) else reward


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One logged decision, as exported; the fields are those of the module docstring."""

    decision_id: str
    model: str
    model_version: int
    created_at: float
    features: list[float] | dict[str, Any]
    probs: list[float]
    label_index: int
    label: str
    outcome: LogOutcome | None
    reward: int | float | None
    outcome_at: float | None
    eligible: list[int] | None = None
    learner_probs: list[float] | None = None
    baseline: int | None = None
    deferred: bool = False
    activated_at: float | None = None
    actions: list[dict[str, Any]] | None = None
    page: dict[str, Any] | None = None
    catalog: dict[str, Any] | None = None

    @classmethod
    def from_logged(cls, entry: LoggedDecision, model: str, spec: ModelSpec) -> LogRecord:
        """The record of a store's log entry of ``model`` (configured by ``spec``)."""
        x = entry.x
        actions: list[dict[str, Any]] | None = None
        page: dict[str, Any] | None = None
        label = ""
        features: list[float] | dict[str, Any]
        if spec.actions == "features":  # the context, the candidates and their ids (service.actions)
            packed: ActionInput
            if entry.slot is not None:  # a page's slot: the page, and which slot (service.pages)
                whole = unpack_page(x, spec.hashing_bits)  # type: ignore[arg-type]
                packed, v = whole.actions, whole.slots[entry.slot]
                page = {
                    "id": split_slot_id(entry.decision_id)[0],
                    "slot": entry.slot,
                    "slot_id": whole.ids[entry.slot],
                    "slots": whole.n_slots,
                    "slot_features": {"idx": v.idx.tolist(), "val": v.val.tolist()},
                }
            else:
                packed = unpack_actions(x, spec.hashing_bits)  # type: ignore[arg-type]
            c = packed.context
            features = {"idx": c.idx.tolist(), "val": c.val.tolist(), "dim": spec.dim}
            actions = []
            for a, action_id in enumerate(packed.ids):
                v = packed.features(a)
                actions.append({"id": action_id, "idx": v.idx.tolist(), "val": v.val.tolist()})
            label = packed.ids[entry.label]
        elif spec.hashing_bits is not None:  # the packed (2, nnz) rows of bucket indices and values
            features = {"idx": [int(i) for i in x[0]], "val": x[1].tolist(), "dim": spec.dim}
        else:
            features = x.tolist()
        return cls(
            entry.decision_id,
            model,
            entry.model_version,
            entry.created_at,
            features,
            entry.probs.tolist(),
            entry.label,
            label if actions is not None else spec.label_names[entry.label],
            entry.outcome,
            _reward(entry.reward),
            entry.outcome_at,
            None if entry.eligible is None else np.flatnonzero(entry.eligible).tolist(),
            None if entry.learner_probs is None else entry.learner_probs.tolist(),
            entry.baseline,
            entry.deferred,
            entry.activated_at,
            actions,
            page,
            entry.catalog,
        )

    def to_json(self) -> str:
        """The JSON line (without its newline); ``page`` only in a page slot's record, ``catalog``
        only in a catalog decision's."""
        doc = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in ("page", "catalog"):  # other decisions' lines are what they were before them
            if doc[key] is None:
                del doc[key]
        return _line(doc)

    @classmethod
    def from_json(cls, line: str | bytes) -> LogRecord:
        """Inverse of :meth:`to_json`; ValueError if ``line`` is not a record."""
        doc = json.loads(line)
        names = [f.name for f in fields(cls)]
        if isinstance(doc, dict):
            doc.setdefault("eligible", None)  # exported before eligible labels existed
            doc.setdefault("learner_probs", None)  # exported before safe rollout
            doc.setdefault("baseline", None)
            doc.setdefault("deferred", False)  # ... before deferred decisions existed
            doc.setdefault("activated_at", None)
            doc.setdefault("actions", None)  # ... before action-feature models existed
            doc.setdefault("page", None)  # a single decision's (and before pages existed)
            doc.setdefault("catalog", None)  # not a catalog decision's (and before issue 54 item 5)
        if not isinstance(doc, dict) or sorted(doc) != sorted(names):
            raise ValueError(f"not a decision-log record (fields {names}): {str(line)[:200]}")
        return cls(**doc)

    def _action(self, k: int) -> dict[str, Any]:
        """Action ``k``'s entry of ``_multi``: its label index (label models) or its own hashed
        features (action-feature models)."""
        if self.actions is None:
            return {"a": {"id": str(k)}}
        a = self.actions[k]
        return {"a": _bucket_features(a["idx"], a["val"]) or {"none": 1}}

    def to_dsjson(self, candidates: Candidates | None = None) -> str | None:
        """The Vowpal Wabbit decision-service line; None without a reward (pending, dropped). A page
        slot's record has no line of its own (:class:`DsjsonWriter` writes its page's).
        ``candidates``: a catalog decision's every candidate, rebuilt (module docstring)."""
        if self.reward is None or self.page is not None:
            return None
        actions = list(range(len(self.probs))) if self.eligible is None else self.eligible
        chosen = actions.index(self.label_index)  # positions in _multi
        order = [chosen, *(k for k in range(len(actions)) if k != chosen)]
        multi = [self._action(k) for k in actions]
        if candidates is not None:  # only the shown item's probability is known (module docstring)
            entries, chosen = candidates
            multi = [{"a": _bucket_features(idx, val) or {"none": 1}} for idx, val in entries]
            order, actions = [chosen], [0] * len(entries)
        if isinstance(self.features, dict):
            context = _bucket_features(self.features["idx"], self.features["val"])
        else:
            context = {f"f{i}": v for i, v in enumerate(self.features) if v != 0.0}
        stamp = datetime.fromtimestamp(self.created_at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return _line(
            {
                "_label_cost": -self.reward if self.reward else 0,
                "_label_probability": self.probs[self.label_index],
                "_label_Action": chosen + 1,
                "_labelIndex": chosen,
                "a": [k + 1 for k in order],
                "p": [self.probs[actions[k]] for k in order],
                "c": {"x": context, "_multi": multi},
                "EventId": self.decision_id,
                "Timestamp": stamp,
            }
        )


def _bucket_features(idx: list[int], val: list[float]) -> dict[str, float]:
    return {f"b{i}": v for i, v in zip(idx, val, strict=True)}


class DsjsonWriter:
    """The dsjson export's lines, record by record in log order: a single decision's at once
    (:meth:`LogRecord.to_dsjson`), a page's when its last slot record comes (module docstring).

    A page's slot records are written together and so come together; the writer holds those of the
    pages not complete yet (a page whose other slots fall outside the export's range, or were
    forgotten by the retention, is never written).
    """

    def __init__(self, candidates: Callable[[LogRecord], Candidates | None] | None = None) -> None:
        self._open: dict[str, dict[int, LogRecord]] = {}
        self.candidates = candidates

    def line(self, record: LogRecord) -> str | None:
        """The line ``record`` completes, if any; a catalog decision's with every candidate when
        the writer has ``candidates`` (None for a record they cannot be rebuilt for: its chosen
        item alone, as without)."""
        if record.page is None:
            rebuilt = None
            if self.candidates is not None and record.catalog is not None and record.reward is not None:
                rebuilt = self.candidates(record)
            return record.to_dsjson(rebuilt)
        slots = self._open.setdefault(record.page["id"], {})
        slots[record.page["slot"]] = record
        if len(slots) < record.page["slots"]:
            return None
        del self._open[record.page["id"]]
        return _page_line([slots[s] for s in range(len(slots))])


def _page_line(slots: list[LogRecord]) -> str | None:
    """The CCB line of a page's slot records (in slot order); None unless every slot has a reward."""
    if any(r.reward is None for r in slots):
        return None
    first = slots[0]
    assert first.page is not None and first.actions is not None and isinstance(first.features, dict)
    outcomes, described = [], []
    for r in slots:
        assert r.page is not None
        shown = [k for k, p in enumerate(r.probs) if p > 0.0 and k != r.label_index]
        order = [r.label_index, *shown]
        outcomes.append(
            {
                "_id": r.page["slot_id"],
                "_label_cost": -r.reward if r.reward else 0,
                "_a": order,
                "_p": [r.probs[k] for k in order],
            }
        )
        f = r.page["slot_features"]
        described.append(
            {"_id": r.page["slot_id"], **({"s": _bucket_features(f["idx"], f["val"])} if f["idx"] else {})}
        )
    stamp = datetime.fromtimestamp(first.created_at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return _line(
        {
            "Version": "1",
            "EventId": first.page["id"],
            "Timestamp": stamp,
            "c": {
                "x": _bucket_features(first.features["idx"], first.features["val"]),
                "_multi": [first._action(k) for k in range(len(first.actions))],
                "_slots": described,
            },
            "_outcomes": outcomes,
        }
    )


async def pages(
    store: Store,
    model: str,
    spec: ModelSpec,
    since: float = -math.inf,
    until: float = math.inf,
    limit: int = PAGE,
) -> AsyncIterator[list[LogRecord]]:
    """The records of ``model`` created in ``[since, until)``, in order, a page of at most ``limit``
    read from the store at a time (the first page may be empty)."""
    after = None
    while True:
        entries, after = await store.read_decision_log(model, since, until, after, limit)
        async for records in sliced(entries, lambda e: LogRecord.from_logged(e, model, spec)):
            yield records
        if after is None:
            return
