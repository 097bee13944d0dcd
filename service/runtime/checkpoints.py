"""Checkpoints: a model's state at a log position, written by one replica, read at load.

docs/ARCHITECTURE.md, "Replication": every N events (``CLICKBOOST_CHECKPOINT_EVERY``) or T seconds
(``CLICKBOOST_CHECKPOINT_INTERVAL_SECONDS``) with new events, the holder of the model's checkpoint
lease stores ``(position, state)`` and trims the log up to that position, keeping the event at the
position itself. A replica that starts, or fell behind a trim, loads the latest checkpoint,
decoded and validated in a thread, then replays the log after it (:mod:`service.runtime.replication`
calls both). A state under :data:`INLINE_CHECKPOINT_BYTES` is encoded on the event loop; a larger
one in a thread with no copy, the model frozen (no event applied, decisions go on) meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np

from service.catalog import Catalog
from service.learners.base import Learner, learner_from_state
from service.rollout import Rollout
from service.runtime.items import pop_catalog
from service.runtime.model import ModelRuntime
from service.runtime.state import Shared
from service.serial import State, decode, encode_sparse
from service.store import Checkpoint, StoreUnavailableError, UnknownModelError

__all__ = ["INLINE_CHECKPOINT_BYTES", "Checkpoints"]

log = logging.getLogger("clickboost.runtime")

# Checkpoints of states under this size are encoded on the event loop: that takes less than handing
# them to a thread (~20 us for 64 KiB against ~80 us per asyncio.to_thread); larger ones in a thread.
INLINE_CHECKPOINT_BYTES = 1 << 16


class Checkpoints:
    """The checkpoints of this process's models: loading the latest, writing the next.

    Parameters
    ----------
    shared : Shared
        The runtime's shared state.
    """

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.written = 0  # checkpoints this process stored
        self.in_flight: dict[str, asyncio.Task[None]] = {}  # at most one per model

    async def load(self, m: ModelRuntime) -> None:
        """Load the latest checkpoint into ``m`` (decoded and validated in a thread)."""
        cp = await self.shared.store.get_checkpoint(m.name)
        if cp is None or cp.position <= m.position:
            return
        config = m.learner.config()
        hashed = m.spec.hashing_bits is not None
        rollout = Rollout(m.spec.rollout, m.spec.apprentice_epsilon, m.spec.promote_confidence)
        max_named = 0 if m.catalog is None else m.catalog.max_named  # a label model has none

        def load() -> tuple[Learner, Catalog | None]:
            state = decode(cp.state)
            keys = [k for k in state if k.startswith("rollout.")]
            if keys:  # the rollout's mode and evidence at the checkpoint (ModelRuntime.checkpoint_state)
                rollout.load({k: state.pop(k) for k in keys})
            catalog = pop_catalog(state, m.spec, max_named)  # the catalog.* keys (service.runtime.items)
            learner = learner_from_state(config, state)
            if hashed:  # here, not in the setter on the event loop: a copy of up to K 2**22 weights
                learner.use_sparse_layout()
            return learner, catalog

        learner, catalog = await asyncio.to_thread(load)
        if cp.position > m.position:  # else a concurrent catch_up got further meanwhile
            m.learner, m.rollout, m.catalog = learner, rollout, catalog
            m.position = m.checkpoint_position = cp.position

    async def maybe_write(self, m: ModelRuntime) -> None:
        """Every N events or T seconds: checkpoint ``m`` at its position (see :meth:`_write`),
        unless a checkpoint of it is in flight (then the first round after that one starts it).

        Called where ``m`` has applied its events without error, so its state is the state at
        ``m.position``. A state under :data:`INLINE_CHECKPOINT_BYTES` is encoded here and this
        round waits until it is stored, as before. A larger one is encoded in a thread, with no
        copy: ``m`` is frozen (no event applied) until then, while decisions, which only read the
        state, go on; this round does not wait.
        """
        s = self.shared.settings
        elapsed = time.monotonic() - m.checkpoint_at
        if m.position - m.checkpoint_position < s.checkpoint_every and not (
            m.position > m.checkpoint_position and elapsed >= s.checkpoint_interval_seconds
        ):
            return
        if m.name in self.in_flight:
            return
        position, state = m.position, m.checkpoint_state()
        m.checkpoint_position, m.checkpoint_at = position, time.monotonic()
        small = sum(v.nbytes for v in state.values() if isinstance(v, np.ndarray)) < INLINE_CHECKPOINT_BYTES
        if small:
            snapshot: State | bytes = encode_sparse(state)
        else:
            snapshot, m.frozen = state, asyncio.Event()
        task = asyncio.create_task(self._write(m, position, snapshot))
        self.in_flight[m.name] = task
        task.add_done_callback(lambda _: self.in_flight.pop(m.name, None))
        if small:
            await asyncio.shield(task)  # a cancelled caller leaves it to finish; stop() waits for it

    async def _write(self, m: ModelRuntime, position: int, snapshot: State | bytes) -> None:
        """The holder of the model's checkpoint lease stores ``snapshot`` (``m``'s state at
        ``position``: views of its frozen arrays, encoded here in a thread, or the encoding
        already), then trims the log up to ``position``. ``m`` is thawed once encoded.

        Replicas that do not hold the lease only restart their count, so one replica writes
        checkpoints while it lives and another takes over within ``3 T`` after it stops. The lease
        saves work, not correctness: the state at a position is the same on every replica.
        Failures are logged; the next checkpoint is due N events or T seconds later.
        """
        store = self.shared.store
        lease = 3 * self.shared.settings.checkpoint_interval_seconds
        try:
            try:
                if not await store.lease(f"checkpoint:{m.name}", self.shared.replica_id, lease):
                    return
                data = snapshot
                if not isinstance(data, bytes):
                    data = await asyncio.to_thread(encode_sparse, data)
            finally:
                if m.frozen is not None:
                    m.frozen.set()
                    m.frozen = None
            if (await store.get_model(m.name))["incarnation"] != m.incarnation:
                return  # deleted and re-created meanwhile (deleted: UnknownModelError)
            await store.put_checkpoint(m.name, Checkpoint(position, data))
            # Only once the checkpoint is stored, and the event at its position stays: a replica
            # behind the checkpoint must find a first event past its own position in the log, which
            # tells it to load the checkpoint. Trimmed up to the checkpoint itself, an idle log
            # reads empty to such a replica, which then stays behind until the next event is
            # appended (the flake of the kill -9 test: a replica left at 411 of 419 once the load
            # ended, the lease holder's last checkpoint at 419).
            await store.trim_log(m.name, position - 1)
            self.written += 1
        except UnknownModelError:  # deleted meanwhile
            pass
        except StoreUnavailableError as exc:
            self.shared.store_failed()
            log.warning("checkpoint of model %r: %s", m.name, exc)
        except Exception:
            log.exception("checkpoint of model %r failed", m.name)

    async def wait(self) -> None:
        """Until the checkpoints in flight are stored (at shutdown: waited for, not cancelled, since
        the store is closed next and a stored checkpoint spares the next start a replay)."""
        while pending := [t for t in self.in_flight.values() if not t.done()]:
            await asyncio.wait(pending)
