"""Learning curves as CSV (long format) and PNG (matplotlib, Agg backend)."""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path

import numpy as np


def save_curves(
    stem: Path,
    points: np.ndarray,
    curves: Mapping[str, np.ndarray],
    *,
    title: str,
    ylabel: str = "cumulative error rate",
    loglog: bool = False,
) -> tuple[Path, Path]:
    """Write ``stem.csv`` and ``stem.png`` for learning curves over the round counts ``points``.

    Parameters
    ----------
    stem : Path
        Output path without suffix; parent directories are created.
    points : ndarray of shape (P,)
        Round counts t.
    curves : mapping of name -> ndarray of shape (S, P)
        One row per seed; the plot shows the mean with a band of one standard deviation.
    title, ylabel : str
        Plot labels.
    loglog : bool, default False
        Log-log axes (seed 002, Fig. 1); otherwise a log x axis.

    Returns
    -------
    (csv_path, png_path)
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stem.parent.mkdir(parents=True, exist_ok=True)
    csv_path, png_path = stem.with_suffix(".csv"), stem.with_suffix(".png")
    with csv_path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["curve", "t", "mean", "std", "seeds"])
        for name, rows in curves.items():
            mean, std = rows.mean(axis=0), rows.std(axis=0)
            for t, m, s in zip(points, mean, std, strict=True):
                w.writerow([name, int(t), f"{m:.6g}", f"{s:.3g}", rows.shape[0]])
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for name, rows in curves.items():
        mean, std = rows.mean(axis=0), rows.std(axis=0)
        ax.plot(points, mean, label=name)
        ax.fill_between(points, np.maximum(mean - std, 1e-6), mean + std, alpha=0.2)
    ax.set_xscale("log")
    if loglog:
        ax.set_yscale("log")
    ax.set_xlabel("examples seen")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png_path)
    plt.close(fig)
    return csv_path, png_path
