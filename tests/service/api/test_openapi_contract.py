"""The documented OpenAPI contract and the served app cannot drift apart.

``POST /predict`` and ``POST /feedback`` are served by plain Starlette routes put ahead of the
APIRoutes that only document them (service.api.app), so nothing in FastAPI ties the two together.
These tests do: the fast routes run the documented endpoints and every documented operation is
served by its own route; every request example of the document (or a body built from the pydantic
model where an operation has none) is sent to the app, and every answer, errors included, must have
a documented status and validate (jsonschema, ``$ref`` resolved in the whole document) against the
schema documented for that status.

Answers that take a special app are reached on one of their own: 403 on an app with API keys but
no admin key, 413 on an app with a small ``max_body_bytes``, 503 on an app whose Redis store goes
down for real (its private redis-server is killed mid-test), and model placement's answers (421,
the placement routes) on two apps of replica groups a and b sharing a private prefix of the
session's Redis.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012
from starlette.routing import BaseRoute, Route

from lab.cluster import RedisServer
from service.api import predict
from service.api.app import create_app
from service.api.errors import RETRY_AFTER_SECONDS
from service.api.schemas import FeedbackRequest, PredictRequest
from service.config import ModelSpec, Settings
from service.evaluations import MAX_JOBS
from service.placement import MISDIRECTED_HEADER, rendezvous
from service.store.redis import RedisStore
from tests.conftest import redis_server_binary
from tests.service.api.conftest import app_client, make_app

pytestmark = pytest.mark.anyio

API_KEY = "contract-api-key"
ADMIN_KEY = "contract-admin-key"
DOC_URI = "urn:clickboost:openapi"
JSON = "application/json"
OCTETS = "application/octet-stream"
# ``Api.call(key=...)``: send the key the operation needs (the admin key for /models and /replicas).
OPERATION_KEY = "<the operation's key>"
ADMIN_PATHS = ("/models", "/replicas")
# The least ``max_body_bytes`` the settings allow: the app the 413 answers are reached on.
SMALL_BODY_LIMIT = 1024
#: A state import with the admin key is bounded by the model budget (the default learner's state
#: is 6 MiB), set this small for the body-limit apps.
STATE_BODY_LIMIT = 8 * 2**20
BODY_LIMITS = {"max_body_bytes": SMALL_BODY_LIMIT, "max_model_bytes": STATE_BODY_LIMIT}

# A valid body per JSON request body, built from the pydantic models, for operations that document
# no example (today all of them do; a new body without either example or entry here fails a test).
FALLBACK_BODIES: dict[tuple[str, str], Any] = {
    ("post", "/predict"): PredictRequest(model="fallback", features=[0.5, 1.0]).model_dump(mode="json"),
    ("post", "/feedback"): FeedbackRequest(decision_id="fallback", click=False).model_dump(mode="json"),
    ("put", "/models/{name}"): ModelSpec(learner="banditron", n_features=2, n_labels=2).model_dump(
        mode="json", exclude_none=True
    ),
    ("post", "/models/{name}/evaluations"): {"policies": ["uniform"], "runs": 2},
    ("post", "/models/{name}/rollout"): {"mode": "online"},
    ("post", "/models/{name}/placement"): {"groups": ["a"]},
    ("put", "/models/{name}/items/{item_id}"): {"features": {"brand": "acme"}},
    ("post", "/models/{name}/items"): [{"id": "sku-1", "features": {"brand": "acme"}}],
}

# Documented answers the apps here cannot give (a documentation drift, reported): none today. An
# answer counts as reached by any one of its causes: POST /models/{name}/placement's 409 is reached
# where placement is not configured, not as a move whose joining group has no live replica or does
# not catch up, which answers only after Runtime.move_model's 30 s timeout.
NOT_EXERCISED: set[tuple[str, str, int]] = set()

# Answers the app gives but the document does not list (a drift the other way, reported), reached on
# the store-down app: sent as they are, not checked against the document; the test fails once the
# document lists one (then drop it here and `Api.check` validates it like any other). `GET /metrics`
# refreshes its per-model gauges from the store, so it fails with the store's 503.
UNDOCUMENTED: set[tuple[str, str, int]] = set()


def pointer(*parts: str) -> str:
    """JSON pointer (RFC 6901) to ``parts``."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


class Contract:
    """The OpenAPI document, with validators that resolve ``$ref`` against the whole of it."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.registry: Registry[Any] = Registry().with_resource(DOC_URI, DRAFT202012.create_resource(doc))

    def operations(self) -> Iterator[tuple[str, str, dict[str, Any]]]:
        for path, ops in self.doc["paths"].items():
            for method, op in ops.items():
                yield method, path, op

    def op(self, method: str, path: str) -> dict[str, Any]:
        assert method in self.doc["paths"].get(path, {}), f"{method.upper()} {path} is not documented"
        return self.doc["paths"][path][method]

    def validator(self, *parts: str) -> Draft202012Validator:
        """A validator for the schema at ``parts`` inside the document."""
        return Draft202012Validator({"$ref": f"{DOC_URI}#{pointer(*parts)}"}, registry=self.registry)

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            assert schema["$ref"].startswith("#/"), schema["$ref"]
            schema = self.registry.resolver(DOC_URI).lookup(DOC_URI + schema["$ref"]).contents
        return schema

    def request_validator(self, method: str, path: str) -> Draft202012Validator:
        return self.validator("paths", path, method, "requestBody", "content", JSON, "schema")

    def json_request_bodies(self) -> list[tuple[str, str]]:
        return [
            (method, path)
            for method, path, op in self.operations()
            if JSON in op.get("requestBody", {}).get("content", {})
        ]

    def request_examples(self, method: str, path: str) -> list[Any]:
        """The documented examples of a JSON request body (schema and media type), else a fallback."""
        media = self.op(method, path)["requestBody"]["content"][JSON]
        schema = self.resolve(media["schema"])
        found = [
            *schema.get("examples", []),
            *([schema["example"]] if "example" in schema else []),
            *(e["value"] for e in media.get("examples", {}).values() if "value" in e),
            *([media["example"]] if "example" in media else []),
        ]
        if found:
            return found
        assert (method, path) in FALLBACK_BODIES, f"{method.upper()} {path}: no example and no fallback body"
        return [FALLBACK_BODIES[method, path]]

    def request_media(self, method: str, path: str) -> str | None:
        """The one media type of the operation's request body (None: it takes no body)."""
        content = self.op(method, path).get("requestBody", {}).get("content", {})
        if not content:
            return None
        (media,) = content
        assert media in (JSON, OCTETS), f"{method.upper()} {path}: request body {media}"
        return media

    def valid_request(self, method: str, path: str) -> dict[str, Any]:
        """``Api.call`` keywords with a body of the right form: the first documented JSON example,
        or some octets (the operation judges their content only after the checks before it)."""
        media = self.request_media(method, path)
        if media == JSON:
            return {"json": self.request_examples(method, path)[0]}
        if media == OCTETS:
            return {"content": b"octets", "headers": {"content-type": OCTETS}}
        return {}

    def sized_body(self, method: str, path: str, size: int) -> tuple[bytes, str]:
        """A request body of exactly ``size`` bytes and its media type: the first JSON example padded
        with trailing whitespace (the same document), or ``size`` octets."""
        media = self.request_media(method, path)
        if media == JSON:
            doc = json.dumps(self.request_examples(method, path)[0]).encode()
            assert len(doc) <= size, f"{method.upper()} {path}: the example is over {size} bytes"
            return doc.ljust(size), media
        assert media == OCTETS, f"{method.upper()} {path} takes no body"
        return b"\x00" * size, media

    def key_header(self, method: str, path: str) -> str | None:
        """The header of the API-key scheme the operation documents (None: no security)."""
        security = self.op(method, path).get("security", [])
        if not security:
            return None
        (scheme,) = security[0]
        spec = self.doc["components"]["securitySchemes"][scheme]
        assert (spec["type"], spec["in"]) == ("apiKey", "header"), spec
        return spec["name"]


