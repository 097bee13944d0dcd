"""The conditional contextual bandit reduction (service/learners/ccb_adf.py, issue 53) over every
action learner: one slot is the action learner bit for bit; exact enumeration of two- and
three-slot pages (every ordered choice with its probability from the reported conditionals: honest
draws, ties included, no item in two slots, per-slot IPS exactly unbiased); save/load; determinism;
fewer candidates than slots; page records."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from lab.sim.pages import Pages, PageStream
from service.actions import MAX_ROW_ENTRIES, ActionFeaturiser
from service.features import FeatureError
from service.learners.base import learner_from_state, learners, make_learner
from service.learners.ccb_adf import CCB, PageDecision
from service.sampling import DecisionIds, decision_rng
from service.serial import decode, encode
from service.slots import PageFeaturiser, PageInput, page_entries, slot_buckets
from tests.service.learners.exact_draws import assert_honest, exact_draws

BITS = 12
ACTION_LEARNERS = sorted(name for name, cls in learners.items() if cls.actions)
GRID = 500  # the sampling draw's grid: reported and exact within 1 / GRID (ties exactly)
SMALL = Pages("test", False, 100, 400, n_users=20, n_items=40, min_candidates=5, max_candidates=9)


@pytest.fixture(params=ACTION_LEARNERS)
def name(request: pytest.FixtureRequest) -> str:
    return request.param


def new(name: str, seed: int = 0) -> CCB:
    return CCB(make_learner(name, 1 << BITS, 1, seed=seed))


def pages(stream: PageStream, f: PageFeaturiser) -> list[PageInput]:
    return [f(stream.context(t), stream.actions(t), stream.slots()) for t in range(stream.rounds)]


def run(ccb: CCB, stream: PageStream, ids: DecisionIds, part: range | None = None) -> list[PageDecision]:
    f = PageFeaturiser(BITS, 100, 100)
    out = []
    for t in part if part is not None else range(stream.rounds):
        page = f(stream.context(t), stream.actions(t), stream.slots())
        d = ccb.decide(page, decision_rng(ids.new()))
        ccb.learn(page, d, stream.rewards(t, d.labels))
        out.append(d)
    return out


# -- one slot is today's action learner --------------------------------------------------------------


def test_one_slot_without_features_is_the_action_learner_bit_for_bit(name: str) -> None:
    """Same decisions, probabilities and state bytes as the action learner on the requests alone,
    with and without an eligible set, clicks and graded rewards."""
    stream = Pages("one slot", False, 7, 300, n_users=30, n_items=50, slots=1).stream(0)
    pf, af = PageFeaturiser(BITS, 100, 100), ActionFeaturiser(BITS, 100, 100)
    ccb, alone = new(name, seed=3), make_learner(name, 1 << BITS, 1, seed=3)
    for t in range(stream.rounds):
        page = pf(stream.context(t), stream.actions(t), [{"id": "only"}])
        x = af(stream.context(t), stream.actions(t))
        eligible = None
        if t % 3 == 0:
            eligible = np.arange(x.n) % 2 == 0
        got = ccb.decide(page, decision_rng(f"d{t}"), None if eligible is None else [eligible])
        want = alone.decide(x, decision_rng(f"d{t}"), eligible)
        assert got.labels == [want.label]
        assert got.slots[0].probs.tobytes() == want.probs.tobytes()
        graded = 0.25 if alone.graded else False
        reward: bool | float = bool(stream.rewards(t, [want.label])[0]) if t % 2 else graded
        ccb.learn(page, got, [reward])
        alone.learn(x, want, reward)
    assert encode(ccb.learner.state()) == encode(alone.state())


# -- exact enumeration ---------------------------------------------------------------------------------


def page_of(n_slots: int, seed: int = 0) -> PageInput:
    """A page of 5 candidates and ``n_slots`` slots with features."""
    stream = Pages("exact", False, 50 + seed, 1, n_users=5, n_items=12, slots=n_slots,
                   min_candidates=5, max_candidates=5).stream(0)  # fmt: skip
    return PageFeaturiser(BITS, 100, 100)(stream.context(0), stream.actions(0), stream.slots())


def trained(name: str, seed: int = 1) -> CCB:
    ccb = new(name, seed=seed)
    run(ccb, SMALL.stream(seed), DecisionIds.for_seed(seed))
    return ccb


def enumerate_pages(
    ccb: CCB, page: PageInput, eligible: list[np.ndarray | None] | None = None, check: bool = True
) -> list[tuple[tuple[int, ...], list[np.ndarray]]]:
    """Every ordered choice of the page's slots: its actions and the conditional distribution each
    slot reported given the earlier ones. With ``check``, each slot's reported distribution is the
    exact distribution of its draw (:func:`exact_draws`, tie-breaks included), sums to 1 and is 0 on
    the candidates earlier slots took and on those the slot does not allow."""
    n = page.n
    out = []

    def walk(prefix: tuple[int, ...], dists: list[np.ndarray]) -> None:
        s = len(prefix)
        if s == page.n_slots:
            out.append((prefix, dists))
            return
        taken = np.zeros(n, dtype=np.bool_)
        taken[list(prefix)] = True
        allowed = None if eligible is None else eligible[s]

        def decide(rng: object) -> object:
            return ccb.decide_slot(page, s, taken, rng, allowed)  # type: ignore[arg-type]

        if check:
            found = exact_draws(decide, n, GRID)  # type: ignore[arg-type]
            assert_honest(found, GRID)
            p = found.reported[0]
        else:
            p = ccb.decide_slot(page, s, taken, np.random.default_rng(0), allowed).probs
        assert p.sum() == pytest.approx(1.0, abs=1e-12)
        assert np.all(p[taken] == 0.0)
        if allowed is not None:
            assert np.all(p[~allowed] == 0.0)
        for a in np.flatnonzero(p > 0).tolist():
            walk((*prefix, a), [*dists, p])

    walk((), [])
    return out


@pytest.mark.parametrize("n_slots", [2, 3])
def test_exact_enumeration_of_a_page_is_honest_and_per_slot_ips_is_unbiased(name: str, n_slots: int) -> None:
    page = page_of(n_slots)
    rewards = np.random.default_rng(5).random((n_slots, page.n))  # r[s, a]: any reward per slot and item
    mask = np.array([True, True, False, True, True])
    cases = [
        (new(name, seed=1), None),  # a new model: every candidate tied
        (trained(name), None),
        (trained(name), [None, mask, *([None] * (n_slots - 2))]),  # slot 1 does not allow candidate 2
    ]
    target = trained(name, seed=2)  # another policy to evaluate from the first's log
    for ccb, eligible in cases:
        leaves = enumerate_pages(ccb, page, eligible)
        prob = np.array([np.prod([p[a] for a, p in zip(acts, ps, strict=True)]) for acts, ps in leaves])
        assert prob.sum() == pytest.approx(1.0, abs=1e-12)
        assert all(len(set(acts)) == n_slots for acts, _ in leaves)  # no item fills two slots
        # each ordered choice reached once, and the draws of decide() over a whole page agree
        assert len({acts for acts, _ in leaves}) == len(leaves)
        if eligible is None:
            assert len(leaves) == len(list(itertools.permutations(range(page.n), n_slots)))
        exact = dict(zip((acts for acts, _ in leaves), prob.tolist(), strict=True))
        d = ccb.decide(page, np.random.default_rng(9), eligible)
        assert exact[tuple(d.labels)] == pytest.approx(float(np.prod(d.probabilities)), rel=1e-12)

        # The target policy's conditionals along the logged prefixes (its own reported distributions,
        # with the same eligible sets).
        tgt: dict[tuple[int, ...], np.ndarray] = {}
        before: dict[tuple[int, ...], float] = {}  # P(prefix) under the logging policy
        for (acts, ps), _w in zip(leaves, prob, strict=True):
            for s in range(n_slots):
                key = acts[:s]
                if key not in tgt:
                    taken = np.zeros(page.n, dtype=np.bool_)
                    taken[list(key)] = True
                    allowed = None if eligible is None else eligible[s]
                    tgt[key] = target.decide_slot(page, s, taken, np.random.default_rng(0), allowed).probs
                    before[key] = float(np.prod([ps[j][acts[j]] for j in range(s)]))
        theirs = enumerate_pages(target, page, eligible, check=False)
        for s in range(n_slots):
            prefixes = [k for k in before if len(k) == s]
            assert sum(before[k] for k in prefixes) == pytest.approx(1.0, abs=1e-12)
            logged = {acts[:s]: ps[s] for acts, ps in leaves}  # slot s's distribution given each prefix
            # (1) each item's reward in slot s by IPS with the conditional probability is unbiased: the
            # sum over pages of P(page) 1[a_s = a] r[s, a] / p_s(a | prefix) is the sum over prefixes of
            # P(prefix) r[s, a] 1[a can fill slot s after the prefix]
            for a in range(page.n):
                ips = sum(
                    w * rewards[s, a] / ps[s][a]
                    for (acts, ps), w in zip(leaves, prob, strict=True)
                    if acts[s] == a
                )
                want = sum(before[k] * rewards[s, a] for k in prefixes if logged[k][a] > 0)
                assert ips == pytest.approx(want, rel=1e-12, abs=1e-15)
            # (2) the logging policy's own reward in slot s: the IPS estimate of the log is its value
            value = sum(w * rewards[s, acts[s]] for (acts, _), w in zip(leaves, prob, strict=True))
            ips_self = sum(
                w * rewards[s, acts[s]] * (ps[s][acts[s]] / ps[s][acts[s]])
                for (acts, ps), w in zip(leaves, prob, strict=True)
            )
            assert ips_self == pytest.approx(value, rel=1e-12)
            # (3) another policy's reward in slot s given the logged earlier slots, by per-slot IPS (the
            # slot's conditional ratio alone): E_prefix[sum_a pi_s(a | prefix) r[s, a]]
            ips_pi = sum(
                w * tgt[acts[:s]][acts[s]] / ps[s][acts[s]] * rewards[s, acts[s]]
                for (acts, ps), w in zip(leaves, prob, strict=True)
            )
            want_pi = sum(before[k] * float(tgt[k] @ rewards[s]) for k in prefixes)
            assert ips_pi == pytest.approx(want_pi, rel=1e-12)
            # (4) another policy's own slot-s reward (its own earlier slots), by the product of the
            # ratios over slots 1..s: its exact value, enumerated from its own tree
            exact_pi = sum(
                np.prod([p[a] for a, p in zip(acts, ps, strict=True)]) * rewards[s, acts[s]]
                for acts, ps in theirs
            )
            ips_chain = sum(
                w
                * np.prod([tgt[acts[:j]][acts[j]] / ps[j][acts[j]] for j in range(s + 1)])
                * rewards[s, acts[s]]
                for (acts, ps), w in zip(leaves, prob, strict=True)
            )
            assert ips_chain == pytest.approx(exact_pi, rel=1e-12)


# -- state, determinism, errors, records ------------------------------------------------------------


def test_save_load_mid_stream_equals_an_uninterrupted_run(name: str) -> None:
    stream = SMALL.stream(3, 200)
    whole = new(name, seed=4)
    labels = [d.labels for d in run(whole, stream, DecisionIds.for_seed(9))]
    part = new(name, seed=4)
    ids = DecisionIds.for_seed(9)
    first = [d.labels for d in run(part, stream, ids, range(100))]
    saved = part.learner
    resumed = CCB(learner_from_state(saved.config(), decode(encode(saved.state()))))
    rest = [d.labels for d in run(resumed, stream, ids, range(100, 200))]
    assert first + rest == labels
    assert encode(resumed.learner.state()) == encode(whole.learner.state())


def test_same_seeds_same_pages_and_model(name: str) -> None:
    stream = SMALL.stream(1, 150)
    a, b = new(name, seed=2), new(name, seed=2)
    da, db = run(a, stream, DecisionIds.for_seed(5)), run(b, stream, DecisionIds.for_seed(5))
    assert [d.labels for d in da] == [d.labels for d in db]
    assert all(
        x.probs.tobytes() == y.probs.tobytes()
        for p, q in zip(da, db, strict=True)
        for x, y in zip(p.slots, q.slots, strict=True)
    )
    assert encode(a.learner.state()) == encode(b.learner.state())
    assert a.learner.t_ == 150 * stream.n_slots  # one learn per slot
    other = run(new(name, seed=2), stream, DecisionIds.for_seed(6))
    assert [d.labels for d in other] != [d.labels for d in da]  # the page's draws come from its decision id


def test_no_item_fills_two_slots_and_taken_items_have_probability_zero(name: str) -> None:
    stream = SMALL.stream(2, 100)
    for d in run(new(name, seed=1), stream, DecisionIds.for_seed(2)):
        assert len(set(d.labels)) == len(d.labels) == 3
        for s, slot in enumerate(d.slots):
            assert np.all(slot.probs[d.labels[:s]] == 0.0)
            assert slot.probs.sum() == pytest.approx(1.0, abs=1e-12)


def test_fewer_candidates_than_slots_is_a_clear_error() -> None:
    f = PageFeaturiser(BITS, 100, 100)
    actions = [{"id": "a", "features": {"k": 1.0}}, {"id": "b"}]
    slots = [{"id": "hero"}, {"id": "tile"}, {"id": "footer"}]
    with pytest.raises(FeatureError, match="3 slots but 2 candidate actions"):
        f({"u": "x"}, actions, slots)
    page = PageInput(f({"u": "x"}, actions, slots[:2]).actions, [f.slot({})] * 3)  # built by hand
    ccb = new("squarecb-adf")
    with pytest.raises(FeatureError, match="3 slots but 2 candidate actions"):
        ccb.decide(page, np.random.default_rng(0))
    # enough candidates, but the eligible sets leave slot 1 none
    page = f({"u": "x"}, [*actions, {"id": "c"}], slots[:2])
    only_a = np.array([True, False, False])
    with pytest.raises(FeatureError, match=r"slots\.1: no candidate action left for slot 'tile'"):
        ccb.decide(page, np.random.default_rng(0), [only_a, only_a])
    with pytest.raises(FeatureError, match=r"slots\.1\.id: 'hero' is given twice"):
        f({"u": "x"}, [*actions, {"id": "c"}], [{"id": "hero"}, {"id": "hero"}])
    # a page's rows in all stay within one request's bound (distinct slot inputs counted once)
    context = {f"f{j}": f"v{j}" for j in range(30)}
    many = [{"id": f"a{a}", "features": {f"g{j}": f"w{j}" for j in range(40)}} for a in range(100)]
    one = f(context, many, [{"id": "s"}])
    assert page_entries(one.actions, one.slots) == 31 * 41 * 100 < MAX_ROW_ENTRIES
    same = f(context, many, [{"id": f"s{s}"} for s in range(10)])  # no slot features: one input
    assert page_entries(same.actions, same.slots) == 31 * 41 * 100
    with pytest.raises(FeatureError, match=r"slots: 3 slots over 100 candidates .* at most 200,000"):
        f(context, many, [{"id": p, "features": {"position": p}} for p in ("a", "b", "c")])


def test_slot_features_have_their_own_namespace_and_cross_the_actions() -> None:
    f = PageFeaturiser(BITS, 100, 100)
    actions = [{"id": "a", "features": {"category": "shoes"}}, {"id": "b", "features": {"category": "socks"}}]
    page = f({"position": "hero"}, actions, [{"id": "hero", "features": {"position": "hero"}}, {"id": "x"}])
    context = page.actions.context
    hero = page.slots[0]
    assert hero.nnz == 1 and hero.idx[0] not in context.idx.tolist()  # another bucket than the context's
    assert hero.idx.tolist() == slot_buckets(context.idx, BITS).tolist()  # the same feature, moved
    assert page.slot_input(1) is page.actions  # a slot without features: the page's own input
    with_slot, without = page.slot_input(0).rows(), page.actions.rows()
    for a in range(2):
        lo, hi = with_slot[0][a], with_slot[0][a + 1]
        got = set(with_slot[1][lo:hi].tolist())
        lo, hi = without[0][a], without[0][a + 1]
        # the slot adds its own column and one per action entry (slot x 1 and slot x category)
        assert set(without[1][lo:hi].tolist()) < got and len(got) - (hi - lo) == 2


def test_a_page_record_gives_back_the_page_and_the_same_update(name: str) -> None:
    """What a decision record would keep (the packed page, the page decision's state) learns exactly
    as the live objects."""
    stream = SMALL.stream(4, 60)
    f = PageFeaturiser(BITS, 100, 100)
    a, b = new(name, seed=2), new(name, seed=2)
    for t in range(stream.rounds):
        page = f(stream.context(t), stream.actions(t), stream.slots())
        d = a.decide(page, decision_rng(f"p{t}"))
        page2 = f.unpack(f.pack(page))
        d2 = PageDecision.from_state(decode(encode(d.to_state())))
        assert page2.ids == page.ids and page2.actions.ids == page.actions.ids
        for s in range(page.n_slots):
            for got, want in zip(page2.slot_input(s).rows(), page.slot_input(s).rows(), strict=True):
                assert np.array_equal(got, want)
        assert d2.labels == d.labels and d2.probabilities == d.probabilities
        rewards = stream.rewards(t, d.labels)
        a.learn(page, d, rewards)
        for s in range(page.n_slots):  # slot by slot, as feedbacks arrive
            b.learn_slot(page2, d2, s, rewards[s])
    assert encode(a.learner.state()) == encode(b.learner.state())


def test_a_label_learner_is_refused() -> None:
    with pytest.raises(ValueError, match="pages need an action learner"):
        CCB(make_learner("squarecb-sgd", 8, 3))


def test_it_learns_where_an_item_works(name: str) -> None:
    """On the tuning page stream the reduction earns more per page than a uniformly random page."""
    stream = Pages("learn", True, 21_000, 3000, n_users=100, n_items=60).stream(0)
    decisions = run(new(name), stream, DecisionIds.for_seed(0))
    late = range(2000, 3000)
    ours = np.mean([sum(stream.rewards(t, decisions[t].labels)) for t in late])
    expected_random = np.mean([stream.prob(t).mean(axis=0).sum() for t in late])
    assert ours > expected_random + 0.1, (ours, expected_random)
