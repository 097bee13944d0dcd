"""Models at run time: decide -> record; feedback -> event; events applied in log order.

A :class:`Runtime` serves every model of a store in one process (one replica). Each model is a
:class:`ModelRuntime`: the learner, its featuriser and the log position it has applied, which is
the model version. Every change of the learned state goes through the store's event log (learn,
reset, import, rollout), and each replica applies the log in order, so replicas that applied the
same prefix hold bit-identical models (same :meth:`ModelRuntime.checksum`).

The rooms, one module each, named by what they do:

- :mod:`~service.runtime.requests`: the request path, ``POST /predict``, ``POST /feedback`` and the
  activation, from the call the route makes to the store calls.
- :mod:`~service.runtime.registry`: which models this process serves (sync with the store, load,
  the lookup by name) and the admin calls (create, delete, reset, import, rollout, decision log).
- :mod:`~service.runtime.replication`: applying each model's log in order (catch up, the tail
  loop, waiting for an event, isolated failures); :mod:`~service.runtime.checkpoints`: loading and
  writing checkpoints.
- :mod:`~service.runtime.sweeper`: expiry of unanswered decisions, decision-log retention,
  automatic promotion.
- :mod:`~service.runtime.reports`: the dashboard's per-minute activity and the heartbeats.
- :mod:`~service.runtime.moves`: moving a model between replica groups.
- :mod:`~service.runtime.lifecycle`: :class:`Runtime` itself, which builds the rooms, starts and
  stops them, and binds the calls the routes make to the room that implements each.
- :mod:`~service.runtime.model` (:class:`ModelRuntime`), :mod:`~service.runtime.state` (what the
  rooms share), :mod:`~service.runtime.budgets` (the learner a spec builds, memory and work
  budgets), :mod:`~service.runtime.errors`.

Composition, not mixins: each room is an object that holds the runtime's one
:class:`~service.runtime.state.Shared` (store, settings, clock, models) and the rooms it calls,
passed to its constructor, and keeps the rest of its state to itself. A reader of one file sees
every attribute it uses declared there or in ``state.py``, and what it calls on another room by
that room's name (``self.replication.wait_applied``), where a mixin's ``self.x`` could come from
any of the other classes of the stack.
"""

from service.runtime.budgets import (
    DECISION_STEPS_PER_LABEL,
    BudgetError,
    build_learner,
    check_budget,
    check_declared,
    check_event_budget,
)
from service.runtime.checkpoints import INLINE_CHECKPOINT_BYTES
from service.runtime.errors import ModelUnavailableError, NoSuchModelError, check_event_id
from service.runtime.lifecycle import DEMO_MODEL, Runtime
from service.runtime.model import ModelRuntime
from service.runtime.reports import HEARTBEAT_SECONDS, HEARTBEAT_TTL_SECONDS
from service.runtime.requests import Prediction

__all__ = [
    "DECISION_STEPS_PER_LABEL",
    "DEMO_MODEL",
    "HEARTBEAT_SECONDS",
    "HEARTBEAT_TTL_SECONDS",
    "INLINE_CHECKPOINT_BYTES",
    "BudgetError",
    "ModelRuntime",
    "ModelUnavailableError",
    "NoSuchModelError",
    "Prediction",
    "Runtime",
    "build_learner",
    "check_budget",
    "check_declared",
    "check_event_budget",
    "check_event_id",
]
