"""Decision ids over HTTP on every store (issue 51, items 3 and 6): one rule for an id on every route,
the longest allowed id working end to end, and an event found only through its own loop.

The app runs in-process on each store of :data:`STORES` (memory, SQLite, Redis, a 3-master Redis
Cluster). The rule is :func:`service.store.base.check_decision_id`: a client chooses 1 to
``MAX_ID_LENGTH`` characters, the server hands it back with its store's routing suffix (up to
``MAX_DECISION_ID_LENGTH``), and "." and ".." (path segments) are refused.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from itertools import count

import httpx
import pytest

from service.api.app import create_app
from service.config import Settings
from service.store import MemoryStore, SQLiteStore, Store
from service.store.base import MAX_DECISION_ID_LENGTH, MAX_ID_LENGTH
from service.store.redis import RedisStore, key_slot
from tests.service.api.conftest import app_client

pytestmark = pytest.mark.anyio

SPEC = {"learner": "banditron", "hashing_bits": 10, "labels": ["a", "b", "c"], "reward_window_seconds": 600}
FEATURES = {"user": "x", "n": 1.5}
ACTIONS = [{"id": "a"}, {"id": "b"}, {"id": "c"}]
#: The longest id a client may choose, with every kind of character the rule allows.
LONGEST = ("Az09_.:-" * 40)[:MAX_ID_LENGTH]
P = "/personalizer/v1.0"


def _redis(fixture: str) -> Callable[[pytest.FixtureRequest], Store]:
    def make(request: pytest.FixtureRequest) -> Store:
        return RedisStore(request.getfixturevalue(fixture), prefix=f"test-{uuid.uuid4().hex}:")

    return make


STORES: dict[str, Callable[[pytest.FixtureRequest], Store]] = {
    "memory": lambda request: MemoryStore(),
    "sqlite": lambda request: SQLiteStore(
        request.getfixturevalue("tmp_path") / "data" / "clickboost.sqlite3"
    ),
    "redis": _redis("redis_url"),
    "redis-cluster": _redis("redis_cluster_url"),
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=sorted(STORES))
async def served(request: pytest.FixtureRequest) -> AsyncIterator[tuple[httpx.AsyncClient, Store]]:
    """The app on a fresh store of each kind, and the store."""
    store = STORES[request.param](request)
    try:
        async with app_client(create_app(Settings(store="memory", demo=False), store=store)) as client:
            yield client, store
    finally:
        for name in await store.list_models():
            await store.delete_model(name)
        await store.close()


async def create(client: httpx.AsyncClient, *names: str) -> None:
    """Create ``names``: 201 each, even when the creation races the app's first sync of the registry
    (on Redis the name is registered before the model's keys are made, and a sync in between marks
    the model failed for its back-off; the creating request loads it at once all the same)."""
    for name in names:
        r = await client.put(f"/models/{name}", json=SPEC)
        assert r.status_code == 201, r.text


async def test_the_longest_allowed_id_round_trips_on_every_store(
    served: tuple[httpx.AsyncClient, Store],
) -> None:
    """predict -> feedback -> activate with a chosen id of ``MAX_ID_LENGTH`` characters, and
    Personalizer's rank -> reward -> activate with another (on Redis the answer's id carries the
    routing suffix: before, ``/feedback`` refused an id over 200 characters)."""
    client, store = served
    await create(client, "m")
    r = await client.post(
        "/predict", json={"model": "m", "features": FEATURES, "decision_id": LONGEST, "defer": True}
    )
    assert r.status_code == 200, r.text
    decision_id = r.json()["decision_id"]
    assert decision_id.startswith(LONGEST) and len(decision_id) <= MAX_DECISION_ID_LENGTH
    r = await client.post("/feedback", json={"decision_id": decision_id, "click": True})
    assert r.status_code == 200 and r.json()["held"], r.text
    r = await client.post(f"/decisions/{decision_id}/activate")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "activated" and r.json()["learned"]["outcome"] == "click"

    event = LONGEST[::-1]
    rank = {"contextFeatures": [FEATURES], "actions": ACTIONS, "eventId": event, "deferActivation": True}
    r = await client.post(f"/loops/m{P}/rank", json=rank)
    assert r.status_code == 201 and r.json()["eventId"] == event, r.text
    r = await client.post(f"/loops/m{P}/events/{event}/reward", json={"value": 0.25})
    assert r.status_code == 204, r.text
    r = await client.post(f"/loops/m{P}/events/{event}/activate")
    assert r.status_code == 204, r.text
    assert [e.decision_id for e in await store.read_log("m", after=0)] == [
        decision_id,
        store.route("m", event),
    ]


async def test_an_id_one_longer_or_a_dot_segment_is_refused_at_every_route(
    served: tuple[httpx.AsyncClient, Store],
) -> None:
    """One character over the limit is a 4xx naming the limit, and "." / ".." a 4xx, at every route
    that takes an id (before: "." and ".." were ranked and then unreachable, and the reward and
    activation paths took any length); nothing is stored."""
    client, store = served
    await create(client, "m")
    chosen, handed_out = "x" * (MAX_ID_LENGTH + 1), "x" * (MAX_DECISION_ID_LENGTH + 1)

    async def refused(path: str, body: dict[str, object] | None, limit: int | None) -> None:
        r = await client.post(path, json=body) if body is not None else await client.post(path)
        assert r.status_code in (400, 422), (path, r.status_code, r.text)
        text = r.text
        assert str(limit) in text if limit is not None else "'.'" in text or "'..'" in text, (path, text)

    predict = {"model": "m", "features": FEATURES}
    rank = {"contextFeatures": [FEATURES], "actions": ACTIONS}
    slots = {**rank, "slots": [{"id": "s", "baselineAction": "a"}]}
    for bad, segment, limit, long_limit in (
        (chosen, chosen, MAX_ID_LENGTH, MAX_DECISION_ID_LENGTH),
        (".", "%2E", None, None),
        ("..", "%2E%2E", None, None),
    ):
        long_handed = handed_out if limit is not None else bad
        long_segment = handed_out if limit is not None else segment
        await refused("/predict", {**predict, "decision_id": bad}, limit)
        await refused("/feedback", {"decision_id": long_handed, "click": True}, long_limit)
        await refused(f"/decisions/{long_segment}/activate", None, long_limit)
        for prefix in ("", "/loops/m"):
            await refused(f"{prefix}{P}/rank", {**rank, "eventId": bad}, limit)
            await refused(
                f"{prefix}/personalizer/v1.1-preview.3/multislot/rank", {**slots, "eventId": bad}, limit
            )
            await refused(f"{prefix}{P}/events/{segment}/reward", {"value": 1.0}, limit)
            await refused(f"{prefix}{P}/events/{segment}/activate", None, limit)
            body = {"reward": [{"slotId": "s", "value": 1.0}]}
            await refused(
                f"{prefix}/personalizer/v1.1-preview.3/multislot/events/{segment}/reward", body, limit
            )
            await refused(
                f"{prefix}/personalizer/v1.1-preview.3/multislot/events/{segment}/activate", None, limit
            )
    c = await store.counts("m")
    assert (c.decisions, await store.log_position("m")) == (0, 0)


def same_slot(name: str) -> str:
    """A model name whose Redis hash slot is ``name``'s: its decision ids get the same routing suffix,
    so on Redis an event id names one key whichever of the two loops a reward goes to."""
    for i in count():
        twin = f"{name}-twin{i}"
        if key_slot(twin) == key_slot(name):
            return twin
    raise AssertionError


async def test_a_reward_or_activation_for_an_event_of_another_loop_is_404_on_every_store(
    served: tuple[httpx.AsyncClient, Store],
) -> None:
    """Issue 51 item 6: an event is found only through its own loop (before: learned by its own model
    through another loop on SQLite and memory, 404 on Redis unless the loops shared a hash slot);
    the wrong loop claims nothing, and the right one still learns it once."""
    client, store = served
    twin = same_slot("loop-a")
    await create(client, "loop-a", twin, "loop-c")
    rank = {"contextFeatures": [FEATURES], "actions": ACTIONS, "eventId": "e1", "deferActivation": True}
    assert (await client.post(f"/loops/loop-a{P}/rank", json=rank)).status_code == 201
    slotted = {**rank, "eventId": "e2", "slots": [{"id": "s", "baselineAction": "a"}]}
    r = await client.post("/loops/loop-a/personalizer/v1.1-preview.3/multislot/rank", json=slotted)
    assert r.status_code == 201, r.text

    async def elsewhere() -> None:
        for other in (twin, "loop-c"):
            for path, body in (
                (f"/loops/{other}{P}/events/e1/reward", {"value": 1.0}),
                (f"/loops/{other}{P}/events/e1/activate", None),
                (
                    f"/loops/{other}/personalizer/v1.1-preview.3/multislot/events/e2/reward",
                    {"reward": [{"slotId": "s", "value": 1.0}]},
                ),
            ):
                r = await client.post(path, json=body) if body is not None else await client.post(path)
                assert r.status_code == 404, (path, r.status_code, r.text)
                assert "unknown event id" in r.json()["error"]["message"], r.text

    await elsewhere()
    assert await store.log_position("loop-a") == 0 and (await store.counts("loop-a")).activated == 0
    assert (await client.post(f"/loops/loop-a{P}/events/e1/activate")).status_code == 204
    assert (await client.post(f"/loops/loop-a{P}/events/e1/reward", json={"value": 1.0})).status_code == 204
    await elsewhere()  # claimed now: still unknown elsewhere, not "already answered"
    assert [e.decision_id for e in await store.read_log("loop-a", after=0)] == [store.route("loop-a", "e1")]
    assert await store.log_position(twin) == 0 and await store.log_position("loop-c") == 0


async def test_one_id_predicted_50_times_at_once_is_one_200_and_409s_on_every_store(
    served: tuple[httpx.AsyncClient, Store],
) -> None:
    """Issue 51 item 1 on every store: 50 concurrent predicts with one decision id beside 20 with drawn
    ids are one 200 and 49 x 409, and every drawn one 200 (on Redis the refused decisions wrote an
    entry and deleted it, and decisions behind them failed inside Redis: 500s for others too)."""
    client, store = served
    await create(client, "m")
    same = {"model": "m", "features": FEATURES, "decision_id": "reused"}
    drawn = {"model": "m", "features": FEATURES}
    kinds = [drawn if i % 7 in (0, 3) else same for i in range(70)]  # 20 drawn among 50 of one id
    answers = await asyncio.gather(*(client.post("/predict", json=body) for body in kinds))
    codes = [r.status_code for body, r in zip(kinds, answers, strict=True) if body is same]
    assert sorted(codes) == [200] + [409] * 49, codes
    assert all(r.status_code == 200 for body, r in zip(kinds, answers, strict=True) if body is drawn)
    c = await store.counts("m")
    assert (c.decisions, c.pending) == (21, 21)
