"""Pages over catalog candidates over HTTP (issue 54 item 5, service/runtime/catalog_pages.py):
``POST /predict`` with ``slots`` and catalog candidates answers per slot the item, its conditional
probability and the top k; each slot's reward once through ``POST /feedback`` with ``slot``; the
stored records keep the chosen items only; the decision log and its dsjson CCB line (read by Vowpal
Wabbit) carry the chosen items' features as decided; every refusal a 422 naming it; a one-slot page
without slot features is the single catalog decision, record and checksum; two runtimes on one
Redis learn each slot once."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from service.api.app import create_app
from service.config import Settings
from service.pages import page_decision_of, slot_decision_id
from service.slot_ope import PageLog
from service.slots import unpack_page
from service.store import Store
from service.store.redis import RedisStore
from tests.service.api.conftest import app_client
from tests.service.api.test_pages_http import twin_of
from tests.service.test_decision_log import (
    T0,
    Clock,
    store,  # noqa: F401 (the store fixture)
)

pytestmark = pytest.mark.anyio

BITS = 12
SPEC = {"actions": "features", "learner": "squarecb-adf", "hashing_bits": BITS, "seed": 1}
CTX = {"user": "u1", "mobile": True}
SLOTS = [
    {"id": "hero", "features": {"position": "hero"}},
    {"id": "tile", "features": {"position": "tile"}, "excluded": ["sku-0"]},
    {"id": "foot", "features": {"position": "foot"}},
]


def items(n: int) -> list[dict[str, Any]]:
    return [
        {"id": f"sku-{i}", "features": {"category": ["shoes", "bags", "hats"][i % 3], "price": 1.0 + i % 5}}
        for i in range(n)
    ]


async def shop(c: httpx.AsyncClient, app: Any, n: int = 40, **extra: Any) -> None:
    r = await c.put("/models/shop", json={**SPEC, **extra})
    assert r.status_code == 201, r.text
    await app.state.runtime.items.put("shop", items(n))


async def predict(c: httpx.AsyncClient, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    r = await c.post("/predict", json={"model": "shop", "features": CTX, **body})
    assert r.status_code == status, r.text
    return r.json()


async def test_a_catalog_page_is_answered_stored_rewarded_logged_and_exported(store: Store) -> None:  # noqa: F811
    app = create_app(Settings(store="memory"), store=store)
    async with app_client(app) as c:
        runtime = app.state.runtime
        clock = runtime.clock = Clock(T0)
        await shop(c, app, reward_window_seconds=60)
        m = runtime.models["shop"]
        p = await predict(c, {"slots": SLOTS, "k": 4})
        assert list(p) == ["decision_id", "model", "model_version", "catalog_version", "slots"]
        assert p["catalog_version"] == m.catalog.version
        shown = [s["label"] for s in p["slots"]]
        assert len(set(shown)) == 3 and shown[1] != "sku-0"
        tile = 39 if shown[0] == "sku-0" else 38  # the tile excludes sku-0, which the hero may have taken
        for s, want in zip(p["slots"], [40, tile, 38], strict=True):
            assert list(s) == ["id", "label", "label_index", "probability", "ranking", "candidates"]
            assert s["candidates"] == want and len(s["ranking"]) == 4
            assert s["label_index"] == int(s["label"].removeprefix("sku-"))  # registration order
            ps = [x["probability"] for x in s["ranking"]]
            assert ps == sorted(ps, reverse=True) and 0 < s["probability"] <= 1
            assert not {x["label"] for x in s["ranking"]} & set(shown[: p["slots"].index(s)])
        assert len(json.dumps(p)) <= 5_000

        # the records: the chosen items alone, slot s's item is candidate s, as the catalog held them
        d = p["decision_id"]
        for s in range(3):
            record = await store.get_decision(slot_decision_id(d, s))
            assert record is not None
            page = unpack_page(record.x, BITS)
            assert page.actions.ids == shown and page.ids == ["hero", "tile", "foot"]
            for k, item in enumerate(shown):
                v = m.catalog.features(m.catalog.slot_of(item))
                assert page.actions.features(k).idx.tolist() == v.idx.tolist()
            sd = page_decision_of(record.decision).slots[s]
            assert sd.label == s and sd.probs.tolist() == [
                p["slots"][s]["probability"] if k == s else 0.0 for k in range(3)
            ]
            assert int(sd.memo["catalog.candidates"]) == p["slots"][s]["candidates"]
            assert int(sd.memo["catalog.version"]) == p["catalog_version"]
            assert record.x.nbytes < 2_000  # not the catalog
        # a later change of an item changes nothing stored
        await runtime.items.put("shop", [{"id": shown[0], "features": {"category": "gone"}}])

        # a reward per slot, each once; the one left gets the default reward at expiry
        r = await c.post("/feedback?wait=true", json={"decision_id": d, "slot": "tile", "click": True})
        assert r.status_code == 200 and r.json()["slot"] == "tile", r.text
        r = await c.post("/feedback", json={"decision_id": d, "slot": 1, "click": False})
        assert r.status_code == 409 and r.json()["first_outcome"]["outcome"] == "click"
        r = await c.post("/feedback?wait=true", json={"decision_id": d, "slot": 0, "reward": 0.5})
        assert r.status_code == 200
        clock.t += 61.0
        assert (
            await c.post("/feedback", json={"decision_id": d, "slot": 2, "click": True})
        ).status_code == 410
        assert await runtime.sweep() == 1
        await runtime.catch_up(m)
        events = await store.read_log("shop", 0)
        learns = [e for e in events if e.kind == "learn"]
        assert [(e.decision["page.slot"], e.outcome) for e in learns] == [
            (1, "click"),
            (0, "reward"),
            (2, "expired"),
        ]

        # the decision log: each slot's record with the chosen items as decided, and one CCB line
        log = [json.loads(x) for x in (await c.get("/models/shop/log")).text.splitlines()]
        assert [e["page"]["slot"] for e in log] == [0, 1, 2]
        for e in log:
            assert [a["id"] for a in e["actions"]] == shown and e["label"] == shown[e["page"]["slot"]]
            assert e["probs"][e["label_index"]] == p["slots"][e["page"]["slot"]]["probability"]
        now = m.catalog.features(m.catalog.slot_of(shown[0]))  # the item changed: the log keeps it as decided
        assert log[0]["actions"][0]["idx"] != now.idx.tolist()
        with pytest.raises(ValueError, match="1 pages over catalog candidates"):
            PageLog.from_records(log)
        text = (await c.get("/models/shop/log", params={"format": "dsjson"})).text
        [line] = text.splitlines()
        doc = json.loads(line)
        assert len(doc["c"]["_multi"]) == 3 and [o["_a"] for o in doc["_outcomes"]] == [[0], [1], [2]]
        assert [o["_p"][0] for o in doc["_outcomes"]] == [s["probability"] for s in p["slots"]]
        assert [o["_label_cost"] for o in doc["_outcomes"]] == [-0.5, -1, 0]
        vw = pytest.importorskip("vowpalwabbit")
        ws = vw.Workspace("--ccb_explore_adf --dsjson --quiet -q xa -q sa")
        examples = ws.parse(line)
        assert len(examples) == 1 + 3 + 3
        labels = [e.get_label(vw.LabelType.CONDITIONAL_CONTEXTUAL_BANDIT) for e in examples[-3:]]
        for s, label in enumerate(labels):
            top = label.outcome.action_probs[0]
            assert top.action == s and top.score == pytest.approx(p["slots"][s]["probability"], rel=1e-6)
        ws.learn(examples)
        ws.finish_example(examples)
        ws.finish()


async def test_every_refusal_of_a_catalog_page_names_what_is_wrong() -> None:
    app = create_app(Settings(store="memory"))
    async with app_client(app) as c:
        await shop(c, app, n=6)
        two = ["sku-1", "sku-2"]
        cases: list[tuple[dict[str, Any], str]] = [
            ({"slots": SLOTS, "candidates": two}, "3 slots but 2 candidates"),
            ({"slots": SLOTS, "filter": {"category": "boots"}}, "no active catalog item is selected"),
            ({"slots": SLOTS, "candidates": ["sku-1", "nope", "sku-3"]}, "candidates.1: item 'nope'"),
            ({"slots": SLOTS, "k": 0}, "k: the top k"),
            ({"slots": [{"id": "a", "eligible": ["sku-9"]}]}, "slots.0: eligible: 'sku-9' is not one"),
            ({"slots": [{"id": "a", "excluded": [0, 1, 2, 3, 4, 5]}]}, "slots.0: no eligible action"),
            (
                {"slots": [{"id": "a", "eligible": [1], "excluded": [2]}]},
                "slots.0: give eligible or excluded",
            ),
            ({"slots": [{"id": "a", "excluded": [0], "baseline": 0}]}, "slots.0: baseline action 0"),
            ({"slots": [{"id": "a"}, {"id": "a"}]}, "slots.1.id: 'a' is given twice"),
            ({"slots": SLOTS, "eligible": ["sku-1"]}, "eligible: with slots"),
            (
                {"slots": [{"id": "a", "eligible": ["sku-1"]}, {"id": "b", "eligible": ["sku-1"]}]},
                "slots.1: no candidate left for slot 'b'",
            ),
        ]
        for body, message in cases:
            r = await c.post("/predict", json={"model": "shop", "features": CTX, **body})
            assert r.status_code == 422 and message in r.json()["detail"], (body, r.text)
        assert (
            await c.put("/models/labels", json={"labels": ["a", "b"], "hashing_bits": BITS})
        ).status_code == 201
        r = await c.post(
            "/predict", json={"model": "labels", "features": CTX, "candidates": ["a"], "slots": SLOTS}
        )
        assert r.status_code == 422 and "has fixed labels" in r.json()["detail"]
        assert (await c.get("/models/shop")).json()["counts"]["decisions"] == 0
        assert (await c.post("/models/shop/rollout", json={"mode": "logging"})).status_code == 200
        r = await c.post("/predict", json={"model": "shop", "features": CTX, "slots": SLOTS})
        assert r.status_code == 422 and "served in online mode only" in r.json()["detail"]


async def test_sent_actions_mixed_with_catalog_items_and_a_deferred_page() -> None:
    app = create_app(Settings(store="memory"))
    async with app_client(app) as c:
        await shop(c, app, n=6)
        sent = [
            {"id": "new-1", "features": {"category": "shoes"}},
            {"id": "new-2", "features": {"price": 9.0}},
        ]
        slots = [
            {"id": "a", "eligible": ["new-1", "new-2"]},
            {"id": "b", "eligible": ["new-1", "new-2"]},
            {"id": "c"},
        ]
        p = await predict(
            c, {"actions": sent, "candidates": ["sku-1", "sku-2"], "slots": slots, "k": 10, "defer": True}
        )
        got = [s["label"] for s in p["slots"]]
        assert sorted(got[:2]) == ["new-1", "new-2"] and got[2] in ("sku-1", "sku-2")
        assert [s["candidates"] for s in p["slots"]] == [2, 1, 2]
        assert p["slots"][1]["probability"] == 1.0 and p["slots"][2]["label_index"] in (2, 3)
        record = await app.state.runtime.store.get_decision(p["decision_id"])
        page = unpack_page(record.x, BITS)
        assert page.actions.ids == got and page.actions.features(got.index("new-2")).nnz == 1
        r = await c.post(f"/decisions/{p['decision_id']}/activate?wait=true")
        assert r.status_code == 200 and [s["status"] for s in r.json()["slots"]] == ["activated"] * 3
        for s in range(3):
            r = await c.post(
                "/feedback?wait=true", json={"decision_id": p["decision_id"], "slot": s, "click": s == 2}
            )
            assert r.status_code == 200 and r.json()["model_version"] is not None
        assert app.state.runtime.models["shop"].learner.counts_.tolist() == [3.0, 3.0]  # each item alone


async def test_a_one_slot_catalog_page_is_the_single_catalog_decision(
    store: Store,  # noqa: F811
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    """Record and checksum after feedback: a one-slot page without slot features over the catalog is
    the single catalog decision of the same request (the same decision id), on every store."""
    twin = create_app(Settings(store="memory"), store=twin_of(store, request, tmp_path))
    app = create_app(Settings(store="memory"), store=store)
    async with app_client(app) as c, app_client(twin) as t:
        await shop(c, app)
        await shop(t, twin)
        for n in range(12):
            body: dict[str, Any] = {"features": {"user": f"u{n % 3}"}, "decision_id": f"e{n}"}
            if n % 3 == 1:
                body["candidates"] = [f"sku-{i}" for i in range(n, n + 6)]
            if n % 4 == 2:
                body["excluded"] = [f"sku-{n}"]
            single = await predict(t, body)
            slot = {"id": "0", **({"excluded": body.pop("excluded")} if "excluded" in body else {})}
            page = await predict(c, {**body, "slots": [slot]})
            [s] = page["slots"]
            assert (page["decision_id"], s["label"], s["label_index"], s["probability"], s["candidates"]) == (
                single["decision_id"],
                single["label"],
                single["label_index"],
                single["probability"],
                single["candidates"],
            )
            assert s["ranking"] == single["ranking"] and page["catalog_version"] == single["catalog_version"]
            a = await store.get_decision(page["decision_id"])
            b = await twin.state.runtime.store.get_decision(single["decision_id"])
            assert a.x.tobytes() == b.x.tobytes()
            assert list(a.decision) == list(b.decision)
            # the same memo, which rebuilds the candidates (the slot's exclusion is its selection's),
            # but the time expiry was judged at: each app's own clock
            assert all(
                np.array_equal(a.decision[k], b.decision[k]) for k in a.decision if k != "memo.catalog.at"
            )
            assert abs(float(a.decision["memo.catalog.at"]) - float(b.decision["memo.catalog.at"])) < 60
            click = s["label"] in ("sku-2", "sku-5")
            r1 = await t.post(
                "/feedback?wait=true", json={"decision_id": single["decision_id"], "click": click}
            )
            r2 = await c.post(
                "/feedback?wait=true", json={"decision_id": page["decision_id"], "slot": 0, "click": click}
            )
            assert r1.status_code == r2.status_code == 200
        ma, mb = app.state.runtime.models["shop"], twin.state.runtime.models["shop"]
        assert ma.position == mb.position and ma.checksum() == mb.checksum()
        await t.delete("/models/shop")


async def test_two_runtimes_on_one_redis_learn_each_slot_once(redis_url: str) -> None:
    prefix = f"test-{uuid.uuid4().hex}:"
    a_app = create_app(Settings(store="memory"), store=RedisStore(redis_url, prefix=prefix))
    b_app = create_app(Settings(store="memory"), store=RedisStore(redis_url, prefix=prefix))
    async with app_client(a_app) as a, app_client(b_app) as b:
        await shop(a, a_app, reward_window_seconds=600)
        pages = [await predict(a, {"features": {"user": f"u{t % 4}"}, "slots": SLOTS}) for t in range(10)]
        calls = []
        for t, p in enumerate(pages):  # each slot rewarded through both runtimes at once, by index and id
            for s, slot in enumerate(SLOTS):
                body = {"decision_id": p["decision_id"], "click": (t + s) % 3 == 0}
                calls.append(b.post("/feedback", json={**body, "slot": s}))
                calls.append(a.post("/feedback", json={**body, "slot": slot["id"]}))
        codes = [r.status_code for r in await asyncio.gather(*calls)]
        assert codes.count(200) == 30 and codes.count(409) == 30, codes
        end = max(e.position for e in await a_app.state.runtime.store.read_log("shop", 0))
        for app in (a_app, b_app):
            runtime = app.state.runtime
            assert await runtime.wait_applied(runtime.models["shop"], end)
        ma, mb = a_app.state.runtime.models["shop"], b_app.state.runtime.models["shop"]
        assert ma.position == mb.position == end and ma.checksum() == mb.checksum()
        assert ma.learner.counts_.tolist() == [30.0, 30.0]  # each slot once, its item alone
        await a.delete("/models/shop")
