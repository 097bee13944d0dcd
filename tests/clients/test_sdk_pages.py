"""The SDK's pages (issue 53): ``predict_page(features, actions, slots)`` answers a :class:`Page`,
``feedback(..., slot=...)`` rewards one slot once, ``activate`` a whole deferred page; both clients
against a real server (SQLite store, so a page's records go through the embedded store's one transaction)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from clickboost_client import AsyncClient, BadRequest, Client, Conflict, NotFound, Page
from tests.clients.conftest import ADMIN_KEY, API_KEY, serve

SHOP = [
    {"id": f"sku-{k}", "features": {"brand": ("acme", "zeta")[k % 2], "price": 5.0 * k}} for k in range(5)
]
SLOTS = [
    {"id": "hero", "features": {"position": "top"}},
    {"id": "tile"},
    {"id": "footer", "excluded": ["sku-0"]},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    here = tmp_path_factory.mktemp("pages")
    models = here / "models.toml"
    models.write_text('[models.shop]\nactions = "features"\nhashing_bits = 12\n')
    with serve(config=models, CLICKBOOST_STORE="sqlite", CLICKBOOST_DATA_DIR=str(here)) as url:
        yield url


def test_a_page_and_its_rewards_per_slot(server: str) -> None:
    with Client(server, api_key=API_KEY, admin_key=ADMIN_KEY) as c:
        page = c.predict_page({"country": "fr"}, SHOP, SLOTS, model="shop")
        assert isinstance(page, Page) and page.server == server and page.model == "shop"
        assert [s.id for s in page.slots] == ["hero", "tile", "footer"]
        assert len(set(page.labels)) == 3 and page.slots[2].label != "sku-0"
        assert all(SHOP[s.label_index]["id"] == s.label for s in page.slots)
        assert len(page.slots[0].ranking) == 5 and len(page.slots[1].ranking) == 4
        first = c.feedback(page.decision_id, click=True, slot="tile", wait=True)
        assert (first.slot, first.model_version) == ("tile", 1)
        assert c.feedback(page.decision_id, reward=0.5, slot=0, wait=True).model_version == 2
        with pytest.raises(Conflict) as again:
            c.feedback(page.decision_id, click=False, slot=1)
        assert again.value.first_outcome is not None and again.value.first_outcome["outcome"] == "click"
        with pytest.raises(BadRequest, match="no slot 'side'"):
            c.feedback(page.decision_id, click=True, slot="side")
        with pytest.raises(NotFound):
            c.feedback("no-such-page", click=True, slot=2)
        with pytest.raises(BadRequest, match="2 candidate actions"):
            c.predict_page({"country": "fr"}, SHOP[:2], SLOTS, model="shop")
        with pytest.raises(ValueError, match="'id'"):
            c.predict_page({"country": "fr"}, SHOP, [{"features": {}}], model="shop")

        deferred = c.predict_page({"country": "de"}, SHOP, SLOTS, model="shop", defer=True)
        assert isinstance(deferred, Page)
        assert c.feedback(deferred.decision_id, click=True, slot="footer").held
        done = c.activate(deferred.decision_id, wait=True)
        assert done.status == "activated" and done.slots is not None
        assert [s["status"] for s in done.slots] == ["activated"] * 3
        assert done.slots[2]["learned"]["outcome"] == "click"
        assert c.get_model("shop").version == 3
        stats = c.model_stats("shop")
        assert {s["slot"]: s["answered"] for s in stats["slots"]} == {0: 1, 1: 1, 2: 1}


def test_the_async_client_rewards_slots_of_pages(server: str) -> None:
    async def visits() -> list[Page]:
        async with AsyncClient(server, api_key=API_KEY) as c:
            pages = await asyncio.gather(
                *(c.predict_page({"user": i}, SHOP, SLOTS[:2], model="shop") for i in range(4))
            )
            await asyncio.gather(
                *(c.feedback(p.decision_id, click=s == 0, slot=s) for p in pages for s in range(2))
            )
            return list(pages)

    for p in asyncio.run(visits()):
        assert len(p.slots) == 2 and p.slots[0].label != p.slots[1].label