class Api:
    """Sends requests for documented operations; checks every answer against the document."""

    def __init__(
        self, client: httpx.AsyncClient, contract: Contract, seen: set[tuple[str, str, int]] | None = None
    ) -> None:
        self.client = client
        self.contract = contract
        self.seen: set[tuple[str, str, int]] = set() if seen is None else seen

    async def call(
        self,
        method: str,
        path: str,
        *,
        expect: int | tuple[int, ...],
        name: str | None = None,
        query: str = "",
        headers: dict[str, str] | None = None,
        key: str | None = OPERATION_KEY,
        **kw: Any,
    ) -> tuple[httpx.Response, Any]:
        """``method path`` (``{name}`` filled in); the answer must be ``expect`` and as documented.

        A secured operation gets the key it needs, or ``key`` (None: no key header at all).
        """
        expected = (expect,) if isinstance(expect, int) else expect
        # {job}: an evaluation id; {decision_id}: a decision's; {item_id}: a catalog's item
        url = path.format(
            name=name,
            job=kw.pop("job", "0" * 32),
            decision_id=kw.pop("decision", "none"),
            item_id=kw.pop("item", "sku-1"),
        )
        url += query
        hdrs = dict(headers or {})
        header = self.contract.key_header(method, path)
        if header is not None and key is not None:
            own = ADMIN_KEY if path.startswith(ADMIN_PATHS) else API_KEY
            hdrs[header] = own if key == OPERATION_KEY else key
        r = await self.client.request(method.upper(), url, headers=hdrs, **kw)
        assert r.status_code in expected, f"{method.upper()} {url}: {r.status_code} {r.text}"
        return r, self.check(method, path, r)

    def check(self, method: str, path: str, r: httpx.Response) -> Any:
        """Assert ``r`` has a status documented for the operation and a body valid for it."""
        responses = self.contract.op(method, path)["responses"]
        code = str(r.status_code)
        assert code in responses, f"{method.upper()} {path}: {code} is not documented ({sorted(responses)})"
        self.seen.add((method, path, r.status_code))
        for name, spec in responses[code].get("headers", {}).items():
            value = r.headers.get(name)
            assert value is not None or not spec.get("required"), f"{method.upper()} {path} {code}: no {name}"
            if value is not None and spec.get("schema", {}).get("type") == "integer":
                assert value.isdigit(), f"{method.upper()} {path} {code}: {name}: {value!r}"
        content = responses[code].get("content")
        if content is None:
            if r.status_code == 204:
                assert r.content == b""
            return None
        media_type = r.headers["content-type"].split(";")[0].strip()
        assert media_type in content, f"{method.upper()} {path} {code}: {media_type} not in {list(content)}"
        if media_type != JSON:
            return r.content
        body = r.json()
        if "schema" in content[JSON]:
            v = self.contract.validator("paths", path, method, "responses", code, "content", JSON, "schema")
            errors = [f"{list(e.absolute_path)}: {e.message}" for e in v.iter_errors(body)]
            assert not errors, (
                f"{method.upper()} {path} {code}: body {body} violates the documented schema: {errors}"
            )
        return body


def make_contract_app(**settings: Any) -> FastAPI:
    return make_app(demo=True, api_keys=API_KEY, admin_key=ADMIN_KEY, **settings)


# The replica groups of the placement apps, each group's addresses as clients would reach them (never
# dialled: the apps run in process).
GROUPS = {"a": ["http://a1.test:8000", "http://a2.test:8000"], "b": ["http://b1.test:8000"]}


def make_placement_app(
    redis_url: str, group: str, prefix: str = "cb:", groups: dict[str, list[str]] = GROUPS
) -> FastAPI:
    """An app of replica group ``group`` of ``groups`` (one copy of each model) on a RedisStore of
    ``redis_url`` under ``prefix``: the apps made with one prefix share their models."""
    placement = {"replica_group": group, "replica_groups": groups, "placement_copies": 1}
    config = Settings(api_keys=API_KEY, admin_key=ADMIN_KEY, redis_url=redis_url, **placement)
    return create_app(config, store=RedisStore(redis_url, prefix=prefix))


@asynccontextmanager
async def api_for(app: FastAPI, seen: set[tuple[str, str, int]] | None = None) -> AsyncIterator[Api]:
    """An :class:`Api` on ``app`` (running), checked against the document the app serves; the
    answers it sees are added to ``seen`` when given."""
    async with app_client(app) as client:
        r = await client.get("/openapi.json")
        assert r.status_code == 200
        yield Api(client, Contract(r.json()), seen)


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async with api_for(make_contract_app()) as a:
        yield a


@asynccontextmanager
async def placement_apis(
    redis_url: str, seen: set[tuple[str, str, int]] | None = None
) -> AsyncIterator[tuple[Api, Api]]:
    """:class:`Api` on two placement apps, of groups a and b, on a private prefix of ``redis_url``."""
    prefix = f"test-{uuid.uuid4().hex}:"
    async with (
        api_for(make_placement_app(redis_url, "a", prefix), seen) as a,
        api_for(make_placement_app(redis_url, "b", prefix), seen) as b,
    ):
        yield a, b


# -- routes ----------------------------------------------------------------------------------------

FAST = {"/predict": predict.predict, "/feedback": predict.feedback}


def api_routes_in(route: BaseRoute) -> list[APIRoute]:
    """The APIRoutes ``route`` stands for: itself, or those of an included router (recent FastAPI
    keeps included routers as one entry of ``app.router.routes``, with prefixed route contexts)."""
    if isinstance(route, APIRoute):
        return [route]
    contexts = getattr(route, "effective_route_contexts", None)
    if contexts is None:
        return []
    return [c.original_route for c in contexts() if isinstance(c.original_route, APIRoute)]


