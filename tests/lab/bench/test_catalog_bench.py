"""``bench catalog`` (issue 54): the shop generator's promises and each system's pass over a small
stream."""

from __future__ import annotations

import numpy as np

from lab.bench import catalog as bench
from lab.sim.shop import EVALUATION, TUNING, Shop

SMALL = Shop("small", True, 7, visits=450, items=200, replace_every=100, replace=10, random=20, n_users=40)


def test_a_stream_is_its_seed_and_tuning_seeds_are_apart() -> None:
    a, b, c = SMALL.stream(0), SMALL.stream(0), SMALL.stream(1)
    assert np.array_equal(a.cands, b.cands) and np.array_equal(a.uniform, b.uniform)
    assert a.context(5) == b.context(5) and a.features(3) == b.features(3)
    assert not np.array_equal(a.cands, c.cands)
    assert TUNING.tuning and not EVALUATION.tuning and abs(EVALUATION.seed0 - TUNING.seed0) >= 100


def test_one_percent_is_replaced_and_candidates_are_live() -> None:
    s = SMALL.stream(0)
    live = set(s.initial.tolist())
    for t in range(s.visits):
        change = s.changes(t)
        assert (change is not None) == (t > 0 and t % SMALL.replace_every == 0)
        if change is not None:
            old, new = change
            assert len(old) == len(new) == SMALL.replace and set(old.tolist()) <= live
            assert (new >= SMALL.items).all() and not set(new.tolist()) & live
            live = (live - set(old.tolist())) | set(new.tolist())
        assert len(live) == SMALL.items
        assert len(set(s.cands[t].tolist())) == SMALL.random and set(s.cands[t].tolist()) <= live
    assert s.n_items == SMALL.items + 4 * SMALL.replace
    # common random numbers: a click iff U_t < P(click)
    t, item = 17, int(s.cands[17, 0])
    assert s.click(t, item) == bool(s.uniform[t] < s.prob(t, np.array([item]))[0])
    feats = s.features(item)
    assert set(feats) == {"v0", "v1", "v2", "v3", "category", "brand", "price", "rating"}
    assert set(s.context(0)) == {"u0", "u1", "u2", "u3", "segment", "device"}
    assert 1.0 <= feats["rating"] <= 5.0


def test_every_system_plays_a_stream_and_the_seed_decides() -> None:
    s = SMALL.stream(0)
    runs = {
        "catalog": bench.run_catalog(s, 0, {}),
        "random": bench.run_random(s, 0),
        "vw": bench.run_vw(s, 0),
        "oracle": bench.run_oracle(s),
    }
    for got in runs.values():
        assert 0.0 <= got["reward"] <= 1.0 and 0.0 < got["new_catalog_share"] < 1.0
    assert runs["oracle"]["reward"] >= max(r["reward"] for r in runs.values())
    again = bench.run_catalog(SMALL.stream(0), 0, {})
    assert {k: v for k, v in again.items() if k != "seconds"} == {
        k: v for k, v in runs["catalog"].items() if k != "seconds"
    }
