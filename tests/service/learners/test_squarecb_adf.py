"""SquareCB over candidate actions on VW's regressor (issue 50): its costs and distributions against
Vowpal Wabbit's own ``--cb_adf`` / ``--cb_explore_adf --squarecb -q ua``, graded rewards learned as
values, a model stored under the old schema, and the same results whatever the features' units."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from service.actions import ActionFeaturiser, ActionInput
from service.config import DEFAULT_ACTION_LEARNER
from service.learners import make_learner
from service.learners.base import Learner, learners
from service.sampling import DecisionIds, decision_rng
from service.serial import decode, encode

BITS = 18
PRICES = (29.0, 49.0, 79.0, 119.0)


def _stream(seed: int, rounds: int) -> list[tuple[dict, list[dict], np.ndarray]]:
    """Rounds of a small shop: a context with raw numbers (an age in years, visits), 2 to 5
    candidates with a price in dollars, a rating and an id; the reward is graded (a click
    probability, linear in the products)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(rounds):
        context = {"age": float(rng.integers(18, 80)), "visits": float(rng.integers(0, 40)), "vip": 1.0}
        n = int(rng.integers(2, 6))
        items = rng.choice(12, size=n, replace=False)
        actions = [
            {
                "id": f"i{i}",
                "features": {"price": PRICES[i % 4], "rating": 1.0 + i % 5, "item": f"i{i}"},
            }
            for i in items
        ]
        cheap = np.array([a["features"]["price"] < 60 for a in actions])
        p = 0.2 + 0.5 * cheap * (context["age"] < 40) + 0.05 * (items % 3)
        out.append((context, actions, p))
    return out


def _vw_line(named: dict) -> str:
    return " ".join(f"{k}:{v:.17g}" if isinstance(v, float) else f"{k}={v}" for k, v in named.items())


def test_costs_and_distributions_are_vowpal_wabbits() -> None:
    """400 rounds of ours beside VW (the ``vowpalwabbit`` package at its defaults, ``-q ua``): before
    each learn every candidate's predicted cost agrees with ``vw --cb_adf``'s scores and the
    distribution with ``vw --cb_explore_adf --squarecb``'s pmf, to VW's float32 precision. The
    shown candidate is drawn from our distribution and both learn its graded cost. The first cost
    is 1, so VW's clipping range (the costs seen) is [0, 1] from the first step, as ours.

    VW's labels carry probability 1: ``--squarecb`` learns without importance weighting (its learn
    sets every label's probability to 1), except that vowpalwabbit 9.11.9's loop stops one line
    short (it counts the shared line) and keeps the probability of the last candidate's label;
    given 1, VW learns what its code says it means, which is what ours learns."""
    vowpalwabbit = pytest.importorskip("vowpalwabbit")
    scores_vw = vowpalwabbit.Workspace("--cb_adf -q ua --quiet")
    explore_vw = vowpalwabbit.Workspace("--cb_explore_adf --squarecb -q ua --quiet")
    f = ActionFeaturiser(BITS, 100, 10)
    m = make_learner("squarecb-adf", 1 << BITS, 1, {"gamma_scale": 10.0}, seed=0)  # VW's default
    ids = DecisionIds.for_seed(0)
    cost_err, pmf_err, costs = [], [], []
    for t, (context, actions, p) in enumerate(_stream(0, 400)):
        x = f(context, actions)
        lines = ["shared |u " + _vw_line(context)] + ["|a " + _vw_line(a["features"]) for a in actions]
        d = m.decide(x, decision_rng(ids.new()))
        ours = m.costs(x)
        cost_err.append(np.abs(ours - np.asarray(scores_vw.predict(lines))).max())
        pmf_err.append(np.abs(d.probs - np.asarray(explore_vw.predict(lines))).max())
        costs.append(ours)
        cost = 1.0 if t == 0 else 1.0 - float(p[d.label])
        labelled = list(lines)
        labelled[1 + d.label] = f"0:{cost:.17g}:1 {lines[1 + d.label]}"
        scores_vw.learn(labelled)
        explore_vw.learn(labelled)
        m.learn(x, d, 1.0 - cost)
    scores_vw.finish()
    explore_vw.finish()
    assert max(cost_err) < 2e-5 and max(pmf_err) < 2e-5, (max(cost_err), max(pmf_err))
    assert np.ptp(np.concatenate(costs[200:])) > 0.3  # it learned: the costs differ


def test_a_graded_reward_is_learned_as_its_value() -> None:
    """The learner takes the graded reward itself (no coin): a reward of 0.3 steps the shown
    candidate's cost towards 0.7, the same as the regression step on that value, and differently
    from both click bits."""
    f = ActionFeaturiser(8, 10, 10)
    x = f({"u": "a"}, [{"id": "x", "features": {"k": "1"}}, {"id": "y", "features": {"k": "2"}}])
    got = {}
    for reward in (0.3, 0.0, 1.0):
        m = make_learner("squarecb-adf", 256, 1, seed=0)
        assert type(m).graded
        d = m.decide(x, np.random.default_rng(0))
        m.learn(x, d, 0.0)  # a first cost of 1 so that the value is not the clip's edge
        m.learn(x, d, reward)
        got[reward] = m.costs(x)[d.label]
    assert got[1.0] < got[0.3] < got[0.0]


