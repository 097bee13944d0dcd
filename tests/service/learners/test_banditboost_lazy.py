"""BanditBoost's lazy Perceptron store for hashed input (issue 20): ``store="lazy"``.

The oracle (``LazyOracle``) is the lazy semantics written as plain numpy on explicit weight
vectors ``u`` of shape (K, N, d), with none of the store's machinery (no slots, no rows, no lazy
scale, no kept norms, no compiled code): a feature is "materialised" by a boolean mask; its start
comes from an independent numpy transcription of the counter-based generator; scores are
``u @ x / max(1, ||x||)`` with unmaterialised weights 0; norms are recomputed from ``u``. The
store must agree with it to rounding on every score, weight, counter and on which features were
materialised or dropped. A second, exact check: once every feature of the inputs has its row, the
lazy store and the dense one holding the same rows make the same steps bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from service.features import SparseVector
from service.learners import ParamError, make_learner
from service.learners.banditboost import LAZY_MIN_FEATURES, BanditBoost, BanditBoostParams
from service.learners.base import Learner, learner_from_state
from service.learners.weak.family_kernels import SCALE_FLOOR, perceptron_lazy_start
from service.learners.weak.perceptron import LAZY_INITIAL_ROWS, LazyPerceptronFamily, PerceptronFamily
from service.sampling import DecisionIds, decision_rng
from service.serial import StateFormatError, checksum, decode, encode, encode_sparse

from . import test_contract

MiB = 2**20


# -- the oracle ------------------------------------------------------------------------------------

M64 = (1 << 64) - 1
G = 0x9E3779B97F4A7C15


def mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def textbook_start(seed: int, j: int, sigma: float, m: int) -> np.ndarray:
    """The documented generator in Python integers: SplitMix64 keyed by (seed, j), Box-Muller."""
    key = mix64((mix64((seed + G) & M64) + (j + 1) * G) & M64)
    out = np.empty(m)
    for p in range((m + 1) // 2):
        a = mix64((key + (2 * p + 1) * G) & M64)
        b = mix64((key + (2 * p + 2) * G) & M64)
        u1 = ((a >> 11) + 1) * 2.0**-53
        u2 = (b >> 11) * 2.0**-53
        r = np.sqrt(-2.0 * np.log(u1))
        out[2 * p] = sigma * r * np.cos(2 * np.pi * u2)
        if 2 * p + 1 < m:
            out[2 * p + 1] = sigma * r * np.sin(2 * np.pi * u2)
    return out


class LazyOracle:
    """Projected OGD Perceptrons (ALGORITHMS.md §4.3) with starts drawn when a feature is first learned."""

    def __init__(self, N: int, K: int, d: int, seed: int, max_rows: int) -> None:
        self.N, self.K, self.d, self.seed, self.max_rows = N, K, d, seed, max_rows
        self.sigma = 0.01 / np.sqrt(d)
        self.u = np.zeros((K, N, d))
        self.seen = np.zeros(d, dtype=bool)
        self.order: list[int] = []
        self.n = np.zeros((K, N), dtype=np.int64)
        self.dropped = 0

    @staticmethod
    def unit(x: np.ndarray) -> np.ndarray:
        return x / max(1.0, float(np.linalg.norm(x)))

    def scores(self, x: np.ndarray) -> np.ndarray:  # (N, K)
        return (self.u @ self.unit(x)).T  # u is 0 wherever a feature was never materialised

    def update(self, x: np.ndarray, k: int, y: float, w: np.ndarray) -> None:
        xs = self.unit(x)
        moving = [i for i in range(self.N) if y * (self.u[k, i] @ xs) <= 0 and w[i] > 0]
        if not moving:
            return
        added = False
        for j in np.flatnonzero(x):
            if self.seen[j]:
                continue
            if len(self.order) == self.max_rows:
                self.dropped += 1
                continue
            self.seen[j] = True
            self.order.append(int(j))
            self.u[:, :, j] = textbook_start(self.seed, int(j), self.sigma, self.K * self.N).reshape(
                self.K, self.N
            )
            added = True
        if added:
            norms = np.linalg.norm(self.u, axis=2)
            self.u /= np.maximum(norms, 1.0)[:, :, None]
        step = np.where(self.seen, xs, 0.0)  # a dropped feature is not learned
        for i in moving:
            self.n[k, i] += 1
            self.u[k, i] += w[i] * y / np.sqrt(self.n[k, i]) * step
            self.u[k, i] /= max(1.0, float(np.linalg.norm(self.u[k, i])))


def sparse_input(rng: np.random.Generator, d: int, nnz: int, scale: float = 1.0) -> SparseVector:
    idx = np.sort(rng.choice(d, size=nnz, replace=False)).astype(np.int64)
    return SparseVector(idx, rng.uniform(-scale, scale, size=nnz), d)


def test_the_generator_is_the_documented_one() -> None:
    for seed, j, m in [(0, 0, 7), (3, 5, 10), (2**63 + 5, 2**18 - 1, 1000)]:
        got = perceptron_lazy_start(seed, j, 0.5, m)
        np.testing.assert_allclose(got, textbook_start(seed, j, 0.5, m), rtol=1e-13, atol=1e-16)
        np.testing.assert_array_equal(got, perceptron_lazy_start(seed, j, 0.5, m))
    z = perceptron_lazy_start(1, 0, 1.0, 100_000)
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1.0) < 0.02
    assert not np.array_equal(perceptron_lazy_start(1, 1, 1.0, 8), perceptron_lazy_start(2, 1, 1.0, 8))


@pytest.mark.parametrize(
    ("case", "max_rows", "floor"), [(0, 1000, False), (1, 25, False), (2, 3, False), (3, 40, True)]
)
def test_lazy_store_equals_the_oracle(case: int, max_rows: int, floor: bool) -> None:
    rng = np.random.default_rng(case)
    N, K, d, seed = 5, 3, 60, 17 + case
    fam = LazyPerceptronFamily(N, K, d, np.random.default_rng(0), seed=seed, max_rows=max_rows)
    oracle = LazyOracle(N, K, d, seed, min(max_rows, d))
    for t in range(300):
        if floor and t == 60:  # the same u with every scale just above the fold: the next projections fold
            f = SCALE_FLOOR * (1 + 1e-7) / fam.scale_
            fam.scale_ *= f
            fam.rows_ /= f
        x = sparse_input(rng, d, int(rng.integers(0, 8)), scale=3.0 if t % 3 else 0.2)
        np.testing.assert_allclose(fam.scores(x), oracle.scores(x.dense()), rtol=1e-9, atol=1e-15)
        np.testing.assert_allclose(fam.scores(x.dense()), fam.scores(x), rtol=0, atol=0)
        k, y = int(rng.integers(K)), float(rng.choice([-1.0, 1.0]))
        w = rng.uniform(0, 3, size=N) * (rng.random(N) < 0.8)
        fam.update(x, k, y, w, np.random.default_rng(0))
        oracle.update(x.dense(), k, y, w)
        np.testing.assert_array_equal(fam.n_, oracle.n)
        np.testing.assert_allclose(fam.U, oracle.u, rtol=1e-9, atol=1e-15)
        assert fam.n_rows_ == len(oracle.order) and fam.dropped_ == oracle.dropped
        np.testing.assert_array_equal(fam.slot_[oracle.order], np.arange(1, fam.n_rows_ + 1))
        norms = np.linalg.norm(fam.U, axis=2)
        assert np.all(norms <= 1 + 1e-12)
        np.testing.assert_allclose(fam.sqnorm_, norms**2, rtol=1e-8, atol=1e-14)
    assert fam.n_.sum() > 100
    if max_rows < d:
        assert fam.dropped_ > 0 and fam.n_rows_ == max_rows
    assert np.any(fam.scale_ != 1.0)  # rows materialised under a scale: init / scale was stored
    if floor:
        assert np.any(fam.scale_ == 1.0) and np.any(fam.scale_ < 1e-99)  # some folded, some not yet


def test_lazy_equals_dense_bit_for_bit_once_the_rows_exist() -> None:
    rng = np.random.default_rng(5)
    N, K, d = 6, 4, 30
    lazy = LazyPerceptronFamily(N, K, d, np.random.default_rng(0), seed=3, max_rows=d)
    ones = np.ones(d)
    h = lazy.scores(ones)
    assert not h.any()  # before any update: every feature weighs 0
    lazy.update(ones, 1, 1.0, np.ones(N), np.random.default_rng(0))  # scores 0: every model moves
    assert lazy.n_rows_ == d
    dense = PerceptronFamily(N, K, d, np.random.default_rng(0))
    dense.V_ = lazy.rows_[lazy.slot_ - 1].copy()
    dense.scale_, dense.sqnorm_, dense.n_ = lazy.scale_.copy(), lazy.sqnorm_.copy(), lazy.n_.copy()
    alpha = rng.dirichlet(np.ones(N), size=K).T.copy()
    for _ in range(300):
        x = sparse_input(rng, d, int(rng.integers(1, 10)), scale=2.0)
        for a, b in zip(lazy.votes(x, alpha), dense.votes(x, alpha), strict=True):
            np.testing.assert_array_equal(a, b)
        k, y, w = int(rng.integers(K)), float(rng.choice([-1.0, 1.0])), rng.uniform(0, 2, size=N)
        lazy.update(x, k, y, w, np.random.default_rng(0))
        dense.update(x, k, y, w, np.random.default_rng(0))
    assert lazy.n_rows_ == d and lazy.dropped_ == 0
    np.testing.assert_array_equal(lazy.rows_[lazy.slot_ - 1], dense.V_)
    for key in ("scale_", "sqnorm_", "n_"):
        np.testing.assert_array_equal(getattr(lazy, key), getattr(dense, key))


def test_partially_materialised_scores_equal_the_dense_store_with_zero_rows() -> None:
    rng = np.random.default_rng(8)
    N, K, d = 4, 3, 50
    lazy = LazyPerceptronFamily(N, K, d, np.random.default_rng(0), seed=1, max_rows=d)
    for _ in range(40):
        lazy.update(sparse_input(rng, d, 3), int(rng.integers(K)), -1.0, np.ones(N), np.random.default_rng(0))
    assert 0 < lazy.n_rows_ < d
    dense = PerceptronFamily(N, K, d, np.random.default_rng(0))
    seen = np.flatnonzero(lazy.slot_)
    dense.V_ = np.zeros_like(dense.V_)
    dense.V_[seen] = lazy.rows_[lazy.slot_[seen] - 1]
    dense.scale_ = lazy.scale_.copy()
    for _ in range(50):
        x = sparse_input(rng, d, 6)
        np.testing.assert_array_equal(lazy.scores(x), dense.scores(x))


# -- the learner: determinism, save/load, checkpoints ----------------------------------------------

D18 = 2**18


def hashed_stream(n: int, seed: int, d: int = D18, vocab: int = 3000) -> list[tuple[SparseVector, int]]:
    """Web-like input: ~30 of ``vocab`` hashed features an event, the label a function of a few."""
    rng = np.random.default_rng(seed)
    buckets = np.sort(rng.choice(d, size=vocab, replace=False))
    out = []
    for _ in range(n):
        pick = np.sort(rng.choice(vocab, size=30, replace=False))
        out.append((SparseVector(buckets[pick].astype(np.int64), np.ones(30), d), int(pick[0] % 4)))
    return out


def play(m: Learner, events: list[tuple[SparseVector, int]], ids: DecisionIds) -> list[int]:
    labels = []
    for x, y in events:
        dec = m.decide(x, decision_rng(ids.new()))
        m.learn(x, dec, dec.label == y)
        labels.append(dec.label)
    return labels


PARAMS = {"n_learners": 10, "delta": 0.1}


def test_hashed_learner_is_lazy_deterministic_and_resumes_identically() -> None:
    events = hashed_stream(300, 0)
    a = make_learner("banditboost", D18, 4, PARAMS, seed=5)
    b = make_learner("banditboost", D18, 4, PARAMS, seed=5)
    assert a.store == "lazy" and isinstance(a.weak_, LazyPerceptronFamily)
    assert play(a, events, DecisionIds.for_seed(1)) == play(b, events, DecisionIds.for_seed(1))
    assert encode(a.state()) == encode(b.state())

    part = make_learner("banditboost", D18, 4, PARAMS, seed=5)
    ids = DecisionIds.for_seed(1)
    labels = play(part, events[:150], ids)
    resumed = learner_from_state(part.config(), decode(encode_sparse(part.state())))
    labels += play(resumed, events[150:], ids)
    assert labels == play(
        make_learner("banditboost", D18, 4, PARAMS, seed=5), events, DecisionIds.for_seed(1)
    )
    assert checksum(resumed.state()) == checksum(a.state())
    assert a.weak_.n_rows_ > 0 and a.weak_.dropped_ == 0

    # the checkpoint grows with the features seen, not with 2**18
    K, N = 4, 10
    used = a.weak_.n_rows_
    assert len(encode_sparse(a.state())) < 2 * 8 * K * N * used + 12 * used + 10_000
    assert a.nbytes() < 0.05 * 8 * D18 * K * N  # far below the dense (d, K, N) store


def test_another_seed_draws_other_starts() -> None:
    events = hashed_stream(20, 1)
    a = make_learner("banditboost", D18, 4, PARAMS, seed=1)
    b = make_learner("banditboost", D18, 4, PARAMS, seed=2)
    play(a, events, DecisionIds.for_seed(0))
    play(b, events, DecisionIds.for_seed(0))
    assert not np.array_equal(a.weak_.rows_[:1], b.weak_.rows_[:1])


def test_decide_materialises_nothing() -> None:
    m = make_learner("banditboost", D18, 4, PARAMS, seed=0)
    play(m, hashed_stream(30, 2), DecisionIds.for_seed(0))
    before = checksum(m.state())
    for x, _ in hashed_stream(30, 3):  # other buckets: unseen features
        m.decide(x, np.random.default_rng(0))
    assert checksum(m.state()) == before


# -- the bound -----------------------------------------------------------------------------------


def test_rows_double_up_to_the_bound_then_new_features_are_dropped() -> None:
    d, K, N = 4096, 3, 4
    row = 8 * K * N
    params = {"store": "lazy", "n_learners": N, "max_store_bytes": 4 * d + 150 * row + row - 1}
    m = make_learner("banditboost", d, K, params, seed=0)
    fam = m.weak_
    assert fam.max_rows == 150 and fam.rows_.shape[0] == LAZY_INITIAL_ROWS
    bound = BanditBoost.state_nbytes(d, K, params)
    assert bound - BanditBoost.growth_nbytes(d, K, params) == m.nbytes()
    caps = {fam.rows_.shape[0]}
    rng = np.random.default_rng(0)
    w = np.ones(N)
    for j in range(0, 400, 2):  # one new feature an update, scored 0 so every model moves
        x = SparseVector(np.array([j, j + 1], dtype=np.int64), np.array([1.0, -0.5]), d)
        fam.update(x, int(rng.integers(K)), 1.0, w, rng)
        caps.add(fam.rows_.shape[0])
        assert m.nbytes() <= bound
    assert sorted(caps) == [64, 128, 150]
    assert fam.n_rows_ == 150 and fam.dropped_ == 400 - 150
    assert np.count_nonzero(fam.slot_) == 150
    late = SparseVector(np.array([398, 399], dtype=np.int64), np.ones(2), d)
    assert not fam.scores(late).any()  # dropped features keep weight 0
    assert not fam.U[:, :, 150:].any()
    # a known feature still learns when the store is full
    n_before = fam.n_.sum()
    fam.update(SparseVector(np.array([0, 399], dtype=np.int64), np.ones(2), d), 0, -1.0, w, rng)
    assert fam.n_.sum() >= n_before and fam.dropped_ in (250, 251)
    resumed = learner_from_state(m.config(), decode(encode(m.state())))
    assert encode(resumed.state()) == encode(m.state())


def test_a_bound_that_holds_no_row_is_refused() -> None:
    with pytest.raises(ParamError, match="max_store_bytes"):
        make_learner("banditboost", D18, 10, {"max_store_bytes": 4 * D18})


# -- sizes and the budget --------------------------------------------------------------------------


def test_a_hashed_model_allocates_little_and_fits_the_budget() -> None:
    m = make_learner("banditboost", 2**18, 10)
    assert m.store == "lazy" and m.nbytes() < 2 * MiB
    assert (
        BanditBoost.state_nbytes(2**18, 10, None) - BanditBoost.growth_nbytes(2**18, 10, None) == m.nbytes()
    )
    for bits in (18, 22):
        size = BanditBoost.state_nbytes(2**bits, 10, {"n_learners": 100})
        assert 200 * MiB < size <= 256 * MiB + MiB
        assert size <= 512 * MiB
    assert BanditBoost.state_nbytes(2**18, 10, {"max_store_bytes": 64 * MiB}) <= 64 * MiB + MiB
    # dense when asked: today's (d, K, N) float64, 2**18 * 10 * 100 * 8 bytes
    assert BanditBoost.state_nbytes(2**18, 10, {"store": "dense"}) > 2**18 * 10 * 100 * 8


def test_auto_is_dense_below_two_to_the_sixteen_and_for_other_families() -> None:
    p = BanditBoostParams()
    assert p.store_for(LAZY_MIN_FEATURES - 1) == "dense" and p.store_for(LAZY_MIN_FEATURES) == "lazy"
    assert BanditBoostParams(weak="naive_bayes").store_for(2**20) == "dense"
    for d in (6, 784):
        m = make_learner("banditboost", d, 10, {"n_learners": 5})
        assert m.store == "dense" and type(m.weak_) is PerceptronFamily
        assert "store" not in m.params.key()  # the run keys of existing settings
    assert m.params.key() == {"weak": "perceptron", "n_learners": 5, "delta": 0.01, "gamma": 0.1}
    assert m.params.model_dump(mode="json")["store"] == "auto"  # the dump that rebuilds: everything
    assert m.config()["params"]["store"] == "auto"  # a copy's configuration names every parameter
    lazy = make_learner("banditboost", 6, 3, {"store": "lazy"})
    assert lazy.config()["params"]["store"] == "lazy"
    again = learner_from_state(lazy.config(), lazy.state())
    assert again.store == "lazy"


def test_lazy_with_naive_bayes_or_trees_is_refused() -> None:
    with pytest.raises(ParamError, match="store='lazy'"):
        make_learner("banditboost", 6, 3, {"weak": "naive_bayes", "store": "lazy"})
    with pytest.raises(ParamError, match="store='lazy'"):
        make_learner("binbandit", 6, 3, {"store": "lazy"})
    with pytest.raises(ParamError, match="store"):
        make_learner("banditboost", 6, 3, {"store": "sparse"})


# -- corrupt states ---------------------------------------------------------------------------------


def test_a_corrupt_lazy_store_is_refused() -> None:
    m = make_learner("banditboost", 64, 3, {"store": "lazy", "n_learners": 4}, seed=0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = sparse_input(rng, 64, 4)
        dec = m.decide(x, rng)
        m.learn(x, dec, False)
    state = m.state()
    used = state["weak_.n_rows_"]
    assert used > 1
    slot = state["weak_.slot_"]
    beyond, twice = slot.copy(), slot.copy()
    beyond[np.flatnonzero(slot)[0]] = used + 1
    twice[np.flatnonzero(slot)[:2]] = 1
    bad = [
        {"weak_.slot_": beyond},
        {"weak_.slot_": twice},
        {"weak_.slot_": -slot},
        {"weak_.n_rows_": state["weak_.rows_"].shape[0] + 1},
        {"weak_.dropped_": -1},
        {"weak_.rows_": np.zeros((4, 3, 5))},
        {"weak_.rows_": np.zeros((65, 3, 4))},
        {"weak_.slot_": slot[:-1]},
    ]
    for change in bad:
        with pytest.raises(StateFormatError):
            learner_from_state(m.config(), {**state, **change})
    assert encode(learner_from_state(m.config(), state).state()) == encode(state)


# -- the learner contract, with the lazy store -----------------------------------------------------

CONTRACT = [
    test_contract.test_decide_returns_a_distribution_and_does_not_change_the_model,
    test_contract.test_learn_counts_events,
    test_contract.test_same_seed_same_model,
    test_contract.test_save_load_mid_stream_equals_uninterrupted_run,
    test_contract.test_decision_survives_serialisation_and_learns_identically,
    test_contract.test_zero_and_extreme_features_keep_the_state_finite,
    test_contract.test_config_rebuilds_an_equal_untrained_learner,
    test_contract.test_corrupt_state_is_refused,
]


@pytest.mark.parametrize("check", CONTRACT, ids=[c.__name__ for c in CONTRACT])
def test_the_contract_holds_with_the_lazy_store(
    check: Callable[[str], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    def lazy(
        name: str, n_features: int, n_labels: int, params: dict | None = None, *, seed: int = 0
    ) -> Learner:
        m = make_learner(name, n_features, n_labels, {"store": "lazy", **(params or {})}, seed=seed)
        assert m.store == "lazy"
        return m

    monkeypatch.setattr(test_contract, "make_learner", lazy)
    check("banditboost")


def test_a_dense_checkpoint_of_a_hashed_model_from_before_the_lazy_store_still_loads() -> None:
    """Before the lazy store, a BanditBoost over 2**16+ features (small N) kept dense Perceptrons.
    Its checkpoint, under the default store="auto" that now means lazy, loads into the dense store
    and the model goes on exactly as the dense one (an upgrade keeps the model)."""
    d, k = LAZY_MIN_FEATURES, 3
    old = make_learner("banditboost", d, k, {"n_learners": 2, "store": "dense"}, seed=4)
    rng = np.random.default_rng(5)
    stream = [(sparse_input(rng, d, 8), int(rng.integers(k))) for _ in range(60)]
    ids = DecisionIds.for_seed(6)

    def step(model: Learner, x: SparseVector, y: int, did: str) -> None:
        dec = model.decide(x, decision_rng(did))
        model.learn(x, dec, dec.label == y)

    for x, y in stream[:30]:
        step(old, x, y, ids.new())
    config = old.config()
    config["params"] = {"n_learners": 2}  # the spec as stored before: no store, so "auto"
    assert make_learner("banditboost", d, k, config["params"]).store == "lazy"
    loaded = learner_from_state(config, decode(encode_sparse(old.state())))
    assert loaded.store == "dense" and isinstance(loaded.weak_, PerceptronFamily)
    for x, y in stream[30:]:
        did = ids.new()
        step(old, x, y, did)
        step(loaded, x, y, did)
    assert checksum(loaded.state()) == checksum(old.state())
