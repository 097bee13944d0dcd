"""The SDK's ``predict`` for action-feature models and every field ``POST /predict`` takes, on both
clients against a real server; its import name (issue 51, item 12)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from clickboost_client import AsyncClient, BadRequest, Client, Conflict, Prediction
from tests.clients.conftest import ADMIN_KEY, API_KEY, serve

ROOT = Path(__file__).resolve().parents[2]
SHOP = [
    {"id": "sku-1", "features": {"brand": "acme", "price": 9.5}},
    {"id": "sku-2", "features": {"brand": "zeta", "price": 12.0}},
    {"id": "sku-3", "features": {"brand": "acme", "price": 30.0, "new": True}},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    models = tmp_path_factory.mktemp("shop") / "models.toml"
    models.write_text('[models.shop]\nactions = "features"\nhashing_bits = 12\n')
    with serve(config=models) as url:
        yield url


def test_predict_with_candidate_actions_and_every_predict_field(server: str) -> None:
    with Client(server, api_key=API_KEY, admin_key=ADMIN_KEY) as c:
        p = c.predict({"country": "fr", "mobile": True}, model="shop", actions=SHOP)
        assert isinstance(p, Prediction) and p.model == "shop"
        assert p.label in {"sku-1", "sku-2", "sku-3"} and SHOP[p.label_index]["id"] == p.label
        assert len(p.probabilities) == 3 and sorted(r[0] for r in p.ranking) == ["sku-1", "sku-2", "sku-3"]
        assert c.feedback(p.decision_id, click=True, wait=True).model_version == 1
        only = c.predict({"country": "de"}, model="shop", actions=SHOP, eligible=["sku-2"])
        assert only.label == "sku-2" and only.probabilities[0] == only.probabilities[2] == 0.0
        not_first = c.predict({"country": "de"}, model="shop", actions=SHOP, excluded=[0, 1])
        assert not_first.label == "sku-3"
        deferred = c.predict(
            {"country": "us"}, model="shop", actions=SHOP, defer=True, decision_id="page-7", baseline="sku-1"
        )
        assert deferred.decision_id == "page-7"
        with pytest.raises(Conflict):
            c.predict({"country": "us"}, model="shop", actions=SHOP, decision_id="page-7")
        assert c.activate("page-7").status == "activated"
        with pytest.raises(BadRequest, match="actions"):  # an action model needs its candidates
            c.predict({"country": "fr"}, model="shop")
        with pytest.raises(ValueError, match="'id'"):
            c.predict({"country": "fr"}, model="shop", actions=[{"features": {"a": 1}}])


def test_async_client_predicts_with_actions(server: str) -> None:
    async def visits() -> list[Prediction]:
        async with AsyncClient(server, api_key=API_KEY) as c:
            return list(
                await asyncio.gather(
                    *(
                        c.predict({"user": i}, model="shop", actions=SHOP, excluded=["sku-1"])
                        for i in range(5)
                    )
                )
            )

    for p in asyncio.run(visits()):
        assert p.label in {"sku-2", "sku-3"} and p.probabilities[0] == 0.0


def run_python(code: str, *flags: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter outside the checkout (the installed SDK, not the folder)."""
    cmd = [sys.executable, *flags, "-c", code]
    return subprocess.run(cmd, cwd="/", capture_output=True, text=True, timeout=120, check=False)


def test_the_import_name_is_the_distributions_and_the_old_one_warns() -> None:
    new = run_python("import clickboost_client as c; print(c.Client.__module__)", "-W", "error")
    assert new.returncode == 0 and new.stdout.strip() == "clickboost_client.sdk", new.stderr
    old = run_python(
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    import clients\n"
        "    from clients.errors import Conflict\n"
        "import clickboost_client\n"
        "assert clients.Client is clickboost_client.Client and Conflict is clickboost_client.Conflict\n"
        "print([(x.category.__name__, str(x.message)) for x in w])"
    )
    assert old.returncode == 0, old.stderr
    assert "DeprecationWarning" in old.stdout and "clickboost_client" in old.stdout, old.stdout
    for name in ("clickboost_client", "clients"):  # Dockerfile and compose spell the old one
        replay = subprocess.run(
            [sys.executable, "-m", f"{name}.replay", "--help"],
            cwd="/",
            capture_output=True,
            text=True,
            check=False,
        )
        assert replay.returncode == 0 and "--url" in replay.stdout, replay.stderr
