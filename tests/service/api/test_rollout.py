"""Safe rollout over HTTP (issue 38 part 5): predict's baseline, the logging and apprentice modes,
GET /models/{name}'s rollout report, POST /models/{name}/rollout behind the admin key, the decision
log's learner_probs and baseline, and a restart from a checkpoint that keeps the mode and evidence."""

from __future__ import annotations

import json

import numpy as np
import pytest

from service.api.app import create_app
from service.runtime import build_learner
from service.serial import checksum
from tests.service.api.conftest import app_client, make_app

pytestmark = pytest.mark.anyio

ADMIN = {"X-API-Key": "root"}
USER = {"X-API-Key": "user"}
SPEC = {"learner": "banditron", "n_features": 3, "labels": ["a", "b", "c"], "rollout": "logging"}


def keyed(**settings: object):
    return make_app(api_keys="user", admin_key="root", decision_id_seed=7, **settings)


async def test_predict_needs_a_valid_eligible_baseline_outside_online_mode() -> None:
    async with app_client(keyed()) as c:
        assert (await c.put("/models/m", json=SPEC, headers=ADMIN)).status_code == 201
        body = {"model": "m", "features": [1.0, 0.5, 0.0]}
        r = await c.post("/predict", json=body, headers=USER)
        assert r.status_code == 422 and "baseline is required" in r.json()["detail"]
        assert "logging mode" in r.json()["detail"]
        r = await c.post("/predict", json={**body, "baseline": "z"}, headers=USER)
        assert r.status_code == 422 and "unknown baseline label 'z'" in r.json()["detail"]
        r = await c.post("/predict", json={**body, "baseline": 3}, headers=USER)
        assert r.status_code == 422 and "baseline label index 3" in r.json()["detail"]
        r = await c.post("/predict", json={**body, "baseline": "a", "excluded": ["a"]}, headers=USER)
        assert r.status_code == 422 and "'a' is not eligible" in r.json()["detail"]
        r = await c.post("/predict", json={**body, "baseline": 1.5}, headers=USER)
        assert r.status_code == 422 and "baseline" in str(r.json())


async def test_logging_serves_the_baseline_learns_nothing_and_logs_the_learners_distribution() -> None:
    async with app_client(keyed()) as c:
        info = (await c.put("/models/m", json=SPEC, headers=ADMIN)).json()
        assert info["rollout"]["mode"] == "logging" and info["rollout"]["estimates"] is None
        rng = np.random.default_rng(0)
        for t in range(30):
            body = {"model": "m", "features": rng.random(3).tolist(), "baseline": ["a", "b", "c"][t % 3]}
            p = (await c.post("/predict", json=body, headers=USER)).json()
            assert p["label"] == body["baseline"] and p["probability"] == 1.0
            assert sorted(p["probabilities"]) == [0.0, 0.0, 1.0]
            click = {"decision_id": p["decision_id"], "click": t % 2 == 0}
            assert (await c.post("/feedback?wait=true", json=click, headers=USER)).status_code == 200
        info = (await c.get("/models/m", headers=ADMIN)).json()
        fresh = build_learner(c._transport.app.state.runtime.models["m"].spec)  # type: ignore[attr-defined]
        assert info["version"] == 30 and info["checksum"] == checksum(fresh.state())  # nothing learned
        est = info["rollout"]["estimates"]
        assert est["n"] == 30 and est["baseline"]["value"] == pytest.approx(0.5)
        assert est["learner"]["value"] is None  # the learner's other choices were never shown: bounds only
        assert est["learner"]["low"] <= est["learner"]["high"]
        lines = (await c.get("/models/m/log", headers=ADMIN)).text.splitlines()
        records = [json.loads(line) for line in lines]
        assert len(records) == 30
        for rec in records:
            assert rec["baseline"] == rec["label_index"] and len(rec["learner_probs"]) == 3
            assert sum(rec["learner_probs"]) == pytest.approx(1.0) and max(rec["learner_probs"]) < 1.0


