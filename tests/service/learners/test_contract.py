"""The contract every registered learner keeps (DESIGN.md "The learner contract").

Parametrised over the registry, so a learner added in a new module is checked automatically.
"""

from __future__ import annotations

import numpy as np
import pytest

from service.learners.base import Decision, Learner, ParamError, learners, make_learner
from service.sampling import DecisionIds, decision_rng
from service.serial import StateFormatError, checksum, decode, encode

D, K = 6, 3
NAMES = [name for name, _ in learners.items()]
#: contract cases: every registered learner at its defaults, and settings with code of their own
CASES: dict[str, tuple[str, dict | None]] = {name: (name, None) for name in NAMES} | {
    "cova+pairs": ("cova", {"interactions": "pairs"}),  # each pair its own column
    "cova+hashed-pairs": ("cova", {"interactions": "pairs", "interaction_bits": 2}),  # 15 pairs, 4 columns
    "adabandit+adaptive-grace": ("adabandit", {"adaptive_grace": True}),  # the trees' own wait schedule
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
