"""``POST /models/{name}/evaluations`` (issue 22, item 3): a job over the decision log, in a worker
process, polled with GET; bad policies are 422 before anything starts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from lab.sim.datasets import load_dataset
from tests.service.api.conftest import app_client, make_app

pytestmark = pytest.mark.anyio
ADMIN = {"X-API-Key": "admin"}


async def test_an_evaluation_job_estimates_policies_on_the_logged_traffic() -> None:
    car = load_dataset("car")
    # Seeded decision ids: the logged traffic, and so the check of the uniform policy's interval
    # below, is the same every run (with random ids a 95 % interval misses 0.25 one run in twenty).
    settings = {"api_keys": "k", "admin_key": "admin", "decision_id_seed": 1}
    async with app_client(make_app(**settings)) as client:
        spec = {
            "learner": "banditron",
            "params": {"gamma": 0.3},
            "n_features": car.d,
            "n_labels": car.n_labels,
        }
        assert (await client.put("/models/car", json=spec, headers=ADMIN)).status_code == 201
        rng = np.random.default_rng(0)
        for i in rng.integers(car.n, size=400).tolist():
            p = await client.post(
                "/predict", json={"model": "car", "features": car.X[i].tolist()}, headers=ADMIN
            )
            d = p.json()
            click = d["label_index"] == int(car.y[i])
            f = await client.post(
                "/feedback", json={"decision_id": d["decision_id"], "click": click}, headers=ADMIN
            )
            assert f.status_code == 200
        body = {"policies": ["uniform", "constant:0", "cova", "model:car"], "runs": 2}
        r = await client.post("/models/car/evaluations", json=body, headers=ADMIN)
        assert r.status_code == 202, r.text
        job = r.json()
        assert job["state"] == "running" and job["policies"] == body["policies"]
        for _ in range(600):
            job = (await client.get(f"/models/car/evaluations/{job['id']}", headers=ADMIN)).json()
            if job["state"] != "running":
                break
            await asyncio.sleep(0.1)
        assert job["state"] == "done", job
        assert job["events"] == 400
        res = job["results"]
        assert set(res) == {"logged", "uniform", "constant:0", "cova", "model:car"}
        # the model's current state, frozen: a stationary policy, estimated like the others
        assert set(res["model:car"]) == {"ips", "snips", "dr"}
        assert set(res["uniform"]) == {"ips", "snips", "dr"} and set(res["cova"]) == {"replay"}
        u = res["uniform"]["dr"]
        # uniform over 4 labels clicks a quarter of the time: within 3.3 standard errors (99.9 %;
        # the answer's interval is the 95 % one, +-1.96 of them)
        se = (u["high"] - u["low"]) / (2 * 1.96)
        assert abs(u["value"] - 0.25) <= 3.3 * se, u
        assert 0 < res["cova"]["replay"]["n"] < 400
        # every estimate says how many events it effectively rests on, and says so when too few
        assert res["logged"]["ips"]["ess"] == pytest.approx(400) and res["logged"]["ips"]["warning"] is None
        cova = res["cova"]["replay"]
        assert cova["ess"] < 100 and "cannot tell" in cova["warning"] and cova["runs"] == 2
        assert all(0 <= e["low"] <= e["high"] <= 1 for by in res.values() for e in by.values())


async def test_bad_requests_are_refused() -> None:
    async with app_client(make_app(demo=True)) as client:
        other = {"learner": "banditron", "n_features": 3, "n_labels": 3}
        assert (await client.put("/models/other", json=other)).status_code == 201
        for policies in (
            ["nosuchlearner"],
            ["constant:7"],
            ["constant:x"],  # a parse error is the request's fault too, not a 500
            ["banditron:gamma"],
            ["banditron:gamma=2"],
            [],
            ["model:other"],
        ):
            r = await client.post("/models/demo/evaluations", json={"policies": policies})
            assert r.status_code == 422, (policies, r.text)
        assert (
            await client.post("/models/nope/evaluations", json={"policies": ["uniform"]})
        ).status_code == 404
        r = await client.post("/models/demo/evaluations", json={"policies": ["model:nope"]})
        assert r.status_code == 404
        r = await client.get("/models/demo/evaluations/0123abc")
        assert r.status_code == 404 and "this replica" in r.json()["detail"]


def test_the_worker_exits_when_its_server_is_killed(tmp_path: Path) -> None:
    """A server killed (kill -9) during an evaluation leaves no worker behind using a core: the
    worker sees it was re-parented and exits within seconds (real processes)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "server.py"
    script.write_text(
        "import time\n"
        "from service.evaluations import Evaluations\n"
        "if __name__ == '__main__':\n"  # the spawned worker imports this file as __mp_main__
        "    pool = Evaluations('r')._worker()\n"
        "    job = pool.submit(time.sleep, 120)\n"
        "    time.sleep(2.0)\n"
        "    assert job.running(), 'the job is not running'\n"
        "    print(*pool._processes, flush=True)\n"  # the worker's pid
        "    time.sleep(120)\n"
    )
    server = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        worker = int(server.stdout.readline().split()[0])
        os.kill(worker, 0)  # running
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=10)
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline:
            try:
                os.kill(worker, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            os.kill(worker, signal.SIGKILL)
            raise AssertionError(f"worker {worker} still running 15 s after its server was killed")
    finally:
        if server.poll() is None:
            server.kill()