async def test_apprentice_mixes_learns_and_the_admin_route_switches_modes() -> None:
    async with app_client(keyed()) as c:
        spec = {**SPEC, "rollout": "apprentice", "apprentice_epsilon": 0.3}
        await c.put("/models/m", json=spec, headers=ADMIN)
        x = [0.2, 0.4, 0.6]
        labels = []
        for _ in range(40):
            body = {"model": "m", "features": x, "baseline": 2}
            p = (await c.post("/predict", json=body, headers=USER)).json()
            probs = np.array(p["probabilities"])
            assert probs[2] >= 0.7 and probs.sum() == pytest.approx(1.0)
            assert p["ranking"][0]["label"] == "c"
            labels.append(p["label"])
            graded = {"decision_id": p["decision_id"], "reward": 0.25}
            await c.post("/feedback?wait=true", json=graded, headers=USER)
        assert set(labels) > {"c"}  # the learner's draws are served too
        info = (await c.get("/models/m", headers=ADMIN)).json()
        fresh = build_learner(c._transport.app.state.runtime.models["m"].spec)  # type: ignore[attr-defined]
        assert info["checksum"] != checksum(fresh.state())  # learned from the served decisions
        est = info["rollout"]["estimates"]
        assert est["n"] == 40 and est["learner"]["value"] is not None
        assert est["baseline"]["low"] <= 0.25 <= est["baseline"]["high"]
        assert est["difference"]["low"] < 0 < est["difference"]["high"]  # every label pays 0.25

        assert (await c.post("/models/m/rollout", json={"mode": "online"}, headers=USER)).status_code == 401
        assert (await c.post("/models/m/rollout", json={"mode": "online"})).status_code == 401
        r = await c.post("/models/m/rollout", json={"mode": "sideways"}, headers=ADMIN)
        assert r.status_code == 422 and "mode" in str(r.json())
        r = await c.post("/models/m/rollout", json={"mode": "online"}, headers=ADMIN)
        assert r.status_code == 200
        ro = r.json()["rollout"]
        assert ro["mode"] == "online" and ro["epoch"] == 1 and ro["estimates"] is None
        assert ro["changed"]["reason"] == "admin" and ro["changed"]["position"] == r.json()["version"] == 41
        p = (await c.post("/predict", json={"model": "m", "features": x}, headers=USER)).json()
        assert "baseline" not in p and max(p["probabilities"]) < 1.0  # the learner's own distribution
        r = await c.post("/models/nope/rollout", json={"mode": "online"}, headers=ADMIN)
        assert r.status_code == 404


async def test_a_restart_from_a_checkpoint_keeps_the_mode_and_the_evidence() -> None:
    app = make_app(checkpoint_every=5, decision_id_seed=3)
    async with app_client(app) as c:
        await c.put("/models/m", json={**SPEC, "rollout": "apprentice"})
        for t in range(12):
            body = {"model": "m", "features": [t / 12, 1.0, 0.0], "baseline": "b"}
            p = (await c.post("/predict", json=body)).json()
            await c.post("/feedback?wait=true", json={"decision_id": p["decision_id"], "click": t % 3 == 0})
        info = (await c.get("/models/m")).json()
        store = app.state.runtime.store
        cp = await store.get_checkpoint("m")
        assert cp is not None and cp.position == 10
        replica = create_app(app.state.settings, store=store)
        async with app_client(replica) as r:
            again = (await r.get("/models/m")).json()
        assert again["checksum"] == info["checksum"] and again["rollout"] == info["rollout"]
        assert again["rollout"]["estimates"]["n"] == 12


async def test_after_an_automatic_promotion_the_config_and_the_rollout_say_online() -> None:
    """Issue 51, item 9: ``config.rollout`` said apprentice while ``rollout.mode`` said online. The
    promotion is the sweep's (``Sweeper.promote``, called when the evidence is due); the stored
    spec keeps the mode the log is replayed from."""
    spec = {**SPEC, "rollout": "apprentice", "promote": "auto"}
    async with app_client(keyed(sweep_interval_seconds=3600)) as c:
        assert (await c.put("/models/m", json=spec, headers=ADMIN)).status_code == 201
        before = (await c.get("/models/m", headers=ADMIN)).json()
        assert before["config"]["rollout"] == before["rollout"]["mode"] == "apprentice"
        runtime = c._transport.app.state.runtime  # type: ignore[attr-defined]
        await runtime.sweeper.promote(runtime.models["m"])
        after = (await c.get("/models/m", headers=ADMIN)).json()
        assert after["rollout"]["changed"]["reason"] == "auto", after["rollout"]
        assert after["config"]["rollout"] == after["rollout"]["mode"] == "online", after
        listed = (await c.get("/models", headers=ADMIN)).json()["models"]
        assert [i["config"]["rollout"] for i in listed] == ["online"]
        stats = (await c.get("/models/m/stats", headers=ADMIN)).json()  # the dashboard's data
        assert stats["config"]["rollout"] == "online", stats["config"]
