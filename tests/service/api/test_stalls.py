"""Nothing one request can do stalls a replica (issue 42): fault tests against real uvicorn servers on
loopback, each printing what it measured.

The SQLite store's 100,000 logged decisions are made fast: a model created through the API, 2,000
decisions (a third with feedback) stored through the store's own methods in one transaction, then
copied 50 times in SQL with later times and their own record bytes, as the store keeps them.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import resource
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import numpy as np
import pytest
from prometheus_client import REGISTRY, generate_latest

from lab.sim.datasets import load_dataset
from service.config import ModelSpec, Settings
from service.learners import learners, make_learner
from service.runtime import BudgetError, check_budget, check_event_budget
from service.sampling import decision_rng
from service.store import SQLITE_FILE, DecisionRecord, SQLiteStore
from tests.conftest import free_port
from tests.service.api.conftest import app_client, make_app, uvicorn_server

# wall-clock bounds (p99s, an event loop never 100 ms late): not beside another xdist worker's load
pytestmark = pytest.mark.serial

LOGGED = 100_000
STORED = 2_000  # through the store's API; the rest are copies of these
CAR = {"learner": "banditron", "params": {"gamma": 0.3}, "n_features": 21, "n_labels": 4}


def p99(latencies: list[float]) -> float:
    """The 99th percentile, in milliseconds."""
    return 1000 * float(np.percentile(latencies, 99))


async def _build_log(data: Path) -> None:
    async with app_client(make_app(store="sqlite", data_dir=data)) as client:
        assert (await client.put("/models/car", json=CAR)).status_code == 201
    car = load_dataset("car")
    learner = make_learner("banditron", car.d, car.n_labels, CAR["params"])
    store = SQLiteStore(data / SQLITE_FILE)
    db = store._conn()
    start = time.time() - 3600.0
    db.execute("BEGIN")
    # One transaction for all: every store method's own transaction is this one.
    with mock.patch.object(store, "_write", lambda level: contextlib.nullcontext(db)):
        for i in range(STORED):
            x = car.X[i % car.n]
            decision_id = f"d{i:06d}"
            d = learner.decide(x, decision_rng(decision_id))
            at = start + i * 0.01
            record = DecisionRecord(decision_id, "car", x, d.to_state(), 0, at, at + 1e6, True)
            await store.put_decision(record)
            if i % 3 == 0:
                await store.claim_and_append(decision_id, d.label == int(car.y[i % car.n]), at)
    for copy in range(1, LOGGED // STORED):
        db.execute(
            "INSERT INTO blobs (id, x, decision, logged) SELECT id + ?, x, decision, 1 FROM blobs "
            "WHERE id <= ?",
            (copy * STORED, STORED),
        )
        db.execute(
            "INSERT INTO decision_log (model, created_at, blob, id, model_version, outcome, reward, "
            "outcome_at) SELECT model, created_at + ?, blob + ?, id || ?, model_version, outcome, reward, "
            "outcome_at FROM decision_log WHERE blob <= ?",
            (copy * STORED * 0.01, copy * STORED, f"-{copy}", STORED),
        )
    db.execute("UPDATE models SET logged = ?", (LOGGED,))
    db.execute("COMMIT")
    await store.close()


@pytest.fixture(scope="module")
def car_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory whose model ``car`` has ``LOGGED`` logged decisions (copy it before use)."""
    data = tmp_path_factory.mktemp("car-log")
    asyncio.run(_build_log(data))
    with sqlite3.connect(data / SQLITE_FILE) as db:
        assert db.execute("SELECT count(*) FROM decision_log").fetchone()[0] == LOGGED
    return data


@contextlib.contextmanager
def sqlite_server(template: Path, tmp_path: Path, **env: str) -> Iterator[str]:
    data = tmp_path / "data"
    shutil.copytree(template, data)
    full = {
        "CLICKBOOST_STORE": "sqlite",
        "CLICKBOOST_DATA_DIR": str(data),
        "CLICKBOOST_LOG_RETENTION": "7d,1000000",  # the predicts below trim nothing
        **env,
    }
    with uvicorn_server(full) as url:
        yield url


