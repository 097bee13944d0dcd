"""The quality race against Vowpal Wabbit's contextual bandits (issue 24; issue 9, parts 1 and 2).

The plan (:data:`FULL`): all ten data sets, whole streams, seeds 0..4, and on every shuffled stream
(:meth:`Dataset.stream`) every system of :func:`systems`: each bandit learner of ours at the defaults
of its ``Params``, VW ``--cbify K`` with each explorer of :data:`lab.bench.vw.EXPLORERS` at VW's
defaults, the full-information references (they read the true label; for scale only, never marked
best), and a booster at the best setting of the stored defaults sweep (:mod:`lab.sweep`) where that
setting is not already its default (the "best of sweep" column). Two protocols, both scored on the
*sampled* label:

``online``
    error rate of one pass over the shuffled data set;
``last20``
    accuracy on the last 20% of the duplicated stream, with the duplication factors of seed 001
    (:data:`DUPLICATE`, ALGORITHMS.md §2.10). Data sets without a documented factor are streamed
    once, so their last20 number comes from the same run as their online number.

Every run is stored as it finishes, one line in :data:`STORE` (a committed JSON-lines file of
:mod:`lab.runcache`, as the sweep's and seed 001's runs), keyed by data set, duplication factor,
seed, stream cut, system, its whole setting and the version of the code it ran (:func:`version`).
The race therefore resumes across sessions and fresh clones, a killed run loses only the run in
progress, and the report is rendered from whatever planned runs are stored. Runs go cheap first
(:func:`plan_runs`): the linear learners and VW on every stream, smallest streams first, then the
boosters the same way. ``$CLICKBOOST_QUALITY_HOURS`` caps the wall time: no run starts after that
many hours (``0``: only render what is stored); the command resumes where it stopped.

Speed is examples per second of the same runs, in-process, single thread: ours is
:func:`lab.sim.stream.run_stream` (decision ids, sampling, learn); VW's is parse -> learn ->
read the prediction, with the text lines built before the clock starts.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import math
import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from lab import sweep
from lab.bench import benches, report
from lab.bench.vw import EXPLORERS, run_vw, to_lines, vw_version
from lab.runcache import cached, lookup
from lab.runcache import progress as report_progress
from lab.sim.datasets import load_dataset
from lab.sim.metrics import last20_accuracy, online_error
from lab.sim.stream import ready, run_stream
from service.cli import CLIError
from service.config import DEFAULT_LEARNER
from service.learners.base import learners, make_learner
from service.sampling import DecisionIds

ROOT = Path(__file__).resolve().parents[2]

#: Duplication factors of seed 001's protocol (``pi224/banditboosting:run.py``, ALGORITHMS.md §2.10).
DUPLICATE: dict[str, int] = {"balance": 10, "car": 6, "nursery": 4, "mice": 8, "isolet": 15}


@dataclass(frozen=True)
class Plan:
    """What one benchmark run covers."""

    datasets: tuple[str, ...]
    seeds: tuple[int, ...]
    limit: int | None  # cap on every stream's length (None: the whole stream)


ALL_DATASETS = (
    "balance",
    "car",
    "mice",
    "dna",
    "nursery",
    "isolet",
    "connect4",
    "mnist",
    "synsep",
    "synnonsep",
    "digits",  # issue 41's wide numeric tuning set: a tuning row (lab.sweep.TUNING), not evaluation
)
FULL = Plan(ALL_DATASETS, (0, 1, 2, 3, 4), None)
QUICK = Plan(("balance", "car", "dna"), (0, 1), 400)

#: Every run of the full plan (committed, so the race accumulates across sessions and machines).
STORE = ROOT / "docs" / "repro" / "quality-runs.jsonl"
#: The defaults sweep's runs (``clickboost sweep-defaults``), read for the "best of sweep" column.
SWEEP_STORE = ROOT / "docs" / "repro" / "sweep-runs.jsonl"
#: Environment variable capping the wall time of one invocation, in hours.
HOURS_ENV = "CLICKBOOST_QUALITY_HOURS"

#: Learners run before the others (fast: O(K nnz) per event); the rest follow, smallest streams first.
_CHEAP = frozenset({"banditron", "cova", "perceptron"})

#: VW's runs are keyed by VW's version and this tag of our driver (one tag for the race and the sweep).
VW_DRIVER = sweep.VW_DRIVER


# ----------------------------------------------------------------------------------------------
# Systems, versions, the plan
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class System:
    """One competitor.

    ``kind`` is ``ours`` (bandit learner at its defaults), ``sweep`` (a booster at the sweep's best
    setting, where that is not its default), ``vw`` or ``reference`` (full information). ``learner``
    is the registered learner (``vw`` for VW), ``params`` the whole setting as canonical JSON (VW:
    the explorer's arguments), ``version`` the code version of :func:`version`; these three key the
    runs. ``sweep_best``: these runs are the learner's best setting of the sweep.
    """

    name: str
    kind: str
    setting: str
    source: str
    learner: str = ""
    params: str = "{}"
    version: str = ""
    sweep_best: bool = False


def _import_names(path: Path) -> set[str]:
    """Dotted names a source file imports (``from a.b import c`` gives ``a.b`` and ``a.b.c``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


#: The modules a learner's numbers can depend on (the rest of the service is serving machinery).
_ARITHMETIC = ("service.learners.", "service.kernels", "service.sampling")


def learner_files(learner: str) -> list[Path]:
    """The sources of ``learner``'s runs: its module and what it imports, transitively, from the
    learners' packages, the kernels and the sampler (an imported package: all its modules), plus
    the decision ids (``service/sampling.py``) and the stream loop (``lab/sim/stream.py``)."""
    files: set[Path] = set()
    seen: set[str] = set()
    todo = [learners.get(learner).__module__, "service.sampling"]
    while todo:
        name = todo.pop()
        if name in seen or not name.startswith(_ARITHMETIC):
            continue
        seen.add(name)
        try:
            spec = importlib.util.find_spec(name)
        except (ModuleNotFoundError, ValueError):  # a class or function, not a module
            continue
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        origin = Path(spec.origin)
        for path in sorted(origin.parent.glob("**/*.py")) if spec.submodule_search_locations else [origin]:
            if path not in files:
                files.add(path)
                todo.extend(_import_names(path))
    return [*sorted(files), ROOT / "lab" / "sim" / "stream.py"]


def code_digest(path: Path) -> bytes:
    """What a source file computes: its syntax tree without docstrings (comments are not in it),
    so that an edit of the prose keeps the runs keyed by it."""
    tree = ast.parse(path.read_bytes())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).digest()


def module_fingerprint(learner: str) -> str:
    """Hash of :func:`learner_files`' code (:func:`code_digest`): the version of a learner without a
    pinned one."""
    h = hashlib.sha256()
    for path in learner_files(learner):
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + code_digest(path))
    return h.hexdigest()[:16]


