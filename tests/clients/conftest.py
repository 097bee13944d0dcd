"""A real service process for the client tests: ``python -m service serve`` (uvicorn) on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
MODELS_TOML = ROOT / "deploy" / "models.toml"  # declares `car` (d = 21, K = 4)
API_KEY = "test-api-key"
ADMIN_KEY = "test-admin-key"


@contextmanager
def serve(seed: int | None = None, config: Path | None = MODELS_TOML, **env: str) -> Iterator[str]:
    """Start a server; yield its base URL once ``/readyz`` answers 200; stop it afterwards.

    ``seed`` sets ``CLICKBOOST_DECISION_ID_SEED`` (deterministic decision ids, as the offline
    simulator's ``DecisionIds.for_seed``). Keys are :data:`API_KEY` and :data:`ADMIN_KEY`.
    """
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_") and k != "REDIS_URL"}
    environ |= {"CLICKBOOST_API_KEYS": API_KEY, "CLICKBOOST_ADMIN_KEY": ADMIN_KEY}
    environ |= {"CLICKBOOST_STORE": "memory", **env}  # unless told otherwise: nothing written to disk
    if seed is not None:
        environ["CLICKBOOST_DECISION_ID_SEED"] = str(seed)
    cmd = [sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--log-level", "warning"] + (["--config", str(config)] if config else [])
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, env=environ, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    pytest.fail(f"server exited with {proc.returncode}: {log.read().decode()[-2000:]}")
                try:
                    if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail("server not ready after 60 s")
                time.sleep(0.1)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """One server per test module, with the `car` model and the seeded decision ids of seed 0."""
    with serve(seed=0) as url:
        yield url