def predicts(url: str, seconds: float, stop: threading.Event | None = None) -> list[float]:
    """Latencies of back-to-back predicts from one fresh client for ``seconds`` (or until ``stop``)."""
    car = load_dataset("car")
    out = []
    with httpx.Client(base_url=url, timeout=30) as client:
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end and not (stop and stop.is_set()):
            t = time.perf_counter()
            r = client.post("/predict", json={"model": "car", "features": car.X[i % car.n].tolist()})
            out.append(time.perf_counter() - t)
            assert r.status_code == 200, r.text
            i += 1
    return out


def exports(url: str, n: int, tmp_path: Path) -> list[tuple[subprocess.Popen[bytes], Path]]:
    """``n`` exports of car's log, each read by its own curl process (no client in this process)."""
    started = []
    for i in range(n):
        out = tmp_path / f"export-{n}-{i}.jsonl"
        started.append((subprocess.Popen(["curl", "-sf", "-o", str(out), f"{url}/models/car/log"]), out))
    return started


@pytest.mark.slow
def test_exports_of_a_large_sqlite_log_do_not_hold_predicts(car_log: Path, tmp_path: Path) -> None:
    with sqlite_server(car_log, tmp_path) as url:
        predicts(url, 0.5)  # warm
        before = p99(predicts(url, 3.0))
        during = {}
        for n in (1, 4):
            running = exports(url, n, tmp_path)
            time.sleep(0.3)  # the exports are streaming
            during[n] = p99(predicts(url, 3.0))
            for proc, out in running:
                assert proc.poll() is None, "an export ended before the measurement did"
                assert out.stat().st_size > 0, "an export sent nothing"
                proc.kill()
                proc.wait()
        after = p99(predicts(url, 3.0))
    print(
        f"\npredict p99 with {LOGGED:,} logged decisions (SQLite): idle {before:.1f} ms (after the exports "
        f"{after:.1f}), during one export {during[1]:.1f} ms, during four {during[4]:.1f} ms"
    )
    idle = max(before, after)  # the machine's own noise, measured on both sides
    # Held would be seconds; a page of the export costs a predict at most a read slice or two
    # (milliseconds), which a fast idle p99 (1.4 ms with the group commit) makes more than 3x.
    for n, ms in during.items():
        assert ms <= max(3 * idle, idle + 5.0) and ms < 100, (n, ms, idle)


def _eval_files(tmp: Path) -> list[int]:
    return [p.stat().st_size for p in tmp.glob("clickboost-evaluations-*/*")]


