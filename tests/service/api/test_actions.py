"""Action-feature models over HTTP (issue 39): create, predict with candidates, feedback; eligible,
excluded and baseline by action id; deferred decisions and graded rewards as for label models; the
422s; every store keeping the candidates in the record and the decision log; a second replica on
the store holding the same model; and Vowpal Wabbit's ``--cb_explore_adf --dsjson`` reading the
export."""

from __future__ import annotations

import asyncio
import copy
import json

import numpy as np
import pytest

from service.api.app import create_app
from service.config import Settings
from service.learners.base import Decision
from service.sampling import reward_bit
from service.serial import checksum
from service.store import Store
from service.store.redis import RedisStore
from tests.service.api.conftest import app_client, make_app
from tests.service.test_decision_log import store  # noqa: F401 (the store fixture)

pytestmark = pytest.mark.anyio

USERS, ITEMS = 12, 40


def spec(learner: str = "squarecb-adf", **extra: object) -> dict[str, object]:
    return {"actions": "features", "learner": learner, "hashing_bits": 12, "seed": 1, **extra}


class Shop:
    """Users and items with latent vectors (users: a segment feature; items: a category and a brand);
    the best item for a user is the one whose category matches the user's segment."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def request(self, n: int = 6) -> tuple[dict[str, object], list[dict[str, object]], int]:
        user = int(self.rng.integers(USERS))
        items = self.rng.choice(ITEMS, size=n, replace=False).tolist()
        context = {"user": f"u{user}", "segment": f"s{user % 4}"}
        actions = [
            {"id": f"item-{i}", "features": {"category": f"c{i % 4}", "brand": f"b{i % 7}"}} for i in items
        ]
        return context, actions, user % 4

    @staticmethod
    def clicked(action: dict[str, object], segment: int) -> bool:
        return action["features"].get("category") == f"c{segment}"  # type: ignore[attr-defined]


async def test_predict_feedback_and_the_request_rules() -> None:
    async with app_client(make_app()) as c:
        r = await c.put("/models/shop", json={"actions": "features", "hashing_bits": 12})
        assert r.status_code == 201 and r.json()["config"]["learner"] == "squarecb-adf"  # the default
        context, actions, _ = Shop(0).request()
        r = await c.post("/predict", json={"model": "shop", "features": context, "actions": actions})
        assert r.status_code == 200, r.text
        body = r.json()
        ids = [a["id"] for a in actions]
        assert body["label"] == ids[body["label_index"]] and len(body["probabilities"]) == len(ids)
        assert sorted(x["label"] for x in body["ranking"]) == sorted(ids)
        assert [x["label"] for x in body["ranking"]] == [
            ids[i] for i in sorted(range(len(ids)), key=lambda i: -body["probabilities"][i])
        ]
        r = await c.post("/feedback?wait=true", json={"decision_id": body["decision_id"], "click": True})
        assert r.status_code == 200 and r.json()["model_version"] == 1

        # eligible / excluded / baseline name action ids (or indices in the request)
        r = await c.post(
            "/predict",
            json={"model": "shop", "features": context, "actions": actions, "eligible": [ids[1], 3]},
        )
        p = r.json()["probabilities"]
        assert r.status_code == 200 and {i for i, q in enumerate(p) if q > 0} <= {1, 3}
        assert {x["label"] for x in r.json()["ranking"]} == {ids[1], ids[3]}
        r = await c.post(
            "/predict", json={"model": "shop", "features": context, "actions": actions, "excluded": ids[1:]}
        )
        assert r.json()["label"] == ids[0] and r.json()["probability"] == 1.0
        bad = [
            ({"actions": actions + actions[:1]}, f"actions.{len(ids)}.id: '{ids[0]}' is given twice"),
            ({"actions": actions * 20}, "at most 100 allowed (CLICKBOOST_MAX_ACTIONS)"),
            ({}, 'send "actions"'),
            ({"actions": []}, "at least one candidate"),
            ({"actions": actions, "eligible": ["nope"]}, "unknown action 'nope' (this request's actions are"),
            ({"actions": actions, "baseline": "nope"}, "unknown baseline action 'nope'"),
            ({"actions": actions, "excluded": ids}, "no eligible action: every action is excluded"),
            ({"actions": [{"id": "x", "features": {"p": "y" * 2000}}]}, "actions.0.features.p"),
            ({"actions": [{"id": "x", "price": 3}]}, "actions.0.price"),
        ]
        for extra, words in bad:
            r = await c.post("/predict", json={"model": "shop", "features": context, **extra})
            assert r.status_code == 422 and words in r.json()["detail"], (words, r.text)

        # a label model refuses candidates; the learners fit their kind of model
        assert (await c.put("/models/labels", json={"hashing_bits": 8, "n_labels": 3})).status_code == 201
        r = await c.post("/predict", json={"model": "labels", "features": {"a": 1.0}, "actions": actions})
        assert r.status_code == 422 and "candidate actions need a model with" in r.text
        r = await c.put("/models/x", json={"actions": "features", "hashing_bits": 8, "learner": "cova"})
        assert r.status_code == 422 and "learners that can: cova-adf, squarecb-adf" in r.text
        r = await c.put("/models/x", json={"hashing_bits": 8, "n_labels": 3, "learner": "cova-adf"})
        assert r.status_code == 422 and "is an action-feature learner" in r.text
        for wrong, words in [
            ({"n_features": 3}, "give hashing_bits, not n_features"),
            ({"hashing_bits": 8, "labels": ["a", "b"]}, "give no labels"),
        ]:
            r = await c.put("/models/x", json={"actions": "features", **wrong})
            assert r.status_code == 422 and words in r.text, r.text


async def test_every_store_keeps_the_candidates_and_a_replica_holds_the_same_model(store: Store) -> None:  # noqa: F811
    """Decisions with candidates, clicks, graded rewards, a deferred decision and a baseline in
    apprentice mode: every learn is the learner's update on the record's input (rebuilt from the
    stored x), the decision log lists every candidate, and a second runtime on the store applies the
    same log to the same checksum."""
    app = create_app(Settings(store="memory", decision_id_seed=3), store=store)
    shop = Shop(1)
    async with app_client(app) as c:
        runtime = app.state.runtime
        for learner in ("squarecb-adf", "cova-adf"):
            assert (await c.put(f"/models/{learner}", json=spec(learner))).status_code == 201
            made = []
            for t in range(40):
                context, actions, segment = shop.request(n=2 + t % 6)
                defer = t % 10 == 9
                body = {"model": learner, "features": context, "actions": actions, "defer": defer}
                p = (await c.post("/predict", json=body)).json()
                record = await store.get_decision(p["decision_id"])
                assert record is not None
                m = runtime.models[learner]
                x = m.featurise.unpack(record.x)
                assert x.ids == [a["id"] for a in actions]
                before = copy.deepcopy(m.learner)
                reward: bool | float = Shop.clicked(actions[p["label_index"]], segment)
                if t % 4 == 3:
                    reward = 0.25 if reward else 0.0
                field = "click" if isinstance(reward, bool) else "reward"
                if defer:
                    r = await c.post("/feedback", json={"decision_id": p["decision_id"], field: reward})
                    assert r.json()["held"] is True
                    r = await c.post(f"/decisions/{p['decision_id']}/activate?wait=true")
                    assert r.json()["status"] == "activated"
                else:
                    r = await c.post(
                        "/feedback?wait=true", json={"decision_id": p["decision_id"], field: reward}
                    )
                    assert r.status_code == 200, r.text
                learned = reward
                if not isinstance(reward, bool) and not m.learner.graded and 0 < reward < 1:
                    learned = reward_bit(p["decision_id"], reward)
                before.learn(x, Decision.from_state(record.decision), learned)
                assert checksum(before.state()) == checksum(m.learner.state())
                made.append((p, actions, reward))
            log = [json.loads(line) for line in (await c.get(f"/models/{learner}/log")).text.splitlines()]
            assert len(log) == 40
            for entry, (p, actions, reward) in zip(log, made, strict=True):
                assert [a["id"] for a in entry["actions"]] == [a["id"] for a in actions]
                assert entry["label"] == p["label"] and entry["label_index"] == p["label_index"]
                assert entry["probs"] == p["probabilities"]
                assert entry["reward"] == (int(reward) if isinstance(reward, bool) else reward)
                assert all(len(a["idx"]) == 2 for a in entry["actions"])  # category and brand
        shared = RedisStore(store.url, prefix=store.prefix) if isinstance(store, RedisStore) else store
        replica = create_app(Settings(store="memory"), store=shared)
        async with app_client(replica):
            for learner in ("squarecb-adf", "cova-adf"):
                a, b = runtime.models[learner], replica.state.runtime.models[learner]
                assert a.position == b.position == 40
                assert a.checksum() == b.checksum()


async def test_it_learns_the_shop_and_new_items_from_their_features() -> None:
    """The best item of a segment is any item of the segment's category: after 1,500 rounds with
    items 0-39, rounds with items never seen (ids 1000+) pick the matching category mostly."""
    async with app_client(make_app()) as c:
        for learner in ("squarecb-adf", "cova-adf"):
            assert (await c.put(f"/models/{learner}", json=spec(learner))).status_code == 201
            shop = Shop(2)
            for _ in range(1500):
                context, actions, segment = shop.request()
                p = (
                    await c.post("/predict", json={"model": learner, "features": context, "actions": actions})
                ).json()
                click = Shop.clicked(actions[p["label_index"]], segment)
                # wait: the memory store never awaits, so in-process the apply loop would not run
                await c.post("/feedback?wait=true", json={"decision_id": p["decision_id"], "click": click})
            hits = 0
            for t in range(200):
                context, actions, segment = shop.request()
                for a in actions:
                    a["id"] = f"new-{t}-{a['id']}"
                p = (
                    await c.post("/predict", json={"model": learner, "features": context, "actions": actions})
                ).json()
                best = any(Shop.clicked(a, segment) for a in actions)
                hits += Shop.clicked(actions[p["label_index"]], segment) or not best
            assert hits / 200 > 0.8, (learner, hits)


async def test_context_pairs_over_http_learn_what_needs_two_context_features() -> None:
    """A model with ``context_pairs`` keeps it in its config and learns a click that needs two context
    features together (item "same" is clicked iff the segment and the day agree, "other" iff they
    differ: an XOR, which no sum of single context features x item features ranks right in more
    than 3 of 4 contexts); a bad bound is a 422 naming it."""
    async with app_client(make_app()) as c:
        r = await c.put("/models/bad", json=spec("cova-adf", params={"context_pairs": -1}))
        assert r.status_code == 422 and "context_pairs" in r.text
        hits = {}
        for name, params in (("plain", {}), ("pairs", {"context_pairs": 8, "C": 0.1})):
            r = await c.put(f"/models/{name}", json=spec("cova-adf", params=params))
            assert r.status_code == 201
            assert r.json()["config"]["params"].get("context_pairs", 0) == params.get("context_pairs", 0)
            rng = np.random.default_rng(3)
            actions = [{"id": k, "features": {"kind": k}} for k in ("same", "other")]
            hits[name] = 0
            for t in range(1500):
                seg, day = rng.integers(2, size=2).tolist()
                features = {"segment": f"s{seg}", "day": f"d{day}"}
                p = (
                    await c.post("/predict", json={"model": name, "features": features, "actions": actions})
                ).json()
                click = p["label"] == ("same" if seg == day else "other")
                await c.post("/feedback?wait=true", json={"decision_id": p["decision_id"], "click": click})
                hits[name] += t >= 1000 and click
        assert hits["pairs"] / 500 > 0.9 and hits["plain"] / 500 < 0.8, hits


async def test_vowpal_wabbit_reads_the_adf_export() -> None:
    """``vw --cb_explore_adf --dsjson`` parses every exported line of an action-feature model to the
    logged action, cost and probability, one example per candidate after the shared one, and its
    loss on a second pass is below the first."""
    vw = pytest.importorskip("vowpalwabbit")
    app = create_app(Settings(store="memory", admin_key="admin", api_keys="key", decision_id_seed=7))
    async with app_client(app) as c:
        c.headers["X-API-Key"] = "admin"
        assert (
            await c.put("/models/shop", json=spec("cova-adf", params={"epsilon": 0.5}))
        ).status_code == 201
        shop = Shop(3)
        made = []
        for t in range(800):
            context, actions, segment = shop.request(n=2 + t % 5)
            if t % 50 == 0:
                actions[0]["features"] = {}  # an action without features
            p = (
                await c.post("/predict", json={"model": "shop", "features": context, "actions": actions})
            ).json()
            click = Shop.clicked(actions[p["label_index"]], segment)
            await c.post("/feedback?wait=true", json={"decision_id": p["decision_id"], "click": click})
            made.append((p, len(actions), click))
        lines = (await c.get("/models/shop/log", params={"format": "dsjson"})).text.splitlines()
    assert len(lines) == len(made)
    first = json.loads(lines[0])
    assert first["_labelIndex"] == made[0][0]["label_index"] and len(first["c"]["_multi"]) == made[0][1]
    ws = vw.Workspace("--cb_explore_adf --dsjson --quiet -q xa")
    label = vw.LabelType.CONTEXTUAL_BANDIT

    def one_pass() -> float:
        before = ws.get_sum_loss()
        for line, (p, n, click) in zip(lines, made, strict=True):
            examples = ws.parse(line)
            assert len(examples) == 1 + n
            ((index, cost),) = [(i, c) for i, e in enumerate(examples[1:]) for c in e.get_label(label).costs]
            assert index == p["label_index"] and cost.action == p["label_index"] + 1
            assert cost.cost == -float(click)
            assert cost.probability == pytest.approx(p["probability"], rel=1e-6)
            ws.learn(examples)
            ws.finish_example(examples)
        return (ws.get_sum_loss() - before) / len(lines)

    a, b = one_pass(), one_pass()
    assert b < a < 0, (a, b)
    ws.finish()


async def test_off_policy_evaluation_of_an_action_log_over_http() -> None:
    # Uniform logging over each request's candidates (epsilon 1): IPS of "first" must cover the
    # click rate of the first candidates actually logged, which is known exactly here.
    settings = {"api_keys": "k", "admin_key": "admin", "decision_id_seed": 1}
    admin = {"X-API-Key": "admin"}
    async with app_client(make_app(**settings)) as c:
        body = spec("cova-adf", params={"epsilon": 1.0})
        assert (await c.put("/models/shop", json=body, headers=admin)).status_code == 201
        shop, first_clicks = Shop(3), []
        for _ in range(400):
            context, actions, segment = shop.request()
            r = await c.post(
                "/predict", json={"model": "shop", "features": context, "actions": actions}, headers=admin
            )
            d = r.json()
            first_clicks.append(Shop.clicked(actions[0], segment))
            click = Shop.clicked(actions[d["label_index"]], segment)
            f = await c.post(
                "/feedback", json={"decision_id": d["decision_id"], "click": click}, headers=admin
            )
            assert f.status_code == 200
        for bad, why in (("constant:0", "names another candidate"), ("cova", "needs an action learner")):
            r = await c.post("/models/shop/evaluations", json={"policies": [bad]}, headers=admin)
            assert r.status_code == 422 and why in r.text, r.text
        policies = ["uniform", "first", "squarecb-adf", "model:shop"]
        r = await c.post("/models/shop/evaluations", json={"policies": policies, "runs": 2}, headers=admin)
        assert r.status_code == 202, r.text
        job = r.json()
        for _ in range(600):
            job = (await c.get(f"/models/shop/evaluations/{job['id']}", headers=admin)).json()
            if job["state"] != "running":
                break
            await asyncio.sleep(0.1)
    assert job["state"] == "done", job
    res = job["results"]
    assert job["events"] == 400 and set(res) == {"logged", *policies}
    assert set(res["first"]) == {"ips", "snips"} and set(res["squarecb-adf"]) == {"replay"}
    first = res["first"]["ips"]
    truth = float(np.mean(first_clicks))
    se = (first["high"] - first["low"]) / (2 * 1.96)
    assert abs(first["value"] - truth) <= 3.3 * se, (first, truth)
    # uniform is the logging policy itself: every weight 1, IPS is the logged click rate
    assert res["uniform"]["ips"]["value"] == pytest.approx(res["logged"]["ips"]["value"])
    assert res["uniform"]["ips"]["ess"] == pytest.approx(400)
    replay = res["squarecb-adf"]["replay"]
    assert 0 < replay["n"] < 400 and 0 <= replay["low"] <= replay["high"] <= 1


def test_action_log_records_give_the_inputs_and_the_fixed_policies(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from service.actions import ActionFeaturiser
    from service.ope import EvaluationError, baseline_pmfs, evaluate, first_pmfs, read_log, uniform_pmfs

    f = ActionFeaturiser(4, 10, 10)
    x = f({"u": "a"}, [{"id": "p", "features": {"k": 1.0}}, {"id": "q"}, {"id": "r", "features": {"k": 2.0}}])
    c, cands = x.context, [x.features(a) for a in range(x.n)]
    rec = {
        "reward": 1,
        "features": {"idx": c.idx.tolist(), "val": c.val.tolist(), "dim": 16},
        "actions": [
            {"id": i, "idx": v.idx.tolist(), "val": v.val.tolist()} for i, v in zip(x.ids, cands, strict=True)
        ],
        "probs": [0.2, 0.3, 0.5],
        "label_index": 2,
        "eligible": None,
        "baseline": 1,
    }
    short = {**rec, "actions": rec["actions"][1:], "probs": [0.5, 0.5], "label_index": 0, "eligible": [1]}
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (rec, short)) + "\n")
    data = read_log(path)
    assert data.candidates and data.n_labels == 3
    assert data.x[0].ids == ["p", "q", "r"] and data.x[1].ids == ["q", "r"]
    for got, want in zip(data.x[0].rows(), x.rows(), strict=True):
        assert np.array_equal(got, want)  # the candidates as the model saw them
    assert data.eligible.tolist() == [[True, True, True], [False, True, False]]
    assert data.mask(1).tolist() == [False, True]
    assert first_pmfs(data).tolist() == [[1, 0, 0], [0, 1, 0]]
    assert baseline_pmfs(data).tolist() == [[0, 1, 0], [0, 1, 0]]
    assert uniform_pmfs(data).tolist() == [[1 / 3, 1 / 3, 1 / 3], [0, 1, 0]]
    with pytest.raises(EvaluationError, match="names another candidate"):
        evaluate(data, ["constant:0"], 2, 0)
    with pytest.raises(EvaluationError, match="name an action learner"):
        evaluate(data, ["cova"], 2, 0)
    path.write_text(json.dumps({**rec, "baseline": None}) + "\n")
    with pytest.raises(EvaluationError, match="1 of 1 logged decisions have no baseline"):
        evaluate(read_log(path), ["baseline"], 2, 0)
