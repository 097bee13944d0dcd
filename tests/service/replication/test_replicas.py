"""Several uvicorn replicas on one real Redis (issue 4, must-show 1-4), all on loopback.

Every replica is ``python -m service serve`` with ``REDIS_URL`` set; the tests talk HTTP to them and
read Redis directly (a :class:`RedisStore` of their own) to count what was stored.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from lab.cluster import RedisServer, Replica, start_replicas
from service.learners.base import Decision, learners, make_learner
from service.serial import checksum
from service.store import ClaimStatus
from service.store.redis import RedisStore
from tests.conftest import redis_server_binary

pytestmark = pytest.mark.anyio

D, K = 5, 3
BANDIT = sorted(name for name, cls in learners.items() if not cls.full_information)
NO_CHECKPOINTS = {"CLICKBOOST_CHECKPOINT_EVERY": "1000000", "CLICKBOOST_CHECKPOINT_INTERVAL_SECONDS": "3600"}


def spec(learner: str = "banditron") -> dict[str, object]:
    return {"learner": learner, "n_features": D, "n_labels": K, "seed": 3, "reward_window_seconds": 600}


class Contexts:
    """A linear ground truth: context x, true label argmax(W x); a click when the shown label is it."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.W = self.rng.normal(size=(K, D))

    def draw(self) -> tuple[list[float], int]:
        x = self.rng.normal(size=D)
        return x.tolist(), int(np.argmax(self.W @ x))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10.0) as client:
        yield client


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, list[Replica]]]:
    """A private Redis and three replicas that never checkpoint (the whole log stays for replay)."""
    work = tmp_path_factory.mktemp("cluster")
    server = RedisServer(work, binary=redis_server_binary())
    server.start()
    replicas: list[Replica] = []
    try:
        replicas = start_replicas(server.url, work, 3, NO_CHECKPOINTS)
        yield server, replicas
    finally:
        for r in replicas:
            r.stop()
        server.stop()


async def create_everywhere(
    http: httpx.AsyncClient, replicas: list[Replica], name: str, learner: str
) -> None:
    """Create ``name`` on the first replica and wait (bounded) until every replica serves it."""
    r = await http.put(f"{replicas[0].url}/models/{name}", json=spec(learner))
    assert r.status_code == 201, r.text
    deadline = time.monotonic() + 15
    for rep in replicas:
        while (await http.get(f"{rep.url}/models/{name}")).status_code != 200:
            assert time.monotonic() < deadline, f"{rep.url} never loaded {name}"
            await asyncio.sleep(0.05)


async def converged(http: httpx.AsyncClient, replicas: list[Replica], name: str, version: int) -> set[str]:
    """Wait (bounded) until every replica applied ``version`` events; return their checksums."""
    deadline = time.monotonic() + 20
    sums = set()
    for rep in replicas:
        while True:
            info = (await http.get(f"{rep.url}/models/{name}")).json()
            if info["version"] >= version:
                assert info["version"] == version
                sums.add(info["checksum"])
                break
            assert time.monotonic() < deadline, f"{rep.url} stuck at {info['version']} < {version}"
            await asyncio.sleep(0.05)
    return sums


async def replay_checksum(redis_url: str, name: str, learner: str) -> tuple[str, list[str]]:
    """Offline: a fresh learner learns every logged event in order. Returns its checksum and the ids."""
    store = RedisStore(redis_url)
    try:
        events = await store.read_log(name, after=0, limit=100_000)
    finally:
        await store.close()
    assert [e.position for e in events] == list(range(1, len(events) + 1))
    model = make_learner(learner, D, K, {}, seed=3)
    for e in events:
        assert e.kind == "learn" and e.x is not None and e.decision is not None and e.reward is not None
        model.learn(e.x, Decision.from_state(e.decision), e.reward)
    return checksum(model.state()), [e.decision_id for e in events]


async def test_three_replicas_converge_to_the_offline_replay_for_every_bandit_learner(
    cluster: tuple[RedisServer, list[Replica]], http: httpx.AsyncClient
) -> None:
    server, replicas = cluster
    n = 40
    for learner in BANDIT:
        await create_everywhere(http, replicas, f"conv-{learner}", learner)
    data = Contexts(seed=1)
    limit = asyncio.Semaphore(12)

    async def one(t: int, learner: str) -> tuple[str, str, int]:
        x, y = data.draw()
        async with limit:
            p = await http.post(
                f"{replicas[t % 3].url}/predict", json={"model": f"conv-{learner}", "features": x}
            )
            assert p.status_code == 200, p.text
            d = p.json()
            f = await http.post(
                f"{replicas[(t + 1) % 3].url}/feedback",
                json={"decision_id": d["decision_id"], "click": d["label_index"] == y},
            )
            assert f.status_code == 200, f.text
            return learner, d["decision_id"], f.json()["model_version"]

    acks = await asyncio.gather(*(one(t, learner) for t in range(n) for learner in BANDIT))
    for learner in BANDIT:
        name = f"conv-{learner}"
        mine = [(i, v) for lr, i, v in acks if lr == learner]
        assert sorted(v for _, v in mine) == list(range(1, n + 1))
        sums = await converged(http, replicas, name, n)
        offline, ids = await replay_checksum(server.url, name, learner)
        assert sums == {offline}, learner
        assert sorted(ids) == sorted(i for i, _ in mine)


