"""Request hygiene (issue 21, item 3): request ids, JSON logs, CORS, 415 for non-JSON bodies, 429.

The log test runs a real ``python -m service serve --log-format json`` and reads its stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from service.api.hygiene import JSONFormatter, RequestIdFilter
from tests.conftest import free_port
from tests.service.api.conftest import app_client, make_app

pytestmark = pytest.mark.anyio
PREDICT = {"features": {"country": "fr", "age": 31}}


async def test_request_id_is_taken_or_made_and_echoed() -> None:
    async with app_client(make_app(demo=True)) as client:
        given = await client.post("/predict", json=PREDICT, headers={"X-Request-ID": "req-42.a:b"})
        assert given.status_code == 200 and given.headers["x-request-id"] == "req-42.a:b"
        made = await client.post("/predict", json=PREDICT)
        assert len(made.headers["x-request-id"]) == 32
        other = await client.post("/predict", json=PREDICT)
        assert other.headers["x-request-id"] != made.headers["x-request-id"]
        # a header that is not a sane token (too long, spaces) is replaced, not echoed
        odd = await client.get("/healthz", headers={"X-Request-ID": "a b" + "x" * 200})
        assert odd.headers["x-request-id"] != "a b" + "x" * 200 and len(odd.headers["x-request-id"]) == 32
        error = await client.post("/predict", json={"features": [1.0]})  # errors carry it too
        assert error.status_code == 422 and "x-request-id" in error.headers


@pytest.mark.parametrize("content_type", ["text/plain", None, "application/x-www-form-urlencoded"])
async def test_a_body_that_is_not_json_answers_415(content_type: str | None) -> None:
    body = json.dumps(PREDICT).encode()
    headers = {"Content-Type": content_type} if content_type else {}
    async with app_client(make_app(demo=True)) as client:
        for path in ("/predict", "/feedback"):
            r = await client.post(path, content=body, headers=headers)
            assert r.status_code == 415, (path, r.status_code)
            assert "application/json" in r.json()["detail"]
        r = await client.put(
            "/models/m", content=b'{"learner": "banditron", "n_features": 2}', headers=headers
        )
        assert r.status_code == 415
        ok = await client.post(
            "/predict", content=body, headers={"Content-Type": "application/json; charset=utf-8"}
        )
        assert ok.status_code == 200
        # the state import takes bytes, not JSON: no 415 there
        state = await client.get("/models/demo/state")
        r = await client.put(
            "/models/demo/state", content=state.content, headers={"Content-Type": "application/octet-stream"}
        )
        assert r.status_code == 200


async def test_rate_limit_answers_429_with_retry_after_per_key() -> None:
    settings = {"demo": True, "api_keys": "k1,k2", "admin_key": "admin", "rate_limit": 2.0}
    async with app_client(make_app(**settings)) as client:
        codes = [
            (await client.post("/predict", json=PREDICT, headers={"X-API-Key": "k1"})).status_code
            for _ in range(5)
        ]
        assert codes[:2] == [200, 200] and codes[-1] == 429, codes
        r = await client.post("/predict", json=PREDICT, headers={"X-API-Key": "k1"})
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert "CLICKBOOST_RATE_LIMIT" in r.json()["detail"]
        # another key has its own bucket; health checks are never limited
        assert (await client.post("/predict", json=PREDICT, headers={"X-API-Key": "k2"})).status_code == 200
        assert [(await client.get("/healthz")).status_code for _ in range(10)] == [200] * 10
        time.sleep(1.0)  # a second refills two tokens
        assert (await client.post("/predict", json=PREDICT, headers={"X-API-Key": "k1"})).status_code == 200


async def test_cors_only_for_configured_origins() -> None:
    preflight = {"Origin": "https://shop.example", "Access-Control-Request-Method": "POST"}
    async with app_client(make_app(demo=True)) as client:  # none by default
        r = await client.options("/predict", headers=preflight)
        assert "access-control-allow-origin" not in r.headers
    async with app_client(
        make_app(demo=True, cors_origins="https://shop.example, https://b.example")
    ) as client:
        r = await client.options("/predict", headers=preflight)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://shop.example"
        r = await client.post("/predict", json=PREDICT, headers={"Origin": "https://shop.example"})
        assert r.headers["access-control-allow-origin"] == "https://shop.example"
        assert "x-request-id" in r.headers["access-control-expose-headers"].lower()
        r = await client.options("/predict", headers={**preflight, "Origin": "https://evil.example"})
        assert r.status_code == 400 and "access-control-allow-origin" not in r.headers


def test_json_log_lines_carry_the_request_id(tmp_path: Path) -> None:
    """A real server with --log-format json: its access line for a request is one JSON object
    with that request's id."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_")}
    env |= {"CLICKBOOST_STORE": "memory", "CLICKBOOST_DEMO": "true"}
    log = tmp_path / "stderr"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service", "serve", "--port", str(port), "--log-format", "json"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while True:
                try:
                    if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
                time.sleep(0.05)
            r = httpx.post(f"{url}/predict", json=PREDICT, headers={"X-Request-ID": "trace-7"})
            assert r.status_code == 200
            time.sleep(0.3)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert lines, "no log lines"
    assert all({"time", "level", "logger", "request_id", "message"} <= set(line) for line in lines)
    mine = [line for line in lines if line["request_id"] == "trace-7"]
    assert any(line["logger"] == "uvicorn.access" and "/predict" in line["message"] for line in mine), mine


def test_json_formatter_outside_a_request() -> None:
    import logging

    record = logging.LogRecord("clickboost.runtime", logging.WARNING, __file__, 1, "hello %s", ("x",), None)
    RequestIdFilter().filter(record)
    out = json.loads(JSONFormatter().format(record))
    assert out["message"] == "hello x" and out["request_id"] == "-" and out["level"] == "warning"
    assert out["time"].endswith("Z")
