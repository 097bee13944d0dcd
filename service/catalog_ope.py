"""Off-policy evaluation of catalog decisions (issue 54, item 5): IPS and SNIPS of fixed policies
and model snapshots on decisions over a catalog, whose record keeps the chosen item alone.

IPS and SNIPS need, per logged decision, the logging probability of the shown item ``p_i(a_i)``
(the record's) and the target policy's probability of it ``pi_i(a_i)``, which needs every
candidate: :func:`service.catalog_replay.rebuild` recovers them from the model's catalog and its
history, so a catalog decision is weighed as any other (:mod:`service.ope`). Per record, one
rebuild (the catalogs of the versions met are kept a few at a time: :class:`Snapshots`) and, per
policy, ``pi_i(a_i)``:

- ``logged``: ``p_i(a_i)`` itself (weight 1);
- ``uniform``: ``1 / K_i`` over the decision's candidates (after ``eligible`` / ``excluded``);
- ``first``: 1 when the shown item was the first candidate, else 0;
- a ``squarecb-adf`` snapshot (``model:NAME``): its own catalog decision's distribution
  (:meth:`CatalogReplay.pmf`: the catalog's kernel, gamma scaled by K), at the shown item; another
  action learner: its ``decide`` over the rebuilt candidates as an action input.

A record that cannot be rebuilt (its history forgotten past the decision log's retention, a replica
behind it, actions sent with features beside the catalog items, a selection too long to keep) is
left out, and the estimates say how many (``catalog_skipped``) beside how many were weighed
(``catalog``). Learners are not replayed on catalog decisions: a replay accepts a decision with
probability ``min p / p_i``, and the probabilities of an item among thousands leave nearly none.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.catalog import Catalog
from service.catalog_replay import ReplayError, Snapshots, rebuild
from service.learners.base import Learner
from service.learners.squarecb_adf import SquareCBADF

__all__ = ["CatalogLog", "CatalogWeights"]


@dataclass(frozen=True)
class CatalogWeights:
    """What IPS and SNIPS take of the catalog decisions that could be rebuilt.

    Attributes
    ----------
    p : ndarray
        ``p_i(a_i)``, the logged probability of each shown item.
    rewards : ndarray
    pi : dict of str to ndarray
        Each policy's probability of the shown item.
    skipped : int
        Records that could not be rebuilt; ``why`` counts them by reason.
    """

    p: np.ndarray
    rewards: np.ndarray
    pi: dict[str, np.ndarray]
    skipped: int
    why: dict[str, int] = field(default_factory=dict)

    def counts(self) -> dict[str, float]:
        """The figures an estimate carries (module docstring)."""
        return {"catalog": float(self.p.size), "catalog_skipped": float(self.skipped)}


@dataclass
class CatalogLog:
    """The catalog decisions of a log that have a reward (their JSON records), and the model's
    catalog that rebuilds them (None: a log read without the service, none can be)."""

    records: list[Mapping[str, Any]]
    catalog: Catalog | None = None

    def weights(self, policies: Mapping[str, str | Learner], seed: int = 0) -> CatalogWeights:
        """Each policy's probability of each shown item (module docstring), in one pass over the
        records; ``policies``: name -> ``"logged"``, ``"uniform"``, ``"first"`` or a learner."""
        rng = np.random.default_rng(seed)
        p, rewards, why = [], [], Counter[str]()
        pi: dict[str, list[float]] = {name: [] for name in policies}
        snapshots = Snapshots(self.catalog) if self.catalog is not None else None
        for record in self.records:
            if self.catalog is None:
                why["no catalog given"] += 1
                continue
            try:
                rep = rebuild(self.catalog, record, snapshots=snapshots)
            except ReplayError as exc:
                why[str(exc).split(":")[0].split(" (")[0]] += 1
                continue
            p.append(rep.probability)
            rewards.append(float(record["reward"]))
            for name, policy in policies.items():
                pi[name].append(_probability(policy, rep, rng))
        arrays = {k: np.asarray(v) for k, v in pi.items()}
        return CatalogWeights(np.asarray(p), np.asarray(rewards), arrays, sum(why.values()), dict(why))


def _probability(policy: str | Learner, rep: Any, rng: np.random.Generator) -> float:
    """``policy``'s probability of the shown item of the rebuilt decision ``rep``."""
    if policy == "logged":
        return float(rep.probability)
    if policy == "uniform":
        return 1.0 / rep.slots.size
    if policy == "first":
        return float(rep.index == 0)
    assert isinstance(policy, Learner)
    if isinstance(policy, SquareCBADF):
        return float(rep.pmf(policy)[rep.index])
    return float(policy.decide(rep.action_input(), rng).probs[rep.index])
