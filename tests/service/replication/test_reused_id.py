"""A client-chosen decision id reused by 50 concurrent predicts on two replicas over one Redis
(issue 51, item 1), beside four other clients using drawn ids: exactly one 200, 409 for the rest,
no server error, no dropped connection, every other client's request answered 200, and the model's
event log and decision log hold each learned decision exactly once.

On main before the fix the Redis predict script added the refused decision's decision-log entry and
deleted it again, which left the stream's last id above its entries: a decision created just behind
failed inside Redis (500s for the reused id, and for the other clients). The burst is the failure-mode
scenario's (:mod:`lab.bench.failure_modes.reused_id`), three rounds of it with fresh ids.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from lab.bench.failure_modes.reused_id import CLIENTS, MODEL, PAIRS, SAME, burst, create_model
from lab.cluster import RedisServer, Replica, start_replicas
from service.store.redis import RedisStore
from tests.conftest import redis_server_binary

pytestmark = pytest.mark.anyio

ROUNDS = 3


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, list[Replica]]]:
    """A private Redis, two replicas serving :data:`MODEL` (it keeps a decision log: the default)."""
    work = tmp_path_factory.mktemp("reused-id")
    server = RedisServer(work, binary=redis_server_binary())
    server.start()
    replicas: list[Replica] = []
    try:
        replicas = start_replicas(server.url, work, 2)
        create_model([r.url for r in replicas])
        yield server, replicas
    finally:
        for r in replicas:
            r.stop()
        server.stop()


async def test_a_reused_id_is_one_200_and_409s_and_leaves_other_clients_alone(
    pair: tuple[RedisServer, list[Replica]], http: httpx.AsyncClient, figures: Callable[[str], None]
) -> None:
    server, replicas = pair
    urls = [r.url for r in replicas]
    learned: list[str] = []  # every decision whose feedback was acknowledged
    for n in range(ROUNDS):
        got = await burst(urls, f"reused-{n}")
        figures(f"round {n}: reused id {got.reused.row()}, other clients {got.others.row()}")
        assert dict(got.reused.counts) == {"200": 1, "409": SAME - 1}, got.reused.row()
        assert dict(got.others.counts) == {"200": 2 * CLIENTS * PAIRS}, got.others.row()
        assert got.winner is not None and got.winner.startswith(f"reused-{n}.")
        assert len(got.learned) == CLIENTS * PAIRS
        # The one accepted decision of the reused id is learned once too, its id taken for good.
        r = await http.post(f"{urls[1]}/feedback", json={"decision_id": got.winner, "click": True})
        assert r.status_code == 200, r.text
        r = await http.post(
            f"{urls[0]}/predict", json={"model": MODEL, "features": [0.0] * 5, "decision_id": f"reused-{n}"}
        )
        assert r.status_code == 409 and "taken" in r.json()["detail"]
        learned += [*got.learned, got.winner]

    # The event log: one learn event per acknowledged feedback, in contiguous positions; the decision
    # log: exactly the decisions made (each answered); the counters say the same.
    store = RedisStore(server.url)
    try:
        events = await store.read_log(MODEL, after=0, limit=10_000)
        logged, after = [], None
        while True:
            page, after = await store.read_decision_log(MODEL, after=after)
            logged += page
            if after is None:
                break
        counts = await store.counts(MODEL)
    finally:
        await store.close()
    assert [e.position for e in events] == list(range(1, len(learned) + 1))
    assert sorted(e.decision_id for e in events) == sorted(learned)
    assert sorted(d.decision_id for d in logged) == sorted(learned)
    assert all(d.outcome in ("click", "no_click") for d in logged)
    assert (counts.decisions, counts.pending, counts.clicks + counts.no_clicks) == (
        len(learned),
        0,
        len(learned),
    )

    # Both replicas apply all of it and hold the same model.
    deadline = time.monotonic() + 20
    sums = set()
    for url in urls:
        while (info := (await http.get(f"{url}/models/{MODEL}")).json())["version"] < len(learned):
            assert time.monotonic() < deadline, f"{url} stuck at {info['version']} < {len(learned)}"
            await asyncio.sleep(0.05)
        assert info["version"] == len(learned)
        sums.add(info["checksum"])
    assert len(sums) == 1
