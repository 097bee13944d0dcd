"""Redis-only store properties: several clients (replicas) on one Redis or one Redis Cluster, routed
decision ids, TTLs, batched sweeps, the one-read tail, and the migration of the older key layout."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import numpy as np
import pytest
import redis

from service import serial
from service.config import ModelSpec
from service.runtime import ModelRuntime
from service.serial import StateFormatError
from service.store import ClaimStatus, DecisionExistsError, Event, StoreUnavailableError, UnknownModelError
from service.store.codec import decode_decision, decode_x, encode_decision, encode_x
from service.store.redis import _TAIL_BATCH, RedisStore, key_slot, slot_tag
from tests.conftest import free_port
from tests.service.store.test_contract import CONFIG, logged, record

pytestmark = pytest.mark.anyio

SERVERS = ["redis_url", "redis_cluster_url"]


async def clean(store: RedisStore) -> None:
    async for key in store.redis.scan_iter(match=store.prefix + "*"):
        await store.redis.delete(key)


@pytest.fixture(params=SERVERS)
async def replicas(request: pytest.FixtureRequest) -> AsyncIterator[list[RedisStore]]:
    """Three independent clients sharing one key prefix, as three replicas would, on one Redis and
    on a 3-master Redis Cluster."""
    url = request.getfixturevalue(request.param)
    prefix = f"test-{uuid.uuid4().hex}:"
    stores = [RedisStore(url, 100.0, prefix=prefix) for _ in range(3)]
    await stores[0].create_model("m", CONFIG)
    for s in stores:  # connected before the tests' concurrent calls, as a replica is before it serves
        await s.counts("m")
    try:
        yield stores
    finally:
        await clean(stores[0])
        for s in stores:
            await s.close()


def test_decision_ids_name_their_models_slot_and_nothing_else() -> None:
    for model in ("m", "news", "digits-2", "a.b_c"):
        tag = slot_tag(key_slot(model))
        assert key_slot(tag) == key_slot(model) and 1 <= len(tag) <= 4
    s = RedisStore("redis://127.0.0.1:1/0")  # never connects
    routed = s.route("news", "q2v0yN3mVt0dQ1bB5mM0aQ")
    assert routed == "q2v0yN3mVt0dQ1bB5mM0aQ." + slot_tag(key_slot("news"))
    assert "news" not in routed
    # The record, its claim and the model's keys share one hash slot.
    slots = {key_slot(k.split("{")[1].split("}")[0]) for k in (s._decision_key(routed), s.key("news", "log"))}
    assert slots == {key_slot("news")}
    with pytest.raises(ValueError, match="no braces"):
        RedisStore("redis://127.0.0.1:1/0", prefix="cb:{x}:")


async def test_concurrent_duplicates_across_clients_accept_exactly_one(replicas: list[RedisStore]) -> None:
    ids = [replicas[0].route("m", f"d{i}") for i in range(20)]
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
    """A decision's one key holds its record (TTL: window + grace), then its claim (TTL: the claim's)."""
    s = replicas[0]
    a = s.route("m", "a")
    await s.put_decision(record(a, window=10.0))
    ttl = await s.redis.pttl(s._decision_key(a))
    assert 10_000 < ttl <= 1000 * (10.0 + s.grace)
    await s.claim_and_append(a, True, now=1.0)
    assert 0 < await s.redis.pttl(s._decision_key(a)) <= 100_000
    assert (await s.redis.get(s._decision_key(a))).startswith(b"C ")


async def test_an_id_without_a_slot_tag_is_unknown(replicas: list[RedisStore]) -> None:
    s = replicas[0]
    for bad in ("q2v0yN3mVt0dQ1bB5mM0aQ", "x.", "x.ABC", "x.12345", "{m}.1"):
        assert (await s.claim_and_append(bad, True, now=1.0)).status is ClaimStatus.UNKNOWN
        assert await s.get_decision(bad) is None


async def test_expiry_sweeps_in_batches_in_due_order_and_says_when_the_next_is_due(
    replicas: list[RedisStore],
) -> None:
    s = replicas[0]
    n = RedisStore._EXPIRE_BATCH + 7
    for i in range(n):
        await s.put_decision(record(s.route("m", f"e{i:04d}"), created=float(i % 3), window=1.0))
    await s.put_decision(record(s.route("m", "late"), created=50.0, window=1.0))
    expiry = await replicas[1].expire("m", now=10.0, default_reward="no_click")
    assert len(expiry.claims) == n and [c.position for c in expiry.claims] == list(range(1, n + 1))
    expected = sorted((float(i % 3), s.route("m", f"e{i:04d}")) for i in range(n))
    assert [c.decision_id for c in expiry.claims] == [i for _, i in expected]
    assert expiry.next_due == 51.0  # "late"
    assert (await s.counts("m")).expired == n
    assert (await s.expire("m", now=60.0, default_reward="drop")).next_due == float("inf")


async def test_a_new_client_sees_log_and_checkpoint(replicas: list[RedisStore]) -> None:
    await replicas[0].append("m", Event(0, "import", at=1.5, state=b"\x00bytes\xff"))
    fresh = RedisStore(replicas[0].url, 100.0, prefix=replicas[0].prefix)
    try:
        [ev] = await fresh.read_log("m", after=0)
        assert (ev.position, ev.kind, ev.at, ev.state) == (1, "import", 1.5, b"\x00bytes\xff")
        assert await fresh.log_position("m") == 1
    finally:
        await fresh.close()


async def test_tail_wakes_when_another_client_appends_and_hands_over_the_events(
    replicas: list[RedisStore],
) -> None:
    """One read for every model: what another client appends arrives within the round, with the
    events themselves (no read per model); creations and deletions of models come with it."""
    r, w = replicas[0], replicas[1]
    assert (await r.tail({"m": 0}, timeout=0.2)).models_changed  # the first round: sync the list
    for _ in range(2):  # a cluster subscribes to the model's channel, and reads its log twice then
        await r.tail({"m": 0}, timeout=0.05)
    start = time.monotonic()
    t = await r.tail({"m": 0}, timeout=0.3)  # nothing appended: times out
    assert time.monotonic() - start >= 0.2 and t.events == {} and not t.models_changed
    waiter = asyncio.create_task(r.tail({"m": 0}, timeout=1.5))
    await asyncio.sleep(0.1)
    start = time.monotonic()
    await w.append("m", Event(0, "reset", at=1.0))
    t = await waiter
    assert time.monotonic() - start < 1.0
    assert [(e.position, e.kind) for e in t.events["m"]] == [(1, "reset")]
    await w.append("m", Event(0, "reset", at=2.0))
    t = await r.tail({"m": 0}, timeout=1.5)  # still at 0: both, at once
    assert [e.position for e in t.events["m"]] == [1, 2] and not t.more
    # A log with more new events than one read brings says so (the follower reads again at once).
    for i in range(_TAIL_BATCH + 1):
        await w.append("m", Event(0, "reset", at=3.0 + i))
    t = await r.tail({"m": 2}, timeout=1.5)
    assert len(t.events["m"]) == _TAIL_BATCH and t.more
    t = await r.tail({"m": 2 + _TAIL_BATCH}, timeout=1.5)
    assert [e.position for e in t.events["m"]] == [3 + _TAIL_BATCH] and not t.more
    await w.create_model("n", CONFIG)
    deadline = time.monotonic() + 5
    while not (await r.tail({"m": 3 + _TAIL_BATCH}, timeout=0.5)).models_changed:
        assert time.monotonic() < deadline, "the creation of a model was never reported"
    await w.delete_model("n")
    while not (await r.tail({"m": 3 + _TAIL_BATCH}, timeout=0.5)).models_changed:
        assert time.monotonic() < deadline, "the deletion of a model was never reported"


async def test_an_idle_tail_sends_one_command_per_round_whatever_the_number_of_models(
    redis_url: str,
) -> None:
    s = RedisStore(redis_url, prefix=f"test-{uuid.uuid4().hex}:")
    names = [f"m{i}" for i in range(50)]
    client = redis.Redis.from_url(redis_url)
    try:
        for name in names:
            await s.create_model(name, CONFIG)
        await s.tail({}, timeout=0.05)  # the first round
        for models in (names[:1], names):
            before = client.info("commandstats")
            for _ in range(3):
                await s.tail(dict.fromkeys(models, 0), timeout=0.05)
            after = client.info("commandstats")
            sent = {
                k: after[k]["calls"] - before.get(k, {"calls": 0})["calls"]
                for k in after
                if k != "cmdstat_info" and after[k]["calls"] != before.get(k, {"calls": 0})["calls"]
            }
            assert sent == {"cmdstat_xread": 3}, (len(models), sent)
    finally:
        client.close()
        await clean(s)
        await s.close()


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
            await s.claim_and_append(s.route("m", "a"), True, now=1.0)
    finally:
        await s.close()
    assert time.monotonic() - start < 2.0


async def outcomes(s: RedisStore, model: str = "m") -> list[bytes]:
    """The decision-log outcomes that model's meta hash holds (fields named by a routed id: a dot)."""
    return [k for k in await s.redis.hkeys(s.key(model, "meta")) if b"." in k]


