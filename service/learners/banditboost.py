"""BanditBoost: online boosting of binary weak learners with bandit feedback.

Chen, Lin, Lu, ICML 2014 (seed 000), Algorithm 1, eqs. (2)-(6); ALGORITHMS.md §4.1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from service._jit_cache import kernel
from service.features import SparseVector
from service.kernels import gamma_mix_sample
from service.learners.base import (
    Decision,
    Learner,
    ParamError,
    Params,
    as_mask,
    learners,
    masked_argmax_ties,
    masked_decision,
    over_ties,
    randargmax_ties,
)
from service.learners.weak import BinaryFamily, weak_families
from service.learners.weak.family_kernels import perceptron_update_dense, perceptron_votes_greedy_dense
from service.learners.weak.perceptron import LazyPerceptronFamily, PerceptronFamily
from service.sampling import own_random

#: ``store="auto"`` keeps the Perceptron weights lazily from this many features on (hashed input).
LAZY_MIN_FEATURES = 2**16
#: Default bound of the lazy store (``max_store_bytes``).
DEFAULT_STORE_BYTES = 256 * 2**20


class BanditBoostParams(Params):
    """Hyperparameters of :class:`BanditBoost`.

    Parameters
    ----------
    weak : str, default "perceptron"
        Binary weak-learner family (:data:`service.learners.weak.weak_families`):
        ``"perceptron"`` or ``"naive_bayes"``.
    n_learners : int, default 100
        Number N of weak learners (seed 000 §4 uses 100).
    delta : float, default 0.01
        Exploration rate in (0, 1): ``p(k) = (1-delta) 1[k = H] + delta/K``. The analysis assumes
        ``delta <= gamma``; seed 000 Fig. 1 sweeps past it, so it is not enforced.

    The defaults (perceptron, N = 100, delta = 0.01) are the best perceptron setting of
    ``clickboost sweep-defaults`` (car, dna, nursery; docs/BENCHMARKS.md). Naive Bayes ranks higher
    there (0.188 against 0.199 mean online error) but keeps O(K N d) statistics and updates them in
    O(N d): at 2**18 hashed buckets that is gigabytes and milliseconds per event, so it is not the
    default of a service whose main input is hashed; pass ``weak="naive_bayes"`` for small dense
    inputs.
    gamma : float, default 0.1
        Assumed weak-learner edge in (0, 1/2); ``theta = gamma / (2 + gamma)`` (seed 000 §4: 0.1).
    store : {"auto", "dense", "lazy"}, default "auto"
        How the Perceptron family keeps its weights. ``"dense"``: a ``(d, K, N)`` array with a
        random start over all d features (:class:`~service.learners.weak.perceptron.PerceptronFamily`).
        ``"lazy"``: rows only for the features updates touched, bounded by ``max_store_bytes``
        (:class:`~service.learners.weak.perceptron.LazyPerceptronFamily`; features never learned
        weigh 0, a departure from ALGORITHMS.md §4.3 for hashed inputs). ``"auto"``: lazy for the
        Perceptron family when ``n_features >= 2**16`` (hashed input), dense otherwise (every data
        set the project reproduces has d <= 784). Only the Perceptron family has a lazy store:
        ``"lazy"`` with another family is refused.
    max_store_bytes : int, default 256 MiB
        Bound of the lazy store: its ``slot_`` index (4 d bytes) plus its rows (8 K N bytes each)
        stay within it; features arriving when it is full are not learned (counted in
        ``weak_.dropped_``). Ignored by the dense store.

    ``store`` and ``max_store_bytes`` are left out of the dumped parameters while at their
    defaults, so that the parameters of every setting that existed before them dump as before
    (runs are stored under that JSON).
    """

    weak: str = "perceptron"
    n_learners: int = Field(100, ge=1)
    delta: float = Field(0.01, gt=0.0, lt=1.0)
    gamma: float = Field(0.1, gt=0.0, lt=0.5)
    store: Literal["auto", "dense", "lazy"] = "auto"
    max_store_bytes: int = Field(DEFAULT_STORE_BYTES, ge=1)

    @field_validator("weak")
    @classmethod
    def _known_family(cls, v: str) -> str:
        if v not in weak_families.names():
            raise ValueError(f"unknown weak learner family; known: {', '.join(weak_families.names())}")
        return v

    @model_validator(mode="after")
    def _lazy_needs_perceptron(self) -> BanditBoostParams:
        if self.store == "lazy" and self.weak != "perceptron":
            raise ValueError(f"store='lazy' is only implemented for weak='perceptron', not {self.weak!r}")
        return self

    omit_at: ClassVar[dict[str, Any]] = {"store": "auto", "max_store_bytes": DEFAULT_STORE_BYTES}

    def store_for(self, n_features: int) -> str:
        """The store ``"dense"`` or ``"lazy"`` a learner over ``n_features`` features uses."""
        if self.store != "auto":
            return self.store
        return "lazy" if self.weak == "perceptron" and n_features >= LAZY_MIN_FEATURES else "dense"

    def max_rows(self, n_features: int, n_labels: int) -> int:
        """Rows of K x N float64 weights the lazy store may hold within ``max_store_bytes``."""
        return min(n_features, (self.max_store_bytes - 4 * n_features) // (8 * n_labels * self.n_learners))


@learners.register("banditboost")
class BanditBoost(Learner):
    """BanditBoost (seed 000, Algorithm 1): OSBoost weights turned into unbiased estimates.

    Input and rewards: Learns a click bit: a graded reward reaches it as a Bernoulli(reward) bit
    (:func:`service.sampling.reward_bit`), unbiased but noisier than the value (issue 50). Needs
    input scaled to about [-1, 1]: what it learns changes with a feature's unit, so one raw number
    (a price, a count) beside one-hot features hurts it (``bench invariance``, docs/BENCHMARKS.md).

    Round t:

    1. ``f_k = sum_i alpha_k^(i) h_k^(i)(x)``, ``H = argmax_k f_k`` (ties at random);
    2. ``p(k) = (1-delta) 1[k = H] + delta/K``; sample ``kappa ~ p``; the click reveals the one
       binary label ``y = +1`` if it is a hit, else ``-1``, for class kappa;
    3. for i = 1..N with decision-time scores ``h_i = h_kappa^(i)(x)``:
       ``z^(i-1) = sum_{j<i} (y h_j - theta)`` and ``w^(i) = min(1, (1-gamma)^(z^(i-1)/2)) / p(kappa)``
       (eqs. 2-4); weak learner i's model of class kappa trains on ``(x, y)`` with weight ``w^(i)``;
    4. if ``theta - y f_kappa > 0``: ``l^(i) = -y h_i / p(kappa)``, else 0 (subgradient 0 at the kink);
       ``alpha_kappa <- alpha_kappa * exp(-eta l) / Z`` with ``eta = delta^3 / K`` (eqs. 5-6).

    Classes other than kappa are not updated. ``E w^(i) = min(1, (1-gamma)^(z/2))`` and ``E l`` is
    the subgradient of ``max(0, theta - y_k f_k)`` (ALGORITHMS.md §8).

    Graded rewards (issue 38): its update is built on the click bit, so it learns the Bernoulli(r)
    bit the runtime draws for a reward r in (0, 1) from the decision id
    (:func:`service.sampling.reward_bit`, ``graded = False``): unbiased for the reward in expectation.

    Eligible labels (ours): ``H`` is the eligible class of largest ``f_k`` and ``p(k) = (1-delta)
    1[k = H] + delta/m`` on the m eligible classes, 0 elsewhere; steps 3-4 divide by that
    ``p(kappa)``, so for every eligible class the expectations above hold as they are; an ineligible
    class is never sampled and not updated (its binary label is not observed that round). The
    one-call dense path is unmasked only; a masked decision takes the generic votes. The memo carries the
    decision-time scores of the sampled class and ``f_kappa``, so learn is exact when other updates
    landed in between.

    Hashed input (``store``, default lazy from 2**16 features): the Perceptron weights then live in
    rows materialised for the features updates touch, within ``max_store_bytes``
    (:class:`~service.learners.weak.perceptron.LazyPerceptronFamily`), so a model and its checkpoint
    grow with the features seen, not with 2**b. A feature never learned weighs 0 and its random
    start is drawn when it is first learned, keyed by (seed, feature): ours, not ALGORITHMS.md §4.3's
    start over all d (whose ``sigma = 0.01/sqrt(d)`` is tiny there anyway).

    A round is a few compiled calls (issue 20): the family's scores and votes of all N x K models
    (:meth:`BinaryFamily.votes`), steps 3-4's weights and eq. (6) on alpha (:func:`boost_step`),
    the family's weighted update. With the Perceptron and naive Bayes families ``x`` may be a
    :class:`~service.features.SparseVector`; the Perceptron family then costs O(N K nnz) per event.
    Schema version 2: the Perceptron family keeps ``u = scale V`` feature-major (was ``U_``).

    Attributes
    ----------
    alpha_ : ndarray of shape (N, K)
        Voting weights; each column lies on the simplex, initially uniform (1/N).
    weak_ : BinaryFamily
        The N x K binary weak learners.

    References
    ----------
    S.-T. Chen, H.-T. Lin, C.-J. Lu. Boosting with online binary learners for the multiclass bandit
    problem. ICML 2014.

    Examples
    --------
    >>> import numpy as np
    >>> from service.learners import make_learner
    >>> m = make_learner("banditboost", 3, 4, {"n_learners": 10, "delta": 0.2}, seed=0)
    >>> d = m.decide(np.array([1.0, 0.0, 1.0]), np.random.default_rng(0))
    >>> sorted(d.probs.round(2).tolist())
    [0.05, 0.05, 0.05, 0.85]
    >>> m.learn(np.array([1.0, 0.0, 1.0]), d, True)
    >>> m.alpha_.sum(axis=0).round(12).tolist()
    [1.0, 1.0, 1.0, 1.0]
    """

    name = "banditboost"
    kernels = ("service.kernels", "service.learners.banditboost", "service.learners.weak.family_kernels")

    @classmethod
    def kernel_modules(cls, params: Mapping[str, Any] | None = None) -> tuple[str, ...]:
        trees = cls.Params.parse(cls.name, params).weak == "hoeffding_tree"
        family = "service.learners.weak.forest_kernels" if trees else "service.learners.weak.family_kernels"
        return (*cls.kernels[:2], family)

    Params = BanditBoostParams
    params: BanditBoostParams
    schema_version = 2
    #: The lazy store's rows grow (its family checks their shape on loading; listed for the contract tests).
    _growable: ClassVar[frozenset[str]] = frozenset({"weak_.rows_"})

    def _init(self) -> None:
        n = self.params.n_learners
        self.eta = self.params.delta**3 / self.n_labels
        self.alpha_ = np.full((n, self.n_labels), 1.0 / n)
        #: "dense" or "lazy" (:meth:`BanditBoostParams.store_for`)
        self.store = self.params.store_for(self.n_features)
        if self.store == "lazy":
            max_rows = _lazy_rows(self.name, self.params, self.n_features, self.n_labels)
            self.weak_: BinaryFamily = LazyPerceptronFamily(
                n, self.n_labels, self.n_features, self.rng_, seed=self.seed, max_rows=max_rows
            )
        else:
            family = weak_families.get(self.params.weak)
            self.weak_ = family(n, self.n_labels, self.n_features, self.rng_)

    def dropped(self) -> int:
        """Features the lazy store, once full, did not keep (``weak_.dropped_``); 0 when dense."""
        return int(getattr(self.weak_, "dropped_", 0))

    def set_state(self, state: Mapping[str, Any]) -> None:
        """:meth:`Learner.set_state`; a dense Perceptron state over ``2**16`` or more features with
        ``store="auto"`` (a checkpoint from before the lazy store existed, when such a model kept
        its weights dense) is loaded into the dense store it came from, not refused: an upgrade
        keeps the model. Every replica loads the same checkpoint, so all of them hold it dense; a
        reset builds it lazy again."""
        if self.store == "lazy" and self.params.store == "auto" and "weak_.V_" in state:
            self.store = "dense"
            family = weak_families.get(self.params.weak)
            self.weak_ = family(self.params.n_learners, self.n_labels, self.n_features, self.rng_)
        super().set_state(state)

    @classmethod
    def event_steps(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """N weak learners, each scoring K labels on the input and updating: ``N d K``."""
        return cls.Params.parse(cls.name, params).n_learners * n_features * n_labels

    @classmethod
    def state_nbytes(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """:meth:`Learner.state_nbytes`; with the lazy store, computed here: ``alpha_``, the rng, the
        (K, N) arrays, ``slot_`` and the initial rows, plus :meth:`growth_nbytes`."""
        p = cls.Params.parse(cls.name, params)
        if p.store_for(n_features) == "dense" or n_features < 1 or n_labels < 2:
            return super().state_nbytes(n_features, n_labels, params)
        rows = LazyPerceptronFamily.initial_rows(_lazy_rows(cls.name, p, n_features, n_labels))
        # alpha_ and the (K, N) scale_, sqnorm_, n_; the rng (6 words); slot_ (int32)
        fixed = 8 * p.n_learners * n_labels * (1 + 3) + 6 * 8 + 4 * n_features
        return fixed + 8 * n_labels * p.n_learners * rows + cls.growth_nbytes(n_features, n_labels, params)

    @classmethod
    def growth_nbytes(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """The lazy store's rows from their initial number to its bound (0 for the dense store)."""
        p = cls.Params.parse(cls.name, params)
        if p.store_for(n_features) == "dense" or n_features < 1 or n_labels < 2:
            return super().growth_nbytes(n_features, n_labels, params)
        max_rows = _lazy_rows(cls.name, p, n_features, n_labels)
        return 8 * n_labels * p.n_learners * (max_rows - LazyPerceptronFamily.initial_rows(max_rows))

    @property
    def accepts_sparse(self) -> bool:
        return self.weak_.accepts_sparse

    def decide(
        self, x: np.ndarray | SparseVector, rng: np.random.Generator, eligible: np.ndarray | None = None
    ) -> Decision:
        """The greedy label is the best vote ``f``, drawn uniformly among ties (a fresh booster ties
        every label), then the label from the ``delta`` mix around it. The reported ``probs`` are
        the marginal over the tie-break (``(1 - delta) / t`` on each of t ties plus ``delta / K``);
        the mix given the greedy label, which seed 000's estimates divide by, is kept in
        ``memo["conditional"]`` (:func:`~service.learners.base.over_ties`)."""
        weak = self.weak_
        delta = self.params.delta
        mask = as_mask(eligible, self.n_labels)
        if mask is not None:
            h, f = weak.votes(x, self.alpha_)
            greedy, ties = masked_argmax_ties(f, mask, rng)
            d = masked_decision(greedy, mask, delta, "gamma", rng, {"greedy": greedy}, ties, keep=True)
            d.memo |= {"h": h[:, d.label].copy(), "f": float(f[d.label])}
            return d
        if type(weak) is PerceptronFamily and type(x) is np.ndarray:
            # the default on dense input: votes, their unique maximiser and the sampled label in one
            # compiled call; on a tie the sampling draw goes back (randargmax's draw comes first)
            u = own_random(rng)
            if u is not None:
                label, greedy, p, h, f_label = boost_perceptron_decide(
                    weak.V_, weak.scale_, self.alpha_, x, delta, u
                )
                if label >= 0:
                    return Decision(p, label, {"greedy": greedy, "h": h, "f": f_label})
                rng._unread()  # type: ignore[attr-defined]
            hk, f = np.empty(weak.scale_.shape), np.empty(self.n_labels)  # hk: (K, N)
            greedy = perceptron_votes_greedy_dense(weak.V_, weak.scale_, self.alpha_, x, hk, f)
            ties = [greedy]
            if greedy < 0:  # a tie: drawn as randargmax draws
                greedy, ties = randargmax_ties(f, rng)
            label, p = gamma_mix_sample(greedy, self.n_labels, delta, rng.random())
            d = Decision(p, label, {"greedy": greedy, "h": hk[label].copy(), "f": float(f[label])})
            return over_ties(d, ties, delta, "gamma", keep=True)
        h, f = weak.votes(x, self.alpha_)  # (N, K) and (K,)
        greedy, ties = randargmax_ties(f, rng)
        # gamma_mix + sample in one compiled call (the same floats and label, bit for bit)
        label, p = gamma_mix_sample(greedy, self.n_labels, delta, rng.random())
        d = Decision(p, label, {"greedy": greedy, "h": h[:, label].copy(), "f": float(f[label])})
        return over_ties(d, ties, delta, "gamma", keep=True)

    def relabel(self, x: np.ndarray | SparseVector, decision: Decision, label: int) -> Decision:
        """The memo holds the weak learners' votes ``h`` and the booster's score ``f`` of the drawn
        label: recomputed here for ``label`` (the model as it decided, nothing changed)."""
        h, f = self.weak_.votes(x, self.alpha_)
        memo = {**decision.memo, "h": h[:, label].copy(), "f": float(f[label])}
        return Decision(decision.probs, label, memo)

    def learn(self, x: np.ndarray | SparseVector, decision: Decision, reward: bool) -> None:
        self.t_ += 1
        kappa = decision.label
        y = 1.0 if reward else -1.0
        h = np.asarray(decision.memo["h"], dtype=np.float64)
        p = float(decision.conditional[kappa])  # given the greedy label, as seed 000's estimates
        f = float(decision.memo["f"])
        weak = self.weak_
        if type(weak) is PerceptronFamily and type(x) is np.ndarray:
            # the default on dense input: the step and the Perceptrons' update in one compiled call
            boost_perceptron_learn(
                self.alpha_, h, kappa, y, f, p, self.params.gamma, self.eta,
                weak.V_, weak.scale_, weak.sqnorm_, weak.n_, x,
            )  # fmt: skip
            return
        w = np.empty(h.size)
        boost_step(self.alpha_, h, kappa, y, f, p, self.params.gamma, self.eta, w)
        weak.update(x, kappa, y, w, self.rng_)


