"""Following the README never dirties the checkout (issue 37): the lab's commands write under out/,
which git ignores, and into docs/ only when asked (``--write-docs``; ``bench`` and
``sweep-defaults``: tests/lab/bench/test_report_dirs.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lab import docs
from service.cli import main


def _tree(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``root``: its modification time and bytes."""
    return {str(p): (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()}


def test_by_default_the_commands_leave_docs_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for path in (docs.OUT_DOCS, docs.OUT_DOCS.parent):  # where they write unless told: ignored
        probe = path / "REPRODUCTION.md"
        assert subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=docs.DOCS.parent).returncode == 0
    out = tmp_path / "out" / "docs"
    monkeypatch.setattr(docs, "OUT_DOCS", out)  # the same default, in a temporary directory
    before = _tree(docs.DOCS)
    assert main(["ope-example", "--quick"]) == 0
    assert main(["reproduce", "seed002-synthetic", "--quick"]) == 0
    assert _tree(docs.DOCS) == before
    section = (out / "OFFLINE_EVALUATION.md").read_text()
    assert "<!-- BEGIN ope-example -->" in section and "| events | ESS |" in section
    assert (out / "ope" / "example.png").exists()
    assert "<!-- BEGIN seed002-synthetic -->" in (tmp_path / "out" / "REPRODUCTION.md").read_text()
    capsys.readouterr()
    for command in ("ope-example", "reproduce seed002-synthetic"):  # one place or the other
        with pytest.raises(SystemExit):
            main([*command.split(), "--out", str(tmp_path), "--write-docs"])
    assert "not allowed with argument" in capsys.readouterr().err
