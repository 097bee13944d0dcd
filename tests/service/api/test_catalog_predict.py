"""``POST /predict`` from a model's catalog (issue 54; service/runtime/catalog_requests.py): catalog
ids as candidates, the whole active catalog, a filter, the top k; the 422s naming unknown, inactive
and expired ids; the exact probability of the drawn item; the learn event and the decision log keep
the chosen item's id and features; learning from a catalog decision equals learning from the same
item sent with its features."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest

from service.api.app import create_app
from service.catalog import Catalog
from service.config import Settings
from service.learners.base import Decision
from service.learners.squarecb import igw_scores
from service.ope import LoggedData
from service.sampling import decision_rng
from service.serial import checksum
from service.store import Store
from service.store.redis import RedisStore
from tests.service.api.conftest import app_client, make_app
from tests.service.test_decision_log import store  # noqa: F401 (the store fixture)

pytestmark = pytest.mark.anyio

BITS = 12


def items(n: int) -> list[dict[str, object]]:
    return [
        {
            "id": f"sku-{i}",
            "features": {
                "category": ["shoes", "bags", "hats"][i % 3],
                "brand": f"b{i % 7}",
                "price": 1.0 + i % 5,
            },
        }
        for i in range(n)
    ]


async def catalog_model(c, name: str = "shop", n: int = 30, **extra: object) -> Catalog:
    """A squarecb-adf model with a catalog of ``n`` items, registered through the runtime's write
    path (one ``items`` event of the model's log, :mod:`service.runtime.items`)."""
    spec = {"actions": "features", "learner": "squarecb-adf", "hashing_bits": BITS, "seed": 1, **extra}
    r = await c.put(f"/models/{name}", json=spec)
    assert r.status_code == 201, r.text
    await put_items(c, name, items(n))
    return c.app_ref.state.runtime.models[name].catalog


async def put_items(c, name: str, its: list[dict[str, object]]) -> None:
    await c.app_ref.state.runtime.items.put(name, its)


@pytest.fixture
async def c():
    """A client of a fresh app on a memory store; ``c.app_ref``: the app (its runtime)."""
    app = make_app()
    async with app_client(app) as client:
        client.app_ref = app
        yield client


CTX = {"user": "u1", "mobile": True}


async def test_whole_catalog_ids_filter_and_top_k(c) -> None:
    await catalog_model(c)
    r = await c.post("/predict", json={"model": "shop", "features": CTX})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["candidates"] == 30 and len(body["ranking"]) == 10 and "probabilities" not in body
    assert body["label"].startswith("sku-") and 0 < body["probability"] <= 1
    assert body["label_index"] == int(body["label"].removeprefix("sku-"))  # registration order
    ps = [x["probability"] for x in body["ranking"]]
    assert ps == sorted(ps, reverse=True) and len(r.content) <= 5_000

    r = await c.post("/predict", json={"model": "shop", "features": CTX, "k": 3})
    assert len(r.json()["ranking"]) == 3
    r = await c.post("/predict", json={"model": "shop", "features": CTX, "k": 1000})
    assert r.status_code == 422 and "k" in r.json()["detail"]

    ids = ["sku-4", "sku-2", "sku-9"]
    r = await c.post("/predict", json={"model": "shop", "features": CTX, "candidates": ids})
    body = r.json()
    assert body["candidates"] == 3 and body["label"] == ids[body["label_index"]]
    assert sorted(x["label"] for x in body["ranking"]) == sorted(ids)
    assert math.isclose(sum(x["probability"] for x in body["ranking"]), 1.0)

    r = await c.post("/predict", json={"model": "shop", "features": CTX, "filter": {"category": ["bags"]}})
    body = r.json()
    assert body["candidates"] == 10 and all(int(x["label"][4:]) % 3 == 1 for x in body["ranking"])
    both = {"category": ["bags", "hats"], "brand": "b2"}
    r = await c.post("/predict", json={"model": "shop", "features": CTX, "filter": both, "k": 100})
    want = {f"sku-{i}" for i in range(30) if i % 3 in (1, 2) and i % 7 == 2}
    assert {x["label"] for x in r.json()["ranking"]} == want
    r = await c.post(
        "/predict", json={"model": "shop", "features": CTX, "candidates": ids, "filter": {"category": "bags"}}
    )
    assert r.json()["candidates"] == 1 and r.json()["label"] == "sku-4"
    r = await c.post("/predict", json={"model": "shop", "features": CTX, "filter": {"category": "boots"}})
    assert r.status_code == 422 and "no active catalog item" in r.json()["detail"]

    # eligible / excluded by id over the catalog
    r = await c.post("/predict", json={"model": "shop", "features": CTX, "eligible": ["sku-7", "sku-8"]})
    assert {x["label"] for x in r.json()["ranking"]} == {"sku-7", "sku-8"} and r.json()["candidates"] == 2
    r = await c.post(
        "/predict", json={"model": "shop", "features": CTX, "candidates": ids, "excluded": ["sku-2"]}
    )
    assert {x["label"] for x in r.json()["ranking"]} == {"sku-4", "sku-9"}
    assert {x["label_index"] for x in r.json()["ranking"]} == {0, 2}  # positions among the candidates

    # a baseline names a candidate (checked, unused online); other modes are refused for now
    r = await c.post(
        "/predict", json={"model": "shop", "features": CTX, "candidates": ids, "baseline": "sku-2"}
    )
    assert r.status_code == 200
    r = await c.post(
        "/predict", json={"model": "shop", "features": CTX, "candidates": ids, "baseline": "sku-5"}
    )
    assert r.status_code == 422 and "baseline: 'sku-5' is not one of this request's candidates" in r.text
    assert (await c.post("/models/shop/rollout", json={"mode": "logging"})).status_code == 200
    r = await c.post("/predict", json={"model": "shop", "features": CTX, "baseline": "sku-2"})
    assert r.status_code == 422 and "served in online mode only" in r.json()["detail"]


async def test_unknown_inactive_expired_ids_are_422s_naming_them(c) -> None:
    await catalog_model(c)
    await put_items(
        c,
        "shop",
        [
            {"id": "sku-off", "features": {"category": "shoes"}, "active": False},
            {"id": "sku-old", "features": {"category": "shoes"}, "expires_at": time.time() - 1},
        ],
    )
    cases = {
        "sku-nope": "candidates.1: item 'sku-nope' is not in the catalog",
        "sku-off": "candidates.1: item 'sku-off' is inactive",
        "sku-old": "candidates.1: item 'sku-old' expired",
        "sku-1": "candidates.1: item 'sku-1' is given twice",
    }
    for bad, message in cases.items():
        r = await c.post("/predict", json={"model": "shop", "features": CTX, "candidates": ["sku-1", bad]})
        assert r.status_code == 422 and message in r.json()["detail"], r.text
    r = await c.post("/predict", json={"model": "shop", "features": CTX})  # neither is served whole
    assert r.json()["candidates"] == 30
    r = await c.post("/predict", json={"model": "shop", "features": CTX, "eligible": ["sku-off"]})
    assert r.status_code == 422 and "'sku-off' is not one of this request's candidates" in r.json()["detail"]
    r = await c.post("/predict", json={"model": "shop", "features": CTX, "filter": {"price": 2.0}})
    assert r.status_code == 422 and "filter" in r.json()["detail"]
    # a model whose catalog is empty: an id is unknown; without actions, today's 422 asking for them
    r = await c.put("/models/bare", json={"actions": "features", "hashing_bits": BITS})
    r = await c.post("/predict", json={"model": "bare", "features": CTX, "candidates": ["a"]})
    assert r.status_code == 422 and "candidates.0: item 'a' is not in the catalog" in r.json()["detail"]
    r = await c.post("/predict", json={"model": "bare", "features": CTX})
    assert r.status_code == 422 and 'send "actions"' in r.json()["detail"]
    # a label model: candidates are refused
    r = await c.put("/models/labels", json={"labels": ["a", "b"], "hashing_bits": BITS})
    r = await c.post("/predict", json={"model": "labels", "features": CTX, "candidates": ["a"]})
    assert r.status_code == 422 and "has fixed labels" in r.json()["detail"]


async def test_mixed_actions_and_catalog_ids(c) -> None:
    await catalog_model(c)
    sent = [{"id": "new-1", "features": {"category": "shoes", "brand": "b9"}}]
    r = await c.post(
        "/predict", json={"model": "shop", "features": CTX, "actions": sent, "candidates": ["sku-1", "sku-2"]}
    )
    body = r.json()
    assert r.status_code == 200 and body["candidates"] == 3
    assert body["label"] == ["new-1", "sku-1", "sku-2"][body["label_index"]]
    r = await c.post(
        "/predict",
        json={"model": "shop", "features": CTX, "actions": [{"id": "sku-1"}], "candidates": ["sku-1"]},
    )
    assert r.status_code == 422 and "actions.0.id: 'sku-1' is also a catalog candidate" in r.json()["detail"]
    r = await c.post("/predict", json={"model": "shop", "features": CTX, "actions": sent, "k": 3})
    assert r.status_code == 422 and "k: the top k answers catalog decisions" in r.json()["detail"]
    # actions alone: today's answer, every probability
    r = await c.post("/predict", json={"model": "shop", "features": CTX, "actions": sent})
    assert r.json()["probabilities"] == [1.0]
    # every sent action excluded: the decision is over the catalog items alone, which keep their
    # positions after the sent ones (it was a 500: the decision's part counted the empty one)
    for n in range(20):
        body = {"model": "shop", "features": CTX, "actions": sent, "candidates": ["sku-1", "sku-2"]}
        r = await c.post("/predict", json={**body, "excluded": ["new-1"], "decision_id": f"x{n}"})
        got = r.json()
        assert r.status_code == 200 and got["candidates"] == 2, r.text
        assert (got["label"], got["label_index"]) in {("sku-1", 1), ("sku-2", 2)}


async def test_exact_probability_by_enumeration_of_the_draw(c) -> None:
    """The answer's probability is the one the item is drawn with: the decision's one uniform ``u``
    (its decision id's generator) mapped over a fine grid gives every candidate a share within the
    grid's step of its inverse-gap-weighting probability, and the chosen one's is the answer's."""
    cat = await catalog_model(c, n=6)
    m = c.app_ref.state.runtime.models["shop"]
    for _ in range(20):  # train a little so the costs differ
        r = await c.post("/predict", json={"model": "shop", "features": CTX})
        label = r.json()["label"]
        await c.post(
            "/feedback?wait=true", json={"decision_id": r.json()["decision_id"], "click": label == "sku-2"}
        )
    r = await c.post("/predict", json={"model": "shop", "features": CTX, "k": 6})
    body = r.json()
    ctx = m.featurise.context(CTX)
    cost = cat.scores(m.learner.w_, ctx, cat.select_all())
    from service.catalog_explore import CatalogExploration

    gamma_t = m.learner.params.gamma_scale * float(m.learner.t_) ** m.learner.params.gamma_exponent
    gamma = CatalogExploration().gamma(gamma_t, 6)
    eligible = np.ones(6, np.bool_)
    _, _, p = igw_scores(-cost, gamma, 0.5, eligible)
    grid = 20_000
    counts = np.zeros(6)
    for j in range(grid):
        counts[igw_scores(-cost, gamma, (j + 0.5) / grid, eligible)[1]] += 1
    assert np.abs(counts / grid - p).max() <= 1.0 / grid
    u = decision_rng(body["decision_id"]).random()
    assert igw_scores(-cost, gamma, u, eligible)[1] == body["label_index"]
    assert body["probability"] == p[body["label_index"]]
    assert {x["label"]: x["probability"] for x in body["ranking"]} == {
        f"sku-{i}": float(p[i]) for i in range(6)
    }


async def test_learning_from_a_catalog_decision_and_its_log(c) -> None:
    """Two models of the same spec: one decides from its catalog, the other is sent the chosen item
    with its features, as the one candidate, with the same decision id; after both feedbacks the
    checksums are equal. The decision log keeps the chosen item's id, features and probability,
    and the dsjson line carries them."""
    cat = await catalog_model(c, "cat")
    r = await c.put(
        "/models/sent",
        json={"actions": "features", "learner": "squarecb-adf", "hashing_bits": BITS, "seed": 1},
    )
    models = c.app_ref.state.runtime.models
    features = {i["id"]: i["features"] for i in items(30)}
    for t in range(25):
        ctx = {"user": f"u{t % 3}"}
        r = await c.post("/predict", json={"model": "cat", "features": ctx, "decision_id": f"c{t}"})
        chosen, p = r.json()["label"], r.json()["probability"]
        click = features[chosen]["category"] == ["shoes", "bags", "hats"][t % 3]
        r2 = await c.post(
            "/predict",
            json={
                "model": "sent",
                "features": ctx,
                "actions": [{"id": chosen, "features": features[chosen]}],
            },
        )
        for d in (r.json()["decision_id"], r2.json()["decision_id"]):
            assert (
                await c.post("/feedback?wait=true", json={"decision_id": d, "click": click})
            ).status_code == 200
    assert checksum(models["cat"].learner.state()) == checksum(models["sent"].learner.state())
    assert models["cat"].learner.counts_.tolist() == [25.0, 25.0]

    r = await c.get("/models/cat/log")
    lines = [json.loads(x) for x in r.text.splitlines()]
    assert len(lines) == 25
    last = lines[-1]
    assert last["label"] == chosen and last["probs"] == [p] and last["label_index"] == 0
    v = cat.features(cat.slot_of(chosen))
    assert last["actions"] == [{"id": chosen, "idx": v.idx.tolist(), "val": v.val.tolist()}]
    with pytest.raises(ValueError, match="25 catalog decisions, which keep their chosen item only"):
        LoggedData.from_records(lines)  # another policy's probability needs every candidate
    r = await c.get("/models/cat/log", params={"format": "dsjson"})
    ds = json.loads(r.text.splitlines()[-1])
    assert ds["_label_probability"] == p and ds["p"] == [p] and len(ds["c"]["_multi"]) == 1
    vw = pytest.importorskip("vowpalwabbit")
    ws = vw.Workspace("--cb_explore_adf --dsjson --quiet -q xa")
    for line in r.text.splitlines():  # VW reads each line: the shown item, its cost and probability
        examples = ws.parse(line)
        ((cost,),) = [e.get_label(vw.LabelType.CONTEXTUAL_BANDIT).costs for e in examples[1:]]
        assert len(examples) == 2 and cost.probability == pytest.approx(json.loads(line)["p"][0], rel=1e-6)
        ws.learn(examples)
        ws.finish_example(examples)
    ws.finish()
    # the item changed afterwards: what was logged and learned is what the decision saw
    await put_items(c, "cat", [{"id": chosen, "features": {"category": "other"}}])
    r = await c.get("/models/cat/log")
    assert json.loads(r.text.splitlines()[-1])["actions"][0]["idx"] == v.idx.tolist()


async def test_every_store_keeps_catalog_decisions_and_a_replica_holds_the_same_model(
    store: Store,  # noqa: F811
) -> None:
    """On memory, SQLite and Redis: the stored record of a catalog decision is the chosen item alone
    with its features and probability (and the candidates' count and catalog version in the memo),
    the log lists it, and a second runtime on the store holds the same catalog and model."""
    app = create_app(Settings(store="memory", decision_id_seed=5), store=store)
    async with app_client(app) as c:
        c.app_ref = app
        cat = await catalog_model(c)
        m = app.state.runtime.models["shop"]
        for t in range(12):
            body = {"model": "shop", "features": {"user": f"u{t % 3}"}}
            if t % 3 == 1:
                body["candidates"] = [f"sku-{i}" for i in range(t, t + 5)]
            p = (await c.post("/predict", json=body)).json()
            record = await store.get_decision(p["decision_id"])
            x = m.featurise.unpack(record.x)
            v = cat.features(cat.slot_of(p["label"]))
            assert x.ids == [p["label"]] and x.a_idx.tolist() == v.idx.tolist()
            d = Decision.from_state(record.decision)
            assert d.probs.tolist() == [p["probability"]] and d.label == 0
            assert int(d.memo["catalog.candidates"]) == p["candidates"] == (5 if t % 3 == 1 else 30)
            assert int(d.memo["catalog.version"]) == cat.version
            r = await c.post(
                "/feedback?wait=true", json={"decision_id": p["decision_id"], "click": t % 2 == 0}
            )
            assert r.status_code == 200, r.text
        log = [json.loads(line) for line in (await c.get("/models/shop/log")).text.splitlines()]
        assert len(log) == 12 and all(
            len(e["actions"]) == 1 and e["actions"][0]["id"] == e["label"] for e in log
        )
        shared = RedisStore(store.url, prefix=store.prefix) if isinstance(store, RedisStore) else store
        replica = create_app(Settings(store="memory"), store=shared)
        async with app_client(replica):
            b = replica.state.runtime.models["shop"]
            assert b.catalog.to_bytes() == cat.to_bytes()
            assert m.position == b.position == 13 and m.checksum() == b.checksum()  # items + 12 learns
