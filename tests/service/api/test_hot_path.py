"""The hot path of issue 52: ``/predict`` and ``/feedback`` answered by :class:`HotRoutes` with
bodies written from dicts; the bytes are those the response models would write, and a request that
fails on that path is answered by the app's handlers as on any other route."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from service.api.schemas import FeedbackResponse, PredictFast, PredictRequest, PredictResponse
from tests.service.api.conftest import app_client, make_app

pytestmark = pytest.mark.anyio

NAMED = {"learner": "banditron", "hashing_bits": 10, "n_labels": 3, "labels": ["a", "b", "c"]}


async def test_answers_are_the_bytes_of_the_response_models() -> None:
    async with app_client(make_app()) as c:
        assert (await c.put("/models/m", json=NAMED)).status_code == 201
        for features in ({"country": "fr", "hour": 13.5, "mobile": True}, {"x": "y"}):
            body = {"model": "m", "features": features, "excluded": ["c"]}
            r = await c.post("/predict", json=body)
            assert r.status_code == 200 and r.headers["content-type"] == "application/json"
            assert r.content == PredictResponse.model_validate_json(r.content).model_dump_json().encode()
            assert [x["label"] for x in r.json()["ranking"]] != []
            fb = await c.post("/feedback", json={"decision_id": r.json()["decision_id"], "reward": 0.25})
            assert fb.status_code == 200
            assert fb.content == FeedbackResponse.model_validate_json(fb.content).model_dump_json().encode()


async def test_failures_on_the_hot_path_are_answered_by_the_apps_handlers() -> None:
    async with app_client(make_app()) as c:
        assert (await c.put("/models/m", json=NAMED)).status_code == 201
        r = await c.post("/predict", content=b"{", headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["detail"].startswith("malformed JSON")
        r = await c.post("/predict", json={"model": "nope", "features": {"a": 1}})
        assert r.status_code == 404 and "unknown model 'nope'" in r.json()["detail"]
        r = await c.post("/feedback", json={"decision_id": "abc"})
        assert r.status_code == 422 and "give click" in r.json()["detail"]
        r = await c.post("/feedback", json={"decision_id": "abc", "click": True})
        assert r.status_code == 404 and r.json() == {"detail": "unknown decision id 'abc'"}
        assert (await c.get("/predict")).status_code == 405  # other methods: the router's answer


_JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
_JSON = st.recursive(
    _JSON_SCALARS, lambda v: st.lists(v, max_size=3) | st.dictionaries(st.text(max_size=3), v)
)


@settings(max_examples=300, deadline=None)
@given(
    features=_JSON
    | st.dictionaries(st.text(max_size=4), _JSON_SCALARS)
    | st.lists(st.floats() | st.integers())
)
def test_the_fast_predict_model_accepts_a_subset_with_the_same_values(features: object) -> None:
    body = json.dumps({"model": "m", "features": features}).encode()  # NaN and Infinity included
    try:
        fast = PredictFast.model_validate_json(body)
    except ValidationError:
        return  # refused: parse() asks PredictRequest, whose errors are the answer
    full = PredictRequest.model_validate_json(body)
    assert fast.model_dump() == full.model_dump()
    assert [type(v) for v in _values(fast.features)] == [type(v) for v in _values(full.features)]


def _values(features: object) -> list[object]:
    return list(features.values()) if isinstance(features, dict) else list(features)  # type: ignore[call-overload]
