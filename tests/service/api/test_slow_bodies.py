"""Slow request bodies (issue 51, item 4): a body that has not arrived within
``CLICKBOOST_BODY_TIMEOUT_SECONDS`` of its headers is answered 408 and its connection closed, and at
the descriptor limit connections still sending a body make way for new ones, as slow headers do.
Real uvicorn servers (``serve``) on loopback."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.service.api.test_stalls import _descriptors, p99, wait_ready

pytestmark = pytest.mark.serial  # wall-clock bounds

HEADERS = b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
BODY = b'{"features": {"a": 1.0}}'


@contextlib.contextmanager
def demo_server(log: Path, descriptors: int | None = None, **env: str) -> Iterator[tuple[int, httpx.Client]]:
    """``serve --demo`` on the memory store with ``env``; yields its port and a client once ready."""
    port = free_port()
    full = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_")}
    full |= {"CLICKBOOST_STORE": "memory", **env}
    cmd = [sys.executable, "-m", "service", "serve", "--port", str(port), "--demo", "--log-level", "warning"]
    limit = None if descriptors is None else (lambda: _descriptors(descriptors))
    with log.open("wb") as out:
        server = subprocess.Popen(cmd, env=full, stdout=out, stderr=subprocess.STDOUT, preexec_fn=limit)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            wait_ready(client, server)
            yield port, client
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:  # a locked-out server may not stop on its own
            server.kill()
            server.wait()


def _cut(s: socket.socket) -> bool:
    """The server closed ``s``, after a 408 or without an answer (end of file or a reset in 0.5 s)."""
    s.settimeout(0.5)
    try:
        while s.recv(4096):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def _answer(s: socket.socket, seconds: float) -> bytes:
    """Everything the server sends on ``s`` until it closes it (at most ``seconds``)."""
    s.settimeout(seconds)
    out = b""
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while chunk := s.recv(4096):
            out += chunk
    return out


@pytest.mark.slow
def test_a_slow_body_is_answered_408_at_the_timeout_and_a_timely_one_is_served(tmp_path: Path) -> None:
    """Body timeout 1 s. A body sent a byte every 0.3 s: 408 and closed after 1 s; the same body in
    three pieces within 0.5 s: 200; a large body (640 kB) coming for 2 s at 320 kB/s, above
    MIN_BODY_RATE: 200. The headers' timeout (10 s) has no part in any."""
    env = {"CLICKBOOST_BODY_TIMEOUT_SECONDS": "1", "CLICKBOOST_MAX_BODY_BYTES": "2000000"}
    with demo_server(tmp_path / "server.log", **env) as (port, client):
        slow = socket.create_connection(("127.0.0.1", port), timeout=5)
        slow.sendall(HEADERS % len(BODY))
        t = time.monotonic()
        slow.settimeout(0.3)
        answer = b""
        for byte in BODY:  # the server answers before the body is done
            with contextlib.suppress(OSError):
                slow.sendall(bytes([byte]))
            with contextlib.suppress(TimeoutError):
                if answer := slow.recv(4096):
                    break
        answer += _answer(slow, 2.0)
        cut = time.monotonic() - t
        slow.close()
        timely = socket.create_connection(("127.0.0.1", port), timeout=5)
        timely.sendall(HEADERS % len(BODY))
        for piece in (BODY[:5], BODY[5:15], BODY[15:]):
            time.sleep(0.15)
            timely.sendall(piece)
        served = _answer(timely, 2.0).split(b"\r\n", 1)[0]
        timely.close()
        large_body = BODY[:-1] + b" " * 640_000 + b"}"  # JSON all the same
        large = socket.create_connection(("127.0.0.1", port), timeout=5)
        large.sendall(HEADERS % len(large_body))
        t = time.monotonic()
        for start in range(0, len(large_body), 32_000):
            large.sendall(large_body[start : start + 32_000])
            time.sleep(0.1)
        sent_for = time.monotonic() - t
        large_served = _answer(large, 2.0).split(b"\r\n", 1)[0]
        large.close()
        after = client.post("/predict", json={"features": {"a": 1.0}}).status_code
    print(
        f"\nslow body: {answer.splitlines()[0] if answer else b'nothing'!r} after {cut:.2f} s; "
        f"timely: {served!r}; large, sent for {sent_for:.1f} s: {large_served!r}"
    )
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"request body not received within 1 s" in answer and b"connection: close" in answer
    assert 1.0 <= cut < 1.8, cut
    assert served == b"HTTP/1.1 200 OK" and after == 200
    assert sent_for > 1.5 and large_served == b"HTTP/1.1 200 OK"


@pytest.mark.slow
def test_slow_body_connections_do_not_lock_out_other_clients(tmp_path: Path) -> None:
    """300 connections that send full headers and then a byte of their body every 2 s, against a
    server at 256 descriptors (128 connections): a fresh client's predicts are answered (p99 < 100
    ms), every slow connection is closed by the body timeout (3 s) or the limit, and the log says so."""
    log = tmp_path / "server.log"
    env = {"CLICKBOOST_HEADER_TIMEOUT_SECONDS": "3", "CLICKBOOST_BODY_TIMEOUT_SECONDS": "3"}
    slow: list[socket.socket] = []
    stop = threading.Event()

    def trickle() -> None:  # a byte of each body every 2 s, as long as the server keeps reading
        while not stop.wait(2.0):
            for s in slow:
                with contextlib.suppress(OSError):
                    s.send(b" ")

    dripping = threading.Thread(target=trickle, daemon=True)
    try:
        with demo_server(log, 256, **env) as (port, _):
            for _ in range(300):
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.sendall(HEADERS % 1000 + b"{")
                slow.append(s)
            dripping.start()
            time.sleep(0.5)
            latencies, failed = [], 0
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as fresh:
                for i in range(100):
                    if failed >= 5:  # locked out: no need to wait for the rest
                        break
                    t = time.perf_counter()
                    try:
                        ok = fresh.post("/predict", json={"features": {"a": float(i)}}).status_code == 200
                    except httpx.TransportError:
                        ok = False
                    latencies.append(time.perf_counter() - t)
                    failed += not ok
            time.sleep(3.5)  # the body timeout closes what is left of the slow ones
            stop.set()
            closed = sum(_cut(s) for s in slow)
    finally:
        stop.set()
        for s in slow:
            s.close()
    lines = [line for line in log.read_text().splitlines() if "clickboost.connections" in line]
    print(
        f"\n300 slow-body connections at 256 descriptors: {len(latencies) - failed}/{len(latencies)} "
        f"fresh predicts answered, p99 {p99(latencies):.1f} ms; {closed} slow connections closed by "
        "the server; log:\n" + "\n".join(lines)
    )
    assert failed == 0 and p99(latencies) < 100
    assert closed == 300 and any("request body" in line for line in lines)