def api_routes(app: FastAPI) -> list[tuple[int, APIRoute]]:
    """(index of its entry in ``app.router.routes``, route) for every documented APIRoute."""
    return [
        (i, r)
        for i, entry in enumerate(app.router.routes)
        for r in api_routes_in(entry)
        if r.include_in_schema
    ]


def test_fast_routes_run_the_documented_endpoints() -> None:
    app = make_app()
    routes = app.router.routes
    fast = {r.path: (i, r) for i, r in enumerate(routes) if type(r) is Route and r.path in FAST}
    assert set(fast) == set(FAST), f"fast routes: {sorted(fast)}"
    for path, (i, route) in fast.items():
        ((j, documented),) = [(j, r) for j, r in api_routes(app) if r.path_format == path]
        assert route.methods == documented.methods == {"POST"}, (route.methods, documented.methods)
        assert route.endpoint is documented.endpoint is FAST[path], (
            f"POST {path}: fast route runs {route.endpoint!r}, the APIRoute documents {documented.endpoint!r}"
        )
        assert i < j, f"POST {path}: the fast route is not ahead of the APIRoute"


class ScopeRecorder:
    """Outermost ASGI middleware keeping each request's scope, which routing fills in place
    (``endpoint``; ``route`` too when FastAPI dispatched to an APIRoute)."""

    def __init__(self, app: Any, sink: list[dict[str, Any]]) -> None:
        self.app = app
        self.sink = sink

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.sink.append(scope)
        await self.app(scope, receive, send)


async def test_every_documented_operation_is_served_by_its_endpoint() -> None:
    """Dispatch one request per documented operation: its own endpoint answers it, through the
    fast route for /predict and /feedback and through the APIRoute for everything else."""
    app = make_app()
    scopes: list[dict[str, Any]] = []
    app.add_middleware(ScopeRecorder, sink=scopes)
    routes = [r for _, r in api_routes(app)]
    documented = {(m.upper(), p) for p, ops in app.openapi()["paths"].items() for m in ops}
    assert documented == {(m, r.path_format) for r in routes for m in r.methods}
    async with app_client(app) as c:
        for method, path in sorted(documented):
            (owner,) = [r for r in routes if r.path_format == path and method in r.methods]
            r = await c.request(method, re.sub(r"\{[^}]+\}", "m", path))
            scope = scopes[-1]
            assert r.status_code != 405 and scope.get("endpoint") is owner.endpoint, (
                f"{method} {path} is documented for {owner.endpoint.__name__} "
                f"but answered {r.status_code} by {scope.get('endpoint')!r}"
            )
            if path in FAST and method == "POST":
                assert "route" not in scope, f"{method} {path} went through the APIRoute, not the fast route"
            else:
                assert scope.get("route") is owner


# -- the document's own examples -----------------------------------------------------------------


def test_documented_examples_satisfy_the_documented_schemas() -> None:
    contract = Contract(make_app().openapi())
    bodies = contract.json_request_bodies()
    assert set(bodies) == set(FALLBACK_BODIES), (
        "a JSON request body was added or removed: update FALLBACK_BODIES"
    )
    for method, path in bodies:
        v = contract.request_validator(method, path)
        for example in [*contract.request_examples(method, path), FALLBACK_BODIES[method, path]]:
            errors = [e.message for e in v.iter_errors(example)]
            assert not errors, f"{method.upper()} {path} example {example}: {errors}"
    checked = 0
    for name, schema in contract.doc["components"]["schemas"].items():
        for example in schema.get("examples", []):
            errors = [
                e.message for e in contract.validator("components", "schemas", name).iter_errors(example)
            ]
            assert not errors, f"{name} example {example}: {errors}"
            checked += 1
    assert checked >= 2  # ModelSpec, PredictResponse


# -- every documented operation, driven by the examples ----------------------------------------------


def features_for(config: dict[str, Any]) -> Any:
    """A context a model of this configuration accepts."""
    if config.get("n_features") is not None:
        return [0.5] * config["n_features"]
    return {"age": 31, "country": "fr", "mobile": True}


def spec_for(features: Any) -> dict[str, Any]:
    """A model specification that accepts ``features``."""
    shape = {"n_features": len(features)} if isinstance(features, list) else {"hashing_bits": 8}
    return {"learner": "banditron", "n_labels": 3, **shape}


async def ensure_model(api: Api, name: str, features: Any, actions: bool = False) -> dict[str, Any]:
    """The info of model ``name``, created to accept ``features`` (with candidate ``actions``: an
    action-feature model) if it does not exist yet."""
    r, body = await api.call("get", "/models/{name}", name=name, expect=(200, 404))
    if r.status_code == 200:
        return body
    spec = {"actions": "features", "hashing_bits": 10} if actions else spec_for(features)
    _, info = await api.call("put", "/models/{name}", name=name, json=spec, expect=201)
    return info


def label_names(config: dict[str, Any], example: dict[str, Any]) -> list[str]:
    if "actions" in example:  # an action-feature model: the request's candidates
        return [a["id"] for a in example["actions"]]
    return config.get("labels") or [str(i) for i in range(config["n_labels"])]


async def exercise_predict(api: Api) -> list[dict[str, Any]]:
    """Every documented predict example answered 200, on models provisioned to fit them."""
    examples = api.contract.request_examples("post", "/predict")
    assert {type(e["features"]) for e in examples} == {list, dict}  # dense and named both documented
    answers = []
    for example in examples:
        info = await ensure_model(api, example["model"], example["features"], "actions" in example)
        _, d = await api.call("post", "/predict", json=example, expect=200)
        assert d["model"] == example["model"]
        assert d["model_version"] == info["version"]
        assert d["label"] == label_names(info["config"], example)[d["label_index"]]
        assert d["probability"] == d["probabilities"][d["label_index"]]
        assert abs(sum(d["probabilities"]) - 1) < 1e-9
        answers.append(d)
    # a client-chosen decision id: taken once (409 naming it), deferred or not
    example = {**examples[0], "decision_id": "contract-page-1:slot.0", "defer": True}
    _, d = await api.call("post", "/predict", json=example, expect=200)
    _, taken = await api.call("post", "/predict", json={**example, "defer": False}, expect=409)
    assert example["decision_id"] in taken["detail"]
    answers.append(d)
    return answers


