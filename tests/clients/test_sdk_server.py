"""The SDK against a real server (``python -m service serve`` under uvicorn, memory store)."""

from __future__ import annotations

import asyncio
import time

import pytest

from clickboost_client import (
    ActivateResult,
    AsyncClient,
    BadRequest,
    Client,
    Conflict,
    FeedbackResult,
    Gone,
    ModelInfo,
    NotFound,
    Prediction,
    Unauthorized,
)
from service.config import DEFAULT_LEARNER
from tests.clients.conftest import ADMIN_KEY, API_KEY

CAR_X = [1.0, 0.0, 0.0, 0.0] * 5 + [1.0]  # a car-shaped (d = 21) context


def test_predict_then_feedback_updates_the_model(server: str) -> None:
    with Client(server, api_key=API_KEY, admin_key=ADMIN_KEY) as c:
        before = c.get_model("car")
        p = c.predict(CAR_X, model="car")
        assert isinstance(p, Prediction) and p.model == "car"
        assert (
            p.label in ("unacc", "acc", "good", "vgood") and p.label == before.config["labels"][p.label_index]
        )
        assert p.probability == p.probabilities[p.label_index] and abs(sum(p.probabilities) - 1) < 1e-9
        fb = c.feedback(p.decision_id, click=True, wait=True)
        assert fb == FeedbackResult(p.decision_id, True, "car", fb.model_version, 1.0)
        after = c.get_model("car")
        assert after.version == fb.model_version == before.version + 1 and after.checksum != before.checksum
        assert after.counts.clicks == before.counts.clicks + 1


def test_http_errors_become_typed_exceptions(server: str) -> None:
    with Client(server, api_key=API_KEY, admin_key=ADMIN_KEY) as c:
        checksum = c.get_model("car").checksum
        p = c.predict(CAR_X, model="car")
        c.feedback(p.decision_id, click=False)
        with pytest.raises(Conflict, match="already answered") as dup:
            c.feedback(p.decision_id, click=True)
        assert dup.value.status == 409 and dup.value.first_outcome is not None
        assert dup.value.first_outcome["outcome"] == "no_click"
        with pytest.raises(NotFound, match="unknown decision id"):
            c.feedback("no-such-decision", click=True)
        with pytest.raises(BadRequest, match="expected 21 values, got 3") as wrong_dim:
            c.predict([1.0, 2.0, 3.0], model="car")
        assert wrong_dim.value.status == 422
        with pytest.raises(NotFound, match="nope"):
            c.predict(CAR_X, model="nope")
        c.feedback(c.predict(CAR_X, model="car").decision_id, click=False, wait=True)  # settle the log
        assert c.get_model("car").version > 0 and c.get_model("car").checksum != checksum
    with Client(server, api_key="wrong") as c, pytest.raises(Unauthorized, match="X-API-Key"):
        c.predict(CAR_X, model="car")
    with Client(server, admin_key=API_KEY) as c, pytest.raises(Unauthorized, match="admin"):
        c.list_models()


def test_expired_decision_is_gone(server: str) -> None:
    with Client(server, api_key=API_KEY, admin_key=ADMIN_KEY) as c:
        c.create_model("short", "banditron", n_features=2, n_labels=2, reward_window_seconds=0.2)
        p = c.predict([0.5, -0.5], model="short")
        time.sleep(0.5)
        with pytest.raises(Gone, match="reward window passed") as gone:
            c.feedback(p.decision_id, click=True)
        assert gone.value.status == 410
        c.delete_model("short")


def test_deferred_decisions_graded_rewards_and_chosen_ids(server: str) -> None:
    with Client(server, api_key=API_KEY, admin_key=ADMIN_KEY) as c:
        c.create_model("later", "banditron", n_features=2, n_labels=2, reward_window_seconds=0.5)
        before = c.get_model("later")
        p = c.predict([0.5, -0.5], model="later", defer=True, decision_id="sdk-page-1:slot.0")
        assert p.decision_id == "sdk-page-1:slot.0"  # the memory store routes ids as they are
        with pytest.raises(Conflict, match=r"sdk-page-1:slot\.0"):
            c.predict([0.5, -0.5], model="later", decision_id="sdk-page-1:slot.0")
        held = c.feedback(p.decision_id, reward=0.25)
        assert held == FeedbackResult(p.decision_id, None, "later", None, 0.25, held=True)
        on = c.activate(p.decision_id, wait=True)
        assert isinstance(on, ActivateResult) and on.status == "activated"
        assert on.learned is not None and on.learned["outcome"] == "reward"
        assert c.activate(p.decision_id).status == "already_active"
        assert c.get_model("later").version == before.version + 1 == on.learned["model_version"]
        plain = c.predict([0.5, -0.5], model="later")
        assert c.activate(plain.decision_id).status == "not_deferred"
        assert c.feedback(plain.decision_id, reward=1.0, wait=True).click is None
        never = c.predict([0.5, -0.5], model="later", defer=True)
        with pytest.raises(NotFound):
            c.activate("no-such-decision")
        time.sleep(1.5)  # past the window, and a sweep (every second) dropped it
        with pytest.raises(Gone, match="dropped"):
            c.activate(never.decision_id)
        counts = c.get_model("later").counts
        assert counts is not None
        assert (counts.deferred, counts.activated, counts.dropped_unactivated) == (2, 1, 1)
        with pytest.raises(ValueError, match="one of them"):
            c.feedback(plain.decision_id, True, reward=0.5)
        c.delete_model("later")


