"""Azure Personalizer's routes (service/api/personalizer.py), issue 38 parts 6 and 7.

The two official Python clients, ``azure-cognitiveservices-personalizer`` (v1.0 paths, msrest) and
``azure-ai-personalizer`` (the unversioned paths with ``api-version``, azure-core), unmodified,
against a live server (``python -m service serve`` under uvicorn, memory store, keys configured):
rank -> reward, multi-slot with one slot, and each failure raised as the client's own exception
type. Then the shapes and status codes over plain HTTP on the app in-process, the translation of
``contextFeatures`` against ``POST /predict``, and the Personalizer quickstart's loop learning.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from azure.ai.personalizer import PersonalizerClient as AiClient
from azure.cognitiveservices.personalizer import PersonalizerClient as CogClient
from azure.cognitiveservices.personalizer.models import ErrorResponseException, RankableAction, RankRequest
from azure.core.credentials import AzureKeyCredential
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from msrest.authentication import CognitiveServicesCredentials
from msrest.exceptions import HttpOperationError

from lab import personalizer_quickstart as quickstart
from service.api.personalizer import API_VERSIONS
from tests.service.api.conftest import app_client, keyed_server, make_app

KEY = "pk"
ADMIN_KEY = "root"
GROCERY = list(quickstart.ACTIONS)
NEWS = ["sports", "politics", "music"]
MODELS = f"""
[models.grocery]
hashing_bits = 12
labels = {GROCERY!r}

[models.quickstart]
hashing_bits = 12
labels = {GROCERY!r}

[models.news]
hashing_bits = 10
labels = {NEWS!r}

[models.dense]
n_features = 2
n_labels = 2

