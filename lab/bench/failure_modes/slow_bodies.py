"""Failure mode: slow request bodies at the server's descriptor limit (issue 51, item 4).

One ``python -m service serve --demo --memory`` at its default settings, started with a descriptor
limit of :data:`DESCRIPTORS` (``RLIMIT_NOFILE``, set in the child before it runs: the connection
limit is then that less 128). An attacker opens :data:`SLOW` connections that send complete headers
of a ``POST /predict`` and then their body one byte every :data:`TRICKLE` seconds, as long as the
server keeps them (issue 51's scenario: 1,100 at 1,024 descriptors; ``--quick``: 300 at 256). Meanwhile a
client makes predicts one after another, each on a new connection, and counts those answered 200
and their latency.
"""

from __future__ import annotations

import contextlib
import os
import resource
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import numpy as np

TITLE = "Slow request bodies at the descriptor limit (one server, memory store)"
BEFORE = (
    "on main before the fix, per issue #51: 1,100 connections that send 1 byte every 2 s after "
    "full headers, at `ulimit -n` 1,024: 0 predicts served for 15 s"
)

DESCRIPTORS = 1024  # the server's RLIMIT_NOFILE: 896 connections (the limit less 128), as issue 51's
SLOW = 1100  # slow-body connections the attacker keeps open, as issue 51's
QUICK = (256, 300)  # --quick: (descriptors, slow connections)
TRICKLE = 2.0  # seconds between two bytes of a slow body
HEADERS = (
    b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
)
START_TIMEOUT = 120.0


@contextlib.contextmanager
def _server(descriptors: int = DESCRIPTORS) -> Iterator[str]:
    """The server at ``descriptors`` descriptors; yields its URL once ready."""

    def _limit_descriptors() -> None:  # in the server's process, before it runs
        resource.setrlimit(resource.RLIMIT_NOFILE, (descriptors, descriptors))

    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_")}
    cmd = [sys.executable, "-m", "service", "serve", "--demo", "--memory", "--port", str(port)]
    cmd += ["--log-level", "warning"]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_limit_descriptors
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Attacker:
    """``slow`` slow-body connections to ``port``, fed by a thread; ``closed`` counts those the
    server closed (a 408 or an end of file)."""

    def __init__(self, port: int, slow: int = SLOW) -> None:
        self.port = port
        self.slow = slow
        self.closed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Attacker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _open(self, selector: selectors.BaseSelector) -> None:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        s.sendall(HEADERS)
        s.setblocking(False)
        selector.register(s, selectors.EVENT_READ)

    def _run(self) -> None:
        with selectors.DefaultSelector() as selector:
            for _ in range(self.slow):
                self._open(selector)
            next_byte = time.monotonic() + TRICKLE
            while not self._stop.is_set():
                for key, _ in selector.select(timeout=0.05):  # readable: an answer or the end
                    s: socket.socket = key.fileobj  # type: ignore[assignment]
                    with contextlib.suppress(OSError):
                        while s.recv(65536):
                            pass
                    selector.unregister(s)
                    s.close()
                    self.closed += 1
                if time.monotonic() >= next_byte:
                    next_byte += TRICKLE
                    for key in list(selector.get_map().values()):
                        with contextlib.suppress(OSError):
                            key.fileobj.send(b" ")  # type: ignore[union-attr]
            for key in list(selector.get_map().values()):
                key.fileobj.close()  # type: ignore[union-attr]


def _predicts(url: str, seconds: float) -> tuple[int, int, float]:
    """Predicts one after another for ``seconds``, each on a new connection (a fresh client, not one
    connected before the attack): (answered 200, sent, p99 latency in ms)."""
    latencies, failed = [], 0
    no_reuse = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(base_url=url, timeout=5, limits=no_reuse) as client:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = time.perf_counter()
            try:
                body = {"features": {"a": float(len(latencies))}}
                ok = client.post("/predict", json=body).status_code == 200
            except httpx.TransportError:
                ok = False
            latencies.append(time.perf_counter() - t)
            failed += not ok
    return len(latencies) - failed, len(latencies), 1000 * float(np.percentile(latencies, 99))


def run(quick: bool) -> list[tuple[str, str]]:
    """The scenario for 15 s (5 with ``quick``), after 3 s without it (the same client's figures
    on this machine): what was measured, as (what, value) rows."""
    seconds = 5.0 if quick else 15.0
    descriptors, slow = QUICK if quick else (DESCRIPTORS, SLOW)
    with _server(descriptors) as url:
        _, _, idle = _predicts(url, 3.0)
        with Attacker(int(url.rsplit(":", 1)[1]), slow) as attacker:
            time.sleep(1.0)  # every slow connection open and past its headers
            answered, sent, p99 = _predicts(url, seconds)
            closed = attacker.closed
    return [
        (f"slow-body connections (a byte every {TRICKLE:g} s)", f"{slow:,} at {descriptors:,} descriptors"),
        (f"fresh predicts answered in {seconds:g} s", f"{answered:,} of {sent:,}"),
        ("their p99 latency (a new connection each)", f"{p99:.1f} ms"),
        ("the same client's p99 before the slow connections", f"{idle:.1f} ms"),
        ("slow connections the server closed meanwhile", f"{closed:,} of {slow:,}"),
    ]