async def exercise_activate(api: Api) -> None:
    """A deferred decision: feedback held (200), activated (200, the held feedback learned), again
    (200); one not deferred (200); unknown (404); late (410); an id too long (422)."""
    path = "/decisions/{decision_id}/activate"
    predict_example = api.contract.request_examples("post", "/predict")[0]
    await ensure_model(api, predict_example["model"], predict_example["features"])
    _, d = await api.call("post", "/predict", json={**predict_example, "defer": True}, expect=200)
    _, held = await api.call(
        "post", "/feedback", json={"decision_id": d["decision_id"], "click": True}, expect=200
    )
    assert held["held"] is True and held["model_version"] is None
    _, on = await api.call("post", path, decision=d["decision_id"], query="?wait=true", expect=200)
    assert on["status"] == "activated" and on["learned"]["outcome"] == "click"
    _, again = await api.call("post", path, decision=d["decision_id"], expect=200)
    assert again["status"] == "already_active"
    _, plain = await api.call("post", "/predict", json=predict_example, expect=200)
    _, other = await api.call("post", path, decision=plain["decision_id"], expect=200)
    assert other["status"] == "not_deferred"
    _, unknown = await api.call("post", path, decision="no-such-decision", expect=404)
    assert "no-such-decision" in unknown["detail"]
    await api.call("post", path, decision="x" * 301, expect=422)
    short = {**spec_for(predict_example["features"]), "reward_window_seconds": 0.01}
    await api.call("put", "/models/{name}", name="short-window-defer", json=short, expect=201)
    late_context = {**predict_example, "model": "short-window-defer", "defer": True}
    _, late = await api.call("post", "/predict", json=late_context, expect=200)
    await anyio.sleep(0.05)
    _, gone = await api.call("post", path, decision=late["decision_id"], expect=410)
    assert late["decision_id"] in gone["detail"]
    await api.call("delete", "/models/{name}", name="short-window-defer", expect=204)


async def exercise_feedback(api: Api) -> None:
    """Each feedback example: on a real decision (200, then 409), literally (404), and late (410)."""
    op = api.contract.op("post", "/feedback")
    (wait,) = [p for p in op["parameters"] if p["in"] == "query"]
    assert wait["schema"]["type"] == "boolean"
    waiting = f"?{wait['name']}=true"
    predict_example = api.contract.request_examples("post", "/predict")[0]
    for example in api.contract.request_examples("post", "/feedback"):
        await ensure_model(api, predict_example["model"], predict_example["features"])
        _, d = await api.call("post", "/predict", json=predict_example, expect=200)
        real = {**example, "decision_id": d["decision_id"]}
        _, ok = await api.call("post", "/feedback", query=waiting, json=real, expect=200)
        click, reward = example.get("click"), example.get("reward")  # one of them (issue 38)
        assert ok["decision_id"] == d["decision_id"] and ok["click"] == click
        assert ok["reward"] == (float(click) if reward is None else reward)
        assert ok["model"] == d["model"] and ok["model_version"] > d["model_version"]
        _, info = await api.call("get", "/models/{name}", name=d["model"], expect=200)
        assert info["version"] >= ok["model_version"]  # `wait`: applied before the answer
        again = {**real, "reward": 1.0} if click is None else {**real, "click": not click}
        _, dup = await api.call("post", "/feedback", json=again, expect=409)
        first = dup["first_outcome"]
        assert first["outcome"] == ("reward" if click is None else "click" if click else "no_click")
        assert first["model_version"] == ok["model_version"] and d["decision_id"] in dup["detail"]
        _, unknown = await api.call("post", "/feedback", json=example, expect=404)
        assert example["decision_id"] in unknown["detail"] and unknown.get("first_outcome") is None

        short = {**spec_for(predict_example["features"]), "reward_window_seconds": 0.01}
        await api.call("put", "/models/{name}", name="short-window", json=short, expect=201)
        _, late = await api.call(
            "post", "/predict", json={**predict_example, "model": "short-window"}, expect=200
        )
        await anyio.sleep(0.05)
        _, gone = await api.call(
            "post", "/feedback", json={**example, "decision_id": late["decision_id"]}, expect=410
        )
        assert gone["first_outcome"]["outcome"] == "expired"
        await api.call("delete", "/models/{name}", name="short-window", expect=204)


async def exercise_models(api: Api) -> None:
    """Each ModelSpec example creates a fresh model, which is then used through every /models call."""
    for i, example in enumerate(api.contract.request_examples("put", "/models/{name}")):
        name = f"contract-example-{i}"
        await api.call("get", "/models/{name}", name=name, expect=404)
        _, info = await api.call("put", "/models/{name}", name=name, json=example, expect=201)
        assert info["name"] == name and info["version"] == 0
        assert {k: info["config"][k] for k in example if k != "params"} == {
            k: v for k, v in example.items() if k != "params"
        }
        # stored with every parameter: the given ones, the rest at the learner's defaults of today
        assert info["config"]["params"].items() >= example.get("params", {}).items()
        assert info["counts"] == {
            "decisions": 0,
            "clicks": 0,
            "no_clicks": 0,
            "expired": 0,
            "pending": 0,
            "ctr": None,
            "graded": 0,
            "reward_sum": 0.0,
            "mean_reward": None,
            "deferred": 0,
            "activated": 0,
            "dropped_unactivated": 0,
        }
        _, got = await api.call("get", "/models/{name}", name=name, expect=200)
        assert got == info
        _, listing = await api.call("get", "/models", expect=200)
        assert info in listing["models"] and info["config"]["learner"] in listing["learners"]
        _, taken = await api.call("put", "/models/{name}", name=name, json=example, expect=409)
        assert name in taken["detail"]

        _, d = await api.call(
            "post", "/predict", json={"model": name, "features": features_for(example)}, expect=200
        )
        feedback = {"decision_id": d["decision_id"], "click": True}
        await api.call("post", "/feedback", query="?wait=true", json=feedback, expect=200)
        _, learned = await api.call("get", "/models/{name}", name=name, expect=200)
        assert learned["version"] == 1 and learned["counts"]["clicks"] == 1
        r, state = await api.call("get", "/models/{name}/state", name=name, expect=200)
        assert r.headers["x-checksum"] == learned["checksum"] != info["checksum"]
        _, log = await api.call("get", "/models/{name}/log", name=name, expect=200)
        (logged,) = [json.loads(line) for line in log.splitlines()]
        assert (logged["decision_id"], logged["outcome"]) == (d["decision_id"], "click")
        _, dsjson = await api.call("get", "/models/{name}/log", name=name, query="?format=dsjson", expect=200)
        assert json.loads(dsjson)["EventId"] == d["decision_id"]
        evaluation = {"policies": ["uniform"], "runs": 2}
        _, job = await api.call("post", "/models/{name}/evaluations", name=name, json=evaluation, expect=202)
        _, seen_job = await api.call(
            "get", "/models/{name}/evaluations/{job}", name=name, job=job["id"], expect=200
        )
        assert seen_job["id"] == job["id"]
        await api.call("get", "/models/{name}/evaluations/{job}", name=name, expect=404)  # unknown id
        _, stats = await api.call("get", "/models/{name}/stats", name=name, expect=200)
        assert stats["counts"] == learned["counts"] and stats["version"] == learned["version"]
        assert stats["evaluations"][0]["id"] == job["id"]
        bad = {"policies": ["nosuchlearner"]}
        await api.call("post", "/models/{name}/evaluations", name=name, json=bad, expect=422)
        jobs = [job["id"]]
        for _ in range(MAX_JOBS):  # queued behind the first until the replica's cap: 429
            r, queued = await api.call(
                "post", "/models/{name}/evaluations", name=name, json=evaluation, expect=(202, 429)
            )
            if r.status_code == 429:
                break
            jobs.append(queued["id"])
        assert r.status_code == 429
        for job_id in jobs:
            await api.call("delete", "/models/{name}/evaluations/{job}", name=name, job=job_id, expect=204)
        await api.call("delete", "/models/{name}/evaluations/{job}", name=name, job=jobs[0], expect=404)
        _, reset = await api.call("post", "/models/{name}/reset", name=name, expect=200)
        assert reset["checksum"] == info["checksum"] and reset["counts"]["decisions"] == 1
        _, switched = await api.call(
            "post", "/models/{name}/rollout", name=name, json={"mode": "logging"}, expect=200
        )
        assert switched["rollout"]["mode"] == "logging" and switched["version"] == 3
        await api.call("post", "/models/{name}/rollout", name=name, json={"mode": "no"}, expect=422)
        _, imported = await api.call(
            "put",
            "/models/{name}/state",
            name=name,
            content=state,
            headers={"content-type": "application/octet-stream"},
            expect=200,
        )
        assert imported["name"] == name and imported["checksum"] == learned["checksum"]
        _, bad = await api.call(
            "put",
            "/models/{name}/state",
            name=name,
            content=b"not a state",
            headers={"content-type": "application/octet-stream"},
            expect=422,
        )
        assert bad["detail"]
        await api.call("delete", "/models/{name}", name=name, expect=204)
        for method, path in [
            ("get", "/models/{name}/state"),
            ("post", "/models/{name}/reset"),
            ("get", "/models/{name}/log"),
            ("get", "/models/{name}/stats"),
        ]:
            await api.call(method, path, name=name, expect=404)
        await api.call("post", "/models/{name}/evaluations", name=name, json=evaluation, expect=404)
        await api.call("post", "/models/{name}/rollout", name=name, json={"mode": "online"}, expect=404)
        await api.call(
            "put",
            "/models/{name}/state",
            name=name,
            content=state,
            headers={"content-type": "application/octet-stream"},
            expect=404,
        )
        await api.call("delete", "/models/{name}", name=name, expect=404)