def version(kind: str, learner: str) -> str:
    """The code version a run of ``learner`` (``kind`` ``vw``: an explorer) is keyed by.

    Our learners and the references: the pinned results version of the sweep (:data:`lab.sweep.VERSION`,
    seed 001's ``RESULTS_VERSION`` plus BanditBoost's), which ``tests/lab/test_results_pinned.py``
    holds to the arithmetic, so an edit that moves no number keeps the runs (every learner has
    one since the linear learners and AdaBoost.MH were pinned too: an edit of the weak learners'
    package had thrown away C-OVA's runs). A learner without one gets a fingerprint of its own
    sources only (:func:`learner_files`), not of every learner's: any edit of those sources
    (comments included) discards its runs. VW: its version and :data:`VW_DRIVER`.
    """
    if kind == "vw":
        return sweep.run_version(sweep.VW)
    return sweep.VERSION.get(learner) or module_fingerprint(learner)


def sweep_best(learner: str, store: Path | None = SWEEP_STORE) -> tuple[dict[str, Any], float] | None:
    """The best setting of ``learner``'s defaults sweep and its mean online error, read from the
    sweep's stored runs (keys by :func:`lab.sweep.run_key`); None when ``learner`` has no
    grid or a run of its grid is not stored at its current version (nothing is computed here)."""
    if store is None or learner not in sweep.GRIDS:
        return None
    scored = []
    for params in sweep.settings(learner):
        means = []
        for dataset in sweep.TUNING:
            errors = []
            for seed in sweep.SEEDS:
                got = lookup(store, sweep.run_key(learner, params, dataset, seed))
                if got is None:
                    return None
                errors.append(got["error"])
            means.append(float(np.mean(errors)))
        scored.append((float(np.mean(means)), params))
    error, best = min(scored, key=lambda s: s[0])
    return best, error


def _describe(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items()) or "none"


def systems(sweep_store: Path | None = SWEEP_STORE) -> list[System]:
    """Every system compared: ours at defaults, sweep bests that differ from them, VW, references."""
    ours, swept, refs = [], [], []
    for name, cls in learners.items():
        if cls.actions:  # scored on candidates' features: bench actions
            continue
        defaults = cls.Params().key()  # the stored runs' keys
        kind = "reference" if cls.full_information else "ours"
        found = None if cls.full_information else sweep_best(name, sweep_store)
        best, error = (cls.Params(**found[0]).key(), found[1]) if found else (None, 0.0)
        system = System(
            name,
            kind,
            f"defaults: {_describe(defaults)}",
            "full information; for scale" if kind == "reference" else "the defaults of its Params",
            name,
            json.dumps(defaults, sort_keys=True),
            version(kind, name),
            sweep_best=best == defaults,
        )
        (refs if cls.full_information else ours).append(system)
        if best is not None and best != defaults:
            changed = {k: v for k, v in best.items() if defaults.get(k) != v}
            swept.append(
                System(
                    f"{name}@sweep",
                    "sweep",
                    _describe(changed) + ", else defaults",
                    f"best of the stored sweep (mean online error {error:.4f} on "
                    f"{', '.join(sweep.TUNING)}); not its default",
                    name,
                    json.dumps(best, sort_keys=True),
                    system.version,
                    sweep_best=True,
                )
            )
    vw = [
        System(n, "vw", f"--cbify K {a}", "VW defaults otherwise", "vw", a, version("vw", n))
        for n, a in EXPLORERS.items()
    ]
    found = sweep_best(sweep.VW, sweep_store)
    if found is not None:  # same key as an explorer's runs when the best adds nothing to it
        args = sweep.vw_args(found[0])
        vw.append(
            System(
                "vw@sweep",
                "vw-sweep",
                f"--cbify K {args}",
                f"best of the stored sweep of VW (mean online error {found[1]:.4f} on "
                f"{', '.join(sweep.TUNING)}); VW defaults otherwise",
                "vw",
                args,
                version("vw", "vw@sweep"),
            )
        )
    return ours + swept + vw + refs


