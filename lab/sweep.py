"""Default hyperparameters of the boosters, C-OVA and SquareCB: a sweep on the tuning sets (issue 41).

Each learner runs every setting of its grid (:data:`GRIDS`) on shuffled streams of the four tuning
data sets (``SEEDS`` shuffles, streams cut at ``ROUNDS``), and a setting is scored by its online
error (sampled label wrong: 1 - click rate, what a user of the service earns) averaged over data
sets and seeds. The defaults are tuned on car, dna, nursery and digits (8x8 handwritten digits, the
wide numeric tuning set of issue 41) only; ``bench quality`` also reports those four as tuning rows,
where the defaults are therefore tuned on the data (it must say so), and the other seven data sets
are untouched by the tuning.
Results are cached per run (:mod:`lab.runcache`, keyed by the learner's pinned results version,
:data:`VERSION`), so the sweep resumes where it stopped. ``clickboost sweep-defaults`` runs it and
writes the table.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lab.bench.vw import EXPLORERS, run_vw, to_lines, vw_version
from lab.repro.seed001 import RESULTS_VERSION
from lab.runcache import cached
from lab.sim.datasets import load_dataset
from lab.sim.stream import run_stream
from service.learners import make_learner
from service.sampling import DecisionIds

TUNING = ("car", "dna", "nursery", "digits")
#: The grid name of Vowpal Wabbit (not a learner of ours; its runs go through lab.bench.vw).
VW = "vw"
SEEDS = (0, 1, 2)
ROUNDS = 10_000

#: learner -> parameter -> values; every combination is one setting. Exploration rates stop at 0.01 on
#: purpose: lower ones earn a little more on these stationary streams, but a served default must
#: keep exploring (drift, new labels) and keep its logs usable for off-policy evaluation (an IPS
#: weight is at most (k - 1) / rho).
GRIDS: dict[str, dict[str, list[Any]]] = {
    "banditboost": {
        "weak": ["perceptron", "naive_bayes"],
        "n_learners": [20, 100],
        "delta": [0.01, 0.02, 0.05, 0.1],
    },
    "binbandit": {"n_learners": [5, 10, 20], "delta": [0.01, 0.02, 0.05, 0.1, 0.2]},
    "adabandit": {"n_learners": [10, 20, 50], "rho": [0.01, 0.02, 0.05, 0.1, 0.2], "lr_scale": [1.0, 10.0]},
    "banditbbm": {"n_learners": [10, 20], "rho": [0.01, 0.02, 0.05, 0.1, 0.2], "gamma": [0.05, 0.1, 0.2]},
    # C-OVA explores by elimination (no rate to floor); C = 1 is seed 004's "arbitrary" choice, which
    # its reproduction keeps (issue 24: the served default is chosen here, on the tuning sets only)
    # "auto" pairs every input of these three (at most 45 non-zeros); "none" is seed 004's model
    "cova": {
        "base": ["pa1", "pa2"],
        "C": [0.01, 0.03, 0.1, 0.3, 1.0, 10.0],
        "interactions": ["none", "auto"],
    },
    # SquareCB (ours, issue 24): the rate of its inverse gap weighting and its ridge; VW's gamma
    # exponent (0.5) and a constant feature, as VW's squarecb
    "squarecb": {"gamma_scale": [3.0, 10.0, 30.0, 100.0], "ridge": [0.3, 1.0, 3.0]},
    # SquareCB over VW's SGD regression (issue 41): its rate, VW's -q :: (pairs and squares), pairs
    # only or none, VW's mtr weighting or not; issue 50 (the served default) widened the rate past
    # 100, where the best setting had stood at the grid's edge
    "squarecb-sgd": {
        "gamma_scale": [3.0, 10.0, 30.0, 100.0, 300.0, 1000.0],
        "interactions": ["none", "pairs", "quadratic"],
        "weighting": ["mtr", "none"],
    },
    # RegCB over the same regression (issue 41): VW's mellowness 0.1 and smaller ones (our bounds
    # come out wider than VW's at the same c_0, docs/BENCHMARKS.md), both variants, with and without
    # VW's -q ::
    "regcb-sgd": {
        "mellowness": [0.0001, 0.001, 0.01, 0.1],
        "variant": ["elimination", "optimistic"],
        "interactions": ["none", "quadratic"],
    },
    # Vowpal Wabbit, tuned on the same three so that the race's best-of-sweep columns compare like
    # with like: every explorer of the race, without and with all pairwise interactions (`-q ::`,
    # what a VW user adds for categorical data as our C-OVA's pairs do); VW's defaults otherwise
    VW: {"explorer": list(EXPLORERS.values()), "interactions": ["none", "-q ::"]},
}
#: What VW runs when given no explorer: ``--cbify K`` explores epsilon-greedily with epsilon 0.05.
VW_DEFAULT = {"explorer": "--epsilon 0.05", "interactions": "none"}


def settings(learner: str) -> list[dict[str, Any]]:
    """Every combination of ``learner``'s grid."""
    grid = GRIDS[learner]
    return [dict(zip(grid, combo, strict=True)) for combo in itertools.product(*grid.values())]


