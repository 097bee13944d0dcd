"""Seed 000 (Chen, Lin, Lu, ICML 2014) Table 2 and Figure 1 (a)-(d): ``reproduce seed000-table2``.

Protocol (seed 000 §4): each example is predicted before its label is disclosed; the online error
is the number of wrong (sampled) predictions over the stream length; 10 random orderings; N = 100
weak learners, gamma = 0.1; only the exploration rate delta is tuned, and Table 2 reports the best
delta of a sweep. Categorical features are one-hot encoded (the stored datasets already are).
"""

from __future__ import annotations

import csv
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lab.repro import reproductions, write_section
from lab.sim.datasets import Dataset, load_dataset
from lab.sim.stream import run_stream
from service.learners import make_learner
from service.sampling import DecisionIds

NAME = "seed000-table2"
DATASETS = ("car", "dna", "nursery", "connect4")
DELTAS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3)
ORDERINGS = 10
# Connect4 (67,557 x 126, K = 3) is swept on fewer orderings to bound the compute; the chosen
# delta is then run on all 10 (the sweep's orderings included).
SWEEP_ORDERINGS = {"connect4": 3}


@dataclass(frozen=True)
class Column:
    """One column of Table 2: a learner, its fixed parameters, and the parameter delta sets."""

    title: str
    learner: str
    params: dict[str, object]
    delta_param: str | None  # None: no exploration parameter (C-OVA is parameter-free)


COLUMNS = (
    Column("Banditron", "banditron", {}, "gamma"),
    Column("C-OVA (Perceptron)", "cova", {"base": "perceptron", "interactions": "none"}, None),
    Column("BanditBoost (Perceptron)", "banditboost", {"weak": "perceptron"}, "delta"),
    Column("C-OVA (Naive Bayes)", "cova", {"base": "naive_bayes"}, None),
    Column("BanditBoost (Naive Bayes)", "banditboost", {"weak": "naive_bayes"}, "delta"),
)

# Not a column of the paper: C-OVA on the projected OGD Perceptron family BanditBoost uses, run to
# show why the table's C-OVA (Perceptron) is the classic Perceptron.
DIAGNOSTIC = Column("C-OVA (projected OGD Perceptron family)", "cova", {"base": "ogd_perceptron"}, None)

# Seed 000 Table 2: online error in %, mean and std over 10 orderings.
PAPER = {
    "car": ((29.4, 0.9), (22.8, 1.1), (26.9, 2.4), (30.0, 0.1), (25.1, 1.8)),
    "dna": ((26.8, 9.0), (13.5, 0.5), (18.6, 0.6), (42.9, 8.3), (25.1, 2.6)),
    "nursery": ((28.8, 1.4), (17.9, 3.0), (16.0, 1.1), (59.3, 8.2), (28.9, 2.1)),
    "connect4": ((39.8, 0.4), (28.1, 0.2), (30.8, 0.2), (34.9, 2.4), (34.2, 0.4)),
}


def online_error(
    col: Column, ds: Dataset, delta: float | None, seed: int, limit: int | None, n_learners: int
) -> float:
    """Online error (%) of one column on ordering ``seed`` of ``ds``."""
    params = dict(col.params)
    if col.delta_param is not None:
        params[col.delta_param] = delta
    if col.learner == "banditboost":
        params["n_learners"] = n_learners
    X, y = ds.stream(seed, limit=limit)
    learner = make_learner(col.learner, ds.d, ds.n_labels, params, seed=seed)
    return 100.0 * (1.0 - float(run_stream(learner, X, y, DecisionIds.for_seed(seed)).mean()))


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {NAME}: {msg}", file=sys.stderr, flush=True)


def _verdict(ours: float, ours_sd: float, paper: float, paper_sd: float) -> str:
    sigma = float(np.hypot(ours_sd, paper_sd))
    if ours < paper - 2.0 * sigma:
        return "better"
    if ours <= paper + 2.0 * sigma:
        return "within 2σ"
    return f"**miss** (+{ours - paper:.1f})"


CSV_NAME = "repro/seed000_delta_sweep.csv"  # relative to the output directory, like the other reproductions
PNG_NAME = "repro/seed000_delta_sweep.png"

Errors = dict[tuple[str, int, float | None], dict[int, float]]  # (data, column, delta) -> {ordering: %}


