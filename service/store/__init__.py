"""Shared storage behind one interface (:mod:`service.store.base`): memory (default) or Redis."""

from __future__ import annotations

import importlib

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
from service.store.memory import MemoryStore

__all__ = [
    "Checkpoint",
    "Claim",
    "ClaimOutcome",
    "ClaimStatus",
    "Counts",
    "DecisionRecord",
    "Event",
    "MemoryStore",
    "ModelExistsError",
    "Store",
    "StoreUnavailableError",
    "UnknownModelError",
    "open_store",
]


def open_store(redis_url: str | None, claim_ttl: float = 86_400.0) -> Store:
    """The memory store when ``redis_url`` is empty, else the Redis store at that URL."""
    if not redis_url:
        return MemoryStore(claim_ttl)
    module = importlib.import_module("service.store.redis")
    return module.RedisStore(redis_url, claim_ttl)