[models.catalog]
actions = "features"
hashing_bits = 12
""".replace("'", '"')


@pytest.fixture(scope="module")
def models_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("personalizer") / "models.toml"
    path.write_text(MODELS)
    return path


@pytest.fixture(scope="module")
def server(models_file: Path) -> Iterator[str]:
    with keyed_server(models_file, "grocery", KEY, ADMIN_KEY) as url:
        yield url


def counts(url: str, model: str) -> dict[str, Any]:
    r = httpx.get(f"{url}/models/{model}", headers={"X-API-Key": ADMIN_KEY})
    assert r.status_code == 200, r.text
    return r.json()["counts"]


def actions(ids: list[str]) -> list[RankableAction]:
    return [RankableAction(id=i, features=[{"shelf": i}]) for i in ids]


# -- azure-cognitiveservices-personalizer ----------------------------------------------------------


def test_cognitiveservices_client_rank_then_reward_learns(server: str) -> None:
    client = CogClient(server, CognitiveServicesCredentials(KEY))
    before = counts(server, "grocery")
    request = RankRequest(
        actions=actions(GROCERY),
        context_features=[{"user": {"diet": "vegan", "tags": ["a", "b"]}}, {"time_of_day": "morning"}],
        excluded_actions=["bbq"],
    )
    r = client.rank(request)
    assert [a.id for a in r.ranking][-1] == "bbq" and r.ranking[-1].probability == 0.0
    assert sorted(a.id for a in r.ranking) == sorted(GROCERY)
    assert r.reward_action_id in set(GROCERY) - {"bbq"}
    assert sum(a.probability for a in r.ranking) == pytest.approx(1.0)
    probabilities = [a.probability for a in r.ranking]
    assert probabilities == sorted(probabilities, reverse=True)
    assert client.events.reward(r.event_id, 1.0) is None  # 204
    after = counts(server, "grocery")
    assert after["decisions"] == before["decisions"] + 1
    assert after["clicks"] == before["clicks"] + 1  # the reward 1 is a click


def test_cognitiveservices_client_rank_reward_activate(server: str) -> None:
    """A deferred event with a client-chosen id: its reward is held until the activation."""
    client = CogClient(server, CognitiveServicesCredentials(KEY))
    before = counts(server, "grocery")
    request = RankRequest(actions=actions(GROCERY), event_id="cog-deferred-1", defer_activation=True)
    r = client.rank(request)
    assert r.event_id == "cog-deferred-1" and r.reward_action_id in GROCERY
    client.events.reward("cog-deferred-1", 1.0)  # 204: held, not learned yet
    held = counts(server, "grocery")
    assert (held["deferred"], held["clicks"]) == (before["deferred"] + 1, before["clicks"])
    assert client.events.activate("cog-deferred-1") is None  # 204: learned now
    after = counts(server, "grocery")
    assert (after["activated"], after["clicks"]) == (before["activated"] + 1, before["clicks"] + 1)
    client.events.activate("cog-deferred-1")  # again: harmless
    with pytest.raises(ErrorResponseException) as reused:
        client.rank(RankRequest(actions=actions(GROCERY), event_id="cog-deferred-1"))
    assert reused.value.response.status_code == 409
    assert reused.value.error.error.code == "Conflict"
    assert "eventId 'cog-deferred-1' is taken" in reused.value.error.error.message


def test_cognitiveservices_client_errors_are_its_exceptions(server: str) -> None:
    client = CogClient(server, CognitiveServicesCredentials(KEY))
    with pytest.raises(ErrorResponseException) as bad_key:
        CogClient(server, CognitiveServicesCredentials("wrong")).rank(RankRequest(actions=actions(GROCERY)))
    assert bad_key.value.response.status_code == 401
    assert bad_key.value.error.error.code == "Unauthorized"
    assert "Ocp-Apim-Subscription-Key" in bad_key.value.error.error.message

    with pytest.raises(ErrorResponseException) as unknown:
        client.rank(RankRequest(actions=actions(["pasta", "pizza"])))
    assert unknown.value.response.status_code == 400
    assert unknown.value.error.error.code == "BadRequest"
    assert "actions[1].id 'pizza' is not a label of model 'grocery'" in unknown.value.error.error.message

    r = client.rank(RankRequest(actions=actions(GROCERY)))
    with pytest.raises(HttpOperationError) as negative:
        client.events.reward(r.event_id, -0.5)
    assert negative.value.response.status_code == 400
    assert "reward value -0.5 is outside [0, 1]" in negative.value.response.json()["error"]["message"]
    assert "(r + 1) / 2" in negative.value.response.json()["error"]["message"]
    client.events.reward(r.event_id, 0.25)  # the refused value changed nothing: the event is still open
    with pytest.raises(HttpOperationError) as twice:
        client.events.reward(r.event_id, 0.25)
    assert twice.value.response.status_code == 409
    with pytest.raises(HttpOperationError) as unknown_event:
        client.events.reward("never-ranked", 1.0)
    assert unknown_event.value.response.status_code == 404


def test_cognitiveservices_client_per_model_endpoint(server: str) -> None:
    news = CogClient(f"{server}/loops/news", CognitiveServicesCredentials(KEY))
    before = counts(server, "news")
    r = news.rank(RankRequest(actions=actions(NEWS), context_features=[{"section": "front"}]))
    assert r.reward_action_id in NEWS
    news.events.reward(r.event_id, 0.0)
    assert counts(server, "news")["no_clicks"] == before["no_clicks"] + 1
    with pytest.raises(ErrorResponseException) as missing:
        CogClient(f"{server}/loops/nope", CognitiveServicesCredentials(KEY)).rank(
            RankRequest(actions=actions(NEWS))
        )
    assert missing.value.response.status_code == 404
    assert missing.value.error.error.code == "ResourceNotFound"


# -- azure-ai-personalizer -------------------------------------------------------------------------


def rank_body(ids: list[str], **more: Any) -> dict[str, Any]:
    return {"actions": [{"id": i, "features": [{"shelf": i}]} for i in ids], **more}


def test_ai_client_rank_then_reward(server: str) -> None:
    client = AiClient(server, AzureKeyCredential(KEY))
    before = counts(server, "grocery")
    r = client.rank(rank_body(GROCERY, contextFeatures=[{"user": {"tier": "gold"}}]))
    assert set(r) == {"ranking", "eventId", "rewardActionId"}
    assert r["rewardActionId"] in GROCERY
    assert client.reward(r["eventId"], {"value": 0.5}) is None  # 204
    after = counts(server, "grocery")
    assert (after["decisions"], after["graded"]) == (before["decisions"] + 1, before["graded"] + 1)
    assert after["reward_sum"] == pytest.approx(before["reward_sum"] + 0.5)


def test_ai_client_rank_reward_activate(server: str) -> None:
    client = AiClient(server, AzureKeyCredential(KEY))
    before = counts(server, "grocery")
    r = client.rank(rank_body(GROCERY, eventId="ai-deferred-1", deferActivation=True))
    assert r["eventId"] == "ai-deferred-1"
    assert client.activate("ai-deferred-1") is None  # 204, before the reward this time
    assert client.reward("ai-deferred-1", {"value": 0.0}) is None
    after = counts(server, "grocery")
    assert (after["activated"], after["no_clicks"]) == (before["activated"] + 1, before["no_clicks"] + 1)
    with pytest.raises(ResourceExistsError) as reused:
        client.rank(rank_body(GROCERY, eventId="ai-deferred-1"))
    assert reused.value.error.code == "Conflict"
    with pytest.raises(ResourceNotFoundError):
        client.activate("never-ranked")
    with pytest.raises(HttpResponseError) as bad_id:
        client.rank(rank_body(GROCERY, eventId="has space"))
    assert bad_id.value.status_code == 400 and "'has space'" in bad_id.value.message
    r = client.rank_multi_slot(
        rank_body(
            GROCERY, eventId="ai-slot-1", deferActivation=True, slots=[{"id": "s", "baselineAction": "bao"}]
        )
    )
    assert client.activate_multi_slot("ai-slot-1") is None
    assert client.reward_multi_slot("ai-slot-1", {"reward": [{"slotId": "s", "value": 1.0}]}) is None
    assert counts(server, "grocery")["activated"] == before["activated"] + 2


def test_ai_client_multi_slot_with_one_slot(server: str) -> None:
    client = AiClient(server, AzureKeyCredential(KEY))
    before = counts(server, "grocery")
    body = rank_body(GROCERY, slots=[{"id": "main", "baselineAction": "pasta", "excludedActions": ["bao"]}])
    r = client.rank_multi_slot(body)
    ((slot,),) = [r["slots"]]
    assert slot["id"] == "main" and slot["rewardActionId"] in set(GROCERY) - {"bao"}
    assert client.reward_multi_slot(r["eventId"], {"reward": [{"slotId": "main", "value": 1.0}]}) is None
    assert counts(server, "grocery")["clicks"] == before["clicks"] + 1
    two = rank_body(
        GROCERY, slots=[{"id": "a", "baselineAction": "pasta"}, {"id": "b", "baselineAction": "bbq"}]
    )
    with pytest.raises(HttpResponseError) as refused:
        client.rank_multi_slot(two)
    assert refused.value.status_code == 400 and refused.value.error.code == "BadRequest"
    # pages of several slots are an action-feature model's (test_personalizer_multislot.py)
    assert "model 'grocery' has fixed labels" in refused.value.message


def test_ai_client_errors_are_its_exceptions(server: str) -> None:
    client = AiClient(server, AzureKeyCredential(KEY))
    with pytest.raises(ClientAuthenticationError) as bad_key:
        AiClient(server, AzureKeyCredential("wrong")).rank(rank_body(GROCERY))
    assert bad_key.value.status_code == 401 and bad_key.value.error.code == "Unauthorized"
    with pytest.raises(HttpResponseError) as unknown:
        client.rank(rank_body(["pizza"]))
    assert unknown.value.status_code == 400 and "'pizza' is not a label" in unknown.value.message
    r = client.rank(rank_body(GROCERY))
    with pytest.raises(HttpResponseError) as over:
        client.reward(r["eventId"], {"value": 1.5})
    assert over.value.status_code == 400 and over.value.error.code == "BadRequest"
    assert "reward value 1.5 is outside [0, 1]" in over.value.message
    client.reward(r["eventId"], {"value": 1.0})
    with pytest.raises(ResourceExistsError) as twice:
        client.reward(r["eventId"], {"value": 1.0})
    assert twice.value.error.code == "Conflict" and "already answered" in twice.value.message
    with pytest.raises(ResourceNotFoundError) as unknown_event:
        client.reward("never-ranked", {"value": 1.0})
    assert unknown_event.value.error.code == "ResourceNotFound"


# -- plain HTTP: shapes, status codes, the translation --------------------------------------------


@pytest.fixture
async def http(models_file: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = make_app(config_file=models_file, default_model="grocery", api_keys=KEY, decision_id_seed=7)
    async with app_client(app) as client:
        client.headers["Ocp-Apim-Subscription-Key"] = KEY
        yield client


def is_error(r: httpx.Response, status: int, code: str, words: str) -> bool:
    body = r.json()
    assert r.status_code == status, r.text
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert body["error"]["code"] == code, body
    assert words in body["error"]["message"], body
    return True


@pytest.mark.anyio
async def test_every_path_and_its_status_codes(http: httpx.AsyncClient) -> None:
    bases = ["/personalizer", *(f"/personalizer/{v}" for v in API_VERSIONS)]
    for base in [*bases, *(f"/loops/grocery{b}" for b in bases)]:
        r = await http.post(f"{base}/rank", json=rank_body(GROCERY))
        assert r.status_code == 201 and r.headers["content-type"] == "application/json", (base, r.text)
        assert set(r.json()) == {"ranking", "eventId", "rewardActionId"}
        reward = await http.post(f"{base}/events/{r.json()['eventId']}/reward", json={"value": 1})
        assert reward.status_code == 204 and reward.content == b"", (base, reward.text)
        activated = await http.post(f"{base}/events/{r.json()['eventId']}/activate")
        assert activated.status_code == 204 and activated.content == b"", (base, activated.text)
        if base.endswith("v1.0"):  # multi-slot came with the v1.1 previews
            r = await http.post(f"{base}/multislot/rank", json=rank_body(GROCERY))
            assert is_error(r, 404, "ResourceNotFound", "multi-slot API version 'v1.0'")
            continue
        body = rank_body(GROCERY, slots=[{"id": "s", "baselineAction": "bbq"}])
        r = await http.post(f"{base}/multislot/rank", json=body)
        assert r.status_code == 201 and set(r.json()) == {"eventId", "slots"}, (base, r.text)
        event = r.json()["eventId"]
        reward = await http.post(
            f"{base}/multislot/events/{event}/reward", json={"reward": [{"slotId": "s", "value": 0}]}
        )
        assert reward.status_code == 204, (base, reward.text)
        activated = await http.post(f"{base}/multislot/events/{event}/activate")
        assert activated.status_code == 204, (base, activated.text)
    r = await http.post("/personalizer/v2.0/rank", json=rank_body(GROCERY))
    assert is_error(r, 404, "ResourceNotFound", "unknown Personalizer API version 'v2.0'; served: v1.0")


@pytest.mark.anyio
async def test_keys_in_either_header(http: httpx.AsyncClient) -> None:
    del http.headers["Ocp-Apim-Subscription-Key"]
    r = await http.post("/personalizer/v1.0/rank", json=rank_body(GROCERY))
    assert is_error(r, 401, "Unauthorized", "missing or invalid Ocp-Apim-Subscription-Key or X-API-Key")
    assert r.headers["www-authenticate"] == "APIKey"
    r = await http.post("/personalizer/v1.0/rank", json=rank_body(GROCERY), headers={"X-API-Key": KEY})
    assert r.status_code == 201, r.text


BAD_RANKS: list[tuple[Any, str]] = [
    (rank_body(["pasta", "pasta"]), "actions[1].id 'pasta' is given twice"),
    (
        rank_body(["pasta"], excludedActions=["bao"]),
        "excludedActions: 'bao' is not one of the request's actions",
    ),
    (rank_body(["pasta"], excludedActions=["pasta"]), "every action is excluded"),
    (rank_body(["pasta"], contextFeatures=[{"a": 1}, {"a": 2}]), "feature 'a' is given twice"),
    (rank_body(["pasta"], contextFeatures=[{"a": {"b": 1}}, {"a.b": 2}]), "feature 'a.b' is given twice"),
    (rank_body(["pasta"], excludeActions=["bao"]), "excludeActions: Extra inputs are not permitted"),
    ({"actions": []}, "actions: List should have at least 1 item"),
    ({"contextFeatures": [{"a": 1}]}, "actions: Field required"),
    (rank_body(["pasta"], contextFeatures=[{"big": 1e300}]), "features.big: 1e+300 is not a finite number"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("body", "words"), BAD_RANKS)
async def test_bad_ranks_are_400_naming_the_problem(http: httpx.AsyncClient, body: Any, words: str) -> None:
    r = await http.post("/personalizer/v1.0/rank", json=body)
    assert is_error(r, 400, "BadRequest", words)


@pytest.mark.anyio
async def test_bodies_and_models_refused(http: httpx.AsyncClient) -> None:
    rank = "/personalizer/v1.0/rank"
    r = await http.post(rank, content=b"", headers={"content-type": "application/json"})
    assert is_error(r, 400, "BadRequest", "empty body: expected a JSON object")
    r = await http.post(rank, content=b"{nope", headers={"content-type": "application/json"})
    assert is_error(r, 400, "BadRequest", "malformed JSON")
    r = await http.post(rank, content=b'{"actions": []}', headers={"content-type": "text/plain"})
    assert is_error(r, 415, "UnsupportedMediaType", "the body must be JSON")
    r = await http.post("/loops/dense/personalizer/v1.0/rank", json=rank_body(["0", "1"]))
    assert is_error(r, 400, "BadRequest", "model 'dense' takes a list of 2 numbers")
    two = rank_body(GROCERY, slots=[{"id": "s", "baselineAction": "bbq", "excludedActions": ["bbq"]}])
    r = await http.post("/personalizer/v1.1-preview.3/multislot/rank", json=two)
    assert is_error(r, 400, "BadRequest", "slots[0].baselineAction 'bbq' is excluded")
    r = await http.post("/personalizer/v1.0/rank", json=rank_body(GROCERY))
    event = r.json()["eventId"]
    for value in (-1, 1.0000001):
        r = await http.post(f"/personalizer/v1.0/events/{event}/reward", json={"value": value})
        assert is_error(r, 400, "BadRequest", "is outside [0, 1]: clickboost learns rewards in [0, 1]")
    r = await http.post(f"/personalizer/multislot/events/{event}/reward", json={"reward": []})
    assert is_error(r, 400, "BadRequest", "reward: List should have at least 1 item")
    r = await http.post(f"/personalizer/v1.0/events/{event}/reward?wait=true", json={"value": 1})
    assert r.status_code == 204


@pytest.mark.anyio
async def test_an_event_id_seeds_the_sampling(models_file: Path) -> None:
    """The same eventId on two fresh servers (ids not seeded) gets the same decision, whatever
    came before it (the decision id is routed from it and seeds the sampling as a drawn id does)."""
    settings = {"config_file": models_file, "default_model": "grocery"}
    async with app_client(make_app(**settings)) as a, app_client(make_app(**settings)) as b:
        await b.post("/personalizer/v1.0/rank", json=rank_body(GROCERY))  # b drew an id more
        for i in range(10):
            body = rank_body(GROCERY, eventId=f"E-{i}", contextFeatures=[{"i": i}])
            ra, rb = (
                await a.post("/personalizer/v1.0/rank", json=body),
                await b.post("/personalizer/v1.0/rank", json=body),
            )
            assert ra.status_code == rb.status_code == 201
            assert ra.json() == rb.json()


@pytest.mark.anyio
async def test_root_paths_without_a_default_model(models_file: Path) -> None:
    async with app_client(make_app(config_file=models_file)) as client:
        r = await client.post("/personalizer/v1.0/rank", json=rank_body(GROCERY))
        assert is_error(r, 404, "ResourceNotFound", "set CLICKBOOST_DEFAULT_MODEL")
        r = await client.post("/loops/grocery/personalizer/v1.0/rank", json=rank_body(GROCERY))
        assert r.status_code == 201


@pytest.mark.anyio
async def test_rank_decides_as_predict_with_the_flattened_features(models_file: Path) -> None:
    """Two servers with the same seeded ids: a rank's decision is ``POST /predict``'s with the
    flattened context features and the request's actions less the excluded as the eligible labels."""
    context = [
        {"user": {"tier": "gold", "visits": 3, "tags": ["new", "mobile"], "none": None}},
        {"device": {"os": {"name": "linux"}, "v": [0.5, 2]}},
    ]
    flat = {
        "user.tier": "gold",
        "user.visits": 3,
        "user.tags=new": 1.0,
        "user.tags=mobile": 1.0,
        "device.os.name": "linux",
        "device.v.0": 0.5,
        "device.v.1": 2,
    }
    settings = {"config_file": models_file, "default_model": "grocery", "decision_id_seed": 11}
    async with app_client(make_app(**settings)) as a, app_client(make_app(**settings)) as b:
        for _ in range(20):  # learning from each answer, so that the probabilities move
            r = await a.post(
                "/personalizer/v1.0/rank",
                json=rank_body(
                    ["bao", "pasta", "hummus"], contextFeatures=context, excludedActions=["pasta"]
                ),
            )
            p = await b.post("/predict", json={"features": flat, "eligible": ["bao", "hummus"]})
            ranked, predicted = r.json(), p.json()
            assert ranked["eventId"] == predicted["decision_id"]
            assert ranked["rewardActionId"] == predicted["label"]
            assert [(x["id"], x["probability"]) for x in ranked["ranking"]] == [
                *((x["label"], x["probability"]) for x in predicted["ranking"]),
                ("pasta", 0.0),
            ]
            value = 1.0 if ranked["rewardActionId"] == "hummus" else 0.0
            event = ranked["eventId"]
            r = await a.post(f"/personalizer/v1.0/events/{event}/reward?wait=true", json={"value": value})
            p = await b.post("/feedback?wait=true", json={"decision_id": event, "reward": value})
            assert (r.status_code, p.status_code) == (204, 200)
        model_a, model_b = (await a.get("/models/grocery")).json(), (await b.get("/models/grocery")).json()
        assert model_a["version"] == model_b["version"] == 20
        assert model_a["checksum"] == model_b["checksum"]  # the same model learned the same


