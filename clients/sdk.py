"""Python SDK of the clickboost service: :class:`Client` (blocking) and :class:`AsyncClient` over httpx.

Both speak the API contract of issue 3 and share everything but the I/O loop: a method builds a
:class:`_Call` (what to send, which failures are safe to retry, how to read the answer) and the
client runs it with :class:`Retry`'s back-off.

Which failures are retried, and why
-----------------------------------
* ``feedback`` re-sends the same decision id after any transport failure or a 429/502/503/504: the
  service records feedback exactly once per id, so a retry can at worst meet its own first attempt,
  which answers 409 with the first outcome; when that outcome is the one being sent, the retry
  succeeded and the SDK returns it instead of raising.
* ``GET``/``PUT`` calls are idempotent and retried the same way.
* ``predict``, ``DELETE`` and ``reset`` are retried only when the request cannot have been processed
  (connection refused, 429, 503): a repeated predict would leave an orphan decision whose default
  reward, on expiry, teaches the model about a label nobody saw.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

import httpx

from clients.errors import Conflict, ProtocolError, TransportError, error_for
from clients.models import FeedbackResult, ModelInfo, Prediction

T = TypeVar("T")

Features = Sequence[float] | Mapping[str, float | str | bool]

_SAFE_STATUS = frozenset({429, 502, 503, 504})
_UNSENT_STATUS = frozenset({429, 503})
# Exceptions raised before a single byte of the request reached the server.
_UNSENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True)
class Retry:
    """Back-off policy: ``attempts`` tries in all, delays ``backoff * 2**k`` capped at ``max_backoff``.

    Each delay is scaled by a random factor in [0.5, 1] so that many clients failing together do not
    retry in lock-step; a ``Retry-After`` header (seconds) from the server takes precedence.
    """

    attempts: int = 3
    backoff: float = 0.1
    max_backoff: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"Retry.attempts must be >= 1, got {self.attempts}")
        if self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("Retry.backoff and Retry.max_backoff must be >= 0")

    def delay(self, retry: int, retry_after: str | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0-based)."""
        if retry_after is not None:
            try:
                return min(self.max_backoff, max(0.0, float(retry_after)))
            except ValueError:
                pass  # an HTTP date: fall back to our own back-off
        return min(self.max_backoff, self.backoff * 2**retry) * random.uniform(0.5, 1.0)


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
    # Feedback only: a 409 after a retry whose first outcome equals ours is our own first attempt.
    reconcile: Callable[[Conflict], T | None] | None = None

    def retry_status(self, status: int) -> bool:
        return status in (_SAFE_STATUS if self.idempotent else _UNSENT_STATUS)

    def retry_error(self, exc: httpx.TransportError) -> bool:
        return self.idempotent or isinstance(exc, _UNSENT_ERRORS)

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


def _model_list(resp: httpx.Response) -> list[ModelInfo]:
    body = _json(resp)
    items = body.get("models") if isinstance(body, dict) else body
    if not isinstance(items, list):
        raise ProtocolError(f"GET /models answer is not a list of models: {body!r:.200}")
    return [ModelInfo.from_json(m) for m in items]


