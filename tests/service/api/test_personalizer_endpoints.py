"""The endpoint a Personalizer client is given (issue 51, item 10): the root on a server of several
models, and an endpoint with ``/personalizer/v1.0`` at its end, answered in Personalizer's error shape
so that the official clients raise their own exceptions with a message saying what to change."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from azure.ai.personalizer import PersonalizerClient as AiClient
from azure.cognitiveservices.personalizer import PersonalizerClient as CogClient
from azure.cognitiveservices.personalizer.models import ErrorResponseException, RankableAction, RankRequest
from azure.core.credentials import AzureKeyCredential
from azure.core.exceptions import ResourceNotFoundError
from msrest.authentication import CognitiveServicesCredentials

from tests.service.api.conftest import app_client, make_app, uvicorn_server

KEY = "pk"
MODELS = """
[models.grocery]
hashing_bits = 10
labels = ["pasta", "bao"]

[models.news]
hashing_bits = 10
labels = ["sports", "music"]
"""
BODY = {"actions": [{"id": "pasta", "features": []}, {"id": "bao", "features": []}]}


@pytest.fixture(scope="module")
def models_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("endpoints") / "models.toml"
    path.write_text(MODELS)
    return path


@pytest.fixture(scope="module")
def server(models_file: Path) -> Iterator[str]:
    """A live server of two models and no default model."""
    with uvicorn_server({"CLICKBOOST_CONFIG_FILE": str(models_file), "CLICKBOOST_API_KEY": KEY}) as url:
        yield url


def personalizer_error(r: httpx.Response) -> dict[str, str]:
    """The ``error`` object of a Personalizer-shaped answer (and nothing else in the body)."""
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return body["error"]


@pytest.mark.anyio
async def test_the_root_without_a_default_model_names_both_ways(models_file: Path) -> None:
    async with app_client(make_app(config_file=models_file)) as client:
        for path in ("/personalizer/v1.0/rank", "/personalizer/rank"):
            r = await client.post(path, json=BODY)
            assert r.status_code == 404, (path, r.text)
            error = personalizer_error(r)
            assert error["code"] == "ResourceNotFound"
            assert "CLICKBOOST_DEFAULT_MODEL" in error["message"] and "/loops/NAME" in error["message"]
            assert "grocery" not in error["message"]  # no model names to a plain key
        assert (await client.post("/loops/grocery/personalizer/v1.0/rank", json=BODY)).status_code == 201
    # an unknown loop is still named as such
    async with app_client(make_app(config_file=models_file)) as client:
        r = await client.post("/loops/nope/personalizer/v1.0/rank", json=BODY)
        assert r.status_code == 404 and "'nope'" in personalizer_error(r)["message"]


@pytest.mark.anyio
async def test_an_endpoint_ending_in_the_api_path_answers_in_personalizers_shape(models_file: Path) -> None:
    async with app_client(make_app(config_file=models_file, default_model="grocery")) as client:
        for path in (
            "/personalizer/v1.0/personalizer/v1.0/rank",
            "/personalizer/v1.0/personalizer/v1.0/events/e1/reward",
            "/loops/news/personalizer/v1.0/personalizer/v1.0/rank",
            "/personalizer/personalizer/rank",
        ):
            r = await client.post(path, json=BODY)
            assert r.status_code == 404, (path, r.text)
            error = personalizer_error(r)
            assert error["code"] == "ResourceNotFound", path
            assert "without /personalizer/" in error["message"], error


def test_the_official_clients_raise_their_own_errors_with_the_fix(server: str) -> None:
    rank = RankRequest(actions=[RankableAction(id="pasta", features=[{"a": 1}])])
    with pytest.raises(ErrorResponseException) as root:
        CogClient(server, CognitiveServicesCredentials(KEY)).rank(rank)
    assert root.value.response.status_code == 404
    assert "CLICKBOOST_DEFAULT_MODEL" in root.value.error.error.message
    with pytest.raises(ErrorResponseException) as doubled:
        CogClient(f"{server}/loops/grocery/personalizer/v1.0", CognitiveServicesCredentials(KEY)).rank(rank)
    assert doubled.value.error.error.code == "ResourceNotFound"
    assert "without /personalizer/" in doubled.value.error.error.message
    with pytest.raises(ResourceNotFoundError) as ai:
        AiClient(f"{server}/loops/grocery/personalizer", AzureKeyCredential(KEY)).rank(BODY)
    assert ai.value.error.code == "ResourceNotFound" and "without /personalizer/" in ai.value.message
    assert CogClient(f"{server}/loops/grocery", CognitiveServicesCredentials(KEY)).rank(rank).event_id
