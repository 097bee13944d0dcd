"""Seed 002 (Kakade, Shalev-Shwartz, Tewari, ICML 2008), Fig. 1 on synthetic data:
``reproduce seed002-synthetic``.

Protocol (seed 002, Sec. 5 and Fig. 1): SYNSEP (separable) and SYNNONSEP (5% label noise), 9 classes,
400 binary features, 10^6 examples (:class:`lab.sim.datasets.Synthetic`); one fixed data set per
noise level, each run a fresh learner with its own seed (the paper: "averaging is over 10
independent runs of Banditron"); error = cumulative error rate of the sampled label. The paper
reports, for the best γ of a sweep, a log-log slope of about -0.55 for Banditron on SYNSEP (-1 for
the Perceptron) and a final Banditron error of 10^-0.89 = 13% on SYNNONSEP, where the Perceptron
levels off at about 10%. The issue fixes γ = 0.05 for SYNNONSEP; for SYNSEP we take the γ of our
sweep with the lowest final error, i.e. γ is chosen on the evaluation stream, as in the paper.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from lab.repro import reproductions
from lab.sim import metrics
from lab.sim.curves import save_curves
from lab.sim.datasets import Synthetic
from lab.sim.simulate import run_chunks
from service.learners.base import make_learner
from service.sampling import DecisionIds

NAME = "seed002-synthetic"
CHUNK = 10_000
PAPER_NONSEP_BANDITRON = 100 * 10**-0.89  # "its final value of 10^-0.89 = 13%"
PAPER_NONSEP_PERCEPTRON = 10.0  # "drops to 10% and then becomes constant" (read off the text)
PAPER_SEP_SLOPE_BANDITRON = -0.55
PAPER_SEP_SLOPE_PERCEPTRON = -1.0
NONSEP_GAMMA = 0.05


def _stream(gen: Synthetic, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The fixed data set as uint8 features (400 MB for 10^6 examples) and labels."""
    parts = list(gen.chunks(n, CHUNK))
    return np.concatenate([p[0].astype(np.uint8) for p in parts]), np.concatenate([p[1] for p in parts])


def _runs(X: np.ndarray, y: np.ndarray, learner: str, params: dict, seeds: range) -> np.ndarray:
    """Correctness matrix (seeds, T) of fresh learners over the fixed stream ``(X, y)``."""
    rows = []
    for seed in seeds:
        model = make_learner(learner, X.shape[1], Synthetic.n_labels, params, seed=seed)
        chunks = ((X[i : i + CHUNK].astype(np.float64), y[i : i + CHUNK]) for i in range(0, len(y), CHUNK))
        rows.append(run_chunks(model, chunks, DecisionIds.for_seed(seed)))
    return np.array(rows)


def _fmt(values: np.ndarray, digits: int = 2) -> str:
    return f"{values.mean():.{digits}f} ± {values.std():.{digits}f}"