async def test_decision_log_entries_follow_the_last_one_and_leave_no_outcome_behind(
    replicas: list[RedisStore],
) -> None:
    """A replica whose clock is behind appends after the last entry; the retention runs in scripts of
    ``_TRIM_BATCH`` entries and forgets their outcomes with them, also one claimed afterwards."""
    a, b = replicas[0], replicas[1]
    d = [a.route("m", f"d{i}") for i in range(8)]
    late = a.route("m", "late")
    for i in range(8):
        await a.put_decision(logged(d[i], created=100.0 + i))
    await b.put_decision(logged(late, created=50.0))  # a clock 50 s behind
    ids = [eid.decode() for eid, _ in await a.redis.xrange(a.key("m", "dlog"))]
    assert ids[-2:] == ["107000-0", "107000-1"]
    entries = (await b.read_decision_log("m"))[0]
    assert [e.decision_id for e in entries] == [*d, late]
    assert entries[-1].created_at == 50.0  # its own time, kept exactly
    for i in range(4):
        await b.claim_and_append(d[i], True, now=110.0)
    a._TRIM_BATCH = 3  # type: ignore[misc]
    # d0 (its window ended at 110: still pending) goes, its features into its record; d1..d3's learn
    # events, still in the event log, name their entries: kept until a checkpoint trims those events.
    assert await a.trim_decision_log("m", older_than=105.0, keep=None) == 1
    await a.trim_log("m", 3)
    assert await a.trim_decision_log("m", older_than=105.0, keep=None) == 4  # d1..d4: 3, then 1
    assert await outcomes(a) == []
    await b.claim_and_append(d[4], False, now=111.0)  # its entry is gone: nothing is kept
    await b.claim_and_append(d[5], False, now=111.0)
    assert await outcomes(a) == [d[5].encode()]
    events = await a.read_log("m", after=3)  # d4's features from its record, d5's from its entry
    assert [e.decision_id for e in events] == [d[4], d[5]]
    assert all(e.x is not None and e.x.tobytes() == logged("x").x.tobytes() for e in events)
    assert await a.trim_decision_log("m", older_than=None, keep=1) == 0  # d5's event names its entry
    await a.trim_log("m", 5)
    assert await a.trim_decision_log("m", older_than=None, keep=1) == 3
    assert [e.decision_id for e in (await b.read_decision_log("m"))[0]] == [late]
    assert await outcomes(a) == []