async def exercise_items(api: Api) -> None:
    """A catalog (issue 54): the documented examples registered (and JSON lines), read, paged and
    removed (200); an unknown model or item 404; a model with fixed labels 422; a bulk that is not
    JSON 400, not JSON by its media type 415, a bad item 422; one item's malformed body 400."""
    one, bulk = "/models/{name}/items/{item_id}", "/models/{name}/items"
    spec = {"actions": "features", "hashing_bits": 10}
    await api.call("put", "/models/{name}", name="catalog", json=spec, expect=201)
    for example in api.contract.request_examples("put", one):
        _, w = await api.call("put", one, name="catalog", item="one", json=example, expect=200)
        assert (w["model"], w["written"]) == ("catalog", 1)
    (example,) = api.contract.request_examples("post", bulk)
    _, w = await api.call("post", bulk, name="catalog", json=example, expect=200)
    assert w["written"] == len(example) and w["items"] == len(example) + 1
    lines = "".join(json.dumps({**item, "id": f"line-{item['id']}"}) + "\n" for item in example)
    ndjson = {"content-type": "application/x-ndjson"}
    _, w = await api.call("post", bulk, name="catalog", content=lines, headers=ndjson, expect=200)
    assert w["items"] == 2 * len(example) + 1
    _, got = await api.call("get", one, name="catalog", item=example[0]["id"], expect=200)
    assert got["id"] == example[0]["id"]
    _, page = await api.call("get", bulk, name="catalog", query="?limit=2", expect=200)
    assert page["total"] == w["items"] and len(page["items"]) == 2 and page["next_offset"] == 2
    _, gone = await api.call("delete", one, name="catalog", item="one", expect=200)
    assert gone["items"] == w["items"] - 1 and gone["version"] > w["version"]
    for method, kw in [("get", {}), ("delete", {})]:
        _, body = await api.call(method, one, name="catalog", item="one", expect=404, **kw)
        assert "'one' is not in the catalog" in body["detail"]
    requests = [
        ("put", one, {"json": {"features": {}}}),
        ("post", bulk, {"json": [{"id": "a"}]}),
        ("get", one, {}),
        ("get", bulk, {}),
        ("delete", one, {}),
    ]
    for method, path, kw in requests:
        await api.call(method, path, name="no-such-model", expect=404, **kw)
        _, body = await api.call(method, path, name="demo", expect=422, **kw)
        assert "fixed labels" in body["detail"]
    await api.call("post", bulk, name="catalog", **raw(b'[{"id": '), expect=400)
    await api.call(
        "post", bulk, name="catalog", content=b"[]", headers={"content-type": "text/plain"}, expect=415
    )
    _, bad = await api.call("post", bulk, name="catalog", json=[{"id": "a", "features": []}], expect=422)
    assert bad["detail"].startswith("items.0.features")
    await api.call("put", one, name="catalog", **raw(b'{"features": '), expect=400)
    await api.call("delete", "/models/{name}", name="catalog", expect=204)


async def exercise_operations(api: Api) -> None:
    _, health = await api.call("get", "/healthz", expect=200)
    assert health == {"status": "ok"}
    _, ready = await api.call("get", "/readyz", expect=200)
    assert ready["status"] == "ready"
    r, _ = await api.call("get", "/metrics", expect=200)
    assert r.text
    _, replicas = await api.call("get", "/replicas", expect=200)
    assert replicas["answered_by"] in [r["id"] for r in replicas["replicas"]]


async def exercise_placement_unconfigured(api: Api) -> None:
    """Without replica groups, both placement routes answer 409 naming the missing setting."""
    placement = "/models/{name}/placement"
    for method, kw in [("get", {}), ("post", {"json": {"groups": ["a"]}})]:
        _, body = await api.call(method, placement, name="demo", expect=409, **kw)
        assert "CLICKBOOST_REPLICA_GROUPS" in body["detail"]


