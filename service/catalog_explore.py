"""SquareCB's exploration over a whole catalog (issue 54): one decision among thousands of items,
with the exact probability of the item shown and only the top of the ranking.

The action learner ``squarecb-adf`` (:mod:`service.learners.squarecb_adf`) explores by inverse gap
weighting (Foster & Rakhlin 2020, Algorithm 1): with ``c_a`` each candidate's predicted cost and
``b`` the first minimiser, ``p(a) = 1 / (K + gamma (c_a - c_b))`` for ``a != b`` and the rest on
``b``. Over a catalog the same rule runs over every selected item (:class:`service.catalog.Catalog`,
scored by :func:`service.catalog.catalog_scores`), so an item never shown is scored from its
features like any other and drawn with the probability its predicted cost earns, never uniformly.

**How gamma scales with K.** Foster & Rakhlin's regret bound for IGW is ``K / gamma + gamma
Reg_sq`` per round, minimised at ``gamma = sqrt(K / Reg_sq)`` (their Theorem 1 sets
``gamma = sqrt(K T / Reg_sq(T))``): at a given regression error, gamma grows as ``sqrt(K)``. Vowpal
Wabbit's ``--squarecb`` takes ``gamma_t = gamma_scale t^gamma_exponent`` whatever K, and
``squarecb-adf``'s ``gamma_scale`` was tuned on streams of 10 candidates (``bench actions``). Here

    gamma = gamma_scale t^gamma_exponent (max(K, K_ref) / K_ref)^k_exponent,

``K_ref = reference_candidates`` (10): the tuned rule at ``K <= K_ref`` (bit for bit
``squarecb-adf``'s distribution for the same costs). ``k_exponent`` is 0.25, between VW's 0 and the
bound's 0.5, chosen on the tuning seeds of the shop stream (``bench catalog``'s tuning table in
docs/BENCHMARKS.md, "A catalog on the server", where 0 and 0.5 score lower). Why less than the
bound's ``sqrt(K)``: the items share features, so the regression's error does not grow with K as the bound
assumes of K separate arms, and an item is learned from every item like it; Zhu, Foster, Langford &
Mineiro (ICML 2022, "Contextual bandits with large action spaces: made practical") bound the regret
by the features' dimension ``d`` instead of K, and VW's ``--large_action_space`` runs IGW over a
spanner of at most ``--max_actions`` (20 by default) actions of a low-rank embedding. That needs an SVD of
the candidates per decision and an embedding our hashed product rows do not have (not done here).
Why more than 0: with VW's gamma at ``K = 10,000`` the rule's ``K`` in the denominator spreads
much mass over the catalog (at ``t = 10,000``, gamma 30,000, every item of gap 0.3 still gets
``1 / 19,000``).

**Exact propensities.** The probabilities are computed for every item in one compiled pass by
``squarecb-adf``'s own rule (:func:`service.learners.squarecb.igw_scores`: gaps as cost
differences, the rest summed in candidate order), the item is drawn from them by the sampler's
arithmetic (:func:`service.kernels._draw`, one uniform), and the probability reported is the one it
was drawn with (a tie in cost is no exception: the first of the tied items is ``b``, the others get
``1 / (K + 0)`` each). Only the chosen item's probability and the ``top_k`` largest leave the kernel.

**Learning.** A catalog decision learns as a request carrying the shown item alone would
(:meth:`CatalogDecision.learn_input`): ``squarecb-adf``'s step on the item's row, with VW's MTR
importance weight counting one candidate for the event (counting the 10,000 scored would shrink
the weight 10,000-fold; the record of a catalog decision keeps the shown item, not the catalog).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from service._jit_cache import kernel
from service.actions import MAX_ROW_ENTRIES, ActionInput
from service.catalog import Catalog, CatalogError
from service.features import SparseVector
from service.learners.base import Decision
from service.learners.squarecb import igw_scores
from service.learners.squarecb_adf import SquareCBADF

__all__ = ["CatalogDecision", "CatalogExploration", "catalog_pairs", "decide", "decide_parts", "igw_top"]


@dataclass(frozen=True, slots=True)
class CatalogExploration:
    """Hyperparameters of a catalog decision (stored verbatim).

    Parameters
    ----------
    top_k : int, default 10
        Items of the ranking returned (by probability, ties in candidate order).
    reference_candidates : int, default 10
        ``K_ref``: the candidates per decision the learner's ``gamma_scale`` was tuned at.
    k_exponent : float, default 0.25
        ``gamma`` grows as ``(K / K_ref)^k_exponent`` above ``K_ref`` (module docstring: Foster &
        Rakhlin's bound says 0.5, VW's ``--squarecb`` 0; 0.25 the best of ``bench catalog``'s
        tuning seeds).
    """

    top_k: int = 10
    reference_candidates: int = 10
    k_exponent: float = 0.25

    def __post_init__(self) -> None:
        if self.top_k < 1 or self.reference_candidates < 1 or not 0.0 <= self.k_exponent <= 1.0:
            raise ValueError("top_k and reference_candidates must be >= 1, k_exponent in [0, 1]")

    def gamma(self, gamma_t: float, k: int) -> float:
        """``gamma_t (max(K, K_ref) / K_ref)^k_exponent``: ``gamma_t`` itself (same bits) up to ``K_ref``."""
        if k <= self.reference_candidates:
            return gamma_t
        return gamma_t * (k / self.reference_candidates) ** self.k_exponent


@kernel("Tuple((int64, int64, float64, int64[::1], float64[::1]))(float64[::1], float64, float64, int64)")
def igw_top(
    cost: np.ndarray, gamma: float, u: float, k: int
) -> tuple[int, int, float, np.ndarray, np.ndarray]:
    """Inverse gap weighting over every entry of ``cost``: the greedy index ``b`` (first minimiser),
    the index the uniform ``u`` draws, its probability, and the ``k`` most probable indices with
    their probabilities (descending; ties in index order).

    ``p(a) = 1 / (K + gamma (c_a - c_b))`` for ``a != b`` and ``1 - sum`` of those on ``b``, summed
    in index order, and the draw of :func:`service.kernels._draw`: squarecb-adf's own rule,
    :func:`service.learners.squarecb.igw_scores` of the rewards ``-cost``.
    """
    n = cost.size
    # -cost: the gaps r_b - r_a are the costs' differences exactly, as squarecb-adf takes them
    best, label, p = igw_scores(-cost, gamma, u, np.ones(n, np.bool_))
    # The k largest by insertion into a short sorted buffer: one pass, ties keep index order
    m = min(k, n)
    top_i = np.empty(m, np.int64)
    top_p = np.empty(m)
    filled = 0
    for a in range(n):
        if filled == m and p[a] <= top_p[m - 1]:
            continue
        j = filled if filled < m else m - 1
        while j > 0 and top_p[j - 1] < p[a]:
            if j < m:
                top_i[j] = top_i[j - 1]
                top_p[j] = top_p[j - 1]
            j -= 1
        top_i[j] = a
        top_p[j] = p[a]
        if filled < m:
            filled += 1
    return best, label, p[label], top_i, top_p


@dataclass(frozen=True, slots=True)
class CatalogDecision:
    """One decision over catalog items.

    Attributes
    ----------
    slot : int
        The chosen item's slot in the catalog.
    index : int
        Its position among the candidates.
    item_id : str
        Its id.
    probability : float
        The probability it was drawn with.
    greedy : int
        Position of the greedy item among the candidates.
    top : tuple of (str, float)
        The ``top_k`` most probable items and their probabilities, descending.
    candidates : int
        Items the decision was over (``K``).
    gamma : float
        The inverse gap weighting's ``gamma`` at ``K``.
    pairs : bool
        Whether the rows held the context pairs (``context_pairs`` of the learner).
    part : int
        Which catalog of :func:`decide_parts` the chosen item is in (0 for :func:`decide`).
    top_index : tuple of int
        The positions among the candidates of the items of ``top``.
    """

    slot: int
    index: int
    item_id: str
    probability: float
    greedy: int
    top: tuple[tuple[str, float], ...]
    candidates: int
    gamma: float
    pairs: bool
    part: int = 0
    top_index: tuple[int, ...] = ()

    def learn_input(self, catalog: Catalog, context: SparseVector) -> tuple[ActionInput, Decision]:
        """What ``learner.learn`` takes for this decision: the shown item as the one candidate of a
        request (its row is the one scored), and a decision of it with the probability shown."""
        x = catalog.action_input(context, np.array([self.slot], np.int64))
        return x, Decision(np.array([self.probability]), 0, {})


def catalog_pairs(learner: SquareCBADF, catalog: Catalog, context: SparseVector, slots: np.ndarray) -> bool:
    """Whether the rows hold the context pairs: as :meth:`service.actions.ActionInput.pairs` decides
    for each item sent alone (its learn input); :class:`CatalogError` when it would differ between
    the selected items (a context so wide that only the smaller items' rows fit)."""
    nc, bound = context.nnz, learner.params.context_pairs
    if not 2 <= nc <= bound:
        return False
    per_entry = nc + 1 + nc * (nc - 1) // 2  # a row's entries per action entry, pairs included

    def fits(na: int) -> bool:
        return per_entry * (na + 1) <= MAX_ROW_ENTRIES

    counts = catalog.entry_counts(slots)
    largest, smallest = fits(int(counts.max())), fits(int(counts.min()))
    if largest != smallest:
        raise CatalogError(
            f"features: {nc} context features with context pairs make rows of more than "
            f"{MAX_ROW_ENTRIES:,} entries for some items only; send fewer context features"
        )
    return largest


def decide(
    learner: SquareCBADF,
    catalog: Catalog,
    context: SparseVector,
    slots: np.ndarray,
    rng: np.random.Generator,
    exploration: CatalogExploration | None = None,
) -> CatalogDecision:
    """``learner``'s decision over the catalog items of ``slots`` for ``context`` (module docstring):
    their costs in one compiled call (:meth:`Catalog.scores`), inverse gap weighting over all of
    them (:func:`igw_top`, one ``rng.random()``), the chosen item, its probability and the top."""
    return decide_parts(learner, [(catalog, slots)], context, rng, exploration)


def decide_parts(
    learner: SquareCBADF,
    parts: Sequence[tuple[Catalog, np.ndarray]],
    context: SparseVector,
    rng: np.random.Generator,
    exploration: CatalogExploration | None = None,
) -> CatalogDecision:
    """:func:`decide` over the items of several catalogs, in order (a request's candidates sent with
    their features, hashed into a catalog of their own, beside catalog items): one inverse gap
    weighting over all of them; positions count across the parts."""
    if not isinstance(learner, SquareCBADF):
        raise TypeError(f"catalog decisions take squarecb-adf, not {type(learner).__name__}")
    parts = [(c, s) for c, s in parts if len(s)]
    if not parts:
        raise CatalogError("candidates: no catalog item is selected")
    exploration = exploration or CatalogExploration()
    kinds = {catalog_pairs(learner, c, context, s) for c, s in parts}
    if len(kinds) > 1:  # a row's pairs are decided per item sent alone: only a too-wide context differs
        raise CatalogError(
            f"features: {context.nnz} context features with context pairs make rows of more than "
            f"{MAX_ROW_ENTRIES:,} entries for some candidates only; send fewer context features"
        )
    pairs = kinds.pop()
    costs = [c.scores(learner.w_, context, s, pairs) for c, s in parts]
    cost = costs[0] if len(costs) == 1 else np.concatenate(costs)
    gamma_t = learner.params.gamma_scale * float(learner.t_) ** learner.params.gamma_exponent
    gamma = exploration.gamma(gamma_t, cost.size)
    greedy, label, prob, top_i, top_p = igw_top(cost, gamma, rng.random(), exploration.top_k)
    ends = np.cumsum([len(s) for _, s in parts])

    def locate(position: int) -> tuple[int, Catalog, int]:
        k = int(np.searchsorted(ends, position, side="right"))
        catalog, slots = parts[k]
        return k, catalog, int(slots[position - (int(ends[k - 1]) if k else 0)])

    def item_at(position: int) -> str:
        _, c, s = locate(position)
        return c.id_of(s)

    part, catalog, slot = locate(int(label))
    positions = top_i.tolist()
    top = tuple((item_at(i), float(q)) for i, q in zip(positions, top_p.tolist(), strict=True))
    return CatalogDecision(
        slot, int(label), catalog.id_of(slot), float(prob), int(greedy), top, int(cost.size), gamma, pairs,
        part, tuple(positions),
    )  # fmt: skip
