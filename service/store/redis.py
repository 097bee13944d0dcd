"""The shared store for several replicas: :class:`~service.store.base.Store` on Redis.

Every multi-key step that must be atomic is one Lua script (``EVALSHA``; Redis runs a script to
completion before serving any other command), so ``claim_and_append`` checks the claim, removes the
pending record, writes the claim, appends the learn event and bumps the counter in one step, and a
replica that dies mid-request leaves either all of it or none. Scripts were chosen over
``MULTI``/``WATCH``: a claim depends on what it reads (is there a claim? a pending record? is it due?),
which under ``WATCH`` means optimistic retries that grow with contention on hot duplicates, while a
script costs one round trip and never retries. See docs/ARCHITECTURE.md, "Replication".

Keys (``prefix`` defaults to ``cb:``; one prefix per deployment or per test):

=============================  ======  =======================================================
``{p}models``                  hash    model name -> JSON config
``{p}m:{name}:meta``           hash    ``last`` (log position), decision/click/no-click/expired counts,
                                       ``dlog_last`` / ``dlog_min``: the decision log's last entry
                                       id and the least one kept (the script need not read entries)
``{p}m:{name}:log``            stream  the event log; entry id ``{position}-0``, so positions are
                                       explicit integers without gaps, ``XRANGE``/``XREAD`` read
                                       them in order and ``XTRIM MINID`` trims below a position
``{p}m:{name}:due``            zset    pending decision ids scored by ``expires_at`` (the sweep)
``{p}m:{name}:cp``             hash    the latest checkpoint: ``position``, ``state`` (bytes)
``{p}m:{name}:dlog``           stream  the decision log: entry id ``{created_at ms}-{n}`` (raised
                                       to follow the last entry when a replica's clock is behind),
                                       fields ``id``, ``v`` (model version), ``t`` (created_at),
                                       ``x`` (as in the record), ``p`` (probabilities, float64
                                       little-endian), ``l`` (label); written by the decision's
                                       script, trimmed oldest first by ``trim_decision_log``
``{p}m:{name}:dout``           hash    outcomes of the logged decisions: id -> ``outcome reward at``
                                       (reward ``-`` when dropped), written by the claim's script,
                                       deleted with their entry
``{p}d:{decision_id}``         hash    a pending decision record, with a TTL of window + ``grace``;
                                       ``lg``: its decision-log entry id, when logged
``{p}c:{decision_id}``         hash    its claim: outcome, position, at, ``forget_at``; TTL
                                       ``claim_ttl`` (``forget_at`` also honours the caller's clock)
``{p}m:{name}:act``            hash    per-minute activity: ``{minute}:d`` / ``:c`` / ``:n`` / ``:e``
                                       (decisions, clicks, no-clicks, expired; ``HINCRBY``) and
                                       ``{minute}:x`` (exploration, ``HINCRBYFLOAT``)
``{p}m:{name}:actz``           zset    the minutes held in ``act``, scored by minute: trimming
                                       finds the old ones without reading the hash
``{p}replica:{id}``            string  a replica's last heartbeat (JSON), with a TTL
``{p}replicas``                set     the ids of the replicas that sent one (pruned when listed)
=============================  ======  =======================================================

Encoding is pickle-free: arrays and decisions with :mod:`service.store.codec`, configs as JSON,
times as ``repr(float)`` (exact round trip). Scripts touch keys derived from the decision's model
inside the script, which a single Redis primary (optionally behind Sentinel) allows; Redis Cluster
would need the model as a hash tag in every key and in the decision id (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, ParamSpec, TypeVar

import numpy as np
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.store.base import (
    ACTIVITY_MINUTES,
    Activity,
    Checkpoint,
    Claim,
    ClaimOutcome,
    ClaimStatus,
    Counts,
    DecisionRecord,
    Event,
    Heartbeat,
    LoggedDecision,
    ModelExistsError,
    Store,
    StoreUnavailableError,
    UnknownModelError,
)
from service.store.codec import decode_decision, decode_x, encode_decision, encode_x

__all__ = ["RedisStore"]

# Shared Lua helpers: the claim of a decision id (honouring the caller's clock) and the append of one
# event with the next position. ``p`` is the key prefix, ``m`` the model name.
_LUA_COMMON = """
local function live_claim(p, id, now)
  local ck = p .. 'c:' .. id
  local c = redis.call('HMGET', ck, 'model', 'outcome', 'position', 'at', 'forget_at')
  if not c[1] then return nil end
  if tonumber(c[5]) <= tonumber(now) then redis.call('DEL', ck) return nil end
  return c
