"""The defaults sweep (issue 20, item 4): grids enumerate, runs are cached, the ranking and the
marked default come out of the runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import sweep
from lab.bench.quality import ALL_DATASETS
from lab.bench.vw import EXPLORERS


def test_tuning_sets_are_the_four_of_the_issues() -> None:
    # bench quality also runs these four (digits: issue 41's wide numeric set); it must say the
    # defaults were tuned on them
    assert set(sweep.TUNING) == {"car", "dna", "nursery", "digits"} and set(sweep.TUNING) <= set(ALL_DATASETS)


def test_a_small_sweep_ranks_settings_and_resumes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sweep, "ROUNDS", 150)
    monkeypatch.setattr(sweep, "SEEDS", (0,))
    monkeypatch.setattr(sweep, "GRIDS", {"banditron": {"gamma": [0.05, 0.3]}})
    assert sweep.settings("banditron") == [{"gamma": 0.05}, {"gamma": 0.3}]
    rows = sweep.sweep("banditron", tmp_path)
    assert [r[1] for r in rows] == sorted(r[1] for r in rows) and len(rows) == 2
    assert all(set(r[2]) == set(sweep.TUNING) for r in rows)
    again = sweep.sweep("banditron", tmp_path)  # from the cache: identical, CPU times included
    assert again == rows
    md = sweep.render({"banditron": rows}, {"banditron": {"gamma": 0.05, "tie_break": "random"}})
    assert md.count("**(default)**") == 1 and "`{'gamma': 0.3}`" in md
    # a default that is not the first setting is said under its table, with both errors
    second = rows[1][0]["gamma"]
    md = sweep.render({"banditron": rows}, {"banditron": {"gamma": second}})
    assert md.endswith(f"The default ranks 2: {rows[1][1]:.4f} against {rows[0][1]:.4f} for the first.")
    assert "The default ranks" not in sweep.render({"banditron": rows}, {"banditron": rows[0][0]})


def test_vw_is_swept_like_our_learners(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """VW's grid: every explorer of the race without and with `-q ::`, keyed by VW's version and the
    driver, its runs cached like ours; the race reads its best (bench quality's vw@sweep)."""
    assert sweep.vw_args({"explorer": "--bag 4", "interactions": "none"}) == "--bag 4"
    assert sweep.vw_args({"explorer": "--bag 4", "interactions": "-q ::"}) == "--bag 4 -q ::"
    assert {sweep.vw_args(p) for p in sweep.settings(sweep.VW)} >= set(EXPLORERS.values())
    assert sweep.run_version(sweep.VW).startswith("vowpalwabbit ") and sweep.VW_DRIVER in sweep.run_version(
        sweep.VW
    )
    monkeypatch.setattr(sweep, "ROUNDS", 300)
    monkeypatch.setattr(sweep, "SEEDS", (0,))
    monkeypatch.setattr(
        sweep, "GRIDS", {sweep.VW: {"explorer": ["--epsilon 0.05"], "interactions": ["none", "-q ::"]}}
    )
    rows = sweep.sweep(sweep.VW, tmp_path / "runs.jsonl")
    assert len(rows) == 2 and rows[0][1] <= rows[1][1]
    assert all(0.0 < r[1] < 1.0 for r in rows)
    assert sweep.sweep(sweep.VW, tmp_path / "runs.jsonl") == rows  # cached
    md = sweep.render({sweep.VW: rows}, {sweep.VW: sweep.VW_DEFAULT})
    assert md.count("**(default)**") == 1
