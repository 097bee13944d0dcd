"""Must-show 1: replaying a dataset through the real HTTP server (uvicorn, sequential predict ->
feedback?wait=true, fixed seed) gives exactly the offline simulator's mistakes, for every bandit
learner, and the served model ends bit-identical to the simulator's."""

from __future__ import annotations

import anyio
import httpx
import numpy as np
import pytest

from service.learners.base import learners, make_learner
from service.sampling import DecisionIds
from service.serial import checksum
from service.sim.datasets import load_dataset
from service.sim.stream import run_stream
from tests.api.conftest import app_client, make_app, uvicorn_server

SEED = 3
T = 300
BANDIT = [name for name, cls in learners.items() if not cls.full_information]
FULL = [name for name, cls in learners.items() if cls.full_information]


@pytest.fixture(scope="module")
def stream() -> tuple[np.ndarray, np.ndarray, int]:
    data = load_dataset("car")
    X, y = data.stream(seed=SEED, limit=T)
    return X, y, data.n_labels


@pytest.mark.parametrize("learner", BANDIT)
def test_http_replay_equals_run_stream(learner: str, stream: tuple[np.ndarray, np.ndarray, int]) -> None:
    X, y, k = stream
    offline = make_learner(learner, X.shape[1], k, seed=SEED)
    expected = run_stream(offline, X, y, DecisionIds.for_seed(SEED))

    env = {"CLICKBOOST_DECISION_ID_SEED": str(SEED)}
    with uvicorn_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
        spec = {"learner": learner, "n_features": X.shape[1], "n_labels": k, "seed": SEED}
        assert client.put(f"/models/{learner}", json=spec).status_code == 201
        got = np.empty(T, dtype=bool)
        for t in range(T):
            # tolist() gives Python floats whose JSON repr round-trips float64 exactly
            r = client.post("/predict", json={"model": learner, "features": X[t].tolist()})
            assert r.status_code == 200, r.text
            hit = r.json()["label_index"] == int(y[t])
            got[t] = hit
            fb = client.post(
                "/feedback",
                params={"wait": "true"},
                json={"decision_id": r.json()["decision_id"], "click": hit},
            )
            assert fb.status_code == 200, fb.text
            assert fb.json()["model_version"] == t + 1
        info = client.get(f"/models/{learner}").json()

    np.testing.assert_array_equal(got, expected)
    assert info["version"] == T
    assert info["checksum"] == checksum(offline.state())
    assert info["counts"]["clicks"] == int(expected.sum())


@pytest.mark.parametrize("learner", FULL)
def test_full_information_learners_are_refused(learner: str) -> None:
    async def go() -> httpx.Response:
        async with app_client(make_app()) as client:
            return await client.put("/models/ref", json={"learner": learner, "n_features": 3, "n_labels": 2})

    r = anyio.run(go)
    assert r.status_code == 422
    assert "full information" in r.json()["detail"] and learner in r.json()["detail"]
