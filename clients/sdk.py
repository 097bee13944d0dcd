"""Python SDK of the clickboost service: :class:`Client` (blocking) and :class:`AsyncClient` over httpx.

Both speak the API contract of issue 3 and share everything but the I/O loop: a method builds a
:class:`_Call` (what to send, which failures are safe to retry, how to read the answer) and the
client runs it, one :class:`_Tries` per call deciding where each try goes and whether, and when,
another one starts.

Several replicas
----------------
A client takes one base URL or several. Calls go round-robin over the replicas that are up; a
replica whose connection fails (refused, reset, timed out) or whose proxy answers 502/504 is taken
out of rotation at once and the call moves on to the next one without waiting. A background probe
(a thread for :class:`Client`, a task for :class:`AsyncClient`, running only while a replica is out)
asks each one out for ``GET /readyz`` every :data:`PROBE_INTERVAL` seconds and puts it back when it
answers 200. When every replica is out they are tried in turn anyway: the probe may lag, and a
single URL is never skipped. Feedback goes to the replica that answered the decision's predict (when
this client made it), on every try while that replica is in rotation: a decision made while the
shared store was down is held in that replica's memory until the store is back, and replicas without
a shared store know only their own decisions.

Model placement
---------------
Where replicas hold only some models (replica groups, docs/SCALING.md), a replica asked about a model
its group does not hold answers 421 and names the replicas that do in the ``X-Model-Replicas`` header.
The client then re-sends the call once to one of them (nothing was recorded by the 421) and from then
on sends that model's predicts and model calls to those replicas only (round-robin among those up);
a model moved later answers 421 there and is followed again. The addresses named join the client's
replicas for calls that name no model (feedback, activation: any replica accepts them). Only one
421 is followed per call: a second one raises :class:`~clickboost_client.errors.Misdirected`.

Which failures are retried, and why
-----------------------------------
Retries run within :attr:`Retry.budget` seconds (default 60, enough to ride out a 30 s store
outage), with exponentially growing, fully jittered sleeps and ``Retry-After`` as a floor.

* ``feedback`` re-sends the same decision id after any transport failure or a 429/502/503/504: the
  service records feedback exactly once per id, so a retry can at worst meet its own first attempt,
  which answers 409 with the first outcome; when that outcome is the one being sent, the retry
  succeeded and the SDK returns it instead of raising. 404 (unknown id) and 410 (reward window
  passed) are final. ``activate`` is idempotent on the server and retried the same way.
* ``GET``/``PUT`` calls are idempotent and retried the same way.
* ``predict`` is retried freely only when it cannot have been recorded: the connection was never
  made (refused, connect or pool timeout), or the server answered 429 or 503 (nothing recorded).
  When the connection broke after the request was sent (reset, closed without an answer: a replica
  killed mid-request) or a proxy answered 502, the predict may have been recorded; it is re-sent
  once, to another replica when there is one, because the page is waiting for a label. The cost:
  if the first attempt was recorded, its decision gets no feedback and, when its reward window ends,
  the model learns its default reward (``no_click``: one no-click for a label nobody saw; ``drop``:
  nothing). Once only, so that a request that itself crashes replicas cannot take down more than
  two. A read timeout or a 504 is not re-sent: the replica is alive and most likely recording the
  decision, and a second request would add load where there is too much. ``Client.stats`` counts
  the re-sends (``resent_predicts``), i.e. the possible orphan decisions. A predict with a
  client-chosen ``decision_id`` leaves no orphan: the server takes an id once, so a re-send that
  meets its own first attempt is refused (:class:`Conflict`) instead of recorded twice.
* ``DELETE`` and ``reset`` are retried only when they cannot have been processed (connection never
  made, 429, 503).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

import httpx

from clickboost_client.errors import Conflict, ProtocolError, TransportError, error_for
from clickboost_client.models import ActivateResult, FeedbackResult, ModelInfo, Page, Prediction

T = TypeVar("T")

Features = Sequence[float] | Mapping[str, float | str | bool]

#: The header of a 421 answer naming the replicas that hold the model (service.placement).
REPLICAS_HEADER = "x-model-replicas"
#: Seconds between two ``/readyz`` probes of a replica out of rotation.
PROBE_INTERVAL = 1.0
_PROBE_TIMEOUT = 1.0
# Feedback affinity remembers the replica of this many recent decisions (about 20 MB at most).
_OWNERS = 100_000

_SAFE_STATUS = frozenset({429, 502, 503, 504})
_UNSENT_STATUS = frozenset({429, 503})
_PROXY_STATUS = frozenset({502, 504})  # the replica behind a proxy is gone or hung
# Raised before a single byte of the request reached the server.
_UNSENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# The connection broke after the request went out: the server may have processed it.
_DROPPED_ERRORS = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delay-seconds or an HTTP date), None if absent/invalid."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # HTTP dates are GMT
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - time.time())


@dataclass(frozen=True, kw_only=True)
class Retry:
    """Retry policy: tries start within ``budget`` seconds, sleeping with exponential back-off.

    The sleep before retry ``k`` (0-based) is drawn uniformly from ``[0, min(max_backoff, backoff *
    2**k)]`` ("full jitter": many clients failing together spread out instead of retrying in
    lock-step); a ``Retry-After`` from the server is a floor. A failure against a replica that is
    then taken out of rotation moves on to another replica without sleeping.

    Parameters
    ----------
    budget : float
        Seconds from the first try after which no new try starts (a try may then still run for the
        client's ``timeout``). The default, 60, rides out a 30 s outage of the shared store with
        room for its recovery; a caller that cannot wait that long for a predict passes less.
    backoff : float
        Cap of the first sleep, in seconds.
    max_backoff : float
        Cap of every sleep (not of ``Retry-After``), in seconds.
    attempts : int, optional
        At most this many tries; default: as many as the budget allows.
    """

    budget: float = 60.0
    backoff: float = 0.1
    max_backoff: float = 2.0
    attempts: int | None = None

    def __post_init__(self) -> None:
        if self.attempts is not None and self.attempts < 1:
            raise ValueError(f"Retry.attempts must be >= 1, got {self.attempts}")
        if self.budget < 0 or self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("Retry.budget, Retry.backoff and Retry.max_backoff must be >= 0")

    def delay(self, retry: int, retry_after: str | None = None) -> float:
        """Seconds to sleep before retry number ``retry`` (0-based), given the server's ``Retry-After``."""
        own = random.uniform(0.0, min(self.max_backoff, self.backoff * 2 ** min(retry, 32)))
        floor = _retry_after(retry_after)
        return own if floor is None else max(own, floor)


@dataclass(frozen=True)
class ModelState:
    """A model's exported state, opaque to the SDK: sent back verbatim by ``import_state``."""

    content: bytes
    content_type: str


@dataclass(frozen=True)
class _Call(Generic[T]):
    """One API call: the request, its retry class and the reader of the 2xx answer."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    json: Any = None
    content: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, str] = field(default_factory=dict)
    admin: bool = False
    idempotent: bool = True
    # Predict only: re-sent once after the connection broke mid-request (see the module doc).
    resend_once: bool = False
    # Feedback only: the decision whose predict's replica is tried first.
    decision_id: str | None = None
    # Feedback only: a 409 after a retry whose first outcome equals ours is our own first attempt.
    reconcile: Callable[[Conflict], T | None] | None = None
    # Calls about one model (predict: None is the default model) go to the replicas that hold it.
    by_model: bool = False
    model: str | None = None
    # Seconds for this call's request, instead of the client's (a model move waits for replicas).
    timeout: float | None = None
    # Calls whose answer names something that lives in the answering process (an evaluation job):
    # its key, remembered with that replica as a decision's is (later calls name it in decision_id).
    remember: Callable[[Any], str | None] | None = None

    def finish(self, resp: httpx.Response, retried: bool) -> T:
        """The value of a final answer, or the :class:`APIError` it maps to."""
        if resp.is_success:
            return self.read(resp)
        try:
            body: Any = resp.json()
        except ValueError:
            body = resp.text
        err = error_for(resp.status_code, body)
        if retried and self.reconcile is not None and isinstance(err, Conflict):
            value = self.reconcile(err)
            if value is not None:
                return value
        raise err


def _json(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError as exc:
        raise ProtocolError(f"{resp.request.method} {resp.request.url.path}: answer is not JSON") from exc


def _model_info(resp: httpx.Response) -> ModelInfo:
    return ModelInfo.from_json(_json(resp))


def _model_list(resp: httpx.Response) -> list[ModelInfo]:
    body = _json(resp)
    items = body.get("models") if isinstance(body, dict) else body
    if not isinstance(items, list):
        raise ProtocolError(f"GET /models answer is not a list of models: {body!r:.200}")
    return [ModelInfo.from_json(m) for m in items]


def _action(candidate: Mapping[str, Any]) -> dict[str, Any]:
    """One candidate of an action-feature model's predict: ``{"id": str, "features": {...}}``."""
    if "id" not in candidate:
        raise ValueError(f"an action needs an 'id' (and optional 'features'): {candidate!r:.200}")
    return {"id": candidate["id"], "features": dict(candidate.get("features") or {})}


def _slot(slot: Mapping[str, Any]) -> dict[str, Any]:
    """One slot of a page's predict: ``{"id", "features"?, "eligible"? | "excluded"?, "baseline"?}``."""
    if "id" not in slot:
        raise ValueError(f"a slot needs an 'id' (and optional 'features', 'eligible', ...): {slot!r:.200}")
    return {k: list(v) if k in ("eligible", "excluded") else v for k, v in slot.items()}


def _catalog_fields(
    candidates: Sequence[str] | None, where: Mapping[str, Any] | None, k: int | None
) -> dict[str, Any]:
    """The catalog fields of a predict body (issue 54), those given only."""
    out: dict[str, Any] = {}
    if candidates is not None:
        out["candidates"] = list(candidates)
    if where is not None:
        out["filter"] = dict(where)
    if k is not None:
        out["k"] = k
    return out


def _predict_body(
    features: Features,
    model: str | None,
    defer: bool,
    decision_id: str | None,
    actions: Sequence[Mapping[str, Any]] | None,
) -> dict[str, Any]:
    """The fields a predict body and a page's share."""
    if isinstance(features, Mapping):
        feats: Any = dict(features)
    else:
        feats = [float(v) for v in features]  # accepts numpy arrays without importing numpy
    body: dict[str, Any] = {"features": feats}
    if model is not None:
        body["model"] = model
    if actions is not None:
        body["actions"] = [_action(a) for a in actions]
    if defer:
        body["defer"] = True
    if decision_id is not None:
        body["decision_id"] = decision_id
    return body


A = TypeVar("A", Prediction, Page)


def _predict_call(body: dict[str, Any], model: str | None, answer: type[A]) -> _Call[A]:
    """``POST /predict`` of ``body``, its answer read as ``answer``."""
    return _Call(
        "POST",
        "/predict",
        lambda r: answer.from_json(_json(r)),
        json=body,
        idempotent=False,
        resend_once=True,
        by_model=True,
        model=model,
    )


class _Calls:
    """Builds the :class:`_Call` of every API method (shared by both clients)."""

    @staticmethod
    def predict(
        features: Features,
        model: str | None,
        defer: bool = False,
        decision_id: str | None = None,
        eligible: Sequence[str | int] | None = None,
        excluded: Sequence[str | int] | None = None,
        baseline: str | int | None = None,
        actions: Sequence[Mapping[str, Any]] | None = None,
        candidates: Sequence[str] | None = None,
        where: Mapping[str, Any] | None = None,
        k: int | None = None,
    ) -> _Call[Prediction]:
        body = _predict_body(features, model, defer, decision_id, actions)
        for key, labels in (("eligible", eligible), ("excluded", excluded)):
            if labels is not None:
                body[key] = list(labels)
        if baseline is not None:
            body["baseline"] = baseline
        body.update(_catalog_fields(candidates, where, k))
        return _predict_call(body, model, Prediction)

    @staticmethod
    def predict_page(
        features: Features,
        actions: Sequence[Mapping[str, Any]] | None,
        slots: Sequence[Mapping[str, Any]],
        model: str | None,
        defer: bool = False,
        decision_id: str | None = None,
        candidates: Sequence[str] | None = None,
        where: Mapping[str, Any] | None = None,
        k: int | None = None,
    ) -> _Call[Page]:
        body = _predict_body(features, model, defer, decision_id, actions)
        body["slots"] = [_slot(s) for s in slots]
        body.update(_catalog_fields(candidates, where, k))
        return _predict_call(body, model, Page)

    @staticmethod
    def feedback(
        decision_id: str,
        click: bool | None,
        wait: bool,
        reward: float | None = None,
        slot: int | str | None = None,
    ) -> _Call[FeedbackResult]:
        if (click is None) == (reward is None):
            raise ValueError("give click (True/False) or reward (a number in [0, 1]), one of them")
        if reward is not None:  # the server takes 0 and 1 as the click bit
            outcome = "click" if reward == 1 else "no_click" if reward == 0 else "reward"
            body: dict[str, Any] = {"decision_id": decision_id, "reward": float(reward)}
        else:
            outcome = "click" if click else "no_click"
            body = {"decision_id": decision_id, "click": bool(click)}
        if slot is not None:
            body["slot"] = slot

        def reconcile(err: Conflict) -> FeedbackResult | None:
            first = err.first_outcome or {}
            if first.get("outcome") != outcome:
                return None
            learned = float(reward) if reward is not None else float(bool(click))
            doc = {
                **first,
                "decision_id": decision_id,
                "click": body.get("click"),
                "reward": learned,
                "slot": slot,
            }
            try:  # a feedback held for a deferred decision has no version yet
                return FeedbackResult.from_json({**doc, "held": first.get("model_version") is None})
            except ProtocolError:
                return None

        return _Call(
            "POST",
            "/feedback",
            lambda r: FeedbackResult.from_json(_json(r)),
            json=body,
            params={"wait": "true"} if wait else {},
            decision_id=decision_id,
            reconcile=reconcile,
        )

    @staticmethod
    def activate(decision_id: str, wait: bool) -> _Call[ActivateResult]:
        return _Call(
            "POST",
            f"/decisions/{decision_id}/activate",
            lambda r: ActivateResult.from_json(_json(r)),
            params={"wait": "true"} if wait else {},
            decision_id=decision_id,
        )

    @staticmethod
    def health(path: str) -> _Call[dict[str, Any]]:
        return _Call("GET", path, _json)

    @staticmethod
    def metrics() -> _Call[str]:
        return _Call("GET", "/metrics", lambda r: r.text)

    @staticmethod
    def list_models() -> _Call[list[ModelInfo]]:
        return _Call("GET", "/models", _model_list, admin=True)

    @staticmethod
    def get_model(name: str) -> _Call[ModelInfo]:
        return _Call("GET", f"/models/{name}", _model_info, admin=True, by_model=True, model=name)

    @staticmethod
    def create_model(name: str, spec: dict[str, Any]) -> _Call[ModelInfo]:
        body = {k: v for k, v in spec.items() if v is not None}
        return _Call("PUT", f"/models/{name}", _model_info, json=body, admin=True, by_model=True, model=name)

    @staticmethod
    def delete_model(name: str) -> _Call[None]:
        return _Call("DELETE", f"/models/{name}", lambda r: None, admin=True, idempotent=False)

    @staticmethod
    def reset_model(name: str) -> _Call[ModelInfo]:
        return _Call(
            "POST",
            f"/models/{name}/reset",
            _model_info,
            admin=True,
            idempotent=False,
            by_model=True,
            model=name,
        )

    @staticmethod
    def export_state(name: str) -> _Call[ModelState]:
        def read(r: httpx.Response) -> ModelState:
            return ModelState(r.content, r.headers.get("content-type", "application/octet-stream"))

        return _Call("GET", f"/models/{name}/state", read, admin=True, by_model=True, model=name)

    @staticmethod
    def import_state(name: str, state: ModelState) -> _Call[ModelInfo]:
        return _Call(
            "PUT",
            f"/models/{name}/state",
            _model_info,
            content=state.content,
            headers={"content-type": state.content_type},
            admin=True,
            by_model=True,
            model=name,
        )

    @staticmethod
    def move_model(name: str, groups: Sequence[str], timeout: float) -> _Call[dict[str, Any]]:
        body = {"groups": list(groups)}
        return _Call("POST", f"/models/{name}/placement", _json, json=body, admin=True, timeout=timeout)

    @staticmethod
    def get_placement(name: str) -> _Call[dict[str, Any]]:
        return _Call("GET", f"/models/{name}/placement", _json, admin=True)

    @staticmethod
    def model_stats(name: str, minutes: int) -> _Call[dict[str, Any]]:
        params = {"minutes": str(minutes)}
        path = f"/models/{name}/stats"
        return _Call("GET", path, _json, params=params, admin=True, by_model=True, model=name)

    @staticmethod
    def set_rollout(name: str, mode: str) -> _Call[ModelInfo]:
        # not idempotent: each call that reaches the server is a rollout event (a new epoch)
        body = {"mode": mode}
        return _Call(
            "POST", f"/models/{name}/rollout", _model_info, json=body, admin=True, idempotent=False,
            by_model=True, model=name,
        )  # fmt: skip

    @staticmethod
    def list_replicas() -> _Call[dict[str, Any]]:
        return _Call("GET", "/replicas", _json, admin=True)

    @staticmethod
    def start_evaluation(name: str, body: dict[str, Any]) -> _Call[dict[str, Any]]:
        return _Call(
            "POST", f"/models/{name}/evaluations", _json, json=body, admin=True, idempotent=False,
            by_model=True, model=name, remember=lambda job: job.get("id") if isinstance(job, dict) else None,
        )  # fmt: skip

    @staticmethod
    def get_evaluation(name: str, job: str) -> _Call[dict[str, Any]]:
        return _Call("GET", f"/models/{name}/evaluations/{job}", _json, admin=True, decision_id=job)

    @staticmethod
    def cancel_evaluation(name: str, job: str) -> _Call[None]:
        return _Call(
            "DELETE", f"/models/{name}/evaluations/{job}", lambda r: None, admin=True, decision_id=job
        )


def _model_spec(
    learner: str | None,
    params: Mapping[str, Any] | None,
    n_features: int | None,
    hashing_bits: int | None,
    labels: Sequence[str] | None,
    n_labels: int | None,
    seed: int | None,
    reward_window_seconds: float | None,
    default_reward: str | None,
    more: Mapping[str, Any],
) -> dict[str, Any]:
    return {
        **more,
        "learner": learner,
        "params": dict(params) if params is not None else None,
        "n_features": n_features,
        "hashing_bits": hashing_bits,
        "labels": list(labels) if labels is not None else None,
        "n_labels": n_labels,
        "seed": seed,
        "reward_window_seconds": reward_window_seconds,
        "default_reward": default_reward,
    }


#: The variables the server reads its keys from; the clients read the same ones.
API_KEY_ENV = "CLICKBOOST_API_KEY"
ADMIN_KEY_ENV = "CLICKBOOST_ADMIN_KEY"


def key_from_env(key: str | None, variable: str) -> str | None:
    """``key`` when given ("" = send none), else the first comma-separated key in ``$variable``."""
    if key is not None:
        return key or None
    return os.environ.get(variable, "").split(",")[0].strip() or None


def _base_urls(base_url: str | Sequence[str]) -> tuple[str, ...]:
    urls = (base_url,) if isinstance(base_url, str) else tuple(base_url)
    urls = tuple(u.strip().rstrip("/") for u in urls)
    if not urls or not all(urls):
        raise ValueError(f"base_url must be one URL or a non-empty sequence of URLs, got {base_url!r}")
    return urls


class _Rotation:
    """Round-robin over base URLs, skipping those marked down; thread-safe (the sync probe is a thread).

    ``urls`` grows when a 421 names a replica not given (model placement): indices stay valid.
    """

    def __init__(self, urls: tuple[str, ...]) -> None:
        self.urls = list(urls)
        self.down: set[int] = set()
        self.lock = threading.Lock()
        self._next = 0

    def pick(self, prefer: int | None = None, among: Sequence[int] | None = None) -> int:
        """``prefer`` if it is up, else the next replica up in turn (of ``among`` when given: the
        holders of a model); the next one of all when none is."""
        with self.lock:
            if prefer is not None and prefer not in self.down and (among is None or prefer in among):
                return prefer
            n = len(self.urls)
            order = [(self._next + k) % n for k in range(n)]
            if among is not None:
                order = [j for j in order if j in among] or order
            i = next((j for j in order if j not in self.down), order[0])
            self._next = i + 1
            return i

    def index(self, url: str) -> int:
        """The index of ``url``, added to the rotation if new."""
        url = url.strip().rstrip("/")
        with self.lock:
            if url not in self.urls:
                self.urls.append(url)
            return self.urls.index(url)

    def mark_down(self, i: int) -> bool:
        """Take replica ``i`` out of rotation; True if it was in. A lone URL is never taken out."""
        if len(self.urls) == 1:
            return False
        with self.lock:
            was_up = i not in self.down
            self.down.add(i)
            return was_up

    def mark_up(self, i: int) -> None:
        with self.lock:
            self.down.discard(i)

    def is_down(self, i: int) -> bool:
        with self.lock:
            return i in self.down

    def others_up(self, i: int) -> bool:
        with self.lock:
            return any(j != i and j not in self.down for j in range(len(self.urls)))

    def out(self) -> list[int]:
        with self.lock:
            return sorted(self.down)


class _Base:
    """What both clients share: URLs and rotation, keys, retry policy, stats, feedback affinity."""

    def __init__(
        self,
        base_url: str | Sequence[str],
        api_key: str | None,
        admin_key: str | None,
        retry: Retry | None,
    ) -> None:
        self._rotation = _Rotation(_base_urls(base_url))
        self.urls = self._rotation.urls  # the same list: it grows with the replicas a 421 names
        self.api_key = key_from_env(api_key, API_KEY_ENV)
        self.admin_key = key_from_env(admin_key, ADMIN_KEY_ENV)
        self.retry = retry or Retry()
        #: What the retries did: ``retries``, ``resent_predicts`` (possible orphan decisions),
        #: ``marked_down`` (a replica taken out of rotation), ``back_up`` (put back by the probe).
        #: ``misdirected``: 421 answers followed (model placement).
        self.stats: Counter[str] = Counter()
        self._owners: dict[str, int] = {}  # decision id -> replica that answered its predict
        self._holders: dict[str | None, tuple[int, ...]] = {}  # model -> its replicas, from 421s

    def _route(self, model: str | None, header: str | None) -> bool:
        """Remember the replicas a 421 named for ``model``; False if it named none."""
        urls = [u for u in (header or "").split(",") if u.strip()]
        if not urls:
            return False
        holders = tuple(self._rotation.index(u) for u in urls)
        with self._rotation.lock:
            self._holders[model] = holders
            self.stats["misdirected"] += 1
        return True

    def _among(self, call: _Call[Any]) -> tuple[int, ...] | None:
        if not call.by_model:
            return None
        with self._rotation.lock:
            return self._holders.get(call.model)

    def _count(self, key: str) -> None:
        with self._rotation.lock:
            self.stats[key] += 1

    def _owner(self, decision_id: str | None) -> int | None:
        if decision_id is None or len(self.urls) == 1:
            return None
        with self._rotation.lock:
            return self._owners.get(decision_id)

    def _answered_by(self, value: T, i: int, call: _Call[Any] | None = None) -> T:
        """Tag a prediction with its replica, remembered for the feedback affinity (and the key a
        call's ``remember`` gives, for the calls that name it later)."""
        key = call.remember(value) if call is not None and call.remember is not None else None
        if key is not None:
            self._own(key, i)
        if not isinstance(value, Prediction | Page):
            return value
        self._own(value.decision_id, i)
        return replace(value, server=self.urls[i])  # type: ignore[return-value]

    def _own(self, key: str, i: int) -> None:
        if len(self.urls) > 1:
            with self._rotation.lock:
                self._owners[key] = i
                if len(self._owners) > _OWNERS:  # forget the oldest (dicts keep insertion order)
                    del self._owners[next(iter(self._owners))]

    def _mark_down(self, i: int) -> None:
        if self._rotation.mark_down(i):
            self._count("marked_down")
            self._start_probe()

    def _start_probe(self) -> None:
        raise NotImplementedError

    def _headers(self, call: _Call[Any]) -> dict[str, str]:
        headers = dict(call.headers)
        key = self.admin_key if call.admin else self.api_key
        if key:
            headers["x-api-key"] = key
        return headers


class _Tries(Generic[T]):
    """The retry state of one call: where each try goes, and whether and when another one starts.

    The I/O loops of both clients drive it: :meth:`request` for the next try, then :meth:`failed`
    (no answer) or :meth:`answered`, which return the seconds to sleep before the next try, or
    :meth:`finish` the call.
    """

    def __init__(self, client: _Base, call: _Call[T]) -> None:
        self.client = client
        self.call = call
        self.started = time.monotonic()
        self.tries = 0
        self.resent = False
        self.target = -1
        self.followed = False  # a 421 was followed (once per call)
        self._prefer = client._owner(call.decision_id)

    def request(self) -> dict[str, Any]:
        """The keyword arguments of ``httpx.Client.request`` for the next try."""
        self.target = self.client._rotation.pick(self._prefer, self.client._among(self.call))
        self.tries += 1
        if self.tries > 1:
            self.client._count("retries")
        call = self.call
        request = {
            "method": call.method,
            "url": self.client.urls[self.target] + call.path,
            "json": call.json,
            "content": call.content,
            "params": call.params,
            "headers": self.client._headers(call),
        }
        if call.timeout is not None:
            request["timeout"] = call.timeout
        return request

    def _delay(self, retry_after: str | None = None) -> float | None:
        """Seconds to sleep before the next try, or None when the budget or the attempts are spent.

        No sleep when the replica just tried is out of rotation and another one is up: move on.
        """
        client, policy = self.client, self.client.retry
        if policy.attempts is not None and self.tries >= policy.attempts:
            return None
        if client._rotation.is_down(self.target) and client._rotation.others_up(self.target):
            delay = 0.0
        else:
            delay = policy.delay(self.tries - 1, retry_after)
        return delay if time.monotonic() - self.started + delay <= policy.budget else None

    def failed(self, exc: httpx.TransportError) -> float:
        """Seconds to sleep before the next try after ``exc``; raises :class:`TransportError` if none."""
        self.client._mark_down(self.target)
        call = self.call
        resend = call.resend_once and not self.resent and isinstance(exc, _DROPPED_ERRORS)
        if not (call.idempotent or isinstance(exc, _UNSENT_ERRORS) or resend):
            raise self._give_up(exc, "; not re-sent: the server may have recorded it")
        delay = self._delay()
        if delay is None:
            raise self._give_up(exc, "")
        if resend:
            self.resent = True
            self.client._count("resent_predicts")
        return delay

    def answered(self, resp: httpx.Response) -> float | None:
        """Seconds to sleep before trying again after ``resp``; None when it is the final answer."""
        status = resp.status_code
        call = self.call
        if status == 421 and call.by_model and not self.followed:
            # Nothing was recorded: re-send now to a replica that holds the model, once.
            self.followed = self.client._route(call.model, resp.headers.get(REPLICAS_HEADER))
            return 0.0 if self.followed else None
        if status in _PROXY_STATUS:
            self.client._mark_down(self.target)
        resend = call.resend_once and not self.resent and status == 502
        if not (status in _UNSENT_STATUS or (call.idempotent and status in _SAFE_STATUS) or resend):
            return None
        delay = self._delay(resp.headers.get("retry-after"))
        if delay is not None and resend:
            self.resent = True
            self.client._count("resent_predicts")
        return delay

    def finish(self, resp: httpx.Response) -> T:
        """The value of the final answer ``resp``, or the :class:`APIError` it maps to."""
        value = self.call.finish(resp, retried=self.tries > 1)
        return self.client._answered_by(value, self.target, self.call)

    def _give_up(self, exc: httpx.TransportError, reason: str) -> TransportError:
        n, elapsed = self.tries, time.monotonic() - self.started
        return TransportError(
            f"{self.call.method} {self.call.path} on {self.client.urls[self.target]}: "
            f"{type(exc).__name__}: {exc} (after {n} tr{'y' if n == 1 else 'ies'} in {elapsed:.1f} s{reason})"
        )


class Client(_Base):
    """Blocking client of one clickboost server, several replicas, or a load balancer.

    Replicas out of rotation are probed by a daemon thread that runs only while one is out, rather
    than on the request path: a probe there would add a ``/readyz`` round trip (up to its timeout, if
    the replica is unreachable) to a caller's request.

    Parameters
    ----------
    base_url : str or sequence of str
        E.g. ``http://127.0.0.1:8000``, or the base URLs of several replicas (see the module doc:
        round-robin over those up, a failing one skipped until ``/readyz`` answers again).
    api_key : str, optional
        Key for ``/predict`` and ``/feedback`` (sent as ``X-API-Key``). Default: the first key in
        the environment variable ``CLICKBOOST_API_KEY``, which the server reads its keys from;
        ``""`` sends none.
    admin_key : str, optional
        Key for the ``/models`` admin calls. Default: ``CLICKBOOST_ADMIN_KEY``; ``""`` sends none.
    timeout : float
        Seconds per request (connect, read, write and pool each).
    retry : Retry, optional
        Retry policy; default :class:`Retry()`, retries within 60 s.

    Attributes
    ----------
    stats : collections.Counter
        ``retries``, ``resent_predicts``, ``marked_down``, ``back_up``: what the retries did.

    Examples
    --------
    >>> with Client(["http://127.0.0.1:8000", "http://127.0.0.1:8001"]) as c:  # doctest: +SKIP
    ...     p = c.predict([0.0, 1.0, 0.5])
    ...     c.feedback(p.decision_id, click=p.label == "1")
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        *,
        api_key: str | None = None,
        admin_key: str | None = None,
        timeout: float = 10.0,
        retry: Retry | None = None,
    ) -> None:
        super().__init__(base_url, api_key, admin_key, retry)
        self._http = httpx.Client(timeout=timeout)
        self._closed = threading.Event()
        self._prober: threading.Thread | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the probe and close the connection pool."""
        self._closed.set()
        prober = self._prober
        if prober is not None:
            prober.join(PROBE_INTERVAL + _PROBE_TIMEOUT + 1.0)
        self._http.close()

    def _start_probe(self) -> None:
        with self._rotation.lock:
            if self._prober is None and not self._closed.is_set():
                self._prober = threading.Thread(target=self._probe, name="clickboost-probe", daemon=True)
                self._prober.start()

    def _probe(self) -> None:
        while not self._closed.wait(PROBE_INTERVAL):
            for i in self._rotation.out():
                try:
                    resp = self._http.get(self.urls[i] + "/readyz", timeout=_PROBE_TIMEOUT)
                except (httpx.TransportError, RuntimeError):  # RuntimeError: closed meanwhile
                    continue
                if resp.status_code == 200:
                    self._rotation.mark_up(i)
                    self._count("back_up")
            with self._rotation.lock:
                if not self._rotation.down:
                    self._prober = None
                    return

    def _run(self, call: _Call[T]) -> T:
        tries = _Tries(self, call)
        while True:
            try:
                resp = self._http.request(**tries.request())
            except httpx.TransportError as exc:
                delay = tries.failed(exc)
            else:
                answered = tries.answered(resp)
                if answered is None:
                    return tries.finish(resp)
                delay = answered
            time.sleep(delay)

    def predict(
        self,
        features: Features,
        model: str | None = None,
        *,
        defer: bool = False,
        decision_id: str | None = None,
        eligible: Sequence[str | int] | None = None,
        excluded: Sequence[str | int] | None = None,
        baseline: str | int | None = None,
        actions: Sequence[Mapping[str, Any]] | None = None,
        candidates: Sequence[str] | None = None,
        filter: Mapping[str, Any] | None = None,
        k: int | None = None,
    ) -> Prediction:
        """Ask for a label: ``POST /predict``.

        Parameters
        ----------
        features : sequence of float or mapping
            Dense features of the model's dimension, or named features (numbers, strings, bools)
            that the server hashes.
        model : str, optional
            Model name; the server's default model when omitted.
        defer : bool
            Learn from the decision only if :meth:`activate` is called within its reward window (the
            page really showed it); otherwise it is dropped, not given the default reward.
        decision_id : str, optional
            A client-chosen id (1 to 256 of ``A-Za-z0-9_.:-``, not ``.`` or ``..``) instead of a
            drawn one; taken once (:class:`Conflict` when taken). Send the feedback for the
            answer's ``decision_id`` (a Redis-backed server appends ``.{slot tag}``).
        eligible, excluded : sequence of str or int, optional
            Only these labels may be served, or all but these (names or 0-based indices; one of the
            two): the answer's probabilities are 0 outside the set, its ``ranking`` lists the set.
        baseline : str or int, optional
            The label your current policy would show: required while the model's rollout is
            ``logging`` (served) or ``apprentice`` (served with probability 1 - epsilon).
        actions : sequence of mapping, optional
            The candidates of a model with ``"actions": "features"``, each ``{"id": str,
            "features": {name: number | str | bool}}`` (ids distinct); required by such a model,
            refused by a label model. The answer's ``label`` is the chosen id, ``label_index`` its
            position here; ``eligible``, ``excluded`` and ``baseline`` then name action ids (or
            positions).
        candidates, filter, k : optional
            A model's catalog (issue 54): ``candidates`` are item ids whose features the server
            holds (with neither ``actions`` nor ``candidates``, its whole active catalog is the
            candidates), ``filter`` keeps the items whose string or boolean features match
            (``{"category": ["shoes"]}``), ``k`` the ranking's length (default 10). The answer has
            the chosen item, its probability and the top ``k`` (``probabilities`` is empty;
            ``candidates`` says how many there were).
        Examples
        --------
        >>> with Client("http://127.0.0.1:8000") as c:  # doctest: +SKIP
        ...     p = c.predict(
        ...         {"country": "fr"},
        ...         model="shop",
        ...         actions=[{"id": "sku-1", "features": {"brand": "acme", "price": 9.5}},
        ...                  {"id": "sku-2", "features": {"brand": "zeta", "price": 12.0}}],
        ...     )
        ...     p.label  # "sku-1" or "sku-2"
        """
        return self._run(
            _Calls.predict(
                features,
                model,
                defer,
                decision_id,
                eligible,
                excluded,
                baseline,
                actions,
                candidates,
                filter,
                k,
            )
        )

    def predict_page(
        self,
        features: Features,
        actions: Sequence[Mapping[str, Any]] | None,
        slots: Sequence[Mapping[str, Any]],
        model: str | None = None,
        *,
        defer: bool = False,
        decision_id: str | None = None,
        candidates: Sequence[str] | None = None,
        filter: Mapping[str, Any] | None = None,
        k: int | None = None,
    ) -> Page:
        """Ask for a page of several slots (issue 53): ``POST /predict`` with ``slots``.

        Parameters
        ----------
        features, model, defer, decision_id
            As for :meth:`predict`; ``defer`` covers the whole page.
        actions : sequence of mapping, or None
            The page's candidates sent with their features, ``{"id": str, "features": {...}}``
            each; None for a page over the model's catalog alone.
        slots : sequence of mapping
            The slots in page order, each ``{"id": str, "features"?: {...}, "eligible"? |
            "excluded"?: [...], "baseline"?: ...}``.
        candidates, filter, k : optional
            As for :meth:`predict` (issue 54): the page's candidates from the model's catalog (after
            the sent ``actions``, if any), at least as many as slots. Each slot's ``ranking`` is then
            its top ``k``, its ``candidates`` how many it was decided over.

        Returns
        -------
        Page
            One decision id and each slot's action (none in two slots), its probability given the
            earlier slots and its ranking. Reward each slot with ``feedback(page.decision_id, ...,
            slot=...)``.

        Examples
        --------
        >>> with Client("http://127.0.0.1:8000") as c:  # doctest: +SKIP
        ...     page = c.predict_page({"country": "fr"}, None, [{"id": "hero"}, {"id": "tile"}],
        ...                           model="shop", filter={"category": ["shoes"]}, k=5)
        ...     page.labels  # two catalog items, none in both slots
        """
        return self._run(
            _Calls.predict_page(features, actions, slots, model, defer, decision_id, candidates, filter, k)
        )

    def feedback(
        self,
        decision_id: str,
        click: bool | None = None,
        *,
        reward: float | None = None,
        wait: bool = False,
        slot: int | str | None = None,
    ) -> FeedbackResult:
        """Report the click bit, or a graded ``reward`` in [0, 1], of a decision: ``POST /feedback``
        (``?wait=true`` with ``wait``). Exactly one of ``click`` and ``reward``.

        With ``wait`` the call returns after the update was applied to the model serving the
        replica that answered, so a following ``predict`` on it sees the update. For a deferred
        decision not activated yet the feedback is held (``held`` True) until :meth:`activate`.
        ``slot``: for a :class:`Page`, the slot rewarded, by its index in the page (one store call on
        the server) or its id; each slot's reward is taken once (:class:`Conflict` after).
        """
        return self._run(_Calls.feedback(decision_id, click, wait, reward, slot))

    def activate(self, decision_id: str, *, wait: bool = False) -> ActivateResult:
        """Say that a deferred decision was shown: ``POST /decisions/{decision_id}/activate``.

        Idempotent. Within the reward window the decision will be learned (a feedback held for it
        now: with ``wait`` applied before the call returns); after it, :class:`Gone` (dropped).
        :class:`NotFound` for an unknown id; ``status == "not_deferred"`` for a decision that was
        not deferred.
        """
        return self._run(_Calls.activate(decision_id, wait))

    def health(self) -> dict[str, Any]:
        """``GET /healthz`` (liveness)."""
        return self._run(_Calls.health("/healthz"))

    def ready(self) -> dict[str, Any]:
        """``GET /readyz``; raises :class:`~clickboost_client.errors.ServerError` while not ready."""
        return self._run(_Calls.health("/readyz"))

    def metrics(self) -> str:
        """``GET /metrics``: the Prometheus text exposition."""
        return self._run(_Calls.metrics())

    def list_models(self) -> list[ModelInfo]:
        """``GET /models`` (admin)."""
        return self._run(_Calls.list_models())

    def get_model(self, name: str) -> ModelInfo:
        """``GET /models/{name}`` (admin): configuration, version, checksum, counters."""
        return self._run(_Calls.get_model(name))

    def create_model(
        self,
        name: str,
        learner: str | None = None,
        *,
        params: Mapping[str, Any] | None = None,
        n_features: int | None = None,
        hashing_bits: int | None = None,
        labels: Sequence[str] | None = None,
        n_labels: int | None = None,
        seed: int | None = None,
        reward_window_seconds: float | None = None,
        default_reward: str | None = None,
        **more: Any,
    ) -> ModelInfo:
        """``PUT /models/{name}`` (admin); arguments left as None take the server's defaults (no
        ``learner``: the server's default learner). Other fields of the model spec go by keyword,
        e.g. ``log_decisions=True``, ``rollout="apprentice"``, ``promote="auto"``."""
        spec = _model_spec(
            learner,
            params,
            n_features,
            hashing_bits,
            labels,
            n_labels,
            seed,
            reward_window_seconds,
            default_reward,
            more,
        )
        return self._run(_Calls.create_model(name, spec))

    def delete_model(self, name: str) -> None:
        """``DELETE /models/{name}`` (admin)."""
        self._run(_Calls.delete_model(name))

    def reset_model(self, name: str) -> ModelInfo:
        """``POST /models/{name}/reset`` (admin): back to the untrained state."""
        return self._run(_Calls.reset_model(name))

    def export_state(self, name: str) -> ModelState:
        """``GET /models/{name}/state`` (admin)."""
        return self._run(_Calls.export_state(name))

    def import_state(self, name: str, state: ModelState) -> ModelInfo:
        """``PUT /models/{name}/state`` (admin): the server validates it and never unpickles."""
        return self._run(_Calls.import_state(name, state))

    def move_model(self, name: str, groups: Sequence[str], *, timeout: float = 60.0) -> dict[str, Any]:
        """``POST /models/{name}/placement`` (admin; model placement): place the model on the
        replica groups ``groups`` without losing an event. Returns when the placement switched
        (``{"model", "groups": {group: addresses}, "joining", "replica_group"}``);
        :class:`~clickboost_client.errors.Conflict` when a new group has no live replica or did not catch up
        (placement unchanged). ``timeout``: seconds for the request (the server waits up to 30 s)."""
        return self._run(_Calls.move_model(name, groups, timeout))

    def get_placement(self, name: str) -> dict[str, Any]:
        """``GET /models/{name}/placement`` (admin; model placement): the groups that hold the model
        and their addresses."""
        return self._run(_Calls.get_placement(name))

    def model_stats(self, name: str, *, minutes: int = 60) -> dict[str, Any]:
        """``GET /models/{name}/stats`` (admin): the dashboard's numbers of one model (per-minute
        counts of the last ``minutes``, click rates, this replica's lag, checkpoints, evaluations)."""
        return self._run(_Calls.model_stats(name, minutes))

    def set_rollout(self, name: str, mode: str) -> ModelInfo:
        """``POST /models/{name}/rollout`` (admin): switch the model's safe-rollout mode
        (``"online"``, ``"logging"`` or ``"apprentice"``) through its log; returns the model once the
        answering replica applied it (its rollout state in ``raw["rollout"]``). Not re-sent
        after a dropped connection (each call that arrives is a rollout event)."""
        return self._run(_Calls.set_rollout(name, mode))

    def list_replicas(self) -> dict[str, Any]:
        """``GET /replicas`` (admin): every live replica's heartbeat, and whether their placement
        settings agree (``placement_agrees``)."""
        return self._run(_Calls.list_replicas())

    def start_evaluation(self, name: str, policies: Sequence[str], **options: Any) -> dict[str, Any]:
        """``POST /models/{name}/evaluations`` (admin): start an off-policy evaluation of
        ``policies`` on the model's decision log (``since``, ``until``, ``runs`` by keyword). A job
        lives in the replica that started it: :meth:`get_evaluation` and :meth:`cancel_evaluation`
        go there."""
        return self._run(_Calls.start_evaluation(name, {"policies": list(policies), **options}))

    def get_evaluation(self, name: str, job: str) -> dict[str, Any]:
        """``GET /models/{name}/evaluations/{job}`` (admin), on the replica that started the job."""
        return self._run(_Calls.get_evaluation(name, job))

    def cancel_evaluation(self, name: str, job: str) -> None:
        """``DELETE /models/{name}/evaluations/{job}`` (admin), on the replica that started it."""
        self._run(_Calls.cancel_evaluation(name, job))


class AsyncClient(_Base):
    """The asyncio twin of :class:`Client`: same constructor and methods, as coroutines.

    Replicas out of rotation are probed by a task on the running loop, alive only while one is out.

    Examples
    --------
    >>> async with AsyncClient("http://127.0.0.1:8000") as c:  # doctest: +SKIP
    ...     p = await c.predict({"country": "fr", "hour": 13})
    ...     await c.feedback(p.decision_id, click=True)
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        *,
        api_key: str | None = None,
        admin_key: str | None = None,
        timeout: float = 10.0,
        retry: Retry | None = None,
    ) -> None:
        super().__init__(base_url, api_key, admin_key, retry)
        self._http = httpx.AsyncClient(timeout=timeout)
        self._prober: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the probe and close the connection pool."""
        if self._prober is not None:
            self._prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prober
            self._prober = None
        await self._http.aclose()

    def _start_probe(self) -> None:
        if self._prober is None or self._prober.done():
            self._prober = asyncio.get_running_loop().create_task(self._probe())

    async def _probe(self) -> None:
        while self._rotation.down:
            await asyncio.sleep(PROBE_INTERVAL)
            for i in self._rotation.out():
                try:
                    resp = await self._http.get(self.urls[i] + "/readyz", timeout=_PROBE_TIMEOUT)
                except httpx.TransportError:
                    continue
                if resp.status_code == 200:
                    self._rotation.mark_up(i)
                    self._count("back_up")

    async def _run(self, call: _Call[T]) -> T:
        tries = _Tries(self, call)
        while True:
            try:
                resp = await self._http.request(**tries.request())
            except httpx.TransportError as exc:
                delay = tries.failed(exc)
            else:
                answered = tries.answered(resp)
                if answered is None:
                    return tries.finish(resp)
                delay = answered
            await asyncio.sleep(delay)

    async def predict(
        self,
        features: Features,
        model: str | None = None,
        *,
        defer: bool = False,
        decision_id: str | None = None,
        eligible: Sequence[str | int] | None = None,
        excluded: Sequence[str | int] | None = None,
        baseline: str | int | None = None,
        actions: Sequence[Mapping[str, Any]] | None = None,
        candidates: Sequence[str] | None = None,
        filter: Mapping[str, Any] | None = None,
        k: int | None = None,
    ) -> Prediction:
        """See :meth:`Client.predict`."""
        return await self._run(
            _Calls.predict(
                features,
                model,
                defer,
                decision_id,
                eligible,
                excluded,
                baseline,
                actions,
                candidates,
                filter,
                k,
            )
        )

    async def predict_page(
        self,
        features: Features,
        actions: Sequence[Mapping[str, Any]] | None,
        slots: Sequence[Mapping[str, Any]],
        model: str | None = None,
        *,
        defer: bool = False,
        decision_id: str | None = None,
        candidates: Sequence[str] | None = None,
        filter: Mapping[str, Any] | None = None,
        k: int | None = None,
    ) -> Page:
        """See :meth:`Client.predict_page`."""
        return await self._run(
            _Calls.predict_page(features, actions, slots, model, defer, decision_id, candidates, filter, k)
        )

    async def feedback(
        self,
        decision_id: str,
        click: bool | None = None,
        *,
        reward: float | None = None,
        wait: bool = False,
        slot: int | str | None = None,
    ) -> FeedbackResult:
        """See :meth:`Client.feedback`."""
        return await self._run(_Calls.feedback(decision_id, click, wait, reward, slot))

    async def activate(self, decision_id: str, *, wait: bool = False) -> ActivateResult:
        """See :meth:`Client.activate`."""
        return await self._run(_Calls.activate(decision_id, wait))

    async def health(self) -> dict[str, Any]:
        """See :meth:`Client.health`."""
        return await self._run(_Calls.health("/healthz"))

    async def ready(self) -> dict[str, Any]:
        """See :meth:`Client.ready`."""
        return await self._run(_Calls.health("/readyz"))

    async def metrics(self) -> str:
        """See :meth:`Client.metrics`."""
        return await self._run(_Calls.metrics())

    async def list_models(self) -> list[ModelInfo]:
        """See :meth:`Client.list_models`."""
        return await self._run(_Calls.list_models())

    async def get_model(self, name: str) -> ModelInfo:
        """See :meth:`Client.get_model`."""
        return await self._run(_Calls.get_model(name))

    async def create_model(
        self,
        name: str,
        learner: str | None = None,
        *,
        params: Mapping[str, Any] | None = None,
        n_features: int | None = None,
        hashing_bits: int | None = None,
        labels: Sequence[str] | None = None,
        n_labels: int | None = None,
        seed: int | None = None,
        reward_window_seconds: float | None = None,
        default_reward: str | None = None,
        **more: Any,
    ) -> ModelInfo:
        """See :meth:`Client.create_model`."""
        spec = _model_spec(
            learner,
            params,
            n_features,
            hashing_bits,
            labels,
            n_labels,
            seed,
            reward_window_seconds,
            default_reward,
            more,
        )
        return await self._run(_Calls.create_model(name, spec))

    async def delete_model(self, name: str) -> None:
        """See :meth:`Client.delete_model`."""
        await self._run(_Calls.delete_model(name))

    async def reset_model(self, name: str) -> ModelInfo:
        """See :meth:`Client.reset_model`."""
        return await self._run(_Calls.reset_model(name))

    async def export_state(self, name: str) -> ModelState:
        """See :meth:`Client.export_state`."""
        return await self._run(_Calls.export_state(name))

    async def import_state(self, name: str, state: ModelState) -> ModelInfo:
        """See :meth:`Client.import_state`."""
        return await self._run(_Calls.import_state(name, state))

    async def move_model(self, name: str, groups: Sequence[str], *, timeout: float = 60.0) -> dict[str, Any]:
        """See :meth:`Client.move_model`."""
        return await self._run(_Calls.move_model(name, groups, timeout))

    async def get_placement(self, name: str) -> dict[str, Any]:
        """See :meth:`Client.get_placement`."""
        return await self._run(_Calls.get_placement(name))

    async def model_stats(self, name: str, *, minutes: int = 60) -> dict[str, Any]:
        """See :meth:`Client.model_stats`."""
        return await self._run(_Calls.model_stats(name, minutes))

    async def set_rollout(self, name: str, mode: str) -> ModelInfo:
        """See :meth:`Client.set_rollout`."""
        return await self._run(_Calls.set_rollout(name, mode))

    async def list_replicas(self) -> dict[str, Any]:
        """See :meth:`Client.list_replicas`."""
        return await self._run(_Calls.list_replicas())

    async def start_evaluation(self, name: str, policies: Sequence[str], **options: Any) -> dict[str, Any]:
        """See :meth:`Client.start_evaluation`."""
        return await self._run(_Calls.start_evaluation(name, {"policies": list(policies), **options}))

    async def get_evaluation(self, name: str, job: str) -> dict[str, Any]:
        """See :meth:`Client.get_evaluation`."""
        return await self._run(_Calls.get_evaluation(name, job))

    async def cancel_evaluation(self, name: str, job: str) -> None:
        """See :meth:`Client.cancel_evaluation`."""
        await self._run(_Calls.cancel_evaluation(name, job))
