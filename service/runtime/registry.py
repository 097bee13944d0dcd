"""The model registry: which models this process serves, loading them, and the admin calls.

A model lives in the store (its config, log and checkpoint); this room keeps the process's models
(``Shared.models``) in step with it: :meth:`Registry.sync_models` (the loop, ``GET /models``) and
:meth:`Registry.sync_model` (read-your-writes for one name) load the models created elsewhere, drop
the deleted or moved ones and reload the re-created ones; a model this process cannot load (a bad
checkpoint, over its budget) is skipped and retried with back-off, never stops the others.
:meth:`Registry.load` builds one (budget, kernels compiled in a thread, checkpoint, log).

Every request finds its model through :meth:`Registry.resolve` (the store asked for a name this
process does not know yet). The admin routes of :mod:`service.api.models` call the rest: create,
delete, reset, import, rollout switch, decision log; a change of learned state goes through the
model's log like a feedback (reset, import, rollout) and is applied here before the call returns.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any, NamedTuple

from service import _jit_cache
from service.config import ModelSpec
from service.decision_log import LogRecord, pages
from service.learners.base import learner_from_state
from service.runtime.budgets import bandit_class, check_budget, check_catalog_budget, check_event_budget
from service.runtime.errors import ModelUnavailableError, NoSuchModelError
from service.runtime.items import Items
from service.runtime.model import ModelRuntime
from service.runtime.replication import Replication
from service.runtime.state import Shared, backoff
from service.serial import decode
from service.store import Event, StoreUnavailableError, UnknownModelError

__all__ = ["Registry"]

log = logging.getLogger("clickboost.runtime")


class _LoadFailure(NamedTuple):
    incarnation: Any
    retry_at: float  # time.monotonic() of the next attempt
    attempts: int
    reason: str


class Registry:
    """The models of the store that this process serves.

    Parameters
    ----------
    shared : Shared
        The runtime's shared state (``models`` is the registry's to change).
    replication : Replication
        Brings a model it loads up to its log, and applies the events of the admin calls.
    """

    def __init__(self, shared: Shared, replication: Replication) -> None:
        self.shared = shared
        self.replication = replication
        self.warming: str | None = None  # what compiles now, for /readyz and the log
        self._warm_lock = asyncio.Lock()
        # Models in the store this process cannot load (a bad checkpoint, over its memory budget)
        self.load_failures: dict[str, _LoadFailure] = {}
        # Model placement (service.placement), when set: the store's overrides (moved models) as of
        # the last sync, and the models of the store that this replica's group does not hold (their
        # requests get 421 without asking the store).
        self.overrides: dict[str, dict[str, Any]] = {}
        self.elsewhere_names: set[str] = set()

    def config(self, spec: ModelSpec) -> dict[str, Any]:
        """What the store keeps of a model created now from ``spec`` (a new incarnation)."""
        # Every parameter stored, defaults resolved now: a later release that moves a default does
        # not change a model that exists (its checkpoint and log were made under these).
        params = bandit_class(spec).Params.parse(spec.learner, spec.params).complete()
        return {
            "spec": spec.model_copy(update={"params": params}).model_dump(mode="json"),
            "params_complete": True,
            "incarnation": uuid.uuid4().hex,
            "created_at": self.shared.clock(),
        }

    def holds(self, name: str) -> bool:
        """Whether this replica's group loads ``name`` (always, without placement)."""
        return self.shared.placement is None or self.shared.placement.holds(name, self.overrides.get(name))

    async def sync_models(self) -> None:
        """Load models created elsewhere, drop deleted ones, reload re-created ones; with placement,
        hold only the models placed on this replica's group (drop those moved away)."""
        configs = await self.shared.store.list_models()
        if self.shared.placement is not None:
            self.overrides = await self.shared.store.placements()
            self.elsewhere_names = {name for name in configs if not self.holds(name)}
            configs = {name: config for name, config in configs.items() if name not in self.elsewhere_names}
        for name in list(self.shared.models):
            if name not in configs or configs[name]["incarnation"] != self.shared.models[name].incarnation:
                del self.shared.models[name]
        for name in set(self.load_failures) - set(configs):
            del self.load_failures[name]
        for name, config in configs.items():
            if name not in self.shared.models:
                await self._load_isolated(name, config)

    async def sync_model(self, name: str, now: bool = False) -> ModelRuntime | None:
        """Read-your-writes for one name: load it if the store has it (and, with placement, this
        replica's group holds it), forget it if not. ``now``: load it even while a failed load of it
        backs off (the model's own creation: a background sync may have listed the name before the
        store held the rest of it, and the creating request must not answer 503 for that)."""
        try:
            config = await self.shared.store.get_model(name)
        except UnknownModelError:
            self.shared.models.pop(name, None)
            self.load_failures.pop(name, None)
            self.elsewhere_names.discard(name)
            return None
        if self.shared.placement is not None:
            override = (await self.shared.store.placements()).get(name)
            self.overrides.pop(name, None)
            if override is not None:
                self.overrides[name] = override
            if not self.holds(name):
                self.shared.models.pop(name, None)
                self.load_failures.pop(name, None)
                self.elsewhere_names.add(name)
                return None
            self.elsewhere_names.discard(name)
        m = self.shared.models.get(name)
        if m is None or m.incarnation != config["incarnation"]:
            self.shared.models.pop(name, None)
            await self._load_isolated(name, config, now)
        return self.shared.models.get(name)

    async def _load_isolated(self, name: str, config: Mapping[str, Any], now: bool = False) -> None:
        """Load a model; a model this process cannot load is skipped (logged, retried later, or at
        once with ``now``)."""
        incarnation = config.get("incarnation")
        failed = self.load_failures.get(name)
        if failed is not None and failed.incarnation != incarnation:
            failed = None  # a new model of that name: a fresh start
        if failed is not None and not now and time.monotonic() < failed.retry_at:
            return  # backing off
        try:
            self.shared.models[name] = await self.load(name, config)
        except StoreUnavailableError:
            raise
        except Exception as exc:
            attempts = failed.attempts + 1 if failed is not None else 1
            reason = f"{type(exc).__name__}: {exc}"
            retry_at = time.monotonic() + backoff(attempts)
            self.load_failures[name] = _LoadFailure(incarnation, retry_at, attempts, reason)
            log.error("model %r cannot be loaded here (attempt %d): %s", name, attempts, reason)
            return
        self.load_failures.pop(name, None)

    async def warm(self, spec: ModelSpec) -> None:
        """Compile (or load from numba's cache) the kernels a model of ``spec`` calls, in a thread,
        before it serves: no request compiles. :attr:`warming` says what is compiling meanwhile."""
        modules = bandit_class(spec).kernel_modules(spec.params)
        cold = _jit_cache.cold(modules)  # flags of modules open() imported: no await when warm
        if not cold:
            return
        cached = await asyncio.to_thread(_jit_cache.cached, cold)
        verb = "loading" if cached else "compiling"
        self.warming = f"{verb} the kernels of {spec.learner} ({', '.join(cold)})"
        started = time.monotonic()
        log.info("%s%s", self.warming, "" if cached else ": once per install, cached afterwards")
        try:
            async with self._warm_lock:  # one compilation at a time: they share numba's lock anyway
                await asyncio.to_thread(_jit_cache.warm, cold, log.info)
        finally:
            self.warming = None
        log.info("kernels of %s ready in %.1f s", spec.learner, time.monotonic() - started)

    def status(self) -> tuple[bool, str]:
        """(ready, what it is doing): ``/readyz``'s answer before the store check."""
        if self.shared.ready:
            # a default model that does not exist fails every request that names none: not ready,
            # rather than a refusal to start, since it may be created through this server (PUT)
            default = self.shared.settings.default_model
            known = self.shared.models.keys() | self.elsewhere_names | self.load_failures.keys()
            if default is not None and default not in known:
                return False, (
                    f"the default model {default!r} (CLICKBOOST_DEFAULT_MODEL) does not exist: "
                    f"create it (PUT /models/{default}) or change the setting"
                )
            return True, "ready"
        if self.warming is not None:
            return False, f"{self.warming}, {time.monotonic() - self.shared.started_mono:.0f} s since start"
        return False, "starting: loading models"

    def _held(self, name: str) -> int:
        """Bytes the process's models other than ``name`` hold: their learned states' estimates and
        their catalogs (:meth:`Items.held <service.runtime.items.Items.held>`), as a catalog write
        counts them."""
        return sum(Items.held(m) for n, m in self.shared.models.items() if n != name)

    async def load(self, name: str, config: Mapping[str, Any]) -> ModelRuntime:
        """The model ``name`` of the stored ``config``, built here: its budget checked, its kernels
        warm, its latest checkpoint loaded and its log after it applied (not yet served: the caller
        puts it in the models)."""
        spec = ModelSpec.model_validate(config["spec"])
        # a parameter the stored spec lacks reads the value it had then (Params.legacy): stored before
        # parameters were stored complete, or complete before the parameter existed (issue 41's
        # grace_unit and subspace, whose defaults are not what the trees did before)
        spec = spec.model_copy(update={"params": bandit_class(spec).Params.legacy(spec.params)})
        need = check_budget(name, spec, self.shared.settings, self._held(name))  # before allocating
        await self.warm(spec)
        s = self.shared.settings
        m = ModelRuntime(name, spec, config["incarnation"], s.max_named_features, need, s.max_actions)
        await asyncio.to_thread(m.learner.prepare)  # one-time tables: seconds for some learners
        await self.replication.checkpoints.load(m)
        await self.replication.catch_up(m)
        if m.catalog is not None and len(m.catalog):  # a catalog loaded whole: the budget may have changed
            check_catalog_budget(
                name, need, m.catalog.nbytes(), len(m.catalog), self.shared.settings, self._held(name)
            )
        return m

    def elsewhere(self) -> dict[str, dict[str, list[str]]]:
        """With placement, the models of the deployment that this replica's group does not hold (as of
        the last sync), each with its groups and their addresses (what a 421 for it names); else {}."""
        if self.shared.placement is None:
            return {}
        return {
            name: self.shared.placement.misdirected(name, self.overrides.get(name)).groups
            for name in sorted(self.elsewhere_names)
        }

    def get(self, name: str | None) -> ModelRuntime:
        """The model called ``name``, or the default model; :class:`UnknownModelError` if none,
        :class:`ModelUnavailableError` (503, retry) while the server is starting,
        :class:`~service.placement.MisdirectedError` (421) if this replica's group does not hold it."""
        if self.shared.loading:
            raise ModelUnavailableError(f"the server is not ready yet ({self.status()[1]}); retry")
        if name is None:
            name = self.shared.settings.default_model or ("demo" if self.shared.settings.demo else None)
            if name is None:
                if len(self.shared.models) != 1:
                    raise NoSuchModelError("no model given and no default model", sorted(self.shared.models))
                return next(iter(self.shared.models.values()))
        try:
            return self.shared.models[name]
        except KeyError:
            if self.shared.placement is not None and name in self.elsewhere_names:
                raise self.shared.placement.misdirected(name, self.overrides.get(name)) from None
            failed = self.load_failures.get(name)
            if failed is not None:
                raise ModelUnavailableError(
                    f"model {name!r} cannot be loaded on this replica ({failed.reason}); "
                    "retried with back-off"
                ) from None
            raise NoSuchModelError(f"unknown model {name!r}", sorted(self.shared.models)) from None

    async def resolve(self, name: str | None, fresh: bool = False) -> ModelRuntime:
        """:meth:`get`, but a name this process does not know is looked up in the store first, so
        a model just created through another replica is served at once (read-your-writes).

        ``fresh`` (the admin routes) checks the store even for a known name and applies its log,
        so a model deleted, re-created or reset through another replica is seen at once; the hot
        path learns of a deletion from the store's answer to the decision it records.
        """
        if fresh and name is not None and self.shared.store.shared:
            m = await self.sync_model(name)
            if m is None:
                self.get(name)  # raises: unknown, or known but not loadable here
            if m.failure is None:  # resets and imports through other replicas, applied now
                await self.replication.catch_up_isolated(m)
        try:
            return self.get(name)
        except UnknownModelError:
            if name is None or not self.shared.store.shared:
                raise
            await self.sync_model(name)
            return self.get(name)

    async def create_model(self, name: str, spec: ModelSpec) -> ModelRuntime:
        """Create ``name``: :class:`ModelExistsError` if taken, :class:`ParamError` if invalid,
        :class:`BudgetError` if its state would not fit (checked before anything is allocated)."""
        check_budget(name, spec, self.shared.settings, self._held(name))  # before the store has it
        check_event_budget(name, spec, self.shared.settings)
        if self.shared.placement is not None:  # created where it is held, so that it is answered from there
            override = (await self.shared.store.placements()).get(name)
            if not self.shared.placement.holds(name, override):
                raise self.shared.placement.misdirected(name, override)
        await self.shared.store.create_model(name, self.config(spec))
        m = await self.sync_model(name, now=True)
        return m if m is not None else self.get(name)  # raises: deleted meanwhile, or not loadable

    async def delete_model(self, name: str) -> None:
        """Delete ``name`` from the store (every replica drops it at its next sync) and from here."""
        await self.shared.store.delete_model(name)
        self.shared.models.pop(name, None)
        self.elsewhere_names.discard(name)

    async def decision_log(
        self, name: str, since: float = -math.inf, until: float = math.inf
    ) -> AsyncIterator[list[LogRecord]]:
        """The decision log of ``name`` created in ``[since, until)``, as pages of records read
        from the store one at a time (:mod:`service.decision_log`). The model is looked up as by
        the other admin calls (:meth:`resolve` with ``fresh``); reading starts at the first page."""
        m = await self.resolve(name, fresh=True)
        return pages(self.shared.store, m.name, m.spec, since, until)

    async def reset_model(self, name: str) -> ModelRuntime:
        """Replace the learned state by a fresh learner's, through the log (counts are kept)."""
        m = await self.resolve(name, fresh=True)
        position = await self.shared.store.append(name, Event(0, "reset", at=self.shared.clock()))
        await self.replication.wait_applied(m, position)
        return m

    async def set_rollout(self, name: str, mode: str) -> ModelRuntime:
        """Switch ``name`` to the rollout ``mode`` through its log (every replica at the same
        position); the evidence starts over (:mod:`service.rollout`)."""
        m = await self.resolve(name, fresh=True)
        event = Event(0, "rollout", at=self.shared.clock(), state=m.rollout.event(mode, "admin"))  # type: ignore[arg-type]
        position = await self.shared.store.append(name, event)
        await self.replication.wait_applied(m, position)
        return m

    async def import_state(self, name: str, data: bytes) -> ModelRuntime:
        """Replace the learned state by ``data`` (validated first; never unpickled)."""
        m = await self.resolve(name, fresh=True)
        learner_from_state(m.learner.config(), decode(data))  # raises StateFormatError / ParamError
        position = await self.shared.store.append(
            name, Event(0, "import", at=self.shared.clock(), state=data)
        )
        await self.replication.wait_applied(m, position)
        return m
