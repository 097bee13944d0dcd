"""What the action-feature learners share (issue 39): the input, the exploration over candidates.

An action-feature learner (:attr:`Learner.actions`) serves models with ``"actions": "features"``.
Its ``decide(x, rng, eligible)`` takes an :class:`service.actions.ActionInput` (the context and the
request's candidates, one sparse row each) and returns a :class:`~service.learners.base.Decision`
over the request's ``n`` candidates: ``probs`` of length ``n`` in request order, ``label`` the
index of the candidate shown. ``eligible`` is a boolean mask of the ``n`` candidates (the runtime
builds it from action ids), handled as the label learners handle theirs (``as_mask``, the masked
argmax and mixing rules of :mod:`service.learners.base`, the mask in ``memo["eligible"]``).
``learn(x, decision, reward)`` updates one weight vector over the rows from the shown candidate's
row. The learner is built with ``n_features = 2**hashing_bits`` (the rows' columns) and
``n_labels = 1`` (one scorer shared by every candidate).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from service.actions import MAX_ROW_ENTRIES
from service.learners.base import Learner

__all__ = ["ActionLearner"]


class ActionLearner(Learner):
    """Base class of the action-feature learners: one weight vector over the candidates' rows."""

    actions: ClassVar[bool] = True

    @property
    def accepts_sparse(self) -> bool:
        return True

    @classmethod
    def state_nbytes(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """Bytes of the state, which grows affinely in ``n_features`` and not with K: read off
        learners of 1 and 2 columns, without allocating the real one."""
        one, two = (cls(d, 1, params).nbytes() for d in (1, 2))
        return one + (two - one) * (n_features - 1)

    @classmethod
    def event_steps(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """At most :data:`service.actions.MAX_ROW_ENTRIES` row entries are built and scored per
        request, whatever ``n_features``."""
        return 2 * MAX_ROW_ENTRIES

    @classmethod
    def event_nbytes(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        return 32 * MAX_ROW_ENTRIES
