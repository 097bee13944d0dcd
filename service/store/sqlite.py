"""The durable embedded store: :class:`~service.store.base.Store` in one SQLite file, one process.

The default when ``REDIS_URL`` is unset (``CLICKBOOST_STORE=sqlite``, file
``$CLICKBOOST_DATA_DIR/clickboost.sqlite3``): models, counters, the event logs, checkpoints, pending
decisions (with their expiry times, so their reward windows keep running across a restart) and claims
survive a restart, a SIGTERM and a ``kill -9``.

Atomicity. Like the memory store, each change runs its SQL synchronously on the event loop thread, so
no other request interleaves with it. Every change of more than one row is inside one transaction
(``BEGIN IMMEDIATE`` ... ``COMMIT``), so a process killed at any instant leaves all of it or none:
``put_decision`` stores the record and bumps the counters in one commit; ``claim_and_append`` deletes
the pending record, appends the learn event, writes the claim and bumps the counters in one (the
commit of a group of such writes, see Group commit below). The
housekeeping calls work in bounded steps so that none blocks the loop for long, and let requests run
between the steps: ``expire_due`` claims the due decisions (each one atomically, as the contract
asks) and forgets stale claims some hundreds per transaction, ``trim_log`` deletes the log prefix
oldest first some hundreds of events per transaction (a log trimmed part way is a shorter prefix
trimmed: its checkpoint is already stored). A step finds its rows afresh in its own transaction, so
anything that ran in between (feedback, another sweep or trim, deleting the model) is taken as it is.

One process. Opening the file takes an exclusive ``flock`` on ``<file>.lock`` and keeps it until
:meth:`SQLiteStore.close` (or the process dies: the kernel releases it, so ``kill -9`` leaves no
stale lock); a second server on the same data directory stops at start-up with
:class:`DataDirInUseError` instead of serving diverging models. (Where there is no flock, SQLite's
``locking_mode=EXCLUSIVE`` does the same.) The file is opened on first use, not when the store object
is built, so building the app writes nothing.

Checkpoints. SQLite appends commits to the WAL and copies them into the database file at a
checkpoint, which fsyncs both files: tens of milliseconds for a few thousand frames, which must not
land inside a request. A :class:`_Checkpointer` thread does it with its own connection (WAL
checkpoints are made for that: the writer on the loop thread is not blocked by a passive one, and
the checkpoint changes no row, so every method stays atomic on the loop). Under sustained writes the
thread never catches up exactly, and SQLite only starts the WAL file over when it has; then the loop
copies the last few frames after one commit (a millisecond or two), see :class:`_Checkpointer`.
Durability is SQLite's own: every commit keeps its fsync level (below), a checkpoint copies only
committed frames, and the WAL is started over only once the database file holds every frame, synced.

Schema (``PRAGMA user_version`` 6; a version 1 to 5 file is migrated when opened, in one transaction):

===============  ================================================================================
``models``       ``id`` (never reused), ``name`` (unique), ``config`` (JSON), ``last`` (log
                 position), counters ``decisions``, ``clicks``, ``no_clicks``, ``expired``,
                 ``pending``, ``logged`` (rows in ``decision_log``), ``graded`` and ``graded_sum``
                 (feedbacks with a graded reward and the sum of their values), ``deferred``,
                 ``activated`` and ``dropped_unactivated`` (deferred decisions, schema 6)
``blobs``        ``id`` -> ``x`` and ``decision`` of a decision (:mod:`service.store.codec`),
                 written once by ``put_decision`` and referenced by its pending record, then its
                 learn event, and by its ``decision_log`` row while that is kept (``logged`` is 1
                 then, NULL otherwise); deleted in the commit that drops the last reference (the
                 event trimmed, a dropped expiry, the log row aged out, the model deleted)
``decisions``    pending decision records, ``WITHOUT ROWID`` on ``id``: ``model``, ``blob``,
                 ``model_version``, ``created_at``, ``expires_at``; index ``(model, expires_at)``
                 for the expiry sweep; for a deferred one ``deferred`` (1, else NULL),
                 ``activated_at`` and a feedback held until then (``held_reward``,
                 ``held_outcome``, ``held_at``)
``claims``       ``WITHOUT ROWID`` on ``id``: model name, ``outcome``, ``position``, ``at``,
                 ``forget_at``, ``deferred``, ``activated``; index ``forget_at``. A claim is live
                 while ``forget_at > now`` (the caller's clock); ``expire_due`` (the sweep, every
                 second) deletes stale ones, off the feedback path
``events``       the logs, ``WITHOUT ROWID`` clustered on ``(model, position)``: ``kind``, ``at``,
                 ``decision_id``, ``blob`` (a learn event's record, not copied), ``reward`` (0 or
                 1; the REAL value for outcome ``reward``), ``outcome``, ``state``; ``x`` and
                 ``decision`` hold the inline copies of learn events written by schema 1
``checkpoints``  the latest ``(position, state)`` per model
``decision_log`` the retained decisions of ``log_decisions`` models, ``WITHOUT ROWID`` on
                 ``(model, created_at, blob)`` (the order of exports and of the retention, which
                 deletes the oldest rows in steps of some hundreds: ``trim_decision_log``, from the
                 expiry sweep): ``id``, ``model_version``, then ``outcome``, ``reward``,
                 ``outcome_at`` and the learn event's ``position``, set in the claim's commit,
                 ``deferred`` and ``activated_at`` (set in the activation's commit). The
                 record's bytes stay in ``blobs``, not copied: a logged decision adds one small row
``activity``     per-minute counts of the dashboard, ``WITHOUT ROWID`` on ``(model, minute)``:
                 ``decisions``, ``clicks``, ``no_clicks``, ``expired``, ``exploration``, ``graded``,
                 ``graded_sum``; added to
                 about once a second by the runtime (``add_activity``), at most
                 ``ACTIVITY_MINUTES`` rows per model
===============  ================================================================================

A decision's pending record and its claim never coexist (``put_decision`` refuses an id that has a
claim row, and the claim is written in the commit that deletes the record), so feedback looks for
the pending record first and reads the claims only when there is none.

Nothing is pickled: arrays and decisions use :mod:`service.store.codec` (the canonical encoding of
:mod:`service.serial`, as in the Redis store), configs are JSON, times are REAL (exact doubles).

fsync. ``synchronous`` (setting ``CLICKBOOST_SQLITE_SYNCHRONOUS``) applies to the commits whose
success is acknowledged to a client as stored: feedback (``claim_and_append``) and activation, model
creation and deletion, reset and import events. ``"full"`` (default) fsyncs the WAL before any of them
is acknowledged (a feedback or an activation by the group commit below, the others by a FULL commit),
so an acknowledged feedback survives power loss; ``"normal"`` does not, and survives a killed process
but may lose the last commits on power loss. Every other commit uses NORMAL, whatever the setting:

- ``put_decision`` (each ``/predict``): losing a pending record on power loss only means that its
  feedback later gets 404 and it never teaches the default reward, which is the policy already
  applied to predictions made while Redis is down. Syncing it would add an fsync to every predict.
- ``expire_due``, ``put_checkpoint``, ``trim_log``: nobody is told they happened; if lost, the
  decisions are still pending and expire again at the next sweep, the checkpoint is rewritten.

This is sound because the WAL is one sequence of frames with cumulative checksums: what survives a
crash is always a prefix of the commits, and an fsync of the WAL (a FULL commit's, or the group
commit's) syncs every frame before it. So a lost NORMAL commit takes only later commits with it, never
an earlier one, and nothing acknowledged after an fsync can depend on a commit that is lost: a learn
event's blob was written by the ``put_decision`` commit before it, which the fsync syncs with it.

Group commit. The writes of requests (``put_decision``, ``claim_and_append``, ``activate``) do not
commit one by one: each queues its SQL and waits, and whatever is queued commits as one transaction at
NORMAL (:meth:`SQLiteStore._flush`, at most ``_GROUP`` writes), each write in a savepoint of its own,
so that one that fails (a taken decision id, an unknown model) is undone alone and its error goes to
its caller only. A predict is answered at that commit. With ``synchronous`` full, a feedback or an
activation is answered after an ``fdatasync`` of the WAL file begun after its commit
(:meth:`SQLiteStore._sync`, in a thread of its own while the loop serves on): the WAL then holds that
commit and every one before it on disk, as a FULL commit would have left them, and one fsync answers
every feedback committed meanwhile. The durable writes that arrive while an fsync runs wait in the
queue and commit as one group right before the next fsync, which they need anyway: under load one
transaction and one fsync serve a round of clients. No answer about a claim rests on an unsynced
commit: a duplicate or an expiry that a feedback reports also waits for an fsync while anything
committed is not synced yet (a commit that changed rows after the last fsync began), and is answered
at once otherwise. Against ``kill -9`` nothing changes (every answer follows its commit); against
power loss nothing acknowledged is lost (every acknowledgement follows its fsync).
A failed fsync answers its waiters 503 and the store is not ready until a write succeeds; their writes
are committed, so a retry finds the claim and is answered once a later fsync has succeeded.
:meth:`SQLiteStore.close` finishes the queued writes and their fsync.

Performance. A pair ``put_decision`` + ``claim_and_append`` writes the record's bytes once (the learn
event, and the decision-log row of a logged decision, refer to them) and runs 5 + 8 statements
(6 + 8 when logged), about 13 WAL frames (15 when logged) when each commits alone; a group writes the
pages its writes share (the counters' row, the b-tree leaves they append to) once. ``secure_delete=FAST``
(Debian's SQLite zeroes every freed page by default, writing each freed overflow page of a record
once more): deleted content is still cleared from the b-tree pages written anyway, not from freed
pages, which are reused.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeVar

import numpy as np

from service.store.base import (
    ACTIVITY_MINUTES,
    ActivateOutcome,
    ActivateStatus,
    Activity,
    Checkpoint,
    Claim,
    ClaimOutcome,
    ClaimStatus,
    Counts,
    DecisionExistsError,
    DecisionRecord,
    Event,
    LoggedDecision,
    ModelExistsError,
    Reward,
    Store,
    StoreUnavailableError,
    UnknownModelError,
    feedback_outcome,
)
from service.store.codec import (
    catalog_of,
    decode_decision,
    decode_x,
    eligible_of,
    encode_decision,
    encode_x,
    rollout_of,
    slot_of,
)

try:
    import fcntl
except ImportError:  # no flock (Windows): SQLite's exclusive locking mode, checkpoints on the loop
    fcntl = None  # type: ignore[assignment]

__all__ = ["DataDirInUseError", "SQLiteStore"]

log = logging.getLogger(__name__)
_fdatasync = getattr(os, "fdatasync", os.fsync)  # no fdatasync on macOS

SCHEMA_VERSION = 6

_MODELS = """
CREATE TABLE models (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    config TEXT NOT NULL,
    last INTEGER NOT NULL DEFAULT 0,
    decisions INTEGER NOT NULL DEFAULT 0,
    clicks INTEGER NOT NULL DEFAULT 0,
    no_clicks INTEGER NOT NULL DEFAULT 0,
    expired INTEGER NOT NULL DEFAULT 0,
    pending INTEGER NOT NULL DEFAULT 0
)"""
_BLOBS = """
CREATE TABLE blobs (
    id INTEGER PRIMARY KEY,
    x BLOB NOT NULL,
    decision BLOB NOT NULL
)"""
_DECISIONS = """
CREATE TABLE {name} (
    id TEXT PRIMARY KEY,
    model INTEGER NOT NULL,
    blob INTEGER NOT NULL,
    model_version INTEGER NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID"""
_DECISIONS_DUE = "CREATE INDEX decisions_due ON decisions (model, expires_at)"
_CLAIMS = """
CREATE TABLE {name} (
    id TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    outcome TEXT NOT NULL,
    position INTEGER,
    at REAL NOT NULL,
    forget_at REAL NOT NULL
) WITHOUT ROWID"""
_CLAIMS_FORGET = "CREATE INDEX claims_forget ON claims (forget_at)"
_EVENTS = """
CREATE TABLE events (
    model INTEGER NOT NULL,
    position INTEGER NOT NULL,
    kind TEXT NOT NULL,
    at REAL NOT NULL,
    decision_id TEXT NOT NULL DEFAULT '',
    x BLOB,
    decision BLOB,
    reward INTEGER,
    outcome TEXT,
    state BLOB,
    blob INTEGER,
    PRIMARY KEY (model, position)
) WITHOUT ROWID"""
_CHECKPOINTS = """
CREATE TABLE checkpoints (
    model INTEGER PRIMARY KEY,
    position INTEGER NOT NULL,
    state BLOB NOT NULL
)"""
_DECISION_LOG = """
CREATE TABLE decision_log (
    model INTEGER NOT NULL,
    created_at REAL NOT NULL,
    blob INTEGER NOT NULL,
    id TEXT NOT NULL,
    model_version INTEGER NOT NULL,
    outcome TEXT,
    reward INTEGER,
    outcome_at REAL,
    position INTEGER,
    PRIMARY KEY (model, created_at, blob)
) WITHOUT ROWID"""
_ACTIVITY = """
CREATE TABLE activity (
    model INTEGER NOT NULL,
    minute INTEGER NOT NULL,
    decisions INTEGER NOT NULL DEFAULT 0,
    clicks INTEGER NOT NULL DEFAULT 0,
    no_clicks INTEGER NOT NULL DEFAULT 0,
    expired INTEGER NOT NULL DEFAULT 0,
    exploration REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (model, minute)
) WITHOUT ROWID"""

_SCHEMA_2 = (
    _MODELS,
    _BLOBS,
    _DECISIONS.format(name="decisions"),
    _DECISIONS_DUE,
    _CLAIMS.format(name="claims"),
    _CLAIMS_FORGET,
    _EVENTS,
    _CHECKPOINTS,
)

# Schema 1 -> 2: records' bytes move to ``blobs`` (keyed by the old rowid), ``decisions`` and
# ``claims`` become WITHOUT ROWID tables, events get their ``blob`` reference (old learn events
# keep their inline copies).
_MIGRATE_1 = (
    _BLOBS,
    "INSERT INTO blobs (id, x, decision) SELECT rowid, x, decision FROM decisions",
    _DECISIONS.format(name="decisions_2"),
    "INSERT INTO decisions_2 (id, model, blob, model_version, created_at, expires_at) "
    "SELECT id, model, rowid, model_version, created_at, expires_at FROM decisions",
    "DROP TABLE decisions",
    "ALTER TABLE decisions_2 RENAME TO decisions",
    _DECISIONS_DUE,
    _CLAIMS.format(name="claims_2"),
    "INSERT INTO claims_2 (id, model, outcome, position, at, forget_at) "
    "SELECT id, model, outcome, position, at, forget_at FROM claims",
    "DROP TABLE claims",
    "ALTER TABLE claims_2 RENAME TO claims",
    _CLAIMS_FORGET,
    "ALTER TABLE events ADD COLUMN blob INTEGER",
)

# Schema 2 -> 3: the decision log (empty: decisions were not logged before), its row count per model
# and the flag of the blobs it refers to. A new file gets schema 2 and this, so that every file has
# the same columns in the same order.
_MIGRATE_2 = (
    _DECISION_LOG,
    "ALTER TABLE models ADD COLUMN logged INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE blobs ADD COLUMN logged INTEGER",
)
# Schema 3 -> 4: the dashboard's per-minute activity (empty: nothing was counted before).
_MIGRATE_3 = (_ACTIVITY,)
# Schema 4 -> 5: the counters of graded rewards, all-time and per minute (issue 38; none before).
_MIGRATE_4 = (
    "ALTER TABLE models ADD COLUMN graded INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE models ADD COLUMN graded_sum REAL NOT NULL DEFAULT 0",
    "ALTER TABLE activity ADD COLUMN graded INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE activity ADD COLUMN graded_sum REAL NOT NULL DEFAULT 0",
)
# Schema 5 -> 6: deferred decisions (issue 38): their counters, the activation and the held feedback
# of a pending one, the flags of a claim and of a decision-log row (no decision was deferred before).
_MIGRATE_5 = (
    "ALTER TABLE models ADD COLUMN deferred INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE models ADD COLUMN activated INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE models ADD COLUMN dropped_unactivated INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE decisions ADD COLUMN deferred INTEGER",
    "ALTER TABLE decisions ADD COLUMN activated_at REAL",
    "ALTER TABLE decisions ADD COLUMN held_reward REAL",
    "ALTER TABLE decisions ADD COLUMN held_outcome TEXT",
    "ALTER TABLE decisions ADD COLUMN held_at REAL",
    "ALTER TABLE claims ADD COLUMN deferred INTEGER",
    "ALTER TABLE claims ADD COLUMN activated INTEGER",
    "ALTER TABLE decision_log ADD COLUMN deferred INTEGER",
    "ALTER TABLE decision_log ADD COLUMN activated_at REAL",
)
_MIGRATIONS = {
    0: _SCHEMA_2 + _MIGRATE_2 + _MIGRATE_3 + _MIGRATE_4 + _MIGRATE_5,
    1: _MIGRATE_1 + _MIGRATE_2 + _MIGRATE_3 + _MIGRATE_4 + _MIGRATE_5,
    2: _MIGRATE_2 + _MIGRATE_3 + _MIGRATE_4 + _MIGRATE_5,
    3: _MIGRATE_3 + _MIGRATE_4 + _MIGRATE_5,
    4: _MIGRATE_4 + _MIGRATE_5,
    5: _MIGRATE_5,
}

# Primary result codes of a write that mean the disk cannot take it (full, I/O error): the store is
# not ready (ping) until a write succeeds again.
_UNWRITABLE = {10, 13}  # SQLITE_IOERR, SQLITE_FULL
# Primary result codes that mean "the disk / file cannot serve now" (503, retry later), not a bug.
_TRANSIENT = {
    5,  # SQLITE_BUSY
    6,  # SQLITE_LOCKED
    7,  # SQLITE_NOMEM
    10,  # SQLITE_IOERR
    13,  # SQLITE_FULL
    14,  # SQLITE_CANTOPEN
    15,  # SQLITE_PROTOCOL
}

P = ParamSpec("P")
T = TypeVar("T")


class DataDirInUseError(RuntimeError):
    """Another process holds the SQLite file (the embedded store serves one process)."""


def _available(method: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Turn "the disk cannot serve now" (full, I/O error) into :class:`StoreUnavailableError` (503)."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(*args, **kwargs)
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _TRANSIENT:
                raise StoreUnavailableError(f"SQLite store unavailable: {exc}") from exc
            raise

    return wrapper


def _settle(future: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    """Answer a waiter of a group commit (unless it gave up waiting)."""
    if future.done():
        return
    if exc is None:
        future.set_result(value)
    else:
        future.set_exception(exc)


def _unknown(name: str) -> UnknownModelError:
    return UnknownModelError(f"unknown model {name!r}")


def _held(outcome: str, value: float) -> Reward:
    """A held feedback's reward, from its outcome and stored value (REAL)."""
    return float(value) if outcome == "reward" else outcome == "click"


# A pending decision for claim_and_append and activate; a live claim.
_PENDING = (
    "SELECT d.model, d.blob, d.expires_at, m.name, m.last, d.created_at, d.deferred, d.activated_at, "
    "d.held_outcome, d.held_reward, d.held_at FROM decisions d JOIN models m ON m.id = d.model WHERE d.id = ?"
)
_LIVE_CLAIM = (
    "SELECT model, outcome, position, at, deferred, activated FROM claims WHERE id = ? AND forget_at > ?"
)


class SQLiteStore(Store):
    """:class:`~service.store.base.Store` in one SQLite file (see module docstring).

    Parameters
    ----------
    path : str or Path
        The database file; its directory is created on first use.
    claim_ttl : float
        Seconds a claim is remembered (duplicates within it get 409).
    synchronous : {"full", "normal"}
        fsync of the acknowledged commits (feedback, model changes, reset / import events).
    lock_timeout : float
        Seconds to wait at start-up for another process to release the file (a restart whose old
        process is still shutting down) before :class:`DataDirInUseError`.
    """

    #: Stale claims deleted by one ``expire_due`` at most (the next sweep continues).
    _FORGET_PER_SWEEP = 10_000
    #: Rows per transaction of the housekeeping steps (each a few ms at most; requests run between).
    _FORGET_STEP = 1000
    _EXPIRE_STEP = 250
    _TRIM_STEP = 250
    #: Seconds one ``read_decision_log`` call decodes rows at most before it returns a shorter page
    #: (with its cursor): a page of 256 records took 30 ms, with every request waiting (issue 42).
    #: Pages are read one at a time, each after a pause as long, so that exports and evaluation jobs
    #: take at most about half of the event loop however many there are.
    _READ_SLICE = 0.001
    #: Free bytes the data directory's file system must have for the store to be ready (``ping``).
    _MIN_FREE_BYTES = 1 << 20
    #: Writes per group transaction at most (bounds the time it holds the event loop).
    _GROUP = 256

    def __init__(
        self,
        path: str | Path,
        claim_ttl: float = 86_400.0,
        synchronous: Literal["full", "normal"] = "full",
        *,
        lock_timeout: float = 5.0,
    ) -> None:
        super().__init__(claim_ttl)
        if synchronous.lower() not in ("full", "normal"):
            raise ValueError(f"synchronous must be 'full' or 'normal', not {synchronous!r}")
        self.path = Path(path)
        self.synchronous = synchronous.lower()
        self._acked = synchronous.upper()  # level of acknowledged commits
        self.lock_timeout = lock_timeout
        self._db: sqlite3.Connection | None = None
        self._sync_level = ""  # PRAGMA synchronous currently set on the connection
        self._lock_fd = -1  # flock on <path>.lock while the file is open
        self._checkpointer: _Checkpointer | None = None
        self._log_readers = asyncio.Lock()  # one page of a decision log read at a time
        self._unwritable: str | None = None  # why the last write failed, until one succeeds
        # Group commit (see module docstring): the writes waiting for the next group's transaction,
        # the answers waiting for an fsync, the commits that changed rows so far and how many of them
        # an fsync covers, the task that runs fsyncs, its thread.
        self._fsync = self.synchronous == "full"
        self._queue: list[tuple[Callable[[sqlite3.Connection], Any], asyncio.Future[Any], bool]] = []
        self._flush_handle: asyncio.Handle | None = None
        self._unsynced: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        self._commits = 0
        self._synced = 0
        self._syncer: asyncio.Task[None] | None = None
        self._sync_thread: ThreadPoolExecutor | None = None
        self._wal_fd = -1
        #: fsyncs of the WAL made by the group commit so far (a test checks how many feedbacks share one)
        self.wal_syncs = 0

    # -- connection and transactions ------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            lock = self._lock()
            try:
                self._db = self._open(exclusive=lock < 0)
            except BaseException:
                if lock >= 0:
                    os.close(lock)
                raise
            self._lock_fd = lock
            if lock >= 0:
                try:
                    self._checkpointer = _Checkpointer(self.path, self.lock_timeout)
                except OSError as exc:  # checkpoint on the loop instead
                    log.warning("SQLite checkpoints on the event loop: %s", exc)
                    self._db.execute("PRAGMA wal_autocheckpoint=1000")
        return self._db

    def _in_use(self) -> DataDirInUseError:
        return DataDirInUseError(
            f"{self.path} is in use by another process: the SQLite store serves one process "
            "(stop the other server, or set REDIS_URL to share models between processes)"
        )

    def _lock(self) -> int:
        """Take the file's process lock: ``flock`` on ``<file>.lock`` (-1 where flock is missing)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if fcntl is None:
            return -1
        fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise self._in_use() from None
                time.sleep(0.02)
            except OSError:  # no flock on this file system: SQLite's exclusive locking mode instead
                os.close(fd)
                return -1

    def _open(self, exclusive: bool) -> sqlite3.Connection:
        db = sqlite3.connect(
            self.path, isolation_level=None, timeout=self.lock_timeout, cached_statements=256
        )
        try:
            if exclusive:  # before WAL: no shared-memory index either
                db.execute("PRAGMA locking_mode=EXCLUSIVE")
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise RuntimeError(f"{self.path}: SQLite refused WAL mode (journal_mode={mode})")
            if not exclusive:  # the checkpointer thread copies the WAL; this is a safety net only
                db.execute(f"PRAGMA wal_autocheckpoint={_Checkpointer.SAFETY_FRAMES}")
            db.execute("PRAGMA journal_size_limit=67108864")  # WAL file kept <= 64 MiB after checkpoints
            db.execute("PRAGMA secure_delete=FAST")  # see module docstring
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (*_MIGRATIONS, SCHEMA_VERSION):
                raise RuntimeError(
                    f"{self.path}: schema version {version}, this server reads {SCHEMA_VERSION}"
                )
            db.execute("PRAGMA synchronous=FULL")
            db.execute("BEGIN IMMEDIATE")  # exclusive locking mode: a second process stops here
            if version != SCHEMA_VERSION:
                for statement in _MIGRATIONS[version]:
                    db.execute(statement)
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            db.close()
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF in (5, 6):  # BUSY, LOCKED
                raise self._in_use() from None
            raise
        except BaseException:
            db.close()
            raise
        self._sync_level = "FULL"
        return db

    @contextmanager
    def _write(self, level: str) -> Iterator[sqlite3.Connection]:
        """One write transaction, committed with ``PRAGMA synchronous=level``; rolled back on error."""
        db = self._conn()
        if level != self._sync_level:
            db.execute(f"PRAGMA synchronous={level}")
            self._sync_level = level
        changes = db.total_changes  # a C int that wraps: compared for a change only
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:  # SQLite rolls back by itself after some I/O errors
                    db.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _UNWRITABLE:
                self._unwritable = str(exc)
            raise
        self._unwritable = None
        if db.total_changes != changes:
            self._commits += 1
        if level == "FULL":  # SQLite synced the WAL: every commit before this one is durable too
            self._synced = self._commits
        if self._checkpointer is not None:
            self._checkpointer.committed(db)

    # -- group commit -----------------------------------------------------------------------------

    async def _grouped(self, op: Callable[[sqlite3.Connection], T], durable: bool) -> T:
        """Run ``op(db)`` in the next group's transaction; return its result (or raise its error)
        once committed and, if ``durable`` and ``synchronous`` is full, once the WAL is fsynced.

        A group takes whatever is queued when it runs: soon after a write that is not durable (a
        predict's record), or, for durable ones, right before the next fsync when one is running
        (they are answered after the fsync that follows it anyway).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        durable = durable and self._fsync
        self._queue.append((op, future, durable))
        if self._flush_handle is None and (not durable or self._syncer is None):
            self._flush_handle = loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        """Commit the queued writes as one group (at most ``_GROUP`` of them); answer those that
        need no fsync, and hand the others to the syncer. Never raises: errors go to the waiters."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        group, self._queue = self._queue[: self._GROUP], self._queue[self._GROUP :]
        if self._queue:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)
        if not group:
            return
        try:
            with self._write("NORMAL") as db:  # durability comes from the syncer's fsync
                answers = self._run_group(db, group)
        except Exception as exc:  # the transaction as a whole (BEGIN, COMMIT, or rolled back by SQLite)
            for _, future, _ in group:
                _settle(future, None, exc)
            return
        # An answer may rest on any commit before it (the claim a duplicate is told about): wait for
        # an fsync if anything is committed and not synced.
        unsynced = self._commits > self._synced
        for (_, future, durable), (value, exc) in zip(group, answers, strict=True):
            if durable and unsynced:
                self._unsynced.append((future, value, exc))
            else:
                _settle(future, value, exc)
        if self._unsynced and self._syncer is None:
            self._syncer = asyncio.get_running_loop().create_task(self._sync())

    @staticmethod
    def _run_group(
        db: sqlite3.Connection, group: list[tuple[Callable[[sqlite3.Connection], Any], Any, bool]]
    ) -> list[tuple[Any, Exception | None]]:
        """In the caller's transaction: each write of ``group`` in a savepoint of its own, so that an
        error (a taken decision id, an unknown model) undoes only that one and goes to its waiter."""
        if len(group) == 1:  # its error rolls back the whole transaction, which is its own
            return [(group[0][0](db), None)]
        answers: list[tuple[Any, Exception | None]] = []
        for op, _, _ in group:
            db.execute("SAVEPOINT item")
            try:
                value = op(db)
            except Exception as exc:
                if not db.in_transaction:  # SQLite rolled back everything (I/O error, full disk)
                    raise
                db.execute("ROLLBACK TO item")
                db.execute("RELEASE item")
                answers.append((None, exc))
            else:
                db.execute("RELEASE item")
                answers.append((value, None))
        return answers

    async def _sync(self) -> None:
        """fsync the WAL while commits wait for it, one fsync for all of them; between two, the
        durable writes queued meanwhile are committed as one group."""
        loop = asyncio.get_running_loop()
        waiting: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        try:
            while True:
                self._flush()
                if not self._unsynced:
                    return
                target = self._commits  # everything committed so far
                waiting, self._unsynced = self._unsynced, []
                if self._sync_thread is None:
                    self._sync_thread = ThreadPoolExecutor(1, thread_name_prefix="sqlite-fsync")
                try:
                    await loop.run_in_executor(self._sync_thread, self._fsync_wal)
                except OSError as exc:  # not acknowledged: 503, and /readyz too until a write succeeds
                    self._unwritable = f"fsync: {exc}"
                    failed = StoreUnavailableError(
                        f"SQLite store unavailable: fsync of the WAL failed: {exc}"
                    )
                    for future, _, _ in waiting:
                        _settle(future, None, failed)
                else:
                    self.wal_syncs += 1
                    self._synced = max(self._synced, target)
                    for future, value, exc in waiting:
                        _settle(future, value, exc)
                waiting = []
        except BaseException as exc:  # a bug or the loop's end: nobody waits for ever
            for future, _, _ in waiting + self._unsynced:
                _settle(future, None, exc if isinstance(exc, Exception) else StoreUnavailableError(str(exc)))
            self._unsynced = []
            raise
        finally:
            self._syncer = None

    def _fsync_wal(self) -> None:
        """In the sync thread: fdatasync the WAL file (the commits in it so far are on disk, as a
        FULL commit would have made them). The descriptor stays open until :meth:`close`."""
        if self._wal_fd < 0:
            self._wal_fd = os.open(f"{self.path}-wal", os.O_RDONLY)
        _fdatasync(self._wal_fd)

    async def _pause(self) -> bool:
        """Let other requests run between two housekeeping steps; False if the store was closed."""
        db = self._db
        await asyncio.sleep(0)
        return db is not None and self._db is db

    @staticmethod
    def _model_id(db: sqlite3.Connection, name: str) -> int:
        row = db.execute("SELECT id FROM models WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise _unknown(name)
        return int(row[0])

    # -- models -----------------------------------------------------------------------------

    @_available
    async def create_model(self, name: str, config: Mapping[str, Any]) -> None:
        doc = json.dumps(dict(config), sort_keys=True)
        try:
            with self._write(self._acked) as db:
                db.execute("INSERT INTO models (name, config) VALUES (?, ?)", (name, doc))
        except sqlite3.IntegrityError:
            raise ModelExistsError(f"model {name!r} already exists") from None

    @_available
    async def get_model(self, name: str) -> dict[str, Any]:
        row = self._conn().execute("SELECT config FROM models WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise _unknown(name)
        return json.loads(row[0])

    @_available
    async def list_models(self) -> dict[str, dict[str, Any]]:
        rows = self._conn().execute("SELECT name, config FROM models ORDER BY name").fetchall()
        return {name: json.loads(doc) for name, doc in rows}

    @_available
    async def delete_model(self, name: str) -> None:
        with self._write(self._acked) as db:
            model_id = self._model_id(db, name)
            db.execute(
                "DELETE FROM blobs WHERE id IN (SELECT blob FROM decisions WHERE model = ?)", (model_id,)
            )
            db.execute("DELETE FROM blobs WHERE id IN (SELECT blob FROM events WHERE model = ?)", (model_id,))
            db.execute(
                "DELETE FROM blobs WHERE id IN (SELECT blob FROM decision_log WHERE model = ?)", (model_id,)
            )
            for table in ("decisions", "events", "checkpoints", "decision_log", "activity"):
                db.execute(f"DELETE FROM {table} WHERE model = ?", (model_id,))
            db.execute("DELETE FROM models WHERE id = ?", (model_id,))

    @_available
    async def counts(self, name: str) -> Counts:
        row = (
            self._conn()
            .execute(
                "SELECT decisions, clicks, no_clicks, expired, pending, graded, graded_sum, deferred, "
                "activated, dropped_unactivated FROM models WHERE name = ?",
                (name,),
            )
            .fetchone()
        )
        if row is None:
            raise _unknown(name)
        return Counts(*(int(v) for v in row[:6]), float(row[6]), *(int(v) for v in row[7:]))

    # -- decisions and feedback -------------------------------------------------------------

    @_available
    async def put_decision(self, record: DecisionRecord) -> None:
        x, decision = encode_x(record.x), encode_decision(record.decision)
        # Not durable (see module docstring: a lost record is a later 404): answered at its commit.
        await self._grouped(functools.partial(self._put_decision, record, x, decision), durable=False)

    async def put_page(self, records: Sequence[DecisionRecord]) -> None:
        # One write of the group, in one savepoint: a taken id undoes the slots put before it.
        coded = [(r, encode_x(r.x), encode_decision(r.decision)) for r in records]

        def put(db: sqlite3.Connection) -> None:
            try:
                for record, x, decision in coded:
                    self._put_decision(record, x, decision, db)
            except DecisionExistsError:
                raise DecisionExistsError(records[0].decision_id) from None

        await self._grouped(put, durable=False)

    def _put_decision(
        self, record: DecisionRecord, x: bytes, decision: bytes, db: sqlite3.Connection
    ) -> None:
        """In a group's transaction: store the pending record (its blob, its decision-log row)."""
        decision_id = record.decision_id
        deferred = 1 if record.deferred else None
        blob = db.execute(
            "INSERT INTO blobs (x, decision, logged) VALUES (?, ?, ?)",
            (x, decision, 1 if record.logged else None),
        ).lastrowid
        try:
            added = db.execute(
                "INSERT INTO decisions "
                "(id, model, blob, model_version, created_at, expires_at, deferred) "
                "SELECT ?, id, ?, ?, ?, ?, ? FROM models WHERE name = ? "
                "AND NOT EXISTS (SELECT 1 FROM claims WHERE id = ?)",
                (
                    decision_id,
                    blob,
                    int(record.model_version),
                    float(record.created_at),
                    float(record.expires_at),
                    deferred,
                    record.model,
                    decision_id,
                ),
            ).rowcount
        except sqlite3.IntegrityError:  # pending already
            raise DecisionExistsError(decision_id) from None
        if not added:  # no such model, or claimed already (the blob is rolled back with the error)
            self._model_id(db, record.model)
            raise DecisionExistsError(decision_id)
        if record.logged:  # refers to the same blob: the bytes are written once
            db.execute(
                "INSERT INTO decision_log (model, created_at, blob, id, model_version, deferred) "
                "SELECT id, ?, ?, ?, ?, ? FROM models WHERE name = ?",
                (
                    float(record.created_at),
                    blob,
                    decision_id,
                    int(record.model_version),
                    deferred,
                    record.model,
                ),
            )
        db.execute(
            "UPDATE models SET decisions = decisions + 1, pending = pending + 1, logged = logged + ?, "
            "deferred = deferred + ? WHERE name = ?",
            (int(record.logged), int(record.deferred), record.model),
        )

    @_available
    async def get_decision(self, decision_id: str) -> DecisionRecord | None:
        row = (
            self._conn()
            .execute(
                "SELECT m.name, b.x, b.decision, d.model_version, d.created_at, d.expires_at, "
                "b.logged, d.deferred, d.activated_at "
                "FROM decisions d JOIN models m ON m.id = d.model JOIN blobs b ON b.id = d.blob "
                "WHERE d.id = ?",
                (decision_id,),
            )
            .fetchone()
        )
        if row is None:
            return None
        model, x, decision, version, created_at, expires_at, logged, deferred, activated_at = row
        return DecisionRecord(
            decision_id,
            model,
            decode_x(x),
            decode_decision(decision),
            int(version),
            created_at,
            expires_at,
            bool(logged),
            bool(deferred),
            activated_at,
        )

    @_available
    async def claim_and_append(
        self, decision_id: str, reward: Reward, now: float, model: str | None = None
    ) -> ClaimOutcome:
        op = functools.partial(self._claim, decision_id, reward, now, model)
        return await self._grouped(op, durable=True)

    def _claim(
        self, decision_id: str, reward: Reward, now: float, want: str | None, db: sqlite3.Connection
    ) -> ClaimOutcome:
        """In a group's transaction: :meth:`claim_and_append` (``want``: its ``model``)."""
        row = db.execute(_PENDING, (decision_id,)).fetchone()
        if row is not None and want is not None and row[3] != want:  # a decision of another model
            return ClaimOutcome(ClaimStatus.UNKNOWN)
        if row is None:  # claimed before (a pending record never has a claim), or unknown
            claim = self._live_claim(db, decision_id, now)
            if claim is None or (want is not None and claim.model != want):
                return ClaimOutcome(ClaimStatus.UNKNOWN)
            status = ClaimStatus.EXPIRED if claim.outcome == "expired" else ClaimStatus.DUPLICATE
            return ClaimOutcome(status, claim)
        model_id, blob, expires_at, model, last, created_at, deferred, activated_at, held, _, held_at = row
        if now >= expires_at:  # left for expire_due, which claims it
            pending = Claim(decision_id, model, "expired", None, expires_at, bool(deferred))
            return ClaimOutcome(ClaimStatus.EXPIRED, pending)
        if deferred and activated_at is None:  # held in the record until the activation
            if held is not None:
                return ClaimOutcome(
                    ClaimStatus.DUPLICATE, Claim(decision_id, model, held, None, held_at, True)
                )
            outcome = feedback_outcome(reward)
            db.execute(
                "UPDATE decisions SET held_reward = ?, held_outcome = ?, held_at = ? WHERE id = ?",
                (float(reward), outcome, now, decision_id),
            )
            return ClaimOutcome(ClaimStatus.HELD, Claim(decision_id, model, outcome, None, now, True))
        claim = self._learn(
            db, decision_id, model_id, model, blob, created_at, int(last), reward, now, bool(deferred)
        )
        return ClaimOutcome(ClaimStatus.ACCEPTED, claim)

    @staticmethod
    def _live_claim(db: sqlite3.Connection, decision_id: str, now: float) -> Claim | None:
        row = db.execute(_LIVE_CLAIM, (decision_id, now)).fetchone()
        if row is None:
            return None
        model, outcome, position, at, deferred, activated = row
        return Claim(decision_id, model, outcome, position, at, bool(deferred), bool(activated))

    def _learn(
        self,
        db: sqlite3.Connection,
        decision_id: str,
        model_id: int,
        model: str,
        blob: int,
        created_at: float,
        last: int,
        reward: Reward,
        now: float,
        deferred: bool,
    ) -> Claim:
        """In the caller's transaction: claim a pending decision with a feedback of ``reward`` (its
        learn event, claim, counters and decision-log outcome). A deferred one is activated."""
        position = last + 1
        outcome = feedback_outcome(reward)
        value = int(reward) if isinstance(reward, bool) else float(reward)  # REAL when graded
        if outcome == "reward":
            db.execute(
                "UPDATE models SET last = ?, graded = graded + 1, graded_sum = graded_sum + ?, "
                "pending = pending - 1 WHERE id = ?",
                (position, value, model_id),
            )
        else:
            db.execute(
                f"UPDATE models SET last = ?, {outcome}s = {outcome}s + 1, pending = pending - 1 "
                "WHERE id = ?",
                (position, model_id),
            )
        db.execute(
            "INSERT INTO events (model, position, kind, at, decision_id, blob, reward, outcome) "
            "VALUES (?, ?, 'learn', ?, ?, ?, ?, ?)",
            (model_id, position, now, decision_id, blob, value, outcome),
        )
        flag = 1 if deferred else None
        db.execute(
            "INSERT INTO claims (id, model, outcome, position, at, forget_at, deferred, activated) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (decision_id, model, outcome, position, now, now + self.claim_ttl, flag, flag),
        )
        db.execute("DELETE FROM decisions WHERE id = ?", (decision_id,))
        db.execute(  # no row unless the decision is logged
            "UPDATE decision_log SET outcome = ?, reward = ?, outcome_at = ?, position = ? "
            "WHERE model = ? AND created_at = ? AND blob = ?",
            (outcome, value, now, position, model_id, created_at, blob),
        )
        return Claim(decision_id, model, outcome, position, now, deferred, deferred)

    @_available
    async def activate(self, decision_id: str, now: float, model: str | None = None) -> ActivateOutcome:
        op = functools.partial(self._activate, decision_id, now, model)
        return await self._grouped(op, durable=True)

    def _activate(
        self, decision_id: str, now: float, want: str | None, db: sqlite3.Connection
    ) -> ActivateOutcome:
        """In a group's transaction: :meth:`activate` (``want``: its ``model``)."""
        row = db.execute(_PENDING, (decision_id,)).fetchone()
        if row is not None and want is not None and row[3] != want:  # a decision of another model
            return ActivateOutcome(ActivateStatus.UNKNOWN)
        if row is None:
            claim = self._live_claim(db, decision_id, now)
            if claim is None or (want is not None and claim.model != want):
                return ActivateOutcome(ActivateStatus.UNKNOWN)
            if claim.deferred and not claim.activated:  # dropped unactivated
                return ActivateOutcome(ActivateStatus.EXPIRED, claim)
            return ActivateOutcome(ActivateStatus.ALREADY, claim, claim.deferred)
        model_id, blob, expires_at, model, last, created_at, deferred, activated_at, held, value, _ = row
        if not deferred or activated_at is not None:
            return ActivateOutcome(ActivateStatus.ALREADY, None, bool(deferred))
        if now >= expires_at:  # left for expire_due, which drops it
            pending = Claim(decision_id, model, "expired", None, expires_at, True)
            return ActivateOutcome(ActivateStatus.EXPIRED, pending)
        db.execute("UPDATE decisions SET activated_at = ? WHERE id = ?", (now, decision_id))
        db.execute("UPDATE models SET activated = activated + 1 WHERE id = ?", (model_id,))
        db.execute(  # no row unless the decision is logged
            "UPDATE decision_log SET activated_at = ? WHERE model = ? AND created_at = ? AND blob = ?",
            (now, model_id, created_at, blob),
        )
        if held is None:
            return ActivateOutcome(ActivateStatus.ACTIVATED)
        reward = _held(held, value)
        claim = self._learn(db, decision_id, model_id, model, blob, created_at, int(last), reward, now, True)
        return ActivateOutcome(ActivateStatus.ACTIVATED, claim, reward=reward)

    @_available
    async def expire_due(
        self, model: str, now: float, default_reward: Literal["no_click", "drop"]
    ) -> list[Claim]:
        db = self._conn()
        model_id = self._model_id(db, model)
        due_query = (
            "SELECT id, blob, created_at, deferred, activated_at FROM decisions "
            "WHERE model = ? AND expires_at <= ?"
        )
        # Read first: a sweep that finds nothing (the usual case, every second) writes nothing.
        forget = db.execute("SELECT 1 FROM claims WHERE forget_at <= ? LIMIT 1", (now,)).fetchone()
        if not forget and not db.execute(due_query + " LIMIT 1", (model_id, now)).fetchone():
            return []
        # Not acknowledged to anyone: if lost, the decisions are still pending and expire again.
        forgotten = 0
        while forget and forgotten < self._FORGET_PER_SWEEP:
            with self._write("NORMAL") as db:
                n = db.execute(
                    "DELETE FROM claims WHERE id IN "
                    "(SELECT id FROM claims WHERE forget_at <= ? ORDER BY forget_at LIMIT ?)",
                    (now, self._FORGET_STEP),
                ).rowcount
            forgotten += n
            forget = n == self._FORGET_STEP  # maybe more
            if not await self._pause():
                return []
        learn = default_reward == "no_click"
        claims: list[Claim] = []
        forget_at = now + self.claim_ttl
        while True:
            with self._write("NORMAL") as db:
                due = db.execute(
                    due_query + " ORDER BY expires_at, id LIMIT ?", (model_id, now, self._EXPIRE_STEP)
                ).fetchall()
                if not due:
                    break
                (last,) = db.execute("SELECT last FROM models WHERE id = ?", (model_id,)).fetchone()
                made: list[Claim] = []
                events, learned, dropped = [], [], []
                unactivated = 0
                for d, b, t, deferred, activated_at in due:
                    position = None
                    if deferred and activated_at is None:  # never shown: dropped whatever the default
                        unactivated += 1
                    elif learn:  # each learn event refers to the record's blob
                        last += 1
                        position = last
                        events.append((model_id, last, now, d, b))
                        learned.append((now, last, model_id, t, b))
                    if position is None:
                        dropped.append((now, model_id, t, b))
                    made.append(
                        Claim(d, model, "expired", position, now, bool(deferred), activated_at is not None)
                    )
                db.executemany(
                    "INSERT INTO events (model, position, kind, at, decision_id, blob, reward, outcome) "
                    "VALUES (?, ?, 'learn', ?, ?, ?, 0, 'expired')",
                    events,
                )
                db.executemany(
                    "UPDATE decision_log SET outcome = 'expired', reward = 0, outcome_at = ?, "
                    "position = ? WHERE model = ? AND created_at = ? AND blob = ?",
                    learned,
                )
                db.executemany(
                    "UPDATE decision_log SET outcome = 'dropped', outcome_at = ? "
                    "WHERE model = ? AND created_at = ? AND blob = ?",
                    dropped,
                )
                # a dropped decision's blob: nothing refers to it any more, unless the decision log keeps it
                db.executemany(
                    "DELETE FROM blobs WHERE id = ? AND logged IS NULL", [(b,) for _, _, _, b in dropped]
                )
                db.executemany(
                    "INSERT INTO claims (id, model, outcome, position, at, forget_at, deferred, activated) "
                    "VALUES (?, ?, 'expired', ?, ?, ?, ?, ?)",
                    [
                        (
                            c.decision_id,
                            model,
                            c.position,
                            now,
                            forget_at,
                            c.deferred or None,
                            c.activated or None,
                        )
                        for c in made
                    ],
                )
                db.executemany("DELETE FROM decisions WHERE id = ?", [(c.decision_id,) for c in made])
                db.execute(
                    "UPDATE models SET last = ?, expired = expired + ?, "
                    "dropped_unactivated = dropped_unactivated + ?, pending = pending - ? WHERE id = ?",
                    (last, len(due) - unactivated, unactivated, len(due), model_id),
                )
            claims += made
            if len(due) < self._EXPIRE_STEP or not await self._pause():
                break
        return claims

    # -- event log and checkpoints ------------------------------------------------------------

    @_available
    async def append(self, model: str, event: Event) -> int:
        if event.kind == "learn":
            raise ValueError("learn events are appended by claim_and_append / expire_due only")
        with self._write(self._acked) as db:
            row = db.execute("SELECT id, last FROM models WHERE name = ?", (model,)).fetchone()
            if row is None:
                raise _unknown(model)
            model_id, position = row[0], int(row[1]) + 1
            db.execute("UPDATE models SET last = ? WHERE id = ?", (position, model_id))
            db.execute(
                "INSERT INTO events (model, position, kind, at, state) VALUES (?, ?, ?, ?, ?)",
                (model_id, position, event.kind, float(event.at), event.state),
            )
        return position

    @_available
    async def read_log(self, model: str, after: int, limit: int = 1000) -> list[Event]:
        db = self._conn()
        model_id = self._model_id(db, model)
        rows = db.execute(
            "SELECT e.position, e.kind, e.at, e.decision_id, coalesce(b.x, e.x), "
            "coalesce(b.decision, e.decision), e.reward, e.outcome, e.state "
            "FROM events e LEFT JOIN blobs b ON b.id = e.blob "
            "WHERE e.model = ? AND e.position > ? ORDER BY e.position LIMIT ?",
            (model_id, after, limit),
        ).fetchall()
        out = []
        for position, kind, at, decision_id, x, decision, reward, outcome, state in rows:
            if kind == "learn":
                out.append(
                    Event(
                        position=position,
                        kind="learn",
                        at=at,
                        decision_id=decision_id,
                        x=decode_x(x),
                        decision=decode_decision(decision),
                        reward=float(reward) if outcome == "reward" else bool(reward),
                        outcome=outcome,
                    )
                )
            else:
                out.append(Event(position=position, kind=kind, at=at, state=state))
        return out

    @_available
    async def log_position(self, model: str) -> int:
        row = self._conn().execute("SELECT last FROM models WHERE name = ?", (model,)).fetchone()
        if row is None:
            raise _unknown(model)
        return int(row[0])

    @_available
    async def put_checkpoint(self, model: str, checkpoint: Checkpoint) -> None:
        # NORMAL: a lost checkpoint is rewritten, and the trim after it cannot survive without it.
        with self._write("NORMAL") as db:
            model_id = self._model_id(db, model)
            row = db.execute("SELECT position FROM checkpoints WHERE model = ?", (model_id,)).fetchone()
            if row is not None and row[0] > checkpoint.position:
                return
            db.execute(
                "INSERT OR REPLACE INTO checkpoints (model, position, state) VALUES (?, ?, ?)",
                (model_id, int(checkpoint.position), bytes(checkpoint.state)),
            )

    @_available
    async def get_checkpoint(self, model: str) -> Checkpoint | None:
        db = self._conn()
        model_id = self._model_id(db, model)
        row = db.execute("SELECT position, state FROM checkpoints WHERE model = ?", (model_id,)).fetchone()
        return None if row is None else Checkpoint(int(row[0]), row[1])

    @_available
    async def trim_log(self, model: str, upto: int) -> None:
        model_id = self._model_id(self._conn(), model)
        while True:  # oldest first, some hundreds of events per transaction (see module docstring)
            with self._write("NORMAL") as db:
                (low,) = db.execute(
                    "SELECT min(position) FROM events WHERE model = ?", (model_id,)
                ).fetchone()
                if low is None or low > upto:
                    return
                high = min(upto, low + self._TRIM_STEP - 1)
                span = (model_id, low, high)
                db.execute(  # but those the decision log keeps
                    "DELETE FROM blobs WHERE id IN "
                    "(SELECT blob FROM events WHERE model = ? AND position BETWEEN ? AND ?) "
                    "AND logged IS NULL",
                    span,
                )
                db.execute("DELETE FROM events WHERE model = ? AND position BETWEEN ? AND ?", span)
            if high >= upto or not await self._pause():
                return

    # -- decision log -----------------------------------------------------------------------------

    @_available
    async def read_decision_log(
        self,
        model: str,
        since: float = -math.inf,
        until: float = math.inf,
        after: str | None = None,
        limit: int = 256,
    ) -> tuple[list[LoggedDecision], str | None]:
        # An export or an evaluation job pages through the whole log: requests run between pages
        # (see _READ_SLICE); the page itself is read without awaiting, so it is consistent.
        async with self._log_readers:
            await asyncio.sleep(self._READ_SLICE)
            return self._decision_log_page(model, since, until, after, limit)

    def _decision_log_page(
        self, model: str, since: float, until: float, after: str | None, limit: int
    ) -> tuple[list[LoggedDecision], str | None]:
        db = self._conn()
        model_id = self._model_id(db, model)
        # The cursor is the primary key (created_at, blob) of the last row returned.
        at, blob = (since, 0) if after is None else (float(after.split(":")[0]), int(after.split(":")[1]))
        rows = db.execute(
            "SELECT l.created_at, l.blob, l.id, l.model_version, l.outcome, l.reward, l.outcome_at, "
            "b.x, b.decision, l.deferred, l.activated_at FROM decision_log l JOIN blobs b ON b.id = l.blob "
            "WHERE l.model = ? AND l.created_at >= ? AND l.created_at < ? "
            "AND (l.created_at > ? OR l.blob > ?) ORDER BY l.created_at, l.blob LIMIT ?",
            (model_id, max(since, at), until, at, blob, limit),
        )
        deadline = time.perf_counter() + self._READ_SLICE
        page = []
        try:
            for (
                created_at,
                blob,
                decision_id,
                version,
                outcome,
                reward,
                outcome_at,
                x,
                decision,
                *act,
            ) in rows:
                d = decode_decision(decision)
                page.append(
                    LoggedDecision(
                        decision_id,
                        int(version),
                        created_at,
                        decode_x(x),
                        np.asarray(d["probs"], dtype=np.float64),
                        int(d["label"]),
                        outcome,
                        None if reward is None else float(reward) if outcome == "reward" else bool(reward),
                        outcome_at,
                        eligible_of(d),
                        *rollout_of(d),
                        bool(act[0]),
                        act[1],
                        slot_of(d),
                        catalog_of(d),
                    )
                )
                if len(page) == limit or time.perf_counter() >= deadline:
                    return page, f"{created_at!r}:{blob}"
        finally:
            rows.close()  # an unfinished statement would hold its read snapshot
        return page, None

    @_available
    async def trim_decision_log(self, model: str, older_than: float | None, keep: int | None) -> int:
        model_id = self._model_id(self._conn(), model)
        cutoff = -math.inf if older_than is None else older_than
        oldest = "SELECT created_at FROM decision_log WHERE model = ? ORDER BY created_at LIMIT 1"
        trimmed = 0
        while True:
            db = self._conn()
            row = db.execute("SELECT logged FROM models WHERE id = ?", (model_id,)).fetchone()
            if row is None:  # deleted meanwhile
                return trimmed
            excess = max(row[0] - keep, 0) if keep is not None else 0
            first = db.execute(oldest, (model_id,)).fetchone()
            # Read first: a sweep with nothing to forget (the usual case, every second) writes nothing.
            if first is None or (excess == 0 and first[0] >= cutoff):
                return trimmed
            # Not acknowledged to anyone: a lost step is done again by the next sweep.
            with self._write("NORMAL") as db:
                rows = db.execute(
                    "SELECT created_at, blob, id, position FROM decision_log WHERE model = ? "
                    "ORDER BY created_at, blob LIMIT ?",
                    (model_id, self._TRIM_STEP),
                ).fetchall()
                n = 0
                while n < len(rows) and (n < excess or rows[n][0] < cutoff):
                    n += 1
                doomed = rows[:n]
                db.executemany(
                    "DELETE FROM decision_log WHERE model = ? AND created_at = ? AND blob = ?",
                    [(model_id, t, b) for t, b, _, _ in doomed],
                )
                # The bytes go with the last reference (no pending record, no learn event left);
                # otherwise they are no longer the log's.
                db.executemany(
                    "DELETE FROM blobs WHERE id = ? AND NOT EXISTS (SELECT 1 FROM decisions WHERE id = ?) "
                    "AND NOT EXISTS (SELECT 1 FROM events WHERE model = ? AND position = ?)",
                    [(b, d, model_id, p) for _, b, d, p in doomed],
                )
                db.executemany("UPDATE blobs SET logged = NULL WHERE id = ?", [(b,) for _, b, _, _ in doomed])
                db.execute("UPDATE models SET logged = logged - ? WHERE id = ?", (n, model_id))
            trimmed += n
            if n < self._TRIM_STEP or not await self._pause():
                return trimmed

    # -- dashboard: per-minute activity -----------------------------------------------------------

    @_available
    async def add_activity(self, model: str, minutes: Mapping[int, Activity]) -> None:
        # NORMAL: counts for a chart, not acknowledged to anyone.
        with self._write("NORMAL") as db:
            model_id = self._model_id(db, model)
            db.executemany(
                "INSERT INTO activity (model, minute, decisions, clicks, no_clicks, expired, exploration, "
                "graded, graded_sum) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (model, minute) DO "
                "UPDATE SET decisions = decisions + excluded.decisions, clicks = clicks + excluded.clicks, "
                "no_clicks = no_clicks + excluded.no_clicks, expired = expired + excluded.expired, "
                "exploration = exploration + excluded.exploration, graded = graded + excluded.graded, "
                "graded_sum = graded_sum + excluded.graded_sum",
                [
                    (
                        model_id,
                        minute,
                        a.decisions,
                        a.clicks,
                        a.no_clicks,
                        a.expired,
                        a.exploration,
                        a.graded,
                        a.graded_sum,
                    )
                    for minute, a in minutes.items()
                ],
            )
            db.execute(  # the primary key's order: the newest minute and the old ones without a scan
                "DELETE FROM activity WHERE model = ? AND minute <= "
                "(SELECT max(minute) FROM activity WHERE model = ?) - ?",
                (model_id, model_id, ACTIVITY_MINUTES),
            )

    @_available
    async def read_activity(self, model: str, since: int) -> dict[int, Activity]:
        db = self._conn()
        rows = db.execute(
            "SELECT minute, decisions, clicks, no_clicks, expired, exploration, graded, graded_sum "
            "FROM activity "
            "WHERE model = ? AND minute >= ? ORDER BY minute",
            (self._model_id(db, model), since),
        ).fetchall()
        return {minute: Activity(*counts) for minute, *counts in rows}

    # -- lifecycle ------------------------------------------------------------------------------

    @_available
    async def ping(self) -> None:
        """The file can be read and written: its file system has ``_MIN_FREE_BYTES`` free and,
        after a write failed for want of room (or an I/O error), a small write succeeds again. So
        ``/readyz`` answers 503 while the disk is full and 200 once it has room, with or without
        traffic. (A write that only reuses the WAL's space can succeed on a full disk: hence the
        free space first.)"""
        self._conn().execute("SELECT 1").fetchone()
        fs = os.statvfs(self.path.parent)
        if fs.f_bavail * fs.f_frsize < self._MIN_FREE_BYTES:
            raise StoreUnavailableError(
                f"SQLite store unavailable: {fs.f_bavail * fs.f_frsize} bytes free in {self.path.parent}"
            )
        if self._unwritable is not None:
            with self._write("NORMAL") as db:  # rewrites the header page: a WAL frame
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    async def close(self) -> None:
        """Finish the queued writes (and their fsync), close the file (SQLite checkpoints the WAL
        into it) and release the lock."""
        while self._queue or self._syncer is not None:
            if self._syncer is not None:
                await asyncio.wait({self._syncer})
            else:
                self._flush()
        if self._sync_thread is not None:
            self._sync_thread.shutdown()
            self._sync_thread = None
        checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            checkpointer.stop()
        if self._db is not None:
            db, self._db = self._db, None
            db.close()
        if checkpointer is not None:
            checkpointer.close_file()
        if self._wal_fd >= 0:  # after the connection, as the checkpointer's (POSIX locks)
            fd, self._wal_fd = self._wal_fd, -1
            os.close(fd)
        if self._lock_fd >= 0:
            fd, self._lock_fd = self._lock_fd, -1
            os.close(fd)  # releases the flock


class _Checkpointer:
    """Copies the WAL into the database file from a thread, so that no request waits for it.

    The thread has its own connection and runs ``PRAGMA wal_checkpoint(PASSIVE)`` after commits
    (at most every ``PAUSE`` seconds): it copies the committed frames and fsyncs, while the loop
    goes on committing (WAL readers and the writer are never blocked by a passive checkpoint). It
    changes no row, so the store's methods stay atomic on the loop thread. SQLite starts the WAL
    file over only when a transaction begins with every frame copied, which never happens while
    commits keep arriving faster than a checkpoint takes; so once the WAL holds ``RESTART_FRAMES``
    the thread checkpoints again until a round finds at most ``FINISH_FRAMES`` new frames, and the
    loop copies those few after its next commit (a millisecond or so), which lets its following
    transaction restart the WAL. ``SAFETY_FRAMES`` (SQLite's auto-checkpoint on the loop) only
    matters if the thread cannot checkpoint at all.
    """

    #: Each checkpoint that copies frames fsyncs the WAL first, and the file when it copied them all: at
    #: most ten a second keep them few beside the group commit's (at a hundred, under ``bench http``'s
    #: load, they were about a fifth of all fsyncs).
    PAUSE = 0.1
    RESTART_FRAMES = 4000
    FINISH_FRAMES = 64
    SYNC_FRAMES = 256
    SAFETY_FRAMES = 20_000

    def __init__(self, path: Path, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._finish = False  # set by the thread: the loop copies the last few frames
        self._finished = threading.Event()
        self._synced = 0
        # Closing any descriptor of the file drops this process's POSIX locks on it (SQLite's): this
        # one stays open until the store's connection is closed (see close_file).
        self._fd = os.open(path, os.O_RDONLY)
        self._thread = threading.Thread(target=self._run, name="sqlite-checkpointer", daemon=True)
        self._thread.start()

    def committed(self, db: sqlite3.Connection) -> None:
        """After each commit on the loop thread (never raises: the commit is done)."""
        if self._finish:
            self._finish = False
            try:
                db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.Error as exc:  # the thread tries again
                log.warning("SQLite checkpoint failed: %s", exc)
            self._finished.set()
        if not self._wake.is_set():
            self._wake.set()

    def _checkpoint(self, db: sqlite3.Connection) -> tuple[int, int]:
        _, frames, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if copied < self._synced:  # the WAL started over
            self._synced = 0
        if copied - self._synced >= self.SYNC_FRAMES:
            # SQLite syncs the file only when a checkpoint copied everything: sync the copies now, so
            # that the loop's final catch-up has little to sync.
            _fdatasync(self._fd)
            self._synced = copied
        return int(frames), int(copied)

    def _run(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None, timeout=self.timeout)
        try:
            while True:
                self._wake.wait()
                if self._stopping.is_set():
                    return
                self._wake.clear()
                try:
                    frames, copied = self._checkpoint(db)
                    if frames >= self.RESTART_FRAMES:
                        for _ in range(10):
                            before = copied
                            frames, copied = self._checkpoint(db)
                            if copied - before <= self.FINISH_FRAMES:
                                break
                        self._finished.clear()
                        self._finish = True
                        self._finished.wait(1.0)  # the loop's next commit, if any
                except (sqlite3.Error, OSError) as exc:  # the loop goes on; SAFETY_FRAMES bounds the WAL
                    log.warning("SQLite checkpoint failed: %s", exc)
                    self._stopping.wait(1.0)
                self._stopping.wait(self.PAUSE)
        finally:
            db.close()

    def stop(self) -> None:
        """Stop the thread (the store then closes its connection, then calls :meth:`close_file`)."""
        self._stopping.set()
        self._wake.set()
        self._finished.set()
        self._thread.join()

    def close_file(self) -> None:
        os.close(self._fd)
