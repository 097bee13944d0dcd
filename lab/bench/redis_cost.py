"""``bench redis-cost``: what a predict+feedback pair costs Redis and the replicas (issue 25).

Every replica shares its models through Redis, so Redis (one core per shard) is the ceiling of a
deployment, and every replica also applies every event of its models. This part measures the
constants of that cost model on real processes on loopback: a private ``redis-server``,
``python -m service serve`` replicas with ``REDIS_URL``, a Banditron d=784 K=10 model (rows uniform
in [0, 1)), sequential pairs from one keep-alive HTTP client (predict, then feedback for the id,
without ``?wait``), the replicas applying the events from the log in the background.

Per pair, with one replica:

client commands
    What the replica sends Redis, counted with ``MONITOR`` (``redis-cli monitor`` in a separate
    run of pairs: it slows Redis down). Commands run inside Lua scripts and the commands of this
    benchmark's own connection are not counted; the background loops (tail, sweep, heartbeat) that
    ran meanwhile are.
Redis commands
    ``INFO commandstats`` calls, Lua-internal ones included (this benchmark's ``INFO`` calls out).
Redis CPU
    ``INFO cpu`` (user + system, every Redis thread) over the timed pairs, net of Redis's own idle
    rate, as the median over :data:`BLOCKS` blocks of pairs (the machine is shared with other work).
    Each block follows a block of plain ``GET`` round trips from this process: what one command
    costs Redis on this machine at that moment, the unit to compare machines with.
pairs/s on Redis vs the embedded store
    The same sequential loop against a replica on the default SQLite store, in the same run.
round-trip floor
    The same loop against that replica while this process sends Redis one plain ``GET`` after each
    request: two round trips per pair at the pairs' own pace, with no work. Redis sleeps between
    them, and on a virtual machine waking it costs several times a back-to-back round trip, so this
    is what any design that writes Redis once at predict and once at feedback pays at least.

With two replicas, all traffic to A: B's CPU per pair is the cost of *applying* an event (every
replica pays it for every event of its models), A's minus B's the cost of *serving* the pair.
Idle: a replica with no traffic, 1 model and then 50, client commands per second (``MONITOR``, the
quieter of two windows: a just-created model's first rounds are not the steady cost).

Both columns come from one run: "before" is the code of commit :data:`BEFORE` (the commit before
issue 25), checked out with ``git worktree add`` into a temporary directory beside this checkout
and served from there (``cwd``), "after" the code of this checkout; the measuring code is this
module for both. ``--quick`` measures this checkout only, with fewer pairs.

From the "after" figures the section derives the capacity of a deployment (pairs/s per Redis shard,
per replica core, replicas and shards for a given load); the same table is written into
``SCALING.md`` (its ``redis-cost`` section), which explains the model.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis

from lab.bench import benches, report
from lab.cluster import RedisServer, Replica, applied_versions
from lab.repro import write_section
from service.config import Settings

ROOT = Path(__file__).resolve().parents[2]
#: The code measured as "before": the commit issue 40's work started from.
BEFORE = "0fd8341"
D, K = 784, 10
SPEC = {"learner": "banditron", "n_features": D, "n_labels": K, "reward_window_seconds": 600}
#: The web-shaped workload beside the dense one: 30 named features hashed into 2^18 buckets.
NAMED, HASHED_BITS = 30, 18
HASHED_SPEC = {
    "learner": "banditron",
    "hashing_bits": HASHED_BITS,
    "n_labels": K,
    "reward_window_seconds": 600,
}
#: Concurrent clients of the "under load" phase (each its own keep-alive connection).
LOAD_CLIENTS = 8
#: Issue 40's target: follower CPU µs per applied event under load, dense and hashed.
MAX_APPLY_US = 40.0
#: The follower's pause (setting ``follow_pause_seconds``) of the "under load, long pause" rows: the
#: trade-off of the default (staleness p99 under 100 ms, `bench staleness`) against follower CPU per event.
LONG_PAUSE = 0.5
DEFAULT_PAUSE = Settings.model_fields["follow_pause_seconds"].default
#: The example loads of the capacity table: pairs/s spread over this many models.
LOADS, MODELS = (20_000, 100_000), 50
#: Share of a core a deployment is planned at (headroom for bursts, checkpoints, GC).
UTILISATION = 0.7
#: Timed pairs run in this many blocks; CPU figures are medians over the blocks (the machine is shared).
BLOCKS = 5
#: Targets of issue 25.
MAX_CLIENT_COMMANDS, MAX_REDIS_US = 3.0, 80.0
#: Targets of issue 40: Redis commands per pair (Lua-internal included), Redis CPU per pair against
#: ``before`` (both workloads).
MAX_REDIS_COMMANDS, MAX_REDIS_SHARE = 12.0, 0.5


@dataclass(frozen=True)
class Plan:
    """How many pairs each phase runs and how long the idle windows are."""

    warmup: int
    pairs: int  # timed pairs (CPU, rates)
    monitored: int  # pairs under MONITOR (command counts)
    idle_seconds: float
    idle_models: int
    saturate: int  # events logged while the follower is stopped, per block (_saturated)


FULL = Plan(warmup=100, pairs=1500, monitored=300, idle_seconds=8.0, idle_models=50, saturate=900)
QUICK = Plan(warmup=20, pairs=100, monitored=40, idle_seconds=2.0, idle_models=5, saturate=200)


@dataclass
class Figures:
    """The measured constants of one version of the code."""

    label: str
    client_commands: float = math.nan
    breakdown: dict[str, float] = field(default_factory=dict)
    redis_commands: float = math.nan
    redis_us: float = math.nan
    redis_hashed_commands: float = math.nan  # the hashed workload (NAMED features), same measures
    redis_hashed_us: float = math.nan
    redis_us_two: float = math.nan  # Redis CPU per pair with two replicas following the log
    get_us: float = math.nan  # Redis CPU of one plain GET round trip: what a command costs here
    bare_us: float = math.nan  # Redis CPU of the design's fewest steps (_bare_cost): a floor
    paced_us: float = math.nan  # Redis CPU of two plain GETs per pair at the pairs' pace: a floor
    serve_us: float = math.nan
    apply_us: float = math.nan
    apply_load_us: float = math.nan  # the same under LOAD_CLIENTS concurrent clients
    apply_hashed_us: float = math.nan  # the hashed workload (NAMED features), sequential
    apply_hashed_load_us: float = math.nan  # ... and under load
    apply_sat_us: float = math.nan  # B saturated: stopped while Plan.saturate events are logged, then let go
    apply_hashed_sat_us: float = math.nan  # ... the hashed workload
    apply_long_us: float = math.nan  # under load, B following with LONG_PAUSE (this checkout only)
    apply_hashed_long_us: float = math.nan  # ... the hashed workload
    rate_redis: float = math.nan
    rate_embedded: float = math.nan
    idle: dict[int, float] = field(default_factory=dict)  # models -> client commands/s
    idle_breakdown: dict[int, dict[str, float]] = field(default_factory=dict)


class _Checkout(Replica):
    """A :class:`~lab.cluster.Replica` serving the code of another checkout (run from its directory,
    which comes first on ``sys.path``)."""

    def __init__(self, redis_url: str, workdir: Path, root: Path, env: dict[str, str] | None = None) -> None:
        super().__init__(redis_url, workdir, env)
        self.root = self.cwd = root
        self.env["PYTHONPATH"] = str(root)
        if "hiredis" not in (root / "pyproject.toml").read_text():
            # A checkout from before hiredis was a dependency runs as it installs: redis-py's own parser.
            self.env["PYTHONPATH"] = str(_without_hiredis(workdir)) + os.pathsep + str(root)


def _without_hiredis(workdir: Path) -> Path:
    """A directory whose ``hiredis`` module fails to import (redis-py then parses in Python)."""
    path = workdir / "without-hiredis"
    (path / "hiredis").mkdir(parents=True, exist_ok=True)
    (path / "hiredis" / "__init__.py").write_text("raise ImportError('hiredis left out')\n")
    return path


def _cpu(proc: subprocess.Popen[bytes] | None) -> float:
    """CPU seconds of a running process, summed over its threads, in nanoseconds' precision (Linux
    ``/proc/{pid}/task/*/schedstat``): ``/proc/{pid}/stat`` counts 10 ms ticks, too coarse for a
    follower's few µs per event."""
    assert proc is not None
    total = 0
    for task in Path(f"/proc/{proc.pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def _redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _redis_calls(client: redis.Redis) -> int:
    """Commands Redis ran so far (Lua-internal included), less this connection's INFO calls."""
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def _redis_cli(server: RedisServer) -> str:
    found = shutil.which("redis-cli") or str(Path(server.binary).with_name("redis-cli"))
    if not Path(found).exists():
        raise FileNotFoundError("redis-cli is not on PATH (apt-get install redis-tools)")
    return found


@contextmanager
def _monitored(server: RedisServer, client: redis.Redis, workdir: Path) -> Iterator[Counter[str]]:
    """Count the commands other clients send Redis inside the block (``MONITOR``; Lua-internal
    commands and this connection's own left out). The counter is filled when the block ends."""
    path = workdir / f"monitor-{uuid.uuid4().hex}.txt"
    mark = uuid.uuid4().hex
    me = client.client_info()["addr"]
    counts: Counter[str] = Counter()
    with path.open("wb") as out:
        proc = subprocess.Popen([_redis_cli(server), "-p", str(server.port), "monitor"], stdout=out)
    try:
        deadline = time.monotonic() + 10
        while f"start-{mark}".encode() not in path.read_bytes():  # MONITOR attached
            client.echo(f"start-{mark}")
            if time.monotonic() > deadline:
                raise RuntimeError("redis-cli monitor did not start")
            time.sleep(0.05)
        yield counts
        # The mark lands after what the file holds before it is sent; reading from there (not the
        # last 4 KB, which the replicas' later commands, kilobytes each, can push it out of: a
        # loaded run "fell behind" so) finds it however much follows it.
        since = path.stat().st_size
        client.echo(f"end-{mark}")
        deadline = time.monotonic() + 30
        while True:
            with path.open("rb") as f:
                f.seek(since)
                if f"end-{mark}".encode() in f.read():
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("redis-cli monitor fell behind")
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    inside = False
    with path.open("rb") as f:
        for line in f:
            if not inside:
                inside = f"start-{mark}".encode() in line
                continue
            if f"end-{mark}".encode() in line:
                break
            who, _, rest = line.partition(b"] ")
            addr = who.rsplit(b" ", 1)[-1].decode("latin-1")
            if addr == "lua" or addr == me:
                continue
            counts[rest.split(b'"', 2)[1].decode("latin-1").upper()] += 1
    path.unlink()


class _Pairs:
    """Sequential predict+feedback pairs on one keep-alive connection per replica URL."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.http = httpx.Client(timeout=30.0)

    def run(self, url: str, n: int, model: str = "cost", hashed: bool = False, each: Any = None) -> float:
        """``n`` pairs against ``url`` (``hashed``: :data:`NAMED` named features each, for a model of
        :data:`HASHED_SPEC`); the seconds they took. ``each()`` is called after every request."""
        values = self.rng.random((n, NAMED if hashed else D)).tolist()
        rows: list[Any] = [{f"f{j}": v for j, v in enumerate(r)} for r in values] if hashed else values
        truth = self.rng.integers(0, K, n).tolist()
        start = time.perf_counter()
        for x, y in zip(rows, truth, strict=True):
            p = self.http.post(f"{url}/predict", json={"model": model, "features": x})
            p.raise_for_status()
            d = p.json()
            if each is not None:
                each()
            f = self.http.post(
                f"{url}/feedback", json={"decision_id": d["decision_id"], "click": d["label_index"] == y}
            )
            f.raise_for_status()
            if each is not None:
                each()
        return time.perf_counter() - start

    def close(self) -> None:
        self.http.close()


def _loaded(url: str, n: int, model: str, hashed: bool, clients: int = LOAD_CLIENTS) -> None:
    """``n`` pairs against ``url`` from ``clients`` concurrent clients (threads, one connection each)."""
    workers = [_Pairs(seed=100 + i) for i in range(clients)]
    try:
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(lambda w: w.run(url, n // clients, model, hashed), workers))
    finally:
        for w in workers:
            w.close()


def _wait_model(http: httpx.Client, url: str, name: str, version: int | None = None) -> None:
    """Until ``url`` serves ``name`` (at ``version`` or later, if given)."""
    deadline = time.monotonic() + 60
    while True:
        r = http.get(f"{url}/models/{name}")
        if r.status_code == 200 and (version is None or r.json()["version"] >= version):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} does not serve {name} (version {version}): {r.text}")
        time.sleep(0.05)


def _settle(seconds: float = 0.3) -> None:
    """Let the replicas' tail loops apply the last events before the counters are read."""
    time.sleep(seconds)


def _saturated(
    a: Replica, b: Replica, http: httpx.Client, block: int, hashed: bool, idle: float, events: int
) -> float:
    """B's CPU µs per event when saturated: B stopped (``SIGSTOP``) while about ``events`` pairs of
    a fresh model run on A, then continued and given a second to catch up, net of its idle CPU.
    Raises if it did not apply them all in that second. ``events`` stays under the default
    ``checkpoint_every`` (1000), so that B applies them rather than loading a checkpoint."""
    model = f"sat-{'hashed' if hashed else 'dense'}-{block}"
    http.put(f"{a.url}/models/{model}", json=HASHED_SPEC if hashed else SPEC).raise_for_status()
    _wait_model(http, b.url, model)
    assert b.proc is not None
    b.proc.send_signal(signal.SIGSTOP)
    try:
        _loaded(a.url, events, model, hashed)
    finally:
        b.proc.send_signal(signal.SIGCONT)
    c0, t0 = _cpu(b.proc), time.perf_counter()
    time.sleep(1.0)
    cpu = _cpu(b.proc) - c0 - idle * (time.perf_counter() - t0)
    n = LOAD_CLIENTS * (events // LOAD_CLIENTS)  # what _loaded runs
    got = applied_versions(http, b.url).get(model, -1)
    if got < n:
        raise RuntimeError(f"the follower applied {got} of {n} events in 1 s: not saturated-and-done")
    return cpu / n * 1e6


class _Idle:
    """CPU seconds per second of Redis and of some processes, over a window without traffic, so that
    what the background loops spend while pairs run can be taken out of the per-pair figures."""

    def __init__(
        self, client: redis.Redis, procs: list[subprocess.Popen[bytes] | None], seconds: float
    ) -> None:
        r0, p0, t0 = _redis_cpu(client), [_cpu(p) for p in procs], time.perf_counter()
        time.sleep(seconds)
        t = time.perf_counter() - t0
        self.redis = (_redis_cpu(client) - r0) / t
        self.procs = [(_cpu(p) - c) / t for p, c in zip(procs, p0, strict=True)]


def _get_cost(client: redis.Redis, n: int, idle: float) -> float:
    """Redis CPU µs of one plain command round trip (``GET`` of a missing key, sequential)."""
    cpu0, t0 = _redis_cpu(client), time.perf_counter()
    for _ in range(n):
        client.get("clickboost-bench-missing")
    return (_redis_cpu(client) - cpu0 - idle * (time.perf_counter() - t0)) / n * 1e6


# The fewest steps of this design, without the service: the record and the decision-log entry
# written by one script (the context twice), moved to the log by another, read back once.
_BARE_PREDICT = "redis.call('HSET', KEYS[1], 'x', ARGV[1]) redis.call('XADD', KEYS[2], '*', 'x', ARGV[1])"
_BARE_FEEDBACK = (
    "local x = redis.call('HGET', KEYS[1], 'x') redis.call('XADD', KEYS[2], '*', 'x', x) "
    "redis.call('DEL', KEYS[1])"
)


def _bare_cost(client: redis.Redis, reader: redis.Redis, n: int, idle: float, seed: int = 0) -> float:
    """Redis CPU µs of one bare pair (:data:`_BARE_PREDICT`, :data:`_BARE_FEEDBACK`, then an
    ``XREAD`` of the new entry from a second connection), contexts of d float64 as the service's.

    A floor for the service's own pairs: the same copies of the context and the same three round
    trips, with none of the claim's checks, counters, expiry set or notifications."""
    predict, feedback = client.register_script(_BARE_PREDICT), client.register_script(_BARE_FEEDBACK)
    xs = [np.random.default_rng(seed + i).random(D).tobytes() for i in range(16)]
    keys = ["cb-bare:{b}:d", "cb-bare:{b}:dlog", "cb-bare:{b}:log"]
    last = "0-0"
    cpu0, t0 = _redis_cpu(client), time.perf_counter()
    for i in range(n):
        predict(keys=keys[:2], args=[xs[i % len(xs)]])
        feedback(keys=[keys[0], keys[2]])
        got = reader.xread({keys[2]: last}, count=1)
        last = got[0][1][-1][0]
    cost = (_redis_cpu(client) - cpu0 - idle * (time.perf_counter() - t0)) / n * 1e6
    client.delete(*keys)
    return cost


def _redis_block(client: redis.Redis, idle: float, run: Any, n: int) -> tuple[float, int, float]:
    """Redis CPU seconds per pair (net of Redis's ``idle`` rate) and the commands Redis ran (Lua-internal
    included) while ``run()`` made ``n`` pairs, and the seconds ``run`` took (what it returns)."""
    cpu0, calls0, t0 = _redis_cpu(client), _redis_calls(client), time.perf_counter()
    seconds = run()
    _settle(0.1)
    cpu = (_redis_cpu(client) - cpu0 - idle * (time.perf_counter() - t0)) / n
    return cpu, _redis_calls(client) - calls0, seconds


def measure(root: Path, label: str, plan: Plan, workdir: Path) -> Figures:
    """Every figure of one checkout ``root`` (its code served by the replicas). CPU figures are net
    of what Redis and the replicas spend without traffic (measured just before, same processes)."""
    out = Figures(label)
    server = RedisServer(workdir)
    server.start()
    client = redis.Redis(port=server.port, single_connection_client=True)
    pairs = _Pairs()
    replicas: list[_Checkout] = []
    try:
        a = _Checkout(server.url, workdir, root)
        replicas.append(a)
        a.start()
        a.wait_ready()
        pairs.http.put(f"{a.url}/models/cost", json=SPEC).raise_for_status()
        pairs.http.put(f"{a.url}/models/cost-hashed", json=HASHED_SPEC).raise_for_status()
        pairs.run(a.url, plan.warmup)
        pairs.run(a.url, plan.warmup, "cost-hashed", hashed=True)
        _settle()

        # One replica: Redis CPU and commands (Lua included), the rate, in blocks interleaved with
        # GET round trips (what a command costs this machine at that moment); medians over blocks.
        idle = _Idle(client, [], plan.idle_seconds / 2)
        per_block = plan.pairs // BLOCKS
        redis_us, hashed_us, gets, bare, calls, hashed_calls, seconds = [], [], [], [], 0, 0, 0.0
        reader = redis.Redis(port=server.port, single_connection_client=True)
        for _ in range(BLOCKS):
            gets.append(_get_cost(client, per_block, idle.redis))
            bare.append(_bare_cost(client, reader, per_block, idle.redis))
            cpu, n_calls, took = _redis_block(
                client, idle.redis, lambda: pairs.run(a.url, per_block), per_block
            )
            redis_us.append(cpu)
            calls += n_calls
            seconds += took
            cpu, n_calls, _ = _redis_block(
                client, idle.redis, lambda: pairs.run(a.url, per_block, "cost-hashed", True), per_block
            )
            hashed_us.append(cpu)
            hashed_calls += n_calls
        reader.close()
        out.redis_us, out.get_us = float(np.median(redis_us)) * 1e6, float(np.median(gets))
        out.redis_hashed_us = float(np.median(hashed_us)) * 1e6
        out.bare_us = float(np.median(bare))
        out.redis_commands = calls / (BLOCKS * per_block)
        out.redis_hashed_commands = hashed_calls / (BLOCKS * per_block)
        out.rate_redis = BLOCKS * per_block / seconds

        # The commands the replica sends, under MONITOR (the idle rate is taken out below).
        t0 = time.perf_counter()
        with _monitored(server, client, workdir) as counts:
            pairs.run(a.url, plan.monitored)
            _settle()
        monitored = time.perf_counter() - t0

        # Two replicas, traffic to A: B only follows the log. Medians over blocks.
        b = _Checkout(server.url, workdir, root)
        replicas.append(b)
        b.start()
        b.wait_ready()
        _wait_model(pairs.http, b.url, "cost")
        _settle(1.0)
        idle = _Idle(client, [a.proc, b.proc], plan.idle_seconds / 2)
        two, serve, apply = [], [], []
        for _ in range(BLOCKS):
            cpu0, a0, b0, t0 = _redis_cpu(client), _cpu(a.proc), _cpu(b.proc), time.perf_counter()
            pairs.run(a.url, per_block)
            _settle(0.1)
            t = time.perf_counter() - t0
            cpu_a = _cpu(a.proc) - a0 - idle.procs[0] * t
            cpu_b = _cpu(b.proc) - b0 - idle.procs[1] * t
            two.append((_redis_cpu(client) - cpu0 - idle.redis * t) / per_block)
            apply.append(cpu_b / per_block)
            serve.append((cpu_a - cpu_b) / per_block)
        out.redis_us_two = float(np.median(two)) * 1e6
        out.apply_us, out.serve_us = float(np.median(apply)) * 1e6, float(np.median(serve)) * 1e6

        # B's CPU per event it applies: the hashed workload sequentially, then both under load.
        def applying(run: Any, n: int) -> float:
            b0, t0 = _cpu(b.proc), time.perf_counter()
            run()
            _settle(0.3)
            return (_cpu(b.proc) - b0 - idle.procs[1] * (time.perf_counter() - t0)) / n * 1e6

        _wait_model(pairs.http, b.url, "cost-hashed")
        out.apply_hashed_us = float(
            np.median(
                [
                    applying(lambda: pairs.run(a.url, per_block, "cost-hashed", True), per_block)
                    for _ in range(BLOCKS)
                ]
            )
        )
        n_load = LOAD_CLIENTS * max(per_block // LOAD_CLIENTS, 1)

        def under_load(hashed: bool) -> float:
            model = "cost-hashed" if hashed else "cost"
            blocks = [applying(lambda: _loaded(a.url, n_load, model, hashed), n_load) for _ in range(BLOCKS)]
            return float(np.median(blocks))

        out.apply_load_us, out.apply_hashed_load_us = under_load(False), under_load(True)
        # B saturated: what one core of a follower applies when events come faster than it reads,
        # the constant capacity planning needs (at the rates one client's pairs reach here, a read
        # brings a few events, and the round's fixed cost dominates the figures above).
        for hashed in (False, True):
            got = float(
                np.median(
                    [
                        _saturated(a, b, pairs.http, i, hashed, idle.procs[1], plan.saturate)
                        for i in range(BLOCKS)
                    ]
                )
            )
            if hashed:
                out.apply_hashed_sat_us = got
            else:
                out.apply_sat_us = got
        b.stop()
        replicas.remove(b)
        if root == ROOT:  # the setting came with issue 40: B again, following with a long pause
            b = _Checkout(server.url, workdir, root, {"CLICKBOOST_FOLLOW_PAUSE_SECONDS": str(LONG_PAUSE)})
            replicas.append(b)
            b.start()
            b.wait_ready()
            for model in ("cost", "cost-hashed"):
                _wait_model(pairs.http, b.url, model)
            _settle(1.0)
            idle = _Idle(client, [a.proc, b.proc], plan.idle_seconds / 2)
            out.apply_long_us, out.apply_hashed_long_us = under_load(False), under_load(True)
            b.stop()
            replicas.remove(b)

        # Idle: one replica, no traffic, 1 model and then ``idle_models``.
        for n in (1, plan.idle_models):
            for i in range(1, n):
                name = f"idle-{i:03d}"
                if pairs.http.get(f"{a.url}/models/{name}").status_code == 404:
                    pairs.http.put(f"{a.url}/models/{name}", json=SPEC).raise_for_status()
            _settle(3.0)
            # The quieter of two windows: a just-created model's first rounds (loading it, its
            # first sweep) can still fall into the first window on a loaded machine, and they are
            # not the steady idle cost being measured.
            windows = []
            for _ in range(2):
                with _monitored(server, client, workdir) as idle_counts:
                    time.sleep(plan.idle_seconds)
                windows.append(idle_counts)
            idle_counts = min(windows, key=lambda c: sum(c.values()))
            out.idle[n] = sum(idle_counts.values()) / plan.idle_seconds
            out.idle_breakdown[n] = {c: v / plan.idle_seconds for c, v in idle_counts.most_common()}
        background = {c: v * monitored for c, v in out.idle_breakdown[1].items()}
        net = {c: max(v - background.get(c, 0.0), 0.0) / plan.monitored for c, v in counts.items()}
        out.client_commands = sum(net.values())
        out.breakdown = dict(sorted(net.items(), key=lambda kv: -kv[1]))
        for r in replicas:
            r.stop()
        replicas.clear()
        _embedded(root, workdir, plan, pairs, client, out)
    finally:
        for r in replicas:
            r.stop()
        client.close()
        server.stop()
        pairs.close()
    return out


def _embedded(
    root: Path, workdir: Path, plan: Plan, pairs: _Pairs, client: redis.Redis, out: Figures
) -> None:
    """The same sequential loop on the embedded store (SQLite, the default), same run: its rate, then
    the round-trip floor (one plain ``GET`` to the idle Redis of ``client`` after each request)."""
    data = workdir / f"sqlite-{uuid.uuid4().hex}"
    embedded = _Checkout("", workdir, root, {"CLICKBOOST_DATA_DIR": str(data)})
    embedded.start()
    other = redis.Redis(port=client.connection_pool.connection_kwargs["port"], single_connection_client=True)
    try:
        embedded.wait_ready()
        pairs.http.put(f"{embedded.url}/models/cost", json=SPEC).raise_for_status()
        pairs.run(embedded.url, plan.warmup)
        out.rate_embedded = plan.pairs / pairs.run(embedded.url, plan.pairs)
        idle = _Idle(client, [], plan.idle_seconds / 2)
        per_block = plan.pairs // BLOCKS

        def get() -> None:
            other.get("clickboost-bench-missing")

        def block() -> float:
            return pairs.run(embedded.url, per_block, each=get)

        paced = [_redis_block(client, idle.redis, block, per_block)[0] for _ in range(BLOCKS)]
        out.paced_us = float(np.median(paced)) * 1e6
    finally:
        other.close()
        embedded.stop()


def checkout(rev: str) -> Path | None:
    """A worktree of ``rev`` in the temporary directory (kept between runs, so its numba cache is
    too), its learners imported once (compiled); None when this is not a git checkout."""
    path = Path(tempfile.gettempdir()) / f"clickboost-before-{rev}"
    git = ["git", "-C", str(ROOT)]
    try:
        want = subprocess.run([*git, "rev-parse", rev], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    have = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True)
    if not (path / "service").is_dir() or have.stdout != want:
        shutil.rmtree(path, ignore_errors=True)
        subprocess.run([*git, "worktree", "prune"], check=True)
        subprocess.run(
            [*git, "worktree", "add", "--detach", "--force", str(path), rev], check=True, capture_output=True
        )
    env = {**os.environ, "PYTHONPATH": str(path)}
    warm = "from service.learners import learners; learners.names()"
    subprocess.run([sys.executable, "-c", warm], cwd=path, env=env, check=True, timeout=1800)
    return path


def _num(v: float, fmt: str = "{:,.1f}") -> str:
    return "–" if math.isnan(v) else fmt.format(v)


def _breakdown(counts: dict[str, float]) -> str:
    return ", ".join(f"{c} {n:.2g}" for c, n in counts.items() if n >= 0.05) or "–"


def capacity(
    f: Figures, loads: tuple[int, ...] = LOADS, models: int = MODELS, u: float = UTILISATION
) -> list[list[str]]:
    """The capacity rows derived from the measured constants (docs/SCALING.md explains them).

    Per pair, Redis spends ``redis_us`` with one replica and ``follow = redis_us_two - redis_us``
    more for each further replica that follows the model's log; a replica spends ``serve_us`` on
    the pairs it serves and ``apply_us`` on every event of every model it holds. At ``u`` of a core:
    a shard runs ``u / (redis_us + (g - 1) follow)`` pairs/s of models followed by ``g`` replicas;
    each of ``loads`` pairs/s needs ``load (serve_us + g apply_us) / u`` replica cores when each model is held
    by ``g`` replicas, and ``load serve_us / (u - load apply_us)`` when every replica holds every
    model (each then applies the whole load).
    """
    budget = u * 1e6
    follow = max(f.redis_us_two - f.redis_us, 0.0)
    # A follower near capacity is saturated: each read brings a full batch (the sequential figure's
    # one event per read is the idle end, not the capacity).
    apply_us = f.apply_sat_us if not math.isnan(f.apply_sat_us) else f.apply_us

    def per_pair(g: int) -> float:
        return f.redis_us + (g - 1) * follow

    rows = [
        [
            f"pairs/s per Redis shard, models followed by {g} replica{'s' if g > 1 else ''}",
            f"{budget / per_pair(g):,.0f}",
            f"{u:.0%} × 1e6 / (Redis µs + {g - 1} × follow µs)",
        ]
        for g in (1, 2)
    ]
    rows += [
        [
            "pairs/s served per replica core (applying nothing)",
            f"{budget / f.serve_us:,.0f}",
            f"{u:.0%} × 1e6 / serve µs",
        ],
        [
            "events/s one replica core applies (all its models together)",
            f"{budget / apply_us:,.0f}",
            f"{u:.0%} × 1e6 / apply µs (saturated)",
        ],
    ]
    if not math.isnan(f.apply_hashed_sat_us):
        rows.append(
            [
                "… the hashed workload (30 named features)",
                f"{budget / f.apply_hashed_sat_us:,.0f}",
                f"{u:.0%} × 1e6 / hashed apply µs (saturated)",
            ]
        )
    for load in loads:
        what = f"{load:,} pairs/s over {models} models"
        spare = budget - load * apply_us
        if spare > 0:
            cores = math.ceil(load * f.serve_us / spare)
            shards = math.ceil(load * per_pair(cores) / budget)
            rows.append(
                [
                    f"{what}, every replica holding every model: replica cores / shards",
                    f"{cores} / {shards}",
                    "each replica applies the whole load",
                ]
            )
        else:
            rows.append(
                [
                    f"{what}, every replica holding every model",
                    "impossible",
                    f"one core cannot apply {load:,} events/s",
                ]
            )
        for g in (1, 2):
            cores = math.ceil(load * (f.serve_us + g * apply_us) / budget)
            shards = math.ceil(load * per_pair(g) / budget)
            rows.append(
                [
                    f"{what}, each model on {g} replica{'s' if g > 1 else ''}: replica cores / shards",
                    f"{cores} / {shards}",
                    f"load × (serve + {g} × apply); models placed by name",
                ]
            )
    return rows


def _floor_note(sides: list[Figures]) -> str:
    """What the bare pair and the round-trip floor say about the Redis CPU targets on this machine."""
    f = sides[-1]
    if math.isnan(f.bare_us):
        return ""
    verdict = (
        "above the target: on this machine no implementation of this design (one script at predict, one "
        "at feedback, the log read back, the context in the pending record and the decision log) meets "
        f"{MAX_REDIS_US:g} µs, only one that drops a copy of the context or a round trip"
        if f.bare_us > MAX_REDIS_US
        else "below the target: the rest is the service's own work"
    )
    return (
        f"The bare pair costs {f.bare_us:,.0f} µs of Redis CPU here ({f.bare_us / f.get_us:.1f} plain GET "
        f"round trips; the service's pair {f.redis_us:,.0f} µs): {verdict}. The service's pair adds "
        f"{f.redis_us - f.bare_us:,.0f} µs: the claim check, counters, expiry set, decision-log "
        "outcome and the scripts' other steps."
    ) + _paced_note(sides)


def _paced_note(sides: list[Figures]) -> str:
    """The round-trip floor against issue 40's targets (a share of ``before``), when both were measured."""
    f, before = sides[-1], sides[0]
    if math.isnan(f.paced_us) or len(sides) < 2:
        return ""
    dense, hashed = MAX_REDIS_SHARE * before.redis_us, MAX_REDIS_SHARE * before.redis_hashed_us
    return (
        f" The bare pair runs back to back; at the pairs' own pace Redis sleeps between commands, and two "
        f"plain GET round trips per pair, with no work, already cost {f.paced_us:,.0f} µs "
        f"({f.paced_us / f.get_us:.1f} back-to-back GETs): {f.paced_us / dense:.2f} of issue 40's target "
        f"of {dense:,.0f} µs and {f.paced_us / hashed:.2f} of the hashed workload's {hashed:,.0f} µs "
        f"({MAX_REDIS_SHARE:g} × {before.label}), before the follower's reads and any work."
    )


def render(sides: list[Figures], command: str, note: str) -> tuple[str, str]:
    """The BENCHMARKS.md section and the SCALING.md constants."""
    labels = [s.label for s in sides]
    after = sides[-1]
    idle_n = sorted({n for s in sides for n in s.idle})

    def row(name: str, values: list[str], target: str = "") -> list[str]:
        return [name, *values, target]

    rows = [
        row(
            "client commands per pair (MONITOR; Lua-internal and idle background not counted)",
            [_num(s.client_commands, "{:.2f}") for s in sides],
            f"≤ {MAX_CLIENT_COMMANDS:g}",
        ),
        row("… of which", [_breakdown(s.breakdown) for s in sides]),
        row(
            "Redis commands per pair, Lua-internal included (commandstats)",
            [_num(s.redis_commands) for s in sides],
            f"≤ {MAX_REDIS_COMMANDS:g}",
        ),
        row(
            f"… hashed Banditron ({NAMED} named features, b={HASHED_BITS})",
            [_num(s.redis_hashed_commands) for s in sides],
            f"≤ {MAX_REDIS_COMMANDS:g}",
        ),
        row(
            "Redis CPU µs per pair (INFO cpu, net of idle), 1 replica",
            [_num(s.redis_us, "{:,.0f}") for s in sides],
            f"≤ {MAX_REDIS_US:g} (issue 25); ≤ {_num(MAX_REDIS_SHARE * sides[0].redis_us, '{:,.0f}')} "
            f"({MAX_REDIS_SHARE:g} × {labels[0]}, issue 40)",
        ),
        row("… in plain GET round trips (below)", [_num(s.redis_us / s.get_us, "{:.1f}") for s in sides]),
        row(
            f"Redis CPU µs per pair, hashed Banditron ({NAMED} named features), 1 replica",
            [_num(s.redis_hashed_us, "{:,.0f}") for s in sides],
            f"≤ {_num(MAX_REDIS_SHARE * sides[0].redis_hashed_us, '{:,.0f}')} "
            f"({MAX_REDIS_SHARE:g} × {labels[0]}, issue 40)",
        ),
        row("… in plain GET round trips", [_num(s.redis_hashed_us / s.get_us, "{:.1f}") for s in sides]),
        row(
            "Redis CPU µs per pair per further replica following the log",
            [_num(s.redis_us_two - s.redis_us, "{:,.0f}") for s in sides],
        ),
        row(
            "Redis CPU µs of one plain GET round trip (this machine)",
            [_num(s.get_us, "{:.1f}") for s in sides],
        ),
        row(
            "Redis CPU µs of a bare pair: two minimal scripts (context stored twice, moved once) "
            "and one read, no service (a floor of this design here)",
            [_num(s.bare_us, "{:,.0f}") for s in sides],
        ),
        row(
            "Redis CPU µs of two plain GET round trips per pair at the pairs' own pace (a replica on the "
            "embedded store serving, one GET after each request): the floor of one round trip per request",
            [_num(s.paced_us, "{:,.0f}") for s in sides],
        ),
        row("replica CPU µs per pair: serving (A − B)", [_num(s.serve_us, "{:,.0f}") for s in sides]),
        row(
            "replica CPU µs per pair: applying (B, follows the log)",
            [_num(s.apply_us, "{:,.0f}") for s in sides],
        ),
        row(
            f"… applying, hashed Banditron ({NAMED} named features, b={HASHED_BITS}), sequential",
            [_num(s.apply_hashed_us, "{:,.0f}") for s in sides],
        ),
        *(
            row(name, [_num(getattr(s, attr), "{:,.0f}") for s in sides], f"≤ {MAX_APPLY_US:g}")
            for name, attr in [
                (f"… applying under load ({LOAD_CLIENTS} concurrent clients to A)", "apply_load_us"),
                (f"… applying, hashed Banditron, under load ({LOAD_CLIENTS})", "apply_hashed_load_us"),
                (
                    f"… applying under load, B following with a pause of {LONG_PAUSE:g} s "
                    f"(default {DEFAULT_PAUSE:g} s)",
                    "apply_long_us",
                ),
                (f"… applying, hashed Banditron, under load, pause {LONG_PAUSE:g} s", "apply_hashed_long_us"),
                ("… applying saturated (B stopped while events are logged, then let go)", "apply_sat_us"),
                ("… applying saturated, hashed Banditron", "apply_hashed_sat_us"),
            ]
        ),
        row("sequential pairs/s on Redis (absolute)", [_num(s.rate_redis, "{:,.0f}") for s in sides]),
        row(
            "… vs the embedded SQLite store, same run",
            [_num(s.rate_redis / s.rate_embedded, "{:.2f}×") for s in sides],
        ),
    ]
    for n in idle_n:
        rows.append(
            row(
                f"idle client commands/s, one replica, {n} model{'s' if n > 1 else ''}",
                [_num(s.idle.get(n, math.nan)) for s in sides],
                "same for 1 and 50" if n == idle_n[0] else "",
            )
        )
    for n in idle_n:
        rows.append(
            row(
                f"… of which ({n} model{'s' if n > 1 else ''})",
                [_breakdown(s.idle_breakdown.get(n, {})) for s in sides],
            )
        )
    follow = max(after.redis_us_two - after.redis_us, 0.0)
    cap = report.table(["capacity (from the last column)", "value", "how"], capacity(after), "lrl")
    constants = (
        f"Measured by `{command}`. {report.machine()} Banditron d={D} K={K}, per predict+feedback pair: "
        f"Redis CPU {after.redis_us:,.0f} µs with one replica and {follow:,.0f} µs more per further "
        f"replica following the log (one plain GET round trip costs {after.get_us:.0f} µs of Redis CPU on "
        f"this machine); replica CPU {after.serve_us:,.0f} µs serving and {after.apply_us:,.0f} µs applying "
        f"one event per read ({after.apply_sat_us:,.0f} µs saturated, the capacity figure) "
        f"(paid by every replica holding the model); {after.client_commands:.2f} client commands. "
        f"Capacities at {UTILISATION:.0%} of a core:\n\n" + cap
    )
    section = "\n\n".join(
        [
            f"## Redis cost per pair and capacity\n\n`{command}`. {report.machine()}",
            f"Banditron d={D} K={K}, one private redis-server and `serve` replicas on loopback, sequential "
            "predict+feedback pairs from one client (no `?wait`; the replicas apply the log in the "
            f"background). {note} CPU figures are absolute µs of CPU time per pair, net of what the same "
            "processes spend without traffic (measured just before; a cost smaller than that idle figure's "
            "noise can come out negative, as the long-pause follower's can in a `--quick` run); they are "
            "the steadier measure on this "
            "shared 2-core machine, where rates are noisy. Even so, Redis CPU per pair moves by tens of "
            "percent between runs here (so does the cost of a plain GET round trip, the row that says how "
            "busy the machine was), which is also the size of a further replica's cost at these rates; "
            "the command counts are exact. Sequential pairs are the worst case for following the log: "
            "under load one read brings many events.",
            report.table(["figure", *labels, "target"], rows, "l" + "r" * len(labels) + "l"),
            _floor_note(sides),
            constants,
        ]
    )
    return section, constants


@benches.register("redis-cost")
def bench(quick: bool) -> str:
    """Measure this checkout (and, unless ``quick``, commit :data:`BEFORE`); write the constants
    into ``SCALING.md`` beside ``BENCHMARKS.md``."""
    plan = QUICK if quick else FULL
    command = "python -m service bench redis-cost" + (" --quick" if quick else "")
    sides = []
    with tempfile.TemporaryDirectory(prefix="clickboost-redis-cost-") as tmp:
        if quick:
            note = "`--quick`: this checkout only, few pairs."
        else:
            before = checkout(BEFORE)
            if before is None:
                note = f"Commit {BEFORE} could not be checked out (not a git checkout): this checkout only."
            else:
                note = (
                    f"`before` is commit {BEFORE} (before issue 40), served from a `git worktree` of it "
                    "(with redis-py's own parser, as it installs: hiredis came with issue 40); "
                    "`after` is this checkout; both measured in this run by the same code."
                )
                sides.append(measure(before, f"before ({BEFORE})", plan, Path(tmp)))
        sides.append(measure(ROOT, "after", plan, Path(tmp)))
    section, constants = render(sides, command, note)
    write_section("redis-cost", constants, report.out_dir(quick) / "SCALING.md")
    return section
