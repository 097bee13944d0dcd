"""The contract of the action-feature learners (issue 39), parametrised over the registry, and
oracles of their kernels: the rows against a dictionary implementation, the PA-I step and the inverse
gap weighting against their formulas (SquareCB-ADF's regression against VW itself:
tests/service/learners/test_squarecb_adf.py)."""

from __future__ import annotations

import numpy as np
import pytest

from service.actions import MAX_ROW_ENTRIES, ActionFeaturiser, ActionInput, action_rows, row_scores
from service.features import FeatureError, bucket
from service.interactions import _mix
from service.learners.base import Decision, Learner, learners, make_learner
from service.learners.cova_adf import pa1_step
from service.sampling import DecisionIds, decision_rng
from service.serial import checksum, decode, encode
from tests.service.learners.exact_draws import assert_honest, exact_draws

BITS = 10
ACTION_LEARNERS = sorted(name for name, cls in learners.items() if cls.actions)


class Catalog:
    """A small catalog stream: users and items with latent vectors; the context names the user and
    its segment, an item its category and brand; the reward is a click with probability
    ``sigmoid(3 u.v)``."""

    def __init__(self, seed: int, users: int = 8, items: int = 30, dim: int = 3) -> None:
        self.rng = np.random.default_rng(seed)
        self.u = self.rng.normal(size=(users, dim))
        self.v = self.rng.normal(size=(items, dim))
        self.featurise = ActionFeaturiser(BITS, 100, 50)

    def draw(self, n: int = 5) -> tuple[ActionInput, np.ndarray]:
        user = int(self.rng.integers(len(self.u)))
        items = self.rng.choice(len(self.v), size=n, replace=False)
        context = {"user": f"u{user}", "segment": f"s{user % 2}", "activity": float(user % 3)}
        actions = [
            {"id": f"i{i}", "features": {"category": f"c{i % 4}", "item": f"i{i}", "price": float(i % 5) / 4}}
            for i in items
        ]
        p = 1.0 / (1.0 + np.exp(-3.0 * self.v[items] @ self.u[user]))
        return self.featurise(context, actions), p


PAIRED = " with context pairs"


def new(name: str, seed: int = 0) -> Learner:
    """A learner of the registry at its defaults, or with ``context_pairs`` when ``name`` says so."""
    if name.endswith(PAIRED):
        return make_learner(name.removesuffix(PAIRED), 1 << BITS, 1, {"context_pairs": 16}, seed=seed)
    return make_learner(name, 1 << BITS, 1, seed=seed)


def run(m: Learner, seed: int, n: int, ids: DecisionIds) -> tuple[list[int], float]:
    cat = Catalog(seed)
    labels, reward = [], 0.0
    for _ in range(n):
        x, p = cat.draw()
        did = ids.new()
        d = m.decide(x, decision_rng(did))
        click = bool(cat.rng.random() < p[d.label])
        m.learn(x, d, click)
        labels.append(d.label)
        reward += p[d.label]
    return labels, reward / n


@pytest.fixture(params=ACTION_LEARNERS + [n + PAIRED for n in ACTION_LEARNERS])
def name(request: pytest.FixtureRequest) -> str:
    return request.param


def test_the_registry_has_the_action_learners() -> None:
    assert {"squarecb-adf", "cova-adf"} <= set(ACTION_LEARNERS)


def test_decide_is_a_distribution_over_the_candidates_and_changes_nothing(name: str) -> None:
    m = new(name, seed=1)
    run(m, 0, 60, DecisionIds.for_seed(0))
    before = checksum(m.state())
    cat = Catalog(5)
    for t in range(30):
        x, _ = cat.draw(n=1 + t % 7)
        d = m.decide(x, np.random.default_rng(t))
        assert d.probs.shape == (x.n,) and np.all(d.probs >= 0)
        assert d.probs.sum() == pytest.approx(1.0, abs=1e-12)
        assert 0 <= d.label < x.n and d.probs[d.label] > 0
    assert checksum(m.state()) == before


def test_same_seed_same_model_and_decisions(name: str) -> None:
    a, b = new(name, seed=3), new(name, seed=3)
    assert run(a, 2, 150, DecisionIds.for_seed(5))[0] == run(b, 2, 150, DecisionIds.for_seed(5))[0]
    assert encode(a.state()) == encode(b.state())
    assert a.t_ == 150


