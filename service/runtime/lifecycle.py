"""The runtime put together (:class:`Runtime`): its rooms, start-up and shutdown, and the calls others make.

:func:`service.api.app.create_app`'s lifespan builds one :class:`Runtime` per process, calls
:meth:`Runtime.open` (quick; a bad config stops the server), then :meth:`Runtime.load` in the
background (kernels compiled, models loaded, loops started; ``/readyz`` says what it does
meanwhile) and :meth:`Runtime.stop` at shutdown. Every other call of the routes, the command line
and the tests is an attribute of the runtime bound to the room that implements it, listed in
:meth:`Runtime.__init__`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Callable

from service.config import ModelSpec, Settings, load_model_file
from service.evaluations import Evaluations, remove_stale
from service.learners.base import learners
from service.runtime.budgets import check_declared
from service.runtime.checkpoints import Checkpoints
from service.runtime.items import Items
from service.runtime.moves import Moves
from service.runtime.registry import Registry
from service.runtime.replication import Replication
from service.runtime.reports import Reports
from service.runtime.requests import RequestPath
from service.runtime.state import Shared
from service.runtime.sweeper import Sweeper
from service.store import ModelExistsError, Store, StoreUnavailableError

__all__ = ["DEMO_MODEL", "Runtime"]

log = logging.getLogger("clickboost.runtime")

DEMO_MODEL = ModelSpec(  # the default learner
    hashing_bits=10,
    labels=["sports", "politics", "music"],
    reward_window_seconds=600,
)


class Runtime:
    """All models of a store, served by this process (one replica).

    Parameters
    ----------
    store : Store
        Shared storage (SQLite, memory or Redis).
    settings : Settings
        Server settings.
    clock : callable
        Unix time in seconds (tests pass a fake clock).
    """

    def __init__(self, store: Store, settings: Settings, clock: Callable[[], float] = time.time) -> None:
        self.shared = shared = Shared(store, settings, clock)
        self.store = store
        self.settings = settings
        self.models = shared.models
        self.replica_id = shared.replica_id
        self.placement = shared.placement
        self.evaluations = Evaluations(self.replica_id)  # off-policy evaluation jobs of this process
        self._tasks: list[asyncio.Task[None]] = []
        # The rooms, each sharing `shared`. Replication and the registry call each other (a model is
        # loaded through its log; a model that failed is reloaded), so the registry is handed over.
        self.reports = Reports(shared)
        self.checkpoints = Checkpoints(shared)
        self.replication = Replication(shared, self.checkpoints)
        self.registry = Registry(shared, self.replication)
        self.replication.registry = self.registry
        self.sweeper = Sweeper(shared, self.replication, self.reports)
        self.moves = Moves(shared)
        self.items = Items(shared, self.registry, self.replication)  # the catalogs' admin calls
        self.requests = RequestPath(shared, self.registry, self.replication, self.reports)
        self.ids = self.requests.ids
        self.host, self.pid, self.started_at = self.reports.host, self.reports.pid, self.reports.started_at
        # The calls of the routes (service/api), the command line and the tests, by room.
        # The request path (service/runtime/requests.py): POST /predict, /feedback, .../activate.
        self.predict = self.requests.predict
        self.feedback = self.requests.feedback
        self.activate = self.requests.activate
        # The registry (registry.py): finding, loading, creating and changing models.
        self.get = self.registry.get
        self.resolve = self.registry.resolve
        self.status = self.registry.status
        self.holds = self.registry.holds
        self.elsewhere = self.registry.elsewhere
        self.warm = self.registry.warm
        self.sync_models = self.registry.sync_models
        self.sync_model = self.registry.sync_model
        self.create_model = self.registry.create_model
        self.delete_model = self.registry.delete_model
        self.reset_model = self.registry.reset_model
        self.set_rollout = self.registry.set_rollout
        self.import_state = self.registry.import_state
        self.decision_log = self.registry.decision_log
        # Replication (replication.py): applying the logs.
        self.catch_up = self.replication.catch_up
        self.wait_applied = self.replication.wait_applied
        # The sweeper (sweeper.py): expiry, retention, promotion.
        self.sweep = self.sweeper.sweep
        # The dashboard's reports (reports.py): activity and heartbeats.
        self.flush_activity = self.reports.flush_activity
        self.heartbeat = self.reports.heartbeat
        # Placement moves (moves.py).
        self.placement_of = self.moves.placement_of
        self.move_model = self.moves.move_model

    @property
    def clock(self) -> Callable[[], float]:
        """Unix time in seconds, as every room reads it (tests may replace it)."""
        return self.shared.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self.shared.clock = clock

    @property
    def ready(self) -> bool:
        """Whether :meth:`load` finished: the models loaded and the loops running."""
        return self.shared.ready

    @property
    def loading(self) -> bool:
        """Between :meth:`open` and the end of :meth:`load`: requests get 503."""
        return self.shared.loading

    @property
    def warming(self) -> str | None:
        """What compiles now (for ``/readyz`` and the log), or None."""
        return self.registry.warming

    @property
    def checkpoints_written(self) -> int:
        """Checkpoints this process stored."""
        return self.checkpoints.written

    async def start(self) -> None:
        """:meth:`open`, then :meth:`load`: the service is ready when this returns."""
        await self.open()
        await self.load()

    async def open(self) -> None:
        """The quick part of start-up, whose failures stop the server: import the learners, prepare
        the store, validate and create the declared models (config file, demo)."""
        # Importing a learner compiles nothing (its kernels compile when first needed), so this is
        # quick; the registry imports the learner modules on first use.
        self.shared.loading = True
        if removed := await asyncio.to_thread(remove_stale):
            log.info("removed %d evaluation copies of logs left by stopped servers", len(removed))
        await asyncio.to_thread(learners.names)
        await self.store.prepare()
        declared: dict[str, ModelSpec] = {}
        if self.settings.config_file is not None:
            declared.update(load_model_file(self.settings.config_file))
        if self.settings.demo:
            declared.setdefault("demo", DEMO_MODEL)
        check_declared(declared, self.settings)  # fail fast: params, sizes
        for name, spec in declared.items():
            with contextlib.suppress(ModelExistsError):
                await self.store.create_model(name, self.registry.config(spec))

    async def load(self) -> None:
        """Compile the kernels the models need (a minute on a cold cache: the server answers
        ``/healthz`` meanwhile, and ``/readyz`` says what it is doing), load every model, start the
        loops; then the service is ready."""
        await self.registry.sync_models()
        await self.reports.beat()  # listed once ready
        await self.reports.check_placement_agrees()
        self._tasks = [
            asyncio.create_task(self.replication.loop()),
            asyncio.create_task(self.sweeper.loop()),
            asyncio.create_task(self.reports.loop()),
        ]
        self.shared.ready = True
        self.shared.loading = False
        # uvicorn's "running on" line comes when the port is bound, before the models are loaded
        since = time.monotonic() - self.shared.started_mono
        log.info("ready: %d model(s) served, %.1f s after start", len(self.models), since)
        # What start-up made (numba's types and compiled kernels, pydantic's models, the routes:
        # ~160k objects) lives as long as the process: out of the collector's view, a full collection
        # scans only what came later, where it took ~80 ms of the event loop here, often enough
        # under an export to hold predicts (tests/service/api/test_stalls.py). Collected first, so
        # that no garbage is kept for good.
        gc.collect()
        gc.freeze()

    async def stop(self) -> None:
        """Stop the background loops, then wait for the checkpoints in flight to be stored."""
        self.shared.ready = False
        # Cancel until done: on Python 3.11 ``asyncio.wait_for`` can swallow a cancellation that
        # arrives as the awaited event fires, and the loop would then run on (shutdown would hang).
        while any(not t.done() for t in self._tasks):
            for task in self._tasks:
                task.cancel()
            await asyncio.wait(self._tasks, timeout=0.1)
        self._tasks = []
        await self.evaluations.close()
        await self.checkpoints.wait()  # the store is closed next
        try:
            await self.reports.forget()
        except StoreUnavailableError as exc:
            log.warning("at shutdown: %s", exc)