#: The arithmetic each learner's cached runs describe, pinned as seed 001's ``RESULTS_VERSION`` (the
#: tree learners share it) so that edits which move no number (a compiled loop with the same
#: arithmetic, a new default) keep the runs; ``tests/lab/test_results_pinned.py`` fails when a
#: learner's results move, and then its value here changes too. ``bench quality`` keys its runs
#: by these as well.
VERSION: dict[str, str] = {
    **RESULTS_VERSION,
    # issue 41: the bandit boosters' served split schedule is ours (grace in examples, leaf subspaces,
    # the wide ranges, adaptive grace); a sweep setting names only its grid's parameters, so every
    # stored run of theirs ran the old schedule. Seed 001 pins the papers' schedule and keeps its runs.
    "adabandit": "wide-2026-11-28.1",
    # .2: BanditBBM's default split confidence is the papers' range again (its weights are ~20x smaller
    # than AdaBandit's, service/learners/banditbbm.py)
    "banditbbm": "wide-2026-11-28.2",
    "banditboost": "2026-11-25.1",
    # the linear learners and AdaBoost.MH, pinned since issue 24's race stores hours of their runs:
    # keyed by a hash of their sources, any edit of a module they import (weak/ for cova) threw
    # them away although no number moved
    "banditron": "2026-11-26.1",
    # .2: "auto" pairs only where they get exact columns (mnist's sparsest rows got hashed pairs);
    # 2026-11-27.1: a dense input's sums in index order, compiled, as a sparse one's (numpy's BLAS
    # order depended on the CPU kind: tests/service/learners/test_cpu_determinism.py)
    "cova": "2026-11-27.1",
    "perceptron": "2026-11-26.1",
    "adaboost-mh": "2026-11-26.1",
    "squarecb": "2026-11-27.1",
    # .2: VW's regression as VW computes it (the rates' square root, one scale, the cost
    # regressed and clipped, mtr's 1 / (K p)): tests/service/learners/test_squarecb_sgd.py
    "squarecb-sgd": "2026-11-28.2",
    # .2: bounds from the raw predicted costs, as VW's (tests/service/learners/test_regcb_sgd.py)
    "regcb-sgd": "2026-11-28.2",
}


def code_fingerprint() -> str:
    """Hash of the learner and kernel sources: the key of a learner without a pinned version (any
    change of those files invalidates its cached runs)."""
    root = Path(__file__).resolve().parents[1] / "service"
    h = hashlib.sha256()
    for path in sorted([*root.glob("learners/**/*.py"), root / "kernels.py", root / "sampling.py"]):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


#: VW's runs are keyed by VW's version and this tag of our driver (lab/bench/vw.py): change it when
#: ``to_lines`` or ``run_vw`` change what VW is fed (``test_to_lines_...`` pins the line format).
VW_DRIVER = "cbify-lines-1"


def vw_args(params: Mapping[str, Any]) -> str:
    """VW's arguments after ``--cbify K`` for a setting of the ``vw`` grid."""
    q = params.get("interactions", "none")
    return params["explorer"] + ("" if q == "none" else f" {q}")