def test_admin_calls_round_trip(server: str) -> None:
    with Client(server, api_key=API_KEY, admin_key=ADMIN_KEY) as c:
        info = c.create_model(
            "news",
            "banditron",
            params={"gamma": 0.1},
            hashing_bits=8,
            labels=["sports", "politics", "music"],
            seed=3,
        )
        assert isinstance(info, ModelInfo) and info.name == "news" and info.version == 0
        assert info.config["params"] == {"gamma": 0.1, "tie_break": "random"}  # defaults filled in
        fresh = info.checksum
        assert {"car", "news"} <= {m.name for m in c.list_models()}
        for hour in range(5):
            p = c.predict({"country": "fr", "hour": hour, "mobile": True}, model="news")
            assert p.label in ("sports", "politics", "music")
            c.feedback(p.decision_id, click=p.label == "music", wait=True)
        trained = c.get_model("news")
        assert trained.version == 5 and trained.checksum != fresh
        saved = c.export_state("news")
        assert saved.content_type == "application/octet-stream" and saved.content
        assert c.reset_model("news").checksum == fresh
        imported = c.import_state("news", saved)
        assert imported.checksum == trained.checksum
        assert c.get_model("news").checksum == trained.checksum
        c.delete_model("news")
        with pytest.raises(NotFound):
            c.get_model("news")


def test_async_client_concurrent_visits(server: str) -> None:
    async def visit(c: AsyncClient, i: int) -> FeedbackResult:
        p = await c.predict([float(i % 3 == k) for k in range(21)], model="car")
        return await c.feedback(p.decision_id, click=p.label_index == i % 4)

    async def run() -> tuple[ModelInfo, list[FeedbackResult], ModelInfo]:
        async with AsyncClient(server, api_key=API_KEY, admin_key=ADMIN_KEY) as c:
            before = await c.get_model("car")
            results = await asyncio.gather(*(visit(c, i) for i in range(40)))
            return before, results, await c.get_model("car")

    before, results, after = asyncio.run(run())
    assert len({r.decision_id for r in results}) == 40
    assert after.counts.decisions == before.counts.decisions + 40
    assert sorted(r.model_version for r in results) == list(range(before.version + 1, before.version + 41))


def test_health_ready_and_metrics(server: str) -> None:
    with Client(server) as c:
        assert isinstance(c.health(), dict) and isinstance(c.ready(), dict)
        assert "clickboost" in c.metrics()


def test_eligible_labels_ranking_and_a_rollout_baseline(server: str) -> None:
    with Client(server, api_key=API_KEY, admin_key=ADMIN_KEY) as c:
        info = c.create_model("shop", n_features=2, labels=["a", "b", "c"], rollout="logging")
        assert info.config["learner"] == DEFAULT_LEARNER[0] and info.config["rollout"] == "logging"
        p = c.predict([0.5, -0.5], model="shop", eligible=["b", 2], baseline="c")
        assert (p.label, p.probabilities) == ("c", (0.0, 0.0, 1.0))  # logging serves the baseline
        assert p.ranking[0] == ("c", 2, 1.0) and {r[0] for r in p.ranking} == {"b", "c"}
        with pytest.raises(BadRequest, match="baseline"):
            c.predict([0.5, -0.5], model="shop", excluded=["c"], baseline="c")  # not eligible
        c.delete_model("shop")


def test_stats_rollout_replicas_and_an_evaluation_through_the_sdk(server: str) -> None:
    with Client(server, api_key=API_KEY, admin_key=ADMIN_KEY) as c:
        c.create_model("ope", "cova", n_features=21, n_labels=4, log_decisions=True, seed=5)
        for _ in range(40):
            p = c.predict(CAR_X, model="ope")
            c.feedback(p.decision_id, click=p.label_index == 0, wait=True)
        stats = c.model_stats("ope", minutes=5)
        assert stats["name"] == "ope" and stats["version"] == 40 and stats["counts"]["decisions"] == 40
        switched = c.set_rollout("ope", "logging")
        assert switched.raw["rollout"]["mode"] == "logging" and switched.version == 41, switched.raw
        replicas = c.list_replicas()
        assert replicas["placement_agrees"] is True
        assert [r["placement"] for r in replicas["replicas"]] == [None]
        with pytest.raises(Conflict, match="placement"):
            c.get_placement("ope")  # no replica groups configured
        job = c.start_evaluation("ope", ["uniform", "constant:0"])
        assert job["model"] == "ope" and job["state"] in ("queued", "running", "done")
        deadline = time.monotonic() + 30
        while (got := c.get_evaluation("ope", job["id"]))["state"] in ("queued", "running"):
            assert time.monotonic() < deadline, got
            time.sleep(0.1)
        assert got["state"] == "done" and got["events"] == 40, got
        assert set(got["results"]) == {"logged", "uniform", "constant:0"}  # logged: the served policy
        with pytest.raises(NotFound, match="no evaluation"):
            c.get_evaluation("ope", "no-such-job")
        c.cancel_evaluation("ope", job["id"])  # done already: nothing to stop, still 204
        c.delete_model("ope")
