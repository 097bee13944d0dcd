"""Compiled BanditBoost (issue 20) against a textbook one, and sparse input against dense.

The textbook below is seed 000's Algorithm 1 (ALGORITHMS.md §4.1) written plainly: N x K binary weak
learners as separate objects (the §4.3 Perceptron and naive Bayes, dense numpy, one model at a
time), the paper's loops for eqs. 2-6. The compiled learner keeps other representations (lazy
scales, feature-major arrays, cached log-odds) and sums in other orders, so weights agree to a tight
tolerance, not bit for bit; decisions must be the same.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.features import Featuriser, SparseVector
from service.learners import make_learner
from service.learners.banditboost import BanditBoost
from service.learners.base import Decision, gamma_mix, randargmax, sample
from service.learners.weak import weak_families
from service.learners.weak.naive_bayes import NaiveBayesFamily
from service.learners.weak.perceptron import PerceptronFamily
from service.sampling import DecisionIds, decision_rng

RTOL = 1e-9


class TextbookPerceptron:
    """One projected OGD Perceptron on the unit ball (ALGORITHMS.md §4.3)."""

    def __init__(self, u: np.ndarray) -> None:
        self.u = u.copy()
        self.n = 0

    @staticmethod
    def _scaled(x: np.ndarray) -> np.ndarray:
        return x / max(1.0, float(np.linalg.norm(x)))

    def score(self, x: np.ndarray) -> float:
        return float(self.u @ self._scaled(x))

    def update(self, x: np.ndarray, y: float, w: float) -> None:
        xs = self._scaled(x)
        if y * float(self.u @ xs) <= 0 and w > 0:
            self.n += 1
            u = self.u + (w * y / math.sqrt(self.n)) * xs
            self.u = u / max(1.0, float(np.linalg.norm(u)))


class TextbookNaiveBayes:
    """One weighted binary naive Bayes model (ALGORITHMS.md §4.3); side 0 is +1, side 1 is -1.

    ``binary`` (whether every value of a feature seen so far was 0 or 1) belongs to the family
    and is shared by all its models.
    """

    def __init__(self, d: int, binary: np.ndarray) -> None:
        self.binary = binary
        self.W = np.zeros(2)
        self.S = np.zeros((2, d))
        self.M2 = np.zeros((2, d))

    def to_numeric(self, j: int) -> None:
        """Start feature j's Welford sums from its 0/1 history: M2 = S - S^2 / W."""
        for c in (0, 1):
            self.M2[c, j] = self.S[c, j] - self.S[c, j] ** 2 / self.W[c] if self.W[c] > 0 else 0.0

    def score(self, x: np.ndarray) -> float:
        both = self.W[0] > 0 and self.W[1] > 0
        logp = []
        for c in (0, 1):
            lp = math.log((self.W[c] + 1) / (self.W.sum() + 2))
            for j in range(x.size):
                if self.binary[j]:  # x log p + (1 - x) log(1 - p): linear in x, as for a value
                    p1 = (self.S[c, j] + 1) / (self.W[c] + 2)  # not 0/1 scored before it is learned
                    lp += x[j] * math.log(p1) + (1 - x[j]) * math.log(1 - p1)
                elif both:
                    mean = self.S[:, j] / self.W
                    pooled = self.S[:, j].sum() / self.W.sum()
                    overall = (self.M2[:, j].sum() + (self.W * (mean - pooled) ** 2).sum()) / self.W.sum()
                    var = self.M2[c, j] / self.W[c] + 1e-9 * (1 + overall)
                    lp += -0.5 * (math.log(2 * math.pi * var) + (x[j] - mean[c]) ** 2 / var)
            logp.append(lp)
        return math.tanh((logp[0] - logp[1]) / 2)  # P(+1 | x) - P(-1 | x)

    def update(self, x: np.ndarray, y: float, w: float) -> None:
        c = 0 if y > 0 else 1
        for j in np.flatnonzero(~self.binary):  # weighted Welford (West 1979)
            mean_old = self.S[c, j] / self.W[c] if self.W[c] > 0 else self.S[c, j]
            w_new = self.W[c] + w
            mean_new = (self.S[c, j] + w * x[j]) / w_new if w_new > 0 else self.S[c, j] + w * x[j]
            self.M2[c, j] += w * (x[j] - mean_old) * (x[j] - mean_new)
        self.S[c] += w * x
        self.W[c] += w