def held_requests(name: str, features: list[float], state: bytes) -> dict[tuple[str, str], dict[str, Any]]:
    """A request the replicas holding model ``name`` would serve, for every operation answering 421
    elsewhere. ``GET /models/{name}`` first: it reads the placement from the store, so that a
    replica the model was just moved away from stops serving it at once."""
    return {
        ("get", "/models/{name}"): {},
        ("post", "/predict"): {"json": {"model": name, "features": features}},
        ("put", "/models/{name}"): {"json": spec_for(features)},
        ("post", "/models/{name}/reset"): {},
        ("post", "/models/{name}/rollout"): {"json": {"mode": "logging"}},
        ("get", "/models/{name}/state"): {},
        ("put", "/models/{name}/state"): {"content": state, "headers": {"content-type": OCTETS}},
        ("get", "/models/{name}/log"): {},
        ("post", "/models/{name}/evaluations"): {"json": {"policies": ["uniform"]}},
        ("get", "/models/{name}/stats"): {},
        ("put", "/models/{name}/items/{item_id}"): {"json": {"features": {"brand": "acme"}}},
        ("post", "/models/{name}/items"): {"json": [{"id": "sku-1", "features": {}}]},
        ("get", "/models/{name}/items/{item_id}"): {},
        ("get", "/models/{name}/items"): {},
        ("delete", "/models/{name}/items/{item_id}"): {},
    }


async def exercise_misdirected(
    api: Api, group: str, name: str, holder: str, requests: dict[tuple[str, str], dict[str, Any]]
) -> None:
    """On ``api``, a replica of ``group``, which does not hold ``name``: every operation documenting
    421 answers it, naming ``holder``'s addresses in the body and the header."""
    assert set(requests) == {(m, p) for m, p, op in api.contract.operations() if "421" in op["responses"]}
    for (method, path), kw in requests.items():
        r, body = await api.call(method, path, name=name, expect=421, **kw)
        assert body["groups"] == {holder: GROUPS[holder]}, body
        assert (body["model"], body["replica_group"]) == (name, group) and name in body["detail"]
        assert r.headers[MISDIRECTED_HEADER] == ", ".join(GROUPS[holder])


async def exercise_placement(a: Api, b: Api) -> None:
    """Replicas of groups a and b sharing a store, one copy of each model: a model of group a is
    created through a (through b: 421, nothing created); on b every operation documenting 421 answers
    it, while feedback and the placement routes are served anywhere (404 for an unknown model, 422
    for an unknown group); a move to b is answered once b caught up, then b serves the model with
    nothing lost, and a answers 421."""
    name = next(n for n in (f"placed-{i}" for i in range(64)) if rendezvous(n, list(GROUPS), 1) == ["a"])
    features = [0.5, 1.0]
    placement = "/models/{name}/placement"
    await b.call("put", "/models/{name}", name=name, json=spec_for(features), expect=421)
    await a.call("get", "/models/{name}", name=name, expect=404)  # nothing was created
    await a.call("put", "/models/{name}", name=name, json=spec_for(features), expect=201)
    _, d = await a.call("post", "/predict", json={"model": name, "features": features}, expect=200)
    _, state = await a.call("get", "/models/{name}/state", name=name, expect=200)
    requests = held_requests(name, features, state)
    await exercise_misdirected(b, "b", name, "a", requests)
    await b.call("post", "/feedback", json={"decision_id": d["decision_id"], "click": True}, expect=200)
    for api, group in [(a, "a"), (b, "b")]:
        _, where = await api.call("get", placement, name=name, expect=200)
        assert where == {"model": name, "groups": {"a": GROUPS["a"]}, "joining": [], "replica_group": group}
        await api.call("get", placement, name="no-such-model", expect=404)
        await api.call("post", placement, name="no-such-model", json={"groups": ["b"]}, expect=404)
        await api.call("post", placement, name=name, json={"groups": ["c"]}, expect=422)
    _, learned = await a.call("get", "/models/{name}", name=name, expect=200)  # the feedback applied
    assert (learned["version"], learned["counts"]["clicks"]) == (1, 1)

    _, moved = await a.call("post", placement, name=name, json={"groups": ["b"]}, expect=200)
    assert moved == {"model": name, "groups": {"b": GROUPS["b"]}, "joining": [], "replica_group": "a"}
    _, there = await b.call("get", "/models/{name}", name=name, expect=200)
    assert (there["version"], there["checksum"]) == (learned["version"], learned["checksum"])
    await exercise_misdirected(a, "a", name, "b", requests)
    await a.call("delete", "/models/{name}", name=name, expect=204)  # any replica
    await b.call("get", placement, name=name, expect=404)


def raw(body: bytes) -> dict[str, Any]:
    return {"content": body, "headers": {"content-type": JSON}}


# (method, path, request kwargs, expected status, whether the documented request schema rejects it too)
BAD_REQUESTS: list[tuple[str, str, dict[str, Any], int, bool]] = [
    ("post", "/predict", {"json": {"features": "x"}}, 422, True),
    ("post", "/predict", {"json": {"model": "demo", "features": {"age": 31}, "extra": 1}}, 422, True),
    ("post", "/predict", {"json": {"model": "demo", "features": [0.5, 1.0]}}, 422, False),  # dense to hashed
    ("post", "/predict", {"json": {"model": "nope", "features": [0.5]}}, 404, False),
    ("post", "/predict", raw(b'{"features": [0.5,'), 400, True),
    ("post", "/predict", raw(b""), 400, True),
    ("post", "/feedback", {"json": {"decision_id": "x", "click": 1}}, 422, True),
    ("post", "/feedback", {"json": {"decision_id": "", "click": True}}, 422, True),
    ("post", "/feedback", raw(b"[1, 2"), 400, True),
    ("put", "/models/{name}", {"json": {"learner": "banditron", "n_labels": 3}}, 422, False),
    (
        "put",
        "/models/{name}",
        {"json": {"learner": "perceptron", "n_features": 3, "n_labels": 2}},
        422,
        False,
    ),
    ("put", "/models/{name}", {"json": {"learner": "banditron", "n_features": 0, "n_labels": 3}}, 422, True),
    ("put", "/models/{name}", raw(b'{"learner": "banditron",'), 400, True),
    ("put", "/models/{name}", raw(b""), 400, True),
    ("post", "/models/{name}/evaluations", raw(b'{"policies": ["uniform"'), 400, True),
    ("post", "/models/{name}/rollout", raw(b'{"mode": '), 400, True),
    ("post", "/models/{name}/placement", raw(b'{"groups": ['), 400, True),
    # The state import takes octets, so its 400 is the empty body (a body labelled JSON that does not
    # parse gets 400 too, but JSON is not what it documents).
    ("put", "/models/{name}/state", {"content": b"", "headers": {"content-type": OCTETS}}, 400, False),
]


async def exercise_bad_requests(api: Api) -> None:
    for method, path, kw, status, schema_rejects in BAD_REQUESTS:
        if schema_rejects and "json" in kw:
            assert not api.contract.request_validator(method, path).is_valid(kw["json"]), kw
        _, body = await api.call(method, path, name="fresh-bad", expect=status, **kw)
        assert body["detail"] and isinstance(body["detail"], str)
    await api.call("get", "/models/{name}", name="fresh-bad", expect=404)  # nothing was created


