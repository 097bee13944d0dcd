"""Several uvicorn replicas on one real Redis (issue 4, must-show 1-4; issue 18, item 6), all on loopback.

Every replica is ``python -m service serve`` with ``REDIS_URL`` set; the tests talk HTTP to them and
read Redis directly (a :class:`RedisStore` of their own) to count what was stored or to corrupt it.
The fault tests (``kill -9`` of a replica, ``kill -9`` of Redis restarted from its AOF, one decision
posted to two replicas at once, a poisoned event) count every answer the clients saw and report one
line of figures each (printed, a junit property, and in the terminal summary).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import redis

from lab.cluster import RedisServer, Replica, start_groups, start_replicas
from service.learners.base import Decision, learners, make_learner
from service.placement import rendezvous
from service.sampling import reward_bit
from service.serial import checksum
from service.store.base import Event
from service.store.redis import RedisStore
from tests.conftest import redis_server_binary

pytestmark = pytest.mark.anyio

D, K = 5, 3
BANDIT = sorted(name for name, cls in learners.items() if not cls.full_information and not cls.actions)
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
            # what the stuck replica says of the model, and its log, for the flake this once was
            assert time.monotonic() < deadline, (
                f"{rep.url} stuck at {info['version']} < {version}: {info}\n{rep.log.read_text()[-3000:]}"
            )
            await asyncio.sleep(0.05)
    return sums


async def replay_checksum(redis_url: str, name: str, learner: str) -> tuple[str, list[str]]:
    """Offline: a fresh learner learns every logged event in order (a graded reward as such when the
    learner takes one, else as the Bernoulli bit its decision id draws). Returns its checksum and the
    ids."""
    store = RedisStore(redis_url)
    try:
        events = await store.read_log(name, after=0, limit=100_000)
    finally:
        await store.close()
    assert [e.position for e in events] == list(range(1, len(events) + 1))
    model = make_learner(learner, D, K, {}, seed=3)
    for e in events:
        assert e.kind == "learn" and e.x is not None and e.decision is not None and e.reward is not None
        as_bit = not isinstance(e.reward, bool) and not model.graded
        model.learn(
            e.x, Decision.from_state(e.decision), reward_bit(e.decision_id, e.reward) if as_bit else e.reward
        )
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
                # every fourth a graded reward (issue 38): 0.75 for the right label, else 0.25
                json={"decision_id": d["decision_id"], "click": d["label_index"] == y}
                if t % 4
                else {"decision_id": d["decision_id"], "reward": 0.75 if d["label_index"] == y else 0.25},
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


# -- faults under load (issue 18, item 6) ----------------------------------------------------------

# The answers a client may see while replicas or Redis fail (docs/ARCHITECTURE.md, "When Redis is down"):
# predictions keep being served; a feedback is recorded (200), was recorded by an earlier attempt whose
# answer was lost (409 with the first outcome), or is refused for now (503 with Retry-After: 1). A
# replica that is starting (loading models, compiling kernels) refuses both with 503 and Retry-After: 1
# until /readyz says ready: nothing was recorded.
DOCUMENTED = {"predict 200", "predict 503", "feedback 200", "feedback 409", "feedback 503"}
FAILED = {"transport error", "timeout"}  # no HTTP answer at all


class Load:
    """Predict on one replica, feedback on another; count every answer and what was acknowledged.

    A feedback that got no answer (its replica was killed, or the request timed out) or a 503 is
    retried on ``fallback`` replicas until it gets 200 or 409: a 409 then means an earlier,
    unacknowledged attempt was recorded. So every decision with a final answer is in the log exactly
    once. Every answer is counted by phase (set by the test), call and status code or failure; an
    answer outside :data:`DOCUMENTED` is kept in ``unexpected`` (the load goes on; the test asserts).
    """

    def __init__(
        self, http: httpx.AsyncClient, model: str, seed: int, holders: list[Replica] | None = None
    ) -> None:
        self.http = http
        self.model = model
        self.holders = holders  # model placement: predicts go to these only (feedback anywhere)
        self.data = Contexts(seed)
        self.rng = random.Random(seed)
        self.acked: dict[str, bool] = {}  # 200: decision id -> click
        self.recorded_before: dict[str, bool] = {}  # 409 after a failed attempt: id -> click
        self.phase = "before"
        self.codes: Counter[tuple[str, str]] = Counter()  # (phase, "feedback 503") -> answers
        self.failed_at: Counter[str] = Counter()  # replica URL -> requests that got no answer
        self.unexpected: list[str] = []

    def count(self, call: str, rep: Replica, r: httpx.Response | Exception, tries: int = 1) -> str:
        """Count one answer (or failure) of ``call`` to ``rep``; return its key, e.g. "feedback 409"."""
        if isinstance(r, httpx.TimeoutException):  # a TransportError too: test it first
            what = f"{call} timeout"
        elif isinstance(r, httpx.TransportError):
            what = f"{call} transport error"
        elif isinstance(r, Exception):
            raise r
        else:
            what = f"{call} {r.status_code}"
        self.codes[self.phase, what] += 1
        if isinstance(r, Exception):
            self.failed_at[rep.url] += 1
        elif what not in DOCUMENTED:
            self.unexpected.append(f"{what} from {rep.url}: {r.text}")
        elif r.status_code == 503 and r.headers.get("Retry-After") != "1":
            self.unexpected.append(f"{what} without Retry-After: 1: {dict(r.headers)}")
        elif call == "feedback" and r.status_code == 409 and tries == 1:
            self.unexpected.append(f"409 on a first attempt from {rep.url}: {r.text}")
        return what

    def summary(self, phase: str | None = None) -> Counter[str]:
        """Answers by call and code, over every phase or one."""
        out: Counter[str] = Counter()
        for (p, what), n in self.codes.items():
            if phase is None or p == phase:
                out[what] += n
        return out

    async def post(
        self, call: str, rep: Replica, body: dict[str, object], tries: int = 1
    ) -> httpx.Response | None:
        """POST /call to ``rep``, counted; None if no answer came."""
        try:
            r: httpx.Response | Exception = await self.http.post(f"{rep.url}/{call}", json=body)
        except httpx.TransportError as exc:
            r = exc
        self.count(call, rep, r, tries)
        return r if isinstance(r, httpx.Response) else None

    async def feedback(
        self, decision_id: str, click: bool, targets: list[Replica], fallback: list[Replica]
    ) -> None:
        tries = 0
        deadline = time.monotonic() + 30
        while True:
            rep = targets[0] if tries == 0 else self.rng.choice(fallback)
            tries += 1
            r = await self.post("feedback", rep, {"decision_id": decision_id, "click": click}, tries)
            if r is not None and r.status_code == 200:
                self.acked[decision_id] = click
                return
            if r is not None and r.status_code == 409:
                self.recorded_before[decision_id] = click
                return
            if r is not None and r.status_code != 503:
                return  # undocumented: counted in ``unexpected``
            assert time.monotonic() < deadline, f"feedback for {decision_id} never got through"
            await asyncio.sleep(0.05)

    async def pair(self, replicas: list[Replica], fallback: list[Replica]) -> None:
        x, y = self.data.draw()
        if self.holders is None:
            a, b = self.rng.sample(replicas, 2)
        else:
            a = self.rng.choice([r for r in replicas if r in self.holders])
            b = self.rng.choice([r for r in replicas if r is not a])
        p = await self.post("predict", a, {"model": self.model, "features": x})
        if p is None or p.status_code != 200:
            return
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


async def lost_over_http(http: httpx.AsyncClient, replicas: list[Replica], load: Load) -> list[str]:
    """Post every answered decision again, the other click, to a random replica: each must answer 409
    with its first outcome. Returns the ids that did not (lost, or learned with another outcome)."""
    rng = random.Random(7)
    limit = asyncio.Semaphore(16)
    answered = {**load.recorded_before, **load.acked}

    async def lost(decision_id: str, click: bool) -> bool:
        async with limit:
            r = await http.post(
                f"{rng.choice(replicas).url}/feedback", json={"decision_id": decision_id, "click": not click}
            )
        outcome = "click" if click else "no_click"
        return r.status_code != 409 or r.json()["first_outcome"]["outcome"] != outcome

    verdicts = await asyncio.gather(*(lost(i, c) for i, c in answered.items()))
    return [i for i, bad in zip(answered, verdicts, strict=True) if bad]


async def counts(http: httpx.AsyncClient, rep: Replica, name: str) -> dict[str, int]:
    """``GET /models/{name}`` counts on one replica (the cluster runs without keys)."""
    r = await http.get(f"{rep.url}/models/{name}")
    assert r.status_code == 200, r.text
    return r.json()["counts"]


def placed_replicas(
    redis_url: str, workdir: Path, env: dict[str, str], placement: bool, model: str
) -> tuple[list[Replica], list[Replica]]:
    """Three replicas and those that hold ``model``: every one, or with ``placement`` (issue 40 part
    3) two groups, one copy of each model, ``model``'s group of two (the first and the last replica)
    and the other of one (the middle replica, which answers ``model``'s routes with 421)."""
    if not placement:
        replicas = start_replicas(redis_url, workdir, 3, env)
        return replicas, replicas
    held = rendezvous(model, ["a", "b"], 1)[0]
    other = "b" if held == "a" else "a"
    groups = start_groups(redis_url, workdir, {held: 2, other: 1}, env, copies=1)
    return [groups[held][0], groups[other][0], groups[held][1]], groups[held]


async def not_held(
    http: httpx.AsyncClient, replicas: list[Replica], holders: list[Replica], name: str
) -> None:
    """The replicas outside ``holders`` answer 421 for ``name`` and do not report it."""
    for rep in replicas:
        if rep not in holders:
            assert (await http.get(f"{rep.url}/models/{name}")).status_code == 421
            assert name not in {m["name"] for m in (await http.get(f"{rep.url}/models")).json()["models"]}


PLACEMENT = pytest.mark.parametrize("placement", [False, True], ids=["every-replica", "placement"])


@PLACEMENT
async def test_kill_9_of_a_replica_during_load_loses_nothing_and_it_catches_up(
    tmp_path: Path, http: httpx.AsyncClient, figures: Callable[[str], None], placement: bool
) -> None:
    started = time.monotonic()
    server = RedisServer(tmp_path, binary=redis_server_binary())
    server.start()
    env = {"CLICKBOOST_CHECKPOINT_EVERY": "25", "CLICKBOOST_CHECKPOINT_INTERVAL_SECONDS": "1"}
    replicas, holders = placed_replicas(server.url, tmp_path, env, placement, "crash")
    try:
        await create_everywhere(http, holders, "crash", "banditron")
        load = Load(http, "crash", seed=3, holders=None if holders is replicas else holders)
        victim = replicas[2]  # holds the model
        running = asyncio.create_task(load.run(600, 6, replicas, replicas[:2]))
        await until_acked(load, 30, running)
        load.phase = "victim down"
        victim.kill()  # kill -9 mid-load: in-flight requests to it fail
        await asyncio.sleep(0.5)
        victim.start()  # same port; loads the checkpoint and replays the log tail
        await asyncio.to_thread(victim.wait_ready)
        load.phase = "after"
        await running
        # Quiet now. Nothing acknowledged is lost, over HTTP, on any replica (the restarted one too).
        lost = await lost_over_http(http, replicas, load)
        c = await counts(http, replicas[0], "crash")
        learned = c["clicks"] + c["no_clicks"]
        sums = await converged(http, holders, "crash", learned)
        await not_held(http, replicas, holders, "crash")
        codes = load.summary()
        failures = {("victim" if url == victim.url else url): n for url, n in load.failed_at.items()}
        figures(
            f"replica kill -9 ({'placement' if placement else 'every replica'}): "
            f"acknowledged={len(load.acked)} "
            f"recorded_unacknowledged={len(load.recorded_before)} learned={learned} lost={len(lost)} "
            f"decisions={c['decisions']} checksums={len(sums)} "
            f"codes={dict(codes)} no_answer={failures} in {time.monotonic() - started:.1f} s"
        )
        assert not load.unexpected, load.unexpected
        assert not lost, lost
        assert learned == len(load.acked) + len(load.recorded_before)
        assert len(load.acked) > 50 and len(sums) == 1
        # Requests that got no answer went to the killed replica only, and none hung.
        assert set(load.failed_at) <= {victim.url}, load.failed_at
        assert not any("timeout" in what for what in codes), codes
        assert set(codes) <= DOCUMENTED | {f"{call} transport error" for call in ("predict", "feedback")}
        assert codes["feedback 503"] == 0  # Redis stayed up
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


@PLACEMENT
async def test_redis_kill_9_and_restart_from_aof_during_load(
    tmp_path: Path, http: httpx.AsyncClient, figures: Callable[[str], None], placement: bool
) -> None:
    started = time.monotonic()
    server = RedisServer(tmp_path, aof=True, binary=redis_server_binary())
    server.start()
    replicas, holders = placed_replicas(server.url, tmp_path, NO_CHECKPOINTS, placement, "aof")
    try:
        await create_everywhere(http, holders, "aof", "banditron")
        load = Load(http, "aof", seed=4, holders=None if holders is replicas else holders)
        running = asyncio.create_task(load.run(600, 6, replicas, replicas))
        await until_acked(load, 20, running)
        load.phase = "outage"
        down = time.monotonic()
        server.kill()  # kill -9: only what the AOF holds survives (fsync before every reply)
        # Down: predictions keep coming from the in-memory models; feedback is refused, never faked.
        data = Contexts(seed=5)
        during = []
        for rep in holders:
            p = await load.post("predict", rep, {"model": "aof", "features": data.draw()[0]})
            assert p is not None and p.status_code == 200, p and p.text
            during.append((rep, p.json()["decision_id"]))
            f = await load.post("feedback", rep, {"decision_id": during[-1][1], "click": True})
            assert f is not None and f.status_code == 503 and f.headers["Retry-After"] == "1", f and f.text
        await asyncio.sleep(0.3)
        await asyncio.to_thread(server.start)  # same port and directory: replays the AOF
        load.phase = "after"
        outage = time.monotonic() - down
        # No operator action: the decisions made while down were recorded, their feedback now counts.
        for rep, decision_id in during:
            await load.feedback(decision_id, True, [rep], replicas)
        await running
        # Quiet now. Nothing acknowledged is lost, over HTTP, and the replicas are one model again.
        lost = await lost_over_http(http, replicas, load)
        c = await counts(http, holders[1], "aof")
        learned = c["clicks"] + c["no_clicks"]
        sums = await converged(http, holders, "aof", learned)
        await not_held(http, replicas, holders, "aof")
        offline, _ = await replay_checksum(server.url, "aof", "banditron")
        codes, in_outage = load.summary(), load.summary("outage")
        figures(
            f"redis kill -9 ({'placement' if placement else 'every replica'}): "
            f"acknowledged={len(load.acked)} "
            f"recorded_unacknowledged={len(load.recorded_before)} learned={learned} lost={len(lost)} "
            f"decisions={c['decisions']} pending={c['pending']} "
            f"checksums={len(sums)} outage={outage:.2f} s codes={dict(codes)} "
            f"codes_in_outage={dict(in_outage)} in {time.monotonic() - started:.1f} s"
        )
        assert not load.unexpected, load.unexpected
        assert set(codes) <= DOCUMENTED, codes  # every replica stayed up: no failure, no timeout
        assert in_outage["feedback 503"] > 0 and in_outage["predict 200"] >= len(holders)
        assert all(i in load.acked for _, i in during)
        assert not lost, lost
        assert learned == len(load.acked) + len(load.recorded_before)
        # Every prediction answered was recorded (those made while down, once Redis was back) and
        # every one of them got its feedback.
        assert c["decisions"] == codes["predict 200"] and c["pending"] == 0
        assert sums == {offline}
    finally:
        for r in replicas:
            r.stop()
        server.stop()


async def test_the_same_decision_posted_to_two_replicas_at_once_is_learned_once(
    cluster: tuple[RedisServer, list[Replica]], http: httpx.AsyncClient, figures: Callable[[str], None]
) -> None:
    """300 decisions; each one's feedback sent to two different replicas at the same instant (one
    click, one no-click, in batches of 50 ids = 100 concurrent requests): one 200, one 409 naming it."""
    started = time.monotonic()
    server, replicas = cluster
    n, batch = 300, 50
    await create_everywhere(http, replicas, "twice", "banditron")
    data = Contexts(seed=6)
    limit = asyncio.Semaphore(12)

    async def predict(t: int) -> str:
        async with limit:
            p = await http.post(
                f"{replicas[t % 3].url}/predict", json={"model": "twice", "features": data.draw()[0]}
            )
        assert p.status_code == 200, p.text
        return p.json()["decision_id"]

    ids = await asyncio.gather(*(predict(t) for t in range(n)))
    rng = random.Random(6)
    pairs = [(i, *rng.sample(replicas, 2)) for i in ids]  # click to the first, no-click to the second
    answers: list[tuple[httpx.Response, httpx.Response]] = []
    for k in range(0, n, batch):
        chunk = pairs[k : k + batch]
        flat = await asyncio.gather(
            *(
                http.post(f"{rep.url}/feedback", json={"decision_id": i, "click": click})
                for i, a, b in chunk
                for rep, click in ((a, True), (b, False))
            )
        )
        answers += zip(flat[0::2], flat[1::2], strict=True)
    versions, clicks_won = [], 0
    for (i, _, _), (yes, no) in zip(pairs, answers, strict=True):
        assert sorted([yes.status_code, no.status_code]) == [200, 409], (i, yes.text, no.text)
        won, dup = (yes, no) if yes.status_code == 200 else (no, yes)
        clicks_won += won is yes
        first = dup.json()["first_outcome"]
        assert first["outcome"] == ("click" if won is yes else "no_click"), (i, dup.text)
        assert first["model_version"] == won.json()["model_version"], (i, won.text, dup.text)
        versions.append(won.json()["model_version"])
    assert sorted(versions) == list(range(1, n + 1))  # every decision learned once, no gap
    c = await counts(http, replicas[2], "twice")
    sums = await converged(http, replicas, "twice", n)
    offline, logged = await replay_checksum(server.url, "twice", "banditron")
    figures(
        f"same id on two replicas at once: ids={n} accepted={len(versions)} duplicates_409={n} "
        f"click_sender_won={clicks_won} learned={c['clicks'] + c['no_clicks']} checksums={len(sums)} "
        f"in {time.monotonic() - started:.1f} s"
    )
    assert c["clicks"] + c["no_clicks"] == n and c["clicks"] == clicks_won
    assert sums == {offline} and sorted(logged) == sorted(ids)


def metric(text: str, name: str, model: str) -> float | None:
    """The value of ``name{model="..."}`` in a Prometheus text page, or None."""
    for line in text.splitlines():
        if line.startswith(f'{name}{{model="{model}"}} '):
            return float(line.split()[-1])
    return None


async def test_a_poisoned_event_does_not_stall_other_models(
    tmp_path: Path, http: httpx.AsyncClient, figures: Callable[[str], None]
) -> None:
    """An event no replica can apply (an ``import`` whose state is garbage, written straight into
    Redis) stops that model only: on two replicas, another model goes on learning at once, while
    the poisoned one reports its failure and keeps serving its last good state."""
    started = time.monotonic()
    server = RedisServer(tmp_path, binary=redis_server_binary())
    server.start()
    replicas = start_replicas(server.url, tmp_path, 2, NO_CHECKPOINTS)
    try:
        for name in ("bad", "good"):
            await create_everywhere(http, replicas, name, "banditron")
        bad, good = Load(http, "bad", seed=8), Load(http, "good", seed=9)
        await bad.run(10, 2, replicas, replicas)
        assert len(bad.acked) == 10
        assert len(await converged(http, replicas, "bad", 10)) == 1
        store = RedisStore(server.url)
        try:
            poison = await store.append("bad", Event(0, "import", at=time.time(), state=b"garbage"))
        finally:
            await store.close()
        assert poison == 11
        await bad.run(5, 1, replicas, replicas)  # still accepted: in the log, after the poison
        await good.run(60, 4, replicas, replicas)  # no ?wait: the tail loops must apply them
        acked = time.monotonic()
        assert not bad.unexpected and not good.unexpected, bad.unexpected + good.unexpected
        assert len(bad.acked) == 15 and len(good.acked) == 60
        deadline = acked + 5.0
        infos: dict[str, dict[str, dict[str, object]]] = {}
        for rep in replicas:
            while True:
                infos[rep.url] = {
                    n: (await http.get(f"{rep.url}/models/{n}")).json() for n in ("bad", "good")
                }
                if infos[rep.url]["good"]["version"] == 60 and infos[rep.url]["bad"]["failure"]:
                    break
                assert time.monotonic() < deadline, f"{rep.url} stalled: {infos[rep.url]}"
                await asyncio.sleep(0.05)
        caught_up = time.monotonic() - acked
        good_sums = {i["good"]["checksum"] for i in infos.values()}
        failures = [str(i["bad"]["failure"]) for i in infos.values()]
        pages = [(await http.get(f"{rep.url}/metrics")).text for rep in replicas]
        failed = [
            (metric(p, "clickboost_model_failed", "bad"), metric(p, "clickboost_model_failed", "good"))
            for p in pages
        ]
        served = []
        for rep in replicas:  # the poisoned model still decides, from its last good state
            p = await http.post(f"{rep.url}/predict", json={"model": "bad", "features": [0.1] * D})
            served.append((p.status_code, p.json().get("model_version")))
        figures(
            f"poisoned event: good caught up on 2 replicas in {caught_up:.2f} s (version 60), "
            f"bad stuck at {[i['bad']['version'] for i in infos.values()]} of log 16, "
            f"failed gauges (bad, good)={failed}, failure={failures[0]!r} "
            f"in {time.monotonic() - started:.1f} s"
        )
        assert len(good_sums) == 1
        for info, failure in zip(infos.values(), failures, strict=True):
            assert info["bad"]["version"] == poison - 1
            assert info["good"]["failure"] is None
            assert f"event {poison} " in failure and "StateFormatError" in failure, failure
        assert failed == [(1.0, 0.0)] * len(replicas)
        assert served == [(200, poison - 1)] * len(replicas)
    finally:
        for r in replicas:
            r.stop()
        server.stop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux ``/proc``), or NaN elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def test_a_poisoned_model_leaves_the_tail_loop_idle(
    tmp_path: Path, http: httpx.AsyncClient, figures: Callable[[str], None]
) -> None:
    """While a model cannot apply its next event, the replica waits for its retry (back-off) and
    for new events; it does not poll Redis in a loop. Healthy and idle, one replica sends a few
    commands a second (one ``XREAD BLOCK`` over every log, its heartbeat; the first sweeps of models
    just created), whatever its number of models; 200 a second is the bound here."""
    server = RedisServer(tmp_path, binary=redis_server_binary())
    server.start()
    (replica,) = start_replicas(server.url, tmp_path, 1, NO_CHECKPOINTS)
    client = redis.Redis(port=server.port)
    try:
        for name in ("bad", "good"):
            await create_everywhere(http, [replica], name, "banditron")

        def commands() -> int:
            return int(client.info("stats")["total_commands_processed"])

        async def rate(seconds: float = 1.0) -> tuple[float, float]:
            """Redis commands per second and the replica's CPU share over ``seconds``."""
            assert replica.proc is not None
            c0, t0, cpu0 = commands(), time.monotonic(), cpu_seconds(replica.proc.pid)
            await asyncio.sleep(seconds)
            c1, t1, cpu1 = commands(), time.monotonic(), cpu_seconds(replica.proc.pid)
            return (c1 - c0 - 1) / (t1 - t0), (cpu1 - cpu0) / (t1 - t0)

        healthy, healthy_cpu = await rate()
        store = RedisStore(server.url)
        try:
            await store.append("bad", Event(0, "import", at=time.time(), state=b"garbage"))
        finally:
            await store.close()
        deadline = time.monotonic() + 5
        while not (await http.get(f"{replica.url}/models/bad")).json()["failure"]:
            assert time.monotonic() < deadline, "the poisoned model never reported its failure"
            await asyncio.sleep(0.05)
        poisoned, poisoned_cpu = await rate()
        figures(
            f"poisoned model, idle replica: {healthy:.0f} Redis commands/s healthy, {poisoned:.0f} "
            f"poisoned; replica CPU {healthy_cpu:.0%} -> {poisoned_cpu:.0%}"
        )
        assert poisoned < 200, (
            f"a poisoned model keeps the tail loop busy: {poisoned:.0f} Redis commands/s "
            f"({healthy:.0f} healthy), replica CPU {poisoned_cpu:.0%}"
        )
    finally:
        client.close()
        replica.stop()
        server.stop()
