"""The command line's layout (issue 51, item 13): operational commands at the top, research ones
under ``clickboost lab``, the old top-level spellings kept for one release with a note, a mistyped
command answered with every command, and ``serve --help`` with its defaults. Real processes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from service.cli import main

OPERATIONAL = ("serve", "warm", "export", "evaluate")
RESEARCH = ("simulate", "bench", "reproduce", "sweep-defaults", "adaboost-mh", "ope-example")


def clickboost(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service", *args], capture_output=True, text=True, timeout=300, check=False
    )


def commands_listed(help_text: str) -> set[str]:
    """The command names of an argparse help's ``COMMAND`` section (indented 4, first word)."""
    return {
        line.split()[0]
        for line in help_text.splitlines()
        if line[:5].startswith("    ") and line[4:5].strip()
    }


def test_operational_commands_at_the_top_and_research_ones_under_lab() -> None:
    top = clickboost("--help")
    assert top.returncode == 0
    assert commands_listed(top.stdout) == {*OPERATIONAL, "lab"}, top.stdout
    lab = clickboost("lab", "--help")
    assert lab.returncode == 0
    assert commands_listed(lab.stdout) == set(RESEARCH), lab.stdout


def test_lab_simulate_runs_and_the_old_spelling_still_does_with_a_note() -> None:
    args = ("--learner", "banditron", "--dataset", "car", "--limit", "300", "--json")
    new = clickboost("lab", "simulate", *args)
    assert new.returncode == 0 and new.stderr == "", new.stderr
    old = clickboost("simulate", *args)
    assert old.returncode == 0, old.stderr
    assert "'clickboost simulate' is now 'clickboost lab simulate'" in old.stderr
    assert json.loads(old.stdout)["errors"] == json.loads(new.stdout)["errors"]


@pytest.mark.parametrize("args", [("simulat",), ("lab", "benchh"), ("serv", "--port", "1")])
def test_a_mistyped_command_lists_every_command(args: tuple[str, ...]) -> None:
    done = clickboost(*args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: no command"), done.stderr
    for name in OPERATIONAL:
        assert name in done.stderr
    for name in RESEARCH:
        assert f"lab {name}" in done.stderr
    assert "did you mean" in done.stderr


def test_serve_help_shows_the_defaults_of_host_and_port() -> None:
    done = clickboost("serve", "--help")
    assert done.returncode == 0
    assert "(default: 127.0.0.1)" in done.stdout and "(default: 8000)" in done.stdout, done.stdout


def test_in_process_spellings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "reproduce", "seed999", "--quick"]) == 2
    assert "unknown reproduction 'seed999'" in capsys.readouterr().err
    assert main(["nope"]) == 2
    assert "the commands: serve" in capsys.readouterr().err
