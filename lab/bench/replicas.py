"""``bench replicas``: predict and predict+feedback over HTTP with 1 and 2 replicas sharing Redis.

Issue 9 part 3. Reuses the load generator of :mod:`lab.bench.http` (keep-alive HTTP/1.1
connections, pre-built requests, Banditron d=784 K=10 on MNIST rows) and the local processes of
:mod:`lab.cluster` (a private ``redis-server``, ``python -m service serve`` replicas with
``REDIS_URL``). In the same run, the bare FastAPI echo endpoint of :func:`lab.bench.http.echo_app`
takes the same load, so each rate is also given as a ratio to it. With 2 replicas the connections
are split evenly between them. Client, Redis and replicas share the machine's cores.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from lab.bench import benches, report
from lab.bench.http import CONNECTIONS, Step, _load, _server, steps
from lab.cluster import RedisServer, start_replicas

SPEC = {
    "learner": "banditron",
    "n_features": 784,
    "n_labels": 10,
    "reward_window_seconds": 5,
    "default_reward": "drop",
}


async def _spread(urls: list[str], step: Step, seconds: float) -> tuple[int, float, np.ndarray]:
    """:func:`_load` on every URL at once (each with ``CONNECTIONS`` connections / len(urls))."""
    runs = await asyncio.gather(*(_load(u, step, seconds, CONNECTIONS // len(urls)) for u in urls))
    return sum(r[0] for r in runs), max(r[1] for r in runs), np.concatenate([r[2] for r in runs])


def _wait_model(urls: list[str]) -> None:
    deadline = time.monotonic() + 15
    for url in urls:
        while httpx.get(f"{url}/models/digits").status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} never loaded the model")
            time.sleep(0.05)


@benches.register("replicas")
def bench(quick: bool) -> str:
    """Rates and latency percentiles of echo, predict, predict+feedback with 1 and 2 Redis replicas."""
    seconds = 2.0 if quick else 8.0
    echo, predict, pair = steps()

    uv = ["--host", "127.0.0.1", "--port", "{port}", "--log-level", "warning"]
    echo_cmd = [sys.executable, "-m", "uvicorn", "lab.bench.http:echo_app", "--factory", *uv]
    rows = []
    with _server(echo_cmd) as (echo_url, _):
        base = asyncio.run(_spread([echo_url], echo, seconds))
        rows.append(("echo (bare FastAPI)", 1, base))
        for n in (1, 2):
            with tempfile.TemporaryDirectory(prefix="clickboost-replicas-") as tmp:
                redis = RedisServer(Path(tmp))
                redis.start()
                replicas = []
                try:
                    replicas = start_replicas(redis.url, Path(tmp), n)
                    urls = [r.url for r in replicas]
                    # the first model of a fresh replica loads its learner's kernels (about 1 s here,
                    # more on a loaded machine: httpx's default 5 s timed out once)
                    httpx.put(f"{urls[0]}/models/digits", json=SPEC, timeout=60).raise_for_status()
                    _wait_model(urls)
                    rows.append(("predict", n, asyncio.run(_spread(urls, predict, seconds))))
                    rows.append(("predict+feedback", n, asyncio.run(_spread(urls, pair, seconds))))
                finally:
                    for r in replicas:
                        r.stop()
                    redis.stop()
    echo_rate = base[0] / base[1]
    table_rows = []
    for name, n, (count, secs, lat) in rows:
        p50, p95, p99 = np.percentile(lat, [50, 95, 99]) * 1e3
        rate = count / secs
        table_rows.append(
            [
                name,
                n,
                f"{count:,}",
                f"{rate:,.0f}",
                f"{rate / echo_rate:.2f}",
                f"{p50:.1f}",
                f"{p95:.1f}",
                f"{p99:.1f}",
            ]
        )
    flag = " --quick" if quick else ""
    pairs = {n: c / s for name, n, (c, s, _) in rows if name == "predict+feedback"}
    return "\n\n".join(
        [
            f"## HTTP with Redis replicas\n\n`python -m service bench replicas{flag}`. {report.machine()}",
            f"Banditron d=784 K=10 (MNIST rows), {CONNECTIONS} keep-alive connections in total (split evenly "
            f"over the replicas), {seconds:g} s per load; rates and latencies are absolute (ms per request, "
            "per predict+feedback pair for that load), `vs echo` is the ratio to the bare FastAPI echo "
            "endpoint measured in the same run. Client, Redis and the replicas share the machine's cores.",
            report.table(
                ["load", "replicas", "count", "per second", "vs echo", "p50 ms", "p95 ms", "p99 ms"],
                table_rows,
            ),
            f"predict+feedback pairs/s, 2 replicas / 1 replica: {pairs[2] / pairs[1]:.2f}. All processes "
            "share one 2-core machine with other work, and the echo baseline is measured once, first: "
            "ratios move by large factors between runs, so read them as noisy.",
        ]
    )
