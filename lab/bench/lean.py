"""``bench lean``: server CPU per predict + feedback pair, the commit before issue 52 against now.

Issue 52 asks for half the CPU per pair: a replica's CPU per pair at most 0.6 x that of the commit
before the change (:data:`BASE`) on every store, and a minimal FastAPI app that parses and answers
the same JSON shapes spending at least 0.8 x ours on the memory store and 0.6 x on SQLite with
fsync on. One run measures, under the same load and in interleaved rounds (so that load from
elsewhere on the machine hits every server alike):

* the server at :data:`BASE`, from a ``git worktree`` of it (its C extensions built there), run
  by this venv's Python with ``PYTHONPATH`` naming that tree, so the old code is what runs;
* the server of this tree, the same way;
* :func:`bench_app`, FastAPI with no work of its own: ``POST /predict`` and ``POST /feedback``
  validated into pydantic models and answered with pydantic models of the service's answer shapes
  (ten labels); same uvicorn settings (uvloop, httptools, log level warning).

Each server runs once per store of :data:`STORES`: ``memory``, ``sqlite-full`` (the embedded
store, WAL, ``CLICKBOOST_SQLITE_SYNCHRONOUS=full``: every acknowledged feedback is fsynced, through
the group commit of issue 40; data in a temporary directory, whose file system the section names)
and ``redis`` (a private ``redis-server`` on a free loopback port per server, no AOF; its CPU is
not the replica's and is not counted). Two loads, each with :data:`CONNECTIONS` keep-alive
connections sending a predict then the feedback for its decision id (``bench http``'s client and
bodies, :mod:`lab.bench.http`): ``hashed``, a Banditron with ``hashing_bits`` 18 and K = 10 fed 30
named string features per request (the web-shaped load), and ``dense``, a Banditron d = 784
(MNIST rows), K = 10.

CPU per pair: the server process's user + system CPU (``/proc``, every thread) over the timed
window, divided by the pairs answered in it. Correctness: every feedback must be answered 200 (the
client stops the bench otherwise), and after the run each server's model version must equal the
feedbacks it acknowledged (one learn event each).

Then each server of each store is profiled under the hashed load with py-spy (the ``bench`` extra;
sampling from outside, the server unchanged): the functions with the largest own share of the
samples, their cumulative share, and the own share by package.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from fastapi import FastAPI
from pydantic import BaseModel

from lab.bench import benches, redis_cost, report
from lab.bench.http import (
    HASHED_BITS,
    _bodies,
    _cpu_seconds,
    _fs_type,
    _hashed_bodies,
    _load,
    _pair,
    _servers,
    store_settings,
)
from lab.cluster import RedisServer

#: The commit before issue 52's change, measured beside the current tree in every run.
BASE = "df61c00"
BASE_DATE = "2026-12-02"
STORES = ("memory", "sqlite-full", "redis")
CONNECTIONS = 8
K = 10
#: Issue 52's targets: CPU per pair now / BASE (every store), the app's CPU per pair / ours.
MAX_BASE_RATIO = 0.6
MIN_APP_RATIO = {"memory": 0.8, "sqlite-full": 0.6}
_COMMON = {"n_labels": K, "reward_window_seconds": 5, "default_reward": "drop"}
#: load -> (model name, model spec)
MODELS = {
    "hashed": ("hashed", {"learner": "banditron", "hashing_bits": HASHED_BITS, **_COMMON}),
    "dense": ("digits", {"learner": "banditron", "n_features": 784, **_COMMON}),
}
SIDES = ("base", "now")
#: Rows of the profile tables.
TOP = 12
PROFILE_RATE = 200  # py-spy samples per second


# -- the reference app --------------------------------------------------------------------------


class AppPredict(BaseModel):
    """The body of ``POST /predict`` as the app reads it."""

    model: str | None = None
    features: list[float] | dict[str, str | float | bool]


class AppRanked(BaseModel):
    label: str
    label_index: int
    probability: float


class AppPrediction(BaseModel):
    """The shape of the service's ``PredictResponse``."""

    decision_id: str
    label: str
    label_index: int
    probability: float
    probabilities: list[float]
    ranking: list[AppRanked]
    model: str
    model_version: int


