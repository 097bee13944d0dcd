"""Binary weak-learner families (ALGORITHMS.md §4.3) and C-OVA on top of them, against textbook loops."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lab.sim.stream import run_stream
from service.features import SparseVector
from service.learners import make_learner
from service.learners.base import Learner, randargmax
from service.learners.weak import BinaryFamily, weak_families
from service.learners.weak.naive_bayes import NaiveBayesFamily
from service.learners.weak.perceptron import PerceptronFamily
from service.sampling import DecisionIds, decision_rng
from service.serial import checksum, decode, encode


def test_registry_holds_both_families() -> None:
    assert weak_families.get("perceptron") is PerceptronFamily
    assert weak_families.get("naive_bayes") is NaiveBayesFamily
    assert {"perceptron", "naive_bayes"} <= set(weak_families.names())


def updates(n: int, d: int, K: int, N: int, seed: int, numeric: bool):
    """Random weighted binary examples (x, k, y, weights) as BanditBoost sends them."""
    rng = np.random.default_rng(seed)
    for t in range(n):
        x = (rng.random(d) < 0.4).astype(np.float64)
        if numeric and t >= n // 3:  # 0/1 values first: the switch to Gaussian keeps the history
            x[-2:] = rng.normal(size=2) * np.array([1.0, 30.0])
        w = rng.exponential(1.0, size=N) * (rng.random(N) < 0.9)  # some zero weights
        yield x, int(rng.integers(K)), float(rng.choice([-1.0, 1.0])), w


def as_input(x: np.ndarray, sparse: bool) -> np.ndarray | SparseVector:
    """x as given, or as the SparseVector of its non-zeros."""
    if not sparse:
        return x
    idx = np.flatnonzero(x)
    return SparseVector(idx, x[idx], x.size)


# -- Perceptron: N x K projected Perceptrons vs one loop per model --


@pytest.mark.parametrize("sparse", [False, True])
def test_perceptron_family_matches_per_model_loop(sparse: bool) -> None:
    K, N, d = 3, 5, 6
    fam = PerceptronFamily(N, K, d, np.random.default_rng(0))
    sigma = 0.01 / math.sqrt(d)
    ref = np.random.default_rng(0).normal(0.0, sigma, size=(K, N, d))
    counts = np.zeros((K, N))
    np.testing.assert_allclose(fam.U, ref, rtol=1e-15)
    rng = np.random.default_rng(1)
    for x, k, y, w in updates(300, d, K, N, 1, numeric=True):
        xs = x / max(1.0, float(np.linalg.norm(x)))
        expect = np.array([[ref[kk, i] @ xs for kk in range(K)] for i in range(N)])
        got = fam.scores(as_input(x, sparse))
        assert got.shape == (N, K)
        np.testing.assert_allclose(got, expect, atol=1e-12)
        assert np.all(np.abs(got) <= 1.0 + 1e-12)
        for i in range(N):  # textbook: u <- Proj(u + w y x / sqrt(n)) on a margin mistake
            if y * float(ref[k, i] @ xs) <= 0 and w[i] > 0:
                counts[k, i] += 1
                u = ref[k, i] + w[i] * y * xs / math.sqrt(counts[k, i])
                ref[k, i] = u / max(1.0, float(np.linalg.norm(u)))
        fam.update(as_input(x, sparse), k, y, w, rng)
        np.testing.assert_allclose(fam.U, ref, atol=1e-12)
        np.testing.assert_array_equal(fam.n_, counts)
        np.testing.assert_allclose(fam.sqnorm_, (ref * ref).sum(axis=2), rtol=1e-12)


# -- naive Bayes: sufficient statistics vs recomputing from all weighted examples --


def textbook_nb_score(
    examples: list[tuple[np.ndarray, float, float]], x: np.ndarray, binary: np.ndarray
) -> float:
    """2 P(+1 | x) - 1 of one weighted naive Bayes model, recomputed from its whole history."""
    logp = {}
    both = all(sum(w for _, yy, w in examples if yy == c) > 0 for c in (1.0, -1.0))
    allx = np.array([e[0] for e in examples]) if examples else np.zeros((0, x.size))
    allw = np.array([e[2] for e in examples])
    for c in (1.0, -1.0):
        rows = [(xx, w) for xx, yy, w in examples if yy == c]
        Wc = sum(w for _, w in rows)
        lp = math.log((Wc + 1) / (sum(allw) + 2))
        for j in range(x.size):
            if binary[j]:
                ones = sum(w for xx, w in rows if xx[j] == 1.0)
                p1 = (ones + 1) / (Wc + 2)
                lp += math.log(p1 if x[j] == 1.0 else 1 - p1)
            elif both:
                mean = sum(w * xx[j] for xx, w in rows) / Wc
                var = sum(w * (xx[j] - mean) ** 2 for xx, w in rows) / Wc
                tot = allw.sum()
                overall = float((allw * (allx[:, j] - (allw @ allx[:, j]) / tot) ** 2).sum() / tot)
                var += 1e-9 * (1 + overall)
                lp += -0.5 * (math.log(2 * math.pi * var) + (x[j] - mean) ** 2 / var)
        logp[c] = lp
    a = logp[1.0] - logp[-1.0]
    return 2 / (1 + math.exp(-a)) - 1


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("numeric", [False, True])
def test_naive_bayes_family_matches_recomputation(numeric: bool, sparse: bool) -> None:
    K, N, d = 2, 3, 5
    fam = NaiveBayesFamily(N, K, d, np.random.default_rng(0))
    assert not fam.scores(np.ones(d)).any()  # no data: h = 0
    history: dict[tuple[int, int], list[tuple[np.ndarray, float, float]]] = {}
    probe_rng = np.random.default_rng(9)
    for t, (x, k, y, w) in enumerate(updates(60, d, K, N, 2, numeric)):
        fam.update(as_input(x, sparse), k, y, w, np.random.default_rng(0))
        for i in range(N):
            history.setdefault((k, i), []).append((x, y, float(w[i])))
        if t % 6 == 5:
            probe = np.where(probe_rng.random(d) < 0.5, 1.0, 0.0)
            if numeric and t >= 20:
                probe[-2:] = probe_rng.normal(size=2)
            binary = np.ones(d, dtype=bool)
            binary[-2:] = not (numeric and t >= 20)
            np.testing.assert_array_equal(fam.binary_, binary)
            got = fam.scores(as_input(probe, sparse))
            for kk in range(K):
                for i in range(N):
                    expect = textbook_nb_score(history.get((kk, i), []), probe, binary)
                    assert got[i, kk] == pytest.approx(expect, abs=1e-9)
    np.testing.assert_array_equal(fam.binary_[-2:], [not numeric] * 2)


def test_naive_bayes_learns_a_binary_concept() -> None:
    fam = NaiveBayesFamily(1, 1, 4, np.random.default_rng(0))
    rng = np.random.default_rng(0)
    for _ in range(200):
        x = (rng.random(4) < 0.5).astype(float)
        fam.update(x, 0, 1.0 if x[0] == 1 else -1.0, np.ones(1), rng)
    assert fam.scores(np.array([1.0, 0, 0, 0]))[0, 0] > 0.9
    assert fam.scores(np.array([0.0, 1, 1, 1]))[0, 0] < -0.9


@pytest.mark.parametrize("name", ["perceptron", "naive_bayes"])
def test_family_state_round_trip(name: str) -> None:
    fam: BinaryFamily = weak_families.get(name)(4, 3, 5, np.random.default_rng(0))
    for x, k, y, w in updates(40, 5, 3, 4, 3, numeric=True):
        fam.update(x, k, y, w, np.random.default_rng(0))
    other: BinaryFamily = weak_families.get(name)(4, 3, 5, np.random.default_rng(1))
    other.set_state(decode(encode(fam.get_state())))
    probe = np.linspace(-1, 2, 5)
    np.testing.assert_array_equal(other.scores(probe), fam.scores(probe))


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("name", ["perceptron", "naive_bayes"])
def test_votes_are_the_scores_and_their_alpha_weighted_sums(name: str, sparse: bool) -> None:
    K, N, d = 3, 4, 5
    fam: BinaryFamily = weak_families.get(name)(N, K, d, np.random.default_rng(0))
    assert fam.accepts_sparse
    for x, k, y, w in updates(30, d, K, N, 5, numeric=True):
        fam.update(as_input(x, sparse), k, y, w, np.random.default_rng(0))
    alpha = np.random.default_rng(1).dirichlet(np.ones(N), size=K).T
    x = np.array([1.0, 0.0, 1.0, 0.3, -2.0])
    h, f = fam.votes(as_input(x, sparse), alpha)
    np.testing.assert_array_equal(h, fam.scores(x))
    np.testing.assert_allclose(f, (alpha * h).sum(axis=0), rtol=1e-13)


class Halves(BinaryFamily):
    """A family with only the required methods: every score is 1/2, updates do nothing."""

    def scores(self, x: np.ndarray) -> np.ndarray:
        return np.full((self.n_learners, self.n_labels), 0.5)

    def update(self, x: np.ndarray, k: int, y: float, weights: np.ndarray, rng: np.random.Generator) -> None:
        pass


def test_interface_defaults_dense_input_and_votes_from_scores() -> None:
    fam = Halves(3, 2, 4, np.random.default_rng(0))
    assert not fam.accepts_sparse
    alpha = np.array([[0.2, 0.5], [0.3, 0.25], [0.5, 0.25]])
    h, f = fam.votes(np.ones(4), alpha)
    np.testing.assert_array_equal(h, fam.scores(np.ones(4)))
    np.testing.assert_allclose(f, [0.5, 0.5], rtol=1e-15)


# -- C-OVA with weak-learner bases (seed 000 Table 2) and its PA path --


def cova_textbook(
    base: str, X: np.ndarray, y: np.ndarray, K: int, seed: int, C: float
) -> tuple[int, np.ndarray]:
    """Seed 004 Algorithm 1 with PA-I (cap C) or Perceptron steps written out: mistakes, final weights."""
    W = np.zeros((K, X.shape[1]))
    ids = DecisionIds.for_seed(seed)
    mistakes = 0
    for x, yt in zip(X, y, strict=True):
        yhat = randargmax(W @ x, decision_rng(ids.new()))
        mistakes += yhat != yt
        sq = float(x @ x)
        labels = [(s, 1.0 if s == yhat else -1.0) for s in range(K)] if yhat == yt else [(yhat, -1.0)]
        for s, lab in labels:
            margin = lab * float(W[s] @ x)
            if base == "pa1":
                W[s] += min(C, max(0.0, 1 - margin) / sq) * lab * x
            elif margin <= 0:
                W[s] += lab * x
    return mistakes, W


@pytest.mark.parametrize(("base", "C"), [("pa1", 1.0), ("pa1", 0.1), ("perceptron", 1.0)])
def test_cova_linear_bases_match_textbook(base: str, C: float) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    y = (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 0.5)
    m = make_learner("cova", 4, 3, {"base": base, "C": C, "interactions": "none"})
    correct = run_stream(m, X, y, DecisionIds.for_seed(4))
    mistakes, W = cova_textbook(base, X, y, 3, 4, C)
    assert int((~correct).sum()) == mistakes
    np.testing.assert_allclose(m.W_, W, atol=1e-12)


@pytest.mark.parametrize(
    ("base", "family"), [("ogd_perceptron", "perceptron"), ("naive_bayes", "naive_bayes")]
)
def test_cova_weak_base_matches_family_steps(base: str, family: str) -> None:
    """Click: every class's model steps (+1 for the shown label, -1 others); no click: only the shown one."""
    K, d = 3, 5
    X = (np.random.default_rng(1).random((200, d)) < 0.4).astype(float)
    y = (X[:, 0] + X[:, 1] + X[:, 2] > 1).astype(np.int64) * (1 + (X[:, 3] > 0))
    m = make_learner("cova", d, K, {"base": base}, seed=2)
    fam: BinaryFamily = weak_families.get(family)(1, K, d, np.random.default_rng(2))
    rng = np.random.default_rng(3)
    for x, yt in zip(X, y, strict=True):
        dec = m.decide(x, rng)
        scores = fam.scores(x)[0]
        assert scores[dec.label] == scores.max()
        tied = scores == scores.max()  # the greedy label, drawn among them: 1 / t each
        np.testing.assert_array_equal(dec.probs, tied / tied.sum())
        hit = dec.label == yt
        for s in range(K) if hit else [dec.label]:
            fam.update(x, s, 1.0 if (hit and s == dec.label) else -1.0, np.ones(1), rng)
        m.learn(x, dec, hit)
    assert checksum(m.weak_.get_state()) == checksum(fam.get_state())


@pytest.mark.parametrize("base", ["pa", "perceptron", "naive_bayes", "ogd_perceptron"])
def test_cova_save_load_mid_stream(base: str) -> None:
    X = (np.random.default_rng(5).random((200, 6)) < 0.3).astype(float)
    y = X[:, :3].argmax(axis=1)
    whole = make_learner("cova", 6, 3, {"base": base}, seed=1)
    part = make_learner("cova", 6, 3, {"base": base}, seed=1)
    ids_a, ids_b = DecisionIds.for_seed(0), DecisionIds.for_seed(0)
    run_stream(whole, X, y, ids_a)
    run_stream(part, X[:90], y[:90], ids_b)
    resumed = Learner.from_state(part.config(), decode(encode(part.state())))
    run_stream(resumed, X[90:], y[90:], ids_b)
    assert checksum(resumed.state()) == checksum(whole.state())