def test_save_load_mid_stream_equals_uninterrupted_run(name: str) -> None:
    whole = new(name, seed=4)
    ids = DecisionIds.for_seed(9)
    cat = Catalog(3)
    draws = [cat.draw() for _ in range(120)]
    clicks = cat.rng.random(120)

    def go(m: Learner, part: range) -> list[int]:
        out = []
        for t in part:
            x, p = draws[t]
            d = m.decide(x, decision_rng(f"d{t}"))
            m.learn(x, d, bool(clicks[t] < p[d.label]))
            out.append(d.label)
        return out

    labels = go(whole, range(120))
    part = new(name, seed=4)
    first = go(part, range(60))
    resumed = type(part).from_state(part.config(), decode(encode(part.state())))
    assert first + go(resumed, range(60, 120)) == labels
    assert encode(resumed.state()) == encode(whole.state())
    del ids


def test_a_decision_record_gives_back_the_input_and_the_same_update(name: str) -> None:
    """What the stores keep (the packed input, the decision's state) learns exactly as the live
    objects: two learners, one fed the live input and decision, the other their records."""
    a, b = new(name, seed=2), new(name, seed=2)
    cat = Catalog(4)
    for t in range(80):
        x, _p = cat.draw(n=2 + t % 5)
        d = a.decide(x, decision_rng(f"r{t}"))
        x2 = cat.featurise.unpack(cat.featurise.pack(x))
        d2 = Decision.from_state(decode(encode(d.to_state())))
        assert x2.ids == x.ids
        for got, want in zip(x2.rows(), x.rows(), strict=True):
            assert np.array_equal(got, want)
        assert np.array_equal(d2.probs, d.probs) and d2.label == d.label
        a.learn(x, d, t % 3 == 0)
        b.learn(x2, d2, t % 3 == 0)
    assert checksum(a.state()) == checksum(b.state())


def test_masked_decisions_stay_in_the_set(name: str) -> None:
    m = new(name, seed=1)
    run(m, 0, 100, DecisionIds.for_seed(1))
    cat = Catalog(6)
    for t in range(40):
        x, _ = cat.draw(n=6)
        mask = np.zeros(6, dtype=bool)
        mask[[t % 6, (t + 2) % 6, (t + 3) % 6]] = True
        d = m.decide(x, np.random.default_rng(t), mask)
        assert np.all(d.probs[~mask] == 0) and mask[d.label] and mask[d.memo["greedy"]]
        assert d.probs.sum() == pytest.approx(1.0, abs=1e-12)
        assert np.array_equal(d.memo["eligible"], mask)
        one = np.zeros(6, dtype=bool)
        one[t % 6] = True
        only = m.decide(x, np.random.default_rng(t), one)
        assert only.label == t % 6 and only.probs[t % 6] == 1.0
    # every candidate allowed is no mask: the same draw as without
    x, _ = cat.draw(n=4)
    assert m.decide(x, np.random.default_rng(0), np.ones(4, bool)).probs.tolist() == (
        m.decide(x, np.random.default_rng(0)).probs.tolist()
    )


def test_the_drawn_candidate_follows_the_distribution_exactly(name: str) -> None:
    """Exact enumeration of the sampling: over a grid of uniforms, the share of each candidate is its
    probability to within the grid's step (the label is the inverse CDF of one uniform)."""
    m = new(name, seed=1)
    run(m, 1, 200, DecisionIds.for_seed(2))
    x, _ = Catalog(8).draw(n=5)
    probs = m.decide(x, np.random.default_rng(0)).probs

    class Fixed:
        """A generator whose every uniform is ``u`` (the grid point)."""

        def __init__(self, u: float) -> None:
            self.u = u

        def random(self) -> float:
            return self.u

        def integers(self, n: int) -> int:
            return int(self.u * n)

    steps = 20_000
    counts = np.zeros(5)
    for i in range(steps):
        counts[m.decide(x, Fixed((i + 0.5) / steps)).label] += 1  # type: ignore[arg-type]
    assert np.abs(counts / steps - probs).max() <= 2.0 / steps + 1e-12


