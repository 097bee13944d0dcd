"""The contract every registered learner keeps (DESIGN.md "The learner contract").

Parametrised over the registry, so a learner added in a new module is checked automatically.
"""

from __future__ import annotations

import numpy as np
import pytest

from service.learners.base import Decision, Learner, ParamError, learners, make_learner
from service.sampling import DecisionIds, decision_rng
from service.serial import StateFormatError, checksum, decode, encode
from tests.service.learners.exact_draws import Replay, assert_honest, exact_draws, exact_draws_given

D, K = 6, 3
NAMES = [name for name, cls in learners.items() if not cls.actions]  # actions: test_action_contract.py
#: contract cases: every registered learner at its defaults, and settings with code of their own
CASES: dict[str, tuple[str, dict | None]] = {name: (name, None) for name in NAMES} | {
    "cova+pairs": ("cova", {"interactions": "pairs"}),  # each pair its own column
    "cova+hashed-pairs": ("cova", {"interactions": "pairs", "interaction_bits": 2}),  # 15 pairs, 4 columns
    "adabandit+adaptive-grace": ("adabandit", {"adaptive_grace": True}),  # the trees' own wait schedule
    "squarecb-sgd+hashed": ("squarecb-sgd", {"bits": 4}),  # 22 features x 3 labels in 16 columns
    "squarecb-sgd+mtr": ("squarecb-sgd", {"weighting": "mtr", "interactions": "none"}),
    "squarecb-sgd+quadratic": ("squarecb-sgd", {"interactions": "quadratic"}),  # squares too
    "regcb-sgd+elimination": ("regcb-sgd", {"variant": "elimination", "mellowness": 0.1}),
    "regcb-sgd+hashed": ("regcb-sgd", {"bits": 4, "mellowness": 0.001}),
}


def new(case: str, d: int = D, k: int = K, params: dict | None = None, seed: int = 0) -> Learner:
    """The learner of contract case ``case`` (extra ``params`` on top of the case's)."""
    name, base = CASES[case]
    merged = None if base is None and params is None else {**(base or {}), **(params or {})}
    return make_learner(name, d, k, merged, seed=seed)