def _lazy_rows(owner: str, p: BanditBoostParams, n_features: int, n_labels: int) -> int:
    """:meth:`BanditBoostParams.max_rows`; :class:`ParamError` if the bound holds not one row."""
    rows = p.max_rows(n_features, n_labels)
    if rows < 1:
        need = 4 * n_features + 8 * n_labels * p.n_learners
        raise ParamError(
            f"{owner}: max_store_bytes={p.max_store_bytes} holds no row of the lazy store "
            f"(d={n_features}, K={n_labels}, N={p.n_learners} need at least {need})"
        )
    return rows


_OPTS = {"cache": True, "nogil": True, "boundscheck": False}


@kernel("float64[::1](float64[:], float64, float64)")
def osboost_weights(h: np.ndarray, y: float, gamma: float) -> np.ndarray:
    """OSBoost example weights ``w_bar^(i) = min(1, (1-gamma)^(z^(i-1)/2))`` (seed 000 eqs. 2-3).

    ``z^(i-1) = sum_{j<i} (y h_j - theta)`` with ``theta = gamma / (2 + gamma)``; ``z^(0) = 0``.
    Dividing by ``p(kappa)`` gives the unbiased bandit estimate of eq. (4).
    """
    theta = gamma / (2.0 + gamma)
    rate = 0.5 * math.log1p(-gamma)  # (1-gamma)^(z/2) = exp(z/2 log(1-gamma))
    w = np.empty(h.size)
    z = 0.0
    for i in range(h.size):
        w[i] = min(math.exp(z * rate), 1.0) if z > 0.0 else 1.0  # exp(z rate) >= 1 for z <= 0
        z += y * h[i] - theta
    return w


