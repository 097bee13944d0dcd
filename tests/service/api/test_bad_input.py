"""Must-show 2: bad input -> 4xx with a message naming the problem, and the model untouched
(same version, same checksum). One test per case."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

from tests.service.api.conftest import app_client, make_app

pytestmark = pytest.mark.anyio

DENSE = {"learner": "banditron", "n_features": 4, "n_labels": 3, "params": {"gamma": 0.3}}
HASHED = {"learner": "banditron", "hashing_bits": 6, "labels": ["a", "b"]}
X = [0.5, -1.0, 2.0, 0.25]


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """An app with a dense model 'm' and a hashed model 'h' that have learned one event each."""
    async with app_client(make_app(max_body_bytes=4096, max_named_features=5)) as c:
        assert (await c.put("/models/m", json=DENSE)).status_code == 201
        assert (await c.put("/models/h", json=HASHED)).status_code == 201
        for model, features in [("m", X), ("h", {"x": 1.0})]:
            d = (await c.post("/predict", json={"model": model, "features": features})).json()
            assert (
                await c.post("/feedback?wait=true", json={"decision_id": d["decision_id"], "click": True})
            ).status_code == 200
        yield c


async def snapshot(c: httpx.AsyncClient) -> list[tuple[int, str]]:
    out = []
    for name in ("m", "h"):
        info = (await c.get(f"/models/{name}")).json()
        out.append((info["version"], info["checksum"]))
    return out


async def check(
    c: httpx.AsyncClient, method: str, url: str, status: int, words: list[str], **kw: object
) -> None:
    before = await snapshot(c)
    r = await c.request(method, url, **kw)  # type: ignore[arg-type]
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    for w in words:
        assert w in detail, detail
    assert await snapshot(c) == before


def raw(body: str) -> dict[str, object]:
    return {"content": body.encode(), "headers": {"content-type": "application/json"}}


async def test_wrong_dimension(client: httpx.AsyncClient) -> None:
    await check(
        client,
        "POST",
        "/predict",
        422,
        ["features", "expected 4 values, got 3"],
        json={"model": "m", "features": X[:3]},
    )


async def test_nan(client: httpx.AsyncClient) -> None:
    await check(
        client,
        "POST",
        "/predict",
        422,
        ["features", "finite"],
        **raw('{"model": "m", "features": [0, NaN, 1, 2]}'),
    )


async def test_infinity(client: httpx.AsyncClient) -> None:
    await check(
        client,
        "POST",
        "/predict",
        422,
        ["features", "finite"],
        **raw('{"model": "m", "features": [0, 1e400, 1, 2]}'),
    )


async def test_infinite_named_feature(client: httpx.AsyncClient) -> None:
    await check(
        client,
        "POST",
        "/predict",
        422,
        ["features", "age", "finite"],
        **raw('{"model": "h", "features": {"age": -Infinity}}'),
    )


async def test_huge_magnitude(client: httpx.AsyncClient) -> None:
    await check(
        client,
        "POST",
        "/predict",
        422,
        ["features.1", "magnitude"],
        json={"model": "m", "features": [0, 1e300, 1, 2]},
    )


async def test_empty_body(client: httpx.AsyncClient) -> None:
    await check(client, "POST", "/predict", 400, ["empty body"], **raw(""))


async def test_oversized_body(client: httpx.AsyncClient) -> None:
    body = {"model": "m", "features": [0.123456789] * 1000}
    await check(client, "POST", "/predict", 413, ["body too large", "at most 4096"], json=body)


async def test_oversized_chunked_body(client: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"model": "m", "features": ['
        for _ in range(1000):
            yield b"0.123456789, "
        yield b"1]}"

    await check(
        client,
        "POST",
        "/predict",
        413,
        ["body too large"],
        content=chunks(),
        headers={"content-type": "application/json"},
    )


async def test_too_many_named_features(client: httpx.AsyncClient) -> None:
    feats = {f"f{i}": 1.0 for i in range(6)}
    await check(
        client,
        "POST",
        "/predict",
        422,
        ["6 named features", "at most 5"],
        json={"model": "h", "features": feats},
    )


async def test_named_features_for_a_dense_model(client: httpx.AsyncClient) -> None:
    await check(
        client, "POST", "/predict", 422, ["list of 4 numbers"], json={"model": "m", "features": {"a": 1.0}}
    )


async def test_unknown_model(client: httpx.AsyncClient) -> None:
    await check(
        client, "POST", "/predict", 404, ["unknown model 'nope'"], json={"model": "nope", "features": X}
    )


async def test_unknown_decision_id(client: httpx.AsyncClient) -> None:
    await check(
        client,
        "POST",
        "/feedback",
        404,
        ["unknown decision id"],
        json={"decision_id": "AAAAAAAAAAAAAAAAAAAAAA", "click": True},
    )


async def test_duplicate_decision_id(client: httpx.AsyncClient) -> None:
    d = (await client.post("/predict", json={"model": "m", "features": X})).json()
    first = await client.post("/feedback?wait=true", json={"decision_id": d["decision_id"], "click": False})
    assert first.status_code == 200
    await check(
        client,
        "POST",
        "/feedback?wait=true",
        409,
        ["already answered (no_click)"],
        json={"decision_id": d["decision_id"], "click": True},
    )
    r = await client.post("/feedback", json={"decision_id": d["decision_id"], "click": True})
    assert r.json()["first_outcome"]["outcome"] == "no_click"
    assert r.json()["first_outcome"]["model_version"] == first.json()["model_version"]


async def test_expired_decision_id() -> None:
    async with app_client(make_app(sweep_interval_seconds=0.02)) as c:
        spec = {**DENSE, "reward_window_seconds": 0.05, "default_reward": "drop"}
        assert (await c.put("/models/m", json=spec)).status_code == 201
        d = (await c.post("/predict", json={"model": "m", "features": X})).json()
        before = (await c.get("/models/m")).json()
        await anyio.sleep(0.2)
        r = await c.post("/feedback?wait=true", json={"decision_id": d["decision_id"], "click": True})
        assert r.status_code == 410 and "reward window passed" in r.json()["detail"]
        after = (await c.get("/models/m")).json()
        assert (after["version"], after["checksum"]) == (before["version"], before["checksum"])


async def test_malformed_json(client: httpx.AsyncClient) -> None:
    await check(
        client, "POST", "/predict", 400, ["malformed JSON"], **raw('{"model": "m", "features": [1, 2')
    )


async def test_wrong_type_of_features(client: httpx.AsyncClient) -> None:
    await check(
        client,
        "POST",
        "/predict",
        422,
        ["features", "list of numbers or an object"],
        json={"model": "m", "features": "0.5"},
    )


async def test_wrong_type_in_feature_list(client: httpx.AsyncClient) -> None:
    await check(
        client,
        "POST",
        "/predict",
        422,
        ["features.list.2", "valid number"],
        json={"model": "m", "features": [0, 1, "2", 3]},
    )


async def test_wrong_type_of_click(client: httpx.AsyncClient) -> None:
    d = (await client.post("/predict", json={"model": "m", "features": X})).json()
    await check(
        client,
        "POST",
        "/feedback",
        422,
        ["click", "boolean"],
        json={"decision_id": d["decision_id"], "click": "yes"},
    )


async def test_unknown_field(client: httpx.AsyncClient) -> None:
    await check(
        client,
        "POST",
        "/predict",
        422,
        ["context", "Extra inputs"],
        json={"model": "m", "features": X, "context": 1},
    )


async def test_bad_model_params(client: httpx.AsyncClient) -> None:
    spec = {**DENSE, "params": {"gamma": 2.0}}
    await check(client, "PUT", "/models/bad", 422, ["gamma", "less than 0.5"], json=spec)


async def test_bad_state_import(client: httpx.AsyncClient) -> None:
    await check(
        client,
        "PUT",
        "/models/m/state",
        422,
        ["bad magic"],
        content=b"\x80\x04pickle",
        headers={"content-type": "application/octet-stream"},
    )


async def test_state_of_another_shape(client: httpx.AsyncClient) -> None:
    other = (await client.get("/models/h/state")).content
    await check(
        client,
        "PUT",
        "/models/m/state",
        422,
        ["W_", "shape"],
        content=other,
        headers={"content-type": "application/octet-stream"},
    )
