"""Two replicas on a real 3-master Redis Cluster (issue 25, item 3), all on loopback.

The cluster is the session fixture ``redis_cluster_url`` (tests/conftest.py: three ``redis-server
--cluster-enabled yes`` joined by ``redis-cli --cluster create``); the replicas are ``python -m
service serve`` with ``REDIS_URL=redis+cluster://...``. Three models whose hash slots lie on three
different masters take predict+feedback load spread over both replicas, with duplicate feedbacks
sent to both at once; then every acknowledged feedback is learned exactly once, both replicas hold
one checksum per model, equal to an offline replay of that model's log, and a model created
through one replica is served by the other at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from redis.asyncio.cluster import RedisCluster

from lab.cluster import Replica, start_replicas
from service.store.redis import RedisStore
from tests.service.replication.test_replicas import (
    NO_CHECKPOINTS,
    Contexts,
    converged,
    create_everywhere,
    replay_checksum,
)

pytestmark = pytest.mark.anyio

PAIRS = 60  # per model


@pytest.fixture(scope="module")
def pair(redis_cluster_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Replica]]:
    work: Path = tmp_path_factory.mktemp("cluster-replicas")
    replicas = start_replicas(redis_cluster_url, work, 2, NO_CHECKPOINTS)
    try:
        yield replicas
    finally:
        for r in replicas:
            r.stop()


async def one_model_per_shard(url: str) -> list[str]:
    """Model names whose keys live on three different masters (one name per master)."""
    cluster = RedisCluster.from_url(url.replace("redis+cluster://", "redis://"))
    try:
        await cluster.initialize()
        store = RedisStore(url)
        by_node: dict[str, str] = {}
        for i in range(1000):
            name = f"shard-{i}"
            node = cluster.get_node_from_key(store.key(name, "log")).name
            by_node.setdefault(node, name)
            if len(by_node) == 3:
                await store.close()
                return sorted(by_node.values())
        raise AssertionError(f"the cluster has fewer than 3 masters: {by_node}")
    finally:
        await cluster.aclose()


async def test_two_replicas_converge_on_a_three_shard_cluster_and_learn_each_feedback_once(
    redis_cluster_url: str, pair: list[Replica], http: httpx.AsyncClient
) -> None:
    names = await one_model_per_shard(redis_cluster_url)
    for name in names:
        await create_everywhere(http, pair, name, "banditron")
    data = Contexts(seed=11)
    limit = asyncio.Semaphore(8)

    async def one(t: int, name: str) -> tuple[str, str, str, list[int]]:
        """Predict on one replica, feedback on the other; every fifth id also posted to both at once
        with the other click. Returns (model, id, outcome learned, status codes)."""
        x, y = data.draw()
        a, b = pair[t % 2], pair[(t + 1) % 2]
        async with limit:
            p = await http.post(f"{a.url}/predict", json={"model": name, "features": x})
            assert p.status_code == 200, p.text
            d = p.json()
            click = d["label_index"] == y
            sends = [(b, click)] + ([(a, not click)] if t % 5 == 0 else [])
            answers = await asyncio.gather(
                *(
                    http.post(f"{rep.url}/feedback", json={"decision_id": d["decision_id"], "click": c})
                    for rep, c in sends
                )
            )
        codes = [r.status_code for r in answers]
        assert sorted(codes) in ([200], [200, 409]), [r.text for r in answers]
        won = next(c for (_, c), r in zip(sends, answers, strict=True) if r.status_code == 200)
        return name, d["decision_id"], "click" if won else "no_click", codes

    done = await asyncio.gather(*(one(t, name) for t in range(PAIRS) for name in names))
    for name in names:
        mine = [(i, outcome) for n, i, outcome, _ in done if n == name]
        sums = await converged(http, pair, name, PAIRS)
        offline, logged = await replay_checksum(redis_cluster_url, name, "banditron")
        assert sums == {offline}, name
        assert sorted(logged) == sorted(i for i, _ in mine)
        # Nothing acknowledged is lost: every id answers 409 with the outcome that was learned.
        for i, outcome in mine[:10]:
            r = await http.post(f"{pair[0].url}/feedback", json={"decision_id": i, "click": True})
            assert r.status_code == 409 and r.json()["first_outcome"]["outcome"] == outcome


async def test_a_model_created_through_one_replica_is_served_by_the_other_at_once(
    pair: list[Replica], http: httpx.AsyncClient
) -> None:
    a, b = pair
    spec = {"learner": "banditron", "n_features": 5, "n_labels": 3}
    for i in range(5):
        name = f"ryw-{i}"
        assert (await http.put(f"{a.url}/models/{name}", json=spec)).status_code == 201
        r = await http.post(f"{b.url}/predict", json={"model": name, "features": [0.1] * 5})
        assert r.status_code == 200, r.text
        assert (await http.delete(f"{a.url}/models/{name}")).status_code == 204
        r = await http.post(f"{b.url}/predict", json={"model": name, "features": [0.1] * 5})
        assert r.status_code == 404, r.text