def test_reported_probabilities_are_the_exact_draw_distribution_ties_included(name: str) -> None:
    """A new model (every candidate scores 0: all tied), with an eligible set, and a trained one: the
    probabilities a decision reports are the exact distribution of its candidate over the decision's
    tie-break and sampling draw (:func:`exact_draws`), whichever way the tie was broken; tied
    candidates of a new model are equally likely (issue 50)."""
    fresh = new(name, seed=1)
    x, _ = Catalog(9).draw(n=4)
    mask = np.array([True, False, True, True])
    for eligible in (None, mask):
        found = exact_draws(lambda rng, e=eligible: fresh.decide(x, rng, e), 4)
        assert_honest(found)
        allowed = np.ones(4, bool) if eligible is None else eligible
        np.testing.assert_allclose(found.reported[0], allowed / allowed.sum(), rtol=0, atol=1e-12)
    trained = new(name, seed=1)
    run(trained, 1, 100, DecisionIds.for_seed(2))
    for eligible in (None, mask):
        assert_honest(exact_draws(lambda rng, e=eligible: trained.decide(x, rng, e), 4))


def test_it_learns_the_catalog_and_scores_new_items_from_their_features(name: str) -> None:
    m = new(name, seed=0)
    _, online = run(m, 11, 3000, DecisionIds.for_seed(3))
    cat = Catalog(11)
    _x, _p = cat.draw()
    random = float(np.mean([np.mean(1.0 / (1.0 + np.exp(-3.0 * cat.v @ u))) for u in cat.u]))
    assert online > random + 0.1, (online, random)


# -- oracles --------------------------------------------------------------------------------------


def test_rows_are_the_hashed_products_of_the_augmented_context_and_action() -> None:
    f = ActionFeaturiser(BITS, 100, 10)
    context = {"user": "u1", "age": 2.5}
    actions = [{"id": "a", "features": {"brand": "x", "price": 3.0}}, {"id": "b"}]
    x = f(context, actions)
    size = 1 << BITS
    c = {bucket("user=u1", BITS): 1.0}
    c[bucket("age", BITS)] = c.get(bucket("age", BITS), 0.0) + 2.5
    acts = [{bucket("brand=x", BITS): 1.0, bucket("price", BITS): 3.0}, {}]
    for block in (True, False):
        indptr, idx, val = x.rows(block)
        for a, feats in enumerate(acts):
            want: dict[int, float] = {}
            for i, cv in [(0, 1.0), *((b + 1, v) for b, v in sorted(c.items()))]:
                for j, av in [(0, 1.0), *((b + 1, v) for b, v in sorted(feats.items()))]:
                    if i > 0 and j == 0 and not block:
                        continue  # the context-only block, left out
                    col = int(_mix(np.uint64(i * (size + 1) + j))) % size
                    want[col] = want.get(col, 0.0) + cv * av
            lo, hi = indptr[a], indptr[a + 1]
            got = dict(zip(idx[lo:hi].tolist(), val[lo:hi].tolist(), strict=True))
            assert got == {k: v for k, v in want.items() if v != 0.0}
            alone = x.__class__(x.ids, x.context, x.a_ptr, x.a_idx, x.a_val, BITS).row(a, block)
            assert dict(zip(alone[0].tolist(), alone[1].tolist(), strict=True)) == got
    empty = action_rows(
        np.zeros(0, np.int64),
        np.zeros(0),
        np.array([0, 0]),
        np.zeros(0, np.int64),
        np.zeros(0),
        4,
        True,
        True,
    )
    assert empty[0].tolist() == [0, 1] and empty[2].tolist() == [1.0]  # the constant alone


def _mix64(z: int) -> int:
    """SplitMix64's finaliser in Python integers (the textbook constants), for the oracle."""
    z &= (1 << 64) - 1
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & ((1 << 64) - 1)
    return z ^ (z >> 31)


