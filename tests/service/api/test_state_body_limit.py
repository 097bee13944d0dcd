"""A state import may be as large as the model budget, for the admin key only (issue 50: the
default learner's exported state is 6 MiB, over CLICKBOOST_MAX_BODY_BYTES); every other body, and a
state import without the admin key, still meets CLICKBOOST_MAX_BODY_BYTES before a byte is read."""

from __future__ import annotations

import pytest

from tests.service.api.conftest import app_client, make_app

pytestmark = pytest.mark.anyio
ADMIN = {"X-API-Key": "admin-key"}


@pytest.mark.parametrize("keys", [{}, {"admin_key": "admin-key", "api_key": "user-key"}])
async def test_a_default_models_state_round_trips_over_the_body_limit(keys: dict[str, str]) -> None:
    headers = ADMIN if keys else {}
    async with app_client(make_app(max_body_bytes=1_000_000, **keys)) as c:
        r = await c.put("/models/m", json={"hashing_bits": 12, "labels": ["a", "b", "c"]}, headers=headers)
        assert r.status_code == 201, r.text
        r = await c.post("/predict?", json={"model": "m", "features": {"x": 1.5}}, headers=headers)
        await c.post(
            "/feedback?wait=true",
            json={"decision_id": r.json()["decision_id"], "click": True},
            headers=headers,
        )
        state = (await c.get("/models/m/state", headers=headers)).content
        assert len(state) > 1_000_000  # the default learner's table
        r = await c.put(
            "/models/m/state", content=state, headers={**headers, "content-type": "application/octet-stream"}
        )
        assert r.status_code == 200, r.text


async def test_the_larger_limit_is_the_admin_keys_and_the_state_routes_only() -> None:
    async with app_client(make_app(max_body_bytes=1_000_000, admin_key="admin-key", api_key="user-key")) as c:
        big = b"x" * 1_500_000
        octet = {"content-type": "application/octet-stream"}
        for headers in ({}, {"X-API-Key": "user-key"}, {"X-API-Key": "wrong"}):
            r = await c.put("/models/m/state", content=big, headers={**headers, **octet})
            assert r.status_code == 413 and "at most 1000000" in r.json()["detail"]
        r = await c.post("/predict", content=big, headers={**ADMIN, "content-type": "application/json"})
        assert r.status_code == 413
        r = await c.put("/models/m", content=big, headers={**ADMIN, "content-type": "application/json"})
        assert r.status_code == 413
        r = await c.put("/models/nope/state", content=big, headers={**ADMIN, **octet})
        assert r.status_code == 404  # past the limit: the route answers
