"""Failure mode: Personalizer ranks with 10,000 candidate actions (issue 51, item 5).

One ``python -m service serve`` (memory store, API keys set) with a hashed label model of four
labels as its default. A client makes predicts one after another on one keep-alive connection and
records their latency: first alone for a while, then as long again while :data:`SENDERS` other
processes post ranks of :data:`ACTIONS` actions (one small feature each, about 0.7 MB a body)
as fast as the server answers them. Such a rank is refused (its actions are more than the
model's labels); the question is what refusing it costs the others.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections import Counter
from typing import Any

import httpx
import numpy as np

from lab.bench.failure_modes import KEY, grocery_server
from lab.bench.http import _cpu_seconds

TITLE = "Ranks of 10,000 candidate actions beside predicts (one server, memory store)"
BEFORE = (
    "on main before the fix, per issue #51: a rank with 10,000 actions (refused with 400) cost about "
    "200 ms of parsing; two such senders pushed a concurrent predict's p99 to 489 ms"
)

ACTIONS = 10_000
SENDERS = 2
START_TIMEOUT = 120.0  # seconds a sender process may take to start posting (imports, a loaded machine)
PREDICT = {"features": {"user": "u-1", "visits": 3.0, "mobile": True}}


def big_rank() -> bytes:
    """A rank body of :data:`ACTIONS` actions, each with one feature, as Personalizer's examples."""
    actions = [{"id": f"item-{i}", "features": [{"shelf": f"s{i % 7}"}]} for i in range(ACTIONS)]
    return json.dumps({"contextFeatures": [{"user": {"tier": "gold"}}], "actions": actions}).encode()


def _send(url: str, ready: Any, stop: Any, out: Any) -> None:  # in a sender process
    """Post :func:`big_rank` until ``stop`` is set (``ready`` set after the first answer); put
    (status counts, latencies) of those answered after ``ready`` on ``out``."""
    body = big_rank()
    statuses: Counter[int] = Counter()
    latencies = []
    headers = {"content-type": "application/json", "Ocp-Apim-Subscription-Key": KEY}
    with httpx.Client(base_url=url, timeout=30) as client:
        client.post("/personalizer/v1.0/rank", content=body, headers=headers)
        ready.set()
        while not stop.is_set():
            t = time.perf_counter()
            statuses[client.post("/personalizer/v1.0/rank", content=body, headers=headers).status_code] += 1
            latencies.append(time.perf_counter() - t)
    out.put((dict(statuses), latencies))


def _predicts(client: httpx.Client, seconds: float) -> tuple[list[float], int]:
    """Predicts one after another for ``seconds``: their latencies and how many were not 200."""
    latencies, failed = [], 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        failed += client.post("/predict", json=PREDICT).status_code != 200
        latencies.append(time.perf_counter() - t)
    return latencies, failed


def _ms(latencies: list[float], q: float) -> str:
    return f"{1000 * float(np.percentile(latencies, q)):.1f} ms"


def run(quick: bool) -> list[tuple[str, str]]:
    """Predicts alone, then beside the senders, 20 s each (5 with ``quick``): rows of what was measured."""
    seconds = 5.0 if quick else 20.0
    with grocery_server() as (url, pid), httpx.Client(base_url=url, timeout=30) as client:
        client.headers["X-API-Key"] = KEY
        _predicts(client, 1.0)  # warm
        alone, failed_alone = _predicts(client, seconds)
        spawn = multiprocessing.get_context("spawn")
        results, stop = spawn.Queue(), spawn.Event()
        ready = [spawn.Event() for _ in range(SENDERS)]
        senders = [spawn.Process(target=_send, args=(url, r, stop, results)) for r in ready]
        for p in senders:
            p.start()
        try:
            for r in ready:  # every sender posting before the clock starts
                if not r.wait(timeout=START_TIMEOUT):
                    raise RuntimeError("a sender did not start")
            cpu = _cpu_seconds(pid)
            beside, failed_beside = _predicts(client, seconds)
            cpu_beside = _cpu_seconds(pid) - cpu
            stop.set()
            sent = [results.get(timeout=60) for _ in senders]
        finally:
            stop.set()
            for p in senders:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
                    p.join()
    statuses: Counter[int] = Counter()
    rank_latencies: list[float] = []
    for counts, latencies in sent:
        statuses.update(counts)
        rank_latencies += latencies
    answers = ", ".join(f"{n:,} x {code}" for code, n in sorted(statuses.items()))
    return [
        (f"predicts alone for {seconds:g} s: p50 / p99", f"{_ms(alone, 50)} / {_ms(alone, 99)}"),
        (
            f"predicts beside {SENDERS} senders of {ACTIONS:,}-action ranks: p50 / p99",
            f"{_ms(beside, 50)} / {_ms(beside, 99)}",
        ),
        ("predicts not answered 200 (alone, beside)", f"{failed_alone}, {failed_beside}"),
        (f"ranks of {ACTIONS:,} actions posted meanwhile", answers),
        (
            "their answer time as the senders saw it: p50 / p99",
            f"{_ms(rank_latencies, 50)} / {_ms(rank_latencies, 99)}",
        ),
        (
            "server CPU meanwhile, per rank (an upper bound: the predicts' included)",
            f"{1000 * cpu_beside / sum(statuses.values()):.1f} ms",
        ),
    ]
