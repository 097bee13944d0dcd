"""The page-layout stream (lab/sim/pages.py, issue 53): seeded, the sizes its docstring states,
tuning and evaluation seeds apart, a position effect that differs by category, duplicates earning
nothing, clicks from the common uniforms, graded rewards the click probabilities."""

from __future__ import annotations

import numpy as np
import pytest

from lab.sim.pages import EVALUATION, POSITIONS, TUNING, Pages

SMALL = Pages("small", False, 5, 300, n_users=30, n_items=60)


def test_a_stream_is_its_seed() -> None:
    a, b, c = SMALL.stream(0), SMALL.stream(0), SMALL.stream(1)
    assert np.array_equal(a.users, b.users) and np.array_equal(a.uniform, b.uniform)
    assert all(np.array_equal(x, y) for x, y in zip(a.cands, b.cands, strict=True))
    assert all(np.array_equal(a.prob(t), b.prob(t)) for t in range(20))
    assert not np.array_equal(a.users, c.users)


def test_tuning_and_evaluation_seeds_never_meet() -> None:
    tuning = {TUNING.seed0 + s for s in range(100)}
    evaluation = {EVALUATION.seed0 + s for s in range(100)}
    assert not tuning & evaluation and TUNING.tuning and not EVALUATION.tuning


def test_rounds_have_5_to_20_distinct_candidates_and_3_positioned_slots() -> None:
    stream = SMALL.stream(0)
    sizes = {c.size for c in stream.cands}
    assert min(sizes) == 5 and max(sizes) == 20
    assert all(np.unique(c).size == c.size for c in stream.cands)
    assert [s["features"]["position"] for s in stream.slots()] == list(POSITIONS)
    assert {"category", "item", "v0"} <= set(stream.actions(0)[0]["features"])
    assert {"segment", "u0"} <= set(stream.context(0))
    assert stream.prob(0).shape == (stream.cands[0].size, 3)


def test_the_position_effect_differs_by_category() -> None:
    stream = SMALL.stream(0)
    cats = stream._cat
    # the same item's logit differs between slots by B[c, s] - B[c, 0]: the differences vary by category
    shift = np.log(stream.prob(0) / (1 - stream.prob(0)))
    shift = shift - shift[:, :1]
    by_cat = {int(cats[i]): tuple(np.round(row, 9)) for i, row in zip(stream.cands[0], shift, strict=True)}
    assert len(set(by_cat.values())) == len(by_cat) > 1


def test_rewards_are_the_common_uniforms_and_duplicates_earn_nothing() -> None:
    stream = SMALL.stream(0)
    for t in range(50):
        p = stream.prob(t)
        got = stream.rewards(t, [0, 1, 2])
        assert got == [bool(stream.uniform[t, s] < p[a, s]) for s, a in enumerate([0, 1, 2])]
        assert stream.rewards(t, [3, 3, 4])[1] is False
    graded = Pages("graded", False, 5, 30, n_users=30, n_items=60, graded=True).stream(0)
    p = graded.prob(0)
    assert graded.rewards(0, [0, 0, 1]) == pytest.approx([p[0, 0], 0.0, p[1, 2]])
