"""The durable embedded store: :class:`~service.store.base.Store` in one SQLite file, one process.

The default when ``REDIS_URL`` is unset (``CLICKBOOST_STORE=sqlite``, file
``$CLICKBOOST_DATA_DIR/clickboost.sqlite3``): models, counters, the event logs, checkpoints, pending
decisions (with their expiry times, so their reward windows keep running across a restart) and claims
survive a restart, a SIGTERM and a ``kill -9``.

Atomicity. Like the memory store, no method awaits: each one runs its SQL synchronously on the event
loop thread, so no other request interleaves with it. Every change of more than one row is one
transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``), so a process killed at any instant leaves all of it
or none: ``claim_and_append`` deletes the pending record, appends the learn event, writes the claim
and bumps the counters in one commit; ``expire_due`` claims every due decision of a model in one.

One process. The file is opened in WAL mode with ``locking_mode=EXCLUSIVE``: the first access takes
SQLite's lock and keeps it until :meth:`SQLiteStore.close` (or the process dies: the kernel releases
it, so ``kill -9`` leaves no stale lock), and a second server on the same data directory stops at
start-up with :class:`DataDirInUseError` instead of serving diverging models. The file is opened on
first use, not when the store object is built, so building the app writes nothing.

Schema (``PRAGMA user_version`` 1):

===============  ================================================================================
``models``       ``id`` (never reused), ``name`` (unique), ``config`` (JSON), ``last`` (log
                 position), counters ``decisions``, ``clicks``, ``no_clicks``, ``expired``,
                 ``pending``
``decisions``    pending decision records: ``id``, ``model``, ``x`` and ``decision``
                 (:mod:`service.store.codec`), ``model_version``, ``created_at``, ``expires_at``;
                 index ``(model, expires_at)`` for the expiry sweep
``claims``       ``id`` -> model name, ``outcome``, ``position``, ``at``, ``forget_at``; index
                 ``forget_at``. A claim is live while ``forget_at > now`` (the caller's clock);
                 ``expire_due`` (the sweep, every second) deletes stale ones, off the feedback path
``events``       the logs, ``WITHOUT ROWID`` clustered on ``(model, position)``: ``kind``, ``at``,
                 ``decision_id``, ``x``, ``decision``, ``reward``, ``outcome``, ``state``. A learn
                 event copies the record's encoded bytes inside SQLite (no decode / encode)
``checkpoints``  the latest ``(position, state)`` per model
===============  ================================================================================

Nothing is pickled: arrays and decisions use :mod:`service.store.codec` (the canonical encoding of
:mod:`service.serial`, as in the Redis store), configs are JSON, times are REAL (exact doubles).

fsync. ``synchronous`` (setting ``CLICKBOOST_SQLITE_SYNCHRONOUS``) applies to the commits whose
success is acknowledged to a client as stored: feedback (``claim_and_append``), model creation and
deletion, reset and import events. ``"full"`` (default) fsyncs the WAL at each of those commits, so an
acknowledged feedback survives power loss; ``"normal"`` does not, and survives a killed process but
may lose the last commits on power loss. Every other commit uses NORMAL, whatever the setting:

- ``put_decision`` (each ``/predict``): losing a pending record on power loss only means that its
  feedback later gets 404 and it never teaches the default reward, which is the policy already
  applied to predictions made while Redis is down. Syncing it would add an fsync to every predict.
- ``expire_due``, ``put_checkpoint``, ``trim_log``: nobody is told they happened; if lost, the
  decisions are still pending and expire again at the next sweep, the checkpoint is rewritten.

This is sound because the WAL is one sequence of frames with cumulative checksums: what survives a
crash is always a prefix of the commits, and a FULL commit syncs every frame before it. So a lost
NORMAL commit takes only later commits with it, never an earlier one, and nothing acknowledged by a
FULL commit can depend on a commit that is lost.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeVar

from service.store.base import (
    Checkpoint,
    Claim,
    ClaimOutcome,
    ClaimStatus,
    Counts,
    DecisionRecord,
    Event,
    ModelExistsError,
    Store,
    StoreUnavailableError,
    UnknownModelError,
)
from service.store.codec import decode_decision, decode_x, encode_decision, encode_x

__all__ = ["DataDirInUseError", "SQLiteStore"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS models (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    config TEXT NOT NULL,
    last INTEGER NOT NULL DEFAULT 0,
    decisions INTEGER NOT NULL DEFAULT 0,
    clicks INTEGER NOT NULL DEFAULT 0,
    no_clicks INTEGER NOT NULL DEFAULT 0,
    expired INTEGER NOT NULL DEFAULT 0,
    pending INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS decisions (
    id TEXT PRIMARY KEY,
    model INTEGER NOT NULL,
    x BLOB NOT NULL,
    decision BLOB NOT NULL,
    model_version INTEGER NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS decisions_due ON decisions (model, expires_at);
CREATE TABLE IF NOT EXISTS claims (
    id TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    outcome TEXT NOT NULL,
    position INTEGER,
    at REAL NOT NULL,
    forget_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS claims_forget ON claims (forget_at);
CREATE TABLE IF NOT EXISTS events (
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
    PRIMARY KEY (model, position)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checkpoints (
    model INTEGER PRIMARY KEY,
    position INTEGER NOT NULL,
    state BLOB NOT NULL
);
"""

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


