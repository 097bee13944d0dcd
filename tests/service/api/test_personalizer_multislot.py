"""Personalizer's multi-slot contract (issue 53, item 3) through the official ``azure-ai-personalizer``.

The client, unmodified, against a live server (``python -m service serve`` under uvicorn, memory
store, keys configured): pages of two and three slots with slot features, per-slot
``excludedActions`` and ``baselineAction``; rewards for all slots in one call and slot by slot, each
slot's once; an unknown ``slotId`` refused with nothing learned; deferred activation of the page;
every refusal raised as the client's own exception with the problem named. Then over plain HTTP on
the app in-process: a page decides as ``Runtime.predict_page`` with the flattened features, slot
features change what a slot learns, and the multi-slot quickstart's loop learns.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from azure.ai.personalizer import PersonalizerClient
from azure.core.credentials import AzureKeyCredential
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError

from lab import personalizer_multislot as quickstart
from service.slots import MAX_SLOTS
from tests.service.api.conftest import app_client, keyed_server, make_app
from tests.service.api.test_personalizer_limits import error, position

KEY = "pk"
ADMIN_KEY = "root"
PRODUCTS = ["polo", "racket", "monitor", "xbox", "mug"]
MODELS = f"""
[models.shop]
actions = "features"
hashing_bits = 14

