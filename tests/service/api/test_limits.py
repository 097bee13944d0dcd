"""Bounded memory and isolated failures (issue 18), in-process on the memory store.

- A model whose state would exceed the per-model or the process budget is refused at creation
  with 422 naming its size and the budget, before anything is allocated.
- Listing models never copies a model's state (the checksum is hashed in place, once per version).
- A model whose next event cannot be applied is marked failed (GET /models/{name}, metrics),
  retried with back-off, and never holds up the other models.
"""

from __future__ import annotations

import asyncio
import time
import tracemalloc

import pytest

from service.store import Event
from tests.service.api.conftest import app_client, make_app

SMALL = {"learner": "banditron", "n_features": 4, "n_labels": 3}


@pytest.mark.anyio
async def test_a_75_gib_model_is_refused_before_allocating() -> None:
    async with app_client(make_app(store="memory")) as client:
        spec = {"learner": "banditron", "n_features": 1_000_000, "n_labels": 10_000}
        tracemalloc.start()
        try:
            r = await client.put("/models/huge", json=spec)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert r.status_code == 422
        detail = r.json()["detail"]
        assert "74.5 GiB" in detail and "512.0 MiB" in detail and "CLICKBOOST_MAX_MODEL_BYTES" in detail
        assert peak < 20 * 2**20  # nothing of the model's size was allocated
        assert (await client.get("/models/huge")).status_code == 404
        assert (await client.get("/models")).status_code == 200


@pytest.mark.anyio
async def test_the_process_budget_counts_every_model() -> None:
    # each banditron 4 x 10^5 floats = 3.2 MB; the process holds at most 8 MB
    spec = {"learner": "banditron", "n_features": 100_000, "n_labels": 4}
    async with app_client(make_app(store="memory", max_total_model_bytes=8_000_000)) as client:
        assert (await client.put("/models/a", json=spec)).status_code == 201
        assert (await client.put("/models/b", json=spec)).status_code == 201
        r = await client.put("/models/c", json=spec)
        assert r.status_code == 422 and "CLICKBOOST_MAX_TOTAL_MODEL_BYTES" in r.json()["detail"]
        assert (await client.delete("/models/a")).status_code == 204
        assert (await client.put("/models/c", json=spec)).status_code == 201


@pytest.mark.anyio
async def test_listing_models_copies_no_state() -> None:
    spec = {"learner": "banditron", "n_features": 500_000, "n_labels": 10}  # 40 MB of state
    async with app_client(make_app(store="memory")) as client:
        assert (await client.put("/models/big", json=spec)).status_code == 201
        info = (await client.get("/models/big")).json()
        assert info["state_bytes"] == 40_000_048
        tracemalloc.start()
        try:
            for _ in range(3):
                r = await client.get("/models")
                assert r.status_code == 200 and r.json()["models"][0]["checksum"] == info["checksum"]
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 4 * 2**20, peak


async def _wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


@pytest.mark.anyio
async def test_a_model_that_cannot_apply_its_log_fails_alone() -> None:
    app = make_app(store="memory")
    async with app_client(app) as client:
        for name in ("bad", "good"):
            assert (await client.put(f"/models/{name}", json=SMALL)).status_code == 201
        runtime = app.state.runtime
        # a corrupted log entry, as a store could hold: an import whose state is not a state
        await runtime.store.append("bad", Event(0, "import", at=time.time(), state=b"not a state"))
        runtime.shared.wake.set()
        await _wait_for(lambda: runtime.models["bad"].failure is not None)
        info = (await client.get("/models/bad")).json()
        assert info["version"] == 0 and "event 1 cannot be applied" in info["failure"]
        assert "StateFormatError" in info["failure"]
        # the other model learns on, applied by the same tail loop (no ?wait: nothing else applies
        # it); the failed one still serves decisions from its last good state
        for i in range(20):
            d = (await client.post("/predict", json={"model": "good", "features": [1, 0, i, 0]})).json()
            r = await client.post("/feedback", json={"decision_id": d["decision_id"], "click": True})
            assert r.status_code == 200 and r.json()["model_version"] == i + 1
        await _wait_for(lambda: runtime.models["good"].position == 20)
        assert (
            await client.post("/predict", json={"model": "bad", "features": [1, 0, 0, 0]})
        ).status_code == 200
        metrics = (await client.get("/metrics")).text
        assert 'clickboost_model_failed{model="bad"} 1.0' in metrics
        assert 'clickboost_model_failed{model="good"} 0.0' in metrics
        # retried with back-off (0.1 s doubling), not in a tight loop
        await asyncio.sleep(1.0)
        assert 2 <= runtime.models["bad"].failures <= 5
        # deleting the model ends it; a new model of that name starts clean
        assert (await client.delete("/models/bad")).status_code == 204
        assert (await client.put("/models/bad", json=SMALL)).status_code == 201
        assert (await client.get("/models/bad")).json()["failure"] is None


def _vm(pid: int) -> dict[str, int]:
    """VmSize and VmRSS of ``pid`` in bytes (a calloc'd array shows in VmSize even untouched)."""
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status").read().splitlines())  # noqa: SIM115
    return {k: int(fields[k].split()[0]) * 1024 for k in ("VmSize", "VmRSS")}


def test_a_live_server_refuses_a_75_gib_model_and_its_memory_does_not_move() -> None:
    import os
    import subprocess
    import sys

    import httpx

    from tests.conftest import free_port

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", "--memory", "--port", str(port), "--log-level", "warning"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "server did not start"
            time.sleep(0.05)
        assert httpx.put(f"{url}/models/small", json=SMALL).status_code == 201
        spec = {"learner": "banditron", "n_features": 1_000_000, "n_labels": 10_000}
        # one refused request first: the server's first use of its thread pool reserves thread
        # stacks and malloc arenas (virtual memory), whatever the request
        assert httpx.put(f"{url}/models/huge", json=spec).status_code == 422
        before = _vm(proc.pid)
        for _ in range(3):
            r = httpx.put(f"{url}/models/huge", json=spec)
            assert r.status_code == 422 and "74.5 GiB" in r.json()["detail"]
            assert httpx.get(f"{url}/models").status_code == 200
        after = _vm(proc.pid)
        moved = {k: after[k] - before[k] for k in after}
        print(f"75 GiB spec refused 3 times: VmSize moved {moved['VmSize']} B, VmRSS {moved['VmRSS']} B")
        assert moved["VmSize"] < 16 * 2**20 and moved["VmRSS"] < 16 * 2**20, moved
    finally:
        proc.terminate()
        proc.wait(timeout=10)
