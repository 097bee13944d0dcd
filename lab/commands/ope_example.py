"""``clickboost lab ope-example``: the worked example and coverage figures of docs/OFFLINE_EVALUATION.md.

A Banditron serves and logs simulated traffic of a data set; five learners are evaluated on the log
by replay and stationary policies by IPS/SNIPS/DR, each beside its truth (the simulator knows the
labels); the coverage of the intervals is measured as in ``tests/service/test_ope.py``. Writes the
generated section of OFFLINE_EVALUATION.md and its plot under out/docs/ (git-ignored), under
docs/ with ``--write-docs``, or under ``--out DIR``.
"""

from __future__ import annotations

import argparse

from lab import docs
from lab.ope import plot, render, replay_coverage, stationary_coverage, worked_example
from lab.repro import write_section
from service.cli import plain_text


def run(args: argparse.Namespace) -> int:
    out = docs.out_dir(args)
    n, runs = (3000, 20) if args.quick else (args.n, 100)
    rows, info = worked_example(args.dataset, n)
    stationary = stationary_coverage(runs=runs, n=4000)
    replayed = replay_coverage(runs=runs, m=300)
    plot(rows, out / "ope" / "example.png")
    markdown = render(rows, info, stationary, replayed, "ope/example.png")
    command = "python -m service ope-example" + (" --quick" if args.quick else "")
    write_section("ope-example", f"`{command}`\n\n{markdown}", out / "OFFLINE_EVALUATION.md")
    print(markdown)
    return 0


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ope-example",
        help="off-policy evaluation: the worked example of docs/OFFLINE_EVALUATION.md",
        description=plain_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--dataset", default="car")
    p.add_argument("--n", type=int, default=20_000, help="logged visits (default 20,000)")
    p.add_argument("--quick", action="store_true", help="a small run (seconds), for trying it")
    docs.add_out_arguments(p, "OFFLINE_EVALUATION.md and its plot")
    p.set_defaults(func=run)