async def test_concurrent_duplicates_across_replicas_are_learned_exactly_once(
    cluster: tuple[RedisServer, list[Replica]], http: httpx.AsyncClient
) -> None:
    server, replicas = cluster
    await create_everywhere(http, replicas, "dup", "banditron")
    data = Contexts(seed=2)
    ids = []
    for t in range(30):
        p = await http.post(
            f"{replicas[t % 3].url}/predict", json={"model": "dup", "features": data.draw()[0]}
        )
        ids.append(p.json()["decision_id"])
    sends = [(i, rep, c) for i in ids for rep in replicas for c in (True, False)]
    random.Random(0).shuffle(sends)
    answers = await asyncio.gather(
        *(http.post(f"{rep.url}/feedback", json={"decision_id": i, "click": c}) for i, rep, c in sends)
    )
    for i in ids:
        mine = [(c, a) for (j, _, c), a in zip(sends, answers, strict=True) if j == i]
        ok = [(c, a.json()) for c, a in mine if a.status_code == 200]
        assert len(ok) == 1, [a.status_code for _, a in mine]
        first_click, body = ok[0]
        dups = [a.json()["first_outcome"] for _, a in mine if a.status_code == 409]
        assert len(dups) == 5
        outcome = "click" if first_click else "no_click"
        assert all(d["outcome"] == outcome and d["model_version"] == body["model_version"] for d in dups)
    sums = await converged(http, replicas, "dup", len(ids))
    offline, logged = await replay_checksum(server.url, "dup", "banditron")
    assert sums == {offline} and sorted(logged) == sorted(ids)


class Load:
    """Predict on one replica, feedback on another; count what was acknowledged.

    A feedback whose connection failed (its replica was killed, or answered 503) is retried on
    ``fallback`` replicas until it gets 200 or 409: a 409 then means an earlier, unacknowledged
    attempt was recorded. So every decision with a final answer is in the log exactly once.
    """

    def __init__(self, http: httpx.AsyncClient, model: str, seed: int) -> None:
        self.http = http
        self.model = model
        self.data = Contexts(seed)
        self.rng = random.Random(seed)
        self.acked: dict[str, bool] = {}  # 200: decision id -> click
        self.recorded_before: set[str] = set()  # 409 after a failed attempt
        self.predict_failures = 0
        self.unavailable = 0  # 503 answers (with Retry-After)

    async def feedback(
        self, decision_id: str, click: bool, targets: list[Replica], fallback: list[Replica]
    ) -> None:
        tries = 0
        deadline = time.monotonic() + 30
        while True:
            rep = targets[0] if tries == 0 else self.rng.choice(fallback)
            tries += 1
            try:
                r = await self.http.post(
                    f"{rep.url}/feedback", json={"decision_id": decision_id, "click": click}
                )
            except httpx.TransportError:
                r = None
            if r is not None and r.status_code == 200:
                self.acked[decision_id] = click
                return
            if r is not None and r.status_code == 409:
                assert tries > 1, r.text
                self.recorded_before.add(decision_id)
                return
            if r is not None:
                assert r.status_code == 503, r.text
                assert r.headers["Retry-After"] == "1"
                self.unavailable += 1
            assert time.monotonic() < deadline, "feedback never got through"
            await asyncio.sleep(0.05)

    async def pair(self, replicas: list[Replica], fallback: list[Replica]) -> None:
        x, y = self.data.draw()
        a, b = self.rng.sample(replicas, 2)
        try:
            p = await self.http.post(f"{a.url}/predict", json={"model": self.model, "features": x})
        except httpx.TransportError:
            self.predict_failures += 1
            return
        assert p.status_code == 200, p.text
        d = p.json()
        await self.feedback(d["decision_id"], d["label_index"] == y, [b], fallback)

    async def run(self, n: int, workers: int, replicas: list[Replica], fallback: list[Replica]) -> None:
        queue = iter(range(n))

        async def worker() -> None:
            for _ in queue:
                await self.pair(replicas, fallback)

        await asyncio.gather(*(worker() for _ in range(workers)))


