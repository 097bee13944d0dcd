"""The per-event budget counts the decision too (issue 51, item 7): a spec whose predicts would each
spend tens of milliseconds answering over its labels is refused at creation with a 422 naming the
sizes, and ordinary specs are still admitted."""

from __future__ import annotations

import pytest

from service.config import Settings
from service.learners.base import learners
from service.runtime import DECISION_STEPS_PER_LABEL
from tests.service.api.conftest import app_client, make_app

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    "spec",
    [
        {"learner": "squarecb", "n_features": 60, "n_labels": 10_000},  # 298 MB of state: fits
        {"learner": "adaboost-mh", "n_features": 10, "n_labels": 10_000},
        {"learner": "banditron", "n_features": 1, "n_labels": 10_000},
    ],
    ids=lambda s: s["learner"],
)
async def test_a_spec_whose_decisions_cost_too_much_is_refused_naming_its_sizes(spec: dict) -> None:
    async with app_client(make_app()) as c:
        r = await c.put("/models/big", json=spec)
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert f"{spec['n_labels']:,} labels" in detail and "CLICKBOOST_MAX_EVENT_STEPS" in detail, detail
        assert f"{DECISION_STEPS_PER_LABEL * spec['n_labels']:,} more to answer a decision" in detail
        assert (await c.get("/models/big")).status_code == 404


async def test_ordinary_specs_are_admitted() -> None:
    async with app_client(make_app()) as c:
        for i, spec in enumerate(
            [
                {"n_features": 21, "labels": ["a", "b", "c", "d"]},  # the default learner
                {"learner": "cova", "params": {"epsilon": 0.02}, "n_features": 100, "n_labels": 1_000},
                {"learner": "squarecb", "n_features": 60, "n_labels": 100},
                {"learner": "adaboost-mh", "n_features": 10, "n_labels": 1_000},
                {"hashing_bits": 18, "labels": ["x", "y"]},
            ]
        ):
            r = await c.put(f"/models/m{i}", json=spec)
            assert r.status_code == 201, (spec, r.text)


def test_the_learners_count_what_their_decision_computes() -> None:
    """AdaBoost.MH's decision scores K labels with each of its T stumps, SquareCB's every label's
    ridge estimate: more than their learn, and now in their event steps."""
    assert learners.get("adaboost-mh").event_steps(10, 10_000, {"iterations": 100}) >= 100 * 10_000
    assert learners.get("squarecb").event_steps(60, 10_000) >= 61 * 10_000
    assert Settings(store="memory").max_event_steps < DECISION_STEPS_PER_LABEL * 10_000
