"""``bench boosters`` (issue 20): its measuring loop runs every booster on car and MNIST rows and is
registered as a bench part (the full command, with its before-run in a git worktree, is documented,
not run here: it compiles the old commit's kernels)."""

from __future__ import annotations

import pytest

from lab.bench import benches, boosters


def test_every_booster_is_measured_on_both_data_sets() -> None:
    got = boosters.measure(budget=0.05, scale=0.02)
    assert set(got) == set(boosters.DATA)
    for runs in got.values():
        assert set(runs) == {label for label, _, _ in boosters.SYSTEMS}
        for r in runs.values():
            assert r["rows"] >= 8 and r["rate"] > 0.0 and 0.0 <= r["error"] <= 1.0
            if boosters.have_vw():  # VW around each run: the rate each ratio is to
                assert r["vw"] > 0.0
    assert got["car"]["banditboost N=100"]["params"]["n_learners"] == 100
    assert benches.get("boosters") is boosters.bench


def test_a_setting_the_measured_code_lacks_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # the before commit has no adaptive_grace: its rows show "–" instead of failing the run
    monkeypatch.setattr(
        boosters, "SYSTEMS", [("known", "adabandit", {}), ("unknown", "adabandit", {"no_such": 1})]
    )
    monkeypatch.setattr(boosters, "DATA", {"car": 200})
    got = boosters.measure(budget=0.05, scale=1.0)
    assert set(got["car"]) == {"known"}
