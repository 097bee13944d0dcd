"""Deferred decisions and client-chosen decision ids over HTTP (issue 38 part 3): ``"defer": true``
on ``POST /predict``, ``POST /decisions/{id}/activate``, a feedback held until the activation, the
drop of a decision never activated, the counts and the decision log, on every store; ids chosen by
the client, taken once; two replicas on one Redis learning an activation and a feedback made through
different replicas once, bit for bit alike."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from service.api.app import create_app
from service.config import Settings
from service.learners.base import ParamError
from service.store import Store
from service.store.redis import RedisStore
from tests.service.api.conftest import app_client
from tests.service.test_decision_log import (
    T0,
    Clock,
    store,  # noqa: F401 (the store fixture)
)

pytestmark = pytest.mark.anyio

X = [1.0, 0.5, -0.25]
SPEC = {"learner": "banditron", "n_features": 3, "n_labels": 3, "seed": 1, "reward_window_seconds": 60}


async def test_deferred_decisions_on_every_store(store: Store) -> None:  # noqa: F811
    app = create_app(Settings(store="memory"), store=store)
    async with app_client(app) as c:
        runtime = app.state.runtime
        clock = runtime.clock = Clock(T0)
        assert (await c.put("/models/m", json=SPEC)).status_code == 201

        async def predict(**extra: object) -> str:
            r = await c.post("/predict", json={"model": "m", "features": X, **extra})
            assert r.status_code == 200, r.text
            return r.json()["decision_id"]

        # feedback first: held (200, no version), learned when the activation comes
        a = await predict(defer=True)
        r = await c.post("/feedback", json={"decision_id": a, "click": True})
        assert r.status_code == 200 and r.json()["held"] is True and r.json()["model_version"] is None
        assert (await c.post("/feedback", json={"decision_id": a, "click": False})).status_code == 409
        assert runtime.models["m"].position == 0
        clock.t += 1.0
        r = await c.post(f"/decisions/{a}/activate?wait=true")
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["status"], body["learned"]["outcome"], body["learned"]["model_version"]) == (
            "activated",
            "click",
            1,
        )
        assert runtime.models["m"].position == 1  # `wait`: applied before the answer
        again = await c.post(f"/decisions/{a}/activate")
        assert again.status_code == 200 and again.json()["status"] == "already_active"

        # activation first: the feedback is then learned as any other
        b = await predict(defer=True)
        r = await c.post(f"/decisions/{b}/activate")
        assert r.json() == {"decision_id": b, "status": "activated", "learned": None}
        r = await c.post("/feedback?wait=true", json={"decision_id": b, "reward": 0.25})
        assert r.status_code == 200 and r.json()["held"] is False and r.json()["model_version"] == 2

        c_id = await predict(defer=True)  # a feedback held, never activated: dropped
        assert (await c.post("/feedback", json={"decision_id": c_id, "click": True})).json()["held"]
        d_id = await predict(defer=True)  # nothing at all: dropped
        e_id = await predict()  # not deferred: the default reward
        r = await c.post(f"/decisions/{e_id}/activate")
        assert r.status_code == 200 and r.json()["status"] == "not_deferred"
        f_id = await predict(defer=True)  # activated, no feedback: the default reward
        assert (await c.post(f"/decisions/{f_id}/activate")).json()["status"] == "activated"

        clock.t += 61.0
        assert (await c.post(f"/decisions/{c_id}/activate")).status_code == 410  # window passed
        assert await runtime.sweep() == 4
        await runtime.catch_up(runtime.models["m"])
        for late in (c_id, d_id):
            r = await c.post(f"/decisions/{late}/activate")
            assert r.status_code == 410 and "dropped" in r.json()["detail"], r.text
            assert r.json()["first_outcome"]["model_version"] is None
            r = await c.post("/feedback", json={"decision_id": late, "click": True})
            assert r.status_code == 410
        assert (await c.post(f"/decisions/{f_id}/activate")).json()["status"] == "already_active"
        assert (await c.post("/decisions/no-such-id/activate")).status_code == 404

        events = [(e.decision_id, e.reward, e.outcome) for e in await store.read_log("m", 0)]
        assert events[:2] == [(a, True, "click"), (b, 0.25, "reward")]
        assert sorted(events[2:]) == sorted([(e_id, False, "expired"), (f_id, False, "expired")])
        info = (await c.get("/models/m")).json()
        counts = info["counts"]
        assert (counts["decisions"], counts["deferred"], counts["activated"]) == (6, 5, 3)
        assert (counts["dropped_unactivated"], counts["expired"], counts["pending"]) == (2, 2, 0)
        assert (counts["clicks"], counts["graded"]) == (1, 1)
        assert info["version"] == 4
        log = {r["decision_id"]: r for r in map(json.loads, (await c.get("/models/m/log")).text.splitlines())}
        got = {i: (log[i]["outcome"], log[i]["deferred"], log[i]["activated_at"]) for i in log}
        assert got == {
            a: ("click", True, T0 + 1.0),
            b: ("reward", True, T0 + 1.0),
            c_id: ("dropped", True, None),
            d_id: ("dropped", True, None),
            e_id: ("expired", False, None),
            f_id: ("expired", True, T0 + 1.0),
        }


async def test_client_chosen_decision_ids_are_taken_once_and_seed_the_sampling(store: Store) -> None:  # noqa: F811
    app = create_app(Settings(store="memory"), store=store)
    async with app_client(app) as c:
        runtime = app.state.runtime
        assert (await c.put("/models/m", json=SPEC)).status_code == 201
        event = "page-7f3a:slot.1"
        r = await c.post("/predict", json={"model": "m", "features": X, "decision_id": event})
        assert r.status_code == 200, r.text
        d = r.json()
        assert d["decision_id"] == store.route("m", event)  # as is, or with the Redis slot tag
        m = runtime.models["m"]
        twin = m.decide(m.featurise(X), d["decision_id"])  # the sampling is seeded by that id
        assert (twin.label, twin.probs.tolist()) == (d["label_index"], d["probabilities"])
        r = await c.post("/predict", json={"model": "m", "features": X, "decision_id": event})
        assert r.status_code == 409 and event in r.json()["detail"], r.text
        assert (
            await c.post("/feedback", json={"decision_id": d["decision_id"], "click": True})
        ).status_code == 200
        r = await c.post("/predict", json={"model": "m", "features": X, "decision_id": event, "defer": True})
        assert r.status_code == 409  # answered: its claim is still known
        for bad in ["a b", "x" * 257, "{tag}", "", "a/b"]:
            r = await c.post("/predict", json={"model": "m", "features": X, "decision_id": bad})
            assert r.status_code == 422 and "decision_id" in r.json()["detail"], (bad, r.text)
        counts = (await c.get("/models/m")).json()["counts"]
        assert (counts["decisions"], counts["clicks"]) == (1, 1)
        for bad in ["a b", "x" * 257, "{tag}"]:  # the runtime checks it too (other routes call it)
            with pytest.raises(ParamError, match="decision id"):
                await runtime.predict("m", X, event_id=bad)


async def test_two_replicas_learn_an_activation_and_a_feedback_made_through_each_once(redis_url: str) -> None:
    prefix = f"test-{uuid.uuid4().hex}:"
    one = RedisStore(redis_url, prefix=prefix)
    two = RedisStore(redis_url, prefix=prefix)
    a_app = create_app(Settings(store="memory"), store=one)
    b_app = create_app(Settings(store="memory"), store=two)
    async with app_client(a_app) as a, app_client(b_app) as b:
        assert (await a.put("/models/m", json=SPEC)).status_code == 201
        ids = []
        for _ in range(24):
            r = await a.post("/predict", json={"model": "m", "features": X, "defer": True})
            ids.append(r.json()["decision_id"])
        calls = []
        for i, decision in enumerate(ids):
            # activation through A, feedback through B (or the other way round), racing
            act, fb = (a, b) if i % 2 else (b, a)
            calls.append(act.post(f"/decisions/{decision}/activate"))
            calls.append(fb.post("/feedback", json={"decision_id": decision, "click": i % 3 == 0}))
        answers = await asyncio.gather(*calls)
        assert all(r.status_code == 200 for r in answers), [r.text for r in answers if r.status_code != 200]
        again = await asyncio.gather(*(b.post(f"/decisions/{i}/activate") for i in ids))
        assert {r.json()["status"] for r in again} == {"already_active"}
        events = await one.read_log("m", 0)
        assert sorted(e.decision_id for e in events) == sorted(ids)  # each learned once
        ra, rb = a_app.state.runtime, b_app.state.runtime
        for runtime in (ra, rb):
            assert await runtime.wait_applied(runtime.models["m"], len(ids))
        ma, mb = ra.models["m"], rb.models["m"]
        assert ma.position == mb.position == len(ids)
        assert ma.checksum() == mb.checksum()  # sha256 of the canonical state: bit for bit
        counts = (await b.get("/models/m")).json()["counts"]
        assert (counts["deferred"], counts["activated"], counts["clicks"] + counts["no_clicks"]) == (
            24,
            24,
            24,
        )
        await a.delete("/models/m")
