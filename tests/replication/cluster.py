"""Real processes on loopback for the replication tests: a private redis-server and uvicorn replicas.

Every test owns its Redis (so it may kill or restart it) and its replicas (``python -m service serve``
with ``REDIS_URL`` pointing at that Redis). Everything is bounded in time: a process that does not
come up within its deadline fails the test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import redis

from tests.conftest import free_port, redis_server_binary

START_TIMEOUT = 30.0
LOG = ["--log-level", "warning"]


class RedisServer:
    """A private redis-server on a fixed free port; with ``aof`` every write is fsynced before the reply."""

    def __init__(self, workdir: Path, aof: bool = False) -> None:
        self.port = free_port()
        self.dir = workdir / f"redis-{self.port}"
        self.dir.mkdir(parents=True)
        self.aof = aof
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always"] if self.aof else ["--appendonly", "no"]
        )
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--dir", str(self.dir)]
        self.proc = subprocess.Popen(
            [redis_server_binary(), *args, *persistence],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, socket_timeout=1.0)
        deadline = time.monotonic() + START_TIMEOUT
        try:
            while True:
                try:
                    if client.ping():
                        return
                except redis.RedisError:  # refused, or still loading its AOF
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("private redis-server did not start")
                time.sleep(0.02)
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL: no shutdown hook, only what the AOF already holds survives."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


class Replica:
    """One ``python -m service serve`` process on a free loopback port."""

    def __init__(self, redis_url: str, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"replica-{self.port}.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_")}
        self.env.update({"REDIS_URL": redis_url, **(env or {})})
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "service",
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    *LOG,
                ],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"replica exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}"
                )
            try:
                if httpx.get(self.url + "/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"replica not ready:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            self.proc = None


def start_replicas(redis_url: str, workdir: Path, n: int, env: dict[str, str] | None = None) -> list[Replica]:
    """``n`` replicas started in parallel, each ready (``/readyz`` 200) on return."""
    replicas = [Replica(redis_url, workdir, env) for _ in range(n)]
    for r in replicas:
        r.start()
    for r in replicas:
        r.wait_ready()
    return replicas
