"""``reproduce NAME --quick`` into a temporary directory and ``bench learners --quick``."""

from __future__ import annotations

import pytest

from lab.repro import REPRODUCTION_MD
from service.cli import main
from service.learners.base import learners


@pytest.mark.parametrize("name", ["seed004-mnist", "seed002-synthetic"])
def test_quick_reproduction_writes_only_its_section(
    tmp_path, capsys: pytest.CaptureFixture[str], name
) -> None:
    docs_before = REPRODUCTION_MD.read_text() if REPRODUCTION_MD.exists() else None
    target = tmp_path / "REPRODUCTION.md"
    target.write_text("# Paper reproductions\n\n<!-- BEGIN other -->\nkept\n<!-- END other -->\n")
    assert main(["reproduce", name, "--quick", "--out", str(tmp_path)]) == 0
    text = target.read_text()
    assert "<!-- BEGIN other -->\nkept\n<!-- END other -->" in text
    assert f"<!-- BEGIN {name} -->" in text and "quick mode" in text
    section = text.split(f"<!-- BEGIN {name} -->")[1]
    assert "| paper" in section and "±" in section
    assert list((tmp_path / "repro").glob(f"{name}*.png")) and list((tmp_path / "repro").glob(f"{name}*.csv"))
    assert (REPRODUCTION_MD.read_text() if REPRODUCTION_MD.exists() else None) == docs_before
    if name == "seed002-synthetic":  # the cheaper one: a second run rewrites in place, never appends
        assert main(["reproduce", name, "--quick", "--out", str(tmp_path)]) == 0
        assert target.read_text().count(f"<!-- BEGIN {name} -->") == 1
    capsys.readouterr()


def test_unknown_reproduction_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "seed999", "--quick"]) == 2
    assert "unknown reproduction 'seed999'" in capsys.readouterr().err


def test_bench_learners_quick_lists_every_learner(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "learners", "--quick"]) == 0
    out = capsys.readouterr().out
    for name, cls in learners.items():
        if cls.actions:  # action-feature learners: bench actions
            continue
        assert f"| SYNSEP | {name}" in out and f"| car | {name}" in out
    assert "Vowpal Wabbit" in out
    assert main(["bench", "nope"]) == 2
