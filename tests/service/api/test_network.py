"""Through a real uvicorn server: exactly-once feedback under concurrency (must-show 3), the demo
model of ``make run``, auth, and Prometheus metrics in multiprocess mode."""

from __future__ import annotations

import asyncio
import tempfile

import httpx
import pytest

from tests.service.api.conftest import uvicorn_server

X = [0.5, -1.0, 2.0, 0.25]


def test_fifty_concurrent_feedbacks_for_one_id_give_exactly_one_200() -> None:
    with uvicorn_server() as url:
        spec = {"learner": "banditron", "n_features": 4, "n_labels": 3}
        assert httpx.put(f"{url}/models/m", json=spec).status_code == 201
        d = httpx.post(f"{url}/predict", json={"model": "m", "features": X}).json()

        async def storm() -> list[httpx.Response]:
            limits = httpx.Limits(max_connections=50)
            async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as c:
                body = {"decision_id": d["decision_id"], "click": True}
                return await asyncio.gather(*(c.post("/feedback?wait=true", json=body) for _ in range(50)))

        codes = sorted(r.status_code for r in asyncio.run(storm()))
        assert codes == [200] + [409] * 49
        info = httpx.get(f"{url}/models/m").json()
        assert info["version"] == 1
        assert (info["counts"]["clicks"], info["counts"]["pending"]) == (1, 0)


def test_demo_model_answers_named_features_without_a_model_name() -> None:
    with uvicorn_server(args=("--demo",)) as url:
        r = httpx.post(f"{url}/predict", json={"features": {"age": 31, "country": "fr", "mobile": True}})
        assert r.status_code == 200
        body = r.json()
        assert body["model"] == "demo" and body["label"] in ("sports", "politics", "music")
        assert body["probability"] == body["probabilities"][body["label_index"]]
        assert len(body["decision_id"]) == 22  # 128 bits, URL-safe base64
        fb = httpx.post(f"{url}/feedback", json={"decision_id": body["decision_id"], "click": True})
        assert fb.status_code == 200 and fb.json()["model_version"] == 1


def test_api_and_admin_keys() -> None:
    env = {"CLICKBOOST_API_KEYS": "k1,k2", "CLICKBOOST_ADMIN_KEY": "root"}
    with uvicorn_server(env) as url:
        spec = {"learner": "banditron", "n_features": 4, "n_labels": 3}
        assert httpx.put(f"{url}/models/m", json=spec).status_code == 401
        assert httpx.put(f"{url}/models/m", json=spec, headers={"X-API-Key": "k1"}).status_code == 401
        assert httpx.put(f"{url}/models/m", json=spec, headers={"X-API-Key": "root"}).status_code == 201
        body = {"model": "m", "features": X}
        r = httpx.post(f"{url}/predict", json=body)
        assert r.status_code == 401 and "X-API-Key" in r.json()["detail"]
        assert httpx.post(f"{url}/predict", json=body, headers={"X-API-Key": "wrong"}).status_code == 401
        d = httpx.post(f"{url}/predict", json=body, headers={"X-API-Key": "k2"}).json()
        fb = {"decision_id": d["decision_id"], "click": False}
        assert httpx.post(f"{url}/feedback", json=fb).status_code == 401
        assert httpx.post(f"{url}/feedback", json=fb, headers={"X-API-Key": "k1"}).status_code == 200
        assert httpx.get(f"{url}/healthz").status_code == 200


@pytest.mark.parametrize("multiprocess", [False, True])
def test_metrics(multiprocess: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = {"PROMETHEUS_MULTIPROC_DIR": tmp} if multiprocess else {}
        with uvicorn_server(env) as url:
            spec = {"learner": "banditron", "n_features": 4, "n_labels": 3}
            httpx.put(f"{url}/models/m", json=spec)
            ids = [
                httpx.post(f"{url}/predict", json={"model": "m", "features": X}).json()["decision_id"]
                for _ in range(3)
            ]
            httpx.post(f"{url}/feedback?wait=true", json={"decision_id": ids[0], "click": True})
            httpx.post(f"{url}/feedback?wait=true", json={"decision_id": ids[1], "click": False})
            httpx.post(f"{url}/feedback", json={"decision_id": ids[1], "click": False})
            text = httpx.get(f"{url}/metrics").text
    lines = set(text.splitlines())
    assert 'clickboost_decisions_total{model="m"} 3.0' in lines
    assert 'clickboost_feedback_total{outcome="click"} 1.0' in lines
    assert 'clickboost_feedback_total{outcome="duplicate"} 1.0' in lines
    assert 'clickboost_pending_decisions{model="m"} 1.0' in lines
    assert 'clickboost_ctr{model="m"} 0.5' in lines
    assert 'clickboost_model_version{model="m"} 2.0' in lines
    assert 'clickboost_apply_lag_events{model="m"} 0.0' in lines
    assert any(
        line.startswith(
            'clickboost_http_request_duration_seconds_count{method="POST",route="/predict",status="200"} 3'
        )
        for line in lines
    )
