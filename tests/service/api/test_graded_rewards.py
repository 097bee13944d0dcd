"""Graded rewards on ``POST /feedback`` (issue 38 part 2): validation, every store keeping the value
in its learn event, claim, counts, per-minute activity and decision log, replicas learning the
same, SquareCB learning the value itself and the other learners a Bernoulli(reward) bit seeded by
the decision id."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from service.api.app import create_app
from service.config import Settings
from service.learners.base import Decision
from service.sampling import DecisionIds, decision_rng, reward_bit
from service.serial import checksum
from service.store import Store
from service.store.redis import RedisStore
from tests.service.api.conftest import app_client, make_app
from tests.service.test_decision_log import store  # noqa: F401 (the store fixture)

pytestmark = pytest.mark.anyio

X = [1.0, 0.5, -0.25]


def spec(learner: str) -> dict[str, object]:
    return {"learner": learner, "n_features": 3, "n_labels": 3, "seed": 1, "log_decisions": True}


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ('"reward": -0.1', "reward: Input should be greater than or equal to 0"),
        ('"reward": 1.5', "reward: Input should be less than or equal to 1"),
        ('"reward": NaN', "reward: Input should be a finite number"),
        ('"reward": true', "reward: Input should be a valid number"),
        ('"reward": 0.5, "click": true', "give click or reward, not both"),
        ('"reward": null', "give click (true/false) or reward"),
        ("", "give click (true/false) or reward"),
    ],
)
async def test_bad_rewards_are_422_naming_the_problem(extra: str, words: str) -> None:
    async with app_client(make_app()) as c:
        assert (await c.put("/models/m", json=spec("banditron"))).status_code == 201
        i = (await c.post("/predict", json={"model": "m", "features": X})).json()["decision_id"]
        body = f'{{"decision_id": "{i}"{", " + extra if extra else ""}}}'
        r = await c.post("/feedback", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422 and words in r.json()["detail"], r.text
        assert (await c.post("/feedback", json={"decision_id": i, "reward": 0.25})).status_code == 200


def test_the_bernoulli_bit_has_the_reward_as_mean_and_its_own_stream() -> None:
    ids = DecisionIds.for_seed(7)
    n, r = 10_000, 0.3
    drawn = [ids.new() for _ in range(n)]
    mean = np.mean([reward_bit(i, r) for i in drawn])
    assert abs(mean - r) < 3 * math.sqrt(r * (1 - r) / n), mean
    # the same bit everywhere, and not the decision's own first uniform
    assert [reward_bit(i, r) for i in drawn[:100]] == [reward_bit(i, r) for i in drawn[:100]]
    assert all(decision_rng(i + "#reward").random() != decision_rng(i).random() for i in drawn[:100])


async def test_graded_rewards_on_every_store(store: Store) -> None:  # noqa: F811
    """Accepted on each store, kept exactly in the log, the claim, the counts and the decision log; a
    retry is 409 with the first outcome; SquareCB's update is a direct update with the value, a
    bit learner's the update with the seeded bit; a second replica on the store holds the same models."""
    app = create_app(Settings(store="memory"), store=store)
    rewards = [0.3, 0.7, 1.0, 0.0, True, False, 0.125]
    async with app_client(app) as c:
        runtime = app.state.runtime
        for learner in ("squarecb", "banditron"):
            assert (await c.put(f"/models/{learner}", json=spec(learner))).status_code == 201
            for value in rewards:
                p = await c.post("/predict", json={"model": learner, "features": X})
                i = p.json()["decision_id"]
                record = await store.get_decision(i)
                assert record is not None
                m = runtime.models[learner]
                before = copy.deepcopy(m.learner)
                field = "click" if isinstance(value, bool) else "reward"
                r = await c.post("/feedback?wait=true", json={"decision_id": i, field: value})
                assert r.status_code == 200, r.text
                assert r.json()["reward"] == float(value)
                assert r.json()["click"] == (value if isinstance(value, bool) else None)
                learned = value if isinstance(value, bool) or learner == "squarecb" else reward_bit(i, value)
                before.learn(m.featurise.unpack(record.x), Decision.from_state(record.decision), learned)
                assert checksum(before.state()) == checksum(m.learner.state())
                again = await c.post("/feedback", json={"decision_id": i, field: value})
                outcome = "reward" if 0.0 < value < 1.0 else "click" if value else "no_click"
                assert again.status_code == 409 and again.json()["first_outcome"]["outcome"] == outcome
            events = await store.read_log(learner, 0)
            assert [e.reward for e in events] == [0.3, 0.7, True, False, True, False, 0.125]
            assert [type(e.reward) for e in events] == [float, float, bool, bool, bool, bool, float]
            counts = (await c.get(f"/models/{learner}")).json()["counts"]
            assert (counts["clicks"], counts["no_clicks"], counts["graded"]) == (2, 2, 3)
            assert counts["ctr"] == 0.5
            assert counts["reward_sum"] == pytest.approx(2 + 0.3 + 0.7 + 0.125, abs=1e-12)
            assert counts["mean_reward"] == pytest.approx(counts["reward_sum"] / 7, abs=1e-12)
            await runtime.flush_activity()  # the dashboard's per-minute history has them too
            minutes = (await c.get(f"/models/{learner}/stats")).json()["minutes"]
            assert sum(m["graded"] for m in minutes) == 3
            answered = [m for m in minutes if m["mean_reward"] is not None]
            assert sum(m["mean_reward"] * (m["clicks"] + m["no_clicks"] + m["graded"]) for m in answered) == (
                pytest.approx(counts["reward_sum"], abs=1e-12)
            )
            log = (await c.get(f"/models/{learner}/log")).text.splitlines()
            assert [json.loads(line)["reward"] for line in log] == [0.3, 0.7, 1, 0, 1, 0, 0.125]
        # a second replica: on Redis with its own connection (the SQLite file takes one process)
        shared = RedisStore(store.url, prefix=store.prefix) if isinstance(store, RedisStore) else store
        replica = create_app(Settings(store="memory"), store=shared)
        async with app_client(replica):
            for learner in ("squarecb", "banditron"):
                a, b = runtime.models[learner], replica.state.runtime.models[learner]
                assert a.position == b.position == len(rewards)
                assert a.checksum() == b.checksum()
