"""``bench actions`` (issue 39): the catalog generator's promises, each system's pass over a stream,
and the ``--quick`` run's report (every part, the must-show lines)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from lab.bench import actions, benches
from lab.sim.catalog import CHURN_TUNING, TUNING, Catalog


def test_a_stream_is_its_seed() -> None:
    a, b, c = TUNING.stream(0, 200), TUNING.stream(0, 200), TUNING.stream(1, 200)
    assert np.array_equal(a.cands, b.cands) and np.array_equal(a.uniform, b.uniform)
    assert a.actions(5) == b.actions(5) and a.context(5) == b.context(5)
    assert not np.array_equal(a.cands, c.cands)
    # the evaluation variant is another world: other seeds and sizes
    assert TUNING.tuning and not actions.EVALUATION.tuning and actions.EVALUATION.seed0 != TUNING.seed0


def test_candidates_are_distinct_live_items_and_rewards_follow_the_click_model() -> None:
    s = CHURN_TUNING.stream(0, 2000)
    c = CHURN_TUNING
    assert s.n_items == c.live + 2000 // c.arrival
    for t in (0, 999, 1999):
        first = t // c.arrival
        assert len(set(s.cands[t].tolist())) == c.candidates
        assert (s.cands[t] >= first).all() and (s.cands[t] < first + c.live).all()  # only live items
    assert s.cands[-1].max() > c.live  # new items did arrive
    # common random numbers: a click iff U_t < P(click); over many rounds the rate is the mean P
    p = np.array([s.prob(t)[0] for t in range(s.rounds)])
    clicks = np.array([s.reward(t, 0) for t in range(s.rounds)])
    assert np.array_equal(clicks, s.uniform < p)
    assert abs(clicks.mean() - p.mean()) < 0.03
    # appearances count the rounds an item was a candidate in, its first one 1
    t, a = 1500, 3
    item = s.cands[t, a]
    assert s.appearance[t, a] == (s.cands[: t + 1] == item).sum()
    assert {int(s.appearance[t, a]) for t, a in zip(*np.nonzero(s.cands == item), strict=True)} == set(
        range(1, int((s.cands == item).sum()) + 1)
    )
    # what a model sees: named features of the user and of each item, its id among them
    assert set(s.context(0)) == {"u0", "u1", "u2", "u3", "segment"}
    assert s.actions(0)[0]["features"]["item"] == s.actions(0)[0]["id"]


def test_every_system_plays_a_stream() -> None:
    s = Catalog("small", True, 7, 300, n_users=30, live=20, arrival=10).stream(0)
    runs = {
        "ours": actions.run_ours("cova-adf", {}, s, 0),
        "label": actions.run_label("cova", {}, s, 0),
        "vw": actions.run_vw("--squarecb -q ua", s, 0),
    }
    for got in runs.values():
        assert 0.0 < got["reward"] < 1.0 and 0 < got["new_rounds"] <= s.rounds
    again = actions.run_ours("cova-adf", {}, s, 0)  # the seed decides every draw
    assert {k: again[k] for k in ("reward", "new_reward", "new_rounds")} == {
        k: runs["ours"][k] for k in ("reward", "new_reward", "new_rounds")
    }


@pytest.mark.slow
def test_quick_actions_bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_DIR", str(tmp_path))
    markdown = benches.get("actions")(True)
    assert (tmp_path / "bench" / "actions-runs.jsonl").is_file()  # the quick runs stored apart
    for name in ("synthetic", "churn"):
        assert re.search(rf"- {name}: ours at defaults \(\S+\) minus VW's best explorer", markdown)
    for system in ("squarecb-adf (ours, defaults)", "cova-adf (ours, defaults)", "label cova (fixed labels)"):
        assert f"first 100 appearances, {system}: " in markdown
    for explorer in actions.VW_EXPLORERS:
        assert f"| vw {explorer} (defaults) |" in markdown
    assert "| car (tuning) | 4 |" in markdown
    ratio = re.search(r"Ratio action / label pairs/s: \*\*([0-9.]+)\*\*", markdown)
    assert ratio is not None and float(ratio[1]) > 0.0
    # a second run reads what the first stored (the HTTP part is measured again)
    again = benches.get("actions")(True)
    assert (
        again.split("### Evaluation streams")[1].split("### Label")[0]
        == (markdown.split("### Evaluation streams")[1].split("### Label")[0])
    )