async def test_a_decision_behind_a_decision_log_trimmed_empty_is_saved(replicas: list[RedisStore]) -> None:
    """The retention may forget every entry while the stream's last id stays: a decision created
    before that id follows the last id the stream gave, not its last entry (there is none)."""
    a, b = replicas[0], replicas[1]
    first, late = a.route("m", "first"), a.route("m", "late")
    await a.put_decision(logged(first, created=100.0))
    await a.claim_and_append(first, True, now=101.0)
    await a.trim_log("m", 1)
    assert await a.trim_decision_log("m", older_than=None, keep=0) == 1
    assert await a.redis.xlen(a.key("m", "dlog")) == 0
    await b.put_decision(logged(late, created=50.0))  # a clock 50 s behind
    assert [eid for eid, _ in await a.redis.xrange(a.key("m", "dlog"))] == [b"100000-1"]
    assert [e.decision_id for e in (await a.read_decision_log("m"))[0]] == [late]


# -- the key layout before issue 25 ------------------------------------------------------------------


async def test_the_old_key_layout_is_migrated_at_start_and_old_replicas_are_fenced_off(
    redis_url: str,
) -> None:
    """Keys as the version before issue 25 wrote them (no hash tags): after ``prepare`` the models,
    logs, counters and checkpoint are found under their new keys, a decision pending from before is
    still claimed exactly once (its id has no slot tag), and the old meta key is a string, which the old
    version's scripts fail on before they write."""
    p = f"test-{uuid.uuid4().hex}:"
    raw = redis.asyncio.Redis.from_url(redis_url)
    r = record("old-a")
    x, dec = encode_x(r.x), encode_decision(r.decision)
    config = {**CONFIG, "incarnation": "i1"}
    learn = {"kind": "learn", "at": "1.0", "x": x, "decision": dec, "reward": "1", "outcome": "click"}
    await raw.hset(f"{p}models", "m", json.dumps(config, sort_keys=True))
    await raw.hset(f"{p}m:m:meta", mapping={"last": 1, "decisions": 2, "clicks": 1})
    await raw.xadd(f"{p}m:m:log", {**learn, "decision_id": "old-a"}, id="1-0")
    await raw.hset(f"{p}m:m:cp", mapping={"position": 1, "state": b"state"})
    await raw.zadd(f"{p}m:m:due", {"old-b": 10.0})
    old_b = {
        "model": "m",
        "x": x,
        "decision": dec,
        "model_version": 1,
        "created_at": "0.0",
        "expires_at": "10.0",
    }
    await raw.hset(f"{p}d:old-b", mapping=old_b)
    claim_a = {"model": "m", "outcome": "click", "position": 1, "at": "1.0", "forget_at": "101.0"}
    await raw.hset(f"{p}c:old-a", mapping=claim_a)
    stores = [RedisStore(redis_url, 100.0, prefix=p) for _ in range(2)]
    try:
        await asyncio.gather(*(s.prepare() for s in stores))  # two replicas start at once: one migrates
        s = stores[0]
        assert await s.list_models() == {"m": config}
        assert [e.decision_id for e in await s.read_log("m", after=0)] == ["old-a"]
        cp = await s.get_checkpoint("m")
        assert cp is not None and (cp.position, cp.state) == (1, b"state")
        c = await s.counts("m")
        assert (c.decisions, c.clicks, c.pending) == (2, 1, 1)
        assert (await s.claim_and_append("old-a", False, now=2.0)).status is ClaimStatus.DUPLICATE
        out = await stores[1].claim_and_append("old-b", False, now=2.0)
        assert out.status is ClaimStatus.ACCEPTED and out.claim is not None and out.claim.position == 2
        assert (await s.claim_and_append("old-b", True, now=2.0)).status is ClaimStatus.DUPLICATE
        new = s.route("m", "new")
        await s.put_decision(record(new))
        assert (await s.claim_and_append(new, True, now=2.0)).claim.position == 3  # type: ignore[union-attr]
        assert await raw.type(f"{p}m:m:meta") == b"string" and not await raw.exists(f"{p}models")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            await raw.hincrby(f"{p}m:m:meta", "last", 1)  # what the old claim script does first
        await s.prepare()  # done: nothing to do
        assert await s.log_position("m") == 3
    finally:
        await clean(stores[0])
        for s in stores:
            await s.close()
        await raw.aclose()


