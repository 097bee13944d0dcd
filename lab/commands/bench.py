"""``python -m service bench NAME [--quick]``: run one benchmark part, or ``all`` of them in turn.

Each part's markdown is printed and replaces that part's section of ``BENCHMARKS.md`` in
``$BENCH_DIR`` (default ``docs/``), so ``bench all`` regenerates the whole file. A ``--quick`` run
without ``$BENCH_DIR`` writes to ``out/bench-quick/`` instead: its small numbers never replace the
committed tables.
"""

from __future__ import annotations

import argparse
import sys

from lab.bench import benches, report
from service.cli import plain_text


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="run benchmarks and print their results",
        description=plain_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", help="benchmark part (learners, ...) or 'all'")
    p.add_argument("--quick", action="store_true", help="small bounded runs (seconds)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    parts = [name for name, _ in benches.items()] if args.name == "all" else [args.name]
    for name in parts:
        markdown = benches.get(name)(args.quick)
        print(markdown, flush=True)
        out = report.out_dir(args.quick)  # docs/, $BENCH_DIR, or out/bench-quick/ for --quick
        report.write(name, markdown, out)  # its section of BENCHMARKS.md
        print(f"written to {out / 'BENCHMARKS.md'}", file=sys.stderr)
    return 0
