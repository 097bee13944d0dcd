"""Issue 51, items 2, 5 and 6 (a, b): bounded input on every route and a strict Personalizer.

- One limit for feature names and string values (``MAX_FEATURE_CHARS``) on ``POST /predict`` and on
  the Personalizer ranks, context and action features alike: one character over is a 4xx naming the
  limit and the field, at the limit it is served.
- A rank's lists are counted before the body is parsed: 10,000 actions are refused naming the cap
  without their parse (the body past the cap is not even read: invalid JSON there goes unnoticed).
- A reward ``value`` is a JSON number (``"0.5"``, ``" 1 "``, ``true`` refused), and a multi-slot
  reward names the slot its event was ranked for, on every store; nothing is learned otherwise.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.api import personalizer
from service.features import MAX_FEATURE_CHARS
from service.slots import MAX_SLOTS
from tests.service.api.conftest import app_client, make_app

KEY = "pk"
LABELS = ["pasta", "bao", "hummus"]
MODELS = f"""
[models.grocery]
hashing_bits = 12
labels = {json.dumps(LABELS)}

[models.catalog]
actions = "features"
hashing_bits = 12
"""
LIMIT = MAX_FEATURE_CHARS
RANK = "/personalizer/v1.0/rank"
MULTISLOT_RANK = "/personalizer/v1.1-preview.3/multislot/rank"


@pytest.fixture(scope="module")
def models_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("limits") / "models.toml"
    path.write_text(MODELS)
    return path


@pytest.fixture
async def http(models_file: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = make_app(config_file=models_file, default_model="grocery", api_keys=KEY, admin_key="root")
    async with app_client(app) as client:
        client.headers["X-API-Key"] = KEY
        yield client


def error(r: httpx.Response, status: int, *words: str) -> bool:
    """``r`` is a Personalizer error of ``status`` whose message holds every one of ``words``."""
    assert r.status_code == status, r.text
    message = r.json()["error"]["message"]
    assert all(w in message for w in words), message
    return True


async def position(http: httpx.AsyncClient, model: str = "grocery") -> int:
    """The model's log position: it moves with every reward learned."""
    r = await http.get(f"/models/{model}", headers={"X-API-Key": "root"})
    assert r.status_code == 200, r.text
    return int(r.json()["version"])


# -- one limit for names and string values -----------------------------------------------------------


def features_of(what: str, n: int) -> dict[str, Any]:
    """Named features whose name (``what`` "name") or string value ("value") has ``n`` characters."""
    return {"n" * n: 1.0} if what == "name" else {"shelf": "v" * n}


def predict_body(where: str, named: dict[str, Any]) -> dict[str, Any]:
    if where == "context":
        return {"model": "grocery", "features": named}
    return {"model": "catalog", "features": {"u": 1.0}, "actions": [{"id": "a", "features": named}]}


def rank_body(where: str, named: dict[str, Any], multislot: bool) -> dict[str, Any]:
    actions = [{"id": "pasta", "features": [named if where == "action" else {"shelf": "dry"}]}]
    body: dict[str, Any] = {
        "contextFeatures": [named if where == "context" else {"u": 1.0}],
        "actions": actions,
    }
    if multislot:
        body["slots"] = [{"id": "main", "baselineAction": "pasta"}]
    return body


@pytest.mark.anyio
@pytest.mark.parametrize("what", ["name", "value"])
@pytest.mark.parametrize("where", ["context", "action"])
async def test_predict_takes_names_and_values_up_to_the_limit(
    http: httpx.AsyncClient, where: str, what: str
) -> None:
    r = await http.post("/predict", json=predict_body(where, features_of(what, LIMIT + 1)))
    assert r.status_code == 422, r.text
    field = "features" if where == "context" else "actions.0.features"
    assert r.json()["detail"].startswith(field) and f"at most {LIMIT} characters" in r.json()["detail"]
    r = await http.post("/predict", json=predict_body(where, features_of(what, LIMIT)))
    assert r.status_code == 200, r.text


