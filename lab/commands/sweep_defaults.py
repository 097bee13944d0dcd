"""``clickboost lab sweep-defaults [LEARNER ...]``: the boosters' and C-OVA's default hyperparameters.

Every setting of each learner's grid (lab/sweep.py) on car, dna, nursery and digits, 3 shuffles each,
streams cut at 10,000 rounds, ranked by mean online error; the current default is marked. ``vw``
sweeps Vowpal Wabbit alike (the race's ``vw@sweep``; its default is what ``--cbify K`` does alone).
The runs are stored in ``docs/repro/sweep-runs.jsonl`` (committed, resumable: a run already stored
is read, not run again); a run of every grid (no argument) writes the ``sweep-defaults`` section of
BENCHMARKS.md in out/docs/ (git-ignored), in docs/ with ``--write-docs`` or in ``$BENCH_DIR``; a
run of some prints their tables only.
"""

from __future__ import annotations

import argparse

from lab import docs
from lab.bench import report
from lab.runcache import progress
from lab.sweep import GRIDS, ROUNDS, SEEDS, TUNING, VW, VW_DEFAULT, render, sweep
from service.cli import CLIError, plain_text
from service.learners.base import learners

#: Every run's result, committed (as seed 001's runs): the sweep resumes across sessions and machines.
STORE = docs.DOCS / "repro" / "sweep-runs.jsonl"


def run(args: argparse.Namespace) -> int:
    chosen = args.learner or list(GRIDS)
    unknown = sorted(set(chosen) - set(GRIDS))
    if unknown:
        raise CLIError(f"no sweep grid for {', '.join(unknown)}; grids: {', '.join(GRIDS)}")
    if args.write_docs:
        report.write_docs()
    results = {name: sweep(name, STORE, progress) for name in chosen}
    # every field's value, also those a dump leaves out at their defaults (C-OVA's interactions)
    defaults = {name: VW_DEFAULT if name == VW else dict(learners.get(name).Params()) for name in chosen}
    head = (
        "## Default hyperparameters of the boosters, C-OVA and SquareCB (sweep)\n\n"
        f"`python -m service sweep-defaults`. {report.machine()} Every setting on "
        f"{', '.join(TUNING)} ({len(SEEDS)} shuffles each, streams cut at {ROUNDS:,} rounds), ranked "
        "by the mean online error (sampled label wrong) over data sets and shuffles; the defaults were "
        "chosen from these tables (tuned on these four only; the other seven of `bench quality` are "
        "untouched) and a line under a table says where the default is not the first: BanditBoost's is "
        "its best perceptron setting, as naive Bayes' statistics grow as K N d, too large for hashed "
        "input; AdaBandit's N = 20 is kept where N = 50 ranks first by less than the standard error of "
        "their difference over the 12 runs, at about three times the CPU time; VW's are VW's own (its "
        "sweep picks the race's `vw@sweep`). C-OVA's `interactions=auto` adds pairs only where each "
        "pair gets its own column (small dense inputs such as car, dna and nursery); on larger input (hashed "
        "from b = 10) it is `none`, as "
        "hashed pairs made C-OVA slower and worse on `bench sparse`'s stream (a linear teacher). "
        "The grids stop at an exploration rate of 0.01 on purpose "
        "(lab/sweep.py)."
    )
    markdown = head + "\n\n" + render(results, defaults)
    print(markdown)
    if set(chosen) == set(GRIDS):  # the section holds every grid
        report.write("sweep-defaults", markdown, report.out_dir())
    return 0


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep-defaults",
        help="sweep the boosters', C-OVA's and VW's settings on the tuning sets (the defaults' source)",
        description=plain_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("learner", nargs="*", help=f"learners to sweep: {', '.join(GRIDS)} (default: all)")
    p.add_argument("--write-docs", action="store_true", help=docs.WRITE_DOCS_HELP)
    p.set_defaults(func=run)
