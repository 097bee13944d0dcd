"""``bench actions`` (issue 39): the catalog generator's promises, each system's pass over a stream,
and the ``--quick`` run's report (every part, the must-show lines)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from lab.bench import actions, benches
from lab.sim.catalog import (
    CHURN_GRADED_TUNING,
    CHURN_TUNING,
    EVALUATION,
    NONLINEAR_TUNING,
    PRICE_TUNING,
    PRICES,
    STREAMS,
    TUNING,
    Catalog,
)


def test_a_stream_is_its_seed() -> None:
    a, b, c = TUNING.stream(0, 200), TUNING.stream(0, 200), TUNING.stream(1, 200)
    assert np.array_equal(a.cands, b.cands) and np.array_equal(a.uniform, b.uniform)
    assert a.actions(5) == b.actions(5) and a.context(5) == b.context(5)
    assert not np.array_equal(a.cands, c.cands)
    # the evaluation variant is another world: other seeds and sizes
    assert TUNING.tuning and not EVALUATION.tuning and EVALUATION.seed0 != TUNING.seed0


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


def test_the_issue_50_streams_keep_their_promises() -> None:
    """Graded: the reward is the shown item's click probability. Prices: every item has a price in
    dollars from PRICES and every user a budget in dollars, and the price term moves the click
    probabilities. Dayparts: the round's daypart is in the context, and the evening's taste is the
    shifted one. The click streams are the streams they were (the new draws come after theirs)."""
    g = CHURN_GRADED_TUNING.stream(0, 300)
    assert all(g.reward(t, 2) == g.prob(t)[2] for t in range(300))
    assert all(isinstance(CHURN_TUNING.stream(0, 50).reward(t, 0), bool) for t in range(50))
    p = PRICE_TUNING.stream(0, 300)
    prices = {a["features"]["price"] for t in range(300) for a in p.actions(t)}
    assert prices <= set(PRICES) and len(prices) > 3
    budgets = [p.context(t)["budget"] for t in range(300)]
    assert min(budgets) > 0 and max(budgets) > 3000
    assert np.abs(p._price_term).max() > 1.0
    n = NONLINEAR_TUNING.stream(0, 400)
    assert {n.context(t)["daypart"] for t in range(400)} == {"day", "evening"}
    assert [n.context(t)["daypart"] == "evening" for t in range(400)] == n.evening.tolist()
    t = int(np.flatnonzero(n.evening)[0])
    u, v = n._u[n.users[t]], n._v[n.cands[t]]
    want = 1 / (1 + np.exp(-(-1.5 + n._q[n.cands[t]] + 1.5 * (np.roll(v, 1, axis=1) @ u) / 2.0)))
    np.testing.assert_allclose(n.prob(t), want, rtol=1e-12)
    old = Catalog("plain", True, 1000, 300, n_users=300, live=150).stream(0)
    assert np.array_equal(old.uniform, TUNING.stream(0, 300).uniform) and not old.evening.any()
    assert len({c.name for pair in STREAMS for c in pair}) == 2 * len(STREAMS)
    assert all(tune.tuning and not ev.tuning and tune.seed0 != ev.seed0 for tune, ev in STREAMS)


def test_graded_rewards_reach_each_learner_as_the_service_hands_them() -> None:
    """A learner that takes graded rewards gets the value; the others the decision id's Bernoulli
    bit (service.sampling.reward_bit), as the runtime does."""
    assert actions._learned(True, "d1", 0.3) == 0.3
    bits = [actions._learned(False, f"d{i}", 0.3) for i in range(2000)]
    assert all(isinstance(b, bool) for b in bits) and abs(np.mean(bits) - 0.3) < 0.04
    assert actions._learned(False, "d1", True) is True


@pytest.mark.slow
def test_quick_actions_bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_DIR", str(tmp_path))
    markdown = benches.get("actions")(True)
    assert (tmp_path / "bench" / "actions-runs.jsonl").is_file()  # the quick runs stored apart
    assert re.search(r"ahead of every one on every stream: \*\*(yes|NO)\*\*", markdown)
    for _, catalog in STREAMS:
        assert re.search(rf"\| {re.escape(catalog.name)} \| [+-][0-9.]+ ± ", markdown)
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