@dataclass(frozen=True)
class Run:
    """One planned run: ``system`` over the stream of (``dataset``, ``factor``, ``seed``)."""

    dataset: str
    factor: int
    seed: int
    cut: int | None  # stream cut at this many rounds (None: the whole stream)
    system: System

    @property
    def key(self) -> str:
        """The run's key in the store: everything its result depends on, the column name excepted."""
        s = self.system
        setting = json.loads(s.params) if s.learner != "vw" else s.params
        return json.dumps(
            ["quality", self.dataset, self.factor, self.seed, self.cut, s.learner, setting, s.version]
        )


@cache
def _shape(dataset: str) -> tuple[int, int, int]:
    ds = load_dataset(dataset)
    return ds.n, ds.d, ds.n_labels


def _pairs(system: System) -> bool:
    """Whether the system learns every pairwise product of the input (its work grows as d^2)."""
    if system.learner == "vw":
        return "-q" in system.params.split()
    return json.loads(system.params).get("interactions") in ("pairs", "quadratic")


def plan_runs(plan: Plan, compared: list[System]) -> list[Run]:
    """The runs of ``plan``, cheap first: the linear learners and VW, then the others; within each,
    streams by T x d x K (smallest first), then seed, then system. In the second pass a system
    that learns every pair of the input's features counts T x d^2 x K / 2, so its runs on wide
    streams come last (SquareCB-SGD takes about 80 min on isolet x15, ahead of which every other
    run of the stream waited)."""
    units = []
    for name in plan.datasets:
        n, d, k = _shape(name)
        for factor in sorted({1, DUPLICATE.get(name, 1)}):
            T = n * factor
            cut = plan.limit if plan.limit is not None and plan.limit < T else None
            units.append((min(T, cut or T) * d * k, name, factor, cut))
    units.sort()
    runs, keys = [], set()
    for cheap in (True, False):
        batch = []
        for size, name, factor, cut in units:
            for seed in plan.seeds:
                for system in compared:
                    if (system.kind == "vw" or system.learner in _CHEAP) == cheap:
                        run = Run(name, factor, seed, cut, system)
                        if run.key not in keys:
                            keys.add(run.key)
                            d = _shape(name)[1]
                            cost = size * max((d - 1) / 2, 1.0) if not cheap and _pairs(system) else size
                            batch.append((cost, len(batch), run))
        runs += [run for *_, run in sorted(batch, key=lambda c: (c[0], c[1]))]
    return runs


# ----------------------------------------------------------------------------------------------
# Running
# ----------------------------------------------------------------------------------------------


def _vw_lines(X: np.ndarray, y: np.ndarray) -> list[str]:
    """:func:`to_lines` of the stream, each distinct row formatted once (duplicated streams repeat rows)."""
    memo: dict[tuple[bytes, int], str] = {}
    out = []
    for i in range(len(y)):
        key = (X[i].tobytes(), int(y[i]))
        line = memo.get(key)
        if line is None:
            line = memo[key] = to_lines(X[i : i + 1], y[i : i + 1])[0]
        out.append(line)
    return out


def _compute(run: Run, streams: dict[str, Any]) -> dict[str, Any]:
    """One run; ``streams`` keeps the current data set and stream (and its VW lines) between runs."""
    if streams.get("dataset") != run.dataset:
        streams.clear()
        streams["dataset"], streams["ds"] = run.dataset, load_dataset(run.dataset)
    ds = streams["ds"]
    unit = (run.factor, run.seed, run.cut)
    if streams.get("unit") != unit:
        streams.update(unit=unit, stream=ds.stream(run.seed, run.factor, run.cut), lines=None)
    X, y = streams["stream"]
    system = run.system
    if system.learner == "vw":
        if streams["lines"] is None:
            streams["lines"] = _vw_lines(X, y)
        vw = run_vw(system.params, ds.n_labels, streams["lines"], y, run.seed)
        correct, seconds = vw.correct, vw.seconds
    else:
        model = make_learner(system.learner, ds.d, ds.n_labels, json.loads(system.params), seed=run.seed)
        ready(model)  # kernels loaded before the clock: the speed is the learning's
        start = time.perf_counter()
        correct = run_stream(model, X, y, DecisionIds.for_seed(run.seed))
        seconds = time.perf_counter() - start
    return {
        "dataset": run.dataset,
        "factor": run.factor,
        "seed": run.seed,
        "system": system.name,
        "T": len(correct),
        "online": online_error(correct),
        "last20": last20_accuracy(correct),
        "seconds": seconds,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
    }


