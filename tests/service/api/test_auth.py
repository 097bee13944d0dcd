"""Auth fails closed (issue 18): once any key is configured, no route that changes or exposes a
model is served without the right key, whatever combination of keys is set."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from service.api.auth import _matches
from tests.service.api.conftest import app_client, make_app, uvicorn_server

SPEC = {"learner": "banditron", "n_features": 3, "n_labels": 2}
STATE_ROUTES = [("get", "/models"), ("get", "/models/m"), ("get", "/models/m/state")]
WRITE_ROUTES = [("put", "/models/other"), ("post", "/models/m/reset"), ("delete", "/models/m")]


async def _admin_answers(client: httpx.AsyncClient, key: str | None) -> dict[tuple[str, str], int]:
    headers = {"X-API-Key": key} if key else {}
    out = {}
    for method, path in STATE_ROUTES + WRITE_ROUTES:
        body: dict[str, Any] = {"json": SPEC} if method == "put" else {}
        out[(method, path)] = (await client.request(method, path, headers=headers, **body)).status_code
    r = await client.put("/models/m/state", content=b"x", headers=headers)
    out[("put", "/models/m/state")] = r.status_code
    return out


async def _model_untouched(client: httpx.AsyncClient, key: str) -> None:
    """The model ``m`` exists, has its one learned event, and ``other`` was never created."""
    r = await client.get("/models", headers={"X-API-Key": key})
    assert r.status_code == 200
    info = {m["name"]: m for m in r.json()["models"]}
    assert set(info) == {"m"} and info["m"]["version"] == 1


async def _setup(client: httpx.AsyncClient, admin: str, api: str) -> None:
    assert (await client.put("/models/m", json=SPEC, headers={"X-API-Key": admin})).status_code == 201
    d = await client.post("/predict", json={"model": "m", "features": [1, 0, 0]}, headers={"X-API-Key": api})
    fb = {"decision_id": d.json()["decision_id"], "click": True}
    r = await client.post("/feedback?wait=true", json=fb, headers={"X-API-Key": api})
    assert r.status_code == 200


@pytest.mark.anyio
async def test_api_keys_without_admin_key_close_every_admin_route() -> None:
    app = make_app(api_keys="k1,k2", store="memory")
    async with app_client(app) as client:
        # no admin key to create the model with: seed it through the runtime, as a config file would
        from service.config import ModelSpec

        await app.state.runtime.create_model("m", ModelSpec.model_validate(SPEC))
        for key in (None, "k1", "anything"):
            answers = await _admin_answers(client, key)
            assert set(answers.values()) == {403}, (key, answers)
        r = await client.delete("/models/m")
        assert r.status_code == 403 and "CLICKBOOST_ADMIN_KEY" in r.json()["detail"]
        # /predict and /feedback still work with an API key, and the model is intact
        d = await client.post(
            "/predict", json={"model": "m", "features": [1, 0, 0]}, headers={"X-API-Key": "k2"}
        )
        assert d.status_code == 200
        assert (await client.post("/predict", json={"model": "m", "features": [1, 0, 0]})).status_code == 401
        assert app.state.runtime.models["m"].position == 0 and "other" not in app.state.runtime.models


@pytest.mark.anyio
async def test_admin_key_only_closes_predict_and_feedback_too() -> None:
    async with app_client(make_app(admin_key="root", store="memory")) as client:
        assert (await client.put("/models/m", json=SPEC)).status_code == 401
        await _setup(client, admin="root", api="root")
        body = {"model": "m", "features": [1, 0, 0]}
        assert (await client.post("/predict", json=body)).status_code == 401
        assert (await client.post("/predict", json=body, headers={"X-API-Key": "k1"})).status_code == 401
        for key in (None, "wrong"):
            assert set((await _admin_answers(client, key)).values()) == {401}
        await _model_untouched(client, "root")


@pytest.mark.anyio
async def test_both_keys_api_key_is_not_an_admin_key() -> None:
    async with app_client(make_app(api_keys="k1", admin_key="root", store="memory")) as client:
        await _setup(client, admin="root", api="k1")
        for key in (None, "k1", "root2"):
            assert set((await _admin_answers(client, key)).values()) == {401}, key
        await _model_untouched(client, "root")
        r = await client.get("/models/m/state", headers={"X-API-Key": "root"})
        assert r.status_code == 200 and r.headers["X-Model-Version"] == "1"
        # operations stay open
        for path in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
            assert (await client.get(path)).status_code == 200, path


@pytest.mark.anyio
async def test_no_keys_is_an_open_development_server() -> None:
    async with app_client(make_app(store="memory")) as client:
        await _setup(client, admin="", api="")
        assert (await client.delete("/models/m")).status_code == 204


def test_key_comparison() -> None:
    assert _matches("root", ["k1", "root"]) and not _matches("roo", ["root"]) and not _matches(None, ["x"])
    assert not _matches("", ["k1"]) and not _matches("root ", ["root"])


def test_live_server_refuses_delete_without_admin_key() -> None:
    """The issue's scenario: API keys set, no admin key, ``curl -X DELETE`` with no key."""
    with uvicorn_server({"CLICKBOOST_API_KEY": "k1", "CLICKBOOST_STORE": "memory"}, ("--demo",)) as url:
        r = httpx.delete(f"{url}/models/demo")
        assert r.status_code == 403 and "CLICKBOOST_ADMIN_KEY" in r.json()["detail"]
        for method, path in [
            ("post", "/models/demo/reset"),
            ("get", "/models/demo/state"),
            ("get", "/models"),
        ]:
            assert httpx.request(method, f"{url}{path}").status_code == 403
        r = httpx.post(f"{url}/predict", json={"features": {"a": 1}}, headers={"X-API-Key": "k1"})
        assert r.status_code == 200 and r.json()["model"] == "demo"  # still there, still serving