@pytest.mark.anyio
@pytest.mark.parametrize("multislot", [False, True], ids=["rank", "multislot"])
@pytest.mark.parametrize("model", ["grocery", "catalog"])
@pytest.mark.parametrize("what", ["name", "value"])
@pytest.mark.parametrize("where", ["context", "action"])
async def test_ranks_take_names_and_values_up_to_the_limit(
    http: httpx.AsyncClient, where: str, what: str, model: str, multislot: bool
) -> None:
    """Context and action features, on a label model (action features read, not scored) and on
    an action-feature model, of a rank and of a multi-slot rank."""
    path = f"/loops/{model}{MULTISLOT_RANK if multislot else RANK}"
    r = await http.post(path, json=rank_body(where, features_of(what, LIMIT + 1), multislot))
    field = "contextFeatures" if where == "context" else "actions[0].features"
    assert error(r, 400, f"{field}: ", f"{LIMIT + 1:,} characters, at most {LIMIT:,}")
    r = await http.post(path, json=rank_body(where, features_of(what, LIMIT), multislot))
    assert r.status_code == 201, r.text


@pytest.mark.anyio
async def test_flattened_names_and_list_values_are_held_to_the_limit(http: httpx.AsyncClient) -> None:
    """A nested name counts whole (refused at the level where it passes the limit), a string of a
    list is a value; a name and a value each at the limit make one key of twice that, served."""
    half = LIMIT // 2
    cases = [
        ({"a" * half: {"b" * half: 1.0}}, "feature name 'aaaa"),
        ({"a" * half: {"b" * half: {"c": {"d": 1.0}}}}, "feature name 'aaaa"),
        ({"tags": ["ok", "t" * (LIMIT + 1)]}, "a string value of 'tags'"),
    ]
    for named, words in cases:
        r = await http.post(RANK, json={"contextFeatures": [named], "actions": [{"id": "bao"}]})
        assert error(r, 400, "contextFeatures: ", words, f"at most {LIMIT:,}")
    ok = {"a" * half: {"b" * (LIMIT - half - 1): "v" * LIMIT}, "tags": ["t" * LIMIT]}
    r = await http.post(RANK, json={"contextFeatures": [ok], "actions": [{"id": "bao"}]})
    assert r.status_code == 201, r.text


@pytest.mark.anyio
async def test_more_named_features_than_the_model_takes_stop_the_flattening(http: httpx.AsyncClient) -> None:
    many = {"v": list(range(2000))}  # 2,000 features v.0 ... v.1999; the model takes 1,000
    r = await http.post(RANK, json={"contextFeatures": [many], "actions": [{"id": "bao"}]})
    assert error(r, 400, "contextFeatures: more than 1,000 features", "CLICKBOOST_MAX_NAMED_FEATURES")


# -- lists counted before the parse ------------------------------------------------------------------


def big_rank(n: int, cap: int, key: str = "actions") -> bytes:
    """A rank body of ``n`` actions whose items past ``cap + 1`` are not even JSON: only a parse that
    stops at the cap answers anything but "malformed JSON"."""
    items = [json.dumps({"id": f"a{i}", "features": [{"shelf": f"s{i % 7}"}]}) for i in range(cap + 1)]
    items += ["{not json at all"] * (n - cap - 1)
    return f'{{"contextFeatures": [{{"u": 1}}], "{key}": [{", ".join(items)}]}}'.encode()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "cap", "words"),
    [
        (RANK, 3, "actions: more than 3 actions; model 'grocery' has 3 labels"),
        (
            "/loops/catalog" + RANK,
            100,
            "actions: more than 100 actions; at most 100 per rank (CLICKBOOST_MAX_ACTIONS)",
        ),
    ],
)
async def test_ten_thousand_actions_are_refused_before_they_are_parsed(
    http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, path: str, cap: int, words: str
) -> None:
    built = []
    monkeypatch.setattr(personalizer, "parse", lambda model, body: built.append(model))
    monkeypatch.setattr(personalizer, "context_features", lambda *a, **k: built.append(a))
    for key in ("actions", "act\\u0069ons"):  # an escaped key is the same key
        r = await http.post(
            path, content=big_rank(10_000, cap, key), headers={"content-type": "application/json"}
        )
        assert error(r, 400, words)
    assert built == []  # no model built, no action flattened


@pytest.mark.anyio
async def test_the_cap_itself_is_served(http: httpx.AsyncClient) -> None:
    actions = [{"id": f"item-{i}", "features": [{"shelf": f"s{i % 7}"}]} for i in range(100)]
    r = await http.post("/loops/catalog" + RANK, json={"contextFeatures": [{"u": 1}], "actions": actions})
    assert r.status_code == 201 and len(r.json()["ranking"]) == 100, r.text
    r = await http.post(RANK, json={"actions": [{"id": a} for a in LABELS], "excludedActions": LABELS[:2]})
    assert r.status_code == 201, r.text