@dataclass(frozen=True)
class Status:
    """How far the plan is: runs planned and stored, their summed run time, what this call did."""

    planned: int
    stored: int
    seconds: float  # summed over the stored runs (each run's own timed loop)
    computed: int  # runs computed by this call
    stopped: bool  # this call stopped starting runs at the wall-time cap
    missing: dict[str, int]  # system -> planned runs not stored
    dates: tuple[str, str] | None = None  # first and last day a stored run was made


def hours_cap() -> float | None:
    """``$CLICKBOOST_QUALITY_HOURS`` (None when unset)."""
    raw = os.environ.get(HOURS_ENV, "").strip()
    if not raw:
        return None
    try:
        hours = float(raw)
    except ValueError:
        hours = -1.0
    if not hours >= 0:
        raise CLIError(f"{HOURS_ENV} must be a number of hours >= 0, got {raw!r}")
    return hours


def execute(
    runs: list[Run],
    store: Path,
    progress: Callable[[str], None] = lambda _: None,
    hours: float | None = None,
) -> Status:
    """Compute every run of ``runs`` not yet in ``store``, in order, each stored as it finishes;
    with ``hours``, no run starts after that many hours."""
    deadline = None if hours is None else time.monotonic() + hours * 3600
    todo = [r for r in runs if lookup(store, r.key) is None]
    progress(
        f"quality: {len(runs) - len(todo)} of {len(runs)} planned runs stored, {len(todo)} to run"
        + (f" (no run starts after {hours:g} h)" if hours is not None else "")
    )
    streams: dict[str, Any] = {}
    computed, stopped = 0, False
    for i, run in enumerate(todo, 1):
        if deadline is not None and time.monotonic() >= deadline:
            stopped = True
            progress(f"quality: wall-time cap of {hours:g} h reached; {len(todo) - computed} runs left")
            break
        got = cached(store, run.key, lambda r=run: _compute(r, streams))
        computed += 1
        progress(
            f"[{i}/{len(todo)}] {run.dataset} x{run.factor} seed {run.seed} {run.system.name}: "
            f"online error {got['online']:.4f}, last20 {got['last20']:.4f}, {got['seconds']:.1f} s"
        )
    return status(runs, store, computed, stopped)


def status(runs: list[Run], store: Path, computed: int = 0, stopped: bool = False) -> Status:
    """:class:`Status` of ``runs`` in ``store``."""
    got = [lookup(store, r.key) for r in runs]
    missing = Counter(r.system.name for r, g in zip(runs, got, strict=True) if g is None)
    seconds = sum(g["seconds"] for g in got if g is not None)
    days = sorted(g["date"] for g in got if g is not None and "date" in g)
    dates = (days[0], days[-1]) if days else None
    return Status(
        len(runs), sum(g is not None for g in got), seconds, computed, stopped, dict(missing), dates
    )


@dataclass(frozen=True)
class Result:
    """One protocol's number of one stored run."""

    dataset: str
    protocol: str  # "online" or "last20"
    T: int
    system: str
    seed: int
    value: float  # online: error rate; last20: accuracy
    seconds: float


def collect(runs: list[Run], store: Path) -> list[Result]:
    """The results of the planned ``runs`` stored in ``store`` (missing runs are left out)."""
    results = []
    for run in runs:
        got = lookup(store, run.key)
        if got is None:
            continue
        for protocol, factor in (("online", 1), ("last20", DUPLICATE.get(run.dataset, 1))):
            if run.factor == factor:
                res = Result(
                    run.dataset, protocol, got["T"], run.system.name, run.seed, got[protocol], got["seconds"]
                )
                results.append(res)
    return results


def run_plan(
    plan: Plan,
    store: Path,
    progress: Callable[[str], None] = lambda _: None,
    compared: list[System] | None = None,
    hours: float | None = None,
) -> tuple[list[Result], list[Run], Status]:
    """Run what of ``plan`` is not stored yet (see :func:`execute`); the stored results, the
    planned runs and the status."""
    runs = plan_runs(plan, compared if compared is not None else systems())
    done = execute(runs, store, progress, hours)
    return collect(runs, store), runs, done


# ----------------------------------------------------------------------------------------------
# Tables
# ----------------------------------------------------------------------------------------------


