"""Failure mode: one client-chosen decision id sent by 50 requests at once (issue 51, item 1).

Two replicas (``python -m service serve``) share a private ``redis-server`` on loopback. 50
``POST /predict`` with one ``decision_id`` go out at once, alternately to the two replicas, while four
other clients each make predict + feedback pairs with drawn ids on both replicas. A taken id is
refused (409) and must change nothing: exactly one 200, no server error, and every request of the
other clients answered 200. Each round uses a fresh id.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from lab.cluster import RedisServer, Replica, start_replicas

TITLE = "A client-chosen decision id reused by 50 concurrent predicts (two replicas, Redis)"
BEFORE = (
    "on main before the fix, per issue #51: 50 concurrent predicts with one decision_id over two "
    "replicas: 1 x 200, 21 x 409, 28 x 500; four other clients with drawn ids at the same time: "
    "32 x 500 and 16 dropped connections"
)

MODEL = "reused"
SPEC = {"learner": "banditron", "n_features": 5, "n_labels": 3, "seed": 3, "reward_window_seconds": 600}
SAME = 50  # concurrent predicts with one id per round
CLIENTS = 4  # other clients, each with drawn ids
PAIRS = 6  # predict + feedback pairs per other client and round
TIMEOUT = 10.0  # seconds per request (a request that takes longer is counted as dropped)
FEATURES = [0.5, -1.0, 0.25, 2.0, -0.75]


@dataclass
class Tally:
    """Answers by kind: ``200``, ``409``, ``5xx``, ``other`` (any other status), ``dropped`` (no
    answer: the connection failed or the request timed out)."""

    counts: Counter[str] = field(default_factory=Counter)

    def add(self, answer: httpx.Response | None) -> None:
        if answer is None:
            self.counts["dropped"] += 1
        elif answer.status_code in (200, 409):
            self.counts[str(answer.status_code)] += 1
        elif answer.status_code >= 500:
            self.counts["5xx"] += 1
        else:
            self.counts["other"] += 1

    def row(self) -> str:
        """``200 / 409 / 5xx / dropped`` counts (and any other status after them)."""
        c = self.counts
        text = f"{c['200']} / {c['409']} / {c['5xx']} / {c['dropped']}"
        return text + (f" (and {c['other']} other)" if c["other"] else "")


@dataclass
class Round:
    """What one round saw: the reused id's answers, the other clients' answers, the decision id the
    one accepted predict of the reused id was given (None if none), and the decision ids whose
    feedback the other clients had acknowledged (each learned once)."""

    reused: Tally
    others: Tally
    winner: str | None
    learned: list[str]


async def _post(client: httpx.AsyncClient, url: str, body: dict[str, object]) -> httpx.Response | None:
    try:
        return await client.post(url, json=body)
    except httpx.HTTPError:  # refused, reset, closed without an answer, or timed out
        return None


async def burst(urls: list[str], decision_id: str, model: str = MODEL) -> Round:
    """One round: :data:`SAME` predicts with ``decision_id`` at once, alternately to ``urls``, beside
    :data:`CLIENTS` clients making :data:`PAIRS` predict + feedback pairs each (drawn ids, the predict
    on one replica and the feedback on the other)."""
    reused, others, learned = Tally(), Tally(), []
    winner: list[str] = []
    start = asyncio.Event()

    async def same(client: httpx.AsyncClient, i: int) -> None:
        await start.wait()
        body = {"model": model, "features": FEATURES, "decision_id": decision_id}
        answer = await _post(client, f"{urls[i % len(urls)]}/predict", body)
        reused.add(answer)
        if answer is not None and answer.status_code == 200:
            winner.append(answer.json()["decision_id"])

    async def other(k: int) -> None:
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            await start.wait()
            for j in range(PAIRS):
                here, there = urls[(k + j) % len(urls)], urls[(k + j + 1) % len(urls)]
                answer = await _post(client, f"{here}/predict", {"model": model, "features": FEATURES})
                others.add(answer)
                if answer is None or answer.status_code != 200:
                    continue
                did = answer.json()["decision_id"]
                answer = await _post(client, f"{there}/feedback", {"decision_id": did, "click": j % 2 == 0})
                others.add(answer)
                if answer is not None and answer.status_code == 200:
                    learned.append(did)

    limits = httpx.Limits(max_connections=SAME, max_keepalive_connections=SAME)
    async with httpx.AsyncClient(timeout=TIMEOUT, limits=limits) as client:
        tasks = [asyncio.create_task(same(client, i)) for i in range(SAME)]
        tasks += [asyncio.create_task(other(k)) for k in range(CLIENTS)]
        await asyncio.sleep(0.2)  # every task waiting: they start together
        start.set()
        await asyncio.gather(*tasks)
    return Round(reused, others, winner[0] if len(winner) == 1 else None, learned)


def create_model(urls: list[str], model: str = MODEL) -> None:
    """Create ``model`` through the first replica and wait (bounded) until every replica serves it."""
    httpx.put(f"{urls[0]}/models/{model}", json=SPEC, timeout=60).raise_for_status()
    for url in urls:
        for _ in range(300):
            if httpx.get(f"{url}/models/{model}", timeout=10).status_code == 200:
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"{url} never loaded {model!r}")


def run(quick: bool) -> list[tuple[str, str]]:
    """Rounds of :func:`burst` on two fresh replicas over a private Redis: the answers' counts."""
    rounds = 1 if quick else 5
    reused, others = Tally(), Tally()
    with tempfile.TemporaryDirectory(prefix="clickboost-reused-id-") as tmp:
        redis = RedisServer(Path(tmp))
        redis.start()
        replicas: list[Replica] = []
        try:
            replicas = start_replicas(redis.url, Path(tmp), 2)
            urls = [r.url for r in replicas]
            create_model(urls)
            for n in range(rounds):
                got = asyncio.run(burst(urls, f"reused-{n}"))
                reused.counts.update(got.reused.counts)
                others.counts.update(got.others.counts)
        finally:
            for r in replicas:
                r.stop()
            redis.stop()
    what = f"{rounds} round{'s' if rounds > 1 else ''}"
    kinds = "200 / 409 / 5xx / dropped"
    return [
        (f"{SAME} concurrent predicts with one decision_id, 2 replicas ({what}): {kinds}", reused.row()),
        (
            f"{CLIENTS} other clients meanwhile, {PAIRS} predict+feedback pairs each ({what}): {kinds}",
            others.row(),
        ),
    ]