@pytest.mark.anyio
async def test_every_capped_list_is_counted(http: httpx.AsyncClient) -> None:
    actions = [{"id": a} for a in LABELS]
    r = await http.post(RANK, json={"actions": actions, "excludedActions": ["bao"] * 4})
    assert error(r, 400, "excludedActions: more than 3")
    slots = [{"id": f"s{i}", "baselineAction": "bao"} for i in range(MAX_SLOTS + 1)]
    r = await http.post(MULTISLOT_RANK, json={"actions": actions, "slots": slots})
    assert error(r, 400, f"slots: more than {MAX_SLOTS} slots, at most {MAX_SLOTS} per page")
    rewards = {"reward": [{"slotId": f"s{i}", "value": 1} for i in range(MAX_SLOTS + 1)]}
    r = await http.post("/personalizer/multislot/events/e/reward", json=rewards)
    assert error(r, 400, f"reward: more than {MAX_SLOTS} slots, at most {MAX_SLOTS} per page")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"actions": [{"id": "bao"},]}', "malformed JSON: Expecting value"),
        (b'{"actions": [{"id": "bao"}]} {}', "malformed JSON: Extra data"),
        (b'{"actions": [{"id": "bao"}] "eventId": "e"}', "malformed JSON: Expecting '}'"),
        (
            b'{"contextFeatures": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "malformed JSON: nested too deeply",
        ),
        (b'{"actions": [{"id": "\xff"}]}', "malformed JSON: 'utf-8' codec can't decode"),
        (b"[]", "body: expected a JSON object"),
        (b"{1: 2}", "malformed JSON: Expecting property name"),
    ],
)
async def test_what_the_count_cannot_read_is_malformed(
    http: httpx.AsyncClient, body: bytes, words: str
) -> None:
    r = await http.post(RANK, content=body, headers={"content-type": "application/json"})
    assert error(r, 400, words)


# -- strict rewards ----------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("value", ["0.5", " 1 ", "1", True, False, None, [1]])
async def test_a_reward_value_is_a_json_number(http: httpx.AsyncClient, value: Any) -> None:
    r = await http.post(RANK, json={"actions": [{"id": a} for a in LABELS]})
    event = r.json()["eventId"]
    before = await position(http)
    r = await http.post(f"/personalizer/v1.0/events/{event}/reward?wait=true", json={"value": value})
    assert error(r, 400, "value: ")
    assert value is None or error(r, 400, "value: a JSON number is required, not a string or a bool")
    slots = {"reward": [{"slotId": "main", "value": value}]}
    r = await http.post(f"/personalizer/multislot/events/{event}/reward?wait=true", json=slots)
    assert error(r, 400, "reward.0.value: ")
    assert await position(http) == before  # nothing learned
    r = await http.post(f"/personalizer/v1.0/events/{event}/reward?wait=true", json={"value": 0.5})
    assert r.status_code == 204, r.text  # the event was still pending
    assert await position(http) == before + 1


# -- the slot of a multi-slot reward, on every store ---------------------------------------------------


@pytest.mark.anyio
async def test_a_multi_slot_reward_names_the_events_slot(any_store: httpx.AsyncClient) -> None:
    http = any_store
    actions = [{"id": a} for a in LABELS]
    r = await http.post(
        MULTISLOT_RANK, json={"actions": actions, "slots": [{"id": "main", "baselineAction": "bao"}]}
    )
    assert r.status_code == 201, r.text
    event = r.json()["eventId"]
    single = (await http.post(RANK, json={"actions": actions})).json()["eventId"]
    before = await position(http)
    reward = "/personalizer/v1.1-preview.3/multislot/events/{}/reward?wait=true"
    r = await http.post(reward.format(event), json={"reward": [{"slotId": "side", "value": 1}]})
    assert error(r, 400, "reward[0].slotId 'side' is not the slot of event", "ranked for slot 'main'")
    r = await http.post(reward.format(single), json={"reward": [{"slotId": "main", "value": 1}]})
    assert error(r, 400, "reward[0].slotId 'main'", "ranked without slots")
    assert await position(http) == before  # nothing learned
    r = await http.post(reward.format(event), json={"reward": [{"slotId": "main", "value": 1}]})
    assert r.status_code == 204, r.text
    assert await position(http) == before + 1
    r = await http.post(reward.format("never-ranked"), json={"reward": [{"slotId": "main", "value": 1}]})
    assert error(r, 404, "unknown event id 'never-ranked'")
