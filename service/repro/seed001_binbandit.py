"""Seed 001, Table 1: BinBandit with a wider exploration grid: ``reproduce seed001-binbandit``.

The table's sweep chose BinBandit's largest exploration (rho = 0.03) on balance and mice, the edge
of its grid. This reruns the same sweep (N x rho, scored on sweep seeds 1000 and 1001, shuffles of
the same data set) with two more rates, 0.1 and 0.2, and evaluates both choices, the table grid's
and the wider grid's, on the table's seeds.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from service.repro import reproductions
from service.repro.seed001 import (
    CACHE,
    DATASETS,
    N_GRID,
    RHO_GRID,
    SEEDS,
    SWEEP_SEEDS,
    TOLERANCE,
    _params,
    jobs,
    paper_cell,
    run_all,
    run_cell,
    section_head,
)

NAME = "seed001-binbandit"
WIDE_RHO = (*RHO_GRID, 0.1, 0.2)
DATA = ("balance", "car", "mice")


@reproductions.register(NAME)
def reproduce(quick: bool, out_dir: Path) -> str:
    """Sweep and evaluate (``quick``: car, 1,000 examples, N = 3, one sweep and one evaluation seed)."""
    start = time.perf_counter()
    data = ("car",) if quick else DATA
    n_grid = (3,) if quick else N_GRID
    sweep_seeds = SWEEP_SEEDS[:1] if quick else SWEEP_SEEDS
    limit = 1000 if quick else None
    cache = out_dir / "cache" / "seed001" if quick else CACHE
    n_jobs = 1 if quick else jobs()
    grid = [(n, r) for n in n_grid for r in WIDE_RHO]

    def params(ds: str, n: int, r: float) -> dict:
        return _params(ds, "binbandit", r, n)

    run_all(
        [
            ("binbandit", ds, params(ds, n, r), s, limit, cache)
            for ds in data
            for n, r in grid
            for s in sweep_seeds
        ],
        n_jobs,
    )
    choices: dict[str, dict[str, tuple[int, float]]] = {}
    total = 0.0
    for ds in data:
        score = {}
        for n, r in grid:
            runs = [run_cell("binbandit", ds, params(ds, n, r), s, limit, cache) for s in sweep_seeds]
            score[(n, r)] = np.mean([a for a, _ in runs])
            total += sum(t for _, t in runs)
        narrow = max((g for g in grid if g[1] in RHO_GRID), key=score.__getitem__)
        choices[ds] = {"table grid": narrow, "wider grid": max(grid, key=score.__getitem__)}
    seeds = {ds: 1 if quick else SEEDS[ds] for ds in data}
    tasks = [
        ("binbandit", ds, params(ds, *choice), s, limit, cache)
        for ds in data
        for choice in choices[ds].values()
        for s in range(seeds[ds])
    ]
    run_all(tasks, n_jobs)
    rows = []
    misses: dict[str, list[str]] = {"table grid": [], "wider grid": []}
    for ds in data:
        paper = DATASETS[ds][2][2]
        for grid_name, (n, r) in choices[ds].items():
            runs = [run_cell("binbandit", ds, params(ds, n, r), s, limit, cache) for s in range(seeds[ds])]
            accs = np.array([a for a, _ in runs])
            total += sum(t for _, t in runs)
            cell, missed = paper_cell(paper, accs)
            if missed:
                misses[grid_name].append(ds)
            rows.append(f"| {ds} | {grid_name} | N={n}, ρ={r:g} | {seeds[ds]} | {cell} |")
    closed = [ds for ds in misses["table grid"] if ds not in misses["wider grid"]]
    summary = (
        f"More than {TOLERANCE} below the paper with the table grid's choice: "
        f"{', '.join(misses['table grid']) or 'none'}; with the wider grid's: "
        f"{', '.join(misses['wider grid']) or 'none'}. Brought within the tolerance by the wider grid: "
        f"{', '.join(closed) or 'none'}."
    )
    title = "Seed 001, Table 1: BinBandit with a wider exploration grid"
    return f"""{section_head(title, NAME, quick, n_jobs, total, start)}

The table's sweep chose BinBandit's largest exploration rate on balance and mice, the edge of its
grid. This section reruns that sweep: N over {list(n_grid)} and ρ over {list(WIDE_RHO)} (δ = ρk/(k−1)),
scored on sweep seeds {", ".join(map(str, sweep_seeds))}, which are other shuffles of the same data
set. It then evaluates two choices on the table's seeds: the best setting within the table's ρ grid
{list(RHO_GRID)} (the table's choice), and the best within the wider grid. The evaluation seeds play
no part in either choice. ✗ marks a cell more than {TOLERANCE} below the paper.

| data | choice from | setting | seeds | BinBandit (paper / ours) |
|---|---|---|---:|---|
{chr(10).join(rows)}

{summary}
"""