@kernel("float64[::1](float64[:], float64, float64, float64)")
def hinge_subgradient(h: np.ndarray, y: float, f: float, theta: float) -> np.ndarray:
    """Subgradient of ``max(0, theta - y sum_i alpha_i h_i)`` in alpha at margin ``f`` (seed 000 eq. 5).

    ``-y h`` where the hinge is active, 0 otherwise (0 at the kink, ALGORITHMS.md §4.1). Dividing by
    ``p(kappa)`` gives the unbiased bandit estimate ``l``.
    """
    g = np.zeros(h.size)
    if theta - y * f > 0.0:
        for i in range(h.size):
            g[i] = -y * h[i]
    return g


_STEP = "void(float64[:, ::1], float64[:], int64, float64, float64, float64, float64, float64, float64[::1])"


@kernel(_STEP)
def boost_step(
    alpha: np.ndarray,
    h: np.ndarray,
    kappa: int,
    y: float,
    f: float,
    p: float,
    gamma: float,
    eta: float,
    w: np.ndarray,
) -> None:
    """Steps 3-5 of seed 000 Algorithm 1 for the sampled class kappa, from decision-time ``h``, ``f``.

    Writes the weak learners' example weights ``w^(i) = w_bar^(i) / p`` (eqs. 2-4) into ``w`` and
    applies eq. (6) to ``alpha[:, kappa]`` in place: ``alpha <- alpha exp(-eta l) / Z`` with
    ``l = subgradient / p`` (eq. 5), when the hinge is active.
    """
    theta = gamma / (2.0 + gamma)
    w[:] = osboost_weights(h, y, gamma)
    for i in range(w.size):
        w[i] /= p
    if theta - y * f > 0.0:
        grad = hinge_subgradient(h, y, f, theta)
        a = np.empty(h.size)
        total = 0.0
        for i in range(h.size):
            a[i] = alpha[i, kappa] * math.exp(-eta * (grad[i] / p))
            total += a[i]
        for i in range(h.size):
            alpha[i, kappa] = a[i] / total


