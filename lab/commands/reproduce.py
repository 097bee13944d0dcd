"""``python -m service reproduce NAME [--quick] [--out DIR]``: run a paper reproduction.

A reproduction (registered in :data:`lab.repro.reproductions`) runs its protocol, writes its
figures under ``DIR/repro/`` and returns its markdown; this command writes that markdown into the
section ``NAME`` of ``DIR/REPRODUCTION.md`` with :func:`lab.repro.write_section`. ``DIR`` is
``docs/`` for full runs and ``out/`` (git-ignored) for ``--quick`` runs unless ``--out`` is given,
so a quick check never overwrites the published numbers.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.repro import DOCS, reproductions, write_section
from service.cli import plain_text


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reproduce",
        help="reproduce a paper's table into REPRODUCTION.md",
        description=plain_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", help="reproduction name (seed004-mnist, seed002-synthetic, ...)")
    p.add_argument("--quick", action="store_true", help="a few seconds: short streams, two seeds")
    p.add_argument("--out", type=Path, default=None, help="directory of REPRODUCTION.md and figures")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    fn = reproductions.get(args.name)
    out = args.out if args.out is not None else (DOCS.parent / "out" if args.quick else DOCS)
    out.mkdir(parents=True, exist_ok=True)
    markdown = fn(args.quick, out)
    target = out / "REPRODUCTION.md"
    write_section(args.name, markdown, target)
    print(markdown)
    print(f"\nwritten: section {args.name!r} of {target}")
    return 0
