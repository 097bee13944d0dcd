"""The runtime's own errors, and the rule of a client-chosen decision id.

:mod:`service.api.errors` turns them into answers: :class:`NoSuchModelError` 404 (listing the
models to the admin key only), :class:`ModelUnavailableError` 503 with ``Retry-After``; a bad
client-chosen id is a :class:`~service.learners.base.ParamError` (422).
"""

from __future__ import annotations

from service.learners.base import ParamError
from service.store import UnknownModelError
from service.store.base import check_decision_id

__all__ = ["ModelUnavailableError", "NoSuchModelError", "check_event_id"]


def check_event_id(event_id: str) -> str:
    """``event_id`` if it is a valid client-chosen decision id (:func:`check_decision_id`, the one rule
    of every route and store), else :class:`ParamError` (422) naming the rule. The Redis store appends
    ".{slot tag}" to every id, and a tag has no dot, so the last dot still separates the tag and two
    (model, id) pairs never share a routed id."""
    try:
        return check_decision_id(event_id)
    except ValueError as exc:
        raise ParamError(str(exc)) from None


class ModelUnavailableError(Exception):
    """The store has the model but this process cannot load it (503; retried with back-off)."""


class NoSuchModelError(UnknownModelError):
    """No model of this name (or no name and no default): ``known`` lists the process's models,
    which the answer shows to the admin key only (:mod:`service.api.errors`)."""

    def __init__(self, message: str, known: list[str]) -> None:
        super().__init__(message)
        self.known = known