def test_context_pairs_are_the_hashed_products_of_context_pairs_and_action_entries() -> None:
    # Textbook construction in Python integers: for ids i < j of the context (bucket + 1) the pair id
    # q = mix(i (2**b + 1) + j) | 2**63, then c_i c_j a_k at mix(q (2**b + 1) + k) mod 2**b for every
    # action id k (0: the constant, with the context block), beside the rows without pairs.
    f = ActionFeaturiser(BITS, 100, 10)
    context = {"user": "u1", "age": 2.5, "city": "x", "n": -1.5}
    actions = [{"id": "a", "features": {"brand": "x", "price": 3.0}}, {"id": "b"}]
    x = f(context, actions)
    size, wrap = 1 << BITS, (1 << 64) - 1
    ctx = [(int(i) + 1, float(v)) for i, v in zip(x.context.idx, x.context.val, strict=True)]
    assert len(ctx) == 4
    for block in (True, False):
        base_ptr, base_idx, base_val = (a.copy() for a in x.rows(block))
        indptr, idx, val = x.rows(block, 4)
        assert x.pairs(4, block) and not x.pairs(3, block) and not x.pairs(0, block)
        for a in range(x.n):
            lo, hi = x.a_ptr[a], x.a_ptr[a + 1]
            feats = [(0, 1.0)] if block else []
            feats += [(int(k) + 1, float(v)) for k, v in zip(x.a_idx[lo:hi], x.a_val[lo:hi], strict=True)]
            want = dict(
                zip(
                    base_idx[base_ptr[a] : base_ptr[a + 1]].tolist(),
                    base_val[base_ptr[a] : base_ptr[a + 1]].tolist(),
                    strict=True,
                )
            )
            for p in range(len(ctx)):
                for q in range(p + 1, len(ctx)):
                    pair = _mix64(ctx[p][0] * (size + 1) + ctx[q][0]) | (1 << 63)
                    for k, av in feats:
                        col = _mix64((pair * (size + 1) + k) & wrap) % size
                        want[col] = want.get(col, 0.0) + ctx[p][1] * ctx[q][1] * av
            lo, hi = indptr[a], indptr[a + 1]
            got = dict(zip(idx[lo:hi].tolist(), val[lo:hi].tolist(), strict=True))
            assert got.keys() == {k for k, v in want.items() if v != 0.0}
            for k, v in got.items():
                assert v == pytest.approx(want[k], rel=1e-12, abs=1e-12)  # collisions add in another order
            alone = ActionInput(x.ids, x.context, x.a_ptr, x.a_idx, x.a_val, BITS).row(a, block, 4)
            assert dict(zip(alone[0].tolist(), alone[1].tolist(), strict=True)) == got
        # Without the bound (or under it) the rows are the plain ones, bit for bit.
        for got_, want_ in zip(x.rows(block, 3), (base_ptr, base_idx, base_val), strict=True):
            assert np.array_equal(got_, want_)


def test_context_pairs_stay_within_the_row_budget() -> None:
    # 60 context features make 1,770 pairs; with 12 candidates of 10 features they would pass
    # MAX_ROW_ENTRIES, so that request gets no pairs (decided on the whole request: a candidate's row
    # alone is built alike), while 2 such candidates get them; the learners' event_steps bound holds.
    f = ActionFeaturiser(BITS, 100, 20)
    context = {f"c{j}": float(j + 1) for j in range(60)}
    actions = [{"id": f"a{a}", "features": {f"g{j}": float(a + j + 1) for j in range(10)}} for a in range(12)]
    big = f(context, actions)
    small = f(context, actions[:2])
    assert not big.pairs(64) and small.pairs(64)
    assert big.rows(True, 64)[0][-1] == big.rows(True, 0)[0][-1]
    assert small.rows(True, 64)[0][-1] > 1770 * 10  # the pairs' products are in (few collide at b=10)
    for name in ACTION_LEARNERS:
        assert learners.get(name).event_steps(1 << BITS, 1, {"context_pairs": 64}) >= 2 * MAX_ROW_ENTRIES
    for x in (big, small):
        indptr, _, _ = x.rows(True, 64)
        assert indptr[-1] <= MAX_ROW_ENTRIES
        for name in ACTION_LEARNERS:
            m = make_learner(name, 1 << BITS, 1, {"context_pairs": 64}, seed=0)
            m.learn(x, m.decide(x, np.random.default_rng(0)), True)


@pytest.mark.parametrize("name", ACTION_LEARNERS)
def test_context_pairs_learn_a_reward_that_needs_both_context_features(name: str) -> None:
    # The best action is "yes" iff the two context features agree (XOR): no sum of (feature x action)
    # products ranks it, the pairs x action products do.
    rng = np.random.default_rng(0)
    f = ActionFeaturiser(BITS, 10, 10)
    actions = [{"id": "yes", "features": {"k": "yes"}}, {"id": "no", "features": {"k": "no"}}]
    ids = DecisionIds.for_seed(0)
    errors = {}
    for pairs in (0, 64):
        m = make_learner(name, 1 << BITS, 1, {"context_pairs": pairs}, seed=0)
        wrong = 0
        for t in range(3000):
            u, v = rng.integers(0, 2, size=2).tolist()
            x = f({"u": str(u), "v": str(v)}, actions)
            d = m.decide(x, decision_rng(ids.new()))
            best = 0 if u == v else 1
            m.learn(x, d, d.label == best)
            wrong += t >= 2000 and d.memo["greedy"] != best
        errors[pairs] = wrong / 1000
    assert errors[64] < 0.05 < 0.2 < errors[0], errors


