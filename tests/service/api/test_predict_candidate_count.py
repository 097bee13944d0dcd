"""``POST /predict`` counts its candidate actions before parsing the body (issue 51, item 5): past
CLICKBOOST_MAX_ACTIONS it answers 422 naming the cap without reading the candidates after it."""

from __future__ import annotations

import json

import pytest

from service.api import json_scan
from service.api import predict as predict_route
from tests.service.api.conftest import app_client, make_app

pytestmark = pytest.mark.anyio
MOST = 100


def _body(n: int, tail: str = "") -> bytes:
    actions = [{"id": f"a{i}", "features": {"brand": f"b{i % 7}", "price": 9.5 + i}} for i in range(n)]
    text = json.dumps({"model": "shop", "features": {"u": "x"}, "actions": actions})
    return (text[:-2] + tail + "]}").encode() if tail else text.encode()


async def test_over_the_cap_is_refused_before_the_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    async with app_client(make_app(max_actions=MOST)) as c:
        await c.put("/models/shop", json={"actions": "features", "hashing_bits": 12})

        def never(*args: object) -> None:
            raise AssertionError("the body was parsed")

        monkeypatch.setattr(predict_route, "parse", never)
        # 10,000 candidates, everything after the cap garbage: any answer but the cap's would have read it
        body = _body(MOST + 1, tail=", " + ", ".join(["{not json"] * 9_899))
        r = await c.post("/predict", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422 and "at most 100 allowed (CLICKBOOST_MAX_ACTIONS)" in r.json()["detail"]


@pytest.mark.parametrize(("n", "status"), [(MOST, 200), (MOST + 1, 422), (10_000, 422)])
async def test_the_cap_holds_whatever_the_count(n: int, status: int) -> None:
    async with app_client(make_app(max_actions=MOST)) as c:
        await c.put("/models/shop", json={"actions": "features", "hashing_bits": 12})
        r = await c.post("/predict", content=_body(n), headers={"content-type": "application/json"})
        assert r.status_code == status, r.text
        if status == 422:
            assert "CLICKBOOST_MAX_ACTIONS" in r.json()["detail"]


def test_small_bodies_are_not_scanned() -> None:
    """Fewer braces than the cap allows objects: no list in it can exceed the cap."""
    assert not json_scan.may_exceed(json.dumps({"features": [0.5] * 784}).encode(), MOST)
    assert not json_scan.may_exceed(_body(MOST // 2 - 1), MOST)
    assert json_scan.may_exceed(_body(MOST + 1), MOST)