class AppFeedback(BaseModel):
    decision_id: str
    click: bool | None = None
    reward: float | None = None


class AppAcknowledged(BaseModel):
    """The shape of the service's ``FeedbackResponse``."""

    decision_id: str
    click: bool | None
    reward: float
    model: str
    model_version: int | None
    held: bool = False


def bench_app() -> FastAPI:
    """The reference: FastAPI parsing and answering the JSON shapes of ``/predict`` and ``/feedback``,
    with nothing behind them (a counter for ids and versions, a uniform distribution over K labels)."""
    app = FastAPI()
    counter = itertools.count()
    labels = [f"label-{i}" for i in range(K)]

    @app.post("/predict")
    async def predict(body: AppPredict) -> AppPrediction:
        n = next(counter)
        ranking = [AppRanked(label=labels[i], label_index=i, probability=1.0 / K) for i in range(K)]
        return AppPrediction(
            decision_id=f"{n:022d}",
            label=labels[0],
            label_index=0,
            probability=1.0 / K,
            probabilities=[1.0 / K] * K,
            ranking=ranking,
            model=body.model or "default",
            model_version=n,
        )

    @app.post("/feedback")
    async def feedback(body: AppFeedback) -> AppAcknowledged:
        reward = float(body.click) if body.click is not None else body.reward or 0.0
        return AppAcknowledged(
            decision_id=body.decision_id, click=body.click, reward=reward, model="default", model_version=1
        )

    return app


# -- the trees and servers ----------------------------------------------------------------------


def base_tree() -> Path:
    """A worktree of :data:`BASE` (kept in the temporary directory between runs) with its C
    extensions built in place, so that the code of that commit, extensions included, is what runs."""
    path = redis_cost.checkout(BASE)
    if path is None:
        raise RuntimeError(f"bench lean needs a git checkout to measure commit {BASE} beside this tree")
    if not list((path / "service").glob("_features*.so")):
        # setuptools run from an empty directory: that tree's pyproject.toml is not for this setuptools
        build = (
            "import sys; from setuptools import Extension, setup; root = sys.argv[1]; "
            "setup(name='x', script_args=['-q', 'build_ext', '--build-lib', root], ext_modules=["
            "Extension(f'service.{n}', [f'{root}/service/{n}.c']) for n in ('_features', '_decisions')])"
        )
        with tempfile.TemporaryDirectory() as empty:
            subprocess.run(
                [sys.executable, "-c", build, str(path)], cwd=empty, check=True, capture_output=True
            )
    return path


def settings(store: str, data_dir: Path, redis_url: str | None) -> dict[str, str]:
    """The ``CLICKBOOST_*`` settings of ``store`` (one of :data:`STORES`)."""
    if store == "redis":
        assert redis_url is not None
        return {"REDIS_URL": redis_url}
    return store_settings(store, data_dir)


@dataclass
class Tally:
    """What one (server, load) accumulated over the rounds."""

    pairs: int = 0
    seconds: float = 0.0
    cpu: float = 0.0
    per_round: list[float] = field(default_factory=list)  # µs per pair in each round

    def add(self, pairs: int, seconds: float, cpu: float) -> None:
        """One round's pairs, wall seconds and CPU seconds."""
        self.pairs += pairs
        self.seconds += seconds
        self.cpu += cpu
        self.per_round.append(1e6 * cpu / pairs if pairs else float("nan"))

    @property
    def us_per_pair(self) -> float:
        return 1e6 * self.cpu / self.pairs if self.pairs else float("nan")

    @property
    def rate(self) -> float:
        return self.pairs / self.seconds if self.seconds else float("nan")


@dataclass
class Results:
    """One run: tallies by (server, load), the versions checked, the profiles by server."""

    tallies: dict[tuple[str, str], Tally] = field(default_factory=dict)
    # (server, model) -> (version after the run, feedbacks acknowledged)
    versions: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    # server -> share of the profile's samples by frame, in millionths (absent: no profile)
    own: dict[str, Counter[str]] = field(default_factory=dict)
    cumulative: dict[str, Counter[str]] = field(default_factory=dict)
    others: dict[str, float] = field(default_factory=dict)  # server -> share of other threads' samples
    fs: str = ""


