"""The request path: ``POST /predict``, ``POST /feedback`` and the activation, route to store.

Which route calls what (the handlers in :mod:`service.api.predict` parse the body, call the
runtime and shape the answer; :mod:`service.api.personalizer`'s rank, reward and activate call
the same three):

- ``POST /predict`` -> ``Runtime.predict`` = :meth:`RequestPath.predict`: find the model
  (:meth:`Registry.resolve <service.runtime.registry.Registry.resolve>`: this process's models,
  the store asked for a name it does not know yet), featurise the request
  (:meth:`ModelRuntime.featurise_request <service.runtime.model.ModelRuntime.featurise_request>`),
  decide (:meth:`ModelRuntime.decide <service.runtime.model.ModelRuntime.decide>`: the learner's
  distribution, sampled with the decision id as seed; the model is only read), then one store call,
  ``store.put_decision``: the pending decision and its reward window (kept in memory and recorded
  later while the store is down), and a count for the dashboard.
- ``POST /feedback`` -> ``Runtime.feedback`` = :meth:`RequestPath.feedback`: one store call,
  ``store.claim_and_append``, claims the decision exactly once (whichever of feedback and expiry
  comes first) and appends its learn event to the model's log in the same step; the answer is 200
  once the event is stored. The model learns when it applies its log: the tail loop
  (:mod:`service.runtime.replication`) does it on every replica, or this call does it at once with
  ``?wait=true`` (:meth:`Replication.wait_applied
  <service.runtime.replication.Replication.wait_applied>`).
- ``POST /decisions/{id}/activate`` -> ``Runtime.activate`` = :meth:`RequestPath.activate`: a
  deferred decision shown (issue 38), ``store.activate``, learned as a feedback if one was held.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from service.features import FeatureValue
from service.learners.base import Decision
from service.runtime.catalog_requests import CatalogAnswer, CatalogQuery, catalog_request
from service.runtime.errors import check_event_id
from service.runtime.registry import Registry
from service.runtime.replication import Replication
from service.runtime.reports import Reports
from service.runtime.state import Shared
from service.sampling import DecisionIds
from service.store import (
    ActivateOutcome,
    ActivateStatus,
    Claim,
    ClaimOutcome,
    ClaimStatus,
    DecisionRecord,
    StoreUnavailableError,
    UnknownModelError,
)
from service.store.base import Reward

__all__ = ["RECOVERY_SECONDS", "Prediction", "RequestPath"]

# For RECOVERY_SECONDS after it last saw the store down, a replica answers an unknown decision id
# with 503 rather than 404: it may be one that another replica made during the outage and is still
# recording (docs/ARCHITECTURE.md, "When Redis is down").
RECOVERY_SECONDS = 2.0

_Answer = TypeVar("_Answer", ClaimOutcome, ActivateOutcome)


@dataclass(frozen=True, slots=True)
class Prediction:
    """What ``POST /predict`` returns."""

    decision_id: str
    model: str
    decision: Decision
    model_version: int
    label: str
    labels: list[str]  # the model's label names, by index
    catalog: CatalogAnswer | None = None  # a catalog decision's top k (service.runtime.catalog_requests)


class RequestPath:
    """Decisions, their feedback and their activation.

    Parameters
    ----------
    shared : Shared
        The runtime's shared state.
    registry : Registry
        Finds the model a request names.
    replication : Replication
        Applies a feedback's event before the answer when the caller waits for it.
    reports : Reports
        Counts decisions and feedback per minute for the dashboard.
    """

    def __init__(
        self, shared: Shared, registry: Registry, replication: Replication, reports: Reports
    ) -> None:
        self.shared = shared
        self.registry = registry
        self.replication = replication
        self.reports = reports
        seed = shared.settings.decision_id_seed
        self.ids = DecisionIds() if seed is None else DecisionIds.for_seed(seed)

    async def predict(
        self,
        name: str | None,
        features: Sequence[float] | Mapping[str, FeatureValue],
        eligible: Sequence[str | int] | None = None,
        excluded: Sequence[str | int] | None = None,
        baseline: str | int | None = None,
        *,
        event_id: str | None = None,
        defer: bool = False,
        actions: Sequence[Any] | None = None,
        memo: Mapping[str, str] | None = None,
        catalog: CatalogQuery | None = None,
    ) -> Prediction:
        """Featurise, decide among the labels the request allows (:meth:`ModelRuntime.label_mask`),
        record the pending decision (the reward window starts now), also in the decision log when
        the model keeps one. The mask travels in the decision's memo, so the learn event and the
        decision log carry it. ``baseline``: the label the caller's own policy would show, served
        in logging and apprentice mode (:meth:`ModelRuntime.decide`).

        ``event_id``: a client-chosen id (:func:`check_event_id`, else :class:`ParamError`); the
        decision id is then ``store.route(model, event_id)``, deterministic, and seeds the sampling
        as a drawn id does. It is taken once: :class:`DecisionExistsError` (409) while its pending
        record or its claim is known (the store inserts it only if absent). While the store is down
        the decision is served and saved once it is back, as any other (learning from it is then
        best effort: an id found taken then is not saved). ``defer``: the decision is learned only
        if :meth:`activate` comes within its reward window (issue 38).

        ``actions``: the candidates of an action-feature model (issue 39, :mod:`service.actions`),
        ``{"id", "features"}`` each; ``eligible``, ``excluded`` and ``baseline`` then name action
        ids (or indices in the request), and the prediction's labels are the candidates' ids.

        ``memo``: kept in the decision's memo beside the learner's (``store.get_decision`` reads it
        back): a multi-slot rank's slot id, which its reward must name (issue 51).

        ``catalog``: the request's catalog candidates, filter and top k (issue 54); a request that
        uses the model's catalog is decided by :mod:`service.runtime.catalog_requests`.
        """
        m = await self.registry.resolve(name)
        cat = catalog_request(m, features, actions, catalog, eligible, excluded, baseline, self.shared.clock)
        if cat is None:
            x = m.featurise_request(features, actions)
            names = m.names(x)
            mask = m.label_mask(eligible, excluded, names)
        drawn = self.ids.new() if event_id is None else check_event_id(event_id)
        decision_id = self.shared.store.route(m.name, drawn)
        top = None
        if cat is None:
            d = m.decide(x, decision_id, mask, baseline)
        else:  # no await since catalog_request: the catalog read once (catalog_requests' docstring)
            x, d, top = cat.decide(decision_id)
            names = x.ids
        if memo:
            d.memo = {**d.memo, **memo}
        now = self.shared.clock()
        record = DecisionRecord(
            decision_id,
            m.name,
            m.featurise.pack(x),
            d.to_state(),
            m.position,
            now,
            now + m.spec.reward_window_seconds,
            m.spec.log_decisions,
            defer,
        )
        try:
            await self.shared.store.put_decision(record)
        except StoreUnavailableError:  # keep serving: the tail loop records it once the store is back
            self.shared.store_failed()
            self.shared.unsaved.append(record)
        except UnknownModelError:  # deleted through another replica: stop serving it now
            if self.shared.models.get(m.name) is m:
                del self.shared.models[m.name]
            raise UnknownModelError(f"unknown model {m.name!r} (deleted)") from None
        m.trim_due = True
        m.next_expiry = min(m.next_expiry, record.expires_at)
        counts = self.reports.minute(m.name, now)
        counts.decisions += 1
        # max of a short list costs a fraction of numpy's max call (~0.3 against ~1.5 us)
        p = d.probs
        if top is not None:  # the record keeps the chosen item alone: the most probable is in the top
            counts.exploration += 1.0 - top.top[0][2]
        else:
            counts.exploration += 1.0 - (max(p.tolist()) if p.size <= 64 else float(p.max()))
        return Prediction(decision_id, m.name, d, m.position, names[d.label], names, top)

    async def feedback(
        self, decision_id: str, reward: Reward, wait: bool, model: str | None = None
    ) -> tuple[ClaimOutcome, bool]:
        """Claim the decision and append its learn event; with ``wait``, apply it here first.

        ``reward``: the click bit, or a graded reward in [0, 1] (0 and 1 are taken as the bit, so
        they behave exactly as a click / no click). A deferred decision not activated yet holds the
        feedback (HELD): it is learned when :meth:`activate` comes within the window. ``model``: the
        model the caller names (a Personalizer loop): a decision of another is UNKNOWN.

        Returns the store's outcome and whether the event has been applied by this process.
        """
        if not isinstance(reward, bool) and reward in (0.0, 1.0):
            reward = reward == 1.0
        out = await self._answered(
            lambda now: self.shared.store.claim_and_append(decision_id, reward, now, model)
        )
        applied = False
        if out.status is ClaimStatus.ACCEPTED and out.claim is not None:
            applied = await self._learned(out.claim, reward, wait)
        return out, applied

    async def activate(
        self, decision_id: str, wait: bool = False, model: str | None = None
    ) -> ActivateOutcome:
        """Mark the deferred decision ``decision_id`` as shown (``POST /decisions/{id}/activate``).

        Within its reward window it will be learned: now, from a feedback held for it (the outcome's
        ``claim`` and ``reward``; with ``wait`` applied here before this returns), or from the
        feedback to come, or at expiry from the model's default reward. After the window a deferred
        decision never activated is EXPIRED (dropped); one not deferred is a harmless ALREADY.
        ``model`` as for :meth:`feedback`.
        """
        out = await self._answered(lambda now: self.shared.store.activate(decision_id, now, model))
        if out.status is ActivateStatus.ACTIVATED and out.claim is not None and out.reward is not None:
            await self._learned(out.claim, out.reward, wait)
        return out

    async def _answered(self, call: Callable[[float], Awaitable[_Answer]]) -> _Answer:
        """``call(now)`` against the store for a decision id a client sent (feedback, activation):
        the decisions made while the store was down are saved first; an unknown id is 503, not 404,
        for :data:`RECOVERY_SECONDS` after the store was last seen down."""
        try:
            if self.shared.unsaved:  # the decision may be one of them
                await self.shared.save_unsaved()
            out = await call(self.shared.clock())
        except StoreUnavailableError:
            self.shared.store_failed()
            raise
        if out.status.value == "unknown" and time.monotonic() - self.shared.store_down_at < RECOVERY_SECONDS:
            raise StoreUnavailableError(
                "the store is just back; decisions made meanwhile may not be saved yet"
            )
        return out

    async def _learned(self, claim: Claim, reward: Reward, wait: bool) -> bool:
        """Count a feedback just learned in its minute and let the model apply its event (with
        ``wait``: here, before returning whether it did)."""
        counts = self.reports.minute(claim.model, claim.at)
        if claim.outcome == "click":
            counts.clicks += 1
        elif claim.outcome == "no_click":
            counts.no_clicks += 1
        else:
            counts.graded += 1
            counts.graded_sum += reward
        m = self.shared.models.get(claim.model)
        if wait and m is not None and claim.position is not None:
            return await self.replication.wait_applied(m, claim.position)
        self.shared.wake.set()
        return False
