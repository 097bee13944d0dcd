"""Off-policy evaluation of catalog decisions (issue 54, item 5; service/catalog_ope.py): each
decision weighed on its shown item, the target's probability of it computed over the candidates
rebuilt from the catalog's history. Exact checks: the model that logged, frozen, gives every
decision weight 1 (IPS equals the logged click rate, ESS the count); ``uniform`` and ``first``
weigh each decision by ``1 / (K p)`` and ``[index == 0] / p`` of its own candidates; a decision whose
history is forgotten is left out and counted; the evaluation job over HTTP does the same in its
worker with the model's catalog."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import numpy as np
import pytest

from service.catalog_replay import rebuild
from service.config import ModelSpec
from service.learners.base import make_learner
from service.ope import EvaluationError, LoggedData, evaluate
from service.runtime import Runtime
from service.runtime.catalog_requests import CatalogQuery
from service.store import MemoryStore
from tests.service.api.conftest import app_client, make_app
from tests.service.conftest import Start

pytestmark = pytest.mark.anyio

SHOP = ModelSpec(actions="features", learner="squarecb-adf", hashing_bits=10)


def item(i: int, rng: np.random.Generator) -> dict[str, Any]:
    return {
        "id": f"sku-{i}",
        "features": {"category": f"c{int(rng.integers(3))}", "price": float(rng.integers(9))},
    }


async def jsonl(runtime: Runtime) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async for page in await runtime.decision_log("shop"):
        out += [json.loads(r.to_json()) for r in page]
    return out


async def decisions(runtime: Runtime, rng: np.random.Generator, n: int, learn: bool) -> list[str]:
    ids = []
    for k in range(n):
        query = CatalogQuery(where={"category": ["c0", "c2"]}) if k % 3 == 0 else CatalogQuery()
        p = await runtime.predict("shop", {"user": f"u{k % 5}"}, catalog=query)
        ids.append(p.decision_id)
        if learn:
            await runtime.feedback(p.decision_id, bool(rng.random() < 0.4), wait=True)
    return ids


async def test_stationary_policies_on_catalog_decisions_exactly(start: Start) -> None:
    rng = np.random.default_rng(11)
    runtime = await start(MemoryStore())
    await runtime.create_model("shop", SHOP)
    m = runtime.models["shop"]
    await runtime.items.put("shop", [item(i, rng) for i in range(60)])
    await decisions(runtime, rng, 30, learn=True)
    await runtime.items.put("shop", [item(i, rng) for i in range(50, 80)])  # replaced and new
    await runtime.items.remove("shop", "sku-3")
    frozen = copy.deepcopy(m.learner)  # the model that logs what follows, unchanged while it does
    ids = await decisions(runtime, rng, 40, learn=False)
    for d in ids:
        await runtime.feedback(d, bool(rng.random() < 0.4), wait=False)
    await runtime.catch_up(m)
    records = [r for r in await jsonl(runtime) if r["reward"] is not None]
    assert len(records) == 70
    data = LoggedData.from_records(records, m.catalog)
    assert data.n == 0 and data.catalog is not None
    res = evaluate(data, ["uniform", "first"], runs=2, seed=0)
    reps = [rebuild(m.catalog, r) for r in records]
    p = np.array([r.probability for r in reps])
    rewards = np.array([r["reward"] for r in records], float)
    assert res["logged"]["ips"].value == pytest.approx(rewards.mean(), abs=1e-12)
    w_uniform = 1.0 / (np.array([r.slots.size for r in reps]) * p)
    w_first = np.array([r.index == 0 for r in reps]) / p
    assert res["uniform"]["ips"].value == pytest.approx(float((w_uniform * rewards).mean()), rel=1e-12)
    assert res["first"]["ips"].value == pytest.approx(float((w_first * rewards).mean()), rel=1e-12)
    assert res["uniform"]["snips"].extra == {"catalog": 70.0, "catalog_skipped": 0.0}
    # The frozen model logged the last 40: weight 1 each, bit for bit.
    last = LoggedData.from_records([r for r in records if r["decision_id"] in ids], m.catalog)
    own = evaluate(last, ["model:shop"], runs=2, seed=0, snapshots={"shop": frozen})
    assert own["model:shop"]["ips"].value == own["logged"]["ips"].value
    assert own["model:shop"]["ips"].ess == 40.0
    # Another action learner decides over the rebuilt candidates as an action input.
    cova = make_learner("cova-adf", 1 << 10, 1, {"epsilon": 0.3}, seed=0)
    other = evaluate(data, ["model:cova"], runs=2, seed=0, snapshots={"cova": cova})["model:cova"]["ips"]
    w_cova = (
        np.array([cova.decide(r.action_input(), np.random.default_rng(0)).probs[r.index] for r in reps]) / p
    )
    assert other.value == pytest.approx(float((w_cova * rewards).mean()), rel=1e-12)
    with pytest.raises(EvaluationError, match="catalog decisions have no baseline"):
        evaluate(data, ["baseline"], runs=2, seed=0)
    with pytest.raises(EvaluationError, match="every decision of this log is a catalog decision"):
        evaluate(data, ["squarecb-adf"], runs=2, seed=0)
    # Without the catalog (a file read alone), today's message; with it, forgotten ones are counted.
    with pytest.raises(ValueError, match="70 catalog decisions, which keep their chosen item only"):
        LoggedData.from_records(records)
    m.catalog.history.forget(m.catalog.version)
    res = evaluate(LoggedData.from_records(records, m.catalog), ["uniform"], runs=2, seed=0)
    assert res["uniform"]["ips"].extra["catalog_skipped"] > 0
    assert res["uniform"]["ips"].n + res["uniform"]["ips"].extra["catalog_skipped"] == 70


async def test_the_evaluation_job_weighs_catalog_decisions() -> None:
    rng = np.random.default_rng(2)
    admin = {"X-API-Key": "k"}
    async with app_client(make_app(admin_key="k")) as c:
        spec = {"actions": "features", "learner": "squarecb-adf", "hashing_bits": 10}
        assert (await c.put("/models/shop", json=spec, headers=admin)).status_code == 201
        r = await c.post("/models/shop/items", json=[item(i, rng) for i in range(40)], headers=admin)
        assert r.status_code == 200, r.text
        for k in range(60):
            if k == 30:
                await c.post("/models/shop/items", json=[item(i, rng) for i in range(30, 45)], headers=admin)
            d = (
                await c.post("/predict", json={"model": "shop", "features": {"u": k % 4}}, headers=admin)
            ).json()
            assert (
                await c.post(
                    "/feedback", json={"decision_id": d["decision_id"], "click": k % 3 == 0}, headers=admin
                )
            ).status_code == 200
        body = {"policies": ["uniform", "first", "model:shop"], "runs": 2}
        r = await c.post("/models/shop/evaluations", json=body, headers=admin)
        assert r.status_code == 202, r.text
        job = r.json()
        for _ in range(600):
            job = (await c.get(f"/models/shop/evaluations/{job['id']}", headers=admin)).json()
            if job["state"] not in ("queued", "running"):
                break
            await asyncio.sleep(0.1)
    assert job["state"] == "done", job
    res = job["results"]
    assert job["events"] == 60 and set(res) == {"logged", "uniform", "first", "model:shop"}
    for name in res:
        assert res[name]["ips"]["catalog"] == 60 and res[name]["ips"]["catalog_skipped"] == 0
    assert res["logged"]["ips"]["value"] == pytest.approx(20 / 60)


async def test_the_dsjson_export_with_every_candidate() -> None:
    """``candidates=all``: a catalog decision's line lists every candidate it was over, rebuilt
    (as many as the decision had, the shown one at its position, its probability), and VW learns
    from each line; the default keeps the chosen item alone."""
    rng = np.random.default_rng(4)
    async with app_client(make_app()) as c:
        spec = {"actions": "features", "learner": "squarecb-adf", "hashing_bits": 10}
        assert (await c.put("/models/shop", json=spec)).status_code == 201
        assert (await c.post("/models/shop/items", json=[item(i, rng) for i in range(25)])).status_code == 200
        answers = []
        for k in range(12):
            if k == 6:  # a change between decisions: the first six are rebuilt from the history
                await c.post("/models/shop/items", json=[item(i, rng) for i in range(20, 30)])
            body = {
                "model": "shop",
                "features": {"u": k % 3},
                **({"filter": {"category": "c1"}} if k % 2 else {}),
            }
            d = (await c.post("/predict", json=body)).json()
            answers.append(d)
            assert (
                await c.post("/feedback", json={"decision_id": d["decision_id"], "click": k % 2 == 0})
            ).status_code == 200
        every = (
            await c.get("/models/shop/log", params={"format": "dsjson", "candidates": "all"})
        ).text.splitlines()
        chosen = (await c.get("/models/shop/log", params={"format": "dsjson"})).text.splitlines()
    assert len(every) == len(chosen) == 12
    for line, short, d in zip(every, chosen, answers, strict=True):
        doc, one = json.loads(line), json.loads(short)
        assert len(doc["c"]["_multi"]) == d["candidates"] and len(one["c"]["_multi"]) == 1
        assert doc["_labelIndex"] == d["label_index"] and doc["_label_Action"] == d["label_index"] + 1
        assert doc["_label_probability"] == d["probability"] == one["_label_probability"]
        assert doc["c"]["_multi"][d["label_index"]] == one["c"]["_multi"][0]  # the shown item's features
        assert doc["a"] == [d["label_index"] + 1] and doc["p"] == [d["probability"]]
    vw = pytest.importorskip("vowpalwabbit")
    ws = vw.Workspace("--cb_explore_adf --dsjson --quiet -q xa")
    for line, d in zip(every, answers, strict=True):
        examples = ws.parse(line)
        labelled = [
            k for k, e in enumerate(examples[1:]) if e.get_label(vw.LabelType.CONTEXTUAL_BANDIT).costs
        ]
        assert labelled == [d["label_index"]] and len(examples) == d["candidates"] + 1
        ws.learn(examples)
        ws.finish_example(examples)
