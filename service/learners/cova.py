"""Conservative one-versus-all (Chen et al., ICDM 2009; seed 004) with PA, Perceptron or weak-learner bases.

ALGORITHMS.md §6; the naive Bayes base of seed 000 Table 2 is the binary family of
:mod:`service.learners.weak.naive_bayes` (ALGORITHMS.md §4.3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from service.features import SparseVector
from service.interactions import (
    exact_pairs,
    expand_pairs,
    input_nonzeros,
    pair_argmax,
    pair_columns,
    pair_pa_update,
    pair_scores,
)
from service.kernels import PA_BASES, pa_update, sparse_scores
from service.learners.base import (
    Decision,
    Learner,
    Params,
    as_mask,
    gamma_mix,
    learners,
    masked_argmax_ties,
    masked_decision,
    over_ties,
    randargmax_ties,
    sample,
    sparse_greedy_ties,
)
from service.learners.weak import BinaryFamily, weak_families

LINEAR_BASES = frozenset({"pa", "pa1", "pa2", "perceptron"})
DEFAULT_INTERACTION_BITS = 18
DEFAULT_PAIR_MAX_NNZ = 64


class COVAParams(Params):
    """Hyperparameters of :class:`ConservativeOVA`.

    Parameters
    ----------
    base : {"pa", "pa1", "pa2", "perceptron", "naive_bayes", "ogd_perceptron"}, default "pa1"
        Binary base learner. Linear: PA, PA-I or PA-II (Crammer et al. 2006, seed 004 eqs. 8-12;
        PA-I was usually best in seed 004) or the classic Perceptron (step 1 on a margin mistake,
        seed 000 Table 2 "C-OVA (Perceptron)"). Weak-learner families with one learner:
        ``"naive_bayes"`` (seed 000 Table 2 "C-OVA (Naive Bayes)") and ``"ogd_perceptron"``, the
        projected OGD Perceptron family BanditBoost uses; seed000-table2 runs it to show why the
        classic Perceptron is the C-OVA column.
    C : float, default 0.1
        Aggressiveness of PA-I and PA-II: the cap (PA-I) or damping (PA-II) of a step. Seed 004
        "arbitrarily set C equal 1" (its reproduction keeps 1); the default is ours, the best of
        ``sweep-defaults`` on car, dna and nursery (mean online error 0.114 against 0.140 at C = 1):
        smaller steps let one no-click move a scorer less.
    interactions : {"none", "auto", "pairs"}, default "auto"
        Ours (not seed 004; issue 24): ``"pairs"`` scores ``x`` together with every product ``x_i
        x_j`` of two of its non-zero features, as Vowpal Wabbit's ``-q`` (:mod:`service.interactions`),
        at O(nnz^2) work per event. ``"auto"`` does so only where pairs are cheap and exact: a model
        whose ``d (d - 1) / 2`` pairs fit in ``2**interaction_bits`` columns of their own (small
        dense inputs: one-hot rows such as car's 21 columns, or a few hundred features), and there
        only for inputs with at most ``pair_max_nnz`` non-zeros, so an input of hundreds of dense
        features does not cost a hundred thousand products per request. Large ``d`` (over 724 at
        the default bits, so hashed input from ``hashing_bits`` = 10 up) gets no pairs under
        ``"auto"``: on ``bench sparse``'s hashed stream (a linear teacher) hashed pairs raised the
        error from 0.05 to about 0.2 at 15x the time per event; ask for ``"pairs"`` there.
        ``"auto"`` is the default: the best of ``sweep-defaults`` on car, dna and nursery (mean
        online error 0.060 against 0.114 without pairs at C = 0.1).
        Weak-learner bases take no pairs (``"auto"`` is ``"none"`` for them). Memory: ``K (d + P)``
        weights, ``P <= 2**interaction_bits``.
    interaction_bits : int, default 18
        The pairs take their own column each while ``d (d - 1) / 2 <= 2**interaction_bits``, else
        (``"pairs"`` only) they are hashed into ``2**interaction_bits`` columns.
    pair_max_nnz : int, default 64
        ``"auto"``'s bound on an input's non-zeros (64: at most 2,016 products).
    epsilon : float, default 0
        Ours (seed 004 never explores): an exploration floor, ``p(r) = (1 - epsilon) 1[r = greedy]
        + epsilon / K``, so every label keeps probability at least ``epsilon / K`` and the decision
        log supports off-policy evaluation. The update is unchanged: Algorithm 1's conservative
        step on the label shown, whichever drew it. 0 is the paper's learner; the served default
        learner (:data:`service.config.DEFAULT_LEARNER`) sets it.

    ``interactions``, ``interaction_bits`` and ``pair_max_nnz`` are left out of the dumped
    parameters at the values they had before they existed (``"none"``, 18, 64; :attr:`omit_at`), so
    every setting that existed before them dumps as it did (runs are stored under that JSON); a
    model stored before the default became ``"auto"`` keeps ``"none"`` (:meth:`Params.legacy`).
    The paper reproductions pass ``interactions="none"`` explicitly.
    """

    base: Literal["pa", "pa1", "pa2", "perceptron", "naive_bayes", "ogd_perceptron"] = "pa1"
    C: float = Field(0.1, gt=0.0)
    interactions: Literal["none", "auto", "pairs"] = "auto"
    interaction_bits: int = Field(DEFAULT_INTERACTION_BITS, ge=1, le=28)
    pair_max_nnz: int = Field(DEFAULT_PAIR_MAX_NNZ, ge=2)
    epsilon: float = Field(0.0, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _pairs_need_linear(self) -> COVAParams:
        if self.interactions == "pairs" and self.base not in LINEAR_BASES:
            raise ValueError(f"interactions='pairs' needs a linear base ({', '.join(sorted(LINEAR_BASES))})")
        return self

    omit_at: ClassVar[dict[str, Any]] = {
        "interactions": "none",
        "interaction_bits": DEFAULT_INTERACTION_BITS,
        "pair_max_nnz": DEFAULT_PAIR_MAX_NNZ,
        "epsilon": 0.0,
    }

    def pairs(self, n_features: int) -> bool:
        """Whether a learner with these parameters and ``n_features`` inputs has columns for pairs:
        always under ``"pairs"``; under ``"auto"`` for a linear base whose pairs get exact columns."""
        if self.interactions == "pairs":
            return True
        exact = exact_pairs(n_features, self.interaction_bits)
        return self.interactions == "auto" and self.base in LINEAR_BASES and exact


FAMILY_BASES = {"naive_bayes": "naive_bayes", "ogd_perceptron": "perceptron"}  # base -> weak family


def pa_step(loss: np.ndarray | float, sqnorm: float, base: str, C: float) -> np.ndarray | float:
    """Step sizes ``tau`` for hinge losses ``loss``: the PA family (seed 004, eqs. 10-12) or the Perceptron.

    The Perceptron steps by 1 exactly on margin mistakes ``y w.x <= 0``, i.e. hinge loss >= 1.
    """
    if base == "perceptron":
        return np.greater_equal(loss, 1.0) * 1.0
    if base == "pa":
        return loss / sqnorm
    if base == "pa1":
        return np.minimum(C, loss / sqnorm)
    return loss / (sqnorm + 1.0 / (2.0 * C))


@learners.register("cova")
class ConservativeOVA(Learner):
    """Conservative OVA: K binary linear scorers updated only from what a click reveals.

    Input and rewards: Learns a click bit: a graded reward reaches it as a Bernoulli(reward) bit
    (:func:`service.sampling.reward_bit`), unbiased but noisier than the value (issue 50). Needs
    input scaled to about [-1, 1]: what it learns changes with a feature's unit, so one raw number
    (a price, a count) beside one-hot features hurts it (``bench invariance``, docs/BENCHMARKS.md).

    Prediction is loss-based decoding with the hinge loss, ``argmin_r d_L(M(r), f(x))``, which
    equals ``argmax_r f_r(x)`` (ALGORITHMS.md §6, verified identity); ties at random. Seed 004 does
    not explore: the greedy label is shown with probability 1 (``epsilon = 0``, the default of this
    class); ``epsilon > 0`` (ours) mixes in a uniform floor. Update (seed 004, Algorithm 1):

    * click (``yhat = y``): every scorer s takes a PA step on ``(x, +1 if s = yhat else -1)``;
    * no click: only scorer ``yhat`` takes a PA step on ``(x, -1)``.

    Graded rewards (issue 38): its update is built on the click bit, so it learns the Bernoulli(r)
    bit the runtime draws for a reward r in (0, 1) from the decision id
    (:func:`service.sampling.reward_bit`, ``graded = False``): unbiased for the reward in expectation.

    Eligible labels (ours): the greedy label is the best eligible scorer and the ``epsilon`` floor
    spreads over the m eligible labels (``epsilon / m``); the update is unchanged, since a click on
    the shown label still says every other label, eligible or not, is wrong, and a no-click says
    the shown one is. C-OVA uses no importance weight, so nothing divides by a probability.

    A PA (or Perceptron) step on ``(x, y)`` is ``w += tau y x`` with ``tau`` from :func:`pa_step`;
    nothing happens when the hinge loss is 0 or ``x = 0``. With a weak-learner base the scorers are
    the K binary models of a family with one learner, ``f_s(x) = h_s(x)`` (for naive Bayes
    ``2 P(+1 | x) - 1``, ALGORITHMS.md §4.3), and a step is that model's update with weight 1.

    Attributes
    ----------
    W_ : ndarray of shape (K, d)
        Linear bases: row s is the weight vector of binary scorer s.
    weak_ : BinaryFamily
        Weak-learner bases: the K binary scorers.

    References
    ----------
    G. Chen, G. Chen, J. Zhang, S. Chen, C. Zhang. Beyond Banditron: a conservative and efficient
    reduction for online multiclass prediction with bandit setting model. ICDM 2009.

    Examples
    --------
    >>> import numpy as np
    >>> from service.learners import make_learner
    >>> m = make_learner("cova", 2, 3, {"base": "pa", "interactions": "none"})
    >>> x = np.array([1.0, 1.0])
    >>> d = m.decide(x, np.random.default_rng(0))
    >>> m.learn(x, d, False)
    >>> (m.W_[d.label] @ x).item()
    -1.0
    """

    name = "cova"
    Params = COVAParams
    params: COVAParams
    kernels = ("service.kernels", "service.interactions")

    @classmethod
    def kernel_modules(cls, params: Mapping[str, Any] | None = None) -> tuple[str, ...]:
        if cls.Params.parse(cls.name, params).base in LINEAR_BASES:
            return cls.kernels
        return ("service.kernels", "service.learners.weak.family_kernels")

    _column_major = ("W_",)

    def _init(self) -> None:
        self._pairs = 0  # columns of the pairwise products (0: no interactions)
        if self.params.pairs(self.n_features):
            self._pairs = pair_columns(self.n_features, self.params.interaction_bits)
        # "pairs": every input; "auto": inputs with at most pair_max_nnz non-zeros
        self._max_nnz = self.params.pair_max_nnz if self.params.interactions == "auto" else -1
        # every pair its own column: the fused kernels score and update without building the expansion
        self._exact = self._pairs > 0 and exact_pairs(self.n_features, self.params.interaction_bits)
        if self.params.base in LINEAR_BASES:
            self.W_ = np.zeros((self.n_labels, self.n_features + self._pairs))
            if self._pairs:  # every input is scored sparse: the K weights of a column together
                self.use_sparse_layout()
        else:
            family = weak_families.get(FAMILY_BASES[self.params.base])
            self.weak_: BinaryFamily = family(1, self.n_labels, self.n_features, self.rng_)

    @property
    def accepts_sparse(self) -> bool:
        return self.params.base in LINEAR_BASES

    @classmethod
    def state_nbytes(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        p = cls.Params.parse(cls.name, params)
        # the state without pairs (whether tiny probes get pairs under "auto" depends on their d),
        # plus W_'s columns of the pairs
        plain = super().state_nbytes(
            n_features, n_labels, p.model_dump(mode="json") | {"interactions": "none"}
        )
        if not p.pairs(n_features):
            return plain
        return plain + 8 * n_labels * pair_columns(n_features, p.interaction_bits)

    def _nonzeros(self, x: np.ndarray | SparseVector) -> tuple[np.ndarray, np.ndarray, bool]:
        """The input's non-zeros and whether its pairs count (``"auto"``: at most pair_max_nnz)."""
        idx, val, _ = input_nonzeros(x)
        return idx, val, not 0 <= self._max_nnz < idx.size

    def decide(
        self, x: np.ndarray | SparseVector, rng: np.random.Generator, eligible: np.ndarray | None = None
    ) -> Decision:
        """The greedy label is the best scorer, drawn uniformly among tied ones (a fresh model, or a
        context of unseen features, ties every label); with ``epsilon > 0`` the label is then drawn
        from the floor's mix around it. The reported ``probs`` are the marginal over the tie-break,
        ``(1 - epsilon) / t`` on each of t tied labels plus ``epsilon / K`` (1/3 each for three
        tied labels), the probability each label was really drawn with
        (:func:`~service.learners.base.over_ties`); the update uses no probability."""
        eps = self.params.epsilon
        mask = as_mask(eligible, self.n_labels)
        if mask is not None:
            greedy, ties = masked_argmax_ties(self.scores(x), mask, rng)
            return masked_decision(greedy, mask, eps, "gamma", rng, {"greedy": greedy}, ties)
        if self._exact:
            idx, val, paired = self._nonzeros(x)
            if paired:
                greedy, count = pair_argmax(self.W_, idx, val, self.n_features)
                ties = [greedy]
                if count > 1:
                    greedy, ties = randargmax_ties(pair_scores(self.W_, idx, val, self.n_features), rng)
            else:
                greedy, ties = sparse_greedy_ties(self.W_, idx, val, rng)
            return over_ties(self._explore(greedy, rng), ties, eps, "gamma")
        if self._pairs:
            x = expand_pairs(x, self._pairs, self._max_nnz)
        if self.params.base in LINEAR_BASES:
            idx, val = self._columns(x)
            greedy, ties = sparse_greedy_ties(self.W_, idx, val, rng)
        else:
            greedy, ties = randargmax_ties(self.weak_.scores(x)[0], rng)
        return over_ties(self._explore(greedy, rng), ties, eps, "gamma")

    def scores(self, x: np.ndarray | SparseVector) -> np.ndarray:
        """The K scorers' values ``f_s(x)`` (the masked decision's argmax; the unmasked one finds its
        maximiser without building them where it can)."""
        if self._exact:
            idx, val, paired = self._nonzeros(x)
            if paired:
                return pair_scores(self.W_, idx, val, self.n_features)
            return sparse_scores(self.W_, idx, val)
        if self._pairs:
            x = expand_pairs(x, self._pairs, self._max_nnz)
        if self.params.base in LINEAR_BASES:
            return sparse_scores(self.W_, *self._columns(x))
        return self.weak_.scores(x)[0]

    def _explore(self, greedy: int, rng: np.random.Generator) -> Decision:
        """The greedy label with probability 1 (seed 004), or with the ``epsilon`` floor mixed in
        and the label drawn from ``rng`` after the tie-break's draws."""
        if self.params.epsilon == 0.0:
            p = np.zeros(self.n_labels)
            p[greedy] = 1.0
            return Decision(p, greedy, {"greedy": greedy})
        p = gamma_mix(self.n_labels, greedy, self.params.epsilon)
        return Decision(p, sample(p, rng), {"greedy": greedy})

    def learn(self, x: np.ndarray | SparseVector, decision: Decision, reward: bool) -> None:
        if self.params.base not in LINEAR_BASES:
            assert not isinstance(x, SparseVector)
            self._learn_weak(x, decision.label, reward)
            return
        self.t_ += 1
        if self._exact:
            idx, val, paired = self._nonzeros(x)
            base = PA_BASES[self.params.base]
            if paired:
                pair_pa_update(
                    self.W_, idx, val, self.n_features, decision.label, reward, base, self.params.C
                )
            else:
                pa_update(self.W_, idx, val, decision.label, reward, base, self.params.C)
            return
        if self._pairs:
            x = expand_pairs(x, self._pairs, self._max_nnz)
        # the steps of seed 004's Algorithm 1 on the non-zero columns, compiled (O(K nnz)); nothing
        # moves where x = 0 (PA is 0/0 there, PA-I and PA-II would not move: ALGORITHMS.md §6)
        idx, val = self._columns(x)
        pa_update(self.W_, idx, val, decision.label, reward, PA_BASES[self.params.base], self.params.C)

    def _columns(self, x: np.ndarray | SparseVector) -> tuple[np.ndarray, np.ndarray]:
        """The non-zero columns of ``x`` for the compiled kernels, a dense ``x`` included: its sums
        then run in index order, as for a sparse one. numpy's ``W @ x`` would hand them to the BLAS
        kernel of the CPU at hand, whose order differs between CPU kinds (OpenBLAS for AVX2 and for
        AVX-512), and replicas on different machines would drift apart
        (``tests/service/learners/test_cpu_determinism.py``)."""
        if isinstance(x, SparseVector):
            return x.idx, x.val
        x = np.asarray(x, dtype=np.float64)
        if x.shape != (self.W_.shape[1],):
            raise ValueError(f"x has shape {x.shape}, expected ({self.W_.shape[1]},)")
        idx, val, _ = input_nonzeros(x)
        return idx, val

    def _learn_weak(self, x: np.ndarray, yhat: int, reward: bool) -> None:
        """Seed 004 Algorithm 1 with weak-learner steps: all K models on a click, else model yhat."""
        self.t_ += 1
        one = np.ones(1)
        if reward:
            for s in range(self.n_labels):
                self.weak_.update(x, s, 1.0 if s == yhat else -1.0, one, self.rng_)
        else:
            self.weak_.update(x, yhat, -1.0, one, self.rng_)
