"""The reward window (must-show 4) and the /models administration endpoints, in-process."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import numpy as np
import pytest

from service.api.app import create_app
from service.cli import main
from service.features import Featuriser
from service.learners.base import make_learner
from service.sampling import decision_rng
from service.serial import checksum
from tests.service.api.conftest import app_client, make_app

pytestmark = pytest.mark.anyio

SPEC = {"learner": "banditron", "n_features": 4, "n_labels": 3, "params": {"gamma": 0.3}, "seed": 5}
XS = [[0.5, -1.0, 2.0, 0.25], [1.0, 0.0, 0.0, 1.0], [-0.5, 0.5, 1.5, 0.0]]


@pytest.mark.parametrize("default_reward", ["no_click", "drop"])
async def test_default_reward_fires_once_for_expired_decisions(default_reward: str) -> None:
    async with app_client(make_app(sweep_interval_seconds=0.02)) as c:
        spec = {**SPEC, "reward_window_seconds": 0.15, "default_reward": default_reward}
        assert (await c.put("/models/m", json=spec)).status_code == 201
        ids = [
            (await c.post("/predict", json={"model": "m", "features": x})).json()["decision_id"] for x in XS
        ]
        r = await c.post("/feedback?wait=true", json={"decision_id": ids[1], "click": True})
        assert r.status_code == 200 and r.json()["model_version"] == 1
        await anyio.sleep(0.5)  # ~20 sweeps after the window closed
        info = (await c.get("/models/m")).json()
        late = await c.post("/feedback?wait=true", json={"decision_id": ids[0], "click": True})
        assert late.status_code == 410 and late.json()["first_outcome"]["outcome"] == "expired"
        await anyio.sleep(0.1)
        assert (await c.get("/models/m")).json() == info

    counts = info["counts"]
    assert (counts["clicks"], counts["expired"], counts["pending"]) == (1, 2, 0)
    # Oracle: all three decided at version 0; the click, then the expired ones in order, as no-clicks.
    offline = make_learner("banditron", 4, 3, SPEC["params"], seed=5)
    xs = [np.array(x) for x in XS]
    decisions = [offline.decide(x, decision_rng(i)) for x, i in zip(xs, ids, strict=True)]
    offline.learn(xs[1], decisions[1], True)
    if default_reward == "no_click":
        offline.learn(xs[0], decisions[0], False)
        offline.learn(xs[2], decisions[2], False)
    assert info["version"] == (3 if default_reward == "no_click" else 1)
    assert info["checksum"] == checksum(offline.state())


async def test_create_get_list_delete() -> None:
    async with app_client(make_app()) as c:
        r = await c.put("/models/m", json={**SPEC, "labels": ["a", "b", "c"], "n_labels": None})
        assert r.status_code == 201
        assert (await c.put("/models/m", json=SPEC)).status_code == 409
        listing = (await c.get("/models")).json()
        assert [m["name"] for m in listing["models"]] == ["m"]
        assert "banditron" in listing["learners"] and "perceptron" not in listing["learners"]
        assert listing["elsewhere"] == []  # no placement: this replica holds every model
        d = (await c.post("/predict", json={"model": "m", "features": XS[0]})).json()
        assert d["label"] == "abc"[d["label_index"]]
        assert (await c.delete("/models/m")).status_code == 204
        assert (await c.get("/models/m")).status_code == 404
        assert (
            await c.post("/feedback", json={"decision_id": d["decision_id"], "click": True})
        ).status_code == 404
        assert (await c.delete("/models/m")).status_code == 404


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"learner": "banditron", "n_labels": 3}, "exactly one of n_features"),
        (
            {"learner": "banditron", "n_features": 3, "hashing_bits": 4, "n_labels": 3},
            "exactly one of n_features",
        ),
        ({"learner": "banditron", "n_features": 3}, "labels or n_labels"),
        ({"learner": "banditron", "n_features": 3, "labels": ["a", "a"]}, "distinct"),
        ({"learner": "nope", "n_features": 3, "n_labels": 2}, "unknown learner 'nope'"),
        ({"learner": "banditron", "hashing_bits": 40, "n_labels": 2}, "hashing_bits"),
    ],
)
async def test_bad_model_specs_are_422(spec: dict[str, object], words: str) -> None:
    async with app_client(make_app()) as c:
        r = await c.put("/models/m", json=spec)
        assert r.status_code == 422 and words in r.json()["detail"], r.text
        assert (await c.get("/models")).json()["models"] == []


async def test_bad_model_name_is_422() -> None:
    async with app_client(make_app()) as c:
        assert (await c.put("/models/..%2Fetc", json=SPEC)).status_code in (404, 422)
        assert (await c.put("/models/a b", json=SPEC)).status_code == 422


async def learn_some(c: httpx.AsyncClient, n: int) -> None:
    for t in range(n):
        d = (await c.post("/predict", json={"model": "m", "features": XS[t % 3]})).json()
        await c.post("/feedback?wait=true", json={"decision_id": d["decision_id"], "click": t % 2 == 0})


async def test_export_import_reset() -> None:
    async with app_client(make_app()) as c:
        await c.put("/models/m", json=SPEC)
        await learn_some(c, 6)
        learned = (await c.get("/models/m")).json()
        exported = await c.get("/models/m/state")
        assert exported.headers["x-checksum"] == learned["checksum"]
        reset = (await c.post("/models/m/reset")).json()
        fresh = make_learner("banditron", 4, 3, SPEC["params"], seed=5)
        assert reset["checksum"] == checksum(fresh.state()) and reset["version"] == 7
        assert reset["counts"]["decisions"] == 6  # counts are kept
        imported = await c.put(
            "/models/m/state", content=exported.content, headers={"content-type": "application/octet-stream"}
        )
        assert imported.status_code == 200
        assert imported.json() == {"name": "m", "version": 8, "checksum": learned["checksum"]}


async def test_replica_loads_checkpoint_and_log_tail() -> None:
    """A second runtime on the same store (a restarted replica) ends bit-identical."""
    app = make_app(checkpoint_every=4)
    async with app_client(app) as c:
        await c.put("/models/m", json=SPEC)
        await learn_some(c, 10)
        info = (await c.get("/models/m")).json()
        store = app.state.runtime.store
        cp = await store.get_checkpoint("m")
        assert cp is not None and cp.position == 8
        assert [e.position for e in await store.read_log("m", after=0)] == [8, 9, 10]  # its own event kept
        replica = create_app(app.state.settings, store=store)
        async with app_client(replica) as r:
            assert (await r.get("/models/m")).json()["checksum"] == info["checksum"]


def test_config_file_declares_models(tmp_path: Path) -> None:
    cfg = tmp_path / "models.toml"
    cfg.write_text('[models.news]\nlearner = "banditron"\nhashing_bits = 8\nlabels = ["a", "b"]\n')

    async def go() -> dict[str, object]:
        async with app_client(make_app(config_file=cfg)) as c:
            return (await c.get("/models/news")).json()

    info = anyio.run(go)
    assert info["config"]["hashing_bits"] == 8


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["serve", "--host", "0.0.0.0"], "refusing to bind 0.0.0.0 without API keys"),
        (["serve", "--workers", "2"], "several workers need a shared store"),
    ],
)
def test_serve_refuses_unsafe_setups(args: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    assert words in capsys.readouterr().err


def test_serve_fails_fast_on_a_bad_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "models.toml"
    cfg.write_text('[models.news]\nlearner = "perceptron"\nn_features = 3\nn_labels = 2\n')
    assert main(["serve", "--config", str(cfg)]) == 2
    assert "full information" in capsys.readouterr().err


async def test_openapi_documents_bodies_examples_and_security() -> None:
    async with app_client(make_app()) as c:
        assert (await c.get("/docs")).status_code == 200
        spec = (await c.get("/openapi.json")).json()
        for path in ("/predict", "/feedback"):
            op = spec["paths"][path]["post"]
            assert op["requestBody"]["content"]["application/json"]["schema"]["examples"]
            assert op["security"] == [{"APIKeyHeader": []}]
        assert spec["paths"]["/feedback"]["post"]["parameters"][0]["name"] == "wait"
        assert spec["components"]["securitySchemes"]["APIKeyHeader"]["name"] == "X-API-Key"


async def test_health_and_readiness() -> None:
    async with app_client(make_app(demo=True)) as c:
        assert (await c.get("/healthz")).json() == {"status": "ok"}
        assert (await c.get("/readyz")).json() == {"status": "ready", "models": ["demo"]}


def test_serve_fails_fast_on_bad_settings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CLICKBOOST_MAX_BODY_BYTES", "lots")
    monkeypatch.setenv("CLICKBOOST_CHECKPOINT_EVERY", "0")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "CLICKBOOST_MAX_BODY_BYTES: Input should be a valid integer" in err
    assert "CLICKBOOST_CHECKPOINT_EVERY: Input should be greater than or equal to 1" in err


async def test_feedback_without_wait_is_applied_by_the_background_task() -> None:
    async with app_client(make_app()) as c:
        await c.put("/models/m", json=SPEC)
        d = (await c.post("/predict", json={"model": "m", "features": XS[0]})).json()
        r = await c.post("/feedback", json={"decision_id": d["decision_id"], "click": True})
        assert r.status_code == 200 and r.json()["model_version"] == 1
        with anyio.fail_after(5):
            while (await c.get("/models/m")).json()["version"] != 1:
                await anyio.sleep(0.01)


async def test_default_model() -> None:
    async with app_client(make_app()) as c:
        await c.put("/models/a", json=SPEC)
        r = await c.post("/predict", json={"features": XS[0]})
        assert r.status_code == 200 and r.json()["model"] == "a"  # the only model
        await c.put("/models/b", json=SPEC)
        r = await c.post("/predict", json={"features": XS[0]})
        assert r.status_code == 404 and "no model given" in r.json()["detail"]
    async with app_client(make_app(default_model="b")) as c:
        await c.put("/models/a", json=SPEC)
        await c.put("/models/b", json=SPEC)
        assert (await c.post("/predict", json={"features": XS[0]})).json()["model"] == "b"


async def test_hashed_model_learns_what_the_offline_learner_learns() -> None:
    spec = {"learner": "cova", "hashing_bits": 8, "labels": ["x", "y", "z"], "seed": 2}
    contexts = [{"age": 31, "country": "fr", "mobile": True}, {"age": 2.5, "country": "de"}, {"q": "a"}] * 4
    offline = make_learner("cova", 256, 3, seed=2)
    featurise = Featuriser(None, 8, 100)
    async with app_client(make_app()) as c:
        assert (await c.put("/models/h", json=spec)).status_code == 201
        for t, ctx in enumerate(contexts):
            d = (await c.post("/predict", json={"model": "h", "features": ctx})).json()
            click = t % 3 == d["label_index"]
            await c.post("/feedback?wait=true", json={"decision_id": d["decision_id"], "click": click})
            x = featurise(ctx)  # sparse, as served (dense oracle: tests/service/learners/test_sparse.py)
            offline.learn(x, offline.decide(x, decision_rng(d["decision_id"])), click)
        assert (await c.get("/models/h")).json()["checksum"] == checksum(offline.state())
