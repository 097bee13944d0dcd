"""``python -m service bench NAME [--quick]``: run one benchmark part, or ``all`` of them in turn."""

from __future__ import annotations

import argparse

from service.bench import benches
from service.cli import commands


@commands.register("bench")
def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run benchmarks and print their results", description=__doc__)
    p.add_argument("name", help="benchmark part (learners, ...) or 'all'")
    p.add_argument("--quick", action="store_true", help="small bounded runs (seconds)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    parts = [name for name, _ in benches.items()] if args.name == "all" else [args.name]
    for name in parts:
        print(benches.get(name)(args.quick), flush=True)
    return 0