def run_version(learner: str) -> str:
    """What a learner's cached runs are keyed by: its pinned :data:`VERSION`, VW's version and
    driver, or else a fingerprint of the learner sources."""
    if learner == VW:
        return f"vowpalwabbit {vw_version()} {VW_DRIVER}"
    return VERSION.get(learner) or code_fingerprint()


def one_run(learner: str, params: Mapping[str, Any], dataset: str, seed: int) -> dict[str, Any]:
    """Online error and CPU time of one run (cut at ``ROUNDS``)."""
    data = load_dataset(dataset)
    X, y = data.stream(seed, duplicate=-(-ROUNDS // data.n), limit=ROUNDS)
    if learner == VW:
        lines = to_lines(X, y)
        start = time.process_time()
        vw = run_vw(vw_args(params), data.n_labels, lines, y, seed)
        return {"error": 1.0 - float(vw.correct.mean()), "seconds": time.process_time() - start}
    model = make_learner(learner, data.d, data.n_labels, dict(params), seed=seed)
    start = time.process_time()
    correct = run_stream(model, X, y, DecisionIds.for_seed(seed))
    return {"error": 1.0 - float(correct.mean()), "seconds": time.process_time() - start}


def sweep(
    learner: str, store: Path | None, progress: Callable[[str], None] = lambda _: None
) -> list[tuple[dict[str, Any], float, dict[str, float], float]]:
    """Every setting of ``learner``, best first: (params, mean error, mean error per data set, CPU s)."""
    rows = []
    for params in settings(learner):
        rows.append((params, *score(learner, params, store)))
        progress(f"{learner} {params}: {rows[-1][1]:.4f}")
    return sorted(rows, key=lambda r: r[1])


def run_key(learner: str, params: Mapping[str, Any], dataset: str, seed: int) -> str:
    """The run store's key of one sweep run: the learner's :func:`run_version`, the setting, the
    data set, the shuffle and :data:`ROUNDS` (the one place it is spelled: ``bench quality`` reads
    the sweep's runs by it)."""
    return f"sweep|{run_version(learner)}|{learner}|{sorted(params.items())}|{dataset}|{seed}|{ROUNDS}"


def score(
    learner: str, params: Mapping[str, Any], store: Path | None
) -> tuple[float, dict[str, float], float]:
    """One setting on the tuning sets (cached per run): mean error, mean error per data set, CPU s."""
    per: dict[str, list[float]] = {d: [] for d in TUNING}
    seconds = 0.0
    for dataset in TUNING:
        for seed in SEEDS:
            key = run_key(learner, params, dataset, seed)
            res = cached(store, key, lambda d=dataset, s=seed: one_run(learner, params, d, s))
            per[dataset].append(res["error"])
            seconds += res["seconds"]
    means = {d: float(np.mean(v)) for d, v in per.items()}
    return float(np.mean(list(means.values()))), means, seconds


def render(
    results: Mapping[str, list[tuple[dict[str, Any], float, dict[str, float], float]]],
    defaults: Mapping[str, dict[str, Any]],
) -> str:
    """Markdown: per learner, its settings ranked, the current default marked, and a line under the
    table when the default is not the first (the header cannot claim that for every grid)."""
    parts = []
    for learner, rows in results.items():
        lines = [
            f"### {learner}",
            "",
            f"| rank | setting | mean online error | {' | '.join(TUNING)} "
            f"| CPU s ({len(TUNING) * len(SEEDS)} runs) |",
            "|---:|---|---:|" + "---:|" * len(TUNING) + "---:|",
        ]
        note = ""
        for rank, (params, mean, per, seconds) in enumerate(rows, 1):
            mark = ""
            if all(defaults[learner].get(k) == v for k, v in params.items()):
                mark = " **(default)**"
                if rank > 1:
                    note = f"\n\nThe default ranks {rank}: {mean:.4f} against {rows[0][1]:.4f} for the first."
            cells = " | ".join(f"{per[d]:.4f}" for d in TUNING)
            lines.append(f"| {rank} | `{params}`{mark} | {mean:.4f} | {cells} | {seconds:.0f} |")
        parts.append("\n".join(lines) + note)
    return "\n\n".join(parts)
