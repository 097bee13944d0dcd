"""Seed 002 (Kakade, Shalev-Shwartz, Tewari, ICML 2008), Fig. 1 on synthetic data:
``reproduce seed002-synthetic``.

Protocol (seed 002, Sec. 5 and Fig. 1): SYNSEP (separable) and SYNNONSEP (5% label noise), 9 classes,
400 binary features, 10^6 examples (:class:`service.sim.datasets.Synthetic`); one fixed data set per
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

from service.learners.base import make_learner
from service.repro import reproductions
from service.sampling import DecisionIds
from service.sim import metrics
from service.sim.curves import save_curves
from service.sim.datasets import Synthetic
from service.sim.simulate import run_chunks

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

    Banditron runs over a γ sweep on SYNSEP and with γ = 0.05 on SYNNONSEP; the Perceptron on both.
    """
    n = 5_000 if quick else 1_000_000
    seeds = range(2) if quick else range(3)
    gammas = (0.01, 0.05) if quick else (0.002, 0.005, 0.01, 0.02, 0.05)
    lo = n // 100  # slope fitted over the last two decades, t in [n/100, n]
    points = metrics.curve_points(n, 80)
    start = time.perf_counter()
    final: dict[tuple[str, str], np.ndarray] = {}  # (data, algorithm) -> final error % per seed
    slope: dict[tuple[str, str], np.ndarray] = {}
    curves: dict[tuple[str, str], np.ndarray] = {}
    for data, noise, grid in (("SYNSEP", 0.0, gammas), ("SYNNONSEP", 0.05, (NONSEP_GAMMA,))):
        X, y = _stream(Synthetic(noise=noise), n)
        algos = [(f"Banditron γ={g:g}", "banditron", {"gamma": g}) for g in grid]
        for algo, learner, params in [*algos, ("Perceptron", "perceptron", {})]:
            correct = _runs(X, y, learner, params, seeds)
            curve = np.array([metrics.cumulative_error(c, points) for c in correct])
            curves[data, algo] = curve
            final[data, algo] = 100 * curve[:, -1]
            slope[data, algo] = np.array([metrics.loglog_slope(points, c, lo, n) for c in curve])
        del X, y
    seconds = time.perf_counter() - start

    best = min(gammas, key=lambda g: final["SYNSEP", f"Banditron γ={g:g}"].mean())
    sep_b, non_b = f"Banditron γ={best:g}", f"Banditron γ={NONSEP_GAMMA:g}"
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

    headline = [
        row(
            f"SYNNONSEP, Banditron γ={NONSEP_GAMMA:g}, final error",
            PAPER_NONSEP_BANDITRON,
            final["SYNNONSEP", non_b],
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
            f"SYNSEP, Banditron γ={best:g} (best of sweep), log-log slope",
            PAPER_SEP_SLOPE_BANDITRON,
            slope["SYNSEP", sep_b],
            "",
            3,
        ),
        row(
            "SYNSEP, Perceptron, log-log slope",
            PAPER_SEP_SLOPE_PERCEPTRON,
            slope["SYNSEP", "Perceptron"],
            "",
            3,
        ),
    ]
    sweep = [
        f"| {data} | {algo} | {_fmt(final[data, algo])} | {_fmt(slope[data, algo], 3)} |"
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
(population) over runs. Slopes: least squares of log10(error) on log10(t) for t in [{lo:,}, {n:,}],
per run. The SYNSEP γ is the best of the sweep on this same stream (tuned on the evaluation stream,
as the paper's "best value of γ"). Run time {seconds:.0f} s.

| quantity | paper | ours | difference |
|---|---:|---:|---:|
{nl.join(headline)}

All runs (the SYNSEP γ sweep is the bottom-left panel of the paper's Fig. 1):

| data | algorithm | final error (%) | log-log slope |
|---|---|---:|---:|
{nl.join(sweep)}

![SYNSEP](repro/{NAME}-synsep.png) ![SYNNONSEP](repro/{NAME}-synnonsep.png)

Curves (mean and std over runs at log-spaced t): [`repro/{NAME}-synsep.csv`](repro/{NAME}-synsep.csv),
[`repro/{NAME}-synnonsep.csv`](repro/{NAME}-synnonsep.csv).
"""
