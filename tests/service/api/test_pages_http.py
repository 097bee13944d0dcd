"""Pages of several slots over HTTP (issue 53): ``POST /predict`` with ``slots``, a reward per slot
through ``POST /feedback`` with ``slot``, the default reward of a slot left without one, deferred
activation of a whole page, every refusal a clear 4xx; on the memory, SQLite and Redis stores, and
two replicas on one Redis learning a page decided on one and rewarded through the other once per
slot."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.api.app import create_app
from service.config import Settings
from service.store import MemoryStore, SQLiteStore, Store
from service.store.redis import RedisStore
from tests.service.api.conftest import app_client
from tests.service.test_decision_log import (
    T0,
    Clock,
    store,  # noqa: F401 (the store fixture)
)

pytestmark = pytest.mark.anyio

SPEC = {"actions": "features", "hashing_bits": 10, "seed": 3, "reward_window_seconds": 60}
LABELS = {"learner": "banditron", "hashing_bits": 8, "n_labels": 3, "seed": 1}
CONTEXT = {"user": "u1", "hour": 13.0, "mobile": True}
ACTIONS = [{"id": f"sku-{k}", "features": {"kind": f"k{k % 2}", "price": 1.5 * k}} for k in range(6)]
SLOTS = [{"id": p, "features": {"position": p}} for p in ("hero", "tile", "footer")]


def page(**extra: Any) -> dict[str, Any]:
    return {"model": "shop", "features": CONTEXT, "actions": ACTIONS, "slots": SLOTS, **extra}


async def predict(c: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    r = await c.post("/predict", json=body)
    assert r.status_code == 200, r.text
    return r.json()


async def feedback(c: httpx.AsyncClient, status: int, query: str = "", **body: Any) -> dict[str, Any]:
    r = await c.post(f"/feedback{query}", json=body)
    assert r.status_code == status, r.text
    return r.json()


async def test_a_page_is_answered_per_slot_and_each_slot_learned_once(store: Store) -> None:  # noqa: F811
    app = create_app(Settings(store="memory"), store=store)
    async with app_client(app) as c:
        runtime = app.state.runtime
        clock = runtime.clock = Clock(T0)
        assert (await c.put("/models/shop", json=SPEC)).status_code == 201
        p = await predict(c, page())
        assert list(p) == ["decision_id", "model", "model_version", "slots"]
        assert (p["model"], p["model_version"]) == ("shop", 0)
        assert [s["id"] for s in p["slots"]] == ["hero", "tile", "footer"]
        shown = [s["label"] for s in p["slots"]]
        assert len(set(shown)) == 3  # no item fills two slots
        left = {a["id"] for a in ACTIONS}
        for s in p["slots"]:
            assert list(s) == ["id", "label", "label_index", "probability", "ranking"]
            assert ACTIONS[s["label_index"]]["id"] == s["label"]
            assert {r["label"] for r in s["ranking"]} == left  # what the earlier slots left
            probs = [r["probability"] for r in s["ranking"]]
            assert probs == sorted(probs, reverse=True) and sum(probs) == pytest.approx(1.0)
            assert dict((r["label"], r["probability"]) for r in s["ranking"])[s["label"]] == s["probability"]
            left.discard(s["label"])
        d = p["decision_id"]

        # a reward per slot, by index or by id, each once; ?wait=true applies it before the answer
        ok = await feedback(c, 200, "?wait=true", decision_id=d, slot=1, click=True)
        assert ok == {
            "decision_id": d,
            "click": True,
            "reward": 1.0,
            "model": "shop",
            "model_version": 1,
            "held": False,
            "slot": 1,
        }
        assert runtime.models["shop"].position == 1
        again = await feedback(c, 409, decision_id=d, slot="tile", click=False)
        assert again["first_outcome"]["outcome"] == "click" and "'tile'" in again["detail"]
        ok = await feedback(c, 200, "?wait=true", decision_id=d, slot="hero", reward=0.25)
        assert (ok["slot"], ok["reward"], ok["model_version"]) == ("hero", 0.25, 2)
        assert (await feedback(c, 409, decision_id=d, slot=0, click=True))["first_outcome"][
            "outcome"
        ] == "reward"

        # what does not fit: a clear 4xx naming it, nothing learned
        bad = await feedback(c, 422, decision_id=d, slot="side", click=True)
        assert "no slot 'side'" in bad["detail"] and "'footer'" in bad["detail"]
        assert "no slot index 7" in (await feedback(c, 422, decision_id=d, slot=7, click=True))["detail"]
        await feedback(c, 422, decision_id=d, slot=-1, click=True)
        await feedback(c, 422, decision_id=d, slot=1.5, click=True)
        await feedback(c, 422, decision_id=d, slot=50, click=True)
        await feedback(c, 404, decision_id="no-such-page", slot=2, click=True)
        await feedback(c, 404, decision_id="no-such-page", slot="hero", click=True)

        # the footer gets no reward: past the window it is 410, and the sweep gives the default reward
        clock.t += 61.0
        late = await feedback(c, 410, decision_id=d, slot=2, click=True)
        assert "'footer'" not in late["detail"] and late["first_outcome"]["outcome"] == "expired"
        assert await runtime.sweep() == 1
        await runtime.catch_up(runtime.models["shop"])
        events = await store.read_log("shop", 0)
        assert [(e.reward, e.outcome) for e in events] == [
            (True, "click"),
            (0.25, "reward"),
            (False, "expired"),
        ]
        assert [e.decision["page.slot"] for e in events] == [1, 0, 2]
        assert runtime.models["shop"].position == 3
        counts = (await c.get("/models/shop")).json()["counts"]
        assert (counts["decisions"], counts["clicks"], counts["graded"], counts["expired"]) == (3, 1, 1, 1)


async def test_every_refusal_of_a_page_names_what_is_wrong(store: Store) -> None:  # noqa: F811
    app = create_app(Settings(store="memory"), store=store)
    async with app_client(app) as c:
        assert (await c.put("/models/shop", json=SPEC)).status_code == 201
        assert (await c.put("/models/topics", json=LABELS)).status_code == 201
        cases: list[tuple[dict[str, Any], str]] = [
            (page(actions=ACTIONS[:2]), "3 slots but 2 candidate actions"),
            (page(actions=None), "3 slots but 0 candidate actions"),
            (page(slots=[]), "slots"),
            (page(slots=[{"id": str(s)} for s in range(51)]), "slots"),
            (page(slots=[{"id": "a"}, {"id": "a"}]), "'a' is given twice"),
            (page(slots=[{"features": {}}]), "slots.0.id"),
            (page(slots=[{"id": "a", "place": 1}]), "slots.0.place"),
            (page(eligible=["sku-1"]), "eligible: with slots"),
            (page(baseline="sku-1"), "baseline: with slots"),
            (page(slots=[{"id": "a", "eligible": ["sku-9"]}]), "slots.0: unknown action 'sku-9'"),
            (page(slots=[{"id": "a", "eligible": []}]), "slots.0: no eligible action"),
            (
                page(slots=[{"id": "a", "eligible": [1], "excluded": [2]}]),
                "slots.0: give eligible or excluded",
            ),
            (page(slots=[{"id": "a", "excluded": [0], "baseline": 0}]), "slots.0: baseline action 'sku-0'"),
            (
                page(slots=[{"id": "a", "eligible": ["sku-1"]}, {"id": "b", "eligible": ["sku-1"]}]),
                "no candidate action left for slot 'b'",
            ),
            (page(features=[1.0, 2.0]), "features"),
            (page(model="topics", actions=None), "fixed labels"),
            (page(model="nothing"), "nothing"),
        ]
        for body, message in cases:
            r = await c.post("/predict", json=body)
            want = 404 if body["model"] == "nothing" else 422
            assert r.status_code == want and message in r.text, (body.get("slots"), r.status_code, r.text)
        counts = (await c.get("/models/shop")).json()["counts"]
        assert counts["decisions"] == 0


def twin_of(store: Store, request: pytest.FixtureRequest, tmp_path: Path) -> Store:  # noqa: F811
    """A second store of the same kind (the Redis one routes ids as the first does)."""
    if isinstance(store, RedisStore):
        return RedisStore(request.getfixturevalue("redis_url"), prefix=f"test-{uuid.uuid4().hex}:")
    if isinstance(store, SQLiteStore):
        return SQLiteStore(tmp_path / "twin.sqlite3", synchronous="normal")
    return MemoryStore()


async def test_a_one_slot_page_is_todays_decision_bit_for_bit(
    store: Store,  # noqa: F811
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    # today's single decision on a model of the same seed, in a store of the same kind
    twin = create_app(Settings(store="memory"), store=twin_of(store, request, tmp_path))
    app = create_app(Settings(store="memory"), store=store)
    async with app_client(app) as c, app_client(twin) as t:
        for client in (c, t):
            assert (await client.put("/models/shop", json=SPEC)).status_code == 201
        single = {"model": "shop", "features": CONTEXT, "actions": ACTIONS}
        for n, slot in enumerate([{"id": "0"}, {"id": "hero"}, {"id": "0", "excluded": ["sku-1"]}]):
            event = f"e{n}"
            extra = {"excluded": slot["excluded"]} if "excluded" in slot else {}
            want = await predict(t, {**single, **extra, "decision_id": event})
            got = await predict(c, {**single, "slots": [slot], "decision_id": event})
            [s] = got["slots"]
            assert (got["decision_id"], s["label"], s["label_index"], s["probability"]) == (
                want["decision_id"],
                want["label"],
                want["label_index"],
                want["probability"],
            )
            assert s["ranking"] == want["ranking"]
            await feedback(t, 200, "?wait=true", decision_id=want["decision_id"], click=n != 1)
            await feedback(
                c, 200, "?wait=true", decision_id=got["decision_id"], slot=slot["id"], click=n != 1
            )
        a, b = app.state.runtime.models["shop"], twin.state.runtime.models["shop"]
        assert a.position == b.position == 3
        assert a.checksum() == b.checksum()
        await t.delete("/models/shop")


async def test_a_deferred_page_is_activated_whole(store: Store) -> None:  # noqa: F811
    app = create_app(Settings(store="memory"), store=store)
    async with app_client(app) as c:
        runtime = app.state.runtime
        clock = runtime.clock = Clock(T0)
        assert (await c.put("/models/shop", json=SPEC)).status_code == 201
        d = (await predict(c, page(defer=True)))["decision_id"]
        held = await feedback(c, 200, decision_id=d, slot="tile", click=True)
        assert held["held"] is True and held["model_version"] is None
        r = await c.post(f"/decisions/{d}/activate?wait=true")
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["decision_id"], body["status"], body["learned"]) == (d, "activated", None)
        assert [s["status"] for s in body["slots"]] == ["activated"] * 3
        assert [s["slot"] for s in body["slots"]] == [0, 1, 2]
        learned = body["slots"][1]["learned"]
        assert (learned["outcome"], learned["model_version"]) == ("click", 1)
        assert runtime.models["shop"].position == 1
        again = (await c.post(f"/decisions/{d}/activate")).json()
        assert (
            again["status"] == "already_active"
            and [s["status"] for s in again["slots"]] == ["already_active"] * 3
        )
        await feedback(c, 200, "?wait=true", decision_id=d, slot=0, click=False)

        never = (await predict(c, page(defer=True)))["decision_id"]  # never activated: dropped whole
        await feedback(c, 200, decision_id=never, slot=2, click=True)
        plain = (await predict(c, page()))["decision_id"]
        r = await c.post(f"/decisions/{plain}/activate")
        assert r.json()["status"] == "not_deferred" and {s["status"] for s in r.json()["slots"]} == {
            "not_deferred"
        }
        clock.t += 61.0
        assert (await c.post(f"/decisions/{never}/activate")).status_code == 410
        await runtime.sweep()
        await runtime.catch_up(runtime.models["shop"])
        events = [(e.decision["page.slot"], e.outcome) for e in await store.read_log("shop", 0)]
        # the activated page's footer and the plain page's three slots take the default reward
        assert events[:2] == [(1, "click"), (0, "no_click")]
        assert sorted(events[2:]) == [(0, "expired"), (1, "expired"), (2, "expired"), (2, "expired")]
        counts = (await c.get("/models/shop")).json()["counts"]
        assert (counts["deferred"], counts["activated"], counts["dropped_unactivated"]) == (6, 3, 3)


async def test_two_replicas_learn_a_page_rewarded_through_the_other_once_per_slot(redis_url: str) -> None:
    prefix = f"test-{uuid.uuid4().hex}:"
    a_app = create_app(Settings(store="memory"), store=RedisStore(redis_url, prefix=prefix))
    b_app = create_app(Settings(store="memory"), store=RedisStore(redis_url, prefix=prefix))
    async with app_client(a_app) as a, app_client(b_app) as b:
        assert (await a.put("/models/shop", json={**SPEC, "reward_window_seconds": 600})).status_code == 201
        pages = [await predict(a, page(features={**CONTEXT, "user": f"u{t % 4}"})) for t in range(12)]
        calls = []
        for t, p in enumerate(pages):  # each slot rewarded through both replicas at once, by index and by id
            for s, slot in enumerate(SLOTS):
                body = {"decision_id": p["decision_id"], "click": (t + s) % 3 == 0}
                calls.append(b.post("/feedback", json={**body, "slot": s}))
                calls.append(a.post("/feedback", json={**body, "slot": slot["id"]}))
        answers = await asyncio.gather(*calls)
        codes = [r.status_code for r in answers]
        assert codes.count(200) == 36 and codes.count(409) == 36, sorted(
            set(r.text[:90] for r in answers if r.status_code > 409)
        )
        for app in (a_app, b_app):
            runtime = app.state.runtime
            assert await runtime.wait_applied(runtime.models["shop"], 36)
        ma, mb = a_app.state.runtime.models["shop"], b_app.state.runtime.models["shop"]
        assert ma.position == mb.position == 36 and ma.checksum() == mb.checksum()
        await a.delete("/models/shop")
