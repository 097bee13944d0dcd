"""Redis-only store properties: several clients (replicas) on one Redis, TTLs, batched sweeps."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from service.store import ClaimStatus, Event, StoreUnavailableError
from service.store.redis import RedisStore
from tests.conftest import free_port
from tests.service.store.test_contract import CONFIG, logged, record

pytestmark = pytest.mark.anyio


@pytest.fixture
async def replicas(redis_url: str) -> AsyncIterator[list[RedisStore]]:
    """Three independent clients sharing one key prefix, as three replicas would."""
    prefix = f"test-{uuid.uuid4().hex}:"
    stores = [RedisStore(redis_url, 100.0, prefix=prefix) for _ in range(3)]
    await stores[0].create_model("m", CONFIG)
    try:
        yield stores
    finally:
        async for key in stores[0].redis.scan_iter(match=prefix + "*"):
            await stores[0].redis.delete(key)
        for s in stores:
            await s.close()


async def test_concurrent_duplicates_across_clients_accept_exactly_one(replicas: list[RedisStore]) -> None:
    ids = [f"d{i}" for i in range(20)]
    for i in ids:
        await replicas[0].put_decision(record(i))
    calls = [s.claim_and_append(i, k % 2 == 0, now=1.0) for i in ids for k, s in enumerate(replicas * 3)]
    outs = await asyncio.gather(*calls)
    accepted = [o.claim.decision_id for o in outs if o.status is ClaimStatus.ACCEPTED and o.claim]
    assert sorted(accepted) == sorted(ids)
    assert sum(o.status is ClaimStatus.DUPLICATE for o in outs) == len(calls) - len(ids)
    log = await replicas[2].read_log("m", after=0)
    assert [e.position for e in log] == list(range(1, len(ids) + 1))
    assert sorted(e.decision_id for e in log) == sorted(ids)
    c = await replicas[1].counts("m")
    assert (c.decisions, c.clicks + c.no_clicks, c.pending) == (len(ids), len(ids), 0)


async def test_records_and_claims_carry_redis_ttls(replicas: list[RedisStore]) -> None:
    s = replicas[0]
    await s.put_decision(record("a", window=10.0))
    ttl = await s.redis.pttl(f"{s.prefix}d:a")
    assert 10_000 < ttl <= 1000 * (10.0 + s.grace)
    await s.claim_and_append("a", True, now=1.0)
    assert 0 < await s.redis.pttl(f"{s.prefix}c:a") <= 100_000
    assert await s.redis.exists(f"{s.prefix}d:a") == 0


async def test_expiry_sweeps_in_batches_and_in_due_order(replicas: list[RedisStore]) -> None:
    s = replicas[0]
    n = RedisStore._EXPIRE_BATCH + 7
    for i in range(n):
        await s.put_decision(record(f"e{i:04d}", created=float(i % 3), window=1.0))
    claims = await replicas[1].expire_due("m", now=10.0, default_reward="no_click")
    assert len(claims) == n and [c.position for c in claims] == list(range(1, n + 1))
    expected = sorted((float(i % 3), f"e{i:04d}") for i in range(n))
    assert [c.decision_id for c in claims] == [i for _, i in expected]
    assert (await s.counts("m")).expired == n


async def test_a_new_client_sees_log_and_checkpoint(replicas: list[RedisStore], redis_url: str) -> None:
    await replicas[0].append("m", Event(0, "import", at=1.5, state=b"\x00bytes\xff"))
    fresh = RedisStore(redis_url, 100.0, prefix=replicas[0].prefix)
    try:
        [ev] = await fresh.read_log("m", after=0)
        assert (ev.position, ev.kind, ev.at, ev.state) == (1, "import", 1.5, b"\x00bytes\xff")
        assert await fresh.log_position("m") == 1
    finally:
        await fresh.close()


async def test_wait_log_wakes_when_another_client_appends(replicas: list[RedisStore]) -> None:
    start = time.monotonic()
    await replicas[0].wait_log({"m": 0}, timeout=0.2)  # nothing appended: times out
    assert time.monotonic() - start >= 0.15
    waiter = asyncio.create_task(replicas[0].wait_log({"m": 0}, timeout=1.5))
    await asyncio.sleep(0.05)
    start = time.monotonic()
    await replicas[1].append("m", Event(0, "reset", at=1.0))
    await waiter
    assert time.monotonic() - start < 1.0
    start = time.monotonic()
    await replicas[0].wait_log({"m": 0}, timeout=1.5)  # already behind: returns at once
    assert time.monotonic() - start < 1.0


async def test_lease_has_one_holder_until_it_lapses(replicas: list[RedisStore]) -> None:
    a, b, _ = replicas
    assert await a.lease("checkpoint:m", "A", ttl=0.3)
    assert not await b.lease("checkpoint:m", "B", ttl=0.3)
    assert await a.lease("checkpoint:m", "A", ttl=0.3)  # renewal
    await asyncio.sleep(0.4)
    assert await b.lease("checkpoint:m", "B", ttl=10.0)
    assert not await a.lease("checkpoint:m", "A", ttl=10.0)


async def test_unreachable_redis_fails_fast_as_unavailable() -> None:
    s = RedisStore(f"redis://127.0.0.1:{free_port()}/0", socket_timeout=0.5)
    start = time.monotonic()
    try:
        with pytest.raises(StoreUnavailableError):
            await s.ping()
        with pytest.raises(StoreUnavailableError):
            await s.claim_and_append("a", True, now=1.0)
    finally:
        await s.close()
    assert time.monotonic() - start < 2.0


async def test_decision_log_entries_follow_the_last_one_and_leave_no_outcome_behind(
    replicas: list[RedisStore],
) -> None:
    """A replica whose clock is behind appends after the last entry; the retention runs in scripts of
    ``_TRIM_BATCH`` entries and forgets their outcomes with them, also one claimed afterwards."""
    a, b = replicas[0], replicas[1]
    for i in range(8):
        await a.put_decision(logged(f"d{i}", created=100.0 + i))
    await b.put_decision(logged("late", created=50.0))  # a clock 50 s behind
    ids = [eid.decode() for eid, _ in await a.redis.xrange(a.key("m", "dlog"))]
    assert ids[-2:] == ["107000-0", "107000-1"]
    entries = (await b.read_decision_log("m"))[0]
    assert [e.decision_id for e in entries] == [*(f"d{i}" for i in range(8)), "late"]
    assert entries[-1].created_at == 50.0  # its own time, kept exactly
    for i in range(4):
        await b.claim_and_append(f"d{i}", True, now=110.0)
    a._TRIM_BATCH = 3  # type: ignore[misc]
    assert await a.trim_decision_log("m", older_than=105.0, keep=None) == 5  # d0..d4: 3, then 2
    assert await a.redis.hlen(a.key("m", "dout")) == 0
    await b.claim_and_append("d4", False, now=111.0)  # its entry is gone: nothing is kept
    await b.claim_and_append("d5", False, now=111.0)
    assert await a.redis.hkeys(a.key("m", "dout")) == [b"d5"]
    assert await a.trim_decision_log("m", older_than=None, keep=1) == 3
    assert [e.decision_id for e in (await b.read_decision_log("m"))[0]] == ["late"]
    assert await a.redis.hlen(a.key("m", "dout")) == 0
