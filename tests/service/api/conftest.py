"""Fixtures for the HTTP tests: the app in-process (httpx ASGI transport, lifespan run) and a real
uvicorn server in a subprocess on a free loopback port."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from service.api.app import create_app
from service.config import Settings
from service.store.redis import RedisStore
from tests.conftest import free_port


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_app(**settings: Any) -> FastAPI:
    """A fresh app with ``Settings(**settings)``, on its own memory store unless ``store`` is given."""
    return create_app(Settings(**{"store": "memory", **settings}))


@asynccontextmanager
async def app_client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client talking to ``app`` in-process, with its lifespan (runtime) running."""
    async with app.router.lifespan_context(app):
        await app.state.loading  # the models loaded (kernels compiled) in the background
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client


@contextmanager
def uvicorn_server(env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> Iterator[str]:
    """``python -m service serve`` in a subprocess; yields its base URL once /readyz answers 200.

    The memory store unless ``env`` says otherwise (nothing is written into the working directory).
    """
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_")}
    full_env["CLICKBOOST_STORE"] = "memory"
    full_env.update(env or {})
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", "--port", str(port), "--log-level", "warning", *args],
        env=full_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not become ready in 30 s")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextmanager
def keyed_server(models_file: Path, default_model: str, api_key: str, admin_key: str) -> Iterator[str]:
    """:func:`uvicorn_server` with the models of ``models_file``, ``default_model`` as its default
    model and both keys configured (the Personalizer clients' tests)."""
    env = {
        "CLICKBOOST_CONFIG_FILE": str(models_file),
        "CLICKBOOST_DEFAULT_MODEL": default_model,
        "CLICKBOOST_API_KEY": api_key,
        "CLICKBOOST_ADMIN_KEY": admin_key,
    }
    with uvicorn_server(env) as url:
        yield url


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def any_store(
    request: pytest.FixtureRequest, models_file: Path, tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    """The app of the module's ``models_file`` (default model ``grocery``) on each store: memory,
    SQLite, Redis (the Personalizer tests' claims on every store)."""
    settings = {"config_file": models_file, "default_model": "grocery"}
    if request.param == "redis":
        store = RedisStore(request.getfixturevalue("redis_url"), prefix=f"test-{uuid.uuid4().hex}:")
        app = create_app(Settings(store="memory", **settings), store=store)
    else:
        app = create_app(Settings(store=request.param, data_dir=tmp_path, **settings))
    async with app_client(app) as client:
        yield client
