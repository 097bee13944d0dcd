"""A first start with an empty kernel cache: the server answers at once and says what it is doing
(issue 37). The default learner's kernels compile in the background; /readyz turns 200 after."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from service.config import DEFAULT_LEARNER
from tests.conftest import free_port

DEFAULT = DEFAULT_LEARNER[0]

# a bound in seconds on a cold start: not beside another xdist worker's load
pytestmark = pytest.mark.serial


@pytest.mark.slow
def test_healthz_at_once_readyz_says_it_compiles_then_ready(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_")}
    env |= {"NUMBA_CACHE_DIR": str(tmp_path / "numba"), "CLICKBOOST_STORE": "memory"}  # empty: a cold start
    cmd = [sys.executable, "-m", "service", "serve", "--demo", "--port", str(port), "--log-level", "info"]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        healthz = None
        while healthz is None and time.monotonic() - started < 30:
            try:
                healthz = httpx.get(f"{url}/healthz", timeout=1)
            except httpx.TransportError:
                time.sleep(0.05)
        assert healthz is not None and healthz.status_code == 200
        first = time.monotonic() - started
        ready = httpx.get(f"{url}/readyz", timeout=5)
        assert ready.status_code == 503, ready.text
        assert f"compiling the kernels of {DEFAULT}" in ready.json()["detail"], ready.text
        predict = httpx.post(f"{url}/predict", json={"features": {"country": "fr"}}, timeout=5)
        assert predict.status_code == 503 and predict.headers["Retry-After"] == "1", predict.text
        assert "not ready" in predict.json()["detail"]
        while (ready := httpx.get(f"{url}/readyz", timeout=5)).status_code != 200:
            assert time.monotonic() - started < 300, ready.text
            time.sleep(0.2)
        ready_after = time.monotonic() - started
        predict = httpx.post(f"{url}/predict", json={"features": {"country": "fr"}}, timeout=5)
        assert predict.status_code == 200, predict.text
        print(f"cold start: /healthz 200 after {first:.1f} s, /readyz 200 after {ready_after:.1f} s")
        # Answering at once is relative to the compile it does not wait for: the absolute figures
        # are scripts/first_start.py's (a timed bound here failed on a loaded machine).
        assert first < ready_after / 2
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert f"compiling the kernels of {DEFAULT}" in err and f"kernels of {DEFAULT} ready in" in err, err[
        -2000:
    ]
