"""``clickboost warm``: compile the learners' kernels into numba's cache ahead of the first start.

A server compiles the kernels of its models' learners when it first needs them (about 20 s for the
default learner on a 2-core machine, from the cache in about a second afterwards) while it answers
``/healthz`` and ``/readyz`` says what it is doing. This command does it beforehand, for an image
build or an install step: every kernel by default, or those the named learners call at their
defaults.
"""

from __future__ import annotations

import argparse

import numba

from service import _jit_cache
from service.cli import CLIError, plain_text
from service.learners import learners


def run(args: argparse.Namespace) -> int:
    if args.learner:
        modules: dict[str, None] = {}
        for name in args.learner:
            try:
                modules.update(dict.fromkeys(learners.get(name).kernel_modules()))
            except KeyError as exc:
                raise CLIError(str(exc)) from None
    else:
        modules = dict.fromkeys(_jit_cache.module_names())
    seconds = _jit_cache.warm(modules, print)
    print(f"{len(modules)} kernel modules ready in {seconds:.1f} s, cached in {numba.config.CACHE_DIR}")
    return 0


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "warm",
        help="compile the learners' kernels into numba's cache (an image build, an install)",
        description=plain_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("learner", nargs="*", help="learner names (default: every bandit learner)")
    p.set_defaults(func=run)