@kernel(
    "void(float64[:, ::1], float64[:], int64, float64, float64, float64, float64, float64, "
    "float64[:, :, ::1], float64[:, ::1], float64[:, ::1], int64[:, ::1], float64[:])",
)
def boost_perceptron_learn(
    alpha: np.ndarray,
    h: np.ndarray,
    kappa: int,
    y: float,
    f: float,
    p: float,
    gamma: float,
    eta: float,
    V: np.ndarray,
    scale: np.ndarray,
    sqnorm: np.ndarray,
    n: np.ndarray,
    x: np.ndarray,
) -> None:
    """:func:`boost_step` then the Perceptron family's update of class ``kappa`` on the dense ``x``
    (:func:`~service.learners.weak.family_kernels.perceptron_update_dense`) with its weights: the
    same two calls, one dispatch (about half a microsecond of a round of a few)."""
    w = np.empty(h.size)
    boost_step(alpha, h, kappa, y, f, p, gamma, eta, w)
    perceptron_update_dense(V, scale, sqnorm, n, x, kappa, y, w)


@kernel(
    "Tuple((int64, int64, float64[::1], float64[::1], float64))"
    "(float64[:, :, ::1], float64[:, ::1], float64[:, :], float64[:], float64, float64)",
)
def boost_perceptron_decide(
    V: np.ndarray, scale: np.ndarray, alpha: np.ndarray, x: np.ndarray, delta: float, u: float
) -> tuple[int, int, np.ndarray, np.ndarray, float]:
    """BanditBoost's decide over the Perceptron family on a dense ``x`` with the sampling draw ``u``:
    (label, greedy, p, h[:, label], f[label]), the label -1 when the votes tie (or hold a NaN).

    :func:`~service.learners.weak.family_kernels.perceptron_votes_greedy_dense` then
    :func:`~service.kernels.gamma_mix_sample`, the same calls in one dispatch: on car the Python
    steps between them took as long as the arithmetic.
    """
    n_labels, n_learners = scale.shape
    hk, f = np.empty((n_labels, n_learners)), np.empty(n_labels)
    greedy = perceptron_votes_greedy_dense(V, scale, alpha, x, hk, f)
    if greedy < 0:
        return -1, -1, f, f, 0.0
    label, p = gamma_mix_sample(greedy, n_labels, delta, u)
    return label, greedy, p, hk[label].copy(), f[label]
