"""``bench http``: throughput and latency of the HTTP service against a bare FastAPI echo endpoint.

Three loads, one after the other, each for the same duration with the same number of keep-alive
connections from a minimal asyncio HTTP/1.1 client (pre-built requests, so the client stays cheap):

``echo``
    ``POST /echo`` of a separate FastAPI app (same uvicorn settings) that validates the very
    predict body (``{"model", "features": [784 floats]}``) into a pydantic model and returns it:
    FastAPI with no work of its own.
``predict``
    ``POST /predict`` to ``python -m service serve`` with a Banditron model, d=784 (MNIST rows
    scaled to [0, 1]), K=10.
``predict+feedback``
    ``POST /predict`` then ``POST /feedback`` for the returned id (click = sampled label is the
    true one): the full loop of a web app; rate = pairs per second.

Target (issue 3): predict+feedback pairs/s >= 0.5 x echo requests/s, measured in the same run.
Both servers are single uvicorn workers on loopback, up at the same time; the loads run in
interleaved rounds. The client runs in this process, so on a small machine client and server
share the cores and rates are noisy; the server's CPU time per request (from ``/proc``) is the
steadier cost measure and is reported next to the rates.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
from fastapi import FastAPI
from pydantic import BaseModel

from lab.bench import benches
from lab.sim.datasets import load_dataset

TARGET_RATIO = 0.5
CONNECTIONS = 8


class _EchoBody(BaseModel):
    model: str | None = None
    features: list[float]


def echo_app() -> FastAPI:
    """The reference: a FastAPI app whose one endpoint returns its validated body."""
    app = FastAPI()

    @app.post("/echo")
    async def echo(body: _EchoBody) -> _EchoBody:
        return body

    return app


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def _server(cmd: list[str]) -> Iterator[tuple[str, int]]:
    """Run ``cmd`` (``{port}`` substituted) until /openapi.json answers; yield (base URL, pid)."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_")}
    env["CLICKBOOST_STORE"] = "memory"  # the service's hot path, not its disk (SQLite: issue 18)
    proc = subprocess.Popen(
        [c.format(port=port) for c in cmd], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/openapi.json", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server {cmd} did not start") from None
                time.sleep(0.1)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _request(path: str, body: bytes) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _roundtrip(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, bytes]:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    return status, await reader.readexactly(length)


Step = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


async def _load(
    url: str, step: Step, seconds: float, connections: int = CONNECTIONS
) -> tuple[int, float, np.ndarray]:
    """``step(reader, writer, i)`` on ``connections`` connections for ``seconds``: (count, s, latencies)."""
    host, port = url.removeprefix("http://").split(":")
    latencies: list[float] = []
    stop = time.perf_counter() + seconds
    counter = iter(range(10**9))

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                await step(reader, writer, next(counter))
                latencies.append(time.perf_counter() - t0)
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    elapsed = time.perf_counter() - start
    return len(latencies), elapsed, np.array(latencies)


def _bodies(n: int) -> tuple[list[bytes], np.ndarray]:
    data = load_dataset("mnist")
    X, y = data.stream(seed=0, limit=n)
    return [json.dumps({"model": "digits", "features": x.tolist()}).encode() for x in X], y


def steps() -> tuple[Step, Step, Step]:
    """The three loads on one keep-alive connection: echo, predict, and predict then feedback.

    Request i uses MNIST row i (mod 2000); the click is ``sampled label == true label``.
    """
    bodies, labels = _bodies(2000)
    predicts = [_request("/predict", b) for b in bodies]
    echoes = [_request("/echo", b) for b in bodies]

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, i: int) -> None:
        status, _ = await _roundtrip(reader, writer, echoes[i % len(echoes)])
        assert status == 200, status

    async def predict(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, i: int) -> None:
        status, _ = await _roundtrip(reader, writer, predicts[i % len(predicts)])
        assert status == 200, status

    async def pair(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, i: int) -> None:
        status, body = await _roundtrip(reader, writer, predicts[i % len(predicts)])
        assert status == 200, status
        d = json.loads(body)
        click = d["label_index"] == int(labels[i % len(labels)])
        fb = json.dumps({"decision_id": d["decision_id"], "click": click}).encode()
        status, _ = await _roundtrip(reader, writer, _request("/feedback", fb))
        assert status == 200, status

    return echo, predict, pair


@benches.register("http")
def bench_http(quick: bool) -> str:
    """Echo vs predict vs predict+feedback over loopback; markdown table with the target check."""
    seconds, rounds = (2.0, 1) if quick else (5.0, 3)
    echo, predict, pair = steps()
    py = sys.executable
    uv = ["--host", "127.0.0.1", "--port", "{port}", "--log-level", "warning"]

    spec = {
        "learner": "banditron",
        "n_features": 784,
        "n_labels": 10,
        "reward_window_seconds": 5,
        "default_reward": "drop",
    }
    totals = {name: [0, 0.0, 0.0, []] for name in ("echo", "predict", "predict+feedback")}
    with (
        _server([py, "-m", "uvicorn", "lab.bench.http:echo_app", "--factory", *uv]) as (
            echo_url,
            echo_pid,
        ),
        _server([py, "-m", "service", "serve", *uv]) as (url, pid),
    ):
        httpx.put(f"{url}/models/digits", json=spec).raise_for_status()
        # Interleaved rounds, so a burst of load from elsewhere hits all three alike.
        for _ in range(rounds):
            for name, target, server, step in [
                ("echo", echo_url, echo_pid, echo),
                ("predict", url, pid, predict),
                ("predict+feedback", url, pid, pair),
            ]:
                cpu = _cpu_seconds(server)
                count, secs, lat = asyncio.run(_load(target, step, seconds))
                t = totals[name]
                t[0] += count
                t[1] += secs
                t[2] += _cpu_seconds(server) - cpu
                t[3].append(lat)
        version = httpx.get(f"{url}/models/digits").json()["version"]

    rate = {name: t[0] / t[1] for name, t in totals.items()}
    cpu_ms = {name: 1e3 * t[2] / t[0] for name, t in totals.items()}
    lines = [
        f"### HTTP service: Banditron d=784 K=10, {CONNECTIONS} keep-alive connections, "
        f"{rounds} x {seconds:g} s per load",
        "",
        "| load | count | per second | vs echo | server CPU ms each | capacity vs echo | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, t in totals.items():
        p50, p99 = np.percentile(np.concatenate(t[3]), [50, 99]) * 1e3
        lines.append(
            f"| {name} | {t[0]} | {rate[name]:,.0f} | {rate[name] / rate['echo']:.2f} | {cpu_ms[name]:.3f} "
            f"| {cpu_ms['echo'] / cpu_ms[name]:.2f} | {p50:.2f} | {p99:.2f} |"
        )
    ratio = rate["predict+feedback"] / rate["echo"]
    verdict = "met" if ratio >= TARGET_RATIO else "MISSED"
    lines += [
        "",
        f"predict+feedback: {rate['predict+feedback']:,.0f} pairs/s = {ratio:.2f} x echo requests/s "
        f"(target >= {TARGET_RATIO} x): {verdict}. Server CPU per pair = "
        f"{cpu_ms['predict+feedback'] / cpu_ms['echo']:.2f} x per echo request (capacity when the server "
        f"is the bottleneck: {cpu_ms['echo'] / cpu_ms['predict+feedback']:.2f} x). Model version after the "
        f"run: {version} (one learn event per acknowledged feedback).",
    ]
    return "\n".join(lines)
