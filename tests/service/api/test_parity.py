"""Must-show 1: replaying a dataset through the real HTTP server (uvicorn, sequential predict ->
feedback?wait=true, fixed seed) gives exactly the offline simulator's mistakes, for every bandit
learner, and the served model ends bit-identical to the simulator's.

One server serves all learners (one model each); its decision ids come from
``DecisionIds.for_seed(SEED)`` in the order it issues them, so each offline run starts the same
id stream where the server's stands."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import httpx
import numpy as np
import pytest

from lab.sim.datasets import load_dataset
from lab.sim.stream import run_stream
from service.learners.base import learners, make_learner
from service.sampling import DecisionIds
from service.serial import checksum
from tests.service.api.conftest import app_client, make_app, uvicorn_server

SEED = 3
T = 300
BANDIT = [name for name, cls in learners.items() if not cls.full_information and not cls.actions]
FULL = [name for name, cls in learners.items() if cls.full_information]


@pytest.fixture(scope="module")
def stream() -> tuple[np.ndarray, np.ndarray, int]:
    data = load_dataset("car")
    X, y = data.stream(seed=SEED, limit=T)
    return X, y, data.n_labels


class SeededServer:
    """The module's server; ``issued`` counts the decision ids it has handed out so far."""

    def __init__(self, url: str) -> None:
        self.client = httpx.Client(base_url=url, timeout=30)
        self.issued = 0

    def ids(self) -> DecisionIds:
        """The simulator's id stream, advanced past the ids the server has already issued."""
        ids = DecisionIds.for_seed(SEED)
        for _ in range(self.issued):
            ids.new()
        return ids


@pytest.fixture(scope="module")
def server() -> Iterator[SeededServer]:
    with uvicorn_server({"CLICKBOOST_DECISION_ID_SEED": str(SEED)}) as url:
        s = SeededServer(url)
        yield s
        s.client.close()


@pytest.mark.parametrize("learner", BANDIT)
def test_http_replay_equals_run_stream(
    learner: str, stream: tuple[np.ndarray, np.ndarray, int], server: SeededServer
) -> None:
    X, y, k = stream
    offline = make_learner(learner, X.shape[1], k, seed=SEED)
    expected = run_stream(offline, X, y, server.ids())

    client = server.client
    spec = {"learner": learner, "n_features": X.shape[1], "n_labels": k, "seed": SEED}
    assert client.put(f"/models/{learner}", json=spec).status_code == 201
    got = np.empty(T, dtype=bool)
    for t in range(T):
        # tolist() gives Python floats whose JSON repr round-trips float64 exactly
        r = client.post("/predict", json={"model": learner, "features": X[t].tolist()})
        assert r.status_code == 200, r.text
        server.issued += 1
        hit = r.json()["label_index"] == int(y[t])
        got[t] = hit
        body = {"decision_id": r.json()["decision_id"], "click": hit}
        fb = client.post("/feedback", params={"wait": "true"}, json=body)
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