async def exercise_unauthorised(api: Api) -> None:
    """Every secured operation, asked with a body it would accept: no key, a wrong key and, on /models,
    the plain API key are all answered 401 before anything happens (the demo model is untouched)."""
    _, before = await api.call("get", "/models/{name}", name="demo", expect=200)
    secured = [(m, p) for m, p, _ in api.contract.operations() if api.contract.key_header(m, p)]
    assert {p for _, p in secured} >= {"/predict", "/feedback", "/models", "/models/{name}"}
    for method, path in secured:
        request = api.contract.valid_request(method, path)
        for key in [None, "wrong-key", *([API_KEY] if path.startswith(ADMIN_PATHS) else [])]:
            r, body = await api.call(method, path, name="demo", key=key, expect=401, **request)
            assert "X-API-Key" in body["detail"] and r.headers["www-authenticate"] == "APIKey"
    _, after = await api.call("get", "/models/{name}", name="demo", expect=200)
    assert after == before


async def exercise_admin_closed(api: Api) -> None:
    """On an app with API keys but no admin key, every operation documenting 403 (the /models routes)
    is closed whatever the key, naming the missing setting; /predict still serves API key holders."""
    closed = [(m, p) for m, p, op in api.contract.operations() if "403" in op["responses"]]
    assert {p for _, p in closed} >= {"/models", "/models/{name}"}
    for method, path in closed:
        request = api.contract.valid_request(method, path)
        for key in [API_KEY, None, "wrong-key"]:
            _, body = await api.call(method, path, name="demo", key=key, expect=403, **request)
            assert "CLICKBOOST_ADMIN_KEY" in body["detail"]
    await api.call("post", "/predict", json=api.contract.request_examples("post", "/predict")[0], expect=200)


async def exercise_bad_names(api: Api) -> None:
    """Every operation on ``/models/{name}``, with a name that is not one: 422, ``ErrorBody``."""
    named = [(m, p) for m, p, _ in api.contract.operations() if "{name}" in p]
    assert len(named) >= 6
    for method, path in named:
        request = api.contract.valid_request(method, path)
        _, body = await api.call(method, path, name="a b", expect=422, **request)
        assert ["path", "name"] in [e["loc"] for e in body["errors"]] and "path.name" in body["detail"]


async def chunks(data: bytes, size: int = 256) -> AsyncIterator[bytes]:
    """``data`` streamed in pieces: sent chunked, without a Content-Length."""
    for i in range(0, len(data), size):
        yield data[i : i + size]


STATE_SIZED = {("put", "/models/{name}/state"), ("post", "/models/{name}/items")}


async def exercise_body_limit(api: Api, limit: int, state_limit: int) -> None:
    """On an app whose ``max_body_bytes`` is ``limit`` (``max_model_bytes`` ``state_limit``), every
    operation taking a body: ``limit`` bytes pass (``state_limit`` for a state import with the admin
    key), one byte more is 413, declared in Content-Length (refused before reading) or streamed
    chunked (cut while reading)."""
    with_body = sorted((m, p) for m, p, op in api.contract.operations() if "requestBody" in op)
    assert with_body == sorted((m, p) for m, p, op in api.contract.operations() if "413" in op["responses"])
    for method, path in with_body:
        # a state import and a catalog's bulk take up to the model budget with the admin key
        most = state_limit if (method, path) in STATE_SIZED else limit
        body, media = api.contract.sized_body(method, path, most)
        other = tuple(int(c) for c in api.contract.op(method, path)["responses"] if c != "413")
        headers = {"content-type": media}
        await api.call(method, path, name="demo", content=body, headers=headers, expect=other)
        over, _ = api.contract.sized_body(method, path, most + 1)
        for content in (over, chunks(over)):
            _, refused = await api.call(
                method, path, name="demo", content=content, headers=headers, expect=413
            )
            assert refused["detail"].startswith("body too large") and str(most) in refused["detail"]


async def exercise_store_down(tmp_path: Path, seen: set[tuple[str, str, int]] | None = None) -> None:
    """An app on a RedisStore whose redis-server is killed (SIGKILL, for real): every operation that
    needs the store answers 503, ``ErrorBody`` and ``Retry-After``, and /readyz 503; /predict, which
    records its decision once the store is back (its 503 is not documented), still answers 200. The
    app is of a replica group (the only one, holding every model), so that the placement routes,
    which read the store, are reached too."""
    server = RedisServer(tmp_path, binary=redis_server_binary())
    server.start()
    try:
        app = make_placement_app(server.url, "a", groups={"a": GROUPS["a"]})
        async with api_for(app, seen) as api:
            features = [0.5, 1.0]
            context = {"model": "m", "features": features}
            await api.call("put", "/models/{name}", name="m", json=spec_for(features), expect=201)
            _, d = await api.call("post", "/predict", json=context, expect=200)
            _, state = await api.call("get", "/models/{name}/state", name="m", expect=200)
            server.kill()

            await api.call("post", "/predict", json=context, expect=200)  # recorded once it is back
            needs_store: list[tuple[str, str, str, dict[str, Any]]] = [
                ("post", "/feedback", "m", {"json": {"decision_id": d["decision_id"], "click": True}}),
                ("post", "/decisions/{decision_id}/activate", "m", {"decision": d["decision_id"]}),
                ("get", "/models", "m", {}),
                ("put", "/models/{name}", "new", {"json": spec_for(features)}),
                ("get", "/models/{name}", "m", {}),
                ("get", "/models/{name}/state", "m", {}),
                ("get", "/models/{name}/log", "m", {}),
                ("post", "/models/{name}/evaluations", "m", {"json": {"policies": ["uniform"]}}),
                ("post", "/models/{name}/reset", "m", {}),
                ("post", "/models/{name}/rollout", "m", {"json": {"mode": "apprentice"}}),
                ("get", "/models/{name}/placement", "m", {}),
                ("post", "/models/{name}/placement", "m", {"json": {"groups": ["a"]}}),
                ("put", "/models/{name}/state", "m", {"content": state, "headers": {"content-type": OCTETS}}),
                ("delete", "/models/{name}", "m", {}),
                ("get", "/models/{name}/stats", "m", {}),
                ("get", "/replicas", "m", {}),
                ("get", "/metrics", "m", {}),
                ("put", "/models/{name}/items/{item_id}", "m", {"json": {"features": {}}}),
                ("post", "/models/{name}/items", "m", {"json": [{"id": "sku-1", "features": {}}]}),
                ("get", "/models/{name}/items/{item_id}", "m", {}),
                ("get", "/models/{name}/items", "m", {}),
                ("delete", "/models/{name}/items/{item_id}", "m", {}),
            ]
            for method, path, name, kw in needs_store:
                r, body = await api.call(method, path, name=name, expect=503, **kw)
                assert r.headers["retry-after"] == str(RETRY_AFTER_SECONDS)
                assert body["detail"].startswith("shared store unavailable")
            r, _ = await api.call("get", "/readyz", expect=503)
            assert r.json()["status"] == "store unreachable"

            for method, path, status in UNDOCUMENTED:
                responses = api.contract.op(method, path)["responses"]
                assert str(status) not in responses, (
                    f"{method.upper()} {path} {status}: drop from UNDOCUMENTED"
                )
                r = await api.client.request(method.upper(), path)
                assert r.status_code == status, f"{method.upper()} {path}: {r.status_code} {r.text}"
                assert r.headers["retry-after"] == str(RETRY_AFTER_SECONDS)
    finally:
        server.stop()


