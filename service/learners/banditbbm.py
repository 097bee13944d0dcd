"""BanditBBM, "OptBandit" (Zhang, Jung, Tewari, AISTATS 2019, Algorithm 2; ALGORITHMS.md §2.6)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from pydantic import Field

from service.kernels import rho_mix_sample
from service.learners.base import (
    Decision,
    as_mask,
    learners,
    masked_argmax_ties,
    masked_decision,
    over_ties,
    randargmax_ties,
)
from service.learners.bbm_kernels import CostMemo, bbm_cost_vectors, bbm_learn, cost_operands
from service.learners.booster_costs import (
    BanditTreeBoosterParams,
    Ties,
    TreeBooster,
    bbm_cost_matrix,
)
from service.learners.booster_kernels import bbm_decide, loss_iota
from service.sampling import own_random


class BanditBBMParams(BanditTreeBoosterParams):
    """Hyperparameters of :class:`BanditBBM` (and those of :class:`BanditTreeBoosterParams`).

    Parameters
    ----------
    rho : float, default 0.01
        Exploration rate of eq. (2) (see :class:`BanditTreeBoosterParams`).
    gamma : float, default 0.2
        Edge of the weak-learning condition; fixes the baseline ``u^r = (1-gamma)/k 1 + gamma e_r``
        (the reference code's example uses 0.1; seed 001's table keeps it).
    potential : {"exact", "mc"}, default "exact"
        Exact generating-function potential (memoised; affordable for small k and N), or the
        reference code's Monte Carlo estimate with 100 draws from the learner's generator.
    ties : {"random", "pessimistic"}, default "random"
        Tie convention of the zero-one loss inside the potential (random: the bandit reference code
        and the prediction rule).
    unclicked_label : {"argmin", "random"}, default "argmin"
        Label a tree gets on an unclicked round: the minimiser of its cost vector (the §2.8
        reduction, the paper), or, for comparison with the reference code's BBM path (§2.8, §3.3;
        not in the paper), a label uniform among those other than the greedy one. The weights are
        the reduction's either way.
    split_confidence : (float, float), default (0.01, 0.9)
        The papers' range (ALGORITHMS.md §2.10), not the wide one of
        :class:`BanditTreeBoosterParams` (1e-11 to 1e-10), with the rest of its schedule (ours). A
        tree's Hoeffding bound counts the weight its leaf has seen, and BanditBBM's weights are sums
        of differences of potentials (probabilities, each at most 1) where AdaBandit's logistic
        costs reach ``k - 1``: at the wide range a BanditBBM leaf waits for far more examples before
        its bound can pass (on digits' first 1,500 rounds about 12 leaves per tree against
        AdaBandit's 85; ``tests/service/learners/test_banditbbm.py``).

    N = 20, rho = 0.01, gamma = 0.2 are the best setting of ``clickboost sweep-defaults`` (car,
    dna, nursery, digits, with the split schedule below; docs/BENCHMARKS.md); its grid stops at rho
    = 0.01. The trees' split schedule at the defaults is ours (:class:`BanditTreeBoosterParams`,
    issue 41), and its split confidence the better of the two on those tuning sets (``bench
    boosters`` prints the comparison).
    """

    n_learners: int = Field(20, ge=1, le=150)
    rho: float = Field(0.01, gt=0.0, lt=1.0)
    gamma: float = Field(0.2, gt=0.0, lt=1.0)
    potential: Literal["exact", "mc"] = "exact"
    ties: Ties = "random"
    unclicked_label: Literal["argmin", "random"] = "argmin"
    split_confidence: tuple[float, float] = (0.01, 0.9)


def bbm_costs(
    weak: np.ndarray,
    k: int,
    gamma: float,
    ties: Ties,
    truth: np.ndarray,
    rng: np.random.Generator | None,
    memo: CostMemo | None = None,
) -> np.ndarray:
    """Cost vectors ``Gamma^i truth`` of all learners, eq. (9) with ``Gamma^i`` at ``s^{i-1}``.

    ``truth`` is ``iota_hat`` (bandit, eq. (5)) or ``e_y`` (full information); ``N - i`` learners
    remain after learner ``i`` (1-based) votes. ``memo`` caches the exact potential's rows per vote
    state (:class:`~service.learners.bbm_kernels.CostMemo`; the result is the same without it).
    """
    if rng is None:  # exact: compiled (bbm_kernels), the same numbers to ~1e-15
        return bbm_cost_vectors(weak, k, gamma, ties == "pessimistic", truth, memo)
    n = weak.size
    s = np.zeros(k, dtype=np.int64)
    out = np.empty((n, k))
    for i in range(n):
        out[i] = bbm_cost_matrix(n - 1 - i, s, gamma, ties, rng) @ truth
        s[weak[i]] += 1
    return out


@learners.register("banditbbm", "optbandit")
class BanditBBM(TreeBooster):
    """Boost-by-majority from bandit feedback with Hoeffding-tree weak learners.

    Input and rewards: Learns a click bit: a graded reward reaches it as a Bernoulli(reward) bit
    (:func:`service.sampling.reward_bit`), unbiased but noisier than the value (issue 50). Needs
    input scaled to about [-1, 1]: what it learns changes with a feature's unit, so one raw number
    (a price, a count) beside one-hot features hurts it (``bench invariance``, docs/BENCHMARKS.md).

    ``alpha^i = 1`` and the greedy label is the plain majority vote ``randargmax s^N``, explored with
    eq. (2). Reported probabilities (issue 50): a tied majority is broken uniformly and ``probs`` is
    the marginal over that draw (:func:`~service.learners.base.over_ties`); eq. (2)'s mix given the
    greedy label, which estimator (4) divides by, is kept in ``memo["conditional"]``. The trees' own
    tie-breaks (a leaf that has seen nothing ties its labels, so a new model's votes are random) are
    conditioned on, not averaged over: independent of the reward, so ``probs`` remains a valid
    propensity for IPS, but not the marginal over them (an exact one sums over every vote vector).

    From the click bit, ``iota_hat = 1 - ell_hat`` (eq. (4)); tree ``i`` receives
    ``Gamma^i iota_hat`` (eqs. (5), (9)), ``Gamma^i[l, r] = phi^r_{N-i}(s^{i-1} + e_l)`` with the
    boost-by-majority potential, through the (label, weight) reduction of §2.8.

    Graded rewards (issue 38): its update is built on the click bit, so it learns the Bernoulli(r)
    bit the runtime draws for a reward r in (0, 1) from the decision id
    (:func:`service.sampling.reward_bit`, ``graded = False``): unbiased for the reward in expectation.

    Eligible labels (ours): the trees vote as always and the greedy label is the eligible label with
    the most votes (ties among them at random); eq. (2) spreads ``rho`` over the m eligible labels
    (``rho`` capped at ``(m-1)/m``), and ``iota_hat`` (eq. (4)) divides by those probabilities,
    unbiased for every true label in the set. (Trees voting for their best eligible label instead,
    as AdaBandit's do, measured worse here: 0.285 against 0.167 online error on
    ``tests/service/learners/test_eligible.py``'s streams.)

    References
    ----------
    D. Zhang, Y. H. Jung, A. Tewari. Online multiclass boosting with bandit feedback. AISTATS 2019.

    Examples
    --------
    >>> import numpy as np
    >>> from service.learners import make_learner
    >>> m = make_learner("optbandit", 2, 3, {"n_learners": 3, "rho": 0.3}, seed=0)
    >>> d = m.decide(np.array([0.0, 1.0]), np.random.default_rng(0))
    >>> sorted(d.memo), round(float(d.probs.max()), 6), float(d.conditional.max())  # a tied majority
    (['conditional', 'greedy', 'leaves', 'tree_nodes', 'weak'], 0.333333, 0.7)
    """

    name = "banditbbm"
    kernels = (
        "service.kernels",
        "service.learners.bbm_kernels",
        "service.learners.booster_kernels",
        "service.learners.weak.forest_kernels",
    )
    Params = BanditBBMParams
    params: BanditBBMParams

    def prepare(self) -> None:
        """The exact potential's tables of (K, N) (0.6 s at K = 200, 5.6 s at K = 500 with N = 20,
        held by the kernels' cache), built by one call with a zero truth, which computes no cost."""
        if self.params.potential == "exact":
            k, n = self.n_labels, self.params.n_learners
            bbm_cost_vectors(np.zeros(n, dtype=np.int64), k, self.params.gamma, False, np.zeros(k))

    @classmethod
    def event_steps(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """With the tables built (:meth:`prepare`), a learn computes the potential's rows of the
        vote states it meets first: N states of K^2 entries, each a sum over the groups of equal
        counts (at most N + 1): about 2 N^2 K^2 steps at worst (a first learn took 90 ms at N = 20,
        K = 373 on the test machine, 3 ms at K = 200 where the votes fell in fewer groups); the Monte
        Carlo potential draws 100 vote vectors per (learner, label) pair."""
        p = cls.Params.parse(cls.name, params)
        n, k = p.n_learners, n_labels
        work = 2 * n * n * k**2 if p.potential == "exact" else 100 * n * k**2
        return work + n * (n_features + k)

    @classmethod
    def event_nbytes(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """The cost vectors and the potential's rows: about 24 N K^2 bytes (the first learn's peak)."""
        n = cls.Params.parse(cls.name, params).n_learners
        return 24 * n * n_labels**2 + super().event_nbytes(n_features, n_labels, params)

    def _memo(self, n_learners: int) -> CostMemo:
        """The exact potential's cache, made on first use (a cache, not state: its name does not end
        with ``_``, so it is neither saved nor compared)."""
        key = (self.n_labels, max(n_learners, 1), self.params.gamma, self.params.ties == "pessimistic")
        memo = getattr(self, "_cost_memo", None)
        if memo is None or memo.config != key:
            memo = self._cost_memo = CostMemo(*key)
        return memo

    def _decide_arrays(self) -> tuple[np.ndarray, ...]:
        """What :func:`bbm_decide` fills: p, weak, leaves, counts."""
        n, k = self.params.n_learners, self.n_labels
        return np.empty(k), np.empty(n, np.int64), np.empty(n, np.int64), np.empty(k, np.int64)

    def decide(self, x: np.ndarray, rng: np.random.Generator, eligible: np.ndarray | None = None) -> Decision:
        mask = as_mask(eligible, self.n_labels)
        if mask is not None:  # the compiled call for the trees' votes only, then the eligible majority
            U = rng.random(self.params.n_learners * self.n_labels)
            p, weak, leaves, counts = self._decide_arrays()
            bbm_decide(self.trees_.routing(x), U, self.params.rho, -1.0, p, weak, leaves, counts)
            greedy, ties = masked_argmax_ties(counts.astype(np.float64), mask, rng)
            memo = {
                "greedy": greedy,
                "weak": weak,
                "leaves": leaves,
                "tree_nodes": self.trees_.n_nodes_.copy(),
            }
            return masked_decision(greedy, mask, self.params.rho, "rho", rng, memo, ties, keep=True)
        # rand_rows_argmax's draws, then the sampling draw taken before the majority is known: on a
        # tie it goes back, since randargmax of the counts draws first
        U = rng.random(self.params.n_learners * self.n_labels)
        u = own_random(rng)
        p, weak, leaves, counts = self._decide_arrays()
        label, greedy = bbm_decide(
            self.trees_.routing(x), U, self.params.rho, -1.0 if u is None else u, p, weak, leaves, counts
        )
        ties = [greedy]
        if label < 0:
            if u is not None:
                rng._unread()  # type: ignore[attr-defined]
            if greedy < 0:
                greedy, ties = randargmax_ties(counts, rng)
            label, p = rho_mix_sample(
                greedy, self.n_labels, self.params.rho, rng.random()
            )  # rho_mix + sample
        memo = {"greedy": greedy, "weak": weak, "leaves": leaves, "tree_nodes": self.trees_.n_nodes_.copy()}
        return over_ties(Decision(p, label, memo), ties, self.params.rho, "rho", keep=True)

    def learn(self, x: np.ndarray, decision: Decision, reward: bool) -> None:
        self.t_ += 1
        p = self.params
        m = decision.memo
        weak = np.ascontiguousarray(m["weak"], dtype=np.int64)
        probs = decision.conditional  # eq. (2)'s mix given the greedy label, as estimator (4) takes it
        label, greedy = int(decision.label), int(m["greedy"])
        if p.potential == "exact" and (reward or p.unclicked_label == "argmin"):
            # one compiled call: iota, the cost vectors, the reduction and the trees' update (bbm_kernels)
            pessimistic = p.ties == "pessimistic"
            costs = cost_operands(self.n_labels, weak.size, p.gamma, pessimistic, self._memo(weak.size))
            self._learn_forest(bbm_learn, x, m, probs, label, greedy, bool(reward), weak, costs)
            return
        _, iota = loss_iota(probs, label, greedy, bool(reward))  # loss_estimate, compiled, and 1 - ell
        mc = self.rng_ if p.potential == "mc" else None
        memo = None if mc is not None else self._memo(weak.size)
        C = bbm_costs(weak, self.n_labels, p.gamma, p.ties, iota, mc, memo)
        if reward or p.unclicked_label == "argmin":
            self._train_trees(x, C, label if reward else None, m)
            return
        others = np.delete(np.arange(self.n_labels), greedy)
        self._train_trees(x, C, None, m, labels=self.rng_.choice(others, size=C.shape[0]))
