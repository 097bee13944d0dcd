"""BinBandit: BanditBoost (Chen, Lin, Lu 2014) with binary Hoeffding trees, the seed-001 baseline."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from service.learners.banditboost import BanditBoost, BanditBoostParams
from service.learners.base import learners
from service.learners.weak.hoeffding_tree import upgrade_entry_keys


class BinBanditParams(BanditBoostParams):
    """:class:`BanditBoostParams` with the binary Hoeffding-tree family, N = 20 trees per class and
    ``delta = 0.05``: the best setting of ``clickboost sweep-defaults`` (car, dna, nursery;
    docs/BENCHMARKS.md).

    Seed 001 compares at equal exploration with ``delta = rho k / (k-1)`` (ALGORITHMS.md, the
    exploration table); pass ``delta`` accordingly.
    """

    weak: str = "hoeffding_tree"
    n_learners: int = Field(20, ge=1)
    delta: float = Field(0.05, gt=0.0, lt=1.0)


@learners.register("binbandit")
class BinBandit(BanditBoost):
    """The BinBandit column of seed 001 Table 1: BanditBoost over binary Hoeffding trees.

    Input and rewards: Learns a click bit: a graded reward reaches it as a Bernoulli(reward) bit
    (:func:`service.sampling.reward_bit`), unbiased but noisier than the value (issue 50). Needs
    input scaled to about [-1, 1]: what it learns changes with a feature's unit, so one raw number
    (a price, a count) beside one-hot features hurts it (``bench invariance``, docs/BENCHMARKS.md).

    Exactly seed 000's Algorithm 1 as :class:`~service.learners.banditboost.BanditBoost` implements
    it, so none of the reference re-implementation's deviations (ALGORITHMS.md §4.4: the dropped
    learner in ``z``, the missing ``/2``, gradient ascent without ``1/p``) are copied. The weak
    learners are N binary trees per class (:mod:`service.learners.weak.hoeffding_binary`).

    Graded rewards (issue 38): as BanditBoost, it learns the Bernoulli(r) bit the runtime draws for a
    reward r in (0, 1) from the decision id (:func:`service.sampling.reward_bit`).
    """

    name = "binbandit"
    # Its state (binary Hoeffding trees, alpha) did not change when BanditBoost's did (version 2);
    # 2: the trees' entry keys are ``class * d + feature`` (:func:`upgrade_entry_keys`)
    schema_version = 2
    Params = BinBanditParams
    params: BinBanditParams

    def upgrade_state(self, state: dict[str, Any], version: int) -> None:
        """Schema 1 (entry keys ``feature * k + class``) to 2: :func:`upgrade_entry_keys` on the
        two-class trees (a weak family without trees has nothing to rewrite)."""
        if version != 1:
            super().upgrade_state(state, version)
        if "weak_.forest_.key_" in state:
            upgrade_entry_keys(state, "weak_.forest_.", self.n_features, 2)