@reproductions.register(NAME)
def seed000_table2(quick: bool, out_dir: Path) -> str:
    """Run the sweep and Table 2 into ``out_dir``: every run's error in the CSV, then :func:`render`."""
    deltas = (0.05, 0.2) if quick else DELTAS
    orderings = 2 if quick else ORDERINGS
    limit = 200 if quick else None
    n_learners = 10 if quick else 100
    started = time.perf_counter()
    errors: Errors = {}  # column index -1 is DIAGNOSTIC
    for name in DATASETS:
        ds = load_dataset(name)
        n_sweep = min(orderings, SWEEP_ORDERINGS.get(name, orderings))
        for ci, col in enumerate(COLUMNS):
            grid: tuple[float | None, ...] = deltas if col.delta_param else (None,)
            for delta in grid:
                runs = errors.setdefault((name, ci, delta), {})
                for seed in range(n_sweep if len(grid) > 1 else orderings):
                    runs[seed] = online_error(col, ds, delta, seed, limit, n_learners)
                _log(f"{name} {col.title} delta={delta}: {np.mean(list(runs.values())):.2f}%")
            chosen = _best(errors, name, ci, n_sweep)
            runs = errors[(name, ci, chosen)]
            for seed in range(orderings):
                if seed not in runs:
                    runs[seed] = online_error(col, ds, chosen, seed, limit, n_learners)
        errors[(name, -1, None)] = {
            seed: online_error(DIAGNOSTIC, ds, None, seed, limit, n_learners) for seed in range(orderings)
        }
    meta = {"quick": int(quick), "limit": limit or 0, "n_learners": n_learners}
    meta["minutes"] = round((time.perf_counter() - started) / 60.0, 1)
    _write_csv(errors, meta, out_dir / CSV_NAME)
    return render(out_dir)


def render(out_dir: Path) -> str:
    """Write the section of ``out_dir/REPRODUCTION.md`` and the PNG from the CSV of a run.

    The markdown is a function of the CSV alone (the chosen delta is recomputed from the sweep
    orderings), so its text can be revised without recomputing the runs.
    """
    meta, errors = _read_csv(out_dir / CSV_NAME)
    datasets = tuple(n for n in DATASETS if (n, 0, None) in errors or any(k[0] == n for k in errors))
    orderings = 1 + max(max(runs) for runs in errors.values())
    deltas = tuple(sorted({d for (_, _, d) in errors if d is not None}))
    best: dict[tuple[str, int], float | None] = {}
    sizes: dict[str, tuple[int, int, int, float]] = {}
    for name in datasets:
        ds = load_dataset(name)
        majority = 100.0 * (1.0 - np.bincount(ds.y).max() / ds.n)
        limit = int(meta.get("limit", 0)) or ds.n
        sizes[name] = (min(limit, ds.n), ds.d, ds.n_labels, majority)
        n_sweep = min(orderings, SWEEP_ORDERINGS.get(name, orderings))
        for ci in range(len(COLUMNS)):
            best[(name, ci)] = _best(errors, name, ci, n_sweep)
    _plot_sweep(errors, datasets, deltas, out_dir / PNG_NAME)
    md = _markdown(errors, best, datasets, deltas, orderings, sizes, meta)
    write_section(NAME, md, out_dir / "REPRODUCTION.md")
    return md


def _best(errors: Errors, name: str, ci: int, n_sweep: int) -> float | None:
    """The delta with the lowest mean error over the sweep orderings (None for C-OVA)."""
    grid = sorted(
        (d for (n, c, d) in errors if n == name and c == ci), key=lambda d: -1.0 if d is None else d
    )
    if len(grid) == 1:
        return grid[0]
    means = [np.mean([e for s, e in errors[(name, ci, d)].items() if s < n_sweep]) for d in grid]
    return grid[int(np.argmin(means))]


def _stats(runs: dict[int, float]) -> tuple[float, float]:
    v = np.array([runs[s] for s in sorted(runs)])
    return float(v.mean()), float(v.std())


