"""What ``serve`` logs while it starts (issue 51, item 13): "compiling" on a cold kernel cache (once
per install), "loading" when numba's cache holds the kernels, and "ready" once the models serve
(uvicorn's "running on" line comes when the port is bound, before that)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port

MODELS = '[models.news]\nlearner = "banditron"\nhashing_bits = 8\nlabels = ["a", "b"]\n'


def start(tmp_path: Path, cache: Path) -> str:
    """One ``serve`` in a subprocess until /readyz answers 200, then stopped: its log (stderr)."""
    port = free_port()
    models = tmp_path / "models.toml"
    models.write_text(MODELS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_")}
    env |= {
        "NUMBA_CACHE_DIR": str(cache),
        "CLICKBOOST_STORE": "memory",
        "CLICKBOOST_CONFIG_FILE": str(models),
    }
    cmd = [sys.executable, "-m", "service", "serve", "--port", str(port), "--log-level", "info"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not get ready"
            time.sleep(0.1)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    return err


def line_of(log: str, words: str) -> int:
    """The index of the first line of ``log`` with ``words`` (fails if none)."""
    lines = log.splitlines()
    found = [i for i, line in enumerate(lines) if words in line]
    assert found, f"no line with {words!r} in:\n{log[-3000:]}"
    return found[0]


@pytest.mark.slow
def test_compiling_then_loading_and_ready_once_ready(tmp_path: Path) -> None:
    cache = tmp_path / "numba"  # empty: the first start compiles
    cold = start(tmp_path, cache)
    assert "compiling the kernels of banditron" in cold and "once per install" in cold, cold[-3000:]
    assert line_of(cold, "ready: 1 model(s) served") > line_of(cold, "Uvicorn running on")
    assert line_of(cold, "ready: 1 model(s) served") > line_of(cold, "kernels of banditron ready in")
    warm = start(tmp_path, cache)  # the same cache: loaded, not compiled
    assert "loading the kernels of banditron" in warm, warm[-3000:]
    assert "compiling" not in warm and "once per install" not in warm, warm[-3000:]
    assert line_of(warm, "ready: 1 model(s) served") > line_of(warm, "Uvicorn running on")
