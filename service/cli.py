"""The ``clickboost`` command line (also ``python -m service``).

The operational commands are top-level: ``serve``, ``warm``, ``evaluate`` (the service's own) and
``export``; the research ones are under ``clickboost lab``: ``simulate``, ``bench``, ``reproduce``,
``sweep-defaults``, ``adaboost-mh``, ``ope-example`` (``clickboost lab bench learners``). Until the
next release a research command also answers at the top level as before (``clickboost bench ...``,
which docs and scripts still spell), with a note on stderr naming the new spelling.

Every command but the service's own plugs in through the entry-point group ``clickboost.commands``
(declared in pyproject.toml): each entry names a function ``add(subparsers)`` that adds the
subcommand's parser and sets ``func`` (called with the parsed namespace, returns an exit code); an
entry whose module is in the lab (``lab.``) is a research command. The service names no lab module;
a subcommand's module is loaded only when that subcommand runs or a help lists them, and when the
lab or one of its extra's packages is missing the command says what to install in one line (exit
code 2). A command that does not exist is answered with every command, in one line (exit code 2).

Expected failures (unknown learner, bad parameter, missing dataset, ...) raise :class:`CLIError`
or one of the library's validation errors and end as one line on stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points

from service.registry import UnknownNameError
from service.serial import StateFormatError

ENTRY_POINT_GROUP = "clickboost.commands"
LAB_INSTALL = "pip install -e '.[lab]' in a clickboost checkout (the lab is not in the server image)"
PROG = "clickboost"
#: The group of the research commands: ``clickboost lab simulate ...``.
LAB = "lab"
#: The service's own commands (service/commands/), always loaded.
OWN = ("serve", "evaluate", "warm")

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

    def add(sub: argparse._SubParsersAction) -> None:
        # No option prefix: every argument, -h and --dataset included, is swallowed, so the one
        # line below is what the user sees (argparse's REMAINDER does not take leading options).
        p = sub.add_parser(name, help=f"(not installed: {LAB_INSTALL})", add_help=False, prefix_chars="\0")
        p.add_argument("rest", nargs="*", help=argparse.SUPPRESS)

        def run(args: argparse.Namespace) -> int:  # p.prog: "clickboost lab simulate"
            raise CLIError(f"'{p.prog}' needs the lab ({reason}): {LAB_INSTALL}")

        p.set_defaults(func=run)

    return add


def _load(name: str, ep: EntryPoint) -> AddCommand:
    try:
        return ep.load()
    except ModuleNotFoundError as exc:
        return _unavailable(name, f"no module {exc.name!r}")


def _research(ep: EntryPoint) -> bool:
    """Whether a plugged-in command is the lab's (under ``clickboost lab``), not an operational one."""
    return ep.value.startswith(LAB + ".")


def _positionals(argv: Sequence[str]) -> list[str]:
    return [a for a in argv if not a.startswith("-")]


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser; of the plugged-in subcommands only the one named in ``argv`` is loaded (all for help)."""
    from service.commands import evaluate, serve, warm

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="clickboost: an online recommendation service that learns from clicks.",
        epilog=f"'{PROG} COMMAND --help' describes a command; '{PROG} {LAB} --help' lists the research ones.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve.add(sub)
    warm.add(sub)
    evaluate.add(sub)
    words = _positionals(argv)
    chosen = words[0] if words else None
    plugged = sorted(lab_commands().items())
    for name, ep in plugged:
        if not _research(ep) and chosen in (None, name):
            _load(name, ep)(sub)
    lab = sub.add_parser(
        LAB,
        help="research: the simulator, benchmarks and paper reproductions (needs the lab extra)",
        description="The research commands (the lab: lab/ in a clickboost checkout).",
        epilog=f"'{PROG} {LAB} COMMAND --help' describes a command.",
    )
    inner = lab.add_subparsers(dest="lab_command", required=True, metavar="COMMAND")
    wanted = words[1] if chosen == LAB and len(words) > 1 else None
    for name, ep in plugged:
        if _research(ep) and chosen in (None, LAB) and wanted in (None, name):
            _load(name, ep)(inner)
    return parser


def _commands() -> tuple[list[str], list[str]]:
    """The operational commands and the research ones (``lab NAME``), by name."""
    plugged = lab_commands()
    own = [*OWN, *sorted(n for n, ep in plugged.items() if not _research(ep))]
    return own, sorted(n for n, ep in plugged.items() if _research(ep))


def _spelled(argv: list[str]) -> list[str]:
    """``argv`` with an old top-level spelling of a research command moved under ``lab`` (a note on
    stderr); :class:`CLIError` listing every command for a command that does not exist."""
    own, research = _commands()
    words = _positionals(argv)
    if not words:
        return argv
    if words[0] in research:  # the spelling of the release before: one more release
        print(
            f"note: '{PROG} {words[0]}' is now '{PROG} {LAB} {words[0]}'; the old spelling goes in the "
            "next release",
            file=sys.stderr,
        )
        return [LAB, *argv]
    if words[0] == LAB:
        wrong = words[1] if len(words) > 1 and words[1] not in research else None
    else:
        wrong = words[0] if words[0] not in own else None
    if wrong is None:
        return argv
    every = [*own, *(f"{LAB} {n}" for n in research)]
    close = difflib.get_close_matches(wrong, [*own, *research], n=1)
    hint = ""
    if close:
        hint = f" (did you mean '{close[0] if close[0] in own else f'{LAB} {close[0]}'}'?)"
    raise CLIError(f"no command {wrong!r}{hint}; the commands: {', '.join(every)}")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the subcommand, return its exit code."""
    from service.learners.base import ParamError

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        argv = _spelled(argv)
    except CLIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
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