def test_a_model_stored_under_schema_1_keeps_its_predictions_as_costs() -> None:
    """Schema 1 regressed the reward: its state, read by this build, predicts the cost ``1 - r``
    for every candidate (no collision at the constant's column here) and learns on."""
    f = ActionFeaturiser(10, 10, 10)
    m = make_learner("squarecb-adf", 1 << 10, 1, seed=0)
    rng = np.random.default_rng(1)
    old = {k: v for k, v in m.state().items() if k != "counts_"}
    old["schema_version"] = 1
    old["w_"] = rng.normal(size=1 << 10) * 0.1
    old["g2_"] = rng.random(1 << 10)
    old["scale_"] = rng.random(1 << 10) + 0.5
    old["totals_"] = np.array([40.0, 10.0])
    x = f({"u": "a", "n": 3.0}, [{"id": str(i), "features": {"k": str(i), "p": float(i)}} for i in range(4)])
    indptr, idx, val = x.rows(True)
    spans = list(itertools.pairwise(indptr.tolist()))
    assert [idx[a:b].tolist().count(0) for a, b in spans] == [1] * x.n  # only the constant at column 0
    reward = np.array([old["w_"][idx[a:b]] @ val[a:b] for a, b in spans])
    loaded = type(m).from_state(m.config(), old)
    np.testing.assert_allclose(loaded.costs(x), 1.0 - reward, rtol=1e-12, atol=1e-12)
    loaded.learn(x, loaded.decide(x, np.random.default_rng(0)), 1.0)
    assert loaded.t_ == 1 and loaded.counts_.tolist() == [1.0, 4.0]


def _run(m: Learner, rounds: list, scales: dict[str, float], seed: int) -> float:
    """Mean graded reward of ``m`` over ``rounds``, every numeric feature named in ``scales``
    multiplied by its constant (string features and ids untouched)."""
    f = ActionFeaturiser(BITS, 100, 10)
    ids = DecisionIds.for_seed(seed)
    total = 0.0
    for context, actions, p in rounds:
        ctx = {k: v * scales.get(k, 1.0) if isinstance(v, float) else v for k, v in context.items()}
        acts = [
            {
                "id": a["id"],
                "features": {
                    k: v * scales.get(k, 1.0) if isinstance(v, float) else v for k, v in a["features"].items()
                },
            }
            for a in actions
        ]
        x: ActionInput = f(ctx, acts)
        d = m.decide(x, decision_rng(ids.new()))
        m.learn(x, d, float(p[d.label]))
        total += p[d.label]
    return total / len(rounds)


@pytest.mark.parametrize("scale_seed", range(4))
def test_the_action_default_learns_the_same_whatever_the_features_units(scale_seed: int) -> None:
    """Issue 50: each numeric feature of the context and of the actions multiplied by its own
    constant, drawn log-uniformly in [1e-3, 1e4] (four draws of scales, each on two streams), moves
    the served action default's mean reward by at most 0.5 points."""
    name, params = DEFAULT_ACTION_LEARNER
    draw = np.random.default_rng(100 + scale_seed)
    names = ("age", "visits", "vip", "price", "rating")
    scales = {k: float(10 ** draw.uniform(-3, 4)) for k in names}
    for stream_seed in (1, 2):
        rounds = _stream(stream_seed, 1500)
        plain = _run(make_learner(name, 1 << BITS, 1, params, seed=0), rounds, {}, stream_seed)
        scaled = _run(make_learner(name, 1 << BITS, 1, params, seed=0), rounds, scales, stream_seed)
        assert abs(scaled - plain) <= 0.005, (scales, plain, scaled)


def test_the_action_default_learns_graded_rewards_as_values() -> None:
    """Issue 50: the runtime hands a graded reward to a learner that declares ``graded`` as it is
    (``ModelRuntime._reward``), and draws no Bernoulli coin: the served action default does."""
    assert learners.get(DEFAULT_ACTION_LEARNER[0]).graded


def test_save_and_resume_is_the_uninterrupted_run() -> None:
    """The counts of the importance weight are state: a model saved and resumed halfway learns
    as one that ran through."""
    rounds = _stream(3, 200)
    f = ActionFeaturiser(BITS, 100, 10)
    whole = make_learner("squarecb-adf", 1 << BITS, 1, seed=0)
    part = make_learner("squarecb-adf", 1 << BITS, 1, seed=0)
    for t, (context, actions, p) in enumerate(rounds):
        if t == 100:
            part = type(part).from_state(part.config(), decode(encode(part.state())))
        x = f(context, actions)
        for m in (whole, part):
            d = m.decide(x, decision_rng(f"d{t}"))
            m.learn(x, d, float(p[d.label]))
    assert encode(whole.state()) == encode(part.state())
