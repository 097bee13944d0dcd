"""Configuration and small leaks (issue 51, item 7): a default model that does not exist, the
evaluation copies a killed server leaves, model names in a 404 to a plain API key, and a move to a
group with no live replica."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from lab.sim.datasets import load_dataset
from service.evaluations import remove_stale, scratch_dir
from service.placement import rendezvous
from tests.conftest import free_port
from tests.service.api.conftest import app_client, make_app
from tests.service.api.test_openapi_contract import ADMIN_KEY, API_KEY, GROUPS, make_placement_app
from tests.service.api.test_stalls import CAR, wait_ready

SPEC = {"learner": "banditron", "n_features": 3, "n_labels": 2}


@pytest.mark.anyio
async def test_a_default_model_that_does_not_exist_keeps_the_server_not_ready_naming_it() -> None:
    """Not a refusal to start: the model may be created through this server, and then it is ready."""
    async with app_client(make_app(default_model="nope")) as client:
        r = await client.get("/readyz")
        assert r.status_code == 503, r.text
        assert "'nope'" in r.text and "CLICKBOOST_DEFAULT_MODEL" in r.text, r.text
        assert (await client.put("/models/nope", json=SPEC)).status_code == 201
        r = await client.get("/readyz")
        assert r.status_code == 200, r.text
        assert (await client.post("/predict", json={"features": [1.0, 0.0, 2.0]})).status_code == 200


@pytest.mark.anyio
async def test_a_404_names_the_models_to_the_admin_key_only() -> None:
    async with app_client(make_app(api_keys=API_KEY, admin_key=ADMIN_KEY)) as client:
        for name in ("secret-one", "secret-two"):
            r = await client.put(f"/models/{name}", json=SPEC, headers={"X-API-Key": ADMIN_KEY})
            assert r.status_code == 201, r.text
        for body in ({"model": "nope", "features": [1.0, 0.0, 2.0]}, {"features": [1.0, 0.0, 2.0]}):
            plain = await client.post("/predict", json=body, headers={"X-API-Key": API_KEY})
            admin = await client.post("/predict", json=body, headers={"X-API-Key": ADMIN_KEY})
            assert plain.status_code == admin.status_code == 404, (plain.text, admin.text)
            assert "secret" not in plain.text, plain.text
            assert "secret-one" in admin.text and "secret-two" in admin.text, admin.text
    async with app_client(make_app()) as client:  # no key configured: a development server
        assert (await client.put("/models/secret-one", json=SPEC)).status_code == 201
        r = await client.post("/predict", json={"model": "nope", "features": [1.0, 0.0, 2.0]})
        assert r.status_code == 404 and "secret-one" in r.text, r.text


@pytest.mark.anyio
async def test_a_move_to_a_group_without_a_live_replica_is_refused_at_once(redis_url: str) -> None:
    """Only group a runs: moving a model of a's to b answers 409 within a second (it waited for
    the 30 s catch-up timeout), naming the group, and the placement is unchanged."""
    name = next(f"m{i}" for i in range(100) if rendezvous(f"m{i}", list(GROUPS), 1) == ["a"])
    admin = {"X-API-Key": ADMIN_KEY}
    async with app_client(make_placement_app(redis_url, "a", f"test-{uuid.uuid4().hex}:")) as client:
        assert (await client.put(f"/models/{name}", json=SPEC, headers=admin)).status_code == 201
        t = time.perf_counter()
        r = await client.post(f"/models/{name}/placement", json={"groups": ["b"]}, headers=admin)
        took = time.perf_counter() - t
        print(f"\nmove to a group without a live replica: {r.status_code} after {took:.2f} s")
        assert r.status_code == 409 and "group b has no live replica" in r.text, r.text
        assert took < 1.0
        after = (await client.get(f"/models/{name}/placement", headers=admin)).json()
        assert list(after["groups"]) == ["a"] and after["joining"] == []


def test_stale_copies_are_removed_and_a_running_servers_kept() -> None:
    """Only the copies of processes that no longer run go (another server may share the directory)."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    pid = int(dead.stdout)
    stale = scratch_dir() / f"{pid}-test{uuid.uuid4().hex[:8]}.jsonl"
    live = scratch_dir() / f"{os.getpid()}-test{uuid.uuid4().hex[:8]}.jsonl"
    other = scratch_dir() / "notes.txt"  # not a copy: left alone
    for path in (stale, live, other):
        path.write_text("{}\n")
    try:
        removed = remove_stale()
        assert stale in removed and not stale.exists()
        assert live.exists() and other.exists()
    finally:
        for path in (stale, live, other):
            path.unlink(missing_ok=True)


def _serve(port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "service", "serve", "--port", str(port), "--log-level", "warning"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.slow
def test_the_copy_of_a_log_a_killed_server_leaves_is_removed_at_the_next_start(tmp_path: Path) -> None:
    """A server killed with SIGKILL while an evaluation runs leaves its copy of the log; the next
    server on the same temporary directory removes it at start-up."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_")}
    env |= {"CLICKBOOST_STORE": "sqlite", "CLICKBOOST_DATA_DIR": str(tmp_path / "data"), "TMPDIR": str(tmp)}
    copies = tmp / f"clickboost-evaluations-{os.getuid()}"
    port = free_port()
    server = _serve(port, env)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            wait_ready(client, server)
            assert client.put("/models/car", json=CAR).status_code == 201
            car = load_dataset("car")
            for i in range(300):
                d = client.post("/predict", json={"model": "car", "features": car.X[i].tolist()}).json()
                client.post("/feedback", json={"decision_id": d["decision_id"], "click": i % 2 == 0})
            body = {"policies": ["banditboost", "adabandit"], "runs": 50}  # seconds of work
            assert client.post("/models/car/evaluations", json=body).status_code == 202
            deadline = time.monotonic() + 30
            while not (copies.is_dir() and any(copies.iterdir())):
                assert time.monotonic() < deadline, "no copy of the log was written"
                time.sleep(0.02)
            time.sleep(0.5)  # the copy is complete, the worker computing
        server.send_signal(signal.SIGKILL)
        server.wait()
        left = sorted(p.name for p in copies.iterdir())
        assert left and all(name.startswith(f"{server.pid}-") for name in left), left
        size = sum(p.stat().st_size for p in copies.iterdir())
        port = free_port()
        server = _serve(port, env)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            wait_ready(client, server)
        after = sorted(p.name for p in copies.iterdir())
    finally:
        server.kill()
        server.wait()
    print(f"\nkill -9 during an evaluation: {len(left)} copy ({size / 1e3:.0f} kB) left; restarted: {after}")
    assert after == []
