"""Seed 001 (Zhang, Jung, Tewari, AISTATS 2019), Table 1: ``reproduce seed001-table1``.

Protocol (ALGORITHMS.md §2.10): each data set is duplicated (balance x10, car x6, nursery x4, mice
x8, isolet x15) and shuffled by the run's seed; the number reported is the accuracy of the *sampled*
label on the last 20% of the stream, averaged over seeds. Weak learners are Hoeffding trees whose
hyperparameters are drawn per tree from the ranges of §2.10 (bandit boosters on isolet and mice:
grace U[300, 301], tie 10^U[log .7, log .8], confidence 10^U[-11, -10]; bandit boosters elsewhere:
grace U[5, 20], tie and confidence 10^U[log .01, log .9]; BinBandit and the full-information
boosters: grace U[50, 200], tie 10^U[log .01, log .9], confidence 10^U[-11, log .9]); the weak-learner
weight is divided by k-1 on isolet for every tree booster but OptFull (the reference's ``divide`` of
its bandit runs; its Adaboost.OLM weight always divides by k-1, ALGORITHMS.md §3.3); gamma = 0.1.
OptFull is OnlineMBBM as the seed-001 repository's ``onlineAdaptive.py`` runs it (:data:`OPTFULL`):
random tie-break in the potential, weight ``sum_l (c[l] - c[y])`` never divided. Jung et al.'s code,
which ALGORITHMS.md §3.1 and §3.3 follow, ties pessimistically and scales the weight by
``0.1 kappa / (k-1)``; ``reproduce seed001-variants`` compares the two on isolet.
Car and nursery are fed one ordinal column per attribute (:meth:`Dataset.ordinal`), as the
seed-001 code read its csv files, not the stored one-hot columns (``reproduce seed001-coding``
shows what the coding changes).

N and rho: the paper tuned both per data set; their values are lost. The full run sweeps N for
every booster and rho for the bandit boosters on separate sweep seeds (different shuffles of the
*same* data set, so the choice is tuned on the evaluation data, not on the evaluation streams).

Every run's accuracy is stored in ``docs/repro/seed001-runs.jsonl`` (committed; quick runs: under
their output directory) keyed by the run's configuration and a fingerprint of the learner's
source files, so a run of many hours resumes across sessions and machines, and any change of a
learner's code recomputes its runs. With ``CLICKBOOST_CACHED_ONLY=1`` nothing is computed: the
section is rendered from the stored runs, and cells whose runs are not all stored say so.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from lab.docs import DOCS
from lab.repro import reproductions
from lab.runcache import cached, lookup, progress
from lab.sim.datasets import load_dataset
from lab.sim.metrics import last20_accuracy
from lab.sim.stream import run_stream
from service.learners.base import Learner, learners, make_learner
from service.sampling import DecisionIds

NAME = "seed001-table1"
TOLERANCE = 0.03
CACHE = DOCS / "repro" / "seed001-runs.jsonl"
#: learner -> its results version, part of every stored run's key. These were the sha256 of the
#: learner's source files (its module, booster_costs.py / banditboost.py and the Hoeffding tree)
#: until the layout split; they are pinned so that edits which move no number (docstrings, new
#: methods, a compiled loop with the same arithmetic) keep the hours of stored runs. What guards
#: them is tests/lab/test_results_pinned.py: a short run's correctness vector and final state
#: checksum per learner. When that test fails the arithmetic changed: change the learner's value
#: here too (its stored runs are then recomputed), and record the new expectations in the test.
RESULTS_VERSION: dict[str, str] = {
    "adabandit": "78e0a33341205e22",
    "banditbbm": "bbm-kernels-2026-11-25",  # the compiled exact potential (last bits moved)
    "adaboost-olm": "78e0a33341205e22",
    "online-mbbm": "bbm-kernels-2026-11-25",
    "binbandit": "78e0a33341205e22",
}

#: data set -> (duplication factor, k printed in the paper, paper row in column order of ALGOS)
DATASETS: dict[str, tuple[int, int, tuple[float, ...]]] = {
    "balance": (10, 3, (0.89, 0.97, 0.80, 0.76, 0.93)),
    "car": (6, 4, (0.88, 0.98, 0.84, 0.84, 0.96)),
    "nursery": (4, 4, (0.93, 0.95, 0.92, 0.94, 0.98)),
    "mice": (8, 8, (0.73, 0.87, 0.81, 0.81, 0.96)),
    "isolet": (15, 26, (0.48, 0.66, 0.66, 0.84, 0.90)),
}
#: column -> (learner, bandit?)
ALGOS: dict[str, tuple[str, bool]] = {
    "OptBandit": ("banditbbm", True),
    "AdaBandit": ("adabandit", True),
    "BinBandit": ("binbandit", True),
    "OptFull": ("online-mbbm", False),
    "AdaFull": ("adaboost-olm", False),
}
#: the sweep (full run): N for every booster, rho for the bandit boosters, on SWEEP_SEEDS
N_GRID = (5, 10, 20)
RHO_GRID = (0.005, 0.01, 0.03, 0.1)
SWEEP_SEEDS = (1000, 1001)
SWEEP_DATASETS = ("balance", "car", "mice")
#: data sets not swept take the choice of another (cost): nursery car's, isolet mice's
SWEEP_FALLBACK = {"nursery": "car", "isolet": "mice"}
#: isolet's trees hold 617 x 26 Gaussian statistics per leaf: N is capped there (memory)
ISOLET_MAX_N = 10
#: seeds evaluated per data set (the paper: 20, isolet 10)
SEEDS = {"balance": 20, "car": 20, "mice": 20, "nursery": 20, "isolet": 10}
#: fewer seeds for one cell, when time forces it (none in the committed run)
CELL_SEEDS: dict[tuple[str, str], int] = {}
#: OptFull as the seed-001 code ran it (``onlineAdaptive.py`` of its repository, not Jung et al.'s):
#: random tie-break in the potential; its weight sum_l (c[l] - c[y]) is never divided (isolet too)
OPTFULL: dict[str, Any] = {"ties": "random"}
#: input codings of the categorical data sets, and the one the table feeds each data set
CODINGS = ("onehot", "ordinal")
CODING = {"car": "ordinal", "nursery": "ordinal"}


def coding_of(dataset: str) -> str:
    """The input coding the table feeds ``dataset`` (:data:`CODING`; stored columns otherwise)."""
    return CODING.get(dataset, "onehot")


class NotStored(LookupError):
    """A run that ``CLICKBOOST_CACHED_ONLY`` forbids computing is not in the store."""


def cached_only() -> bool:
    """``CLICKBOOST_CACHED_ONLY=1``: render from the stored runs, compute nothing."""
    return os.environ.get("CLICKBOOST_CACHED_ONLY", "") not in ("", "0")


def jobs() -> int:
    """Worker processes for the runs: ``CLICKBOOST_JOBS`` or the number of CPUs."""
    return max(1, int(os.environ.get("CLICKBOOST_JOBS", os.cpu_count() or 1)))


def tree_ranges(dataset: str, learner: str) -> dict[str, Any]:
    """VFDT hyperparameter ranges and weight division of ALGORITHMS.md §2.10 for one cell."""
    if learner in ("banditbbm", "adabandit"):
        if dataset in ("isolet", "mice"):
            out: dict[str, Any] = {"grace": (300.0, 301.0), "tie_threshold": (0.7, 0.8)}
            out["split_confidence"] = (1e-11, 1e-10)
        else:
            out = {"grace": (5.0, 20.0), "tie_threshold": (0.01, 0.9), "split_confidence": (0.01, 0.9)}
    else:
        out = {"grace": (50.0, 200.0), "tie_threshold": (0.01, 0.9), "split_confidence": (1e-11, 0.9)}
    if dataset == "isolet" and learner != "online-mbbm":  # other data sets: keys as before (run store)
        out["weight_divide"] = True
    elif learner in ("banditbbm", "adabandit"):
        out["weight_divide"] = False
    return out


def _fingerprint(learner: str) -> str:
    return RESULTS_VERSION[learner]


#: Parameters this table fixes at the reference code's values whatever the served defaults become
#: (the defaults come from ``clickboost sweep-defaults``). They are not part of the run keys: every
#: stored run was made with exactly these values.
#: The papers' split schedule (issue 41: the served defaults of the bandit boosters are ours).
PAPER_SCHEDULE: dict[str, Any] = {"grace_unit": "weight", "subspace": 1.0, "adaptive_grace": False}
REFERENCE_FIXED: dict[str, dict[str, Any]] = {
    "adabandit": {"lr_scale": 1.0, **PAPER_SCHEDULE},  # the reference's alpha rate (ALGORITHMS.md §2.7)
    "banditbbm": {
        "gamma": 0.1,
        "potential": "exact",
        "ties": "random",
        "unclicked_label": "argmin",
        **PAPER_SCHEDULE,
    },
}


def new_run(
    learner: str, dataset: str, params: dict[str, Any], seed: int, limit: int | None, coding: str
) -> tuple[Learner, np.ndarray, np.ndarray]:
    """The learner and the duplicated, shuffled stream of one run of the protocol (not yet run)."""
    data = load_dataset(dataset)
    data = data.ordinal() if coding == "ordinal" else data
    X, y = data.stream(seed, DATASETS[dataset][0], limit)
    params = {**REFERENCE_FIXED.get(learner, {}), **params}
    return make_learner(learner, data.d, data.n_labels, params, seed=seed), X, y


def run_cell(
    learner: str,
    dataset: str,
    params: dict[str, Any],
    seed: int,
    limit: int | None = None,
    cache: Path = CACHE,
    coding: str = "onehot",
) -> tuple[float, float]:
    """Last-20% accuracy of the sampled label for one run, and its wall time in seconds (cached).

    ``coding="ordinal"`` feeds one column per categorical attribute (:meth:`Dataset.ordinal`)
    instead of the stored one-hot columns.
    """
    if coding not in CODINGS:
        raise ValueError(f"coding must be one of {CODINGS}, got {coding!r}")
    parts: list[Any] = [learner, dataset, params, seed, limit, _fingerprint(learner)]
    key = json.dumps(parts + ([coding] if coding != "onehot" else []), sort_keys=True)

    def compute() -> dict[str, float]:
        model, X, y = new_run(learner, dataset, params, seed, limit, coding)
        start = time.perf_counter()
        correct = run_stream(model, X, y, DecisionIds.for_seed(seed))
        return {"accuracy": last20_accuracy(correct), "seconds": time.perf_counter() - start}

    if cached_only() and cache is not None and lookup(cache, key) is None:
        raise NotStored(key)
    got = cached(cache, key, compute)
    return float(got["accuracy"]), float(got["seconds"])


def _params(dataset: str, learner: str, rho: float | None, n: int) -> dict[str, Any]:
    p: dict[str, Any] = {"n_learners": n, **tree_ranges(dataset, learner)}
    if learner == "online-mbbm":
        p.update(OPTFULL)
    if rho is not None:
        p["rho"] = rho
    if learner == "binbandit":  # BanditBoost's delta = rho k / (k-1) (ALGORITHMS.md, exploration table)
        p = {"n_learners": n, "delta": rho * DATASETS[dataset][1] / (DATASETS[dataset][1] - 1)}
    return p


def _vfdt_cross_check(quick: bool) -> list[str]:
    """Prequential accuracy of one of our trees and of river's HoeffdingTreeClassifier, same stream."""
    try:
        from river import tree as river_tree
    except ImportError:  # river is a dev dependency
        return ["river is not installed (`pip install -e '.[dev]'`): cross-check not run."]
    from service.learners.weak.hoeffding_tree import HoeffdingForest

    lines = [
        "| data | examples | weight | grace | ours | river | our leaves | river leaves |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, weight, grace in (("car", 50.0, 10), ("balance", 10.0, 50), ("mice", 1.0, 200)):
        data = load_dataset(name)
        X, y = data.stream(0, DATASETS[name][0], 800 if quick else 8000)
        ours = HoeffdingForest(data.d, data.n_labels, np.array([grace]), np.array([0.05]), np.array([1e-7]))
        theirs = river_tree.HoeffdingTreeClassifier(
            grace_period=grace, delta=1e-7, tau=0.05, leaf_prediction="mc"
        )
        hits = np.zeros(2)
        for x, label in zip(X, y, strict=True):
            xi = dict(enumerate(x))
            hits += (ours.distribution(x)[0][0].argmax() == label, theirs.predict_one(xi) == label)
            ours.update(x, np.array([label]), np.array([weight]))
            theirs.learn_one(xi, int(label), w=weight)
        acc = hits / len(y)
        lines.append(
            f"| {name} | {len(y):,} | {weight:g} | {grace} | {acc[0]:.3f} | {acc[1]:.3f} "
            f"| {int(ours.n_leaves_[0])} | {theirs.n_leaves} |"
        )
    return lines


def paper_cell(paper: float, accs: np.ndarray) -> tuple[str, bool]:
    """``paper / **mean** ± std, median m`` over seeds, with ✗ when the mean is more than
    :data:`TOLERANCE` below the paper, and whether it is."""
    missed = bool(accs.mean() - paper < -TOLERANCE)
    spread = f" ± {accs.std():.3f}, median {np.median(accs):.3f}" if accs.size > 1 else ""
    return f"{paper:.2f} / **{accs.mean():.3f}**{spread}{' ✗' if missed else ''}", missed


def section_head(title: str, name: str, quick: bool, n_jobs: int, total: float, start: float) -> str:
    """Title and command paragraph of a section whose runs share this table's cache."""
    cmd = f"python -m service reproduce {name}{' --quick' if quick else ''}"
    mode = " — **quick mode, not the paper's protocol**" if quick else ""
    return (
        f"## {title}{mode}\n\nCommand: `{cmd}` ({n_jobs} worker process{'es' if n_jobs > 1 else ''};"
        " runs share the\n`seed001-table1` cache). Total learner time"
        f" {total:,.0f} s (this invocation's wall time\n{time.perf_counter() - start:,.0f} s, cached"
        " runs excluded)."
    )


def run_all(tasks: list[tuple], n_jobs: int) -> None:
    """Run every :func:`run_cell` task (its arguments) not stored yet, ``n_jobs`` at a time:
    isolet's last (its runs take minutes each, so an interrupted run has stored the other data
    sets' cells), the longest first within each group (stream length x N); results land in the
    store only."""
    unique = list({json.dumps(t, sort_keys=True, default=str): t for t in tasks}.values())
    lengths = {ds: DATASETS[ds][0] * load_dataset(ds).n for ds in {t[1] for t in unique}}

    def cost(t: tuple) -> tuple[bool, int]:
        _, ds, params, _, limit = t[:5]
        return ds != "isolet", (limit or lengths[ds]) * params.get("n_learners", 10)

    todo = sorted(unique, key=cost, reverse=True)
    if cached_only():
        return
    if n_jobs == 1 or len(todo) <= 1:
        _report(todo, (run_cell(*t) for t in todo))
        return
    with ProcessPoolExecutor(n_jobs) as pool:
        _report(todo, pool.map(run_cell, *zip(*todo, strict=True)))


def _report(tasks: list[tuple], results: Iterable[tuple[float, float]]) -> None:
    """One progress line per finished task on stderr."""
    for i, (task, (acc, seconds)) in enumerate(zip(tasks, results, strict=True)):
        learner, ds, params, seed = task[:4]
        coding = f" {task[6]}" if len(task) > 6 else ""
        progress(
            f"[{i + 1}/{len(tasks)}] {learner} {ds}{coding} seed {seed} {params}: {acc:.3f} ({seconds:.0f} s)"
        )


@reproductions.register(NAME)
def reproduce(quick: bool, out_dir: Path) -> str:
    """Run the Table 1 protocol (``quick``: car and balance, 1,000 examples, 3 trees, 1 seed)."""
    start = time.perf_counter()
    algos = {col: spec for col, spec in ALGOS.items() if spec[0] in learners.names()}
    missing = [col for col, (name, _) in ALGOS.items() if col not in algos]
    datasets = ("balance", "car") if quick else tuple(DATASETS)
    limit = 1000 if quick else None
    seeds = dict.fromkeys(datasets, 1) if quick else SEEDS
    cache = out_dir / "cache" / "seed001" if quick else CACHE  # quick runs never reuse full-run results
    n_jobs = 1 if quick else jobs()

    def stored(
        learner: str, ds: str, params: dict[str, Any], seed: int, lim: int | None
    ) -> tuple[float, float]:
        """One run's (accuracy, seconds); NaN accuracy when ``CLICKBOOST_CACHED_ONLY`` is set and
        the run is not stored."""
        try:
            return run_cell(learner, ds, params, seed, lim, cache, coding_of(ds))
        except NotStored:
            return float("nan"), 0.0

    # 1. the sweep (full run only): N x rho for the bandit boosters, N for the references
    grid: dict[str, list[tuple[int, float | None]]] = {
        col: [(n, r) for n in N_GRID for r in (RHO_GRID if bandit else (None,))]
        for col, (_, bandit) in algos.items()
    }
    sweep_tasks = [
        (learner, ds, _params(ds, learner, r, n), s, None, cache, coding_of(ds))
        for col, (learner, _) in algos.items()
        for ds in (() if quick else SWEEP_DATASETS)
        for n, r in grid[col]
        for s in SWEEP_SEEDS
    ]
    run_all(sweep_tasks, n_jobs)
    chosen: dict[tuple[str, str], tuple[int, float | None]] = {}
    sweep_lines = []
    for col, (learner, _) in algos.items():
        for ds in () if quick else SWEEP_DATASETS:
            accs = np.array(
                [
                    np.mean(
                        [stored(learner, ds, _params(ds, learner, r, n), s, None)[0] for s in SWEEP_SEEDS]
                    )
                    for n, r in grid[col]
                ]
            )
            best = int(np.argmax(accs)) if not np.isnan(accs).any() else -1  # -1: sweep not complete
            if best >= 0:
                chosen[(col, ds)] = grid[col][best]
            cells = [
                "pending" if np.isnan(a) else f"**{a:.3f}**" if i == best else f"{a:.3f}"
                for i, a in enumerate(accs)
            ]
            sweep_lines.append(f"| {col} | {ds} | " + " | ".join(cells) + " |")

    def setting(col: str, ds: str) -> tuple[int, float | None] | None:
        """The cell's (N, rho); None while its sweep is not complete (cached-only rendering)."""
        if quick:
            return 3, (0.05 if ALGOS[col][1] else None)
        got = chosen.get((col, SWEEP_FALLBACK.get(ds, ds)))
        if got is None:
            return None
        n, r = got
        return (min(n, ISOLET_MAX_N) if ds == "isolet" else n), r

    # 2. evaluation
    def runs_cell(col: str, ds: str) -> bool:
        return col in algos and seeds[ds] > 0

    def cell_params(col: str, ds: str) -> dict[str, Any]:
        got = setting(col, ds)
        assert got is not None
        return _params(ds, ALGOS[col][0], got[1], got[0])

    def n_seeds(col: str, ds: str) -> int:
        return seeds[ds] if quick else CELL_SEEDS.get((ds, col), seeds[ds])

    tasks = [
        (algos[col][0], ds, cell_params(col, ds), s, limit, cache, coding_of(ds))
        for ds in datasets
        for col in ALGOS
        if runs_cell(col, ds) and setting(col, ds) is not None
        for s in range(n_seeds(col, ds))
    ]
    run_all(tasks, n_jobs)
    rows, misses, collapsed, total_seconds = [], [], [], 0.0
    for ds in datasets:
        dup, _, paper = DATASETS[ds]
        cells = []
        for j, (col, (learner, _)) in enumerate(ALGOS.items()):
            if not runs_cell(col, ds):
                cells.append(f"{paper[j]:.2f} / —")
                continue
            got = setting(col, ds)
            if got is None:
                cells.append(f"{paper[j]:.2f} / pending (sweep)")
                continue
            n, r = got
            runs = [stored(learner, ds, cell_params(col, ds), s, limit) for s in range(n_seeds(col, ds))]
            have = sum(not np.isnan(a) for a, _ in runs)
            if have < len(runs):
                cells.append(f"{paper[j]:.2f} / pending ({have} of {len(runs)} runs stored)")
                continue
            accs = np.array([a for a, _ in runs])
            total_seconds += sum(t for _, t in runs)
            diff = accs.mean() - paper[j]
            cell, missed = paper_cell(paper[j], accs)
            if missed:
                misses.append(f"{col} on {ds}: {accs.mean():.3f} vs {paper[j]:.2f} ({diff:+.3f})")
            k = load_dataset(ds).n_labels
            collapsed += [f"{col} on {ds}, seed {s}: {a:.3f}" for s, a in enumerate(accs) if a < 1.0 / k]
            how = f"N={n}" + ("" if r is None else f", ρ={r:g}")
            if accs.size != seeds[ds]:
                how += f", {accs.size} seeds"
            cells.append(f"{cell} ({how})")
        data = load_dataset(ds)
        length = min(data.n * dup, limit or data.n * dup)
        coding = coding_of(ds)
        shape = f"{data.ordinal().d}, ordinal" if coding == "ordinal" else f"{data.d}, stored"
        rows.append(
            f"| {ds} | {data.n_labels} | {shape} | {length:,} | {seeds[ds]} | " + " | ".join(cells) + " |"
        )

    edges = []
    for (col, ds), (n, r) in chosen.items():
        ends = [f"N={n}"] if n in (N_GRID[0], N_GRID[-1]) else []
        ends += [f"ρ={r:g}"] if r is not None and r in (RHO_GRID[0], RHO_GRID[-1]) else []
        if ends:
            edges.append(f"{col} on {ds} ({', '.join(ends)})")
    return _render(
        quick=quick,
        start=start,
        n_jobs=n_jobs,
        total_seconds=total_seconds,
        rows=rows,
        misses=misses,
        collapsed=collapsed,
        sweep_lines=sweep_lines,
        missing=missing,
        grid=grid,
        edges=edges,
    )


def _render(
    *,
    quick: bool,
    start: float,
    n_jobs: int,
    total_seconds: float,
    rows: list[str],
    misses: list[str],
    collapsed: list[str],
    sweep_lines: list[str],
    missing: list[str],
    grid: dict[str, list[tuple[int, float | None]]],
    edges: list[str],
) -> str:
    cmd = f"python -m service reproduce {NAME}{' --quick' if quick else ''}"
    mode = " — **quick mode, not the paper's protocol**" if quick else ""
    head = "| data | K | input | stream | seeds | " + " | ".join(f"{c} (paper / ours)" for c in ALGOS) + " |"
    sep = "|---|---:|---|---:|---:|" + "---|" * len(ALGOS)
    if quick:
        sweep_text = "N = 3 trees and ρ = 0.05 for every booster (quick mode: no sweep)."
    else:
        bandit_cols = [c for c, (_, b) in ALGOS.items() if b and c in grid]
        ref_cols = [c for c, (_, b) in ALGOS.items() if not b and c in grid]

        def table(cols: list[str]) -> str:
            g = grid[cols[0]]
            labels = [f"N={n}" + ("" if r is None else f" ρ={r:g}") for n, r in g]
            lines = [
                line for line in sweep_lines if line.startswith("| ") and line.split(" | ")[0][2:] in cols
            ]
            return (
                "| algorithm | data | "
                + " | ".join(labels)
                + " |\n|---|---|"
                + "---:|" * len(g)
                + "\n"
                + "\n".join(lines)
            )

        sweep_text = (
            f"N and ρ: the paper tuned both per algorithm and data set and their values are lost. We sweep"
            f" N over {list(N_GRID)} for every booster and ρ over {list(RHO_GRID)} for the bandit boosters"
            f" (BinBandit's δ = ρk/(k−1), the same exploration), scoring the mean last-20% accuracy over"
            f" sweep seeds {', '.join(map(str, SWEEP_SEEDS))} (other shuffles of the **same** data set: the"
            " choice is tuned on the evaluation data, as the paper's grid search was, but not on the"
            " evaluation streams, which use seeds 0..S-1). Nursery takes car's choice and isolet mice's"
            f" (to save time), with N capped at {ISOLET_MAX_N} on isolet (memory). Bold: the choice.\n\n"
            + table(bandit_cols)
            + "\n\n"
            + table(ref_cols)
            + (
                "\n\nThe choice lies on the edge of the grid (its smallest or largest value) for: "
                + "; ".join(edges)
                + "."
                if edges
                else ""
            )
        )
    missing_text = (
        f"Not run: {', '.join(missing)} (learner not registered in this build). " if missing else ""
    )
    miss_text = "\n".join(f"- {m}" for m in misses) or "- none"
    if any("pending" in row for row in rows):
        miss_text += "\n\n(Cells still pending are not judged.)"
    collapsed_text = "\n".join(f"- {m}" for m in collapsed) or "- none"
    cross = "\n".join(_vfdt_cross_check(quick))
    store = f"`{CACHE.relative_to(DOCS.parent).as_posix()}`"
    store = "`cache/seed001/` under the output directory" if quick else store
    return f"""## Seed 001, Table 1 (online multiclass boosting with bandit feedback){mode}

Zhang, Jung, Tewari, *Online Multiclass Boosting with Bandit Feedback* (AISTATS 2019). Command:
`{cmd}` ({n_jobs} worker process{"es" if n_jobs > 1 else ""}, `CLICKBOOST_JOBS`; every run is
stored in {store}, committed, so an interrupted run resumes, on any machine; with
`CLICKBOOST_CACHED_ONLY=1` the section is rendered from the stored runs alone). Total learner
time of the table's runs {total_seconds:,.0f} s (this invocation's wall time
{time.perf_counter() - start:,.0f} s, stored runs excluded).

Nursery keeps all 5 classes (the paper prints K = 4 while streaming all 4 x 12,960 rows; see the
datasets README). Protocol: ALGORITHMS.md §2.10 — duplication ×10/6/4/8/15, shuffled by the run
seed, accuracy of the **sampled** label on the last 20% of the stream, mean ± std (population)
over seeds 0..S-1 (S in the table; the paper used 20, and 10 for isolet), VFDT hyperparameters
drawn per tree from §2.10's ranges, γ = 0.1, exact BBM potential. Movement is not available (no
copy of the data set), so its row is omitted. Input (column "input": d and coding): car and
nursery are fed one ordinal column per attribute, as the seed-001 code read its csv files, instead
of the stored one-hot columns (the `seed001-coding` section compares the two at fixed settings);
on isolet the weak-learner weight of every tree booster but OptFull is divided by k − 1 (the
reference's `divide` for its bandit runs; its Adaboost.OLM weight always carries that division,
ALGORITHMS.md §3.3). OptFull is OnlineMBBM as the seed-001 repository's `onlineAdaptive.py` runs
it: random tie-break in the potential and the weight Σ_l (c[l] − c[y]), never divided. Jung et
al.'s code, which ALGORITHMS.md §3.1 and §3.3 describe, ties pessimistically and scales the weight
by 0.1 κ/(k − 1); the `seed001-variants` section compares the two on isolet.

{sweep_text}

{missing_text}Cells: paper / ours (mean ± std, median over seeds, the setting used); ✗ marks a cell more than
{TOLERANCE} below the paper.

{head}
{sep}
{chr(10).join(rows)}

Cells more than {TOLERANCE} below the paper:

{miss_text}

Runs that end below chance (last-20% accuracy under 1/k), which pull a cell's mean far below its
median:

{collapsed_text}

{GAPS}

VFDT cross-check (one tree, unit-free weights as given, tie 0.05, δ = 1e-7, prequential accuracy
of the predicted class on the duplicated, shuffled stream of seed 0) against river's
`HoeffdingTreeClassifier` (majority-class leaves). Both use information gain, the Hoeffding bound
and the tie threshold; ours evaluates 10 equally spaced thresholds per numeric feature with Gaussian
estimators and splits 0/1 features at 0.5 exactly, river uses its own Gaussian splitter, so split
points and tree sizes differ:

{cross}
"""


#: What we know about the gaps (prose; revised with every full run)
GAPS = """What we know about the gaps (none of these was tuned away):

- OptBandit (BanditBBM) on mice and isolet: its trees are taught wrong labels. The weight audit of
  the `seed001-variants` section follows the §2.8 (label, weight) reduction through one mice run.
  On an exploit miss, the most common round while the booster is weak, the estimated cost vector
  Γ(1 − e_ŷ/(1 − ρ)) is about the sum of the cost vectors of every label but ŷ. Its minimiser, the
  label the trees get, is the truth only by chance, and the boost-by-majority potential weighs such
  a round not far below an exploit hit. Over the run the trees get almost as much weight on wrong
  labels as on the truth, while AdaBandit's logistic costs weigh its hits far above its misses
  (same table). The estimator (4) is unbiased for the cost vector, but the reduction to one
  (label, weight) pair is not linear, so what the trees learn is not. The section's single
  changes (faster trees, no clipping, the reference code's random labels for unclicked rounds)
  each move mice by a few points at most. The reference code's BBM path differs from the paper
  in more ways: it skips explore-miss rounds, computes the tree weight from the potential at the
  true label (unknown under bandit feedback), evaluates the potential on the estimated loss
  vector, and scales the weight by a random constant (ALGORITHMS.md §2.6, §2.8, §3.3). We do not
  copy these, so the table keeps the paper's algorithm; which version of that code produced the
  paper's numbers is not recoverable.
- Isolet: the reference read `isolet50.csv`, which suggests a 50-feature Isolet (ALGORITHMS.md
  §2.10; the preprocessing is not recoverable), while we use all 617 features. Trees over 617
  features need more weight before a split is both found and trusted. Every booster's tree weight
  but OptFull's is divided by k − 1 there (the input paragraph above), and the trees keep their
  leaves in one shared pool, so the full-information columns fit in memory. OptBandit's weight audit
  on isolet (`seed001-variants`) shows the mice mechanism, stronger: with k = 26 most rounds are
  exploit misses, and their wrong-label weight exceeds the hits' true-label weight several times.
- OptFull on isolet missed the paper while the table ran OnlineMBBM as Jung et al.'s code does
  (pessimistic ties, weight divided by k − 1). The seed-001 repository's own `onlineAdaptive.py`
  breaks ties at random in the potential and, in a line marked "for an experiment", sets the weight
  to Σ_l (c[l] − c[y]) without the division. The table now runs that. The `seed001-variants`
  section gives both on the table's seeds and each change alone: the weight, not the tie rule, is
  what moves the cell, and its tree audit shows how. Why the weight matters: the trees
  draw their tie threshold from 10^U[log .01, log .9]. On 617 features the best two splits are
  close, so a tree mostly splits when the Hoeffding bound, which shrinks like one over the square
  root of the tree's weight, falls below that threshold. With the weight divided by 25, a tree that
  drew a small threshold never gets there within the stream and keeps one leaf or a few, and a run whose
  first trees drew such thresholds is lost.
- The full-information references feed their trees the true label with weight Σ_l (c[l] − c[y]) (the
  same reduction, ALGORITHMS.md §3.1), not the reference code's randomly scaled heuristics (§3.3);
  the weight scale against the grace period changes how fast the trees grow, which matters most on
  balance's four numeric features. The `seed001-variants` section reruns AdaFull on balance with
  trees that check for splits every 5-20 units of weight instead of 50-200.
- AdaBandit can collapse: in a run that ends below chance (listed above), every α turns negative
  early in the stream, so the ensemble votes against its trees. An explore-hit round moves α by up
  to about η_t (k−1)/ρ = (k−1)/(k²√t), while with η_t = ρ/(k²√t) the whole stream moves it by at
  most about 2ρ√T/k² in total through the small exploit rounds, so at small ρ one unlucky early step
  is never undone. The rate is the reference code's (ALGORITHMS.md §2.7, marked TODO there). A
  scratch rerun of such a seed with the reference code's α-gradient (the §2.7 erratum) collapsed as
  well, so the erratum does not explain it. The medians show the cells without such runs. The
  `seed001-variants` section reruns AdaBandit on balance with a larger rate constant (`lr_scale`).
- Car and nursery: the table feeds one ordinal column per attribute, as the seed-001 code read its
  csv files; the stored one-hot columns split one value at a time. The `seed001-coding` section
  compares the two codings at fixed settings and lists the cells the coding moves across the
  tolerance.
- The sweep used two shuffles per setting; with the spread the table shows on mice, its choice is
  noisy, and a choice on the edge of the grid (listed above the table) may improve beyond it.
- Our trees use Gaussian estimators with 10 candidate thresholds on numeric features; the cross-
  check below shows how they compare with river's trees on the same streams."""
