"""Read-your-writes for models across replicas (issue 18): what one replica does to a model is seen
by the other's very next request, with no sleep between the calls (the background model sync runs
once a second, so a passing test here does not rely on it)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from lab.cluster import RedisServer, Replica, start_replicas
from tests.conftest import redis_server_binary

SPEC = {"learner": "banditron", "n_features": 3, "n_labels": 2}
X = [0.5, -1.0, 2.0]
# The sync interval is one second; these tests finish every check well within it per name.
TRIES = 10


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    work = tmp_path_factory.mktemp("ryw")
    server = RedisServer(work, binary=redis_server_binary())
    server.start()
    replicas: list[Replica] = []
    try:
        replicas = start_replicas(server.url, work, 2)
        yield replicas[0].url, replicas[1].url
    finally:
        for r in replicas:
            r.stop()
        server.stop()


def test_created_on_a_is_served_by_b_at_once(pair: tuple[str, str]) -> None:
    a, b = pair
    with httpx.Client(timeout=10) as http:
        for i in range(TRIES):
            name = f"new{i}"
            assert http.put(f"{a}/models/{name}", json=SPEC).status_code == 201
            r = http.post(f"{b}/predict", json={"model": name, "features": X})
            assert r.status_code == 200, r.text
            assert r.json()["model"] == name
            assert http.get(f"{b}/models/{name}").status_code == 200


def test_deleted_on_a_stops_serving_on_b_at_once(pair: tuple[str, str]) -> None:
    a, b = pair
    with httpx.Client(timeout=10) as http:
        for i in range(TRIES):
            name = f"gone{i}"
            assert http.put(f"{a}/models/{name}", json=SPEC).status_code == 201
            assert http.post(f"{b}/predict", json={"model": name, "features": X}).status_code == 200
            assert http.delete(f"{a}/models/{name}").status_code == 204
            r = http.post(f"{b}/predict", json={"model": name, "features": X})
            assert r.status_code == 404, r.text
            assert http.get(f"{b}/models/{name}").status_code == 404


def test_recreated_on_a_is_the_new_model_on_b(pair: tuple[str, str]) -> None:
    a, b = pair
    with httpx.Client(timeout=10) as http:
        name = "again"
        assert http.put(f"{a}/models/{name}", json=SPEC).status_code == 201
        d = http.post(f"{b}/predict", json={"model": name, "features": X}).json()
        fb = http.post(f"{b}/feedback?wait=true", json={"decision_id": d["decision_id"], "click": True})
        assert fb.status_code == 200
        assert http.get(f"{b}/models/{name}").json()["version"] == 1
        assert http.delete(f"{a}/models/{name}").status_code == 204
        other = {**SPEC, "n_labels": 4}
        assert http.put(f"{a}/models/{name}", json=other).status_code == 201
        info = http.get(f"{b}/models/{name}").json()
        assert info["version"] == 0 and info["config"]["n_labels"] == 4
        r = http.post(f"{b}/predict", json={"model": name, "features": X})
        assert r.status_code == 200 and len(r.json()["probabilities"]) == 4


def test_reset_on_a_is_seen_by_an_admin_read_on_b(pair: tuple[str, str]) -> None:
    a, b = pair
    with httpx.Client(timeout=10) as http:
        name = "reset"
        assert http.put(f"{a}/models/{name}", json=SPEC).status_code == 201
        untrained = http.get(f"{b}/models/{name}").json()["checksum"]
        for _ in range(TRIES):
            d = http.post(f"{b}/predict", json={"model": name, "features": X}).json()
            fb = {"decision_id": d["decision_id"], "click": d["label_index"] == 0}
            assert http.post(f"{b}/feedback?wait=true", json=fb).status_code == 200
            learned = http.get(f"{b}/models/{name}").json()
            assert learned["checksum"] != untrained
            r = http.post(f"{a}/models/{name}/reset")
            assert r.status_code == 200
            # B's admin read catches the model up with the store's log before answering
            info = http.get(f"{b}/models/{name}").json()
            assert info["version"] == r.json()["version"] == learned["version"] + 1
            assert info["checksum"] == untrained
