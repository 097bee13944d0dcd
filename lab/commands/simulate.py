"""``clickboost lab simulate``: run a learner over a shuffled dataset stream for several seeds.

Example::

    clickboost lab simulate --learner banditron --set gamma=0.15 --dataset mnist --seeds 3 --json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from lab.sim import metrics
from lab.sim.curves import save_curves
from lab.sim.datasets import load_dataset
from lab.sim.simulate import run_seeds
from service.cli import CLIError, plain_text
from service.learners.base import learners


def parse_sets(items: list[str]) -> dict[str, str]:
    """``["gamma=0.1", "base=pa"]`` -> ``{"gamma": "0.1", "base": "pa"}`` (values stay strings)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CLIError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def positive(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="run a learner over shuffled dataset streams",
        description=plain_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--learner", required=True, help="registered learner name")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="hyperparameter")
    p.add_argument("--dataset", required=True, help="dataset name (car, mnist, synsep, ...) or .npz path")
    p.add_argument("--seeds", type=positive, default=1, help="number of runs, seeds 0..N-1")
    p.add_argument("--duplicate", type=positive, default=1, help="duplicate the data F times, then shuffle")
    p.add_argument("--eval", choices=metrics.EVALS, default="online", help="error protocol")
    p.add_argument("--limit", type=positive, default=None, help="cut each stream at N examples")
    p.add_argument("--curve", type=Path, default=None, metavar="STEM", help="write STEM.csv and STEM.png")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cls = learners.get(args.learner)
    params = cls.Params.parse(args.learner, parse_sets(args.set))  # fail before loading data
    try:
        data = load_dataset(args.dataset)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    runs = run_seeds(
        args.learner,
        params.model_dump(),
        data,
        range(args.seeds),
        duplicate=args.duplicate,
        limit=args.limit,
    )
    errors = [metrics.error(c, args.eval) for c in runs.correct]
    result = {
        "learner": args.learner,
        "full_information": cls.full_information,
        "params": params.model_dump(mode="json"),
        "dataset": data.name,
        "n_features": data.d,
        "n_labels": data.n_labels,
        "n_stream": int(runs.correct.shape[1]),
        "duplicate": args.duplicate,
        "seeds": args.seeds,
        "eval": args.eval,
        "errors": errors,
        "error_mean": float(np.mean(errors)),
        "error_std": float(np.std(errors)),
        "accuracy_last20_mean": float(np.mean([metrics.last20_accuracy(c) for c in runs.correct])),
        "examples_per_second": runs.examples_per_second,
    }
    if args.curve is not None:
        points = metrics.curve_points(runs.correct.shape[1])
        rows = np.array([metrics.cumulative_error(c, points) for c in runs.correct])
        csv_path, png_path = save_curves(
            args.curve, points, {args.learner: rows}, title=f"{args.learner} on {data.name}"
        )
        result["curve_csv"], result["curve_png"] = str(csv_path), str(png_path)
    if args.json:
        print(json.dumps(result, allow_nan=False))
        return 0
    print(
        f"{args.learner} {result['params']} on {data.name} (T={result['n_stream']}, d={data.d}, "
        f"K={data.n_labels}, {args.seeds} seed(s))"
    )
    print(f"  {args.eval} error: {result['error_mean']:.4f} ± {result['error_std']:.4f}")
    print(f"  last-20% accuracy: {result['accuracy_last20_mean']:.4f}")
    speed = result["examples_per_second"]
    print(f"  examples/s: {speed:,.0f}" if math.isfinite(speed) else "  examples/s: n/a")
    if args.curve is not None:
        print(f"  curve: {result['curve_csv']}, {result['curve_png']}")
    return 0
