"""Where bench parts write (issue 21, item 4): ``$BENCH_DIR`` when set, else docs/; a ``--quick`` run
without ``$BENCH_DIR`` goes to out/bench-quick/, which git ignores, never over the committed tables."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lab.bench import report


def test_quick_runs_never_write_the_committed_tables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BENCH_DIR", str(tmp_path))
    assert report.out_dir() == tmp_path and report.out_dir(quick=True) == tmp_path
    monkeypatch.delenv("BENCH_DIR")
    assert report.out_dir() == report.DOCS
    quick = report.out_dir(quick=True)
    assert quick == report.QUICK_DIR and report.DOCS not in quick.parents
    repo = report.DOCS.parent
    probe = quick / "BENCHMARKS.md"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=repo, check=False)
    assert ignored.returncode == 0, f"{probe} is not ignored by git"