@reproductions.register(NAME)
def reproduce(quick: bool, out_dir: Path) -> str:
    """Run the Fig. 1 protocol (``quick``: 5,000 examples, 2 seeds, 2 γ) and return the markdown.

    Banditron runs over a γ sweep on each data set (γ = 0.05 is the issue's SYNNONSEP value), the
    Perceptron once per data set.
    """
    n = 5_000 if quick else 1_000_000
    seeds = range(2) if quick else range(3)
    sweeps = {
        "SYNSEP": (0.01, 0.05) if quick else (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05),
        "SYNNONSEP": (0.02, 0.05) if quick else (0.02, 0.05, 0.1),
    }
    ranges = ((n // 100, n), (n // 1000, n // 10))  # declared before the runs; after seeing the curves
    points = metrics.curve_points(n, 80)
    start = time.perf_counter()
    final: dict[tuple[str, str], np.ndarray] = {}  # (data, algorithm) -> final error % per seed
    slopes: dict[tuple[str, str], list[np.ndarray]] = {}  # one array per fit range
    curves: dict[tuple[str, str], np.ndarray] = {}
    floor: dict[str, float] = {}  # algorithm -> % of rounds explored off a perfect greedy label
    for data, noise in (("SYNSEP", 0.0), ("SYNNONSEP", 0.05)):
        X, y = _stream(Synthetic(noise=noise), n)
        algos = [(f"Banditron γ={g:g}", "banditron", {"gamma": g}) for g in sweeps[data]]
        for algo, learner, params in [*algos, ("Perceptron", "perceptron", {})]:
            correct = _runs(X, y, learner, params, seeds)
            curve = np.array([metrics.cumulative_error(c, points) for c in correct])
            curves[data, algo] = curve
            final[data, algo] = 100 * curve[:, -1]
            slopes[data, algo] = [
                np.array([metrics.loglog_slope(points, c, a, b) for c in curve]) for a, b in ranges
            ]
            floor[algo] = 100 * params.get("gamma", 0.0) * (Synthetic.n_labels - 1) / Synthetic.n_labels
        del X, y
    seconds = time.perf_counter() - start

    def best_gamma(data: str) -> float:
        return min(sweeps[data], key=lambda g: final[data, f"Banditron γ={g:g}"].mean())

    def best(data: str) -> str:
        return f"Banditron γ={best_gamma(data):g}"

    sep_b, non_b, non_best = best("SYNSEP"), f"Banditron γ={NONSEP_GAMMA:g}", best("SYNNONSEP")
    edges = [
        f"the best {data} γ = {best_gamma(data):g} is the"
        f" {'smallest' if best_gamma(data) == min(g) else 'largest'} of its sweep,"
        " so a γ outside it may do better"
        for data, g in sweeps.items()
        if best_gamma(data) in (min(g), max(g))
    ]
    edge_note = ("Caveat: " + "; ".join(edges) + ".") if edges else "Every best γ is inside its sweep."
    for data, algo in (("SYNSEP", sep_b), ("SYNNONSEP", non_b)):
        save_curves(
            out_dir / "repro" / f"{NAME}-{data.lower()}",
            points,
            {algo: curves[data, algo], "Perceptron": curves[data, "Perceptron"]},
            title=f"Seed 002 {data}: error rate (log-log)",
            loglog=True,
        )

    def row(what: str, paper: float, ours: np.ndarray, unit: str, digits: int) -> str:
        diff = ours.mean() - paper
        return f"| {what} | {paper:.{digits}f}{unit} | {_fmt(ours, digits)}{unit} | {diff:+.{digits}f} |"

    (lo, hi), (lo2, hi2) = ranges
    headline = [
        row(f"SYNNONSEP, {non_b}, final error", PAPER_NONSEP_BANDITRON, final["SYNNONSEP", non_b], " %", 2),
        row(
            f"SYNNONSEP, {non_best} (best of sweep), final error",
            PAPER_NONSEP_BANDITRON,
            final["SYNNONSEP", non_best],
            " %",
            2,
        ),
        row(
            "SYNNONSEP, Perceptron, final error",
            PAPER_NONSEP_PERCEPTRON,
            final["SYNNONSEP", "Perceptron"],
            " %",
            2,
        ),
        row(
            f"SYNSEP, {sep_b} (best of sweep), slope on [{lo:,}, {hi:,}]",
            PAPER_SEP_SLOPE_BANDITRON,
            slopes["SYNSEP", sep_b][0],
            "",
            3,
        ),
        row(
            f"SYNSEP, {sep_b} (best of sweep), slope on [{lo2:,}, {hi2:,}] (post hoc)",
            PAPER_SEP_SLOPE_BANDITRON,
            slopes["SYNSEP", sep_b][1],
            "",
            3,
        ),
        row(
            f"SYNSEP, Perceptron, slope on [{lo:,}, {hi:,}]",
            PAPER_SEP_SLOPE_PERCEPTRON,
            slopes["SYNSEP", "Perceptron"][0],
            "",
            3,
        ),
    ]
    sweep = [
        f"| {data} | {algo} | {_fmt(final[data, algo])} | {floor[algo]:.2f} | "
        f"{_fmt(slopes[data, algo][0], 3)} | {_fmt(slopes[data, algo][1], 3)} |"
        for data, algo in final
    ]
    mode = " — **quick mode, not the paper's protocol**" if quick else ""
    nl = "\n"
    return f"""## Seed 002, Fig. 1, SYNSEP and SYNNONSEP{mode}

Kakade, Shalev-Shwartz, Tewari, *Efficient bandit algorithms for online multiclass prediction*
(ICML 2008). Command: `python -m service reproduce {NAME}{" --quick" if quick else ""}`.

Protocol: {n:,} examples per data set from the Fig. 1 generator (topic seed 0, data seed 0;
SYNNONSEP = the same examples with 5% of the labels replaced by a different label); the same stream
for every run; {len(seeds)} runs (seeds 0..{len(seeds) - 1}; the paper used 10, we keep the machine
time bounded) of a fresh learner; error = cumulative error rate of the sampled label; mean ± std
(population) over runs. Slopes: least squares of log10(error) on log10(t) per run, over the last two
decades [{lo:,}, {hi:,}] (chosen before the runs) and over [{lo2:,}, {hi2:,}] (chosen after seeing
the curves, so only an aid to reading them). "Best of sweep" γ is chosen on this same stream (tuned
on the evaluation stream, as the paper's "best value of γ"). Run time {seconds:.0f} s.

| quantity | paper | ours | difference |
|---|---:|---:|---:|
{nl.join(headline)}

All runs (the γ sweeps correspond to the bottom panels of the paper's Fig. 1). The exploration floor
γ (K-1)/K is the error rate that exploration alone causes even when the greedy label is always
right; a cumulative error approaching it flattens the log-log curve, so the slope over the last
decades depends on γ as much as on learning:

| data | algorithm | final error (%) | exploration floor (%) | slope {lo:,}..{hi:,} | slope {lo2:,}..{hi2:,} |
|---|---|---:|---:|---:|---:|
{nl.join(sweep)}

{edge_note}

![SYNSEP](repro/{NAME}-synsep.png) ![SYNNONSEP](repro/{NAME}-synnonsep.png)

Curves (mean and std over runs at log-spaced t): [`repro/{NAME}-synsep.csv`](repro/{NAME}-synsep.csv),
[`repro/{NAME}-synnonsep.csv`](repro/{NAME}-synnonsep.csv).
"""
