"""The ``clickboost`` command line (also ``python -m service``).

``serve`` is the service's own subcommand. The others (``simulate``, ``reproduce``, ``bench``,
``adaboost-mh``) belong to the lab and plug in through the entry-point group
``clickboost.commands`` (declared in pyproject.toml): each entry names a function
``add(subparsers)`` that adds the subcommand's parser and sets ``func`` (called with the parsed
namespace, returns an exit code). The service names no lab module; a subcommand's module is loaded
only when that subcommand runs or the top-level help lists them, and when the lab or one of its
extra's packages is missing the command says what to install in one line (exit code 2).

Expected failures (unknown learner, bad parameter, missing dataset, ...) raise :class:`CLIError`
or one of the library's validation errors and end as one line on stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points

from service.registry import UnknownNameError
from service.serial import StateFormatError

ENTRY_POINT_GROUP = "clickboost.commands"
LAB_INSTALL = "pip install -e '.[lab]' in a clickboost checkout (the lab is not in the server image)"
PROG = "clickboost"

AddCommand = Callable[[argparse._SubParsersAction], None]


class CLIError(Exception):
    """An expected command-line failure: printed as one line, exit code 2."""


_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")  # :mod:`x`, :class:`~a.b` -> x, a.b
_LITERAL = re.compile(r"``([^`]+)``")


def plain_text(doc: str | None) -> str:
    """A docstring as ``--help`` shows it: reStructuredText roles and literals as plain words."""
    text = _LITERAL.sub(r"\1", _ROLE.sub(r"\1", doc or ""))
    return re.sub(r"::$", ":", text, flags=re.M).strip()


def lab_commands() -> dict[str, EntryPoint]:
    """The plugged-in subcommands by name (empty when the distribution's metadata has none)."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _unavailable(name: str, reason: str) -> AddCommand:
    """A stand-in subcommand for one whose code cannot be imported: it says what to install."""

    def run(args: argparse.Namespace) -> int:
        raise CLIError(f"'{PROG} {name}' needs the lab ({reason}): {LAB_INSTALL}")

    def add(sub: argparse._SubParsersAction) -> None:
        # No option prefix: every argument, -h and --dataset included, is swallowed, so the one
        # line below is what the user sees (argparse's REMAINDER does not take leading options).
        p = sub.add_parser(name, help=f"(not installed: {LAB_INSTALL})", add_help=False, prefix_chars="\0")
        p.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
        p.set_defaults(func=run)

    return add


def _load(name: str, ep: EntryPoint) -> AddCommand:
    try:
        return ep.load()
    except ModuleNotFoundError as exc:
        return _unavailable(name, f"no module {exc.name!r}")


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser; of the lab's subcommands only the one named in ``argv`` is loaded (all for help)."""
    from service.commands import evaluate, serve, warm

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="clickboost: an online recommendation service that learns from clicks.",
        epilog=f"'{PROG} COMMAND --help' describes a command.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve.add(sub)
    evaluate.add(sub)
    warm.add(sub)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, ep in sorted(lab_commands().items()):
        if chosen is None or chosen == name:
            _load(name, ep)(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the subcommand, return its exit code."""
    from service.learners.base import ParamError

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (CLIError, ParamError, UnknownNameError, StateFormatError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # an optional package a lab command needs (plots, VW, ...)
        print(
            f"error: '{PROG} {args.command}' needs {exc.name!r}, which is not installed: "
            f"{LAB_INSTALL.replace('[lab]', '[lab,bench]')}",
            file=sys.stderr,
        )
        return 2