async def until_acked(load: Load, n: int, running: asyncio.Task[None]) -> None:
    """Wait until ``load`` has ``n`` acknowledged feedbacks, so a fault lands mid-load on any machine.

    A fixed sleep does not: on a quiet machine the whole load can finish before it ends.
    """
    deadline = time.monotonic() + 30
    while len(load.acked) < n:
        assert not running.done(), "the load ended before the fault was injected"
        assert time.monotonic() < deadline, "the load made no progress"
        await asyncio.sleep(0.01)


async def assert_nothing_acknowledged_was_lost(redis_url: str, model: str, load: Load) -> int:
    """Every 200 is a stored claim with its outcome; the log holds exactly the answered decisions."""
    store = RedisStore(redis_url)
    try:
        for decision_id, click in load.acked.items():
            out = await store.claim_and_append(decision_id, not click, now=time.time())
            assert out.status is ClaimStatus.DUPLICATE and out.claim is not None
            assert out.claim.outcome == ("click" if click else "no_click")
        counts = await store.counts(model)
        events = await store.log_position(model)
    finally:
        await store.close()
    assert events == counts.clicks + counts.no_clicks == len(load.acked) + len(load.recorded_before)
    return events


async def test_kill_9_of_a_replica_during_load_loses_nothing_and_it_catches_up(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    server = RedisServer(tmp_path, binary=redis_server_binary())
    server.start()
    env = {"CLICKBOOST_CHECKPOINT_EVERY": "25", "CLICKBOOST_CHECKPOINT_INTERVAL_SECONDS": "1"}
    replicas = start_replicas(server.url, tmp_path, 3, env)
    try:
        await create_everywhere(http, replicas, "crash", "banditron")
        load = Load(http, "crash", seed=3)
        victim = replicas[2]
        running = asyncio.create_task(load.run(600, 6, replicas, replicas[:2]))
        await until_acked(load, 30, running)
        victim.kill()  # kill -9 mid-load: in-flight requests to it fail
        await asyncio.sleep(0.5)
        victim.start()  # same port; loads the checkpoint and replays the log tail
        await asyncio.to_thread(victim.wait_ready)
        await running
        assert len(load.acked) > 50
        events = await assert_nothing_acknowledged_was_lost(server.url, "crash", load)
        assert len(await converged(http, replicas, "crash", events)) == 1
        store = RedisStore(server.url)
        try:
            log = await store.read_log("crash", after=0)
            cp = await store.get_checkpoint("crash")
        finally:
            await store.close()
        assert cp is not None and cp.position >= 25
        assert not log or 1 < log[0].position <= cp.position + 1  # trimmed up to a checkpoint
    finally:
        for r in replicas:
            r.stop()
        server.stop()


async def test_redis_restart_with_aof_during_load(tmp_path: Path, http: httpx.AsyncClient) -> None:
    server = RedisServer(tmp_path, aof=True, binary=redis_server_binary())
    server.start()
    replicas = start_replicas(server.url, tmp_path, 2, NO_CHECKPOINTS)
    try:
        await create_everywhere(http, replicas, "aof", "banditron")
        load = Load(http, "aof", seed=4)
        running = asyncio.create_task(load.run(600, 4, replicas, replicas))
        await until_acked(load, 20, running)
        server.kill()  # kill -9: only what the AOF holds survives (fsync before every reply)
        # Down: predictions keep coming from the in-memory models; feedback is refused, never faked.
        data = Contexts(seed=5)
        during = []
        for rep in replicas:
            p = await http.post(f"{rep.url}/predict", json={"model": "aof", "features": data.draw()[0]})
            assert p.status_code == 200, p.text
            during.append((rep, p.json()["decision_id"]))
            f = await http.post(f"{rep.url}/feedback", json={"decision_id": during[-1][1], "click": True})
            assert f.status_code == 503 and f.headers["Retry-After"] == "1", f.text
        await asyncio.sleep(0.3)
        await asyncio.to_thread(server.start)  # same port and directory: replays the AOF
        # No operator action: the decisions made while down were recorded, their feedback now counts.
        for rep, decision_id in during:
            await load.feedback(decision_id, True, [rep], replicas)
        await running
        assert load.unavailable > 0 and all(i in load.acked for _, i in during)
        events = await assert_nothing_acknowledged_was_lost(server.url, "aof", load)
        sums = await converged(http, replicas, "aof", events)
        offline, _ = await replay_checksum(server.url, "aof", "banditron")
        assert sums == {offline}
    finally:
        for r in replicas:
            r.stop()
        server.stop()