def test_bad_actions_are_refused_naming_the_problem() -> None:
    f = ActionFeaturiser(BITS, 3, 4)
    ok = {"id": "a", "features": {"k": 1.0}}
    cases = [
        (None, "actions: this model scores candidate actions"),
        ([], "at least one candidate"),
        ([ok] * 5, "5 candidates, at most 4 allowed (CLICKBOOST_MAX_ACTIONS)"),
        ([ok, ok], "actions.1.id: 'a' is given twice"),
        ([{"id": ""}], "actions.0.id: a string of 1 to 256 characters"),
        ([{"id": "a", "features": [1.0]}], "actions.0.features: an object"),
        ([{"id": "a", "features": {"p": float("nan")}}], "actions.0.features.p"),
        ([{"id": "a", "features": {"p": 1, "q": 2, "r": 3, "s": 4}}], "actions.0.features: 4 named features"),
    ]
    for actions, words in cases:
        with pytest.raises(FeatureError, match=None) as info:
            f({"u": "1"}, actions)
        assert words in str(info.value), (words, str(info.value))
    with pytest.raises(FeatureError, match="named context features"):
        f([1.0, 2.0], [ok])


def test_the_conservative_step_is_pa1_on_the_shown_row_only() -> None:
    rng = np.random.default_rng(1)
    w, oracle = np.zeros(12), np.zeros(12)
    for _ in range(200):
        idx = np.unique(rng.integers(0, 12, 4))
        val = rng.normal(size=idx.size)
        y = 1.0 if rng.random() < 0.5 else -1.0
        before = w.copy()
        pa1_step(w, idx, val, y, 0.1)
        x = np.zeros(12)
        x[idx] = val
        loss = max(0.0, 1 - y * oracle @ x)
        oracle += min(0.1, loss / (x @ x)) * y * x if loss > 0 else 0.0
        untouched = np.setdiff1d(np.arange(12), idx)
        assert np.array_equal(w[untouched], before[untouched])
    np.testing.assert_allclose(w, oracle, rtol=1e-12, atol=1e-14)


def test_squarecb_adf_draws_by_inverse_gap_weighting() -> None:
    m = new("squarecb-adf")
    run(m, 2, 300, DecisionIds.for_seed(4))
    x, _ = Catalog(9).draw(n=6)
    indptr, idx, val = x.rows()
    # its rewards are minus the predicted costs (only their gaps matter), gamma_t with t the events learned
    r = -np.array([m.w_[idx[indptr[a] : indptr[a + 1]]] @ val[indptr[a] : indptr[a + 1]] for a in range(6)])
    gamma = m.params.gamma_scale * m.t_**m.params.gamma_exponent
    d = m.decide(x, np.random.default_rng(0))
    b = int(np.argmax(r))
    want = 1.0 / (6 + gamma * (r[b] - r))
    want[b] = 1.0 - (want.sum() - want[b])
    np.testing.assert_allclose(d.probs, want, rtol=1e-10)
    assert d.memo["greedy"] == b


def test_leaving_the_context_block_out_changes_no_ranking_of_learned_weights() -> None:
    # A cova-adf that learned with the context-only block (as models stored before `context_block`
    # existed) ranks every input alike without it: the block adds one shift to every candidate.
    m = make_learner("cova-adf", 1 << BITS, 1, {"context_block": True}, seed=0)
    run(m, 3, 300, DecisionIds.for_seed(3))
    cat = Catalog(4)
    for _ in range(50):
        x, _ = cat.draw()
        with_block = row_scores(m.w_, *x.rows(True))
        without = row_scores(m.w_, *x.rows(False))
        shift = with_block - without
        np.testing.assert_allclose(shift, shift[0], rtol=1e-9, atol=1e-9)
        assert np.argmax(with_block) == np.argmax(without)
