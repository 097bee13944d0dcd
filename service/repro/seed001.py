"""Seed 001 (Zhang, Jung, Tewari, AISTATS 2019), Table 1: ``reproduce seed001-table1``.

Protocol (ALGORITHMS.md §2.10): each data set is duplicated (balance x10, car x6, nursery x4, mice
x8, isolet x15) and shuffled by the run's seed; the number reported is the accuracy of the *sampled*
label on the last 20% of the stream, averaged over seeds. Weak learners are Hoeffding trees whose
hyperparameters are drawn per tree from the ranges of §2.10 (bandit boosters on isolet and mice:
grace U[300, 301], tie 10^U[log .7, log .8], confidence 10^U[-11, -10]; bandit boosters elsewhere:
grace U[5, 20], tie and confidence 10^U[log .01, log .9]; BinBandit and the full-information
boosters: grace U[50, 200], tie 10^U[log .01, log .9], confidence 10^U[-11, log .9]); the weak-learner
weight is divided by k-1 on isolet (the reference's ``divide``); gamma = 0.1.

N and rho: the paper tuned both per data set; their values are lost. The full run sweeps rho for
the bandit boosters on a separate sweep seed (a different shuffle of the *same* data set, so the
choice is tuned on the evaluation data, not on the evaluation streams) and keeps N fixed.

Every run's accuracy is cached under ``out/cache/seed001`` (quick runs: under their output
directory) keyed by the run's configuration and a fingerprint of the learner's source files, so
an interrupted run resumes and any change of a learner's code recomputes its runs.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from service.learners.base import learners, make_learner
from service.repro import DOCS, reproductions
from service.sampling import DecisionIds
from service.sim.datasets import load_dataset
from service.sim.stream import run_stream

NAME = "seed001-table1"
TOLERANCE = 0.03
CACHE = DOCS.parent / "out" / "cache" / "seed001"
#: learner -> the source files (under service/learners) its results depend on (the cache key)
_SOURCES: dict[str, tuple[str, ...]] = {
    name: (f"{name.replace('-', '_')}.py", "booster_costs.py", "weak/hoeffding_tree.py")
    for name in ("adabandit", "banditbbm", "adaboost-olm", "online-mbbm")
}
_SOURCES["binbandit"] = (
    "binbandit.py",
    "banditboost.py",
    "weak/__init__.py",
    "weak/hoeffding_binary.py",
    "weak/hoeffding_tree.py",
)

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
N_LEARNERS = 10
RHO_GRID = (0.01, 0.03)
SWEEP_SEED = 1000
SWEEP_DATASETS = ("balance", "car", "mice")  # nursery uses car's choice, isolet mice's (cost)
#: seeds actually evaluated per data set in the full run (the paper: 20, isolet 10); see the doc
SEEDS = {"balance": 5, "car": 5, "mice": 5, "nursery": 2, "isolet": 1}
#: columns run on a data set when not all are (compute budget; see the generated doc)
ONLY = {"isolet": ("AdaBandit",)}


def tree_ranges(dataset: str, learner: str) -> dict[str, Any]:
    """VFDT hyperparameter ranges and weight division of ALGORITHMS.md §2.10 for one cell."""
    if learner in ("banditbbm", "adabandit"):
        if dataset in ("isolet", "mice"):
            out: dict[str, Any] = {"grace": (300.0, 301.0), "tie_threshold": (0.7, 0.8)}
            out["split_confidence"] = (1e-11, 1e-10)
        else:
            out = {"grace": (5.0, 20.0), "tie_threshold": (0.01, 0.9), "split_confidence": (0.01, 0.9)}
        out["weight_divide"] = dataset == "isolet"
        return out
    return {"grace": (50.0, 200.0), "tie_threshold": (0.01, 0.9), "split_confidence": (1e-11, 0.9)}


def _fingerprint(learner: str) -> str:
    root = Path(__file__).resolve().parents[1] / "learners"
    h = hashlib.sha256()
    for name in _SOURCES[learner]:
        h.update((root / name).read_bytes())
    return h.hexdigest()[:16]


def run_cell(
    learner: str,
    dataset: str,
    params: dict[str, Any],
    seed: int,
    limit: int | None = None,
    cache: Path = CACHE,
) -> tuple[float, float]:
    """Last-20% accuracy of the sampled label for one run, and its wall time in seconds (cached)."""
    key = json.dumps([learner, dataset, params, seed, limit, _fingerprint(learner)], sort_keys=True)
    path = cache / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")
    if path.is_file():
        got = json.loads(path.read_text())
        return float(got["accuracy"]), float(got["seconds"])
    data = load_dataset(dataset)
    X, y = data.stream(seed, DATASETS[dataset][0], limit)
    model = make_learner(learner, data.d, data.n_labels, params, seed=seed)
    start = time.perf_counter()
    correct = run_stream(model, X, y, DecisionIds.for_seed(seed))
    seconds = time.perf_counter() - start
    acc = float(correct[-int(0.2 * len(correct)) :].mean())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": key, "accuracy": acc, "seconds": seconds}))
    return acc, seconds


def _params(dataset: str, learner: str, rho: float | None, n: int) -> dict[str, Any]:
    p: dict[str, Any] = {"n_learners": n, **tree_ranges(dataset, learner)}
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


@reproductions.register(NAME)
def reproduce(quick: bool, out_dir: Path) -> str:
    """Run the Table 1 protocol (``quick``: car and balance, 1,000 examples, 3 trees, 1 seed)."""
    start = time.perf_counter()
    algos = {col: spec for col, spec in ALGOS.items() if spec[0] in learners.names()}
    missing = [col for col, (name, _) in ALGOS.items() if col not in algos]
    datasets = ("balance", "car") if quick else tuple(DATASETS)
    n_learners = 3 if quick else N_LEARNERS
    limit = 1000 if quick else None
    seeds = dict.fromkeys(datasets, 1) if quick else SEEDS
    cache = out_dir / "cache" / "seed001" if quick else CACHE  # quick runs never reuse full-run results

    # 1. rho sweep for the bandit boosters (full run only)
    chosen: dict[tuple[str, str], float] = {}
    sweep_lines = []
    for col, (learner, bandit) in algos.items():
        if not bandit:
            continue
        for ds in SWEEP_DATASETS if not quick else ():
            accs = [
                run_cell(learner, ds, _params(ds, learner, r, n_learners), SWEEP_SEED)[0] for r in RHO_GRID
            ]
            chosen[(col, ds)] = RHO_GRID[int(np.argmax(accs))]
            sweep_lines.append(f"| {col} | {ds} | " + " | ".join(f"{a:.3f}" for a in accs) + " |")
    fallback = {"nursery": "car", "isolet": "mice"}

    def rho_for(col: str, ds: str) -> float:
        return 0.05 if quick else chosen[(col, fallback.get(ds, ds))]

    # 2. evaluation
    rows, misses, total_seconds = [], [], 0.0
    for ds in datasets:
        dup, _, paper = DATASETS[ds]
        cells = []
        for j, (col, (learner, bandit)) in enumerate(ALGOS.items()):
            if col not in algos or seeds[ds] == 0 or (not quick and col not in ONLY.get(ds, (col,))):
                cells.append(f"{paper[j]:.2f} / —")
                continue
            rho = rho_for(col, ds) if bandit else None
            params = _params(ds, learner, rho, n_learners)
            runs = [run_cell(learner, ds, params, s, limit, cache) for s in range(seeds[ds])]
            accs = np.array([a for a, _ in runs])
            total_seconds += sum(t for _, t in runs)
            diff = accs.mean() - paper[j]
            mark = "" if diff >= -TOLERANCE else " ✗"
            if mark:
                misses.append(f"{col} on {ds}: {accs.mean():.3f} vs {paper[j]:.2f} ({diff:+.3f})")
            spread = f" ± {accs.std():.3f}" if accs.size > 1 else ""
            cells.append(f"{paper[j]:.2f} / **{accs.mean():.3f}**{spread}{mark}")
        data = load_dataset(ds)
        length = min(data.n * dup, limit or data.n * dup)
        rows.append(f"| {ds} | {data.n_labels} | {length:,} | {seeds[ds]} | " + " | ".join(cells) + " |")

    cmd = f"python -m service reproduce {NAME}{' --quick' if quick else ''}"
    mode = " — **quick mode, not the paper's protocol**" if quick else ""
    head = "| data | K | stream | seeds | " + " | ".join(f"{c} (paper / ours)" for c in ALGOS) + " |"
    sep = "|---|---:|---:|---:|" + "---|" * len(ALGOS)
    rho_text = (
        "ρ = 0.05 for every bandit booster (quick mode: no sweep)."
        if quick
        else (
            f"ρ swept over {list(RHO_GRID)} on sweep seed {SWEEP_SEED} (last-20% accuracy; nursery uses"
            " car's choice and isolet mice's, to save time). **This is tuned on the evaluation data sets**"
            " (another shuffle of the same rows), as the paper's grid search was.\n\n"
            "| algorithm | data | "
            + " | ".join(f"ρ = {r}" for r in RHO_GRID)
            + " |\n|---|---|"
            + "---:|" * len(RHO_GRID)
            + "\n"
            + "\n".join(sweep_lines)
        )
    )
    partial = [f"{ds} only {', '.join(ONLY[ds])}" for ds in datasets if ds in ONLY and not quick]
    missing_text = (
        f"Not run: {', '.join(missing)} (learner not registered in this build). " if missing else ""
    ) + (
        f"Run for part of the columns ({'; '.join(partial)}): the other boosters' trees grow to"
        " gigabytes on isolet's 617 x 26 statistics per leaf, or their exact potential is"
        " unaffordable for k = 26, within this machine's time. "
        if partial
        else ""
    )
    miss_text = "\n".join(f"- {m}" for m in misses) or "- none"
    cross = "\n".join(_vfdt_cross_check(quick))
    return f"""## Seed 001, Table 1 (online multiclass boosting with bandit feedback){mode}

