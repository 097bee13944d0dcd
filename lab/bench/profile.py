"""``bench profile``: where AdaBandit's time goes (issue 7, item 6: 20 trees, at least 2k examples/s on car).

One AdaBandit with its default 20 Hoeffding trees runs the simulator's loop
(:func:`lab.sim.stream.run_stream`: decision id, sampling, decide, learn) over car's shuffled,
duplicated stream (seed 001's x6). The rate is examples per CPU-second (``time.process_time``, so a
busy machine slows it less than wall time would). A second, identical run under :mod:`cProfile`
attributes the time: the share of the profiled total spent in each function itself ("own") and in it
and everything it calls ("cumulative"), for the functions with the largest own time. Profiling slows
the run, so the shares, not the profiled seconds, are the result.

On MNIST (784 pixels, issues 20 and 41) the trees' split search can take most of the time: the same
loop over MNIST's first rows at the defaults (our split schedule, issue 41), with the papers' schedule
(grace in importance weight, every feature per leaf, no adaptive wait) and with the split checks
switched off (a grace period no leaf reaches: one leaf per tree, what the rest of the round costs).
"""

from __future__ import annotations

import cProfile
import pstats
import time
from pathlib import Path

from lab.bench import benches, report
from lab.sim.datasets import load_dataset
from lab.sim.stream import run_stream
from service.learners.base import make_learner
from service.sampling import DecisionIds

LEARNER = "adabandit"
PARAMS = {"n_learners": 20}
TARGET = 2_000  # examples/s on car (issue 7)
TOP = 10
#: the MNIST comparison: (label, parameters on top of the defaults)
MNIST_SETTINGS = (
    ("defaults", {}),
    ("papers' schedule", {"grace_unit": "weight", "subspace": 1.0, "adaptive_grace": False}),
    ("no split checks (grace 10^12)", {"grace": (1e12, 1e12)}),
)


def _run(n: int, profiler: cProfile.Profile | None = None) -> tuple[int, float]:
    data = load_dataset("car")
    X, y = data.stream(0, 6, n)
    model = make_learner(LEARNER, data.d, data.n_labels, PARAMS, seed=0)
    ids = DecisionIds.for_seed(0)
    start = time.process_time()
    if profiler is not None:
        profiler.enable()
    run_stream(model, X, y, ids)
    if profiler is not None:
        profiler.disable()
    return len(y), time.process_time() - start


def _where(name: tuple[str, int, str]) -> str:
    path, line, func = name
    if path == "~":  # a builtin
        return f"`{func}`"
    parts = Path(path).parts
    short = "/".join(parts[parts.index("service") :]) if "service" in parts else "/".join(parts[-2:])
    return f"`{short}:{line}` {func}"


def _mnist(n: int) -> str:
    """AdaBandit on MNIST's first ``n`` rows under :data:`MNIST_SETTINGS`: rate, leaves, error."""
    data = load_dataset("mnist")
    X, y = data.stream(0, 1, n)
    rows, rates = [], {}
    for label, params in MNIST_SETTINGS:
        model = make_learner(LEARNER, data.d, data.n_labels, params, seed=0)
        start = time.process_time()
        correct = run_stream(model, X, y, DecisionIds.for_seed(0))
        rates[label] = len(y) / (time.process_time() - start)
        leaves = model.trees_.n_leaves_  # type: ignore[attr-defined]
        rows.append([label, f"{rates[label]:,.0f}", f"{leaves.mean():.1f}", f"{1.0 - correct.mean():.3f}"])
    table = report.table(
        ["setting", "examples per CPU-second", "leaves per tree", "online error"], rows, "lrrr"
    )
    off = rates[MNIST_SETTINGS[-1][0]]
    shares = {label: 1.0 - rates[label] / off for label, _ in MNIST_SETTINGS[:2]}
    return (
        f"AdaBandit on MNIST's first {n:,} rows (shuffled, seed 0; 784 pixels), N = 20 trees:\n\n{table}\n\n"
        f"The split search takes {100 * shares['defaults']:.0f}% of the time at the defaults and "
        f"{100 * shares[MNIST_SETTINGS[1][0]]:.0f}% under the papers' schedule (1 - the rate / the rate "
        "without split checks). Under the papers' schedule a leaf evaluates a split each time it has "
        "seen `grace` (5 to 20) more units of importance weight, which is almost every example, and "
        "each evaluation computes a Gaussian CDF per class at 10 thresholds of every pixel the leaf has "
        "seen; the defaults count the grace in examples, keep about 4 sqrt(d) pixels per leaf and wait "
        "after a failed evaluation until the bound can pass."
    )


@benches.register("profile")
def bench(quick: bool) -> str:
    """Rate of AdaBandit (N=20) on car and the functions its time goes to."""
    n = 1_000 if quick else 10_368
    _run(200)  # the kernels compile or load from numba's cache at first use: not part of the rate
    examples, seconds = _run(n)
    profiler = cProfile.Profile()
    _run(n, profiler)
    stats = pstats.Stats(profiler)
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:TOP]  # type: ignore[attr-defined]
    table = report.table(
        ["function", "calls", "own %", "cumulative %"],
        [[_where(k), f"{v[1]:,}", f"{100 * v[2] / total:.1f}", f"{100 * v[3] / total:.1f}"] for k, v in rows],
        "lrrr",
    )
    rate = examples / seconds
    verdict = "met" if rate >= TARGET else "NOT met"
    command = "python -m service bench profile" + (" --quick" if quick else "")
    return (
        f"## Where AdaBandit's time goes\n\n`{command}`. {report.machine()}\n\n"
        f"AdaBandit, N = {PARAMS['n_learners']} Hoeffding trees (default hyperparameters otherwise), car "
        f"duplicated x6 and shuffled (seed 0), {examples:,} rounds of the simulator loop: "
        f"**{rate:,.0f} examples per CPU-second** (absolute; target >= {TARGET:,}: {verdict}).\n\n"
        f"Profile of an identical run (cProfile; top {TOP} functions by own time, shares of the profiled "
        f"total):\n\n{table}\n\n{_mnist(200 if quick else 1_000)}"
    )