def stream(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """A small learnable stream: label = argmax of a fixed linear map, features in [0, 1]."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, D))
    y = np.argmax(X @ rng.normal(size=(D, K)), axis=1)
    return X, y


def step(m: Learner, x: np.ndarray, y: int, did: str) -> Decision:
    d = m.decide(x, decision_rng(did))
    if m.full_information:
        m.learn_full(x, d, y)
    else:
        m.learn(x, d, d.label == y)
    return d


def run(m: Learner, X: np.ndarray, y: np.ndarray, ids: DecisionIds) -> list[int]:
    return [step(m, X[t], int(y[t]), ids.new()).label for t in range(len(y))]


def roundtrip(m: Learner) -> Learner:
    """Save through the canonical byte encoding and load into a new object."""
    return type(m).from_state(m.config(), decode(encode(m.state())))


@pytest.fixture(params=list(CASES))
def name(request: pytest.FixtureRequest) -> str:
    return request.param


def test_registry_is_not_empty() -> None:
    assert {"banditron", "cova", "perceptron"} <= set(NAMES)


def test_decide_returns_a_distribution_and_does_not_change_the_model(name: str) -> None:
    m = new(name, seed=1)
    X, y = stream(0, 40)
    run(m, X[:20], y[:20], DecisionIds.for_seed(0))
    before = checksum(m.state())
    for t in range(20, 40):
        d = m.decide(X[t], np.random.default_rng(t))
        assert d.probs.shape == (K,)
        assert np.all(d.probs >= 0)
        assert d.probs.sum() == pytest.approx(1.0, abs=1e-12)
        assert 0 <= d.label < K
        assert d.probs[d.label] > 0
    assert checksum(m.state()) == before


def test_learn_counts_events(name: str) -> None:
    m = new(name, seed=1)
    X, y = stream(1, 25)
    run(m, X, y, DecisionIds.for_seed(1))
    assert m.t_ == 25


def test_same_seed_same_model(name: str) -> None:
    X, y = stream(2, 80)
    a, b = new(name, seed=3), new(name, seed=3)
    assert run(a, X, y, DecisionIds.for_seed(5)) == run(b, X, y, DecisionIds.for_seed(5))
    assert encode(a.state()) == encode(b.state())


def test_save_load_mid_stream_equals_uninterrupted_run(name: str) -> None:
    X, y = stream(3, 120)
    whole = new(name, seed=4)
    ids_whole = DecisionIds.for_seed(9)
    labels_whole = run(whole, X, y, ids_whole)

    part = new(name, seed=4)
    ids_part = DecisionIds.for_seed(9)
    labels = run(part, X[:60], y[:60], ids_part)
    resumed = roundtrip(part)
    labels += run(resumed, X[60:], y[60:], ids_part)

    assert labels == labels_whole
    assert encode(resumed.state()) == encode(whole.state())


def test_decision_survives_serialisation_and_learns_identically(name: str) -> None:
    X, y = stream(4, 30)
    a, b = new(name, seed=2), new(name, seed=2)
    ids = DecisionIds.for_seed(0)
    for t in range(30):
        did = ids.new()
        d = a.decide(X[t], decision_rng(did))
        d2 = Decision.from_state(decode(encode(d.to_state())))
        assert d2.label == d.label
        np.testing.assert_array_equal(d2.probs, d.probs)
        if a.full_information:
            a.learn_full(X[t], d, int(y[t]))
            b.learn_full(X[t], d2, int(y[t]))
        else:
            a.learn(X[t], d, d.label == y[t])
            b.learn(X[t], d2, d.label == y[t])
    assert encode(a.state()) == encode(b.state())


def test_zero_and_extreme_features_keep_the_state_finite(name: str) -> None:
    m = new(name, seed=0)
    rows = [np.zeros(D), np.full(D, 1e3), np.full(D, -1e3), np.eye(D)[0]]
    for i, x in enumerate(rows * 5):
        step(m, x, i % K, f"id-{i}")
    for key, value in m.state().items():
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            assert np.all(np.isfinite(value)), key


def test_config_rebuilds_an_equal_untrained_learner(name: str) -> None:
    m = new(name, seed=7)
    cfg = m.config()
    again = make_learner(cfg["learner"], cfg["n_features"], cfg["n_labels"], cfg["params"], seed=cfg["seed"])
    assert encode(again.state()) == encode(m.state())


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"n_features": 0}, "n_features"),
        ({"n_labels": 1}, "n_labels"),
        ({"params": {"no_such_parameter": 1}}, "no_such_parameter"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_configuration_is_refused_with_a_clear_message(name: str, kwargs: dict, needle: str) -> None:
    args = {"n_features": D, "n_labels": K, "params": None, "seed": 0} | kwargs
    with pytest.raises(ParamError, match=needle):
        new(name, args["n_features"], args["n_labels"], args["params"], seed=args["seed"])


def test_corrupt_state_is_refused(name: str) -> None:
    m = new(name, seed=0)
    X, y = stream(5, 20)
    run(m, X, y, DecisionIds.for_seed(0))
    state = m.state()
    key, arr = next((k, v) for k, v in state.items() if isinstance(v, np.ndarray) and v.dtype.kind == "f")
    bad_values = [
        {**state, key: np.full_like(arr, np.nan)},  # NaN
        {k: v for k, v in state.items() if k != key},  # missing key
        {**state, "not_a_key_": 1.0},  # unexpected key
        {**state, "schema_version": 999},  # future schema
    ]
    fixed = [k for k, v in state.items() if isinstance(v, np.ndarray) and k not in type(m)._growable]
    if fixed:
        bad_values.append({**state, fixed[0]: np.zeros(state[fixed[0]].size + 1)})  # wrong shape
    for bad in bad_values:
        with pytest.raises((StateFormatError, ParamError)):
            type(m).from_state(m.config(), bad)


# -- state size from the spec, before allocating (issue 18: bounded memory) ----------------------

SIZES = [(1, 2), (6, 3), (37, 11), (1024, 4)]
VARIANTS = [(name, None) for name in NAMES] + [
    ("cova", {"base": "naive_bayes"}),
    ("cova", {"base": "perceptron"}),
    ("cova", {"interactions": "pairs"}),
    ("cova", {"interactions": "pairs", "interaction_bits": 3}),
    ("banditboost", {"weak": "naive_bayes", "n_learners": 7}),
    ("banditboost", {"store": "lazy", "n_learners": 7}),
    ("banditboost", {"store": "lazy", "n_learners": 3, "max_store_bytes": 4 * 1024 + 8 * 4 * 3 * 100}),
    ("adabandit", {"n_learners": 3}),
    ("adaboost-mh", {"max_log": 40, "iterations": 4, "retrain_every": 15}),
]


@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=[f"{n}-{p}" for n, p in VARIANTS])
def test_state_nbytes_is_what_a_new_learner_allocates(name: str, params: dict | None) -> None:
    cls = learners.get(name)
    for d, k in SIZES:
        grown = cls.growth_nbytes(d, k, params)
        assert cls.state_nbytes(d, k, params) - grown == make_learner(name, d, k, params).nbytes(), (d, k)


@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=[f"{n}-{p}" for n, p in VARIANTS])
def test_bounded_growth_stays_within_the_estimate(name: str, params: dict | None) -> None:
    cls = learners.get(name)
    m = make_learner(name, D, K, params)
    X, y = stream(5, 300)
    run(m, X, y, DecisionIds.for_seed(5))
    if cls.growth_nbytes(D, K, params) or m.nbytes() == make_learner(name, D, K, params).nbytes():
        assert m.nbytes() <= cls.state_nbytes(D, K, params)


def test_state_nbytes_of_a_huge_spec_allocates_nothing() -> None:
    import tracemalloc

    tracemalloc.start()
    try:
        size = learners.get("banditron").state_nbytes(1_000_000, 10_000, None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert size == 8 * 10**10 + 48 and peak < 10 * 2**20  # W (K x d float64) and the rng state


# -- eligible labels (issue 38): every bandit learner decides within the set it is given -----------

BANDIT = [case for case, (name, _) in CASES.items() if not learners.get(name).full_information]
KM = 5  # labels of the masked cases: room for sets of every size


def masks(seed: int, n: int, k: int = KM) -> list[np.ndarray]:
    """Random non-empty subsets of the k labels, one in three of a single label's size or all but one."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        m = rng.random(k) < rng.uniform(0.2, 0.9)
        m[rng.integers(k)] = True
        out.append(m)
    return out


def masked_stream(seed: int, n: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    X = rng.random((n, D))
    y = np.argmax(X @ rng.normal(size=(D, KM)), axis=1)
    return X, y, masks(seed + 1, n)


def run_masked(
    m: Learner, X: np.ndarray, y: np.ndarray, sets: list[np.ndarray], ids: DecisionIds
) -> list[int]:
    labels = []
    for t in range(len(y)):
        d = m.decide(X[t], decision_rng(ids.new()), sets[t])
        m.learn(X[t], d, d.label == y[t])
        labels.append(d.label)
    return labels


@pytest.mark.parametrize("case", BANDIT)
def test_masked_decisions_stay_in_the_set_and_do_not_change_the_model(case: str) -> None:
    m = new(case, k=KM, seed=1)
    X, y, sets = masked_stream(0, 200)
    ids = DecisionIds.for_seed(3)
    for t in range(200):
        before = checksum(m.state()) if t % 50 == 0 else None
        d = m.decide(X[t], decision_rng(ids.new()), sets[t])
        if before is not None:
            assert checksum(m.state()) == before
        assert not d.probs[~sets[t]].any()
        assert d.probs[sets[t]].sum() == pytest.approx(1.0, abs=1e-12)
        assert sets[t][d.label] and d.probs[d.label] > 0
        if not sets[t].all():  # a full set is no mask (test_a_full_mask_is_no_mask)
            assert d.memo["eligible"].tolist() == sets[t].tolist()
        m.learn(X[t], d, d.label == y[t])


@pytest.mark.parametrize("case", BANDIT)
def test_masked_runs_are_deterministic_and_resume_from_saved_state(case: str) -> None:
    X, y, sets = masked_stream(1, 120)
    whole = new(case, k=KM, seed=4)
    labels_whole = run_masked(whole, X, y, sets, DecisionIds.for_seed(9))
    part = new(case, k=KM, seed=4)
    ids = DecisionIds.for_seed(9)
    labels = run_masked(part, X[:60], y[:60], sets[:60], ids)
    resumed = roundtrip(part)
    labels += run_masked(resumed, X[60:], y[60:], sets[60:], ids)
    assert labels == labels_whole
    assert encode(resumed.state()) == encode(whole.state())


@pytest.mark.parametrize("case", BANDIT)
def test_masked_decision_survives_serialisation_and_learns_identically(case: str) -> None:
    X, y, sets = masked_stream(2, 40)
    a, b = new(case, k=KM, seed=2), new(case, k=KM, seed=2)
    ids = DecisionIds.for_seed(0)
    for t in range(40):
        d = a.decide(X[t], decision_rng(ids.new()), sets[t])
        d2 = Decision.from_state(decode(encode(d.to_state())))
        np.testing.assert_array_equal(d2.memo.get("eligible", np.ones(KM, dtype=bool)), sets[t])
        a.learn(X[t], d, d.label == y[t])
        b.learn(X[t], d2, d.label == y[t])
    assert encode(a.state()) == encode(b.state())


@pytest.mark.parametrize("case", BANDIT)
def test_a_full_mask_is_no_mask(case: str) -> None:
    """Every label eligible takes the unmasked path: the same draws and models as without a mask."""
    X, y = stream(6, 60)
    a, b = new(case, seed=5), new(case, seed=5)
    ia, ib = DecisionIds.for_seed(2), DecisionIds.for_seed(2)
    for t in range(60):
        da = a.decide(X[t], decision_rng(ia.new()))
        db = b.decide(X[t], decision_rng(ib.new()), np.ones(K, dtype=bool))
        assert da.label == db.label and da.probs.tobytes() == db.probs.tobytes()
        a.learn(X[t], da, da.label == y[t])
        b.learn(X[t], db, db.label == y[t])
    assert encode(a.state()) == encode(b.state())


@pytest.mark.parametrize("bad", [np.zeros(K, dtype=bool), np.ones(K + 1, dtype=bool), np.ones(K)])
def test_a_bad_mask_is_refused(bad: np.ndarray) -> None:
    with pytest.raises(ValueError, match="eligible"):
        new("banditron").decide(np.ones(D), np.random.default_rng(0), bad)


def _enumerate(m: Learner, x: np.ndarray, d: Decision, y: int, measure) -> np.ndarray:
    """E over the sampled label ``l ~ d.conditional`` (the eligible ones; the distribution given the
    decision's tie-break, which ``d.probs`` averages over) of ``measure(learner after learning
    (x, l, 1[l = y]), l)``, by exact enumeration on copies of ``m``."""
    total = None
    q = d.conditional
    for label in np.flatnonzero(q):
        trial = roundtrip(m)
        decision = Decision(d.probs, int(label), dict(d.memo))
        trial.learn(x, decision, bool(label == y))
        value = q[label] * np.asarray(measure(trial, decision), dtype=np.float64)
        total = value if total is None else total + value
    assert total is not None
    return total


@pytest.mark.parametrize("seed", range(30))
def test_masked_estimates_are_unbiased_by_enumeration(seed: int) -> None:
    """Each bandit learner's importance-weighted estimate, over a masked decision's eligible labels,
    averages to its full-information value for every true label in the set (exact enumeration
    with the real learners and their real masked decisions)."""
    from service.learners.banditboost import hinge_subgradient, osboost_weights
    from service.learners.booster_costs import loss_estimate

    rng = np.random.default_rng(seed)
    mask = masks(seed, 1)[0]
    x = rng.random(D)
    y = int(rng.choice(np.flatnonzero(mask)))
    e_y = np.eye(KM)[y]

    # Banditron: E U~ is the Perceptron update towards y (seed 002, Lemma 4)
    m = new("banditron", k=KM, params={"gamma": 0.3})
    m.W_ = rng.normal(size=m.W_.shape)
    d = m.decide(x, np.random.default_rng(seed), mask)
    perceptron = np.outer(e_y - np.eye(KM)[d.memo["greedy"]], x)
    np.testing.assert_allclose(_enumerate(m, x, d, y, lambda t, _: t.W_ - m.W_), perceptron, atol=1e-12)

    # BanditBoost: E of the weak learners' weights w / p and of the hinge estimate l (seed 000 eqs. 2-5)
    m = new("banditboost", k=KM, params={"n_learners": 4, "delta": 0.3})
    d = m.decide(x, np.random.default_rng(seed), mask)
    h, f = m.weak_.votes(x, m.alpha_)
    g, theta = m.params.gamma, m.params.gamma / (2 + m.params.gamma)
    w_est, l_est = np.zeros((4, KM)), np.zeros((4, KM))
    for k in np.flatnonzero(d.probs):
        yk = 1.0 if k == y else -1.0
        w_est[:, k] += osboost_weights(h[:, k], yk, g)  # p(k) w / p(k)
        l_est[:, k] += hinge_subgradient(h[:, k], yk, f[k], theta)
    for k in np.flatnonzero(mask):  # full information: every eligible class with its true binary label
        yk = 1.0 if k == y else -1.0
        np.testing.assert_allclose(w_est[:, k], osboost_weights(h[:, k], yk, g), atol=1e-12)
        np.testing.assert_allclose(l_est[:, k], hinge_subgradient(h[:, k], yk, f[k], theta), atol=1e-12)

    # AdaBandit and BanditBBM: estimator (4) at the masked decision's probabilities and greedy label
    for name in ("adabandit", "banditbbm"):
        m = new(name, k=KM, params={"n_learners": 3, "rho": 0.3})
        d = m.decide(x, np.random.default_rng(seed), mask)
        mean = sum(
            d.conditional[a] * loss_estimate(d.conditional, a, d.memo["greedy"], a == y)
            for a in np.flatnonzero(d.conditional)
        )
        np.testing.assert_allclose(mean, 1.0 - e_y, atol=1e-12)

    # AdaBoost.MH: E of the logged weight row is the share-point weights on the eligible entries
    m = new("adaboost-mh", k=KM, params={"epsilon": 0.3, "retrain_every": 10**6})
    d = m.decide(x, np.random.default_rng(seed), mask)
    share = np.where(mask, np.where(np.arange(KM) == y, 0.5, 0.5 / (KM - 1)), 0.0)
    np.testing.assert_allclose(_enumerate(m, x, d, y, lambda t, _: t.W_log_[0]), share, atol=1e-12)


# -- honest propensities (issue 50): the reported distribution is the one the label is drawn from ----

#: The tree boosters draw their trees' tie-breaks as a vector of uniforms (``rng.random(N K)``), which
#: the enumeration of exact_draws does not cover; test_tree_boosters_report_... covers them.
TREE_BOOSTERS = {"adabandit", "banditbbm", "adaboost-olm", "online-mbbm"}
HONEST = [case for case, (name, _) in CASES.items() if learners.get(name).name not in TREE_BOOSTERS]


def _tie(m: Learner, scores: list[float]) -> bool:
    """Make the scores of the input ``e_0`` equal ``scores`` where the learner is linear in a weight
    matrix we can set (C-OVA's, Banditron's, the Perceptron's ``W_``, SquareCB's ``theta_``)."""
    for key in ("W_", "theta_"):
        if hasattr(m, key) and getattr(m, key).ndim == 2:
            w = getattr(m, key)
            w[:] = 0.0
            w[:, 0] = scores
            return True
    return False


def _decide(m: Learner, x: np.ndarray, mask: np.ndarray | None):
    return lambda rng: m.decide(x, rng) if mask is None else m.decide(x, rng, mask)


@pytest.mark.parametrize("case", HONEST)
def test_reported_probabilities_are_the_exact_draw_distribution(case: str) -> None:
    """Tied scores (a fresh model: every label; an eligible set; a partial tie), and untied ones after
    learning: the probabilities a decision reports are the label's exact distribution over the
    decision's tie-break and its sampling draw, whichever way the tie was broken (exact_draws)."""
    bandit = not learners.get(CASES[case][0]).full_information
    X, y = stream(7, 40)
    fresh = new(case, seed=1)
    situations = [(fresh, X[0], None, K)]  # every label tied
    if bandit:
        fresh5 = new(case, k=KM, seed=1)
        situations.append((fresh5, X[1], np.array([True, False, True, True, False]), KM))
    partial = new(case, seed=1)
    if _tie(partial, [1.0, 1.0, 0.0]):
        situations.append((partial, np.eye(D)[0], None, K))
        if bandit:
            partial5 = new(case, k=KM, seed=1)
            _tie(partial5, [1.0, 1.0, 1.0, 0.0, 0.0])
            situations.append((partial5, np.eye(D)[0], np.array([True, False, True, True, True]), KM))
    trained = new(case, seed=1)
    run(trained, X[:30], y[:30], DecisionIds.for_seed(1))
    situations += [(trained, X[t], None, K) for t in (30, 31)]
    for i, (m, x, mask, k) in enumerate(situations):
        found = exact_draws(_decide(m, x, mask), k)
        assert_honest(found)
        if i < 1 + bandit and found.paths > 1:  # a fresh model that tied: each label as likely
            allowed = np.ones(k, dtype=bool) if mask is None else mask
            np.testing.assert_allclose(found.reported[0], allowed / allowed.sum(), rtol=0, atol=1e-12)


def _mix_over(ties: list[int], k: int, rho: float, mask: np.ndarray | None) -> np.ndarray:
    """The textbook average of eq. (2)'s mix (over the eligible labels) around each tied label."""
    allowed = np.ones(k, dtype=bool) if mask is None else mask
    m = int(allowed.sum())
    r = rho if mask is None else min(rho, (m - 1) / m)
    out = np.zeros(k)
    for g in ties:
        p = np.where(allowed, r / (m - 1), 0.0)
        p[g] = 1.0 - r
        out += p / len(ties)
    return out


@pytest.mark.parametrize("masked", [False, True])
def test_tree_boosters_report_the_marginal_over_their_experts_and_ties(masked: bool) -> None:
    """AdaBandit's ``probs`` average eq. (2)'s mix over the expert draw (``v / sum v``) and each
    expert's tied maximisers; BanditBBM's over its majority's ties, the exact distribution of its
    label given the trees' votes (exact_draws with the trees' uniforms fixed); both keep the mix
    given their greedy label in ``memo["conditional"]`` (estimator (4)). A new AdaBandit (alpha 0)
    ties every expert on every label: each label as likely."""
    mask = np.array([True, False, True, True, True]) if masked else None
    allowed = np.ones(KM, dtype=bool) if mask is None else mask
    X, y = stream(9, 60)
    for trained in (False, True):
        m = new("adabandit", k=KM, params={"n_learners": 4, "rho": 0.3}, seed=1)
        if trained:
            run_masked(m, X[:40], y[:40] % KM, masks(3, 40), DecisionIds.for_seed(4))
        for t in range(40, 50):
            d = m.decide(X[t], np.random.default_rng(t), mask)
            w = np.exp(m.log_v_) / np.exp(m.log_v_).sum()
            want = sum(
                w[i] * _mix_over(np.flatnonzero(row == row[allowed].max()).tolist(), KM, 0.3, mask)
                for i, row in enumerate(np.where(allowed, d.memo["votes"], -np.inf))
            )
            np.testing.assert_allclose(d.probs, want, rtol=0, atol=1e-12)
            np.testing.assert_allclose(
                d.conditional, _mix_over([d.memo["greedy"]], KM, 0.3, mask), atol=1e-15
            )
            if not trained:
                np.testing.assert_allclose(d.probs, allowed / allowed.sum(), rtol=0, atol=1e-12)

    class FixedTrees(Replay):
        """The trees' tie-breaks from a fixed generator; the majority's and the sampling enumerated."""

        def random(self, size: object = None) -> float:
            if size is None:
                return super().random()
            return np.random.default_rng(5).random(size)

    ties_seen = 0
    for n_learners in (2, 4):  # a fresh model's trees all tie: their votes split, often evenly
        m = new("banditbbm", k=KM, params={"n_learners": n_learners, "rho": 0.3}, seed=1)
        for t in range(6):
            found = exact_draws(
                lambda rng, x=X[t], m=m: m.decide(x, rng, mask), KM, replay=lambda s, u: FixedTrees(s, u)
            )
            assert_honest(found)
            ties_seen += found.paths > 1
    assert ties_seen > 0


@pytest.mark.parametrize("name", ["adaboost-olm", "online-mbbm"])
def test_full_information_tree_boosters_report_the_distribution_given_their_trees(name: str) -> None:
    """The references draw every tie-break with ``integers`` and the expert with ``random()``: by exact
    enumeration (a 200-point grid), given the trees' weak predictions (which ``probs`` condition
    on), the shown label's distribution is the one reported."""
    X, _ = stream(10, 2)
    m = new(name, params={"n_learners": 2}, seed=1)
    for x in X:
        found = exact_draws_given(
            lambda rng, x=x: m.decide(x, rng), K, lambda d: d.memo["weak"].tobytes(), grid=200
        )
        assert len(found) > 1  # a new model's trees tie: their votes vary
        for part in found.values():
            assert_honest(part, grid=200)
