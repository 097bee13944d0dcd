"""Model placement (issue 40 part 3): four uvicorn replicas in two groups, each model held by one group.

On a real Redis and on the real 3-master Redis Cluster (``redis_cluster_url``, tests/conftest.py),
all on loopback: each replica loads, follows and reports only its group's models (rendezvous hashing
of the name); any other model's routes answer 421 naming the holders (body and ``X-Model-Replicas``);
feedback is accepted by any replica and learned by the holders, which stay bit-identical to an
offline replay; the SDK routes by model, following one 421; a model moved to the other group under
load loses no acknowledged feedback. The kill -9 and Redis restart tests with placement on are in
test_replicas.py (parametrised).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from clickboost_client import AsyncClient, Retry
from lab.cluster import RedisServer, Replica, start_groups
from service.placement import rendezvous
from tests.conftest import redis_server_binary
from tests.service.replication.conftest import CLIENT_TIMEOUT
from tests.service.replication.test_replicas import (
    NO_CHECKPOINTS,
    Contexts,
    converged,
    replay_checksum,
    spec,
)

pytestmark = pytest.mark.anyio

GROUPS = ("a", "b")
MODELS = [f"placed-{i}" for i in range(8)]


class Deployment:
    """Four replicas in groups a and b (two each), one copy of each model, on ``url``."""

    def __init__(self, url: str, groups: dict[str, list[Replica]]) -> None:
        self.url = url
        self.groups = groups
        self.replicas = [r for g in GROUPS for r in groups[g]]

    def holders(self, model: str, group: str | None = None) -> list[Replica]:
        return self.groups[group or rendezvous(model, GROUPS, 1)[0]]

    def others(self, model: str, group: str | None = None) -> list[Replica]:
        held = self.holders(model, group)
        return [r for r in self.replicas if r not in held]


@pytest.fixture(scope="module", params=["redis", "cluster"])
def deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    work: Path = tmp_path_factory.mktemp(f"placement-{request.param}")
    server = None
    if request.param == "cluster":
        url = request.getfixturevalue("redis_cluster_url")
    else:
        server = RedisServer(work, binary=redis_server_binary())
        server.start()
        url = server.url
    try:
        groups = start_groups(url, work, {g: 2 for g in GROUPS}, NO_CHECKPOINTS, copies=1)
        try:
            yield Deployment(url, groups)
        finally:
            for reps in groups.values():
                for r in reps:
                    r.stop()
    finally:
        if server is not None:
            server.stop()


def sdk(urls: list[str]) -> AsyncClient:
    return AsyncClient(urls, timeout=CLIENT_TIMEOUT, retry=Retry(budget=30.0))


async def held_by(http: httpx.AsyncClient, rep: Replica) -> set[str]:
    models = (await http.get(f"{rep.url}/models")).json()["models"]
    return {m["name"] for m in models}


async def test_each_group_holds_its_models_and_the_others_answer_421(
    deployment: Deployment, http: httpx.AsyncClient, figures: Callable[[str], None]
) -> None:
    d = deployment
    for name in MODELS:  # created through a replica that does not hold it: 421, nothing created
        other = d.others(name)[0]
        r = await http.put(f"{other.url}/models/{name}", json=spec())
        assert r.status_code == 421, r.text
        assert (await http.get(f"{other.url}/models/{name}")).status_code == 404
        r = await http.put(f"{d.holders(name)[0].url}/models/{name}", json=spec())
        assert r.status_code == 201, r.text
    placed = {g: {m for m in MODELS if rendezvous(m, GROUPS, 1) == [g]} for g in GROUPS}
    assert all(placed.values()), placed  # 8 names: both groups hold some
    deadline = time.monotonic() + 15
    for group, reps in d.groups.items():
        for rep in reps:
            while (held := await held_by(http, rep) & set(MODELS)) != placed[group]:
                assert time.monotonic() < deadline, (rep.url, held, placed[group])
                await asyncio.sleep(0.05)
    data = Contexts(seed=21)
    for name in MODELS:
        holders, others = d.holders(name), d.others(name)
        addresses = [r.url for r in holders]
        x, y = data.draw()
        for rep in others:
            r = await http.post(f"{rep.url}/predict", json={"model": name, "features": x})
            assert r.status_code == 421, r.text
            body = r.json()
            assert body["model"] == name and body["groups"] == {rendezvous(name, GROUPS, 1)[0]: addresses}
            assert name in body["detail"] and addresses[0] in body["detail"]
            assert r.headers["x-model-replicas"].split(", ") == addresses
            for path in (f"/models/{name}", f"/models/{name}/stats", f"/models/{name}/state"):
                assert (await http.get(rep.url + path)).status_code == 421, path
            where = (await http.get(f"{rep.url}/models/{name}/placement")).json()
            assert where["groups"] == body["groups"] and where["joining"] == []
            # The list of models names it among those held elsewhere, with the same holders.
            listed = (await http.get(f"{rep.url}/models")).json()["elsewhere"]
            assert {"name": name, "groups": body["groups"]} in listed, listed
        # Feedback on a replica that does not hold the model: accepted, applied by the holders.
        p = await http.post(f"{holders[0].url}/predict", json={"model": name, "features": x})
        assert p.status_code == 200, p.text
        f = await http.post(
            f"{others[0].url}/feedback",
            json={"decision_id": p.json()["decision_id"], "click": p.json()["label_index"] == y},
        )
        assert f.status_code == 200, f.text
        sums = await converged(http, holders, name, 1)
        assert sums == {(await replay_checksum(d.url, name, "banditron"))[0]}
    # Each heartbeat (every 2 s) reports the group's models only.
    want = {r.proc.pid: placed[g] for g, reps in d.groups.items() for r in reps if r.proc is not None}
    deadline = time.monotonic() + 10
    while True:
        beats = (await http.get(f"{d.replicas[0].url}/replicas")).json()["replicas"]
        reported = {b["pid"]: set(b["models"]) & set(MODELS) for b in beats if b["pid"] in want}
        if reported == want:
            break
        assert time.monotonic() < deadline, (reported, want)
        await asyncio.sleep(0.2)
    figures(
        f"placement on {d.url.split(':')[0]}: group a holds {sorted(placed['a'])}, b {sorted(placed['b'])}"
    )


async def test_the_sdk_routes_by_model_following_one_421(
    deployment: Deployment, http: httpx.AsyncClient
) -> None:
    d = deployment
    name = next(m for m in MODELS if rendezvous(m, GROUPS, 1) == ["b"])
    # One URL given, of group a: the first predict is followed to group b, the rest go there at once.
    async with sdk([d.groups["a"][0].url]) as client:
        if (await http.get(f"{d.groups['b'][0].url}/models/{name}")).status_code == 404:
            await client.create_model(name, "banditron", n_features=5, n_labels=3, seed=3)
        data = Contexts(seed=22)
        base = (await http.get(f"{d.groups['b'][0].url}/models/{name}")).json()["version"]
        for _ in range(20):
            x, y = data.draw()
            p = await client.predict(x, name)
            assert p.server in {r.url for r in d.groups["b"]}
            await client.feedback(p.decision_id, click=p.label_index == y)
        assert client.stats["misdirected"] == 1 and client.stats["retries"] == 1, client.stats
        sums = await converged(http, d.groups["b"], name, base + 20)
        assert len(sums) == 1
        info = await client.get_model(name)  # admin calls about the model are routed too
        assert info.version == base + 20


class SdkLoad:
    """Pairs through the SDK (all four URLs): predict where the model is held, feedback to the
    replica that answered; every acknowledged feedback and its click remembered."""

    def __init__(self, client: AsyncClient, model: str, seed: int) -> None:
        self.client = client
        self.model = model
        self.data = Contexts(seed)
        self.acked: dict[str, bool] = {}
        self.servers: list[str] = []

    async def run(self, workers: int, until: Callable[[], bool]) -> None:
        """Pairs from `workers` concurrent workers until `until()` holds."""

        async def worker() -> None:
            while not until():
                x, y = self.data.draw()
                p = await self.client.predict(x, self.model)
                self.servers.append(p.server)
                click = p.label_index == y
                await self.client.feedback(p.decision_id, click=click)
                self.acked[p.decision_id] = click

        await asyncio.gather(*(worker() for _ in range(workers)))


async def test_a_model_moved_under_load_loses_no_acknowledged_feedback(
    deployment: Deployment, http: httpx.AsyncClient, figures: Callable[[str], None]
) -> None:
    d = deployment
    started = time.monotonic()
    name = "moving-" + d.url.split(":")[0].replace("+", "-")
    source = rendezvous(name, GROUPS, 1)[0]
    target = "b" if source == "a" else "a"
    async with sdk([r.url for r in d.replicas]) as client:
        await client.create_model(name, "banditron", n_features=5, n_labels=3, seed=3)
        load = SdkLoad(client, name, seed=23)
        # The load runs on until 100 pairs were served after the move, however long the move
        # takes on a loaded machine (a fixed count could end inside a slow move).
        after_move: list[int] = []
        running = asyncio.create_task(
            load.run(6, lambda: bool(after_move) and len(load.servers) >= after_move[0] + 100)
        )
        deadline = time.monotonic() + 30
        while len(load.acked) < 60:
            assert not running.done() and time.monotonic() < deadline, "the load ended or stalled"
            await asyncio.sleep(0.01)
        before = len(load.acked)
        moved_at = time.monotonic()
        where = await client.move_model(name, [target])
        move_seconds = time.monotonic() - moved_at
        during = len(load.acked) - before
        after_move.append(len(load.servers))
        assert where["groups"] == {target: [r.url for r in d.groups[target]]}, where
        await running
        # Quiet. Every acknowledged feedback was learned exactly once: each id answers 409 with its
        # outcome, on any replica, and the log holds exactly the acknowledged ids.
        for i, click in list(load.acked.items())[::5]:
            r = await http.post(
                f"{d.replicas[len(i) % 4].url}/feedback", json={"decision_id": i, "click": not click}
            )
            assert r.status_code == 409 and r.json()["first_outcome"]["outcome"] == (
                "click" if click else "no_click"
            )
        sums = await converged(http, d.groups[target], name, len(load.acked))
        offline, logged = await replay_checksum(d.url, name, "banditron")
        assert sums == {offline}
        assert sorted(logged) == sorted(load.acked)
        for rep in d.groups[source]:  # the old holders dropped it
            assert (await http.get(f"{rep.url}/models/{name}")).status_code == 421
        served = {url: load.servers.count(url) for url in sorted(set(load.servers))}
        figures(
            f"move under load ({d.url.split(':')[0]}): {len(load.acked)} acknowledged, all learned once, "
            f"{during} during the {move_seconds:.1f} s move from group {source} to {target}; "
            f"predicts by replica {served}; SDK {dict(client.stats)} in {time.monotonic() - started:.1f} s"
        )
        assert set(load.servers) <= {r.url for r in d.replicas}
        assert {r.url for r in d.groups[target]} & set(load.servers[-50:])  # routed to the new group


async def test_the_sdk_finds_a_models_group_and_an_evaluation_job_on_the_replica_that_runs_it(
    deployment: Deployment,
) -> None:
    """Admin calls about one model follow a 421 to its group; an evaluation job lives in the process
    that started it, and the SDK sends the job's later calls there (4 URLs: round robin would reach
    another replica, which answers 404, three times in four)."""
    d = deployment
    name = "evaluated-" + d.url.split(":")[0].replace("+", "-")
    holders = {r.url for r in d.holders(name)}
    async with sdk([r.url for r in d.replicas]) as client:
        await client.create_model(name, "banditron", n_features=5, n_labels=3, seed=4, log_decisions=True)
        data = Contexts(seed=5)
        for _ in range(20):
            x, y = data.draw()
            p = await client.predict(x, name)
            await client.feedback(p.decision_id, click=p.label_index == y, wait=True)
        stats = await client.model_stats(name, minutes=5)
        assert stats["counts"]["decisions"] == 20
        placed = await client.get_placement(name)
        assert {u for urls in placed["groups"].values() for u in urls} == holders
        job = await client.start_evaluation(name, ["uniform"])
        answered = {r["id"]: r for r in (await client.list_replicas())["replicas"]}
        assert job["replica"] in answered
        for _ in range(8):  # each on the job's replica, never a 404 from another one
            got = await client.get_evaluation(name, job["id"])
            assert got["id"] == job["id"] and got["replica"] == job["replica"]
        await client.delete_model(name)
