"""``clickboost lab adaboost-mh``: batch AdaBoost.MH with full, UCB1 or EXP3.P stump search."""

from __future__ import annotations

import argparse
import json

from lab.boosting import run, split
from lab.sim.datasets import load_dataset
from service.cli import CLIError
from service.learners.stumps.train import SEARCHES


def _run(args: argparse.Namespace) -> int:
    """Split, train with the chosen search, print the last iteration's errors, time and evaluations."""
    if args.iterations < 1:
        raise CLIError(f"--iterations must be >= 1, got {args.iterations}")
    if args.seed < 0:
        raise CLIError(f"--seed must be >= 0, got {args.seed}")
    ds = load_dataset(args.dataset)
    sp = split(ds, args.seed)
    curve = run(sp, args.search, args.iterations, args.seed)
    result = {
        "dataset": ds.name,
        "search": args.search,
        "iterations": args.iterations,
        "seed": args.seed,
        "split": sp.description,
        "n_train": int(sp.y_train.size),
        "n_test": int(sp.y_test.size),
        "train_error": float(curve.train_error[-1]),
        "test_error": float(curve.test_error[-1]),
        "seconds": float(curve.seconds[-1]),
        "stump_evaluations": int(curve.evaluations[-1]),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"AdaBoost.MH on {ds.name} ({sp.description})")
        print(f"search {args.search}, T = {args.iterations}, seed {args.seed}")
        print(f"training error   {result['train_error']:.4f}")
        print(f"held-out error   {result['test_error']:.4f}")
        print(f"wall time        {result['seconds']:.3f} s (search + reweighting)")
        print(f"stump evaluations {result['stump_evaluations']}")
    return 0


def add(sub: argparse._SubParsersAction) -> None:
    """Register the ``adaboost-mh`` subcommand."""
    p = sub.add_parser(
        "adaboost-mh",
        help="batch AdaBoost.MH with bandit-aided stump search (seed 003)",
        description="Train AdaBoost.MH with discrete stumps on a train split and report training and "
        "held-out error, wall time and stump evaluations (ALGORITHMS.md §7).",
    )
    p.add_argument("--dataset", required=True, help="dataset name in the datasets directory or a .npz path")
    p.add_argument("--search", choices=SEARCHES, required=True, help="which stumps to search each iteration")
    p.add_argument("--iterations", type=int, required=True, help="boosting iterations T")
    p.add_argument("--seed", type=int, default=0, help="split, subsampling and EXP3.P seed (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=_run)