async def test_a_log_written_by_the_previous_version_still_applies(redis_url: str) -> None:
    """Issue 40 changed the bytes of a record's features and decision (compact, a version byte);
    records, learn events and decision-log entries written before it (``service.serial``) are read
    as they were, and applying them gives the model the new encoding gives."""
    s = RedisStore(redis_url, prefix=f"test-{uuid.uuid4().hex}:")
    try:
        await s.create_model("m", CONFIG)
        old, new = logged("old"), logged("new")
        for r in (old, new):
            await s.put_decision(r)
        # "old" as the previous version stored it: the pending record (a hash, with the features, as
        # before issue 40's one key per decision) and its decision-log entry
        await s.redis.delete(s._decision_key("old"))
        fields = {"model": "m", "model_version": 0, "created_at": repr(old.created_at)}
        fields |= {"expires_at": repr(old.expires_at), "x": serial.encode({"x": old.x})}
        await s.redis.hset(
            s._decision_key("old", "d"), mapping={**fields, "decision": serial.encode(old.decision)}
        )
        entry = (await s.redis.xrange(s.key("m", "dlog")))[0][0]
        await s.redis.xadd(s.key("m", "dlog"), {"x": serial.encode({"x": old.x})}, id=entry[:-1] + b"9")
        for r in (old, new):
            assert (await s.claim_and_append(r.decision_id, True, 1.0)).status is ClaimStatus.ACCEPTED
        events = await s.read_log("m", 0)
        assert [e.decision_id for e in events] == ["old", "new"]
        assert events[0].x.tobytes() == events[1].x.tobytes() == old.x.tobytes()  # type: ignore[union-attr]
        assert events[0].decision.keys() == events[1].decision.keys()  # type: ignore[union-attr]
        spec = ModelSpec.model_validate(CONFIG)
        sums = []
        for e in events:
            m = ModelRuntime("m", spec, "i", 100)
            m.apply(replace(e, position=1))
            sums.append(m.checksum())
        assert sums[0] == sums[1]
        old_logged = await s.redis.xrange(s.key("m", "dlog"))
        assert decode_x(old_logged[-1][1][b"x"]).tobytes() == old.x.tobytes()
    finally:
        await clean(s)
        await s.close()


