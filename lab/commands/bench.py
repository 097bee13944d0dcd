"""``clickboost lab bench NAME [--quick] [--write-docs]``: run one benchmark part, or ``all``.

Each part's markdown is printed and replaces that part's section of ``BENCHMARKS.md`` (plots beside
it) in out/docs/, which git ignores; ``--write-docs`` writes into docs/ instead (``bench all
--write-docs`` regenerates the committed file), ``$BENCH_DIR`` into any directory. A ``--quick``
run writes to out/bench-quick/: its small numbers never mix with a full run's.
"""

from __future__ import annotations

import argparse
import sys

from lab import docs
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
    p.add_argument("--write-docs", action="store_true", help=docs.WRITE_DOCS_HELP)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.write_docs:
        report.write_docs()
    parts = [name for name, _ in benches.items()] if args.name == "all" else [args.name]
    for name in parts:
        markdown = benches.get(name)(args.quick)
        print(markdown, flush=True)
        out = report.out_dir(args.quick)  # out/docs/, docs/, $BENCH_DIR, or out/bench-quick/
        path = report.write(name, markdown, out)  # its section of BENCHMARKS.md (or report.DOCUMENTS')
        print(f"written to {path}", file=sys.stderr)
    return 0
