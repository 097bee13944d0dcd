"""``clickboost evaluate``: which policy would have done better on a decision log (off-policy evaluation).

Reads an exported decision log (JSON lines, ``GET /models/{name}/log`` or ``clickboost export``)
and estimates the click rate of each ``--policy`` on that traffic, with 95 % intervals
(:mod:`service.ope`):

``uniform``, ``constant:LABEL_INDEX``
    stationary policies: IPS, SNIPS and doubly robust (so is ``model:NAME``, a running model's
    current state, available through ``POST /models/{name}/evaluations`` only);
``LEARNER[:param=value,...]`` (e.g. ``cova``, ``banditboost:delta=0.05``)
    a learning policy: rejection-sampling replay over the log in order, as if it had served that
    traffic (several runs; the accepted count is printed beside the estimate).

The logging policy's own click rate (what the model earned) is printed first. The log needs
exploration: a policy that shows one label with probability 1 (C-OVA) supports no other policy.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from service.cli import CLIError, plain_text
from service.features import SparseVector
from service.learners.base import Learner, make_learner
from service.ope import (
    Estimate,
    LoggedData,
    constant_pmfs,
    evaluate_stationary,
    policy_pmfs,
    replay,
    uniform_pmfs,
)


def parse_policy(text: str) -> tuple[str, dict[str, Any]]:
    """``name[:k=v,...]`` -> (name, params); values parsed as JSON where they parse (numbers,
    booleans), else kept as strings."""
    name, _, rest = text.partition(":")
    params: dict[str, Any] = {}
    if name == "model":  # model:NAME, a service model's snapshot
        return name, {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            if name == "constant":
                params["label"] = int(key)
                continue
            raise CLIError(f"--policy {text!r}: expected name:param=value,...")
        try:
            params[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            params[key.strip()] = value.strip()
    return name.strip(), params


def read_log(path: Path) -> LoggedData:
    """The decisions of a JSON-lines log that have a reward."""
    try:
        with path.open() as f:
            return LoggedData.from_records(json.loads(line) for line in f if line.strip())
    except (OSError, ValueError, KeyError) as exc:
        raise CLIError(f"cannot read the decision log {path}: {exc}") from None


def evaluate(
    data: LoggedData,
    policies: list[str],
    runs: int,
    seed: int,
    snapshots: Mapping[str, Learner] | None = None,
) -> dict[str, dict[str, Estimate]]:
    """Estimates of every policy: name -> estimator -> :class:`Estimate`.

    ``model:NAME`` policies are the frozen learners of ``snapshots`` (a service's models, passed by
    ``POST /models/{name}/evaluations``): their ``decide`` pmf on every logged context, the model
    unchanged.
    """
    stationary: dict[str, np.ndarray] = {}
    learning: dict[str, tuple[str, dict[str, Any]]] = {}
    for text in policies:
        name, params = parse_policy(text)
        if name == "model":
            model = (snapshots or {}).get(text.partition(":")[2])
            if model is None:
                raise CLIError(
                    f"--policy {text!r}: a model snapshot needs the service (POST /models/NAME/evaluations)"
                )
            sparse = model.accepts_sparse
            stationary[text] = policy_pmfs(
                data,
                lambda x, rng, m=model, sp=sparse: m.decide(
                    x if sp or not isinstance(x, SparseVector) else x.dense(), rng
                ),
                seed,
            )
            continue
        if name == "uniform":
            stationary[text] = uniform_pmfs(data)
        elif name == "constant":
            label = int(params.get("label", -1))
            if not 0 <= label < data.n_labels:
                raise CLIError(
                    f"--policy {text!r}: constant:LABEL_INDEX with 0 <= LABEL_INDEX < {data.n_labels}"
                )
            stationary[text] = constant_pmfs(data, label)
        else:
            make_learner(name, data.dim, data.n_labels, params)  # a bad name or parameter fails here
            learning[text] = (name, params)
    out = {"logged": evaluate_stationary(data, {"logged": data.probs})["logged"]}
    if stationary:
        out |= evaluate_stationary(data, stationary)
    for text, (name, params) in learning.items():

        def make(s: int, name: str = name, params: dict[str, Any] = params) -> Any:
            return make_learner(name, data.dim, data.n_labels, params, seed=s)

        out[text] = {"replay": replay(data, make, runs=runs, seed=seed)}
    return out


def run(args: argparse.Namespace) -> int:
    data = read_log(args.log)
    results = evaluate(data, args.policy, args.runs, args.seed)
    if args.json:
        print(json.dumps({p: {e: v.as_dict() for e, v in by.items()} for p, by in results.items()}, indent=1))
        return 0
    print(
        f"{data.n:,} logged decisions with a reward, K={data.n_labels}, d={data.dim}; observed click rate "
        f"{data.rewards.mean():.4f}; smallest logged propensity {data.propensities.min():.4g}"
    )
    print(f"{'policy':<32} {'estimator':<8} {'click rate':>10}  {'95% interval':<19} {'events':>7}")
    for policy, by in results.items():
        for est, e in by.items():
            interval = f"[{e.low:.4f}, {e.high:.4f}]"
            print(f"{policy:<32} {est:<8} {e.value:>10.4f}  {interval:<19} {e.n:>7,}")
    return 0


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="estimate other policies' click rates on a decision log (off-policy evaluation)",
        description=plain_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--log", type=Path, required=True, help="decision log, JSON lines (clickboost export)")
    p.add_argument(
        "--policy",
        action="append",
        default=[],
        help="uniform | constant:LABEL_INDEX | LEARNER[:param=value,...] (repeat the option)",
    )
    p.add_argument("--runs", type=int, default=10, help="replays per learning policy (default 10)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the estimates as JSON")
    p.set_defaults(func=run)