def test_the_compact_encodings_round_trip_and_refuse_damage() -> None:
    x = np.array([[3.0, 17.0], [0.5, -1e-300]])
    decision = {
        "probs": np.array([0.9, 0.1]),
        "label": 1,
        "memo.greedy": 0,
        "memo.eligible": np.array([True, True]),
        "memo.rollout": "apprentice",
        "memo.policy": None,
        "memo.w": 0.25,
    }
    assert encode_x(x)[0] == encode_decision(decision)[0] == 1  # the version byte
    assert decode_x(encode_x(x)).tobytes() == x.tobytes()
    got = decode_decision(encode_decision(decision))
    assert got.keys() == decision.keys()
    for k, v in decision.items():
        assert type(got[k]) is type(v) and (
            np.array_equal(got[k], v) if isinstance(v, np.ndarray) else got[k] == v
        )
    for bad in (encode_x(x)[:-1], encode_x(x) + b"\0", b"\x01"):
        with pytest.raises(StateFormatError):
            decode_x(bad)
    for bad in (encode_decision(decision)[:-1], b"\x01\x05\0\0\0[[1]]", b"\x01\x02\0\0\0[]x"):
        with pytest.raises(StateFormatError):
            decode_decision(bad)


async def test_a_logged_decision_keeps_its_features_once_and_the_retention_keeps_them_while_pending(
    replicas: list[RedisStore],
) -> None:
    """Issue 40: a logged decision's features are stored once, in its decision-log entry (the record
    holds the entry's id); the retention forgetting the entry of a decision still pending moves them
    into its record, so the feedback still learns them, bit for bit; an unlogged one keeps them in
    its record."""
    a, b = replicas[0], replicas[1]
    d = [a.route("m", f"k{i}") for i in range(3)]
    for i in range(3):
        await a.put_decision(logged(d[i], created=100.0 + i))
    x = (await a.read_decision_log("m"))[0][0].x
    for i in range(3):
        text = await a.redis.get(a._decision_key(d[i]))
        assert x.tobytes() not in text  # not in the record
    await b.claim_and_append(d[0], True, now=105.0)
    # Its learn event names the entry (no copy in the log); the follower reads the features there, and
    # the retention keeps the entry while the event is in the log.
    log = await a.redis.xrange(a.key("m", "log"))
    assert b"x" not in log[0][1] and b"lg" in log[0][1]
    assert await a.trim_decision_log("m", older_than=None, keep=0) == 0
    assert (await a.read_log("m", 0))[0].x.tobytes() == x.tobytes()  # type: ignore[union-attr]
    await a.trim_log("m", 1)  # a checkpoint holds it
    assert await a.trim_decision_log("m", older_than=None, keep=0) == 3
    assert x.tobytes() in await a.redis.get(a._decision_key(d[1]))  # pending: moved into its record
    assert (await a.get_decision(d[1])).x.tobytes() == x.tobytes()  # type: ignore[union-attr]
    for i in (1, 2):
        assert (await b.claim_and_append(d[i], False, now=106.0)).status is ClaimStatus.ACCEPTED
    events = await a.read_log("m", 1)
    assert [e.decision_id for e in events] == d[1:]
    assert all(e.x.tobytes() == x.tobytes() for e in events)  # type: ignore[union-attr]
    plain = a.route("m", "plain")
    await a.put_decision(replace(logged(plain, created=107.0), logged=False))
    assert x.tobytes() in await a.redis.get(a._decision_key(plain))
    assert (await b.claim_and_append(plain, True, now=108.0)).status is ClaimStatus.ACCEPTED
    assert (await a.read_log("m", 3))[0].x.tobytes() == x.tobytes()  # type: ignore[union-attr]