async def test_predict_examples(api: Api) -> None:
    assert len(await exercise_predict(api)) >= 2


async def test_feedback_examples(api: Api) -> None:
    await exercise_feedback(api)
    assert {s for m, p, s in api.seen if p == "/feedback"} == {200, 404, 409, 410}


async def test_activate(api: Api) -> None:
    await exercise_activate(api)
    path = "/decisions/{decision_id}/activate"
    assert {s for m, p, s in api.seen if p == path} == {200, 404, 410, 422}


async def test_model_spec_examples(api: Api) -> None:
    await exercise_models(api)


async def test_items(api: Api) -> None:
    await exercise_items(api)
    assert {s for m, p, s in api.seen if "/items" in p} == {200, 400, 404, 415, 422}


async def test_bad_request_answers_match_the_documented_error_schema(api: Api) -> None:
    _, body = await api.call("post", "/predict", json={"features": "x"}, expect=422)
    assert body["errors"][0]["loc"] == ["body", "features"]
    assert body["errors"][0]["type"] == "features_type" and "features" in body["detail"]
    schema = api.contract.op("post", "/predict")["responses"]["422"]["content"][JSON]["schema"]
    assert schema == {"$ref": "#/components/schemas/ErrorBody"}
    error_body = api.contract.validator(
        "paths", "/predict", "post", "responses", "422", "content", JSON, "schema"
    )
    assert not error_body.is_valid({"detail": [{"loc": ["body"], "msg": "m", "type": "t"}]})  # not vacuous
    await exercise_bad_requests(api)
    assert {s for m, p, s in api.seen if p == "/predict"} == {400, 404, 422}
    assert {(m, s) for m, p, s in api.seen if p == "/models/{name}/state"} >= {("put", 400)}


async def test_unauthorised_answers(api: Api) -> None:
    await exercise_unauthorised(api)
    assert {s for _, _, s in api.seen} == {200, 401}


async def test_admin_routes_closed_without_an_admin_key() -> None:
    async with api_for(make_app(demo=True, api_keys=API_KEY)) as api:
        await exercise_admin_closed(api)
        assert {s for _, _, s in api.seen} == {200, 403}


async def test_bad_model_names(api: Api) -> None:
    await exercise_bad_names(api)
    assert {s for _, _, s in api.seen} == {422}


async def test_body_limit() -> None:
    async with api_for(make_contract_app(**BODY_LIMITS)) as api:
        await exercise_body_limit(api, SMALL_BODY_LIMIT, STATE_BODY_LIMIT)
        assert {(m, p) for m, p, s in api.seen if s == 413} == {
            ("post", "/predict"),
            ("post", "/feedback"),
            ("put", "/models/{name}"),
            ("put", "/models/{name}/state"),
            ("post", "/models/{name}/evaluations"),
            ("post", "/models/{name}/rollout"),
            ("post", "/models/{name}/placement"),
            ("put", "/models/{name}/items/{item_id}"),
            ("post", "/models/{name}/items"),
        }


async def test_store_down(tmp_path: Path) -> None:
    seen: set[tuple[str, str, int]] = set()
    await exercise_store_down(tmp_path, seen)
    assert not seen & NOT_EXERCISED
    assert {m for m, p, s in seen if p == "/models/{name}/placement" and s == 503} == {"get", "post"}


async def test_placement_unconfigured(api: Api) -> None:
    await exercise_placement_unconfigured(api)
    assert api.seen == {(m, "/models/{name}/placement", 409) for m in ("get", "post")}


async def test_placement(redis_url: str) -> None:
    seen: set[tuple[str, str, int]] = set()
    async with placement_apis(redis_url, seen) as (a, b):
        await exercise_placement(a, b)
    schema = a.contract.validator("paths", "/predict", "post", "responses", "421", "content", JSON, "schema")
    assert not schema.is_valid({"detail": "elsewhere"})  # not vacuous: where it is held is documented
    assert {(m, p) for m, p, s in seen if s == 421} == {
        (m, p) for m, p, op in a.contract.operations() if "421" in op["responses"]
    }
    assert {(m, s) for m, p, s in seen if p == "/models/{name}/placement"} == {
        ("get", 200),
        ("get", 404),
        ("post", 200),
        ("post", 404),
        ("post", 422),
    }


async def test_every_documented_answer_is_exercised(tmp_path: Path, redis_url: str) -> None:
    """All of the above, on the contract app and the apps for the answers it cannot give (no admin
    key, small bodies, store down, replica groups): every documented operation and status is reached
    (but for NOT_EXERCISED), and nothing else."""
    seen: set[tuple[str, str, int]] = set()
    async with api_for(make_contract_app(), seen) as api:
        await exercise_predict(api)
        await exercise_feedback(api)
        await exercise_activate(api)
        await exercise_models(api)
        await exercise_items(api)
        await exercise_operations(api)
        await exercise_bad_requests(api)
        await exercise_unauthorised(api)
        await exercise_bad_names(api)
        await exercise_placement_unconfigured(api)
        contract = api.contract
    async with api_for(make_app(demo=True, api_keys=API_KEY), seen) as no_admin:
        assert no_admin.contract.doc == contract.doc
        await exercise_admin_closed(no_admin)
    async with api_for(make_contract_app(**BODY_LIMITS), seen) as small:
        assert small.contract.doc == contract.doc
        await exercise_body_limit(small, SMALL_BODY_LIMIT, STATE_BODY_LIMIT)
    async with placement_apis(redis_url, seen) as (a, b):
        assert a.contract.doc == b.contract.doc == contract.doc
        await exercise_placement(a, b)
    await exercise_store_down(tmp_path, seen)
    documented = {
        (method, path, int(code)) for method, path, op in contract.operations() for code in op["responses"]
    }
    assert documented >= NOT_EXERCISED, "a known gap is gone: drop it from NOT_EXERCISED"
    reached = seen & NOT_EXERCISED
    assert not reached, f"reached after all: drop {sorted(reached)} from NOT_EXERCISED"
    missing = documented - NOT_EXERCISED - seen
    assert not missing, f"documented but never exercised: {sorted(missing)}"
    assert seen <= documented
