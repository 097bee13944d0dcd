"""BENCHMARKS.md writer: per-part sections, a head listing the registered parts, the machine stamp."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from lab.bench import benches, report


def test_write_replaces_only_its_section_and_refreshes_the_head(tmp_path: Path) -> None:
    report.write("a", "first a", tmp_path)
    report.write("b", "only b", tmp_path)
    report.write("a", "second a", tmp_path)
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert text.startswith("# Benchmarks\n")
    assert text.count("# Benchmarks") == 1
    assert "<!-- BEGIN a -->\nsecond a\n<!-- END a -->" in text and "first a" not in text
    assert (
        text.index("BEGIN a") < text.index("BEGIN b") and "<!-- BEGIN b -->\nonly b\n<!-- END b -->" in text
    )
    for name in benches.names():
        assert f"`{name}`" in text.split("<!-- BEGIN")[0]
    for name in report.EXPECTED:
        assert (f"`{name}` (" in text) == (name not in benches.names())


def test_machine_names_cores_python_numpy_and_date() -> None:
    line = report.machine(["extra 1.0"])
    assert line.startswith("Machine: ") and " cores " in line
    assert f"Python {sys.version.split()[0]}" in line and f"numpy {np.__version__}" in line
    assert "extra 1.0" in line and line.endswith(" UTC.")


def test_table_aligns_text_left_and_numbers_right() -> None:
    assert report.table(["a", "b"], [["x", 1]]) == "| a | b |\n| --- | ---: |\n| x | 1 |"