def _by_seed(results: list[Result], protocol: str) -> dict[str, dict[str, dict[int, float]]]:
    """dataset -> system -> seed -> value in %."""
    out: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in results:
        if r.protocol == protocol:
            out[r.dataset][r.system][r.seed] = r.value * 100
    return out


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (nan for one value)."""
    v = np.asarray(values, dtype=float)
    se = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan
    return float(v.mean()), se


def cell(values: list[float], planned: int) -> str:
    """``mean ± SE`` in %, with ``(n=…)`` when fewer than ``planned`` seeds are stored."""
    m, se = mean_se(values)
    text = f"{m:.1f}" if math.isnan(se) else f"{m:.1f} ± {se:.1f}"
    return text + (f" (n={len(values)})" if len(values) < planned else "")


@dataclass(frozen=True)
class Margin:
    """Best of ours against best VW explorer on one data set, paired over their common seeds."""

    dataset: str
    ours: str
    ours_mean: float
    vw: str
    vw_mean: float
    diff: float  # ours - VW in points, mean over the common seeds
    se: float  # its standard error (paired; nan for fewer than 2 common seeds)
    n: int  # common seeds
    lower_better: bool

    @property
    def lost(self) -> bool:
        return round(self.diff, 1) != 0 and (self.diff > 0) == self.lower_better

    def outcome(self) -> str:
        """``we lose by 2.6 ± 0.4 points`` / ``we win by …`` / ``tie``, flagged when within 2 SE."""
        se = "" if math.isnan(self.se) else f" ± {self.se:.1f}"
        if round(self.diff, 1) == 0:
            return f"tie (0.0{se} points)"
        text = f"{'we lose' if self.lost else 'we win'} by {abs(self.diff):.1f}{se} points"
        if math.isnan(self.se):
            return text + " (one seed: no SE)"
        return text + (" (within 2 SE)" if abs(self.diff) < 2 * self.se else "")


def _best(by_system: dict[str, dict[int, float]], names: list[str], lower_better: bool) -> str | None:
    means = {n: float(np.mean(list(by_system[n].values()))) for n in names if by_system.get(n)}
    if not means:
        return None
    return (min if lower_better else max)(means, key=means.__getitem__)


def margin(
    dataset: str, by_system: dict[str, dict[int, float]], ours: str, vw: str, lower_better: bool
) -> Margin:
    """:class:`Margin` of system ``ours`` against system ``vw`` (values in % by seed)."""
    a, b = by_system[ours], by_system[vw]
    common = sorted(a.keys() & b.keys())
    diffs = [a[s] - b[s] for s in common]
    diff, se = mean_se(diffs) if diffs else (math.nan, math.nan)
    return Margin(
        dataset,
        ours,
        float(np.mean(list(a.values()))),
        vw,
        float(np.mean(list(b.values()))),
        diff,
        se,
        len(common),
        lower_better,
    )


def margins(
    results: list[Result],
    protocol: str,
    compared: list[System],
    sweep_side: bool = False,
    vw_sweep: bool = False,
) -> list[Margin]:
    """Per data set: best of ours at defaults (``sweep_side``: of the swept learners at their sweep's
    best setting) against the best VW explorer at VW's defaults (``vw_sweep``: VW at its sweep's best
    setting), each picked by its mean over the stored seeds."""
    lower_better = protocol == "online"
    if sweep_side:
        ours = [s.name for s in compared if s.sweep_best]
    else:
        ours = [s.name for s in compared if s.kind == "ours"]
    vws = [s.name for s in compared if s.kind == ("vw-sweep" if vw_sweep else "vw")]
    out = []
    for dataset, by_system in _by_seed(results, protocol).items():
        o, v = _best(by_system, ours, lower_better), _best(by_system, vws, lower_better)
        if o is not None and v is not None and by_system[o].keys() & by_system[v].keys():
            out.append(margin(dataset, by_system, o, v, lower_better))
    return out


def _role(dataset: str) -> str:
    return "tuned on this data set" if dataset in sweep.TUNING else "evaluation"


def quality_table(results: list[Result], protocol: str, compared: list[System], planned: int) -> str:
    """Data set x system (mean ± SE in %, best bandit system at defaults in bold), and the best of
    the sweep settings of ours."""
    lower_better = protocol == "online"
    names = [s.name for s in compared]
    contenders = [s.name for s in compared if s.kind in ("ours", "vw")]
    swept = [s.name for s in compared if s.sweep_best]
    T = {(r.dataset, r.system): r.T for r in results if r.protocol == protocol}
    rows = []
    for dataset, by_system in _by_seed(results, protocol).items():
        best = _best(by_system, contenders, lower_better)
        cells = []
        for n in names:
            if not by_system.get(n):
                cells.append("–")
                continue
            text = cell(list(by_system[n].values()), planned)
            cells.append(f"**{text}**" if n == best else text)
        top = _best(by_system, swept, lower_better)
        sweep_cell = f"{cell(list(by_system[top].values()), planned)} {top}" if top else "–"
        t = next(T[(dataset, n)] for n in names if (dataset, n) in T)
        rows.append([dataset, _role(dataset), t, *cells, sweep_cell])
    header = ["dataset", "role", "T", *names, "best of sweep (ours)"]
    return report.table(header, rows)


def margin_table(results: list[Result], protocol: str, compared: list[System]) -> tuple[str, list[Margin]]:
    """Per data set: the margin of best of ours (defaults; and best of sweep) to the best VW explorer."""
    main = margins(results, protocol, compared)
    by_sweep = {m.dataset: m for m in margins(results, protocol, compared, sweep_side=True)}
    both = {m.dataset: m for m in margins(results, protocol, compared, sweep_side=True, vw_sweep=True)}
    rows = []
    for m in main:
        s, b = by_sweep.get(m.dataset), both.get(m.dataset)
        se = "" if math.isnan(m.se) else f" ± {m.se:.1f}"
        rows.append(
            [
                m.dataset,
                _role(m.dataset),
                f"{m.ours} {m.ours_mean:.1f}",
                f"{m.vw} {m.vw_mean:.1f}",
                f"{m.diff:+.1f}{se}",
                m.n,
                m.outcome(),
                f"{s.ours}: {s.outcome()}" if s else "–",
                f"{b.ours} {b.ours_mean:.1f} vs {b.vw_mean:.1f}: {b.outcome()}" if b else "–",
            ]
        )
    header = [
        "dataset",
        "role",
        "best of ours (defaults)",
        "best VW (defaults)",
        "ours − VW (points)",
        "seeds",
        "outcome",
        "best of sweep vs best VW",
        "best of sweep vs vw@sweep",
    ]
    return report.table(header, rows, "llllrrlll"), main


def default_margins(results: list[Result], protocol: str, compared: list[System]) -> list[Margin]:
    """Per data set: the served label default alone (:data:`service.config.DEFAULT_LEARNER`, the
    system of that learner at its defaults) against the best VW explorer at VW's defaults (issue 50:
    a user gets one learner, not the best of ours per data set)."""
    lower_better = protocol == "online"
    name = DEFAULT_LEARNER[0] if not DEFAULT_LEARNER[1] else None
    vws = [s.name for s in compared if s.kind == "vw"]
    out = []
    for dataset, by_system in _by_seed(results, protocol).items():
        v = _best(by_system, vws, lower_better)
        if name and by_system.get(name) and v is not None and by_system[name].keys() & by_system[v].keys():
            out.append(margin(dataset, by_system, name, v, lower_better))
    return out


def default_table(results: list[Result], protocol: str, compared: list[System]) -> str:
    """:func:`default_margins` as a table and a verdict: ahead, within one standard error, or behind."""
    main = default_margins(results, protocol, compared)
    rows, ahead, within = [], 0, 0
    for m in main:
        se = "" if math.isnan(m.se) else f" ± {m.se:.2f}"  # 2 decimals: synsep's margins are tenths
        if not m.lost and round(m.diff, 1) != 0:
            verdict, ahead = "ahead", ahead + 1
        elif not math.isnan(m.se) and abs(m.diff) <= m.se:
            verdict, within = "within one standard error", within + 1
        else:
            verdict = "behind"
        ours, vw = f"{m.ours} {m.ours_mean:.2f}", f"{m.vw} {m.vw_mean:.2f}"
        rows.append([m.dataset, _role(m.dataset), ours, vw, f"{m.diff:+.2f}{se}", m.n, verdict])
    header = ["dataset", "role", "served label default", "best VW (defaults)", "default − VW", "seeds", ""]
    behind = len(main) - ahead - within
    return (
        report.table(header, rows, "lllllrl")
        + f"\n\nThe served label default is ahead on {ahead} of {len(main)} data sets, within one standard "
        f"error on {within}, behind on {behind} (issue 50's target: ahead or within one standard error on "
        "every data set, ahead on at least nine)."
    )


def speed_table(
    results: list[Result], compared: list[System], anchor: str = "vw-eps0.05"
) -> tuple[str, list[str]]:
    """Examples/s per dataset and system (online runs), each of ours as a ratio to ``anchor``, and
    one verdict line per learner of ours (on how many data sets it is slower than ``anchor``)."""
    groups: dict[str, dict[str, list[Result]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        if r.protocol == "online":
            groups[r.dataset][r.system].append(r)
    names = [s.name for s in compared]
    ours = [s.name for s in compared if s.kind in ("ours", "sweep")]
    rows, ratios = [], defaultdict(list)
    for dataset, by_system in groups.items():
        # the median run: a run stored before issue 51 (item 14) timed its first call's loading of the
        # compiled kernels when it was a process's first of its learner; the median is not set by it
        eps = {n: float(np.median([r.T / r.seconds for r in rs])) for n, rs in by_system.items() if rs}
        row = {n: eps[n] / eps[anchor] for n in ours if n in eps and anchor in eps}
        for n, r in row.items():
            ratios[n].append(r)
        cells = [f"{eps[n]:,.0f}" if n in eps else "–" for n in names]
        rows.append([dataset, *cells, *[f"{row[n]:.2f}" if n in row else "–" for n in ours]])
    header = ["dataset", *names, *[f"{n} / {anchor}" for n in ours]]
    verdicts = [
        f"{n}: {'slower' if np.median(r) < 1 else 'faster'} than {anchor} in the median "
        f"(ratio {np.median(r):.2f}); slower on {sum(x < 1 for x in r)} of {len(r)} data sets"
        for n, r in ratios.items()
    ]
    return report.table(header, rows), verdicts


def _plot(results: list[Result], compared: list[System], out_dir: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, protocol in zip(axes, ("online", "last20"), strict=True):
        groups = _by_seed(results, protocol)
        datasets = list(groups)
        lower_better = protocol == "online"
        bars = [
            ("best of ours", ("ours",)),
            ("best VW", ("vw",)),
            ("VW tuned (vw@sweep)", ("vw-sweep",)),
            ("best reference", ("reference",)),
        ]
        for i, (label, kinds) in enumerate(bars):
            names = [s.name for s in compared if s.kind in kinds]
            vals, errs = [], []
            for ds in datasets:
                best = _best(groups[ds], names, lower_better)
                m, se = mean_se(list(groups[ds][best].values())) if best else (np.nan, np.nan)
                vals.append(m)
                errs.append(0.0 if math.isnan(se) else se)
            ax.bar(np.arange(len(datasets)) + (i - 1.5) * 0.2, vals, 0.2, yerr=errs, label=label)
        ax.set_xticks(np.arange(len(datasets)), datasets, rotation=45, ha="right")
        ax.set_ylabel("online error (%)" if lower_better else "last-20% accuracy (%)")
        ax.set_title(f"{protocol} (mean ± SE over seeds)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path, link = report.figure_path(out_dir, "quality")
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return link


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.2f} h"


def _progress_text(done: Status, plan: Plan) -> str:
    text = (
        f"**Stored: {done.stored:,} of the {done.planned:,} planned runs** "
        f"({len(plan.datasets)} data sets × their streams × {len(plan.seeds)} seeds × systems), "
        f"total run time so far {_duration(done.seconds)} (the timed loops of the stored runs, one "
        "core; loading data and building VW's text lines not counted)"
        + (f", made {done.dates[0]} to {done.dates[1]}." if done.dates else ".")
    )
    if done.missing:
        left = ", ".join(f"{n} {c}" for n, c in sorted(done.missing.items(), key=lambda x: -x[1]))
        text += f" Not yet run: {left}; the tables show what is stored (cells with fewer seeds say how many)."
    if done.stopped:
        text += f" This invocation stopped starting runs at the `{HOURS_ENV}` cap; run it again to resume."
    return text


#: What was tried to close the losses (issue 24), in words: the measured effects of what was kept are
#: the tables above and the sweep-defaults section; what was dropped was measured on the tuning sets
#: in one-off runs of past sessions, whose scripts are not kept, so no numbers are quoted for them.
TRIED = (
    "Pairwise feature interactions for C-OVA (VW's `-q`; `interactions`, issue 24): kept, C-OVA's "
    "default since its `auto` form pairs only inputs whose pairs get a column each (small dense "
    "inputs, at most 64 non-zeros). It is the best setting of sweep-defaults on the tuning sets. "
    "Hashed pairs are opt-in (`pairs`): on `bench sparse`'s hashed stream (a linear teacher) they "
    "raised C-OVA's error about fourfold at a fifteenth of the speed. On isolet (615 non-zeros) "
    "`auto` pairs nothing, so this did not touch that loss.",
    "A constant (intercept) feature for C-OVA: no gain on the tuning sets; not kept.",
    "Inverse-gap-weighted exploration (SquareCB's rule) on C-OVA's scores: worse on the tuning sets at "
    "every rate tried; not kept.",
    "A passive-aggressive regression per label with inverse-gap weighting (SquareCB-like): worse on car; "
    "not kept.",
    "C-OVA's C retuned on the tuning sets (0.1, was seed 004's 1): kept.",
    "SquareCB with an exact ridge-regression oracle per label (`squarecb`, ours, issue 24's first "
    "direction with recursive least squares instead of VW's SGD): kept as a learner. Said plainly: it "
    "was built after a prototype of it, run once on isolet (evaluation data; 3 seeds, gamma_scale 10, "
    "ridge 1), beat VW's squarecb there; its defaults (gamma_scale 10, ridge 3) come from the sweep on "
    "the tuning sets only.",
    "SquareCB over VW's SGD regression with hashed pairs (`squarecb-sgd`, issue 41): VW's "
    "`--cb_explore_adf --squarecb -q ::` as a label learner (one hashed table, features crossed with the "
    "label), for the wide inputs (connect4, MNIST) where the exact ridge cannot take pairs; kept as a "
    "learner. Its first regressor was not VW's: the normaliser without VW's square root (at `--power_t "
    "0.5`), the scale squared, the reward regressed unclipped, `mtr` weights 1 / p where VW's are "
    "1 / (K p); its sweep's best erred 0.1644 on the tuning sets against 0.1092 for VW's own "
    "`--squarecb -q ::`. Rebuilt as VW computes it (the click's cost regressed from zero weights, an "
    "optimistic start, predictions clipped to [0, 1]; the step agrees with the `vowpalwabbit` "
    "package's own to 2e-6), its sweep's best errs 0.0584 (gamma_scale 100, pairs, unweighted; at "
    "VW's settings 0.0741). Kept, with those defaults.",
    "RegCB over the same regression (`regcb-sgd`, issue 41): VW's `--regcb` (the explorer of "
    "`vw@sweep`), elimination and optimistic, its bounds from the regression's sensitivity as VW "
    "computes them from its raw predictions. Without interactions its decisions are VW's in most "
    "rounds (a test runs both); with `-q ::` and VW's mellowness 0.1 our bounds are much wider than "
    "VW's (0.4461 on the tuning sets; VW's own 0.1047), and the cause is not found. Its sweep's best "
    "(mellowness 0.0001, optimistic, VW's -q ::) errs 0.0615; kept as a learner with those defaults.",
)


def render(
    results: list[Result],
    plan: Plan,
    compared: list[System],
    done: Status,
    command: str,
    out_dir: Path,
) -> str:
    """The markdown of the quality and speed sections (tables, margins, settings, plot)."""
    stamp = report.machine([f"vowpalwabbit {vw_version()}"])
    cover = f"Data sets: {', '.join(plan.datasets)}; seeds {', '.join(map(str, plan.seeds))}; " + (
        f"every stream cut at its first {plan.limit:,} rounds (column T)." if plan.limit else "whole streams."
    )
    planned = len(plan.seeds)
    tuned = ", ".join(d for d in sweep.TUNING if d in plan.datasets) or "none of these"
    parts = [
        f"## Quality vs Vowpal Wabbit\n\n`{command}` (resumable: every run is stored as it finishes; "
        f"`{HOURS_ENV}=H` stops starting runs after H hours). {stamp}\n\n{cover}\n\n"
        + _progress_text(done, plan)
    ]
    swept = [s.name for s in compared if s.sweep_best]
    parts.append(
        "Cells: mean ± standard error over the stored seeds, in %; (n=…): only that many of the "
        f"{planned} planned seeds are stored; –: no run stored. Bold: the best bandit system at "
        "defaults of the row (references and sweep settings excluded). *Best of sweep (ours)*: the "
        f"best of the boosters swept by `clickboost sweep-defaults` ({', '.join(swept) or 'none stored'}), "
        f"each at the best setting of its stored sweep ({', '.join(sweep.TUNING)}, {len(sweep.SEEDS)} "
        f"shuffles, streams cut at {sweep.ROUNDS:,} rounds); where that setting is a booster's default "
        "the column reuses its default runs. Role *tuned on this data set*: the sweep, and so the "
        f"boosters' defaults, were chosen on it ({tuned}), so its cells are tuned on the evaluation "
        "data; role *evaluation*: untouched by any tuning. *vw@sweep*: VW at the best setting of its "
        "own sweep on the same tuning sets (`clickboost sweep-defaults vw`: every explorer of the "
        "table, without and with `-q ::`, VW's pairwise interactions), so that the last margin "
        "column compares tuned with tuned; it is not a contender at defaults (not bold)."
    )
    for protocol, what in (
        ("online", "Online error of one pass (%, lower is better)"),
        ("last20", "Last-20% accuracy of the sampled label on the duplicated stream (%, higher is better)"),
    ):
        tab = quality_table(results, protocol, compared, planned)
        mtab, main = margin_table(results, protocol, compared)
        lost = [m.dataset for m in main if m.lost]
        default = default_table(results, protocol, compared)
        parts.append(
            f"### {what}\n\n{tab}\n\n#### The served label default against VW ({protocol})\n\n{default}\n\n"
            f"#### Margin to VW ({protocol})\n\n{mtab}\n\n"
            "Each side's best is picked per row by its mean on these same streams (a selection both "
            "sides get); the margin is ours − VW in points, paired over the seeds both have, ± its "
            "standard error. "
            + (
                f"**We lose on {len(lost)} of {len(main)} data sets ({', '.join(lost)}).**"
                if lost
                else f"No loss on the {len(main)} data sets with runs of both sides."
            )
        )
    parts.append("#### What was tried against the losses\n\n" + "\n".join(f"- {t}" for t in TRIED))
    dup = ", ".join(f"{k} ×{v}" for k, v in DUPLICATE.items() if k in plan.datasets)
    parts.append(
        f"Duplication for last20 (seed 001): {dup or 'none'}; other data sets are streamed once. "
        "VW counts: our mistake count of VW's sampled actions equals VW's own summed cbify loss in "
        "every run (checked by `run_vw`)."
    )
    settings = [[s.name, s.kind, s.setting, s.source] for s in compared]
    parts.append("### Settings\n\n" + report.table(["system", "kind", "setting", "source"], settings, "llll"))
    if results:
        parts.append(f"![quality]({_plot(results, compared, out_dir)})")
    speed_tab, speed_verdicts = speed_table(results, compared)
    parts.append(
        f"## Speed vs Vowpal Wabbit\n\n`{command}`. {stamp}\n\nExamples per second (absolute, in-process, "
        "one thread; other jobs may run on the machine's other cores, so noisy; a stored run keeps the "
        "time of the session that made it): the median over the stored online runs above, all seeds "
        "(a run stored before issue 51 timed its kernels' loading when it was its process's first of "
        "its learner; the median is not set by such a run); the last columns are ratios from the "
        "same runs.\n\n" + speed_tab + "\n\n" + "\n".join(f"- {v}" for v in speed_verdicts)
    )
    return "\n\n".join(parts)


def save(results: list[Result], path: Path) -> None:
    """Raw results as JSON (one object per run and protocol)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([asdict(r) for r in results], indent=0))


@benches.register("quality")
def bench(quick: bool, progress: Callable[[str], None] | None = None) -> str:
    """Run what of the plan is not stored yet, then render every stored run; the quick plan's runs,
    plot and raw results go to :func:`report.out_dir` (``out/bench-quick/`` by default)."""
    plan = QUICK if quick else FULL
    out_dir = report.out_dir(quick)
    store = out_dir / "bench" / "quality-runs.jsonl" if quick else STORE
    command = "python -m service bench quality" + (" --quick" if quick else "")
    compared = systems()
    results, _, done = run_plan(plan, store, progress or report_progress, compared, hours_cap())
    save(results, out_dir / "bench" / "quality.json")
    return render(results, plan, compared, done, command, out_dir)