Zhang, Jung, Tewari, *Online Multiclass Boosting with Bandit Feedback* (AISTATS 2019). Command:
`{cmd}`. Total learner time {total_seconds:,.0f} s (this run's own time {time.perf_counter() - start:,.0f} s,
cached runs excluded) on a shared 2-core machine.

Nursery keeps all 5 classes (the paper prints K = 4 while streaming all 4 x 12,960 rows; see the
datasets README). Protocol: ALGORITHMS.md §2.10 — duplication ×10/6/4/8/15, shuffled by the run
seed, accuracy of the **sampled** label on the last 20% of the stream, mean ± std (population)
over seeds 0..S-1 (S in the table; the paper used 20, and 10 for isolet). Movement is not
available (no copy of the data set), so its row is omitted. N = {n_learners} trees for every
booster (not tuned; the paper tuned N per data set and its values are lost), γ = 0.1, exact BBM
potential. {rho_text}

{missing_text}Cells: paper / ours; ✗ marks a cell more than {TOLERANCE} below the paper.

{head}
{sep}
{chr(10).join(rows)}

Cells more than {TOLERANCE} below the paper:

{miss_text}

What we know about the gaps (none of these was tuned away):

- N is fixed at {n_learners} and ρ comes from a two-point grid; the paper tuned N per data set and
  searched ρ more finely, so cells a few points below the paper may close with a wider sweep.
