"""``clickboost lab reproduce NAME [--quick] [--out DIR | --write-docs]``: run a paper reproduction.

A reproduction (registered in :data:`lab.repro.reproductions`) runs its protocol, writes its
figures under ``DIR/repro/`` and returns its markdown; this command writes that markdown into the
section ``NAME`` of ``DIR/REPRODUCTION.md`` with :func:`lab.repro.write_section`. ``DIR`` is
``out/docs/`` for full runs and ``out/`` for ``--quick`` runs (both git-ignored), ``docs/`` with
``--write-docs`` (to publish the numbers), or ``--out DIR``: following the README never rewrites
the published numbers.
"""

from __future__ import annotations

import argparse

from lab import docs
from lab.repro import reproductions, write_section
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
    docs.add_out_arguments(p, "REPRODUCTION.md and figures")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    fn = reproductions.get(args.name)
    out = docs.out_dir(args, quick_to_out=True)
    out.mkdir(parents=True, exist_ok=True)
    markdown = fn(args.quick, out)
    target = out / "REPRODUCTION.md"
    write_section(args.name, markdown, target)
    print(markdown)
    print(f"\nwritten: section {args.name!r} of {target}")
    return 0
