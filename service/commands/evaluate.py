"""``clickboost evaluate``: which policy would have done better on a decision log (off-policy evaluation).

Reads an exported decision log (JSON lines, ``GET /models/{name}/log`` or ``clickboost export``)
and estimates the click rate of each ``--policy`` on that traffic, with 95 % intervals
(:mod:`service.ope`):

``uniform``, ``first``, ``baseline``, ``constant:LABEL_INDEX``
    stationary policies: IPS, SNIPS and doubly robust (so is ``model:NAME``, a running model's
    current state, available through ``POST /models/{name}/evaluations`` only); an action-feature
    model's log: IPS and SNIPS, no ``constant`` (:mod:`service.ope`);
``LEARNER[:param=value,...]`` (e.g. ``cova``, ``banditboost:delta=0.05``)
    a learning policy: rejection-sampling replay over the log in order, as if it had served that
    traffic (several runs; the accepted count is printed beside the estimate).

The logging policy's own click rate (what the model earned) is printed first. Each estimate has
its effective sample size (ESS: the importance weights' (sum w)^2 / sum w^2, or a replay's
accepted events); one below 100 (service.ope.MIN_ESS) is marked ! and a warning below the table
says it cannot tell. The log needs exploration: a policy that shows one label with probability 1
(C-OVA) supports no other policy.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from service.cli import CLIError, plain_text
from service.ope import EvaluationError, evaluate, read_log


def run(args: argparse.Namespace) -> int:
    try:
        data = read_log(args.log)
        results = evaluate(data, args.policy, args.runs, args.seed)
    except EvaluationError as exc:
        raise CLIError(str(exc)) from None
    if args.json:
        print(json.dumps({p: {e: v.as_dict() for e, v in by.items()} for p, by in results.items()}, indent=1))
        return 0
    print(
        f"{data.n:,} logged decisions with a reward, K={data.n_labels}, d={data.dim}; observed click rate "
        f"{data.rewards.mean():.4f}; smallest logged propensity {data.propensities.min():.4g}"
    )
    print(
        f"{'policy':<32} {'estimator':<9} {'click rate':>10}  {'95% interval':<19} {'events':>7} {'ESS':>9}"
    )
    warnings = []
    for policy, by in results.items():
        for est, e in by.items():
            interval = f"[{e.low:.4f}, {e.high:.4f}]"
            flag = " !" if e.warning else ""
            print(f"{policy:<32} {est:<9} {e.value:>10.4f}  {interval:<19} {e.n:>7,} {e.ess:>9,.1f}{flag}")
            if e.warning:
                warnings.append(f"! {policy} {est}: {e.warning}")
    for line in warnings:  # after the table, which stays one line per estimate
        print(line)
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
        help="uniform | first | baseline | constant:LABEL_INDEX | LEARNER[:param=value,...] (repeatable)",
    )
    p.add_argument("--runs", type=int, default=10, help="replays per learning policy (default 10)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the estimates as JSON")
    p.set_defaults(func=run)