class TextbookBanditBoost:
    """Seed 000 Algorithm 1 over ``models[i][k]`` = h_k^(i), written as the paper's loops."""

    def __init__(self, models: list[list], delta: float, gamma: float) -> None:
        self.models = models
        self.N, self.K = len(models), len(models[0])
        self.delta, self.gamma = delta, gamma
        self.theta = gamma / (2 + gamma)
        self.eta = delta**3 / self.K
        self.alpha = np.full((self.N, self.K), 1 / self.N)

    def decide(self, x: np.ndarray, rng: np.random.Generator) -> tuple[int, float, int, np.ndarray, float]:
        h = np.array([[m.score(x) for m in row] for row in self.models])
        f = np.array([sum(self.alpha[i, k] * h[i, k] for i in range(self.N)) for k in range(self.K)])
        greedy = randargmax(f, rng)
        p = gamma_mix(self.K, greedy, self.delta)
        label = sample(p, rng)
        return label, float(p[label]), greedy, h[:, label].copy(), float(f[label])

    def learn(self, x: np.ndarray, kappa: int, p: float, y: float, h: np.ndarray, f: float) -> None:
        z = 0.0
        for i in range(self.N):
            w = min(1.0, (1 - self.gamma) ** (z / 2)) / p  # eqs. 2-4
            z += y * h[i] - self.theta
            self.models[i][kappa].update(x, y, w)
        if self.theta - y * f > 0:  # eqs. 5-6
            a = [self.alpha[i, kappa] * math.exp(-self.eta * (-y * h[i] / p)) for i in range(self.N)]
            total = sum(a)
            for i in range(self.N):
                self.alpha[i, kappa] = a[i] / total


def textbook_for(m: BanditBoost) -> tuple[TextbookBanditBoost, np.ndarray | None]:
    """A textbook learner at m's initial state (and the shared binary mask of naive Bayes)."""
    N, K, d = m.params.n_learners, m.n_labels, m.n_features
    binary = None
    if m.params.weak == "perceptron":
        sigma = 0.01 / math.sqrt(d)
        U = np.random.default_rng(m.seed).normal(0.0, sigma, size=(K, N, d))  # the learner's first draw
        np.testing.assert_allclose(m.weak_.U, U, rtol=1e-15)
        models = [[TextbookPerceptron(U[k, i]) for k in range(K)] for i in range(N)]
    else:
        binary = np.ones(d, dtype=bool)
        models = [[TextbookNaiveBayes(d, binary) for _ in range(K)] for _ in range(N)]
    return TextbookBanditBoost(models, m.params.delta, m.params.gamma), binary


def switch_features(book: TextbookBanditBoost, binary: np.ndarray | None, x: np.ndarray) -> None:
    """Naive Bayes: features x shows a value other than 0 and 1 of turn numeric, for every model."""
    if binary is None:
        return
    for j in np.flatnonzero((x != 0) & (x != 1) & binary):
        for row in book.models:
            for model in row:
                model.to_numeric(j)
        binary[j] = False


def assert_same_models(m: BanditBoost, book: TextbookBanditBoost) -> None:
    np.testing.assert_allclose(m.alpha_, book.alpha, rtol=RTOL, atol=0)
    N, K = book.N, book.K
    if isinstance(m.weak_, PerceptronFamily):
        U = np.array([[book.models[i][k].u for i in range(N)] for k in range(K)])
        np.testing.assert_allclose(m.weak_.U, U, rtol=RTOL, atol=1e-15)
        np.testing.assert_array_equal(m.weak_.n_, [[book.models[i][k].n for i in range(N)] for k in range(K)])
        np.testing.assert_allclose(m.weak_.sqnorm_, (U * U).sum(axis=2), rtol=RTOL)
    else:
        fam = m.weak_
        for name in ("W", "S", "M2"):
            expect = np.array([[getattr(book.models[i][k], name) for i in range(N)] for k in range(K)])
            np.testing.assert_allclose(getattr(fam, f"{name}_"), expect, rtol=RTOL, atol=1e-12)


