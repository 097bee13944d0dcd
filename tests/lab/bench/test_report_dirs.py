"""Where bench parts write (issue 21, item 4; issue 37): ``$BENCH_DIR`` when set, else out/docs/ (docs/
only with ``--write-docs``); a ``--quick`` run without ``$BENCH_DIR`` goes to out/bench-quick/; git
ignores both, so no run rewrites the committed tables unless asked."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lab import docs
from lab.bench import report
from service.cli import main


def test_quick_runs_never_write_the_committed_tables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BENCH_DIR", str(tmp_path))
    assert report.out_dir() == tmp_path and report.out_dir(quick=True) == tmp_path
    monkeypatch.delenv("BENCH_DIR")
    assert report.out_dir() == docs.OUT_DOCS
    quick = report.out_dir(quick=True)
    assert quick == report.QUICK_DIR and docs.DOCS not in quick.parents
    for probe in (quick / "BENCHMARKS.md", docs.OUT_DOCS / "BENCHMARKS.md"):
        ignored = subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=docs.DOCS.parent, check=False)
        assert ignored.returncode == 0, f"{probe} is not ignored by git"
    report.write_docs()  # what `bench --write-docs` does first: every part then writes into docs/
    assert report.out_dir() == docs.DOCS and report.out_dir(quick=True) == docs.DOCS


def test_write_docs_and_bench_dir_are_one_or_the_other(capsys: pytest.CaptureFixture[str]) -> None:
    # $BENCH_DIR is set for every test (tests/conftest.py): --write-docs refuses before running
    for command in (["bench", "nope", "--write-docs"], ["sweep-defaults", "--write-docs"]):
        assert main(command) == 2
        assert "$BENCH_DIR names another directory" in capsys.readouterr().err
