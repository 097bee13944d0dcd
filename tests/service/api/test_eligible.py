"""Eligible labels on ``POST /predict`` (issue 38): the answer, the ranking, the 422s, the decision
log on every store, replicas applying masked decisions bit for bit, and off-policy evaluation
restricted to each record's set."""

from __future__ import annotations

import json

import numpy as np
import pytest

from service import ope
from service.config import ModelSpec, Settings
from service.runtime import Runtime
from service.store import Store
from tests.service.api.conftest import app_client, make_app
from tests.service.test_decision_log import Clock, export, store  # noqa: F401 (the store fixture)

pytestmark = pytest.mark.anyio

LABELS = ["a", "b", "c", "d", "e"]
SPEC = {"learner": "banditron", "n_features": 3, "labels": LABELS, "params": {"gamma": 0.3}}


async def test_predict_serves_only_eligible_labels_and_ranks_them() -> None:
    async with app_client(make_app()) as c:
        assert (await c.put("/models/m", json=SPEC)).status_code == 201
        for body, allowed in [
            ({"eligible": ["b", 3]}, {1, 3}),
            ({"excluded": ["a", "e", 2]}, {1, 3}),
            ({"eligible": ["d"]}, {3}),
            ({"excluded": []}, set(range(5))),
        ]:
            for _ in range(20):
                r = await c.post("/predict", json={"model": "m", "features": [1.0, 0.5, 0.0], **body})
                assert r.status_code == 200, r.text
                d = r.json()
                assert d["label_index"] in allowed
                probs = d["probabilities"]
                assert all(p == 0 for i, p in enumerate(probs) if i not in allowed)
                assert sum(probs) == pytest.approx(1.0, abs=1e-12)
                ranking = d["ranking"]
                assert sorted(x["label_index"] for x in ranking) == sorted(allowed)
                assert [x["probability"] for x in ranking] == sorted(
                    (probs[i] for i in allowed), reverse=True
                )
                assert all(LABELS[x["label_index"]] == x["label"] for x in ranking)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"eligible": ["a"], "excluded": ["b"]}, "not both"),
        ({"eligible": ["zz"]}, "unknown label 'zz'"),
        ({"excluded": [7]}, "unknown label index 7"),
        ({"eligible": []}, "eligible is empty"),
        ({"excluded": LABELS}, "every label is excluded"),
    ],
)
async def test_bad_label_sets_are_422_naming_the_problem(body: dict, words: str) -> None:
    async with app_client(make_app()) as c:
        assert (await c.put("/models/m", json=SPEC)).status_code == 201
        r = await c.post("/predict", json={"model": "m", "features": [1.0, 0.5, 0.0], **body})
        assert r.status_code == 422 and words in r.text, r.text


async def test_the_decision_log_records_the_set_and_replicas_learn_the_same(store: Store) -> None:  # noqa: F811
    """On each store: the log's records carry the set, and a second runtime on the same store that
    replays the masked learn events holds the same model bit for bit."""
    clock = Clock(1_000_000.0)
    spec = ModelSpec(learner="adabandit", n_features=3, labels=LABELS, params={"n_learners": 3, "rho": 0.2})
    a = Runtime(store, Settings(store="memory"), clock=clock)
    await a.open()
    await a.load()
    try:
        await a.create_model("m", spec)
        rng = np.random.default_rng(0)
        sets = []
        for t in range(60):
            eligible = [int(i) for i in np.flatnonzero(rng.random(5) < 0.5)] or [t % 5]
            p = await a.predict("m", rng.random(3).tolist(), eligible=eligible)
            assert p.decision.label in eligible
            sets.append(eligible)
            clock.t += 1.0
            await a.feedback(p.decision_id, p.decision.label == t % 5, wait=True)
        records = await export(a, "m")
        assert [r.eligible for r in records] == [s if len(s) < 5 else None for s in sets]
        b = Runtime(store, Settings(store="memory"), clock=clock)
        await b.open()
        await b.load()
        try:
            assert b.models["m"].position == a.models["m"].position == 60
            assert b.models["m"].checksum() == a.models["m"].checksum()
        finally:
            await b.stop()
        data = ope.LoggedData.from_records(json.loads(r.to_json()) for r in records)
        assert data.eligible is not None and data.eligible.sum(axis=1).tolist() == [len(s) for s in sets]
        model = a.models["m"].learner
        for pi in (ope.uniform_pmfs(data), ope.policy_pmfs(data, model.decide)):
            assert np.all(pi[~data.eligible] == 0) and np.allclose(pi.sum(axis=1), 1.0)
        assert ope.evaluate(data, ["model:m"], runs=1, seed=0, snapshots={"m": model})["model:m"]
    finally:
        await a.stop()
