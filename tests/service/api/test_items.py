"""``/models/{name}/items`` (issue 54, service/api/items.py): one item and a bulk (JSON array, JSON
lines) registered, read, paged and removed; bad input a 4xx naming it with nothing registered; the
admin key guards every route; the bulk's body limit is the model budget with the admin key only; the
memory budget refuses a catalog that does not fit, naming both sizes."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from service.catalog import Catalog
from service.runtime.budgets import state_nbytes
from service.serial import checksum
from tests.service.api.conftest import app_client, make_app
from tests.service.test_catalog_runtime import SHOP

pytestmark = pytest.mark.anyio

ADMIN = {"X-API-Key": "admin-key"}
SHOP_BODY = SHOP.model_dump(mode="json", exclude_none=True)


def item(i: int, **more: Any) -> dict[str, Any]:
    return {
        "id": f"sku-{i}",
        "features": {"brand": f"b{i % 3}", "price": float(i), "sale": i % 2 == 0},
        **more,
    }


async def shop(client: httpx.AsyncClient, headers: dict[str, str] | None = None) -> None:
    r = await client.put("/models/shop", json=SHOP_BODY, headers=headers)
    assert r.status_code == 201, r.text


async def test_items_registered_read_paged_and_removed() -> None:
    async with app_client(make_app()) as client:
        await shop(client)
        r = await client.put("/models/shop/items/sku-0", json={"features": {"brand": "acme", "price": 9.5}})
        assert r.status_code == 200, r.text
        assert r.json() == {"model": "shop", "version": 1, "written": 1, "items": 1}
        r = await client.post("/models/shop/items", json=[item(i) for i in range(1, 6)])
        assert r.json() == {"model": "shop", "version": 2, "written": 5, "items": 6}
        lines = "\n".join(json.dumps(item(i, active=False)) for i in range(6, 9)) + "\n"
        r = await client.post(
            "/models/shop/items", content=lines, headers={"content-type": "application/x-ndjson"}
        )
        assert r.json()["items"] == 9
        r = await client.put("/models/shop/items/sku-9", json={"features": {"brand": "z"}, "expires_at": 1.0})
        assert r.status_code == 200
        got = (await client.get("/models/shop/items/sku-0")).json()
        assert got == {
            "id": "sku-0",
            "active": True,
            "expires_at": None,
            "expired": False,
            "categorical": {"brand": "acme"},
            "entries": 2,
        }
        got = (await client.get("/models/shop/items/sku-9")).json()
        assert got["expired"] is True and got["expires_at"] == 1.0
        assert (await client.get("/models/shop/items/sku-6")).json()["active"] is False
        page = (await client.get("/models/shop/items", params={"offset": 2, "limit": 3})).json()
        assert [i["id"] for i in page["items"]] == ["sku-2", "sku-3", "sku-4"]
        assert (page["total"], page["offset"], page["next_offset"], page["version"]) == (10, 2, 5, 4)
        last = (await client.get("/models/shop/items", params={"offset": 8})).json()
        assert [i["id"] for i in last["items"]] == ["sku-8", "sku-9"] and last["next_offset"] is None
        r = await client.delete("/models/shop/items/sku-3")
        assert r.json() == {"model": "shop", "version": 5, "written": 1, "items": 9}
        r = await client.get("/models/shop/items/sku-3")
        assert (
            r.status_code == 404
            and r.json()["detail"] == "item 'sku-3' is not in the catalog of model 'shop'"
        )
        assert (await client.delete("/models/shop/items/sku-3")).status_code == 404
        # the model's info carries the catalog: what it holds and its checksum, which a replica
        # that applied the same log (here a catalog that registered the same items) has too
        info = (await client.get("/models/shop")).json()["catalog"]
        again = Catalog(SHOP.hashing_bits or 0)
        again.put_many([{"id": "sku-0", "features": {"brand": "acme", "price": 9.5}}])
        again.put_many([item(i) for i in range(1, 6)])
        again.put_many([item(i, active=False) for i in range(6, 9)])
        again.put_many([{"id": "sku-9", "features": {"brand": "z"}, "expires_at": 1.0}])
        again.remove("sku-3")
        assert info == {
            "items": 9,
            "version": 5,
            "bytes": again.nbytes(),
            "checksum": checksum(again.to_state()),
        }
        r = await client.post("/models/shop/items", json=[item(1)])  # replaced, the same features
        info = (await client.get("/models/shop")).json()["catalog"]
        assert info["version"] == 6 and info["checksum"] != checksum(again.to_state())


@pytest.mark.parametrize(
    ("body", "content_type", "status", "detail"),
    [
        ("[1, 2", "application/json", 400, "malformed JSON in the body"),
        ('{"id": "a"}', "application/json", 422, "body: a JSON array of items"),
        ('[{"id": "a", "features": {"p": NaN}}]', "application/json", 400, "NaN is not a number"),
        ('{"id": "a"}\n{"id": ', "application/x-ndjson", 400, "malformed JSON in a line of the body"),
        ('[{"id": "a"}, {"id": "a"}]', "application/json", 422, "items.1.id: 'a' is given twice"),
        ('[{"id": "a"}, {"id": ""}]', "application/json", 422, "items.1.id: a string of 1 to"),
        ('[{"id": "a", "feature": {}}]', "application/json", 422, "items.0: unknown field 'feature'"),
        ('[{"id": "a", "features": {"p": [1]}}]', "application/json", 422, "items.0.features.p: a number"),
        ('[{"id": "a", "features": {"p": 1e300}}]', "application/json", 422, "items.0.features.p: 1e+300 is"),
        ('[{"id": "a", "active": 1}]', "application/json", 422, "items.0.active: true or false"),
        ('[{"id": "a", "expires_at": "x"}]', "application/json", 422, "items.0.expires_at: a time"),
        ("[]", "text/plain", 415, "the body must be a JSON array"),
        ("", "application/json", 400, "empty body"),
    ],
)
async def test_bad_bulk_input_is_a_clear_4xx_and_registers_nothing(
    body: str, content_type: str, status: int, detail: str
) -> None:
    async with app_client(make_app()) as client:
        await shop(client)
        await client.post("/models/shop/items", json=[item(0)])
        r = await client.post("/models/shop/items", content=body, headers={"content-type": content_type})
        assert r.status_code == status, r.text
        assert detail in r.json()["detail"]
        page = (await client.get("/models/shop/items")).json()
        assert (page["total"], page["version"]) == (1, 1)


async def test_unknown_model_and_label_model() -> None:
    async with app_client(make_app()) as client:
        r = await client.put("/models/nope/items/a", json={"features": {}})
        assert r.status_code == 404 and "unknown model 'nope'" in r.json()["detail"]
        r = await client.put("/models/labels", json={"hashing_bits": 10, "labels": ["a", "b"]})
        assert r.status_code == 201
        for r in [
            await client.put("/models/labels/items/a", json={"features": {}}),
            await client.get("/models/labels/items"),
        ]:
            assert r.status_code == 422
            assert r.json()["detail"] == (
                "model 'labels' has fixed labels; a catalog of items needs a model with "
                '"actions": "features"'
            )


async def test_the_admin_key_guards_every_route() -> None:
    app = make_app(admin_key="admin-key", api_keys="api-key")
    async with app_client(app) as client:
        await shop(client, ADMIN)
        calls = [
            ("PUT", "/models/shop/items/a", {"json": {"features": {}}}),
            ("POST", "/models/shop/items", {"json": [item(1)]}),
            ("GET", "/models/shop/items/a", {}),
            ("GET", "/models/shop/items", {}),
            ("DELETE", "/models/shop/items/a", {}),
        ]
        for key in (None, "api-key", "wrong"):
            for method, url, kwargs in calls:
                headers = {} if key is None else {"X-API-Key": key}
                r = await client.request(method, url, headers=headers, **kwargs)
                assert r.status_code == 401, (method, url, key)
        for method, url, kwargs in calls:
            assert (await client.request(method, url, headers=ADMIN, **kwargs)).status_code == 200
    async with app_client(make_app(api_keys="api-key")) as client:  # keys but no admin key: closed
        r = await client.get("/models/shop/items", headers={"X-API-Key": "api-key"})
        assert r.status_code == 403


async def test_a_bulk_may_be_as_large_as_the_model_budget_with_the_admin_key_only() -> None:
    app = make_app(admin_key="admin-key", max_body_bytes=20_000)
    bulk = [item(i) for i in range(400)]  # about 30 KB
    async with app_client(app) as client:
        await shop(client, ADMIN)
        r = await client.post("/models/shop/items", json=bulk, headers={"X-API-Key": "wrong"})
        assert r.status_code == 413
        r = await client.post("/models/shop/items", json=bulk, headers=ADMIN)
        assert r.status_code == 200 and r.json()["items"] == 400
        r = await client.put(
            "/models/shop/items/x", json={"features": {f"f{i}": "x" * 30 for i in range(900)}}, headers=ADMIN
        )
        assert r.status_code == 413  # one item meets the default limit


async def test_the_memory_budget_refuses_a_catalog_over_it_naming_both_sizes() -> None:
    app = make_app(max_model_bytes=state_nbytes(SHOP) + 50_000)
    async with app_client(app) as client:
        await shop(client)
        r = await client.post("/models/shop/items", json=[item(i) for i in range(2000)])
        assert r.status_code == 422
        detail = r.json()["detail"]
        assert detail.startswith("model 'shop' would hold a catalog of ") and "(2,000 items) beside" in detail
        assert "the budget per model is" in detail and "(CLICKBOOST_MAX_MODEL_BYTES)" in detail
        assert (await client.get("/models/shop/items")).json()["total"] == 0
