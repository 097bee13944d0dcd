"""Entry point of ``python -m service``: one subcommand per module of :mod:`service.commands`.

Each command module registers a function ``add(subparsers)`` with :data:`commands`; the function
adds its parser and sets ``func`` (called with the parsed namespace, returns an exit code).
Expected failures (unknown learner, bad parameter, missing dataset, ...) raise :class:`CLIError`
or one of the library's validation errors and end as one line on stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from service.registry import Registry, UnknownNameError
from service.serial import StateFormatError

commands: Registry[Callable[[argparse._SubParsersAction], None]] = Registry("command", "service.commands")


class CLIError(Exception):
    """An expected command-line failure: printed as one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m service", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for _, add in commands.items():
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from service.learners.base import ParamError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (CLIError, ParamError, UnknownNameError, StateFormatError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