def _markdown(
    errors: Errors,
    best: dict[tuple[str, int], float | None],
    datasets: tuple[str, ...],
    deltas: tuple[float, ...],
    orderings: int,
    sizes: dict[str, tuple[int, int, int, float]],
    meta: dict[str, float],
) -> str:
    quick = bool(meta.get("quick", 0))
    n_learners = int(meta.get("n_learners", 100))
    cmd = f"python -m service reproduce {NAME}" + (" --quick" if quick else "")
    took = f" ({meta['minutes']} min)" if "minutes" in meta else ""
    lines = [
        "## Seed 000: BanditBoost, Chen, Lin, Lu (ICML 2014), Table 2 and Figure 1",
        "",
        f"Written by `{cmd}`{took}; every run's error is in [{CSV_NAME}]({CSV_NAME})."
        + (
            " **Quick mode: 200 examples per stream, 2 orderings, N = 10; not a reproduction.**"
            if quick
            else ""
        ),
        "",
        f"Online error (%) of the sampled prediction, mean ± std over {orderings} random orderings "
        f"(ordering s: stream permutation, learner seed and decision ids all from s). BanditBoost: "
        f"N = {n_learners}, γ = 0.1 (θ = γ/(2+γ)), η = δ³/K. Each cell: ours, then the paper's value "
        "and the verdict with σ = sqrt(σ_ours² + σ_paper²): *better* (below paper − 2σ), "
        "*within 2σ*, or *miss* (above paper + 2σ).",
        "",
        "| Data (n, d, K; majority-class error %) | " + " | ".join(c.title for c in COLUMNS) + " |",
        "|---|" + "---|" * len(COLUMNS),
    ]
    for name in datasets:
        n, d, k, majority = sizes[name]
        cells = []
        for ci, col in enumerate(COLUMNS):
            m, s = _stats(errors[(name, ci, best[(name, ci)])])
            pm, ps = PAPER[name][ci]
            delta = f", δ={best[(name, ci)]}" if col.delta_param else ""
            cells.append(f"{m:.1f} ± {s:.1f}{delta} (paper {pm} ± {ps}; {_verdict(m, s, pm, ps)})")
        lines.append(f"| {name.capitalize()} ({n}, {d}, {k}; {majority:.1f}) | " + " | ".join(cells) + " |")
    lines.append(
        "| Reuters4 | not run: the data is not available (see ../shared/datasets/README.md, "
        "RCV1 skipped for size) | | | | |"
    )
    sweep_cols = [(ci, c) for ci, c in enumerate(COLUMNS) if c.delta_param]
    classic = {n: _stats(errors[(n, 1, None)])[0] for n in datasets}
    ogd = {n: _stats(errors[(n, -1, None)])[0] for n in datasets}
    worse = [n for n in datasets if ogd[n] > classic[n]]
    better = [n for n in datasets if ogd[n] <= classic[n]]
    lines += [
        "",
        "**C-OVA (Perceptron) is the classic Perceptron** (zero start, step 1 on margin mistakes, no "
        "projection), a linear base of `cova` like PA. BanditBoost's weak learner is the projected OGD "
        "Perceptron of ALGORITHMS.md §4.3 (unit ball, step 1/√n), which the analysis needs because example "
        "weights reach K/δ. Plugged into C-OVA it is worse than the classic Perceptron on "
        + (", ".join(worse) or "no data set")
        + " and better on "
        + (", ".join(better) or "none")
        + "; the table uses the classic one (compare both with the paper's column above; same orderings, "
        f"mean ± std over {orderings}):",
        "",
        "| Data | C-OVA, classic Perceptron | " + DIAGNOSTIC.title + " |",
        "|---|---|---|",
    ]
    for name in datasets:
        m1, s1 = _stats(errors[(name, 1, None)])
        m2, s2 = _stats(errors[(name, -1, None)])
        lines.append(f"| {name} | {m1:.1f} ± {s1:.1f} | {m2:.1f} ± {s2:.1f} |")
    lines += [
        "",
        "**Tuning on the evaluation stream.** For Banditron (its γ plays the role of δ) and BanditBoost "
        f"the δ in the table is the best of the sweep {list(deltas)} on the same orderings it is reported "
        "on, as in the paper; those columns are optimistic by the selection. C-OVA has no parameter.",
        "",
        "Sweep (Figure 1 (a)-(d) of the paper, plotted in "
        f"[{PNG_NAME}]({PNG_NAME})): mean online error (%) per δ; the sweep uses "
        + ", ".join(
            f"{min(orderings, SWEEP_ORDERINGS.get(n_, orderings))} orderings on {n_}" for n_ in datasets
        )
        + ".",
        "",
        "| Data | Learner | " + " | ".join(f"δ={d}" for d in deltas) + " |",
        "|---|---|" + "---|" * len(deltas),
    ]
    for name in datasets:
        for ci, col in sweep_cols:
            vals = [f"{_stats(errors[(name, ci, d)])[0]:.1f}" for d in deltas]
            lines.append(f"| {name} | {col.title} | " + " | ".join(vals) + " |")
    missed: dict[int, list[str]] = {}
    for name in datasets:
        for ci, col in enumerate(COLUMNS):
            if "miss" in _verdict(*_stats(errors[(name, ci, best[(name, ci)])]), *PAPER[name][ci]):
                edge = col.delta_param and best[(name, ci)] in (deltas[0], deltas[-1])
                missed.setdefault(ci, []).append(
                    name + (" (best δ at the edge of the sweep)" if edge else "")
                )
    if missed:
        lines += ["", "### Misses", ""]
        for ci in sorted(missed):
            title = COLUMNS[ci].title
            lines.append(f"- **{title}** on {', '.join(missed[ci])}: {MISS_NOTES[title]}")
    return "\n".join(lines) + "\n"