[models.grocery]
hashing_bits = 12
labels = {PRODUCTS!r}
""".replace("'", '"')
RANK = "/personalizer/v1.1-preview.3/multislot/rank"
REWARD = "/personalizer/v1.1-preview.3/multislot/events/{}/reward?wait=true"


@pytest.fixture(scope="module")
def models_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    (path := tmp_path_factory.mktemp("multislot") / "models.toml").write_text(MODELS)
    return path


@pytest.fixture(scope="module")
def server(models_file: Path) -> Iterator[str]:
    with keyed_server(models_file, "shop", KEY, ADMIN_KEY) as url:  # the action-feature model
        yield url


@pytest.fixture
def client(server: str) -> PersonalizerClient:
    return PersonalizerClient(server, AzureKeyCredential(KEY))


def counts(url: str, model: str = "shop") -> dict[str, Any]:
    r = httpx.get(f"{url}/models/{model}", headers={"X-API-Key": ADMIN_KEY})
    assert r.status_code == 200, r.text
    return r.json()["counts"]


def actions(ids: list[str] = PRODUCTS) -> list[dict[str, Any]]:
    return [{"id": i, "features": [{"shelf": i, "price": 10 * (k + 1)}]} for k, i in enumerate(ids)]


def slot(slot_id: str, baseline: str, excluded: list[str] | None = None, **features: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": slot_id, "baselineAction": baseline}
    if features:
        out["features"] = [features]
    if excluded is not None:
        out["excludedActions"] = excluded
    return out


HERO = slot("hero", "polo", ["monitor"], size="large", position="top")
SIDE = slot("side", "xbox", ["racket"], size="small", position="right")
FOOTER = slot("footer", "mug", size="small", position="bottom")


def page(*slots: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "contextFeatures": [{"time": "evening"}, {"device": "tablet"}],
        "actions": actions(),
        "slots": list(slots),
        **more,
    }


def test_a_page_of_three_slots_and_its_rewards(client: PersonalizerClient, server: str) -> None:
    before = counts(server)
    r = client.rank_multi_slot(page(HERO, SIDE, FOOTER, eventId="page-3"))
    assert r["eventId"] == "page-3"
    assert [s["id"] for s in r["slots"]] == ["hero", "side", "footer"]
    chosen = [s["rewardActionId"] for s in r["slots"]]
    assert len(set(chosen)) == 3 and set(chosen) <= set(PRODUCTS)  # no action twice on a page
    assert chosen[0] != "monitor" and chosen[1] != "racket"  # each slot's exclusions
    assert counts(server)["decisions"] == before["decisions"] + 3  # a decision per slot
    rewards = {"reward": [{"slotId": "side", "value": 0.0}, {"slotId": "hero", "value": 1.0}]}
    assert client.reward_multi_slot("page-3", rewards) is None  # 204; footer's to come
    after = counts(server)
    assert (after["clicks"], after["no_clicks"]) == (before["clicks"] + 1, before["no_clicks"] + 1)
    assert client.reward_multi_slot("page-3", {"reward": [{"slotId": "footer", "value": 0.5}]}) is None
    after = counts(server)
    assert after["graded"] == before["graded"] + 1 and after["reward_sum"] == pytest.approx(
        before["reward_sum"] + 1.5
    )
    with pytest.raises(ResourceExistsError) as again:  # each slot's reward once
        client.reward_multi_slot("page-3", {"reward": [{"slotId": "hero", "value": 1.0}]})
    assert again.value.error.code == "Conflict" and "already answered" in again.value.message
    assert counts(server)["reward_sum"] == after["reward_sum"]


def test_any_number_of_slots(client: PersonalizerClient, server: str) -> None:
    """Ten slots over twelve actions: ten different actions, each slot's reward learned."""
    ids = [f"item-{k}" for k in range(12)]
    slots = [slot(f"tile-{s}", ids[s], [ids[11 - s]], row=s // 4, column=s % 4) for s in range(10)]
    before = counts(server)
    r = client.rank_multi_slot(
        {"contextFeatures": [{"device": "tv"}], "actions": actions(ids), "slots": slots}
    )
    chosen = [s["rewardActionId"] for s in r["slots"]]
    assert [s["id"] for s in r["slots"]] == [s["id"] for s in slots] and len(set(chosen)) == 10
    assert all(c != ids[11 - s] for s, c in enumerate(chosen))  # each slot's exclusion
    body = {
        "reward": [{"slotId": s["id"], "value": float(s["rewardActionId"] == "item-3")} for s in r["slots"]]
    }
    assert client.reward_multi_slot(r["eventId"], body) is None
    after = counts(server)
    assert after["decisions"] == before["decisions"] + 10
    assert after["clicks"] + after["no_clicks"] == before["clicks"] + before["no_clicks"] + 10


def test_slot_by_slot_and_a_second_reward_of_a_slot(client: PersonalizerClient, server: str) -> None:
    """As the C# quickstart rewards: one call per slot. A call naming a slot rewarded before is
    409 naming it and the call's slots that were taken."""
    r = client.rank_multi_slot(page(HERO, SIDE))
    event = r["eventId"]
    before = counts(server)
    assert client.reward_multi_slot(event, {"reward": [{"slotId": "hero", "value": 1.0}]}) is None
    with pytest.raises(ResourceExistsError) as twice:
        client.reward_multi_slot(
            event, {"reward": [{"slotId": "side", "value": 1.0}, {"slotId": "hero", "value": 1.0}]}
        )
    assert "slot 'hero'" in twice.value.message and "'side' were taken" in twice.value.message
    assert counts(server)["clicks"] == before["clicks"] + 2  # hero once, side once


def test_an_unknown_slot_is_400_and_nothing_is_learned(client: PersonalizerClient, server: str) -> None:
    r = client.rank_multi_slot(page(HERO, SIDE))
    event = r["eventId"]
    before = counts(server)
    for body, words in [
        ({"reward": [{"slotId": "banner", "value": 1.0}]}, "'banner'"),
        ({"reward": [{"slotId": "hero", "value": 1.0}, {"slotId": "banner", "value": 1.0}]}, "'banner'"),
        (
            {"reward": [{"slotId": "hero", "value": 1.0}, {"slotId": "hero", "value": 0.0}]},
            "reward[1].slotId 'hero' is reward[0]'s too",
        ),
        (
            {"reward": [{"slotId": "hero", "value": 1.0}, {"slotId": "side", "value": 2.0}]},
            "reward[1].value 2.0 is outside [0, 1]",
        ),
    ]:
        with pytest.raises(HttpResponseError) as refused:
            client.reward_multi_slot(event, body)
        assert refused.value.status_code == 400 and refused.value.error.code == "BadRequest"
        assert words in refused.value.message, refused.value.message
    assert counts(server) == before  # nothing learned
    assert client.reward_multi_slot(event, {"reward": [{"slotId": "side", "value": 1.0}]}) is None
    with pytest.raises(ResourceNotFoundError):
        client.reward_multi_slot("never-ranked", {"reward": [{"slotId": "hero", "value": 1.0}]})


def test_deferred_activation_covers_the_page(client: PersonalizerClient, server: str) -> None:
    before = counts(server)
    client.rank_multi_slot(page(HERO, SIDE, FOOTER, eventId="deferred-page", deferActivation=True))
    assert client.reward_multi_slot("deferred-page", {"reward": [{"slotId": "side", "value": 1.0}]}) is None
    held = counts(server)
    assert (held["deferred"], held["clicks"]) == (before["deferred"] + 3, before["clicks"])  # held
    assert client.activate_multi_slot("deferred-page") is None
    after = counts(server)
    assert (after["activated"], after["clicks"]) == (before["activated"] + 3, before["clicks"] + 1)
    assert client.reward_multi_slot("deferred-page", {"reward": [{"slotId": "hero", "value": 0.0}]}) is None
    assert counts(server)["no_clicks"] == before["no_clicks"] + 1
    assert client.activate_multi_slot("deferred-page") is None  # again: harmless
    with pytest.raises(ResourceNotFoundError):
        client.activate_multi_slot("never-ranked")


BAD_PAGES: list[tuple[dict[str, Any], str]] = [
    (page(HERO, slot("hero", "xbox")), "slots[1].id 'hero' is slots[0]'s too"),
    (page(HERO, slot("side", "pizza")), "slots[1].baselineAction 'pizza' is not one of the actions"),
    (page(HERO, slot("side", "xbox", ["xbox"])), "slots[1].baselineAction 'xbox' is excluded"),
    (page(HERO, slot("side", "polo")), "slots[1].baselineAction 'polo' is slots[0]'s too"),
    (
        page(HERO, slot("side", "xbox", ["pizza"])),
        "slots[1].excludedActions: 'pizza' is not one of the request's actions",
    ),
    (  # so a page has as many actions as slots
        {**page(slot("a", "polo"), slot("b", "mug"), slot("c", "polo")), "actions": actions(["polo", "mug"])},
        "slots[2].baselineAction 'polo' is slots[0]'s too",
    ),
    (page(*[slot(f"s{i}", "polo") for i in range(MAX_SLOTS + 1)]), f"slots: more than {MAX_SLOTS} slots"),
    (page(HERO, {**SIDE, "baseline": "xbox"}), "slots.1.baseline: Extra inputs are not permitted"),
]


@pytest.mark.parametrize(("body", "words"), BAD_PAGES)
def test_bad_pages_are_400_naming_the_problem(
    client: PersonalizerClient, server: str, body: dict[str, Any], words: str
) -> None:
    before = counts(server)
    with pytest.raises(HttpResponseError) as refused:
        client.rank_multi_slot(body)
    assert refused.value.status_code == 400 and refused.value.error.code == "BadRequest"
    assert words in refused.value.message, refused.value.message
    assert counts(server)["decisions"] == before["decisions"]


def test_a_label_model_ranks_one_slot(server: str) -> None:
    """A label model's page of two slots is refused naming the action-feature models; one slot is
    ranked as before (its features checked, not used)."""
    client = PersonalizerClient(f"{server}/loops/grocery", AzureKeyCredential(KEY))
    with pytest.raises(HttpResponseError) as refused:
        client.rank_multi_slot(page(HERO, SIDE))
    assert refused.value.status_code == 400 and '"actions": "features"' in refused.value.message
    r = client.rank_multi_slot(page(HERO))
    assert r["slots"][0]["rewardActionId"] in set(PRODUCTS) - {"monitor"}
    assert client.reward_multi_slot(r["eventId"], {"reward": [{"slotId": "hero", "value": 1.0}]}) is None


def test_the_event_id_is_taken_once(client: PersonalizerClient) -> None:
    client.rank_multi_slot(page(HERO, SIDE, eventId="once"))
    with pytest.raises(ResourceExistsError) as reused:
        client.rank_multi_slot(page(HERO, SIDE, eventId="once"))
    assert "eventId 'once' is taken" in reused.value.message
    with pytest.raises(ResourceExistsError):  # a single rank's event id is the same namespace
        client.rank({"actions": actions(), "eventId": "once"})


def test_one_slot_with_features_is_a_page_of_one(client: PersonalizerClient, server: str) -> None:
    """On an action-feature model one slot with features is a page (its features scored), one
    without is a single decision as before; either way the reward names the slot."""
    for body in (page(HERO), page(slot("hero", "polo", ["monitor"]))):
        before = counts(server)
        r = client.rank_multi_slot(body)
        assert [s["id"] for s in r["slots"]] == ["hero"]
        with pytest.raises(HttpResponseError) as other:
            client.reward_multi_slot(r["eventId"], {"reward": [{"slotId": "side", "value": 1.0}]})
        assert other.value.status_code == 400 and "'side'" in other.value.message
        assert client.reward_multi_slot(r["eventId"], {"reward": [{"slotId": "hero", "value": 1.0}]}) is None
        after = counts(server)
        assert (after["decisions"], after["clicks"]) == (before["decisions"] + 1, before["clicks"] + 1)


# -- in-process: what a page decides and learns ------------------------------------------------------


@pytest.mark.anyio
async def test_a_page_decides_as_predict_page(models_file: Path) -> None:
    """Two servers with the same seeded ids: a multi-slot rank decides as ``Runtime.predict_page``
    with the flattened context, action and slot features and each slot's exclusions."""
    settings = {"config_file": models_file, "default_model": "shop", "decision_id_seed": 3}
    app_b = make_app(**settings)
    async with app_client(make_app(**settings)) as a, app_client(app_b) as b:
        runtime = app_b.state.runtime
        for t in range(20):
            context = [{"user": {"tier": "gold", "visits": t}}]
            body = {"contextFeatures": context, "actions": actions(), "slots": [HERO, SIDE, FOOTER]}
            r = await a.post(RANK, json=body)
            assert r.status_code == 201, r.text
            p = await runtime.predict_page(
                None,
                {"user.tier": "gold", "user.visits": t},
                [{"id": i, "features": {"shelf": i, "price": 10 * (k + 1)}} for k, i in enumerate(PRODUCTS)],
                [
                    {
                        "id": s["id"],
                        "features": s["features"][0],
                        "excluded": s.get("excludedActions"),
                        "baseline": s["baselineAction"],
                    }
                    for s in (HERO, SIDE, FOOTER)
                ],
            )
            assert r.json() == {
                "eventId": p.decision_id,
                "slots": [{"id": s.slot_id, "rewardActionId": s.label} for s in p.slots],
            }
            hero = r.json()["slots"][0]["rewardActionId"]
            rewards = [{"slotId": "hero", "value": float(hero == "xbox")}]
            reward = await a.post(REWARD.format(r.json()["eventId"]), json={"reward": rewards})
            assert reward.status_code == 204, reward.text
            out, _ = await runtime.feedback_slot(p.decision_id, 0, float(p.slots[0].label == "xbox"), True)
            assert out.status.value == "accepted"
        model_a, model_b = (await a.get("/models/shop")).json(), (await b.get("/models/shop")).json()
        assert model_a["checksum"] == model_b["checksum"]  # the same model learned the same


@pytest.mark.anyio
async def test_a_page_in_logging_and_apprentice_rollout(models_file: Path) -> None:
    """Safe rollout per page (issue 53, item 5; service/page_rollout.py): in logging rollout a page
    serves every slot's baselineAction (probability 1) and a rank of one slot without features still
    serves the slot's baselineAction; in apprentice rollout each slot's reward is evidence."""
    app = make_app(config_file=models_file, default_model="shop", api_keys=KEY, admin_key=ADMIN_KEY)
    async with app_client(app) as http:
        r = await http.post(
            "/models/shop/rollout", json={"mode": "logging"}, headers={"X-API-Key": ADMIN_KEY}
        )
        assert r.status_code == 200, r.text
        http.headers["Ocp-Apim-Subscription-Key"] = KEY
        body = page(HERO, SIDE)
        r = await http.post(RANK, json=body)
        assert r.status_code == 201, r.text
        served = [s["rewardActionId"] for s in r.json()["slots"]]
        assert served == [s["baselineAction"] for s in body["slots"]]
        r = await http.post(RANK, json=page(slot("hero", "racket", ["monitor"])))
        assert r.status_code == 201 and r.json()["slots"][0]["rewardActionId"] == "racket", r.text
        # apprentice: each slot's reward adds to the rollout's evidence, and the learner learns it
        r = await http.post(
            "/models/shop/rollout", json={"mode": "apprentice"}, headers={"X-API-Key": ADMIN_KEY}
        )
        assert r.status_code == 200, r.text
        for _ in range(10):
            r = await http.post(RANK, json=page(HERO, SIDE))
            assert r.status_code == 201, r.text
            rewards = [{"slotId": s["id"], "value": 1.0} for s in r.json()["slots"]]
            reward = await http.post(REWARD.format(r.json()["eventId"]), json={"reward": rewards})
            assert reward.status_code == 204, reward.text
        model = (await http.get("/models/shop", headers={"X-API-Key": ADMIN_KEY})).json()
        assert model["rollout"]["mode"] == "apprentice" and model["rollout"]["estimates"]["n"] == 20


# -- the quickstart -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_multislot_quickstart_loop_learns(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``python -m lab.personalizer_multislot``: 2,000 rounds of the multi-slot quickstart's loop
    with ``azure-ai-personalizer``, the price a string (C#): every slot's reward over the last 20 %
    is well above a random page's; the price a number (Python): the page's (docs/PERSONALIZER.md)."""
    assert quickstart.main(["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    print(out)
    rows = {
        cells[0]: [float(c) for c in cells[1:]]
        for line in out.splitlines()
        if line.startswith("| ") and re.search(r"\d\.\d{3} \|$", line)
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    random_page = rows["uniformly random page (expected)"]
    expected = quickstart.expected("random")
    assert random_page == pytest.approx([*expected, sum(expected)], abs=5e-4)
    text = rows["clickboost, last 400 rounds (20 %), price a string (C#)"]
    for ours, theirs in zip(text, random_page, strict=True):
        assert ours >= theirs + 0.2, out
    number = rows["clickboost, last 400 rounds (20 %), price a number (Python)"]
    assert number[-1] >= random_page[-1] + 0.2, out
    assert "<!-- BEGIN personalizer-multislot -->" in (tmp_path / "PERSONALIZER.md").read_text()


# -- every store ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_deferred_page_slot_by_slot_on_every_store(any_store: httpx.AsyncClient) -> None:
    """On memory, SQLite and Redis: an unknown slot refused with nothing learned, a reward held for
    the activation, each slot learned once, a second reward 409."""
    http, base = any_store, "/loops/shop/personalizer/v1.1-preview.3/multislot"
    r = await http.post(f"{base}/rank", json=page(HERO, SIDE, FOOTER, deferActivation=True))
    assert r.status_code == 201, r.text
    event = r.json()["eventId"]
    reward = f"{base}/events/{event}/reward?wait=true"
    before = await position(http, "shop")
    unknown = [{"slotId": "side", "value": 1}, {"slotId": "banner", "value": 1}]
    r = await http.post(reward, json={"reward": unknown})
    assert error(r, 400, "'banner'")
    r = await http.post(reward, json={"reward": [{"slotId": "side", "value": 1}]})
    assert r.status_code == 204 and await position(http, "shop") == before  # held
    r = await http.post(f"{base}/events/{event}/activate?wait=true")
    assert r.status_code == 204 and await position(http, "shop") == before + 1
    for slot_id in ("footer", "hero"):
        r = await http.post(reward, json={"reward": [{"slotId": slot_id, "value": 0}]})
        assert r.status_code == 204, r.text
    assert await position(http, "shop") == before + 3
    for slot_id in ("hero", "side"):  # every slot answered
        r = await http.post(reward, json={"reward": [{"slotId": slot_id, "value": 1}]})
        assert error(r, 409, "already answered")
    assert await position(http, "shop") == before + 3
