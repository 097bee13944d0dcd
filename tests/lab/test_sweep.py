"""The defaults sweep (issue 20, item 4): grids enumerate, runs are cached, the ranking and the
marked default come out of the runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import sweep
from lab.bench.quality import ALL_DATASETS


def test_tuning_sets_are_the_three_of_the_issue() -> None:
    # bench quality also runs these three; it must say their booster defaults were tuned on them
    assert set(sweep.TUNING) == {"car", "dna", "nursery"} and set(sweep.TUNING) <= set(ALL_DATASETS)


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