def oracle_stream(n: int, d: int, K: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """0/1 features, a few rows scaled by 2.5 (||x|| > 1; non-binary values for naive Bayes), and a
    numeric last feature from round 60 on (after a 0/1 history, as a hashed collision would)."""
    rng = np.random.default_rng(seed)
    X = (rng.random((n, d)) < 0.3).astype(np.float64)
    y = (X[:, :K].argmax(axis=1) + (X.sum(axis=1) > d / 3)) % K
    X[3::7] *= 2.5
    X[60:, -1] = rng.normal(1.0, 0.7, size=n - 60)
    return X, y.astype(np.int64)


@pytest.mark.parametrize("weak", ["perceptron", "naive_bayes"])
def test_compiled_rounds_match_the_textbook(weak: str) -> None:
    """Decisions are made in pairs and learned in reverse order, as when feedback arrives late:
    both learners update from their decision-time snapshot (ALGORITHMS.md §1.1)."""
    K, d, N, T = 4, 7, 9, 300
    params = {"weak": weak, "n_learners": N, "delta": 0.3, "gamma": 0.2}
    m = make_learner("banditboost", d, K, params, seed=3)
    assert isinstance(m, BanditBoost)
    book, binary = textbook_for(m)
    X, y = oracle_stream(T, d, K, 0)
    ids = DecisionIds.for_seed(0)
    for t in range(0, T, 2):
        pending = []
        for x in X[t : t + 2]:
            did = ids.new()
            dec = m.decide(x, decision_rng(did))
            label, p, greedy, h, f = book.decide(x, decision_rng(did))
            assert (dec.label, dec.memo["greedy"]) == (label, greedy)
            assert dec.conditional[dec.label] == p  # given the greedy label (probs: over its ties)
            np.testing.assert_allclose(dec.memo["h"], h, rtol=RTOL, atol=1e-15)
            assert dec.memo["f"] == pytest.approx(f, rel=RTOL, abs=1e-15)
            pending.append(dec)
        for j in (1, 0):
            x, dec = X[t + j], pending[j]
            hit = dec.label == y[t + j]
            m.learn(x, dec, hit)
            switch_features(book, binary, x)
            y_bin = 1.0 if hit else -1.0
            book.learn(x, dec.label, float(dec.conditional[dec.label]), y_bin, dec.memo["h"], dec.memo["f"])
        assert_same_models(m, book)
    assert (m.alpha_ != 1 / N).any()  # the voting weights moved
    if binary is not None:
        np.testing.assert_array_equal(m.weak_.binary_, binary)
        assert not binary[-1]  # the Gaussian part was exercised


# -- sparse input: the same learner on a SparseVector and on its dense form --------------------------


def hashed_stream(seed: int, bits: int, K: int, T: int) -> tuple[list[SparseVector], np.ndarray]:
    """Named-feature requests (strings, numbers, a bool) hashed into 2^bits buckets, labelled by
    a linear teacher over the hashed vector."""
    rng = np.random.default_rng(seed)
    featurise = Featuriser(None, bits, 100)
    teacher = rng.normal(size=(K, 1 << bits))
    xs, ys = [], []
    for _ in range(T):
        request = {f"s{j}": f"v{rng.integers(8)}" for j in range(12)}
        request |= {f"n{j}": float(rng.normal()) for j in range(3)}
        request |= {"flag": bool(rng.integers(2))}
        x = featurise(request)
        xs.append(x)
        ys.append(int(np.argmax(teacher[:, x.idx] @ x.val)))
    return xs, np.array(ys)


@pytest.mark.parametrize("weak", ["perceptron", "naive_bayes"])
def test_sparse_input_equals_dense_input(weak: str) -> None:
    """Both forms go through the same compiled loops on the same non-zeros: bit for bit equal."""
    K, bits, T = 5, 10, 300
    xs, ys = hashed_stream(1, bits, K, T)
    params = {"weak": weak, "n_learners": 12, "delta": 0.1}
    sparse = make_learner("banditboost", 1 << bits, K, params, seed=2)
    dense = make_learner("banditboost", 1 << bits, K, params, seed=2)
    assert sparse.accepts_sparse
    ids = DecisionIds.for_seed(5)
    for x, y in zip(xs, ys, strict=True):
        did = ids.new()
        d = sparse.decide(x, decision_rng(did))
        d_dense = dense.decide(x.dense(), decision_rng(did))
        assert d.label == d_dense.label
        np.testing.assert_array_equal(d.memo["h"], d_dense.memo["h"])
        sparse.learn(x, d, d.label == y)
        dense.learn(x.dense(), d_dense, d.label == y)
    for key, value in dense.state().items():
        np.testing.assert_array_equal(sparse.state()[key], value, err_msg=key)
    assert (sparse.alpha_ != sparse.alpha_[0, 0]).any()


@pytest.mark.parametrize("weak", weak_families.names())
def test_sparse_input_is_taken_where_the_family_takes_it(weak: str) -> None:
    m = make_learner("banditboost", 8, 3, {"weak": weak, "n_learners": 2})
    assert m.accepts_sparse is weak_families.get(weak).accepts_sparse


# -- the Perceptron family's lazy scale: O(nnz) steps, the rare fold ----------------------------------


def sparse(x: np.ndarray) -> SparseVector:
    idx = np.flatnonzero(x)
    return SparseVector(idx, x[idx], x.size)


def test_sparse_step_touches_only_the_nonzero_features_of_one_class() -> None:
    K, N, d = 3, 6, 50
    fam = PerceptronFamily(N, K, d, np.random.default_rng(0))
    x = np.zeros(d)
    x[[4, 17, 31]] = [0.5, -1.0, 2.0]
    before = {k: v.copy() for k, v in fam.get_state().items()}
    fam.update(sparse(x), 1, -1.0, np.full(N, 3.0), np.random.default_rng(0))
    rows = np.setdiff1d(np.arange(d), [4, 17, 31])
    np.testing.assert_array_equal(fam.V_[rows], before["V_"][rows])
    for cls in (0, 2):
        np.testing.assert_array_equal(fam.V_[:, cls], before["V_"][:, cls])
        np.testing.assert_array_equal(fam.scale_[cls], before["scale_"][cls])
    assert (fam.n_[1] > 0).any() and (fam.scale_[1] < 1.0).any()  # steps and projections happened


def test_tiny_scales_are_folded_back_into_the_vectors() -> None:
    """A scale pushed below 1e-100 by a projection is folded into V and ||u||^2 recomputed."""
    K, N, d = 2, 4, 5
    fam = PerceptronFamily(N, K, d, np.random.default_rng(1))
    U = np.abs(fam.U)  # positive scores on x >= 0: every y = -1 is a mistake
    scale = np.full((K, N), 1.5e-100)
    V = np.ascontiguousarray(U.transpose(2, 0, 1) / scale)
    fam.set_state({**fam.get_state(), "V_": V, "scale_": scale})
    np.testing.assert_allclose(fam.U, U, rtol=1e-15)
    models = [[TextbookPerceptron(U[k, i]) for i in range(N)] for k in range(K)]
    x = np.array([1.0, 0.0, 1.0, 0.0, 1.0])
    w = np.array([50.0, 50.0, 50.0, 0.0])  # big steps: projected; the last model does not move
    for i, model in enumerate(models[0]):
        model.update(x, -1.0, w[i])
    fam.update(x, 0, -1.0, w, np.random.default_rng(0))
    moved = fam.n_[0] > 0
    assert moved[:3].all() and not moved[3]
    np.testing.assert_array_equal(fam.scale_[0], np.where(moved, 1.0, 1.5e-100))
    np.testing.assert_allclose(fam.U[0], [m.u for m in models[0]], rtol=1e-12)
    np.testing.assert_allclose(fam.sqnorm_, (fam.U**2).sum(axis=2), rtol=1e-12)


def test_naive_bayes_family_sparse_update_equals_dense() -> None:
    K, N, d = 3, 4, 30
    a, b = (NaiveBayesFamily(N, K, d, np.random.default_rng(0)) for _ in range(2))
    rng = np.random.default_rng(4)
    for t in range(60):
        x = np.where(rng.random(d) < 0.2, 1.0, 0.0)
        if t > 20:
            x[[3, 9]] = rng.normal(size=2) * (rng.random(2) < 0.5)
        k, y, w = int(rng.integers(K)), float(rng.choice([-1.0, 1.0])), rng.exponential(size=N)
        a.update(sparse(x), k, y, w, rng)
        b.update(x, k, y, w, rng)
        probe = np.where(rng.random(d) < 0.2, 1.0, 0.0)
        probe[3] = rng.normal()
        np.testing.assert_array_equal(a.scores(sparse(probe)), b.scores(probe))
    for key, value in b.get_state().items():
        np.testing.assert_array_equal(a.get_state()[key], value, err_msg=key)
    assert not a.binary_[3] and not a.binary_[9]


def test_learn_accepts_a_decision_read_back_from_the_store() -> None:
    from service.serial import decode, encode

    m = make_learner("banditboost", 4, 3, {"n_learners": 5}, seed=0)
    x = np.array([1.0, 0.0, 0.5, 0.0])
    d = m.decide(x, decision_rng("id"))
    back = Decision.from_state(decode(encode(d.to_state())))
    m.learn(x, back, False)
    assert m.t_ == 1
