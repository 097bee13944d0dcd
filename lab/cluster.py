"""Local processes on loopback: a private ``redis-server`` and replicas (``python -m service serve``).

Used by the staleness benchmark (``python -m service bench staleness``) and the replication tests. Every
wait is bounded: a process that does not come up within :data:`START_TIMEOUT` seconds raises.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx
import redis

START_TIMEOUT = 60.0  # four replicas starting at once on a busy 2-core machine took over 30 s
LOG = ["--log-level", "warning"]


_ISSUED: set[int] = set()


def free_port() -> int:
    """A free TCP port on the loopback interface, never one this process was given before: the
    kernel may hand out a port just released again, and two replicas given one port started as one
    (the second failed to bind while the first answered its readiness probe)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _ISSUED:
            _ISSUED.add(port)
            return port


class RedisServer:
    """A private redis-server on a fixed free port, its files in ``workdir``.

    Parameters
    ----------
    workdir : Path
        Parent of its data directory (the AOF lives there, so a restart replays it).
    aof : bool
        ``--appendonly yes --appendfsync always``: every write is fsynced before Redis replies, so
        whatever was acknowledged survives even ``kill -9``.
    binary : str or None
        Path of ``redis-server``; default: from ``PATH``.
    """

    def __init__(self, workdir: Path, aof: bool = False, binary: str | None = None) -> None:
        self.port = free_port()
        self.dir = workdir / f"redis-{self.port}"
        self.dir.mkdir(parents=True)
        self.aof = aof
        found = binary or shutil.which("redis-server")
        if found is None:
            raise FileNotFoundError("redis-server is not on PATH (apt-get install redis-server)")
        self.binary = found
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start (or restart, on the same port and files) and wait until it answers PING."""
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always"] if self.aof else ["--appendonly", "no"]
        )
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--dir", str(self.dir)]
        self.proc = subprocess.Popen(
            [self.binary, *args, *persistence], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
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
    """One ``python -m service serve`` process with ``REDIS_URL``, on a free loopback port.

    ``env`` adds ``CLICKBOOST_*`` settings; those of the calling environment are not inherited.
    """

    def __init__(self, redis_url: str, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"replica-{self.port}.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_")}
        self.env.update({"REDIS_URL": redis_url, **(env or {})})
        self.cwd: Path | None = None  # where the process runs (None: here)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start (or restart, on the same port); see :meth:`wait_ready`."""
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
                cwd=self.cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self) -> None:
        """Until ``GET /readyz`` answers 200 (models loaded from checkpoint + log)."""
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
        """``kill -9``: no shutdown, in-flight requests fail."""
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
    _start_all(replicas)
    return replicas


def _start_all(replicas: list[Replica]) -> None:
    """Start ``replicas`` in parallel and wait until each is ready; stop them all if one fails."""
    try:
        for r in replicas:
            r.start()
        for r in replicas:
            r.wait_ready()
    except BaseException:
        for r in replicas:
            r.stop()
        raise


def start_groups(
    redis_url: str,
    workdir: Path,
    sizes: Mapping[str, int],
    env: dict[str, str] | None = None,
    copies: int | None = None,
) -> dict[str, list[Replica]]:
    """Replicas in groups (model placement, :mod:`service.placement`): ``sizes`` maps each group
    name to its number of replicas; every replica gets its group, every group's addresses and
    ``copies`` (None: every group holds every model). Started in parallel, each ready on return."""
    groups = {name: [Replica(redis_url, workdir, env) for _ in range(n)] for name, n in sizes.items()}
    addresses = json.dumps({name: [r.url for r in reps] for name, reps in groups.items()})
    everyone = [r for reps in groups.values() for r in reps]
    for name, reps in groups.items():
        for r in reps:
            r.env.update({"CLICKBOOST_REPLICA_GROUP": name, "CLICKBOOST_REPLICA_GROUPS": addresses})
            if copies is not None:
                r.env["CLICKBOOST_PLACEMENT_COPIES"] = str(copies)
    _start_all(everyone)
    return groups


def applied_versions(http: httpx.Client, url: str) -> dict[str, int]:
    """Model -> the log position the replica at ``url`` has applied, from its ``/metrics`` (read as
    is: the admin route ``GET /models/{name}`` would catch the replica up first)."""
    return parse_applied(http.get(f"{url}/metrics").text)


def parse_applied(metrics: str) -> dict[str, int]:
    """Model -> applied log position, from the text of a replica's ``/metrics``."""
    out = {}
    for line in metrics.splitlines():
        if line.startswith('clickboost_model_version{model="'):
            out[line.split('"', 2)[1]] = int(float(line.split()[-1]))
    return out