async def test_decisions_are_counted_without_a_command_at_predict(replicas: list[RedisStore]) -> None:
    """Issue 40: saving a decision counts nothing (its count is the pending ones and the settled
    ones); a logged decision's entry says whether the model exists, a model made before issue 40 that
    never logged one gets its decision log then; a record gone by its TTL before any sweep still
    counts (``lost``); a model deleted meanwhile takes no decision."""
    a = replicas[0]
    await a.redis.delete(a.key("m", "dlog"))  # as a model made before issue 40 that logged nothing
    d = [a.route("m", f"c{i}") for i in range(3)]
    await a.put_decision(logged(d[0], created=100.0))
    await a.put_decision(record(d[1], created=100.0))  # not logged
    await a.put_decision(logged(d[2], created=100.0))
    assert (await a.counts("m")).decisions == 3
    await a.claim_and_append(d[0], True, now=101.0)
    await a.redis.delete(a._decision_key(d[1]))  # its TTL ran out before any sweep
    claims = await a.expire_due("m", now=200.0, default_reward="no_click")
    assert [c.decision_id for c in claims] == [d[2]]
    c = await a.counts("m")
    assert (c.decisions, c.clicks, c.expired, c.pending) == (3, 1, 1, 0)
    await a.delete_model("m")
    for r in (logged(d[0], created=300.0), record(d[1], created=300.0)):
        with pytest.raises(UnknownModelError):
            await a.put_decision(replace(r, decision_id=a.route("m", "after")))
    assert not await a.redis.exists(a.key("m", "dlog"), a.key("m", "meta"))


async def test_a_follower_reads_the_features_of_entries_far_apart(replicas: list[RedisStore]) -> None:
    """The range read over the entries a batch names holds at most a few entries per event: an entry
    past it (decisions without feedback in between) is read on its own, and each event gets its own
    decision's features."""
    a, b = replicas[0], replicas[1]
    d = [a.route("m", f"far{i}") for i in range(20)]
    xs = []
    for i in range(20):
        r = logged(d[i], created=100.0 + i, window=100.0)
        r = replace(r, x=r.x + i)
        xs.append(r.x)
        await a.put_decision(r)
    for i in (19, 0):
        await b.claim_and_append(d[i], True, now=150.0)
    events = await a.read_log("m", after=0)
    assert [e.decision_id for e in events] == [d[19], d[0]]
    assert [e.x.tobytes() for e in events] == [xs[19].tobytes(), xs[0].tobytes()]  # type: ignore[union-attr]


async def test_a_page_is_saved_in_one_script_call_and_whole_or_not_at_all(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page's slots go to Redis in one script (issue 53): a failure between two slots could once
    leave part of a page, whose retry was then refused as taken. The commands the client sends for a
    3-slot page: one EVALSHA. A page refused (a slot id taken, or the model deleted) writes no key."""
    from service.store.base import slot_decision_id
    from tests.service.store.test_contract import PAGE_CONFIG, page

    store = RedisStore(redis_url, 100.0, prefix=f"test-{uuid.uuid4().hex}:")
    await store.create_model("m", PAGE_CONFIG)
    await store.put_page(page(store.route("m", "warm")))  # loads the script: a NOSCRIPT retry is not counted
    sent: list[str] = []
    send = store.redis.execute_command

    async def counted(*args: object, **kwargs: object) -> object:
        sent.append(str(args[0]))
        return await send(*args, **kwargs)

    try:
        monkeypatch.setattr(store.redis, "execute_command", counted)
        pid = store.route("m", "p")
        await store.put_page(page(pid))
        assert sent == ["EVALSHA"]
        monkeypatch.undo()
        assert all([await store.get_decision(slot_decision_id(pid, s)) for s in range(3)])
        # slot 2's id taken (a claim left by an earlier page): nothing of the new page is written
        qid = store.route("m", "q")
        await store.put_page(page(qid))
        await store.claim_slot(qid, 2, True, now=1.0)
        await store.redis.delete(store._decision_key(qid), store._decision_key(slot_decision_id(qid, 1)))
        keys = {k async for k in store.redis.scan_iter(match=store.prefix + "*")}
        with pytest.raises(DecisionExistsError):
            await store.put_page(page(qid, created=2.0))
        assert {k async for k in store.redis.scan_iter(match=store.prefix + "*")} == keys
        await store.delete_model("m")
        with pytest.raises(UnknownModelError):
            await store.put_page(page(store.route("m", "r")))
        assert await store.get_decision(store.route("m", "r")) is None
    finally:
        await clean(store)
        await store.close()