@pytest.mark.slow
def test_queued_evaluations_hold_one_copy_of_the_log_and_can_be_cancelled(
    car_log: Path, tmp_path: Path
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    with sqlite_server(car_log, tmp_path, TMPDIR=str(tmp)) as url, httpx.Client(base_url=url) as client:
        t = time.perf_counter()
        jobs = []
        for _ in range(10):
            r = client.post("/models/car/evaluations", json={"policies": ["uniform"], "runs": 2})
            assert r.status_code == 202, r.text
            jobs.append(r.json())
        posted = time.perf_counter() - t
        assert [j["state"] for j in jobs] == ["running"] + ["queued"] * 9
        files, largest = 0, 0
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            sizes = _eval_files(tmp)
            files, largest = max(files, len(sizes)), max(largest, sum(sizes))
            time.sleep(0.05)
        # the cap: MAX_JOBS (16) queued or running
        more = [client.post("/models/car/evaluations", json={"policies": ["uniform"]}) for _ in range(7)]
        assert [r.status_code for r in more] == [202] * 6 + [429]
        assert "Retry-After" in more[-1].headers
        jobs += [r.json() for r in more[:6]]
        for job in jobs:
            assert client.delete(f"/models/car/evaluations/{job['id']}").status_code == 204
            assert client.get(f"/models/car/evaluations/{job['id']}").status_code == 404
        time.sleep(0.5)
        left = _eval_files(tmp)
    print(
        f"\n10 evaluation jobs posted in {posted:.2f} s; temporary files at once: at most {files}, "
        f"{largest / 1e6:.1f} MB; after cancelling all: {len(left)}"
    )
    assert files == 1 and left == []


def wait_ready(client: httpx.Client, server: subprocess.Popen[bytes]) -> None:
    """Until the server ``client`` talks to answers ``/readyz`` with 200 (at most 60 s)."""
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(httpx.TransportError):
            if client.get("/readyz").status_code == 200:
                return
        assert time.monotonic() < deadline and server.poll() is None, "server did not start"
        time.sleep(0.05)


def _children(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.add(int(stat.parent.name))
    return out


def _alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (a zombie has exited)."""
    out = set()
    for pid in pids:
        with contextlib.suppress(OSError, IndexError):
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                out.add(pid)
    return out


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("how", ["sigterm-at-once", "sigterm-later", "kill-9"])
def test_no_evaluation_worker_outlives_its_server(how: str) -> None:
    """An evaluation posted, then the server stopped at once (its worker still starting), later (the
    worker computing) or killed: within 5 s of the server's end no process it started is left."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_")}
    env |= {"CLICKBOOST_STORE": "memory"}
    cmd = [sys.executable, "-m", "service", "serve", "--port", str(port), "--log-level", "warning"]
    server = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    seen: set[int] = set()
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            wait_ready(client, server)
            assert client.put("/models/car", json=CAR).status_code == 201
            car = load_dataset("car")
            for i in range(200):
                d = client.post("/predict", json={"model": "car", "features": car.X[i].tolist()}).json()
                client.post("/feedback", json={"decision_id": d["decision_id"], "click": i % 2 == 0})
            body = {"policies": ["banditboost", "adabandit"], "runs": 50}  # seconds of work
            assert client.post("/models/car/evaluations", json=body).status_code == 202
            if how != "sigterm-at-once":  # until the worker runs
                deadline = time.monotonic() + 60
                while not (seen := seen | _children(server.pid)) - {server.pid}:
                    assert time.monotonic() < deadline, "no worker started"
                    time.sleep(0.05)
                time.sleep(1.0)
        seen |= _children(server.pid)
        server.send_signal(signal.SIGKILL if how == "kill-9" else signal.SIGTERM)
        while server.poll() is None:  # children started while it stops
            seen |= _children(server.pid)
            time.sleep(0.01)
        ended = time.monotonic()
        while _alive(seen) and time.monotonic() - ended < 5.0:
            time.sleep(0.05)
        left = _alive(seen)
        print(f"\n{how}: {len(seen)} processes started by the server, {len(left)} left 5 s after it ended")
        assert not left, f"still running: {left}"
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        for pid in _alive(seen):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _admitted(name: str, k: int, settings: Settings) -> bool:
    spec = ModelSpec(learner=name, n_features=21, n_labels=k)
    try:
        check_budget("m", spec, settings)
        check_event_budget("m", spec, settings)
    except BudgetError:
        return False
    return True


BANDITS = sorted(n for n, c in learners.items() if not c.full_information and not c.actions)


@pytest.mark.slow
@pytest.mark.parametrize("name", BANDITS)
def test_every_learner_at_the_largest_label_count_its_budget_admits_learns_in_under_100_ms(name: str) -> None:
    """d = 21 (car's width), default parameters and budgets: the largest K admitted (bisected up to
    10,000, the most labels a spec may have); its first and later events each take < 100 ms."""
    settings = Settings(store="memory")
    low, high = 2, 10_000
    assert _admitted(name, low, settings)
    if _admitted(name, high, settings):
        low = high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if _admitted(name, mid, settings) else (low, mid)
    k = low
    learner = make_learner(name, 21, k, {})
    t = time.perf_counter()
    learner.prepare()  # in a thread, off the event loop, before the model serves
    prepared = time.perf_counter() - t
    rng = np.random.default_rng(0)
    cpu, wall = [], []  # the thread's CPU time is the loop's; wall time adds the machine's other load
    for i in range(6):
        x = (rng.random(21) < 0.4) * rng.integers(1, 3, 21).astype(float)
        t, c = time.perf_counter(), time.thread_time()
        learner.learn(x, learner.decide(x, decision_rng(str(i))), i % 2 == 0)
        cpu.append(1000 * (time.thread_time() - c))
        wall.append(1000 * (time.perf_counter() - t))
    print(
        f"\n{name}: largest K admitted {k:,}; first event {cpu[0]:.1f} ms of CPU ({wall[0]:.1f} wall), "
        f"later at most {max(cpu[1:]):.1f} ({max(wall[1:]):.1f}); tables built off the loop in "
        f"{prepared:.2f} s"
    )
    assert max(cpu) < 100


@pytest.mark.anyio
async def test_a_spec_over_the_event_budget_is_refused_naming_the_number() -> None:
    async with app_client(make_app()) as client:
        spec = {"learner": "adabandit", "n_features": 21, "n_labels": 2000}
        r = await client.put("/models/big", json=spec)
        assert r.status_code == 422
        assert "steps per event" in r.text and "CLICKBOOST_MAX_EVENT_STEPS" in r.text, r.text
        spec = {"learner": "banditbbm", "n_features": 21, "n_labels": 1000}
        r = await client.put("/models/big", json=spec)
        steps = learners.get("banditbbm").event_steps(21, 1000)
        assert r.status_code == 422 and f"about {steps:,} steps" in r.text, r.text


@pytest.mark.anyio
async def test_an_event_that_fails_here_is_never_answered_500(monkeypatch: pytest.MonkeyPatch) -> None:
    """feedback?wait=true and reset on a model whose learn raises: stored, answered 200, and the model
    reports its failure (as the background loop isolates it)."""
    async with app_client(make_app(demo=True)) as client:
        runtime = client._transport.app.state.runtime  # type: ignore[attr-defined]
        failing = mock.Mock(side_effect=RuntimeError("boom"))
        monkeypatch.setattr(runtime.models["demo"].learner, "learn", failing)
        d = (await client.post("/predict", json={"features": {"a": 1.0}})).json()
        r = await client.post("/feedback?wait=true", json={"decision_id": d["decision_id"], "click": True})
        assert r.status_code == 200, r.text
        assert (await client.post("/models/demo/reset")).status_code == 200
        info = (await client.get("/models/demo")).json()
        assert info["counts"]["clicks"] == 1


def _rss() -> int:
    """This process's resident memory, in bytes (Linux)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _http_series() -> int:
    lines = generate_latest(REGISTRY).decode().splitlines()
    return sum(line.startswith("clickboost_http_request_duration_seconds_count") for line in lines)


@pytest.mark.anyio
@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc")
async def test_unknown_paths_add_no_metric_series() -> None:
    """20,000 requests for distinct unknown paths (half under the dashboard's static mount, and
    unknown methods): the latency histogram keeps its series, and memory does not grow with them."""
    app = make_app(demo=True)

    async def call(method: str, path: str) -> int:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": [(b"host", b"test")],
            "client": ("127.0.0.1", 1),
            "server": ("test", 80),
        }
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app(scope, receive, send)
        return int(sent[0]["status"])

    async with app_client(app):
        for i in range(2):  # every label this test produces, once
            assert await call("GET", f"/dashboard/static/warm{i}") == 404
            assert await call("GET", f"/no/such/warm{i}") == 404
            await call(f"WARM{i}", f"/no/such/warm{i}")
        gc.collect()
        series, rss = _http_series(), _rss()
        for i in range(10_000):
            assert await call("GET", f"/dashboard/static/{i}.js") == 404
            assert await call("GET" if i % 2 else f"M{i}", f"/no/such/path/{i}") in (404, 405)
        gc.collect()
        grown, after = _rss() - rss, _http_series()
        t = time.perf_counter()
        metrics = generate_latest(REGISTRY)
        rendered = time.perf_counter() - t
    print(
        f"\n20,000 unknown paths: latency series {series} -> {after}, memory +{grown / 2**20:.1f} MiB, "
        f"metrics {len(metrics) / 1000:.0f} kB rendered in {1000 * rendered:.1f} ms"
    )
    assert after == series
    assert grown < 5 * 2**20


@pytest.mark.anyio
async def test_evaluation_times_and_policies_are_validated() -> None:
    """Times that are not finite numbers and policies that do not parse: 422, never a 500."""
    async with app_client(make_app(demo=True)) as client:
        for body in (
            b'{"policies": ["uniform"], "since": NaN}',
            b'{"policies": ["uniform"], "until": Infinity}',
            b'{"policies": ["uniform"], "since": -Infinity}',
            b'{"policies": ["uniform"], "until": 1e400}',
        ):
            r = await client.post(
                "/models/demo/evaluations", content=body, headers={"content-type": "application/json"}
            )
            assert r.status_code == 422, (body, r.text)
        for policy in ("cova:C", "constant:abc", "constant:1.5", "constant:", "banditron:gamma=0.1,x"):
            r = await client.post("/models/demo/evaluations", json={"policies": [policy]})
            assert r.status_code == 422 and policy in r.text, (policy, r.text)


def _can_mount_tmpfs() -> bool:
    """A private tmpfs can be mounted (a user and mount namespace: no root needed where allowed)."""
    if shutil.which("unshare") is None:
        return False
    probe = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", "mount -t tmpfs tmpfs /mnt"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _can_mount_tmpfs(), reason="no private tmpfs (unshare --user --mount)")
def test_readyz_answers_503_while_the_disk_is_full(tmp_path: Path) -> None:
    """The data directory on a 6 MiB tmpfs of its own (with a 2 MiB file to free later), filled by
    8 kB decisions: ``/readyz`` answers 503 within a second of the first failed feedback (or
    before it); once the file is deleted ``/readyz`` is 200 again, and every feedback answered 200
    was stored (a second one is 409)."""
    data = tmp_path / "data"
    data.mkdir()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_")}
    env |= {"CLICKBOOST_STORE": "sqlite", "CLICKBOOST_DATA_DIR": str(data)}
    serve = f"{sys.executable} -m service serve --port {port} --log-level error"
    script = f"mount -t tmpfs -o size=6m tmpfs {data} && head -c 2M /dev/zero > {data}/filler && exec {serve}"
    cmd = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script]
    server = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    acked: list[str] = []
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            wait_ready(client, server)
            dense = {"learner": "banditron", "n_features": 1000, "n_labels": 3}
            assert client.put("/models/m", json=dense).status_code == 201
            features = np.random.default_rng(0).random(1000).tolist()  # 8 kB per decision
            unready_at = None  # feedbacks stored when /readyz first said 503
            for _ in range(2000):
                d = client.post("/predict", json={"model": "m", "features": features}).json()
                r = client.post("/feedback", json={"decision_id": d["decision_id"], "click": True})
                if unready_at is None and client.get("/readyz").status_code == 503:
                    unready_at = len(acked)
                if r.status_code == 503:
                    full = time.monotonic()
                    break
                assert r.status_code == 200, r.text
                acked.append(d["decision_id"])
            else:
                pytest.fail("the disk never filled")
            while (ready := client.get("/readyz")).status_code != 503 and time.monotonic() - full < 5:
                time.sleep(0.01)
            noticed = time.monotonic() - full
            Path(f"/proc/{server.pid}/root{data}/filler").unlink()  # room again
            freed = time.monotonic()
            while (back := client.get("/readyz")).status_code != 200 and time.monotonic() - freed < 5:
                time.sleep(0.05)
            recovered = time.monotonic() - freed
            # the decisions made while full are stored first, then each feedback is found claimed
            twice = [client.post("/feedback", json={"decision_id": i, "click": True}) for i in acked]
            again = {r.status_code for r in twice}
        print(
            f"\nfull disk: {len(acked)} feedbacks stored before the first 503; /readyz 503 after "
            f"{unready_at} of them, {noticed:.3f} s after the failure at the latest; 200 again "
            f"{recovered:.2f} s after space was freed"
        )
        assert ready.status_code == 503 and noticed < 1.0, ready.text
        assert again == {409}, again  # every acknowledged feedback is stored
        assert back.status_code == 200, back.text
    finally:
        server.kill()
        server.wait()


def _descriptors(limit: int) -> None:  # in the server's process
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


@pytest.mark.slow
def test_slow_header_connections_do_not_lock_out_other_clients(tmp_path: Path) -> None:
    """1,100 connections that send half their headers, against a server at 1,024 descriptors: a
    fresh client's predicts are answered (p99 < 100 ms), and the limits hit are in the log."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_")}
    env |= {"CLICKBOOST_STORE": "memory", "CLICKBOOST_HEADER_TIMEOUT_SECONDS": "3"}
    cmd = [sys.executable, "-m", "service", "serve", "--port", str(port), "--demo", "--log-level", "warning"]
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=lambda: _descriptors(1024)
        )
    slow: list[socket.socket] = []
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            wait_ready(client, server)
            for _ in range(1100):
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
                slow.append(s)
            time.sleep(0.5)
            latencies, failed = [], 0
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as fresh:
                for i in range(100):
                    if failed >= 5:  # locked out: no need to wait for the rest
                        break
                    t = time.perf_counter()
                    try:
                        r = fresh.post("/predict", json={"features": {"a": float(i)}})
                        ok = r.status_code == 200
                    except httpx.TransportError:
                        ok = False
                    latencies.append(time.perf_counter() - t)
                    failed += not ok
            time.sleep(3.5)  # the header timeout closes what is left of the slow ones
            closed = sum(_closed(s) for s in slow)
    finally:
        for s in slow:
            s.close()
        server.terminate()
        server.wait(timeout=20)
    lines = [line for line in log.read_text().splitlines() if "clickboost.connections" in line]
    print(
        f"\n1,100 slow-header connections at 1,024 descriptors: {len(latencies) - failed}/"
        f"{len(latencies)} fresh predicts answered, "
        f"p99 {p99(latencies):.1f} ms; {closed} slow connections closed by the server; log:\n"
        + "\n".join(lines)
    )
    assert failed == 0 and p99(latencies) < 100
    assert closed == 1100 and lines


def _closed(s: socket.socket) -> bool:
    """The server closed ``s`` (a read returns end of file or a reset)."""
    s.settimeout(0.5)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.anyio
async def test_a_retrain_runs_off_the_event_loop() -> None:
    """AdaBoost.MH retrains on its 300th event (d = 50, K = 300): the event loop goes on (a probe
    sleeping 1 ms at a time is never late by 100 ms), predicts answered meanwhile, and the model
    has learned all 300 events."""
    rng = np.random.default_rng(0)
    spec = {"learner": "adaboost-mh", "n_features": 50, "n_labels": 300, "params": {"retrain_every": 300}}
    async with app_client(make_app()) as client:
        assert (await client.put("/models/mh", json=spec)).status_code == 201
        late = [0.0]

        async def probe() -> None:
            while True:
                t = time.perf_counter()
                await asyncio.sleep(0.001)
                late[0] = max(late[0], time.perf_counter() - t - 0.001)

        watch = asyncio.create_task(probe())
        for _ in range(300):
            x = rng.random(50).tolist()
            d = (await client.post("/predict", json={"model": "mh", "features": x})).json()
            await client.post("/feedback", json={"decision_id": d["decision_id"], "click": True})
        t = time.perf_counter()
        answered = 0
        # in-process requests never wait for I/O: sleep so that the runtime's tasks run
        while (await client.get("/models/mh")).json()["version"] < 300:
            assert time.perf_counter() - t < 60, "the retrain did not finish"
            r = await client.post("/predict", json={"model": "mh", "features": rng.random(50).tolist()})
            answered += r.status_code == 200
            await asyncio.sleep(0.005)
        retrained = time.perf_counter() - t
        watch.cancel()
    print(
        f"\nadaboost-mh retrain (d = 50, K = 300, 300 rows): {retrained:.2f} s, {answered} predicts "
        f"answered meanwhile; the event loop at most {1000 * late[0]:.1f} ms late"
    )
    assert late[0] < 0.1
