"""Storage behind one interface (:mod:`service.store.base`): SQLite (default), memory or Redis."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

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
    Heartbeat,
    LoggedDecision,
    ModelExistsError,
    Store,
    StoreUnavailableError,
    UnknownModelError,
)
from service.store.memory import MemoryStore
from service.store.sqlite import SQLiteStore

if TYPE_CHECKING:
    from service.config import Settings

__all__ = [
    "ACTIVITY_MINUTES",
    "SQLITE_FILE",
    "ActivateOutcome",
    "ActivateStatus",
    "Activity",
    "Checkpoint",
    "Claim",
    "ClaimOutcome",
    "ClaimStatus",
    "Counts",
    "DecisionExistsError",
    "DecisionRecord",
    "Event",
    "Heartbeat",
    "LoggedDecision",
    "MemoryStore",
    "ModelExistsError",
    "SQLiteStore",
    "Store",
    "StoreUnavailableError",
    "UnknownModelError",
    "open_store",
]


#: The embedded store's file in ``Settings.data_dir``.
SQLITE_FILE = "clickboost.sqlite3"


def open_store(settings: Settings) -> Store:
    """The store ``settings`` ask for.

    ``REDIS_URL`` set: the Redis store (several replicas). Otherwise ``CLICKBOOST_STORE``:
    ``"sqlite"`` (default) keeps everything in ``data_dir/clickboost.sqlite3`` across restarts (one
    process; the directory and file are created when the store is first used, not here),
    ``"memory"`` keeps nothing.
    """
    if settings.redis_url:
        module = importlib.import_module("service.store.redis")
        return module.RedisStore(settings.redis_url, settings.claim_ttl_seconds)
    if settings.store == "memory":
        return MemoryStore(settings.claim_ttl_seconds)
    return SQLiteStore(
        settings.data_dir / SQLITE_FILE, settings.claim_ttl_seconds, settings.sqlite_synchronous
    )