end
local function append(p, m, fields)
  local pos = redis.call('HINCRBY', p .. 'm:' .. m .. ':meta', 'last', 1)
  redis.call('XADD', p .. 'm:' .. m .. ':log', pos .. '-0', unpack(fields))
  return pos
end
local function claim(p, id, m, outcome, position, now, forget_at, claim_ttl_ms)
  local ck = p .. 'c:' .. id
  redis.call('HSET', ck, 'model', m, 'outcome', outcome, 'position', position, 'at', now,
             'forget_at', forget_at)
  redis.call('PEXPIRE', ck, claim_ttl_ms)
  redis.call('DEL', p .. 'd:' .. id)
  redis.call('ZREM', p .. 'm:' .. m .. ':due', id)
end
-- Stream entry ids 'ms-seq' as numbers (ms < 1e14, see _MAX_SECONDS).
local function entry_id(eid)
  local ms, seq = string.match(eid, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
-- The outcome of a logged decision (``lg``: its entry id), unless the retention forgot the entry
-- (its id is below ``dlog_min``); reading the entry itself would copy its features.
local function log_outcome(p, id, m, lg, outcome, reward, now)
  if not lg then return end
  local base = p .. 'm:' .. m
  local low = redis.call('HGET', base .. ':meta', 'dlog_min')
  if low then
    local ms, seq = entry_id(lg)
    local lms, lseq = entry_id(low)
    if ms < lms or (ms == lms and seq < lseq) then return end
  end
  redis.call('HSET', base .. ':dout', id, outcome .. ' ' .. reward .. ' ' .. now)
end
"""

# KEYS: none. ARGV: prefix, decision id, click (1/0), now, forget_at, claim ttl (ms).
# Returns {status, model, outcome, position ('' if none), at}.
_CLAIM_AND_APPEND = (
    _LUA_COMMON
    + """
local p, id, click, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local c = live_claim(p, id, now)
if c then
  local status = 'duplicate'
  if c[2] == 'expired' then status = 'expired' end
  return {status, c[1], c[2], c[3], c[4]}
end
local r = redis.call('HMGET', p .. 'd:' .. id, 'model', 'x', 'decision', 'expires_at', 'lg')
if not r[1] then return {'unknown'} end
if tonumber(now) >= tonumber(r[4]) then return {'expired', r[1], 'expired', '', r[4]} end
local m = r[1]
local outcome = 'no_click'
if click == '1' then outcome = 'click' end
local pos = append(p, m, {'kind', 'learn', 'at', now, 'decision_id', id, 'x', r[2], 'decision', r[3],
                          'reward', click, 'outcome', outcome})
log_outcome(p, id, m, r[5], outcome, click, now)
claim(p, id, m, outcome, pos, now, ARGV[5], ARGV[6])
local counter = 'no_clicks'
if click == '1' then counter = 'clicks' end
redis.call('HINCRBY', p .. 'm:' .. m .. ':meta', counter, 1)
return {'accepted', m, outcome, tostring(pos), now}
"""
)

# ARGV: prefix, model, now, forget_at, claim ttl (ms), append ('1' for no_click, '0' for drop), batch.
# Returns a flat list id1, position1 ('' if dropped), id2, ... in due order.
_EXPIRE_DUE = (
    _LUA_COMMON
    + """
local p, m, now = ARGV[1], ARGV[2], ARGV[3]
local due = redis.call('ZRANGEBYSCORE', p .. 'm:' .. m .. ':due', '-inf', now, 'LIMIT', 0, tonumber(ARGV[7]))
local out = {}
for _, id in ipairs(due) do
  local r = redis.call('HMGET', p .. 'd:' .. id, 'x', 'decision', 'lg')
  if r[1] and not live_claim(p, id, now) then
    local pos = ''
    if ARGV[6] == '1' then
      pos = tostring(append(p, m, {'kind', 'learn', 'at', now, 'decision_id', id, 'x', r[1],
                                   'decision', r[2], 'reward', '0', 'outcome', 'expired'}))
      log_outcome(p, id, m, r[3], 'expired', '0', now)
    else
      log_outcome(p, id, m, r[3], 'dropped', '-', now)
    end
    claim(p, id, m, 'expired', pos, now, ARGV[4], ARGV[5])
    redis.call('HINCRBY', p .. 'm:' .. m .. ':meta', 'expired', 1)
    out[#out + 1] = id
    out[#out + 1] = pos
  else
    redis.call('ZREM', p .. 'm:' .. m .. ':due', id)  -- forgotten by its TTL, or claimed
  end
end
return out
"""
)

# ARGV: prefix, model, decision id, ttl (ms), x, decision, model_version, created_at, expires_at,
# then for a logged decision: created_at in whole ms, probabilities, label.
# Returns 'ok', 'unknown_model' or 'not_new'.
_PUT_DECISION = (
    _LUA_COMMON
    + """
local p, m, id = ARGV[1], ARGV[2], ARGV[3]
if redis.call('HEXISTS', p .. 'models', m) == 0 then return 'unknown_model' end
local dk = p .. 'd:' .. id
if redis.call('EXISTS', dk, p .. 'c:' .. id) > 0 then return 'not_new' end
local record = {'model', m, 'x', ARGV[5], 'decision', ARGV[6], 'model_version', ARGV[7],
                'created_at', ARGV[8], 'expires_at', ARGV[9]}
local meta = p .. 'm:' .. m .. ':meta'
if ARGV[10] then
  -- Entry ids follow creation times; a replica whose clock is behind the last entry's follows it.
  -- The last id is kept in the meta hash: reading the stream's last entry would copy its features.
  local eid = ARGV[10] .. '-0'
  if eid == '0-0' then eid = '0-1' end  -- the one id a stream refuses
  local last = redis.call('HGET', meta, 'dlog_last')
  if last then
    local ms, seq = entry_id(last)
    if ms >= tonumber(ARGV[10]) then eid = ms .. '-' .. (seq + 1) end
  end
  redis.call('XADD', p .. 'm:' .. m .. ':dlog', eid, 'id', id, 'v', ARGV[7], 't', ARGV[8], 'x', ARGV[5],
             'p', ARGV[11], 'l', ARGV[12])
  redis.call('HSET', meta, 'dlog_last', eid)
  record[#record + 1] = 'lg'
  record[#record + 1] = eid
end
redis.call('HSET', dk, unpack(record))
redis.call('PEXPIRE', dk, ARGV[4])
redis.call('ZADD', p .. 'm:' .. m .. ':due', ARGV[9], id)
redis.call('HINCRBY', meta, 'decisions', 1)
return 'ok'
"""
)

# ARGV: prefix, model, age limit ('' for none: entries whose id is below this many ms are too old),
# entries kept ('' for none), batch. Forgets the oldest entries beyond either limit, at most
# ``batch``, with their outcomes; returns how many, or -1 when there is no such model.
_TRIM_DECISION_LOG = (
    _LUA_COMMON
    + """
local p, m, batch = ARGV[1], ARGV[2], tonumber(ARGV[5])
if redis.call('HEXISTS', p .. 'models', m) == 0 then return -1 end
local log, out = p .. 'm:' .. m .. ':dlog', p .. 'm:' .. m .. ':dout'
local excess, cut = 0, nil
if ARGV[4] ~= '' then excess = redis.call('XLEN', log) - tonumber(ARGV[4]) end
if ARGV[3] ~= '' then cut = tonumber(ARGV[3]) end
local function too_old(entry)
  return cut ~= nil and entry_id(entry[1]) < cut
end
-- A sweep with nothing to forget (the usual one, every second) reads no entry.
if excess <= 0 then
  if cut == nil then return 0 end
  if #redis.call('XRANGE', log, '-', '(' .. ARGV[3] .. '-0', 'COUNT', 1) == 0 then return 0 end
end
local old = redis.call('XRANGE', log, '-', '+', 'COUNT', batch)
local n, ids = 0, {}
for i, entry in ipairs(old) do
  if i > excess and not too_old(entry) then break end
  n = i
  local f = entry[2]
  for j = 1, #f, 2 do
    if f[j] == 'id' then ids[n] = f[j + 1] break end
  end
end
redis.call('HDEL', out, unpack(ids))
local ms, seq = entry_id(old[n][1])
local low = ms .. '-' .. (seq + 1)
redis.call('XTRIM', log, 'MINID', low)
redis.call('HSET', p .. 'm:' .. m .. ':meta', 'dlog_min', low)
return n
"""
)

# ARGV: prefix, model, then the event's field/value pairs. Returns the position, or -1 (no model).
_APPEND = (
    _LUA_COMMON
    + """
if redis.call('HEXISTS', ARGV[1] .. 'models', ARGV[2]) == 0 then return -1 end
return append(ARGV[1], ARGV[2], {unpack(ARGV, 3)})
"""
)

# ARGV: prefix, model, batch. Returns 0 when there is no such model, else 1.
_DELETE_MODEL = """
local p, m = ARGV[1], ARGV[2]
if redis.call('HDEL', p .. 'models', m) == 0 then return 0 end
local base = p .. 'm:' .. m
local ids = redis.call('ZRANGE', base .. ':due', 0, -1)
for i = 1, #ids, tonumber(ARGV[3]) do
  local keys = {}
  for j = i, math.min(i + tonumber(ARGV[3]) - 1, #ids) do keys[#keys + 1] = p .. 'd:' .. ids[j] end
  redis.call('DEL', unpack(keys))
end
redis.call('DEL', base .. ':due', base .. ':log', base .. ':meta', base .. ':cp', base .. ':dlog',
           base .. ':dout', base .. ':act', base .. ':actz')
return 1
"""

# ARGV: prefix, model, minutes kept, then per minute: minute, decisions, clicks, no-clicks, expired,
# exploration. Adds them, then forgets the minutes more than ``kept`` before the latest (some hundred
# per step: HDEL takes its fields as arguments). Returns -1 when there is no such model, else 1.
_ADD_ACTIVITY = """
local p, m, kept = ARGV[1], ARGV[2], tonumber(ARGV[3])
if redis.call('HEXISTS', p .. 'models', m) == 0 then return -1 end
local h, z = p .. 'm:' .. m .. ':act', p .. 'm:' .. m .. ':actz'
local counters = {'d', 'c', 'n', 'e'}
for i = 4, #ARGV, 6 do
  local minute = ARGV[i]
  for j = 1, 4 do
    if ARGV[i + j] ~= '0' then redis.call('HINCRBY', h, minute .. ':' .. counters[j], ARGV[i + j]) end
  end
  if tonumber(ARGV[i + 5]) ~= 0 then redis.call('HINCRBYFLOAT', h, minute .. ':x', ARGV[i + 5]) end
  redis.call('ZADD', z, minute, minute)
end
local cut = tonumber(redis.call('ZRANGE', z, -1, -1)[1]) - kept
while true do
  local old = redis.call('ZRANGEBYSCORE', z, '-inf', cut, 'LIMIT', 0, 200)
  if #old == 0 then break end
  local fields = {}
  for _, minute in ipairs(old) do
    for _, f in ipairs({'d', 'c', 'n', 'e', 'x'}) do fields[#fields + 1] = minute .. ':' .. f end
  end
  redis.call('HDEL', h, unpack(fields))
  redis.call('ZREM', z, unpack(old))
end
return 1
"""

# ARGV: prefix, model, first minute. Returns -1 when there is no such model, else a flat list: minute,
# decisions, clicks, no-clicks, expired, exploration, then the next minute's, in minute order.
_READ_ACTIVITY = """
local p, m = ARGV[1], ARGV[2]
if redis.call('HEXISTS', p .. 'models', m) == 0 then return -1 end
local h = p .. 'm:' .. m .. ':act'
local out = {}
for _, minute in ipairs(redis.call('ZRANGEBYSCORE', p .. 'm:' .. m .. ':actz', ARGV[3], '+inf')) do
  local v = redis.call('HMGET', h, minute .. ':d', minute .. ':c', minute .. ':n', minute .. ':e',
                       minute .. ':x')
  out[#out + 1] = minute
  for j = 1, 5 do out[#out + 1] = v[j] or '0' end
end
return out
"""

# KEYS: lease key. ARGV: holder, ttl (ms). Take the lease if free (SET NX PX) or renew it if ours.
_LEASE = """
local v = redis.call('GET', KEYS[1])
if not v then redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) return 1 end
if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
return 0
"""

# KEYS: checkpoint hash. ARGV: position, state. Keeps the checkpoint at the later position.
_PUT_CHECKPOINT = """
local old = redis.call('HGET', KEYS[1], 'position')
if old and tonumber(old) > tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'position', ARGV[1], 'state', ARGV[2])
return 1
"""


P = ParamSpec("P")
T = TypeVar("T")


def _available(method: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Turn "cannot reach Redis" (refused, timed out, loading its AOF) into :class:`StoreUnavailableError`."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(*args, **kwargs)
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise StoreUnavailableError(f"Redis unavailable: {exc}") from exc

    return wrapper


def _f(t: float) -> str:
    """A float as text that parses back to the same double (Python and Lua)."""
    return repr(float(t))


# The largest time a decision-log entry id holds (the year 5138): its ms stay below 1e14, which
# Lua's numbers hold exactly and print without an exponent (Lua 5.1 prints with %.14g).
_MAX_SECONDS = 1e11


def _ms(t: float) -> str:
    """Unix seconds as the whole milliseconds of a stream entry id (clamped to its range)."""
    return str(math.floor(min(max(t, 0.0), _MAX_SECONDS) * 1000))


def _s(b: bytes | None) -> str:
    return b.decode() if b is not None else ""


def _event(position: int, fields: Mapping[bytes, bytes]) -> Event:
    """Decode one stream entry (see ``_CLAIM_AND_APPEND`` and :meth:`RedisStore.append`)."""
    kind = fields[b"kind"].decode()
    at = float(fields[b"at"])
    if kind == "learn":
        return Event(
            position=position,
            kind="learn",
            at=at,
            decision_id=fields[b"decision_id"].decode(),
            x=decode_x(fields[b"x"]),
            decision=decode_decision(fields[b"decision"]),
            reward=fields[b"reward"] == b"1",
            outcome=fields[b"outcome"].decode(),  # type: ignore[arg-type]
        )
    return Event(position=position, kind=kind, at=at, state=fields.get(b"state"))  # type: ignore[arg-type]


class RedisStore(Store):
    """:class:`~service.store.base.Store` on one Redis server (see module docstring).

    Parameters
    ----------
    url : str
        ``redis://host:port/db`` (or ``rediss://``, ``unix://``), as for ``redis.asyncio.from_url``.
    claim_ttl : float
        Seconds a claim is remembered (duplicates within it get 409).
    prefix : str
        Prefix of every key, so several deployments (or tests) can share one Redis.
    grace : float
        Seconds a pending record is kept after its reward window (by Redis's clock), so the expiry
        sweep of a replica that was down for less than this still finds it.
    socket_timeout : float
        Seconds before a command on a silent connection fails (Redis down: fail fast, retry later).
    """

    _EXPIRE_BATCH = 500
    _TRIM_BATCH = 500
    shared = True

    def __init__(
        self,
        url: str,
        claim_ttl: float = 86_400.0,
        *,
        prefix: str = "cb:",
        grace: float = 3_600.0,
        socket_timeout: float = 2.0,
    ) -> None:
        super().__init__(claim_ttl)
        self.url = url
        self.prefix = prefix
        self.grace = grace
        self.socket_timeout = socket_timeout
        # Fail fast when Redis is down (one quick retry on a fresh connection covers a restarted server);
        # the caller answers 503 and the client retries, instead of requests hanging in backoff.
        self.redis = aioredis.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            retry=Retry(ExponentialBackoff(cap=0.05, base=0.01), 1),
        )
        self._claim = self.redis.register_script(_CLAIM_AND_APPEND)
        self._expire = self.redis.register_script(_EXPIRE_DUE)
        self._put_decision = self.redis.register_script(_PUT_DECISION)
        self._append = self.redis.register_script(_APPEND)
        self._delete = self.redis.register_script(_DELETE_MODEL)
        self._put_checkpoint = self.redis.register_script(_PUT_CHECKPOINT)
        self._lease = self.redis.register_script(_LEASE)
        self._trim_decisions = self.redis.register_script(_TRIM_DECISION_LOG)
        self._add_activity = self.redis.register_script(_ADD_ACTIVITY)
        self._read_activity = self.redis.register_script(_READ_ACTIVITY)

    def key(self, name: str, part: str) -> str:
        """The key of ``part`` (``meta``, ``log``, ``due``, ``cp``) of model ``name``."""
        return f"{self.prefix}m:{name}:{part}"

    async def _require(self, name: str) -> None:
        if not await self.redis.hexists(self.prefix + "models", name):
            raise UnknownModelError(f"unknown model {name!r}")

    # -- models -----------------------------------------------------------------------------

    @_available
    async def create_model(self, name: str, config: Mapping[str, Any]) -> None:
        doc = json.dumps(dict(config), sort_keys=True)
        if not await self.redis.hsetnx(self.prefix + "models", name, doc):
            raise ModelExistsError(f"model {name!r} already exists")

    @_available
    async def get_model(self, name: str) -> dict[str, Any]:
        doc = await self.redis.hget(self.prefix + "models", name)
        if doc is None:
            raise UnknownModelError(f"unknown model {name!r}")
        return json.loads(doc)

    @_available
    async def list_models(self) -> dict[str, dict[str, Any]]:
        docs = await self.redis.hgetall(self.prefix + "models")
        return {name.decode(): json.loads(doc) for name, doc in sorted(docs.items())}

    @_available
    async def delete_model(self, name: str) -> None:
        if not await self._delete(args=[self.prefix, name, 1000]):
            raise UnknownModelError(f"unknown model {name!r}")

    @_available
    async def counts(self, name: str) -> Counts:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hexists(self.prefix + "models", name)
            pipe.hmget(self.key(name, "meta"), "decisions", "clicks", "no_clicks", "expired")
            pipe.zcard(self.key(name, "due"))
            exists, values, pending = await pipe.execute()
        if not exists:
            raise UnknownModelError(f"unknown model {name!r}")
        d, c, n, e = (int(v or 0) for v in values)
        return Counts(decisions=d, clicks=c, no_clicks=n, expired=e, pending=int(pending))

    # -- decisions and feedback -------------------------------------------------------------

    @_available
    async def put_decision(self, record: DecisionRecord) -> None:
        ttl_ms = int(1000 * (max(record.expires_at - record.created_at, 0.0) + self.grace))
        args: list[Any] = [
            self.prefix,
            record.model,
            record.decision_id,
            ttl_ms,
            encode_x(record.x),
            encode_decision(record.decision),
            record.model_version,
            _f(record.created_at),
            _f(record.expires_at),
        ]
        if record.logged:
            probs = np.asarray(record.decision["probs"], dtype="<f8").tobytes()
            args += [_ms(record.created_at), probs, int(record.decision["label"])]
        status = await self._put_decision(args=args)
        if status == b"unknown_model":
            raise UnknownModelError(f"unknown model {record.model!r}")
        if status == b"not_new":
            raise ValueError(f"decision id {record.decision_id!r} is not new")

    @_available
    async def get_decision(self, decision_id: str) -> DecisionRecord | None:
        h = await self.redis.hgetall(f"{self.prefix}d:{decision_id}")
        if not h:
            return None
        return DecisionRecord(
            decision_id=decision_id,
            model=h[b"model"].decode(),
            x=decode_x(h[b"x"]),
            decision=decode_decision(h[b"decision"]),
            model_version=int(h[b"model_version"]),
            created_at=float(h[b"created_at"]),
            expires_at=float(h[b"expires_at"]),
        )

    def _claim_args(self, now: float) -> list[Any]:
        return [_f(now), _f(now + self.claim_ttl), max(int(1000 * self.claim_ttl), 1)]

    @_available
    async def claim_and_append(self, decision_id: str, click: bool, now: float) -> ClaimOutcome:
        now_s, forget_at, ttl_ms = self._claim_args(now)
        out = await self._claim(
            args=[self.prefix, decision_id, "1" if click else "0", now_s, forget_at, ttl_ms]
        )
        status = ClaimStatus(out[0].decode())
        if status is ClaimStatus.UNKNOWN:
            return ClaimOutcome(status)
        model, outcome, position, at = (v.decode() for v in out[1:])
        claim = Claim(decision_id, model, outcome, int(position) if position else None, float(at))  # type: ignore[arg-type]
        return ClaimOutcome(status, claim)

    @_available
    async def expire_due(
        self, model: str, now: float, default_reward: Literal["no_click", "drop"]
    ) -> list[Claim]:
        await self._require(model)
        now_s, forget_at, ttl_ms = self._claim_args(now)
        appended = "1" if default_reward == "no_click" else "0"
        claims: list[Claim] = []
        while True:
            out = await self._expire(
                args=[self.prefix, model, now_s, forget_at, ttl_ms, appended, self._EXPIRE_BATCH]
            )
            for i in range(0, len(out), 2):
                pos = out[i + 1].decode()
                claims.append(Claim(out[i].decode(), model, "expired", int(pos) if pos else None, now))
            if len(out) < 2 * self._EXPIRE_BATCH:
                return claims

    # -- event log and checkpoints ------------------------------------------------------------

    @_available
    async def append(self, model: str, event: Event) -> int:
        if event.kind == "learn":
            raise ValueError("learn events are appended by claim_and_append / expire_due only")
        fields: list[Any] = ["kind", event.kind, "at", _f(event.at)]
        if event.state is not None:
            fields += ["state", event.state]
        position = int(await self._append(args=[self.prefix, model, *fields]))
        if position < 0:
            raise UnknownModelError(f"unknown model {model!r}")
        return position

    @_available
    async def read_log(self, model: str, after: int, limit: int = 1000) -> list[Event]:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hexists(self.prefix + "models", model)
            pipe.xrange(self.key(model, "log"), min=f"{after + 1}-0", max="+", count=limit)
            exists, entries = await pipe.execute()
        if not exists:
            raise UnknownModelError(f"unknown model {model!r}")
        return [_event(int(eid.split(b"-")[0]), fields) for eid, fields in entries]

    @_available
    async def log_position(self, model: str) -> int:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hexists(self.prefix + "models", model)
            pipe.hget(self.key(model, "meta"), "last")
            exists, last = await pipe.execute()
        if not exists:
            raise UnknownModelError(f"unknown model {model!r}")
        return int(last or 0)

    @_available
    async def put_checkpoint(self, model: str, checkpoint: Checkpoint) -> None:
        await self._require(model)
        await self._put_checkpoint(keys=[self.key(model, "cp")], args=[checkpoint.position, checkpoint.state])

    @_available
    async def get_checkpoint(self, model: str) -> Checkpoint | None:
        await self._require(model)
        position, state = await self.redis.hmget(self.key(model, "cp"), "position", "state")
        if position is None or state is None:
            return None
        return Checkpoint(int(position), state)

    @_available
    async def trim_log(self, model: str, upto: int) -> None:
        await self._require(model)
        await self.redis.xtrim(self.key(model, "log"), minid=f"{upto + 1}-0", approximate=False)

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
        # Entry ids are creation times in ms (or later, under clock skew): the range is found by id,
        # and the exact times are checked on the entries.
        start = "-" if since == -math.inf else _ms(since)
        if after is not None:
            start = "(" + after
        end = "+" if until == math.inf else str(math.ceil(min(max(until, 0.0), _MAX_SECONDS) * 1000))
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hexists(self.prefix + "models", model)
            pipe.xrange(self.key(model, "dlog"), min=start, max=end, count=limit)
            exists, entries = await pipe.execute()
        if not exists:
            raise UnknownModelError(f"unknown model {model!r}")
        if not entries:
            return [], None
        ids = [fields[b"id"] for _, fields in entries]
        outcomes = await self.redis.hmget(self.key(model, "dout"), ids)
        page = []
        for (_, f), outcome in zip(entries, outcomes, strict=True):
            t = float(f[b"t"])
            if not since <= t < until:
                continue
            done: list[Any] = [None, None, None]
            if outcome is not None:
                what, reward, at = outcome.decode().split(" ")
                done = [what, None if reward == "-" else reward == "1", float(at)]
            page.append(
                LoggedDecision(
                    f[b"id"].decode(),
                    int(f[b"v"]),
                    t,
                    decode_x(f[b"x"]),
                    np.frombuffer(f[b"p"], dtype="<f8").astype(np.float64),
                    int(f[b"l"]),
                    *done,
                )
            )
        return page, (entries[-1][0].decode() if len(entries) == limit else None)

    @_available
    async def trim_decision_log(self, model: str, older_than: float | None, keep: int | None) -> int:
        cut = "" if older_than is None else _ms(older_than)
        kept = "" if keep is None else keep
        trimmed = 0
        while True:  # each script forgets at most a batch (a long script would block Redis)
            n = int(await self._trim_decisions(args=[self.prefix, model, cut, kept, self._TRIM_BATCH]))
            if n < 0:
                if trimmed:  # deleted meanwhile
                    return trimmed
                raise UnknownModelError(f"unknown model {model!r}")
            trimmed += n
            if n < self._TRIM_BATCH:
                return trimmed

    # -- dashboard: per-minute activity and heartbeats ---------------------------------------------

    @_available
    async def add_activity(self, model: str, minutes: Mapping[int, Activity]) -> None:
        args: list[Any] = [self.prefix, model, ACTIVITY_MINUTES]
        for minute, a in minutes.items():
            args += [minute, a.decisions, a.clicks, a.no_clicks, a.expired, _f(a.exploration)]
        if int(await self._add_activity(args=args)) < 0:
            raise UnknownModelError(f"unknown model {model!r}")

    @_available
    async def read_activity(self, model: str, since: int) -> dict[int, Activity]:
        out = await self._read_activity(args=[self.prefix, model, since])
        if not isinstance(out, list):
            raise UnknownModelError(f"unknown model {model!r}")
        return {
            int(out[i]): Activity(
                int(out[i + 1]), int(out[i + 2]), int(out[i + 3]), int(out[i + 4]), float(out[i + 5])
            )
            for i in range(0, len(out), 6)
        }

    @_available
    async def heartbeat(self, beat: Heartbeat, ttl: float) -> None:
        doc = json.dumps({**beat.to_json(), "ttl": ttl})
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(f"{self.prefix}replica:{beat.replica}", doc, px=max(int(1000 * ttl), 1))
            pipe.sadd(f"{self.prefix}replicas", beat.replica)
            await pipe.execute()

    @_available
    async def replicas(self) -> list[Heartbeat]:
        ids = sorted(v.decode() for v in await self.redis.smembers(f"{self.prefix}replicas"))
        if not ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for replica in ids:
                pipe.get(f"{self.prefix}replica:{replica}")
                pipe.pttl(f"{self.prefix}replica:{replica}")
            found = await pipe.execute()
        beats, gone = [], []
        for replica, doc, left_ms in zip(ids, found[::2], found[1::2], strict=True):
            if doc is None or left_ms < 0:  # its TTL ran out: the replica stopped reporting
                gone.append(replica)
                continue
            beat = json.loads(doc)
            # The age by Redis's clock (TTL minus what is left of it): no skew between replicas.
            beats.append(Heartbeat.from_json(beat, max(float(beat["ttl"]) - left_ms / 1000, 0.0)))
        if gone:
            await self.redis.srem(f"{self.prefix}replicas", *gone)
        return beats

    @_available
    async def forget_replica(self, replica: str) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(f"{self.prefix}replica:{replica}")
            pipe.srem(f"{self.prefix}replicas", replica)
            await pipe.execute()

    # -- replication ----------------------------------------------------------------------------

    @_available
    async def wait_log(self, positions: Mapping[str, int], timeout: float) -> None:
        """``XREAD BLOCK`` on the logs: returns as soon as one has an entry after its applied position."""
        if not positions:
            await asyncio.sleep(timeout)
            return
        block_ms = max(int(1000 * min(timeout, self.socket_timeout / 2)), 1)
        streams = {self.key(name, "log"): f"{position}-0" for name, position in positions.items()}
        await self.redis.xread(streams, count=1, block=block_ms)

    @_available
    async def lease(self, name: str, holder: str, ttl: float) -> bool:
        key = f"{self.prefix}lease:{name}"
        return bool(await self._lease(keys=[key], args=[holder, max(int(1000 * ttl), 1)]))

    # -- lifecycle ------------------------------------------------------------------------------

    @_available
    async def ping(self) -> None:
        await self.redis.ping()

    async def close(self) -> None:
        await self.redis.aclose()