def server_name(side: str, store: str) -> str:
    return f"{side} {store}"


# -- profiles -----------------------------------------------------------------------------------


def parse_collapsed(text: str) -> tuple[Counter[str], Counter[str], int, int]:
    """py-spy's raw (collapsed) stacks -> (own samples by frame, cumulative samples by frame, total,
    samples of other threads), for the event loop's thread only.

    Each line is ``frame;frame;...;leaf count``, the root first. A frame counts once per stack in
    the cumulative tally, however often it recurs in that stack. Stacks rooted in
    ``threading``'s ``_bootstrap`` are the other threads' (the SQLite store's fsync and checkpoint
    threads, which py-spy counts as busy while they wait in ``fdatasync``): counted apart.
    """
    own: Counter[str] = Counter()
    cumulative: Counter[str] = Counter()
    total = others = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_short(f) for f in stack.split(";")]
        if "_bootstrap (threading.py" in frames[0]:  # Thread._bootstrap
            others += n
            continue
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            cumulative[frame] += n
    return own, cumulative, total, others


def _short(frame: str) -> str:
    """``func (path:line)`` with the path cut to its package (``service/...``, ``starlette/...``)."""
    func, _, where = frame.partition(" (")
    where = where.rstrip(")")
    for marker in ("site-packages/", "/lib/python3.11/"):
        if marker in where:
            where = where.split(marker, 1)[1]
            break
    else:
        parts = Path(where).parts
        for root in ("service", "lab"):
            if root in parts:
                where = "/".join(parts[parts.index(root) :])
                break
    return f"{func} ({where})" if where else func


#: Package areas of the own-time breakdown: (area, markers of a frame's path), first match wins.
AREAS = (
    ("uvicorn + httptools", ("uvicorn/", "httptools")),
    ("starlette + fastapi", ("starlette/", "fastapi/", "fastapi_offline/")),
    ("pydantic", ("pydantic",)),
    ("prometheus-client", ("prometheus_client/",)),
    ("asyncio + uvloop", ("asyncio/", "uvloop", "contextvars")),
    ("logging", ("logging/",)),
    ("json", ("json/",)),
    ("redis-py", ("redis/",)),
    ("service/api", ("service/api/",)),
    ("service/store", ("service/store/",)),
    ("service/runtime", ("service/runtime",)),
    ("service (features, learners, sampling)", ("service/",)),
)


def area(frame: str) -> str:
    """The package area of a frame (:data:`AREAS`), else ``other``."""
    for name, markers in AREAS:
        if any(m in frame for m in markers):
            return name
    return "other"


