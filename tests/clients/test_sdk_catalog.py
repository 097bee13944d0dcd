"""The SDK and catalog decisions (issue 54): the predict body carries ``candidates``, ``filter`` and
``k`` only when given, and a catalog answer (the top k, no ``probabilities``) reads as a
:class:`Prediction` with its candidates' count and catalog version; both clients against a real
server whose catalog was registered through the item routes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from clickboost_client import AsyncClient, BadRequest, Client, Page, Prediction
from clickboost_client.sdk import _catalog_fields
from tests.clients.conftest import ADMIN_KEY, API_KEY, serve

ANSWER = {
    "decision_id": "d1",
    "label": "sku-4",
    "label_index": 4,
    "probability": 0.25,
    "ranking": [{"label": "sku-4", "label_index": 4, "probability": 0.25}],
    "candidates": 10000,
    "catalog_version": 7,
    "model": "shop",
    "model_version": 3,
}


def test_predict_body_has_the_catalog_fields_given_only() -> None:
    assert _catalog_fields(None, None, None) == {}
    assert _catalog_fields(("a", "b"), None, 3) == {"candidates": ["a", "b"], "k": 3}
    assert _catalog_fields(None, {"category": ["shoes"]}, None) == {"filter": {"category": ["shoes"]}}


def test_a_catalog_answer_reads_as_a_prediction() -> None:
    p = Prediction.from_json(ANSWER)
    assert p.label == "sku-4" and p.probability == 0.25 and p.probabilities == ()
    assert p.ranking == (("sku-4", 4, 0.25),) and p.candidates == 10000 and p.catalog_version == 7
    q = Prediction.from_json({**ANSWER, "probabilities": [1.0], "ranking": []} | {"candidates": 1})
    assert q.candidates is None and q.probabilities == (1.0,)  # not a catalog answer: as before


def test_both_clients_predict_from_a_catalog_on_a_real_server(tmp_path: Path) -> None:
    models = tmp_path / "models.toml"
    models.write_text('[models.shop]\nactions = "features"\nhashing_bits = 12\n')
    items = [
        {"id": f"sku-{i}", "features": {"category": ["shoes", "bags"][i % 2], "price": i}} for i in range(20)
    ]
    with serve(config=models) as url:
        r = httpx.post(f"{url}/models/shop/items", json=items, headers={"X-API-Key": ADMIN_KEY}, timeout=30)
        assert r.status_code < 300, r.text
        with Client(url, api_key=API_KEY) as c:
            p = c.predict({"country": "fr"}, model="shop")  # the whole catalog
            assert p.candidates == 20 and len(p.ranking) == 10 and p.probabilities == ()
            q = c.predict({"country": "fr"}, model="shop", candidates=["sku-1", "sku-2"], k=1)
            assert q.label in {"sku-1", "sku-2"} and q.candidates == 2 and len(q.ranking) == 1
            assert c.feedback(q.decision_id, click=True, wait=True).model_version is not None
            with pytest.raises(BadRequest, match="sku-99"):
                c.predict({"country": "fr"}, model="shop", candidates=["sku-99"])
            # a page over the catalog: each slot its item, the top k and how many it was over
            slots = [{"id": "hero"}, {"id": "tile", "excluded": ["sku-1"]}]
            page = c.predict_page(
                {"country": "fr"}, None, slots, model="shop", filter={"category": "bags"}, k=3
            )
            assert page.catalog_version is not None and len(set(page.labels)) == 2
            assert all(int(label[4:]) % 2 == 1 for label in page.labels) and page.labels[1] != "sku-1"
            assert page.slots[0].candidates == 10 and page.slots[1].candidates in (8, 9)
            assert all(len(s.ranking) == 3 for s in page.slots)
            assert c.feedback(page.decision_id, click=True, slot="tile", wait=True).model_version is not None
            with pytest.raises(BadRequest, match="3 slots but 2 candidates"):
                c.predict_page(
                    {"country": "fr"},
                    None,
                    [*slots, {"id": "x"}],
                    model="shop",
                    candidates=["sku-1", "sku-2"],
                )

        async def visit() -> tuple[Prediction, Page]:
            async with AsyncClient(url, api_key=API_KEY) as c:
                one = await c.predict({"country": "de"}, model="shop", filter={"category": "bags"}, k=20)
                ids = ["sku-3", "sku-4", "sku-5"]
                page = await c.predict_page(
                    {"country": "de"}, None, [{"id": "a"}, {"id": "b"}], model="shop", candidates=ids
                )
                return one, page

        bags, page = asyncio.run(visit())
        assert bags.candidates == 10 and all(int(r[0][4:]) % 2 == 1 for r in bags.ranking)
        assert set(page.labels) <= {"sku-3", "sku-4", "sku-5"} and [s.candidates for s in page.slots] == [
            3,
            2,
        ]
