"""``bench http``: throughput and latency of the HTTP service against a bare FastAPI echo endpoint.

Kinds of load, one after the other, each for the same duration with 8 keep-alive connections
unless said, from a minimal asyncio HTTP/1.1 client (pre-built requests, so the client stays cheap):

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
``predict+feedback, hashed b=18``
    The same loop with a hashed Banditron (``hashing_bits`` 18, K=10, 20 MB of weights) on the same
    server: 30 named string features per request (``{"f0": "v17", ...}``, 100 values each, the true
    label is f0's value mod 10). Run with 8 connections and with 1 (sequential) beside the dense
    model's loop with 1; target (issue 19): hashed pairs/s >= 0.9 x dense, both ways.
``predict+feedback, hashed b=18, banditboost``
    The same hashed loop on a BanditBoost model at its defaults (N = 100 Perceptrons per label,
    kept in its lazy store for hashed input) beside the hashed Banditron, 8 connections; target
    (issue 20): >= 0.7 x Banditron.
``..., checkpoints every 100`` / ``..., checkpoints off``
    The hashed loop on two more servers of the default store, one writing a checkpoint every 100
    events (``CLICKBOOST_CHECKPOINT_EVERY``), the other never; the latency of the predict requests
    alone is recorded. Target (issue 19): predict p99 with checkpoints <= 2 x without, same run.
    The section also gives that model's latest stored checkpoint (version, bytes) and the time and
    size of encoding its final state sparse (as checkpoints are) and plain.

The service runs once per store of :data:`STORES`, each its own server process: ``memory``
(the rows ``predict`` and ``predict+feedback``, dense and hashed), ``sqlite-normal`` and ``sqlite-full`` (the
embedded SQLite store, WAL, in its own temporary data directory, with
``CLICKBOOST_SQLITE_SYNCHRONOUS`` normal or full). The two SQLite rows of each load give the fsync
cost of a durable feedback as a ratio measured in the same run; ``sqlite-full`` is the service's
default. The data directories are made by :mod:`tempfile` (``$TMPDIR``); the section names their
file system, since on tmpfs an fsync costs nothing.

``predict+feedback, sqlite-full, before (...)``
    Not with ``--quick``: the same loop on one more ``sqlite-full`` server running commit
    :data:`BEFORE` (the last before the SQLite group commit, issue 40), from a ``git worktree`` of it
    with its C extensions built, so that before and after are measured in the same run.

fsyncs per acknowledged feedback: the ``fsync`` and ``fdatasync`` calls of the SQLite servers'
processes (all threads: the group commit's, the checkpointer's, SQLite's own) during their
predict+feedback loads, counted by ``perf stat`` on the syscall tracepoints (Linux, root or
``perf_event_paranoid`` <= -1; the column says "n/a" without it), divided by the pairs (each pair
acknowledges one feedback). Targets (issue 40): sqlite-full pairs/s >= 0.55 x echo, <= 0.35 fsyncs
per acknowledged feedback.

Target (issue 3): predict+feedback pairs/s >= 0.5 x echo requests/s, measured in the same run.
All servers are single uvicorn workers on loopback, up at the same time; the loads run in
interleaved rounds. The client runs in this process, so on a small machine client and server
share the cores and rates are noisy; the server's CPU time per request (from ``/proc``) is the
steadier cost measure and is reported next to the rates. Waiting for an fsync is not CPU time, so
the cost of ``sqlite-full`` shows in its rate, not in its CPU column.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
from fastapi import FastAPI
from pydantic import BaseModel

from lab.bench import benches, redis_cost, report
from lab.cluster import free_port
from lab.sim.datasets import load_dataset
from service.config import Settings
from service.serial import decode, encode, encode_sparse

TARGET_RATIO = 0.5
CONNECTIONS = 8
STORES = ("memory", "sqlite-normal", "sqlite-full")
HASHED_BITS = 18
NAMED_FEATURES = 30
HASHED_TARGET = 0.9  # hashed pairs/s vs dense pairs/s
BOOSTER = "banditboost"  # served hashed beside the hashed Banditron (issue 20), at its defaults
BOOSTER_TARGET = 0.7  # its pairs/s vs the hashed Banditron's
CHECKPOINT_EVERY = 100
CHECKPOINT_TARGET = 2.0  # predict p99 with checkpoints vs without
#: The code measured as "before" the SQLite group commit (issue 40): the last commit without it.
BEFORE = "5835322"
GROUP_TARGET = 0.55  # sqlite-full pairs/s vs echo requests/s (issue 40)
FSYNC_TARGET = 0.35  # fsyncs per acknowledged feedback on sqlite-full (issue 40)


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


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def _servers(cmds: dict[str, tuple[list[str], dict[str, str]]]) -> Iterator[dict[str, tuple[str, int]]]:
    """Start every ``name: (cmd, settings)`` at once, wait until each is ready (``/readyz`` 200; the
    echo app, which has none, 404).

    Yields ``name: (base URL, pid)``. ``{port}`` in a command is substituted with a free port; the
    calling environment's ``CLICKBOOST_*`` settings are dropped and ``settings`` added.
    """
    procs: dict[str, tuple[str, subprocess.Popen[bytes]]] = {}
    try:
        for name, (cmd, settings) in cmds.items():
            port = free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_")} | settings
            procs[name] = (
                f"http://127.0.0.1:{port}",
                subprocess.Popen(
                    [c.format(port=port) for c in cmd],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                ),
            )
        deadline = time.monotonic() + 300  # a cold start compiles the kernels first
        for name, (url, proc) in procs.items():
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"{url}/readyz", timeout=1).status_code in (200, 404):
                        break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server {name} ({cmds[name][0]}) did not start")
                time.sleep(0.1)
        yield {name: (url, proc.pid) for name, (url, proc) in procs.items()}
    finally:
        for _, proc in procs.values():
            proc.terminate()
        for _, proc in procs.values():
            proc.wait(timeout=10)


@contextmanager
def _server(cmd: list[str], settings: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    """Run ``cmd`` (``{port}`` substituted) until it is ready; yield (base URL, pid).

    The calling environment's ``CLICKBOOST_*`` settings are dropped; ``settings`` adds some.
    """
    with _servers({"server": (cmd, settings or {})}) as up:
        yield up["server"]


def store_settings(store: str, data_dir: Path) -> dict[str, str]:
    """The ``CLICKBOOST_*`` settings of ``store`` (one of :data:`STORES`); SQLite's file in ``data_dir``."""
    if store == "memory":
        return {"CLICKBOOST_STORE": "memory"}
    if store not in STORES:
        raise ValueError(f"store {store!r}: expected one of {', '.join(STORES)}")
    return {
        "CLICKBOOST_STORE": "sqlite",
        "CLICKBOOST_DATA_DIR": str(data_dir),
        "CLICKBOOST_SQLITE_SYNCHRONOUS": store.removeprefix("sqlite-"),
    }