- OptBandit (BanditBBM) implements the paper's estimator (4), cost vectors (5) with the potential
  costs (9) and the §2.8 (label, weight) reduction. Its cost entries are potentials in [0, 1], so its
  trees receive small weights; on mice, whose trees wait for 300 units of weight between split
  checks (the reference's setting), they split rarely. The reference code's BBM path differs from
  the paper: it skips explore-miss rounds, relabels unclicked examples at random among the labels
  other than the greedy one and scales the weight by a random constant (ALGORITHMS.md §2.8, §3.3);
  we do not copy that. Exploratory runs with the small-data tree ranges or a larger edge γ moved
  mice up but not to the paper's value.
- The full-information references feed their trees the true label with weight
  sum_l (c[l] - c[y]) (the same reduction, ALGORITHMS.md §3.1), not the reference code's
  randomly scaled heuristics (§3.3); the weight scale against the grace period changes how fast
  the trees grow, which matters most on balance's four numeric features.
- AdaBandit's spread on mice is large: one evaluation seed ends far below the others (the ± column),
  while the sweep seed reached the paper's value; with 300 units of weight between split checks a
  seed whose early trees split on a poor feature recovers slowly. Twenty seeds, as in the paper,
  would tell whether this is a rare event.
- Our trees use Gaussian estimators with 10 candidate thresholds on numeric features; the
  cross-check below shows how they compare with river's trees on the same streams.

VFDT cross-check (one tree, unit-free weights as given, tie 0.05, δ = 1e-7, prequential accuracy
of the predicted class on the duplicated, shuffled stream of seed 0) against river's
`HoeffdingTreeClassifier` (majority-class leaves). Both use information gain, the Hoeffding bound
and the tie threshold; ours evaluates 10 equally spaced thresholds per numeric feature with Gaussian
estimators and splits 0/1 features at 0.5 exactly, river uses its own Gaussian splitter, so split
points and tree sizes differ:

{cross}
"""
