"""A runtime that has loaded its models freezes what start-up made (gc.freeze), so that a full
collection does not scan it and hold the event loop (measured in tests/service/api/test_stalls.py)."""

from __future__ import annotations

import gc

import pytest

from service.config import Settings
from service.runtime import Runtime
from service.store.memory import MemoryStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_start_up_objects_are_frozen_once_loaded() -> None:
    gc.unfreeze()
    runtime = Runtime(MemoryStore(), Settings(store="memory"))
    await runtime.start()
    try:
        assert gc.get_freeze_count() > 10_000  # the modules, kernels and routes imported by then
        assert runtime.ready
    finally:
        await runtime.stop()