@pytest.mark.anyio
async def test_rank_of_an_action_feature_model_scores_the_actions_features(models_file: Path) -> None:
    """With ``"actions": "features"`` (issue 39) any action id goes and its features are used: a rank
    decides as ``POST /predict`` with the flattened context and the actions' flattened features; an
    item never seen before is ranked first when its features are those of the rewarded one."""
    context = [{"user": {"diet": "vegan"}}]
    settings = {"config_file": models_file, "decision_id_seed": 5}
    async with app_client(make_app(**settings)) as a, app_client(make_app(**settings)) as b:
        for t in range(60):
            ids = [f"new-{t}-{k}" for k in range(3)]
            shelves = [
                {"shelf": s, "tags": ["fresh"] if s == "greens" else []} for s in ("greens", "meat", "fish")
            ]
            body = [{"id": i, "features": [f]} for i, f in zip(ids, shelves, strict=True)]
            r = await a.post(
                "/loops/catalog/personalizer/v1.0/rank",
                json={"contextFeatures": context, "actions": body, "excludedActions": [ids[2]]},
            )
            flat = [
                {"id": i, "features": {"shelf": f["shelf"], **({"tags=fresh": 1.0} if f["tags"] else {})}}
                for i, f in zip(ids, shelves, strict=True)
            ]
            p = await b.post(
                "/predict",
                json={
                    "model": "catalog",
                    "features": {"user.diet": "vegan"},
                    "actions": flat,
                    "excluded": [ids[2]],
                },
            )
            ranked, predicted = r.json(), p.json()
            assert r.status_code == 201, r.text
            assert ranked["rewardActionId"] == predicted["label"]
            assert [(x["id"], x["probability"]) for x in ranked["ranking"]] == [
                *((x["label"], x["probability"]) for x in predicted["ranking"]),
                (ids[2], 0.0),
            ]
            value = 1.0 if ranked["rewardActionId"] == ids[0] else 0.0
            r = await a.post(
                f"/loops/catalog/personalizer/v1.0/events/{ranked['eventId']}/reward?wait=true",
                json={"value": value},
            )
            p = await b.post(
                "/feedback?wait=true", json={"decision_id": predicted["decision_id"], "reward": value}
            )
            assert (r.status_code, p.status_code) == (204, 200)
        assert ranked["ranking"][0]["id"] == ids[0]  # new ids, learned from the features
        model_a, model_b = (await a.get("/models/catalog")).json(), (await b.get("/models/catalog")).json()
        assert model_a["checksum"] == model_b["checksum"]