# What we know about each column when it misses (written before the numbers above, kept in sync by
# listing a column only when the run shows a miss).
MISS_NOTES = {
    "Banditron": "the project's Banditron (ALGORITHMS.md §5, erratum applied, random ties) is invariant to "
    "the scale of x and the sweep covers its exploration rate, so neither feature scaling nor γ explains the "
    "gap; the paper's Car value sits at the majority-class error rate, which a Banditron that keeps "
    "guessing the majority class would reach. Cause not found.",
    "C-OVA (Perceptron)": "the classic Perceptron is used (see the comparison above); no further cause "
    "identified.",
    "BanditBoost (Perceptron)": "the Perceptron weak learner's details (unit-ball projection, step 1/√n, "
    "random start) are ours (ALGORITHMS.md §4.3, PROPOSED); the paper does not give them.",
    "C-OVA (Naive Bayes)": "our naive Bayes sees the one-hot columns as independent Bernoulli features "
    "(a learner gets dense vectors, not attribute groups). The paper says the one-hot decomposition was "
    "for the Perceptron, so its naive Bayes probably modelled each categorical attribute once.",
    "BanditBoost (Naive Bayes)": "our naive Bayes sees the one-hot columns as independent Bernoulli features "
    "(a learner gets dense vectors, not attribute groups), so each categorical attribute counts once per "
    "value column; the paper says the one-hot decomposition was for the Perceptron, so its naive Bayes "
    "probably modelled each attribute as one categorical feature. Laplace smoothing with pseudo-count 1 "
    "against example weights up to K/δ is also ours (ALGORITHMS.md §4.3, PROPOSED).",
}


def _write_csv(errors: Errors, meta: dict[str, float], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        fh.write("# " + " ".join(f"{k}={v}" for k, v in meta.items()) + "\n")
        out = csv.writer(fh)
        out.writerow(["dataset", "learner", "delta", "ordering", "error_pct"])
        for (name, ci, delta), runs in sorted(errors.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            title = DIAGNOSTIC.title if ci < 0 else COLUMNS[ci].title
            for seed in sorted(runs):
                out.writerow([name, title, "" if delta is None else delta, seed, repr(runs[seed])])


def _read_csv(path: Path) -> tuple[dict[str, float], Errors]:
    """Inverse of :func:`_write_csv`; a file without the ``# key=value`` line has no metadata."""
    column = {c.title: ci for ci, c in enumerate(COLUMNS)} | {DIAGNOSTIC.title: -1}
    lines = path.read_text().splitlines()
    meta: dict[str, float] = {}
    if lines and lines[0].startswith("#"):
        meta = {k: float(v) for k, v in (item.split("=") for item in lines[0][1:].split())}
        lines = lines[1:]
    errors: Errors = {}
    for row in csv.DictReader(lines):
        delta = float(row["delta"]) if row["delta"] else None
        runs = errors.setdefault((row["dataset"], column[row["learner"]], delta), {})
        runs[int(row["ordering"])] = float(row["error_pct"])
    return meta, errors


def _plot_sweep(
    errors: Errors,
    datasets: tuple[str, ...],
    deltas: tuple[float, ...],
    path: Path,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(9, 7), squeeze=False)
    for ax, name in zip(axes.flat, datasets, strict=False):
        for ci, col in enumerate(COLUMNS):
            if not col.delta_param:
                continue
            means = [_stats(errors[(name, ci, d)])[0] for d in deltas]
            ax.plot(deltas, means, marker="o", label=col.title)
        ax.set_xscale("log")
        ax.set_title(name.upper())
        ax.set_xlabel("exploration rate δ (Banditron: γ)")
        ax.set_ylabel("online error (%)")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