@contextlib.contextmanager
def _profiling(pid: int, seconds: float, out: Path) -> Iterator[None]:
    """py-spy samples process ``pid`` (all threads, without stopping it) for ``seconds`` while the
    block runs; its collapsed stacks land in ``out`` (left absent where py-spy cannot run)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    cmd = [spy, "record", "-p", str(pid), "-d", f"{seconds:g}", "-r", str(PROFILE_RATE)]
    cmd += ["--nonblocking", "--function", "-f", "raw", "-o", str(out)]
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        yield
        return
    time.sleep(0.3)  # attached
    try:
        yield
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=seconds + 30)


# -- the run ------------------------------------------------------------------------------------


def measure(seconds: float, rounds: int, profile_seconds: float) -> Results:
    """Start every server, run the interleaved rounds and the profiles; see the module docstring."""
    steps = {
        "hashed": _pair(*_hashed_bodies(2000, MODELS["hashed"][0])),
        "dense": _pair(*_bodies(2000)),
    }
    trees = {"base": base_tree(), "now": redis_cost.ROOT}
    py = sys.executable
    uv = ["--host", "127.0.0.1", "--port", "{port}", "--log-level", "warning"]
    res = Results()
    with tempfile.TemporaryDirectory(prefix="clickboost-lean-") as tmp, contextlib.ExitStack() as stack:
        res.fs = _fs_type(tmp)
        cmds: dict[str, tuple[list[str], dict[str, str]]] = {
            "app": ([py, "-m", "uvicorn", "lab.bench.lean:bench_app", "--factory", *uv], {})
        }
        for side, store in itertools.product(SIDES, STORES):
            name = server_name(side, store)
            url = None
            if store == "redis":  # one Redis per server: two servers on one would follow each other
                redis = RedisServer(Path(tmp))
                redis.start()
                stack.callback(redis.stop)
                url = redis.url
            data = Path(tmp) / name.replace(" ", "-")
            data.mkdir()
            # -P: the code comes from PYTHONPATH (that tree), not from the current directory
            cmds[name] = (
                [py, "-P", "-m", "service", "serve", *uv],
                settings(store, data, url) | {"PYTHONPATH": str(trees[side])},
            )
        up = stack.enter_context(_servers(cmds))
        for name in cmds:
            if name == "app":
                continue
            for model, spec in MODELS.values():
                httpx.put(f"{up[name][0]}/models/{model}", json=spec, timeout=60).raise_for_status()
        order = [*(server_name(s, st) for st in STORES for s in SIDES), "app"]
        for _ in range(rounds):
            for load, step in steps.items():
                for name in order:
                    url, pid = up[name]
                    cpu = _cpu_seconds(pid)
                    count, secs, _ = asyncio.run(_load(url, step, seconds, CONNECTIONS))
                    res.tallies.setdefault((name, load), Tally()).add(count, secs, _cpu_seconds(pid) - cpu)
        for name in order[:-1]:
            for load, (model, _) in MODELS.items():
                res.versions[(name, model)] = (
                    _version(up[name][0], model, res.tallies[(name, load)].pairs),
                    res.tallies[(name, load)].pairs,
                )
        for name in order:
            url, pid = up[name]
            out = Path(tmp) / f"profile-{name.replace(' ', '-')}.txt"
            with _profiling(pid, profile_seconds, out):
                asyncio.run(_load(url, steps["hashed"], profile_seconds + 0.5, CONNECTIONS))
            if out.exists():
                own, cumulative, total, others = parse_collapsed(out.read_text())
                res.others[name] = others / (total + others) if total + others else 0.0
                res.cumulative[name] = Counter({f: round(1e6 * n / total) for f, n in cumulative.items()})
                res.own[name] = Counter({f: round(1e6 * n / total) for f, n in own.items()})
    return res


def _version(url: str, model: str, expected: int, timeout: float = 30.0) -> int:
    """The model's version once it reaches ``expected`` (events still being applied), or at the
    timeout whatever it is."""
    deadline = time.monotonic() + timeout
    while True:
        version = int(httpx.get(f"{url}/models/{model}", timeout=10).json()["version"])
        if version >= expected or time.monotonic() > deadline:
            return version
        time.sleep(0.1)


# -- the report ---------------------------------------------------------------------------------


def _pct(millionths: int) -> str:
    return f"{millionths / 1e4:.1f}"


def profile_tables(res: Results, name: str) -> str:
    """The top own-share functions of server ``name`` and its own share by area, as markdown."""
    own, cumulative = res.own.get(name), res.cumulative.get(name)
    if own is None or cumulative is None:
        return f"{name}: no profile (py-spy missing or not allowed to attach here)."
    rows = [[f"`{f}`", _pct(n), _pct(cumulative[f])] for f, n in own.most_common(TOP)]
    by_area: Counter[str] = Counter()
    for f, n in own.items():
        by_area[area(f)] += n
    areas = ", ".join(f"{a} {_pct(n)}" for a, n in by_area.most_common())
    return (
        f"{report.table(['function (own share first)', 'own %', 'cumulative %'], rows, 'lrr')}\n\n"
        f"Own share by package: {areas}. Other threads: {100 * res.others.get(name, 0.0):.0f}% of all "
        "samples, not in these shares."
    )


def render(res: Results, quick: bool, seconds: float, rounds: int) -> str:
    """The section of docs/BENCHMARKS.md: the table, the verdicts, the checks and the profiles."""
    flag = " --quick" if quick else ""
    lines = [
        "## Lean request path: server CPU per predict + feedback pair (issue 52)",
        "",
        f"`python -m service lab bench lean{flag}`. {report.machine()} Commit {BASE} ({BASE_DATE}, "
        f"before issue 52) beside this tree and a bare FastAPI app answering the same JSON shapes, all "
        f"up at once, loads interleaved in {rounds} round(s) of {seconds:g} s, {CONNECTIONS} keep-alive "
        f"connections sending predict then feedback. Banditron K = {K}: `hashed`, "
        f"`hashing_bits` {HASHED_BITS} with 30 named string features; `dense`, d = 784 (MNIST rows). "
        f"SQLite in a temporary directory on {res.fs}, `CLICKBOOST_SQLITE_SYNCHRONOUS=full`; Redis: a "
        "private redis-server per server (its CPU not counted). CPU: the server process's, from /proc, "
        "per pair answered.",
        "",
    ]
    header = [
        "load",
        "store",
        f"{BASE} µs/pair",
        "now µs/pair",
        f"now / {BASE} (≤ {MAX_BASE_RATIO})",
        "median of rounds",
        "app / now",
        f"pairs/s {BASE}",
        "pairs/s now",
    ]
    rows = []
    verdicts = []
    for load in MODELS:
        app = res.tallies[("app", load)]
        for store in STORES:
            base, now = (res.tallies[(server_name(s, store), load)] for s in SIDES)
            ratio = now.us_per_pair / base.us_per_pair
            median = statistics.median(n / b for n, b in zip(now.per_round, base.per_round, strict=True))
            vs_app = app.us_per_pair / now.us_per_pair
            want = MIN_APP_RATIO.get(store)
            app_cell = f"{vs_app:.2f}" + (f" (≥ {want})" if want is not None else "")
            rows.append(
                [
                    load,
                    store,
                    f"{base.us_per_pair:,.0f}",
                    f"{now.us_per_pair:,.0f}",
                    f"{ratio:.2f}",
                    f"{median:.2f}",
                    app_cell,
                    f"{base.rate:,.0f}",
                    f"{now.rate:,.0f}",
                ]
            )
            if load == "hashed":
                verdicts.append(
                    f"{store} now/{BASE} {ratio:.2f} {'met' if ratio <= MAX_BASE_RATIO else 'MISSED'}"
                )
                if want is not None:
                    verdicts.append(f"{store} app/now {vs_app:.2f} {'met' if vs_app >= want else 'MISSED'}")
        rows.append([load, "app", "", f"{app.us_per_pair:,.0f}", "", "", "", "", f"{app.rate:,.0f}"])
    lines += [report.table(header, rows, "llrrrrrrr"), ""]
    lines += [f"Targets of issue 52 on the hashed load: {'; '.join(verdicts)}.", ""]
    wrong = [
        f"{name} {model}: version {v} for {n} acknowledged feedbacks"
        for (name, model), (v, n) in res.versions.items()
        if v != n
    ]
    checked = len(res.versions)
    lines += [
        "Correctness: every feedback was answered 200 (the client stops at any other status); "
        + (
            f"each of the {checked} (server, model) versions after the run equals its acknowledged "
            "feedbacks (one learn event each)."
            if not wrong
            else "versions that differ from the acknowledged feedbacks: " + "; ".join(wrong) + "."
        ),
        "",
        f"### Where the CPU goes (py-spy, {PROFILE_RATE} samples/s, hashed load)",
        "",
        "Shares of the event-loop thread's samples while busy (where requests are served): own (the "
        "function itself, C calls it makes included) and cumulative (it and what it calls). The "
        "functions with the largest own share, per server.",
    ]
    for store in STORES:
        for side in SIDES:
            name = server_name(side, store)
            label = f"commit {BASE}" if side == "base" else "now"
            lines += ["", f"**{store}, {label}**", "", profile_tables(res, name)]
    return "\n".join(lines)


@benches.register("lean")
def bench_lean(quick: bool) -> str:
    """CPU per pair at :data:`BASE` and now on every store, against the bare app; profiles."""
    # many short rounds: a burst of load from elsewhere falls on every server alike
    seconds, rounds, profile_seconds = (1.0, 1, 1.0) if quick else (2.5, 6, 8.0)
    res = measure(seconds, rounds, profile_seconds)
    return render(res, quick, seconds, rounds)