# -- the quickstart ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_quickstart_loop_learns(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m lab.personalizer_quickstart``: 2,000 rounds of the quickstart's loop with its
    client; the reward rate of the last 20 % is far above a random product's (docs/PERSONALIZER.md)."""
    assert quickstart.main([]) == 0
    out = capsys.readouterr().out
    print(out)
    figures = {
        name: float(value) for name, value in re.findall(r"^(.+?):\s+([0-9.]+)$", out, flags=re.MULTILINE)
    }
    last = figures["reward rate, last 400 rounds (20 %)"]
    random_rate = quickstart.expected_rate(choose_best=False)
    assert random_rate == pytest.approx(7 / 15)  # Bill 3/5 of the products, Satya and Amy 2/5 each
    assert figures["uniformly random product (expected)"] == pytest.approx(random_rate, abs=5e-4)
    assert figures["best product for each context"] == 1.0
    assert last >= random_rate + 0.3, out


@pytest.mark.anyio
async def test_the_first_action_is_the_baseline_of_a_rollout(models_file: Path) -> None:
    """In logging rollout a rank serves its first action not excluded (a multi-slot rank: the
    slot's ``baselineAction``) with probability 1 (service/rollout.py)."""
    app = make_app(config_file=models_file, default_model="grocery", api_keys=KEY, admin_key=ADMIN_KEY)
    async with app_client(app) as http:
        admin = {"X-API-Key": ADMIN_KEY}
        r = await http.post("/models/grocery/rollout", json={"mode": "logging"}, headers=admin)
        assert r.status_code == 200, r.text
        http.headers["Ocp-Apim-Subscription-Key"] = KEY
        first, second = GROCERY[2], GROCERY[0]
        for excluded, served in (([], first), ([first], second)):
            body = rank_body([first, *[a for a in GROCERY if a != first]], excludedActions=excluded or None)
            r = await http.post("/personalizer/v1.0/rank", json=body)
            assert r.status_code == 201, r.text
            assert r.json()["rewardActionId"] == served
            assert r.json()["ranking"][0] == {"id": served, "probability": 1.0}
        body = rank_body(GROCERY, slots=[{"id": "s", "baselineAction": GROCERY[1]}])
        r = await http.post("/personalizer/v1.1-preview.3/multislot/rank", json=body)
        assert r.status_code == 201 and r.json()["slots"][0]["rewardActionId"] == GROCERY[1], r.text
