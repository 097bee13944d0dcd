"""Where the lab's commands write their markdown and figures (issue 37).

The committed ``docs/`` changes only when asked: by default a command writes the same files under
``out/docs/``, which git ignores, so following the README never dirties the checkout; with
``--write-docs`` it writes into ``docs/``, to regenerate the published numbers. ``--out DIR``
(``reproduce``, ``ope-example``) and ``$BENCH_DIR`` (``bench``, ``sweep-defaults``) name any other
directory; ``--quick`` runs keep their own scratch directories under ``out/``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
#: The default: a git-ignored mirror of docs/.
OUT_DOCS = DOCS.parent / "out" / "docs"

WRITE_DOCS_HELP = "write into docs/ (the committed files) instead of out/docs/"


def add_out_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """``--out DIR`` or ``--write-docs`` (one of them), for a command that writes ``what``."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", type=Path, help=f"directory of {what} (default out/docs/)")
    where.add_argument("--write-docs", action="store_true", help=WRITE_DOCS_HELP)


def out_dir(args: argparse.Namespace, quick_to_out: bool = False) -> Path:
    """``--out DIR``, else docs/ with ``--write-docs``, else out/ for a ``--quick`` run when
    ``quick_to_out`` (where ``reproduce --quick`` always wrote), else out/docs/."""
    if args.out is not None:
        return args.out
    if args.write_docs:
        return DOCS
    return OUT_DOCS.parent if quick_to_out and args.quick else OUT_DOCS