class _Calls:
    """Builds the :class:`_Call` of every API method (shared by both clients)."""

    @staticmethod
    def predict(features: Features, model: str | None) -> _Call[Prediction]:
        if isinstance(features, Mapping):
            feats: Any = dict(features)
        else:
            feats = [float(v) for v in features]  # accepts numpy arrays without importing numpy
        body: dict[str, Any] = {"features": feats}
        if model is not None:
            body["model"] = model
        return _Call(
            "POST", "/predict", lambda r: Prediction.from_json(_json(r)), json=body, idempotent=False
        )

    @staticmethod
    def feedback(decision_id: str, click: bool, wait: bool) -> _Call[FeedbackResult]:
        def reconcile(err: Conflict) -> FeedbackResult | None:
            first = err.first_outcome or {}
            if first.get("outcome") != ("click" if click else "no_click"):
                return None
            try:
                return FeedbackResult.from_json({**first, "decision_id": decision_id, "click": bool(click)})
            except ProtocolError:
                return None

        return _Call(
            "POST",
            "/feedback",
            lambda r: FeedbackResult.from_json(_json(r)),
            json={"decision_id": decision_id, "click": bool(click)},
            params={"wait": "true"} if wait else {},
            reconcile=reconcile,
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
        return _Call("GET", f"/models/{name}", lambda r: ModelInfo.from_json(_json(r)), admin=True)

    @staticmethod
    def create_model(name: str, spec: dict[str, Any]) -> _Call[ModelInfo]:
        body = {k: v for k, v in spec.items() if v is not None}
        return _Call("PUT", f"/models/{name}", lambda r: ModelInfo.from_json(_json(r)), json=body, admin=True)

    @staticmethod
    def delete_model(name: str) -> _Call[None]:
        return _Call("DELETE", f"/models/{name}", lambda r: None, admin=True, idempotent=False)

    @staticmethod
    def reset_model(name: str) -> _Call[ModelInfo]:
        return _Call(
            "POST",
            f"/models/{name}/reset",
            lambda r: ModelInfo.from_json(_json(r)),
            admin=True,
            idempotent=False,
        )

    @staticmethod
    def export_state(name: str) -> _Call[ModelState]:
        def read(r: httpx.Response) -> ModelState:
            return ModelState(r.content, r.headers.get("content-type", "application/octet-stream"))

        return _Call("GET", f"/models/{name}/state", read, admin=True)

    @staticmethod
    def import_state(name: str, state: ModelState) -> _Call[ModelInfo]:
        return _Call(
            "PUT",
            f"/models/{name}/state",
            lambda r: ModelInfo.from_json(_json(r)),
            content=state.content,
            headers={"content-type": state.content_type},
            admin=True,
        )


def _model_spec(
    learner: str,
    params: Mapping[str, Any] | None,
    n_features: int | None,
    hashing_bits: int | None,
    labels: Sequence[str] | None,
    n_labels: int | None,
    seed: int | None,
    reward_window_seconds: float | None,
    default_reward: str | None,
) -> dict[str, Any]:
    return {
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


class _Base:
    def __init__(self, api_key: str | None, admin_key: str | None, retry: Retry | None) -> None:
        self.api_key = key_from_env(api_key, API_KEY_ENV)
        self.admin_key = key_from_env(admin_key, ADMIN_KEY_ENV)
        self.retry = retry or Retry()

    def _headers(self, call: _Call[Any]) -> dict[str, str]:
        headers = dict(call.headers)
        key = self.admin_key if call.admin else self.api_key
        if key:
            headers["x-api-key"] = key
        return headers

    def _request(self, call: _Call[Any]) -> dict[str, Any]:
        return {
            "method": call.method,
            "url": call.path,
            "json": call.json,
            "content": call.content,
            "params": call.params,
            "headers": self._headers(call),
        }

    def _give_up(self, call: _Call[Any], exc: httpx.TransportError) -> TransportError:
        return TransportError(
            f"{call.method} {call.path}: {type(exc).__name__}: {exc} (after {self.retry.attempts} tries)"
        )


class Client(_Base):
    """Blocking client of one clickboost server (or load balancer).

    Parameters
    ----------
    base_url : str
        E.g. ``http://127.0.0.1:8000``.
    api_key : str, optional
        Key for ``/predict`` and ``/feedback`` (sent as ``X-API-Key``). Default: the first key in
        the environment variable ``CLICKBOOST_API_KEY``, which the server reads its keys from;
        ``""`` sends none.
    admin_key : str, optional
        Key for the ``/models`` admin calls. Default: ``CLICKBOOST_ADMIN_KEY``; ``""`` sends none.
    timeout : float
        Seconds per request (connect, read, write and pool each).
    retry : Retry, optional
        Back-off policy; default three tries from 0.1 s.

    Examples
    --------
    >>> with Client("http://127.0.0.1:8000") as c:  # doctest: +SKIP
    ...     p = c.predict([0.0, 1.0, 0.5])
    ...     c.feedback(p.decision_id, click=p.label == "1")
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        admin_key: str | None = None,
        timeout: float = 10.0,
        retry: Retry | None = None,
    ) -> None:
        super().__init__(api_key, admin_key, retry)
        self._http = httpx.Client(base_url=base_url, timeout=timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _run(self, call: _Call[T]) -> T:
        for attempt in range(self.retry.attempts):
            last = attempt + 1 == self.retry.attempts
            try:
                resp = self._http.request(**self._request(call))
            except httpx.TransportError as exc:
                if last or not call.retry_error(exc):
                    raise self._give_up(call, exc) from exc
                time.sleep(self.retry.delay(attempt))
                continue
            if not last and call.retry_status(resp.status_code):
                time.sleep(self.retry.delay(attempt, resp.headers.get("retry-after")))
                continue
            return call.finish(resp, retried=attempt > 0)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def predict(self, features: Features, model: str | None = None) -> Prediction:
        """Ask for a label: ``POST /predict``.

        Parameters
        ----------
        features : sequence of float or mapping
            Dense features of the model's dimension, or named features (numbers, strings, bools)
            that the server hashes.
        model : str, optional
            Model name; the server's default model when omitted.
        """
        return self._run(_Calls.predict(features, model))

    def feedback(self, decision_id: str, click: bool, *, wait: bool = False) -> FeedbackResult:
        """Report the click bit of a decision: ``POST /feedback`` (``?wait=true`` with ``wait``).

        With ``wait`` the call returns after the update was applied to the model serving the
        replica that answered, so a following ``predict`` on it sees the update.
        """
        return self._run(_Calls.feedback(decision_id, click, wait))

    def health(self) -> dict[str, Any]:
        """``GET /healthz`` (liveness)."""
        return self._run(_Calls.health("/healthz"))

    def ready(self) -> dict[str, Any]:
        """``GET /readyz``; raises :class:`~clients.errors.ServerError` while not ready."""
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
        learner: str,
        *,
        params: Mapping[str, Any] | None = None,
        n_features: int | None = None,
        hashing_bits: int | None = None,
        labels: Sequence[str] | None = None,
        n_labels: int | None = None,
        seed: int | None = None,
        reward_window_seconds: float | None = None,
        default_reward: str | None = None,
    ) -> ModelInfo:
        """``PUT /models/{name}`` (admin); arguments left as None take the server's defaults."""
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


class AsyncClient(_Base):
    """The asyncio twin of :class:`Client`: same constructor and methods, as coroutines.

    Examples
    --------
    >>> async with AsyncClient("http://127.0.0.1:8000") as c:  # doctest: +SKIP
    ...     p = await c.predict({"country": "fr", "hour": 13})
    ...     await c.feedback(p.decision_id, click=True)
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        admin_key: str | None = None,
        timeout: float = 10.0,
        retry: Retry | None = None,
    ) -> None:
        super().__init__(api_key, admin_key, retry)
        self._http = httpx.AsyncClient(base_url=base_url, timeout=timeout)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _run(self, call: _Call[T]) -> T:
        for attempt in range(self.retry.attempts):
            last = attempt + 1 == self.retry.attempts
            try:
                resp = await self._http.request(**self._request(call))
            except httpx.TransportError as exc:
                if last or not call.retry_error(exc):
                    raise self._give_up(call, exc) from exc
                await asyncio.sleep(self.retry.delay(attempt))
                continue
            if not last and call.retry_status(resp.status_code):
                await asyncio.sleep(self.retry.delay(attempt, resp.headers.get("retry-after")))
                continue
            return call.finish(resp, retried=attempt > 0)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def predict(self, features: Features, model: str | None = None) -> Prediction:
        """See :meth:`Client.predict`."""
        return await self._run(_Calls.predict(features, model))

    async def feedback(self, decision_id: str, click: bool, *, wait: bool = False) -> FeedbackResult:
        """See :meth:`Client.feedback`."""
        return await self._run(_Calls.feedback(decision_id, click, wait))

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
        learner: str,
        *,
        params: Mapping[str, Any] | None = None,
        n_features: int | None = None,
        hashing_bits: int | None = None,
        labels: Sequence[str] | None = None,
        n_labels: int | None = None,
        seed: int | None = None,
        reward_window_seconds: float | None = None,
        default_reward: str | None = None,
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