def default_store() -> str:
    """The store of ``make run`` (no ``CLICKBOOST_*`` settings), in the names of :data:`STORES`."""
    fields = Settings.model_fields
    store = fields["store"].default
    return f"sqlite-{fields['sqlite_synchronous'].default}" if store == "sqlite" else store


def _fs_type(path: str) -> str:
    """The file system type of ``path`` (longest mount point of ``/proc/self/mounts``), or ``unknown``."""
    real, best, kind = os.path.realpath(path), "", "unknown"
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return kind
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


@contextmanager
def _fsyncs(pid: int) -> Iterator[list[int]]:
    """Count the ``fsync`` + ``fdatasync`` calls of process ``pid`` (every thread) while the block runs,
    with ``perf stat`` on the syscall tracepoints; the yielded list holds the count afterwards, or
    stays empty where perf is missing or not allowed."""
    out: list[int] = []
    events = "syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync"
    try:
        perf = subprocess.Popen(
            ["perf", "stat", "-x,", "-e", events, "-p", str(pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
    except OSError:
        yield out
        return
    time.sleep(0.2)  # attached
    try:
        yield out
    finally:
        perf.send_signal(signal.SIGINT)
        _, err = perf.communicate(timeout=30)
        counts = [line.split(",")[0] for line in err.splitlines() if "sys_enter_f" in line]
        if len(counts) == 2 and all(c.isdigit() for c in counts):  # perf ends on SIGINT, counts printed
            out.append(sum(int(c) for c in counts))


def _checkout_before() -> Path | None:
    """A worktree of :data:`BEFORE` with the C extensions of this checkout copied in (built by ``make
    install-dev``, from the same sources), or None when that cannot be had: not a git checkout, the
    extensions not built here, or their sources changed since."""
    path = redis_cost.checkout(BEFORE)
    sources = ["service/_features.c", "service/_decisions.c"]
    same = subprocess.run(["git", "-C", str(redis_cost.ROOT), "diff", "--quiet", BEFORE, "--", *sources])
    built = [
        *(redis_cost.ROOT / "service").glob("_features*.so"),
        *(redis_cost.ROOT / "service").glob("_decisions*.so"),
    ]
    if path is None or same.returncode != 0 or len(built) < 2:
        return None
    for so in built:
        shutil.copy2(so, path / "service" / so.name)
    return path


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


def _hashed_bodies(n: int, model: str = "hashed") -> tuple[list[bytes], np.ndarray]:
    """``n`` predict bodies of the model ``model`` (30 features ``"f{j}": "v{0..99}"``, seeded) and
    their true labels (f0's value mod 10)."""
    values = np.random.default_rng(0).integers(0, 100, size=(n, NAMED_FEATURES))
    bodies = [
        json.dumps({"model": model, "features": {f"f{j}": f"v{v}" for j, v in enumerate(row)}}).encode()
        for row in values
    ]
    return bodies, values[:, 0] % 10


def _pair(bodies: list[bytes], labels: np.ndarray, predict_latencies: list[float] | None = None) -> Step:
    """Predict request i (mod len), then its feedback (click = sampled label is the true one);
    the predict's latency is appended to ``predict_latencies`` if given."""
    predicts = [_request("/predict", b) for b in bodies]

    async def pair(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, i: int) -> None:
        t0 = time.perf_counter()
        status, body = await _roundtrip(reader, writer, predicts[i % len(predicts)])
        if predict_latencies is not None:
            predict_latencies.append(time.perf_counter() - t0)
        assert status == 200, status
        d = json.loads(body)
        click = d["label_index"] == int(labels[i % len(labels)])
        fb = json.dumps({"decision_id": d["decision_id"], "click": click}).encode()
        status, _ = await _roundtrip(reader, writer, _request("/feedback", fb))
        assert status == 200, status

    return pair


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

    return echo, predict, _pair(bodies, labels)


def _checkpoint_row(path: Path, model: str) -> tuple[int, int] | None:
    """``(position, bytes)`` of ``model``'s checkpoint in the SQLite file ``path`` (read-only), if any."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute(
            "SELECT c.position, length(c.state) FROM checkpoints c JOIN models m ON m.id = c.model "
            "WHERE m.name = ?",
            (model,),
        ).fetchone()
    finally:
        db.close()


def _encode_costs(state: bytes) -> tuple[tuple[int, float], tuple[int, float]]:
    """``(bytes, best ms)`` of the checkpoint encodings of an exported state: plain, then sparse."""
    decoded = decode(state)
    out = []
    for encoder in (encode, encode_sparse):
        best = min(timeit.repeat(lambda e=encoder: e(decoded), number=1, repeat=5))
        out.append((len(encoder(decoded)), 1e3 * best))
    return out[0], out[1]


@benches.register("http")
def bench_http(quick: bool) -> str:
    """Echo vs predict vs predict+feedback on each store, dense vs hashed, checkpoints on vs off,
    over loopback; markdown table and target checks."""
    seconds, rounds = (1.0, 1) if quick else (5.0, 3)
    echo, predict, pair = steps()
    hashed_bodies, hashed_labels = _hashed_bodies(2000)
    hashed_pair = _pair(hashed_bodies, hashed_labels)
    booster_pair = _pair(*_hashed_bodies(2000, "hashed-boost"))
    predict_lat: dict[str, list[float]] = {"on": [], "off": []}
    py = sys.executable
    uv = ["--host", "127.0.0.1", "--port", "{port}", "--log-level", "warning"]

    common = {"n_labels": 10, "reward_window_seconds": 5, "default_reward": "drop"}
    dense = {"learner": "banditron", "n_features": 784, **common}
    hashed = {"learner": "banditron", "hashing_bits": HASHED_BITS, **common}
    booster = {"learner": BOOSTER, "hashing_bits": HASHED_BITS, **common}
    cp_store = default_store()
    # server -> (store, extra settings): one per store, and the two of the checkpoint rows
    servers: dict[str, tuple[str, dict[str, str]]] = {store: (store, {}) for store in STORES}
    # The booster on a server of its own: its checkpoints (hundreds of MB) would burden the others.
    servers["booster"] = ("memory", {})
    servers["checkpoints-on"] = (cp_store, {"CLICKBOOST_CHECKPOINT_EVERY": str(CHECKPOINT_EVERY)})
    servers["checkpoints-off"] = (
        cp_store,
        {"CLICKBOOST_CHECKPOINT_EVERY": "1000000000", "CLICKBOOST_CHECKPOINT_INTERVAL_SECONDS": "1e9"},
    )
    before = None if quick else _checkout_before()
    before_row = f"predict+feedback, sqlite-full, before ({BEFORE})"
    if before is not None:  # -P: its code from PYTHONPATH, not from the current directory
        servers["before"] = ("sqlite-full", {"PYTHONPATH": str(before)})
    # name -> (server, step, connections). The memory store's rows keep their plain names; each
    # hashed row runs right after its dense one, so that load from elsewhere hits both alike.
    hashed_row = f"predict+feedback, hashed b={HASHED_BITS}"
    rows: dict[str, tuple[str, Step, int]] = {"echo": ("echo", echo, CONNECTIONS)}
    for store in STORES:
        suffix = "" if store == "memory" else f", {store}"
        rows[f"predict{suffix}"] = (store, predict, CONNECTIONS)
        rows[f"predict+feedback{suffix}"] = (store, pair, CONNECTIONS)
        if store == "sqlite-full" and before is not None:
            rows[before_row] = ("before", pair, CONNECTIONS)
        if store == "memory":
            rows[hashed_row] = ("memory", hashed_pair, CONNECTIONS)
            rows[f"{hashed_row}, {BOOSTER}"] = ("booster", booster_pair, CONNECTIONS)
            rows["predict+feedback, 1 connection"] = ("memory", pair, 1)
            rows[f"{hashed_row}, 1 connection"] = ("memory", hashed_pair, 1)
    cp_rows = {
        "on": f"{hashed_row}, checkpoints every {CHECKPOINT_EVERY}, {cp_store}",
        "off": f"{hashed_row}, checkpoints off, {cp_store}",
    }
    for mode, name in cp_rows.items():
        rows[name] = (
            f"checkpoints-{mode}",
            _pair(hashed_bodies, hashed_labels, predict_lat[mode]),
            CONNECTIONS,
        )
    pairs_of = {store: "predict+feedback" + ("" if store == "memory" else f", {store}") for store in STORES}
    totals = {name: [0, 0.0, 0.0, []] for name in rows}
    # name -> fsyncs counted during its loads (SQLite servers only; None: perf could not count)
    fsyncs: dict[str, int | None] = {
        name: 0
        for name, (server, _, _) in rows.items()
        if servers.get(server, ("echo",))[0].startswith("sqlite")
    }
    with tempfile.TemporaryDirectory(prefix="clickboost-bench-") as tmp:
        fs = _fs_type(tmp)
        cmds = {"echo": ([py, "-m", "uvicorn", "lab.bench.http:echo_app", "--factory", *uv], {})}
        data_dirs = {}
        for server, (store, extra) in servers.items():
            data_dirs[server] = Path(tmp) / server  # one data directory per server process
            data_dirs[server].mkdir()
            cmds[server] = (
                [py, *(["-P"] if server == "before" else []), "-m", "service", "serve", *uv],
                store_settings(store, data_dirs[server]) | extra,
            )
        with _servers(cmds) as up:
            for server in (*STORES, *(["before"] if before is not None else [])):
                httpx.put(f"{up[server][0]}/models/digits", json=dense, timeout=60).raise_for_status()
            for server in ("memory", "checkpoints-on", "checkpoints-off"):
                httpx.put(f"{up[server][0]}/models/hashed", json=hashed).raise_for_status()
            httpx.put(f"{up['booster'][0]}/models/hashed-boost", json=booster, timeout=60).raise_for_status()
            # Interleaved rounds, so a burst of load from elsewhere hits every load alike.
            for _ in range(rounds):
                for name, (server, step, connections) in rows.items():
                    target, pid = up[server]
                    cpu = _cpu_seconds(pid)
                    with _fsyncs(pid) if name in fsyncs else contextlib.nullcontext([0]) as synced:
                        count, secs, lat = asyncio.run(_load(target, step, seconds, connections))
                    if name in fsyncs:
                        n = fsyncs[name]
                        fsyncs[name] = n + synced[0] if n is not None and synced else None
                    t = totals[name]
                    t[0] += count
                    t[1] += secs
                    t[2] += _cpu_seconds(pid) - cpu
                    t[3].append(lat)
            version = httpx.get(f"{up['memory'][0]}/models/digits").json()["version"]
            cp_url = up["checkpoints-on"][0]
            cp_version = httpx.get(f"{cp_url}/models/hashed").json()["version"]
            exported = httpx.get(f"{cp_url}/models/hashed/state", timeout=60).content
            cp_row = (
                _checkpoint_row(data_dirs["checkpoints-on"] / "clickboost.sqlite3", "hashed")
                if cp_store != "memory"
                else None
            )

    rate = {name: t[0] / t[1] for name, t in totals.items()}
    cpu_ms = {name: 1e3 * t[2] / t[0] for name, t in totals.items()}
    flag = " --quick" if quick else ""
    lines = [
        f"### HTTP service: Banditron K=10 dense d=784 and hashed b={HASHED_BITS}, {CONNECTIONS} keep-alive "
        f"connections unless said, {rounds} x {seconds:g} s per load",
        "",
        f"`python -m service bench http{flag}`. {report.machine()} Rows `predict` and `predict+feedback`: "
        "memory store; `sqlite-normal` / `sqlite-full`: the embedded SQLite store (WAL, "
        "`CLICKBOOST_SQLITE_SYNCHRONOUS` normal / full) in a temporary data directory on "
        f"{fs}. One server process per store, all up at once, loads interleaved in rounds; fsync waits "
        f"are not CPU time, so durability costs show in the rates. `hashed b={HASHED_BITS}`: the hashed "
        f"Banditron on the memory store's server, {NAMED_FEATURES} named string features per request; its "
        f"`checkpoints` rows on two more servers of the default store; the `{BOOSTER}` row on one more "
        f"server of the memory store ({BOOSTER} at its defaults, hashed the same way, checkpoints at "
        "the default every 1,000 events).",
        "",
        "| load | count | per second | vs echo | server CPU ms each | capacity vs echo | p50 ms | p99 ms "
        "| fsyncs each |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    per = {name: None if n is None else n / totals[name][0] for name, n in fsyncs.items()}
    for name, t in totals.items():
        p50, p99 = np.percentile(np.concatenate(t[3]), [50, 99]) * 1e3
        each = "–" if name not in per else "n/a" if per[name] is None else f"{per[name]:.2f}"
        lines.append(
            f"| {name} | {t[0]} | {rate[name]:,.0f} | {rate[name] / rate['echo']:.2f} | {cpu_ms[name]:.3f} "
            f"| {cpu_ms['echo'] / cpu_ms[name]:.2f} | {p50:.2f} | {p99:.2f} | {each} |"
        )
    ratio = rate["predict+feedback"] / rate["echo"]
    verdict = "met" if ratio >= TARGET_RATIO else "MISSED"
    pps = {store: rate[pairs_of[store]] for store in STORES}
    met = {store: "met" if pps[store] / rate["echo"] >= TARGET_RATIO else "MISSED" for store in STORES}
    default = default_store()
    tmpfs = " (tmpfs: fsync is free here, set TMPDIR to a disk)" if fs == "tmpfs" else ""
    lines += [
        "",
        f"predict+feedback: {rate['predict+feedback']:,.0f} pairs/s = {ratio:.2f} x echo requests/s "
        f"(target >= {TARGET_RATIO} x): {verdict}. Server CPU per pair = "
        f"{cpu_ms['predict+feedback'] / cpu_ms['echo']:.2f} x per echo request (capacity when the server "
        f"is the bottleneck: {cpu_ms['echo'] / cpu_ms['predict+feedback']:.2f} x). Model version after the "
        f"run: {version} (one learn event per acknowledged feedback).",
        "",
        f"durability costs{tmpfs}: predict+feedback pairs/s sqlite-full / sqlite-normal = "
        f"{pps['sqlite-full'] / pps['sqlite-normal']:.2f}, sqlite-full / memory = "
        f"{pps['sqlite-full'] / pps['memory']:.2f}, sqlite-normal / memory = "
        f"{pps['sqlite-normal'] / pps['memory']:.2f}; vs echo (target >= {TARGET_RATIO} x): "
        + ", ".join(f"{store} {pps[store] / rate['echo']:.2f} {met[store]}" for store in STORES)
        + f". {default} is the default (`make run`).",
    ]
    full = pairs_of["sqlite-full"]
    group = pps["sqlite-full"] / rate["echo"]
    synced = per[full]
    fsync_verdict = (
        "not counted (needs `perf` and the syscall tracepoints)"
        if synced is None
        else f"{synced:.2f} ({'met' if synced <= FSYNC_TARGET else 'MISSED'})"
    )
    was = f" Commit {BEFORE} (before the group commit) not measured: `--quick`, or no checkout of it."
    if before_row in rate:
        then = "n/a" if per[before_row] is None else f"{per[before_row]:.2f}"
        was = (
            f" Commit {BEFORE} (before the group commit) in this run: "
            f"{rate[before_row] / rate['echo']:.2f} x echo, {then} fsyncs per feedback; after / before "
            f"pairs/s = {pps['sqlite-full'] / rate[before_row]:.2f}."
        )
    lines += [
        "",
        f"group commit (issue 40): sqlite-full predict+feedback pairs/s = {group:.2f} x echo (target >= "
        f"{GROUP_TARGET} x): {'met' if group >= GROUP_TARGET else 'MISSED'}; fsyncs per acknowledged "
        f"feedback (target <= {FSYNC_TARGET}): {fsync_verdict}; vs the memory store's pairs/s "
        f"{pps['sqlite-full'] / pps['memory']:.2f}.{was}",
    ]
    hashed_vs = {
        f"{CONNECTIONS} connections": rate[hashed_row] / rate["predict+feedback"],
        "1 connection": rate[f"{hashed_row}, 1 connection"] / rate["predict+feedback, 1 connection"],
    }
    lines += [
        "",
        f"hashed b={HASHED_BITS} ({NAMED_FEATURES} named features) / dense d=784 predict+feedback pairs/s "
        f"(target >= {HASHED_TARGET} x): "
        + ", ".join(
            f"{how} {r:.2f} {'met' if r >= HASHED_TARGET else 'MISSED'}" for how, r in hashed_vs.items()
        )
        + ".",
    ]
    boost_vs = rate[f"{hashed_row}, {BOOSTER}"] / rate[hashed_row]
    lines += [
        "",
        f"{BOOSTER} (defaults: N=100, its lazy weight store for hashed input) / Banditron, both hashed "
        f"b={HASHED_BITS}, predict+feedback pairs/s with {CONNECTIONS} connections (target >= "
        f"{BOOSTER_TARGET} x, issue 20): {boost_vs:.2f} {'met' if boost_vs >= BOOSTER_TARGET else 'MISSED'}.",
    ]
    p99 = {mode: 1e3 * float(np.percentile(predict_lat[mode], 99)) for mode in predict_lat}
    cp_ratio = p99["on"] / p99["off"]
    (plain_bytes, plain_ms), (sparse_bytes, sparse_ms) = _encode_costs(exported)
    stored = (
        f"; its latest checkpoint in the store is at version {cp_row[0]}, {cp_row[1]:,} bytes"
        if cp_row is not None
        else ""
    )
    lines += [
        "",
        f"checkpoints, hashed b={HASHED_BITS} on {cp_store}: predict p99 while pairs run with a "
        f"checkpoint every {CHECKPOINT_EVERY} events {p99['on']:.2f} ms, without checkpoints "
        f"{p99['off']:.2f} ms: {cp_ratio:.2f} x (target <= {CHECKPOINT_TARGET:g} x): "
        f"{'met' if cp_ratio <= CHECKPOINT_TARGET else 'MISSED'}. That model learned {cp_version} events"
        f"{stored}. Its state encoded as a checkpoint here: {sparse_bytes:,} bytes in {sparse_ms:.1f} ms "
        f"(sparse, `service.serial.encode_sparse`) against {plain_bytes:,} bytes in {plain_ms:.1f} ms "
        "(plain). The server encodes it in a thread; that model applies no event meanwhile, requests go on.",
    ]
    return "\n".join(lines)
