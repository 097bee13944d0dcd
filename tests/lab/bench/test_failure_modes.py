"""``bench failure-modes`` (issue 51): it finds every scenario module, writes its section of
OPERATIONS.md (not BENCHMARKS.md), and the slow-body scenario measures a served client."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from lab import docs
from lab.bench import benches, failure_modes, report
from lab.bench.failure_modes import slow_bodies


def test_every_scenario_module_is_found_with_its_title_before_figure_and_run() -> None:
    found = failure_modes.scenarios()
    names = {m.__name__.rsplit(".", 1)[1] for m in found}
    on_disk = {p.stem for p in Path(failure_modes.__file__).parent.glob("*.py") if p.stem != "__init__"}
    assert names == on_disk and "slow_bodies" in names
    for module in found:
        assert module.TITLE and module.BEFORE and callable(module.run), module.__name__
    assert benches.get("failure-modes") is failure_modes.bench_failure_modes


def test_the_section_goes_to_operations_md_with_its_command_machine_and_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = SimpleNamespace(
        __name__="lab.bench.failure_modes.fake",
        TITLE="A fake scenario",
        BEFORE="per issue #51: everything broke",
        run=lambda quick: [("requests answered", "7 of 7"), ("quick", str(quick))],
    )
    monkeypatch.setattr(failure_modes, "scenarios", lambda: [fake])
    markdown = failure_modes.bench_failure_modes(True)
    path = report.write("failure-modes", markdown, tmp_path)
    assert path == tmp_path / "OPERATIONS.md" and not (tmp_path / "BENCHMARKS.md").exists()
    text = path.read_text()
    # the rest of the page is docs/OPERATIONS.md's, the section between its markers
    assert text.startswith((docs.DOCS / "OPERATIONS.md").read_text().split("\n", 1)[0])
    section = text[text.index("<!-- BEGIN failure-modes -->") : text.index("<!-- END failure-modes -->")]
    assert "## Failure modes" in section and "`python -m service lab bench failure-modes --quick`" in section
    assert "Machine: " in section and "### A fake scenario" in section
    assert "Before: per issue #51: everything broke." in section
    assert "| requests answered | 7 of 7 |" in section and "| quick | True |" in section
    again = report.write("failure-modes", markdown.replace("7 of 7", "8 of 8"), tmp_path).read_text()
    assert again.count("<!-- BEGIN failure-modes -->") == 1 and "8 of 8" in again and "7 of 7" not in again


@pytest.mark.slow
def test_the_slow_body_scenario_serves_every_fresh_predict() -> None:
    rows = dict(slow_bodies.run(quick=True))
    print("\n" + "\n".join(f"{k}: {v}" for k, v in rows.items()))
    answered, sent = rows["fresh predicts answered in 5 s"].split(" of ")
    assert answered == sent and int(sent.replace(",", "")) > 0
    assert float(rows["their p99 latency (a new connection each)"].split()[0]) < 100