def _unknown(name: str) -> UnknownModelError:
    return UnknownModelError(f"unknown model {name!r}")


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

    # -- connection and transactions ------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = self._open()
        return self._db

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, isolation_level=None, timeout=self.lock_timeout)
        try:
            db.execute("PRAGMA locking_mode=EXCLUSIVE")  # before WAL: no shared-memory index either
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise RuntimeError(f"{self.path}: SQLite refused WAL mode (journal_mode={mode})")
            db.execute("PRAGMA journal_size_limit=67108864")  # WAL file kept <= 64 MiB after checkpoints
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise RuntimeError(
                    f"{self.path}: schema version {version}, this server reads {SCHEMA_VERSION}"
                )
            db.execute("PRAGMA synchronous=FULL")
            db.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            db.close()
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF in (5, 6):  # BUSY, LOCKED
                raise DataDirInUseError(
                    f"{self.path} is in use by another process: the SQLite store serves one process "
                    "(stop the other server, or set REDIS_URL to share models between processes)"
                ) from None
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
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:  # SQLite rolls back by itself after some I/O errors
                db.execute("ROLLBACK")
            raise

    @staticmethod
    def _model_id(db: sqlite3.Connection, name: str) -> int:
        row = db.execute("SELECT id FROM models WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise _unknown(name)
        return int(row[0])

    def _forget_claims(self, db: sqlite3.Connection, now: float, limit: int) -> None:
        db.execute(
            "DELETE FROM claims WHERE id IN (SELECT id FROM claims WHERE forget_at <= ? LIMIT ?)",
            (now, limit),
        )

    def _claim(
        self,
        db: sqlite3.Connection,
        model_id: int,
        model: str,
        decision_id: str,
        outcome: str,
        reward: bool | None,
        now: float,
    ) -> Claim:
        """Append the learn event (unless ``reward`` is None), record the claim, remove the record."""
        position = None
        if reward is not None:
            db.execute("UPDATE models SET last = last + 1 WHERE id = ?", (model_id,))
            position = int(db.execute("SELECT last FROM models WHERE id = ?", (model_id,)).fetchone()[0])
            db.execute(
                "INSERT INTO events (model, position, kind, at, decision_id, x, decision, reward, outcome) "
                "SELECT model, ?, 'learn', ?, id, x, decision, ?, ? FROM decisions WHERE id = ?",
                (position, now, int(reward), outcome, decision_id),
            )
        db.execute(
            "INSERT INTO claims (id, model, outcome, position, at, forget_at) VALUES (?, ?, ?, ?, ?, ?)",
            (decision_id, model, outcome, position, now, now + self.claim_ttl),
        )
        db.execute("DELETE FROM decisions WHERE id = ?", (decision_id,))
        return Claim(decision_id, model, outcome, position, now)  # type: ignore[arg-type]

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
            for table in ("decisions", "events", "checkpoints"):
                db.execute(f"DELETE FROM {table} WHERE model = ?", (model_id,))
            db.execute("DELETE FROM models WHERE id = ?", (model_id,))

    @_available
    async def counts(self, name: str) -> Counts:
        row = (
            self._conn()
            .execute(
                "SELECT decisions, clicks, no_clicks, expired, pending FROM models WHERE name = ?", (name,)
            )
            .fetchone()
        )
        if row is None:
            raise _unknown(name)
        return Counts(*(int(v) for v in row))

    # -- decisions and feedback -------------------------------------------------------------

    @_available
    async def put_decision(self, record: DecisionRecord) -> None:
        x, decision = encode_x(record.x), encode_decision(record.decision)
        with self._write("NORMAL") as db:  # see module docstring: a lost record is a later 404
            model_id = self._model_id(db, record.model)
            if db.execute("SELECT 1 FROM claims WHERE id = ?", (record.decision_id,)).fetchone():
                raise ValueError(f"decision id {record.decision_id!r} is not new")
            try:
                db.execute(
                    "INSERT INTO decisions (id, model, x, decision, model_version, created_at, expires_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        record.decision_id,
                        model_id,
                        x,
                        decision,
                        int(record.model_version),
                        float(record.created_at),
                        float(record.expires_at),
                    ),
                )
            except sqlite3.IntegrityError:
                raise ValueError(f"decision id {record.decision_id!r} is not new") from None
            db.execute(
                "UPDATE models SET decisions = decisions + 1, pending = pending + 1 WHERE id = ?",
                (model_id,),
            )

    @_available
    async def get_decision(self, decision_id: str) -> DecisionRecord | None:
        row = (
            self._conn()
            .execute(
                "SELECT m.name, d.x, d.decision, d.model_version, d.created_at, d.expires_at "
                "FROM decisions d JOIN models m ON m.id = d.model WHERE d.id = ?",
                (decision_id,),
            )
            .fetchone()
        )
        if row is None:
            return None
        model, x, decision, version, created_at, expires_at = row
        return DecisionRecord(
            decision_id, model, decode_x(x), decode_decision(decision), int(version), created_at, expires_at
        )

    @_available
    async def claim_and_append(self, decision_id: str, click: bool, now: float) -> ClaimOutcome:
        with self._write(self._acked) as db:
            row = db.execute(
                "SELECT model, outcome, position, at FROM claims WHERE id = ? AND forget_at > ?",
                (decision_id, now),
            ).fetchone()
            if row is not None:
                claim = Claim(decision_id, row[0], row[1], row[2], row[3])
                status = ClaimStatus.EXPIRED if claim.outcome == "expired" else ClaimStatus.DUPLICATE
                return ClaimOutcome(status, claim)
            row = db.execute(
                "SELECT d.model, m.name, d.expires_at FROM decisions d JOIN models m ON m.id = d.model "
                "WHERE d.id = ?",
                (decision_id,),
            ).fetchone()
            if row is None:
                return ClaimOutcome(ClaimStatus.UNKNOWN)
            model_id, model, expires_at = row
            if now >= expires_at:  # left for expire_due, which claims it
                pending = Claim(decision_id, model, "expired", None, expires_at)
                return ClaimOutcome(ClaimStatus.EXPIRED, pending)
            outcome = "click" if click else "no_click"
            claim = self._claim(db, model_id, model, decision_id, outcome, bool(click), now)
            counter = "clicks" if click else "no_clicks"
            db.execute(
                f"UPDATE models SET {counter} = {counter} + 1, pending = pending - 1 WHERE id = ?",
                (model_id,),
            )
            return ClaimOutcome(ClaimStatus.ACCEPTED, claim)

    @_available
    async def expire_due(
        self, model: str, now: float, default_reward: Literal["no_click", "drop"]
    ) -> list[Claim]:
        db = self._conn()
        model_id = self._model_id(db, model)
        due_query = "SELECT id FROM decisions WHERE model = ? AND expires_at <= ?"
        # Read first: a sweep that finds nothing (the usual case, every second) writes nothing.
        if (
            not db.execute(due_query + " LIMIT 1", (model_id, now)).fetchone()
            and not db.execute("SELECT 1 FROM claims WHERE forget_at <= ? LIMIT 1", (now,)).fetchone()
        ):
            return []
        reward = False if default_reward == "no_click" else None
        claims: list[Claim] = []
        # Not acknowledged to anyone: if lost, the decisions are still pending and expire again.
        with self._write("NORMAL") as db:
            self._forget_claims(db, now, self._FORGET_PER_SWEEP)
            due = db.execute(due_query + " ORDER BY expires_at, id", (model_id, now)).fetchall()
            for (decision_id,) in due:
                claims.append(self._claim(db, model_id, model, decision_id, "expired", reward, now))
            if claims:
                db.execute(
                    "UPDATE models SET expired = expired + ?, pending = pending - ? WHERE id = ?",
                    (len(claims), len(claims), model_id),
                )
        return claims

    # -- event log and checkpoints ------------------------------------------------------------

    @_available
    async def append(self, model: str, event: Event) -> int:
        if event.kind == "learn":
            raise ValueError("learn events are appended by claim_and_append / expire_due only")
        with self._write(self._acked) as db:
            model_id = self._model_id(db, model)
            db.execute("UPDATE models SET last = last + 1 WHERE id = ?", (model_id,))
            position = int(db.execute("SELECT last FROM models WHERE id = ?", (model_id,)).fetchone()[0])
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
            "SELECT position, kind, at, decision_id, x, decision, reward, outcome, state FROM events "
            "WHERE model = ? AND position > ? ORDER BY position LIMIT ?",
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
                        reward=bool(reward),
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
        with self._write("NORMAL") as db:
            model_id = self._model_id(db, model)
            db.execute("DELETE FROM events WHERE model = ? AND position <= ?", (model_id, upto))

    # -- lifecycle ------------------------------------------------------------------------------

    @_available
    async def ping(self) -> None:
        self._conn().execute("SELECT 1").fetchone()

    async def close(self) -> None:
        """Close the file (SQLite checkpoints the WAL into it) and release the lock."""
        if self._db is not None:
            db, self._db = self._db, None
            db.close()
