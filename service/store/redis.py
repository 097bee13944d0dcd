"""The shared store for several replicas: :class:`~service.store.base.Store` on Redis or Redis Cluster.

Every multi-key step that must be atomic is one Lua script (``EVALSHA``; Redis runs a script to
completion before serving any other command), so ``claim_and_append`` checks the claim, removes the
pending record, writes the claim, appends the learn event and bumps the counter in one step, and a
replica that dies mid-request leaves either all of it or none. Scripts were chosen over
``MULTI``/``WATCH``: a claim depends on what it reads (is there a claim? a pending record? is it due?),
which under ``WATCH`` means optimistic retries that grow with contention on hot duplicates, while a
script costs one round trip and never retries. See docs/ARCHITECTURE.md, "Replication", and
docs/SCALING.md for what a pair costs.

**One slot per model.** Every key of model ``name`` carries the hash tag ``{name}``, so a model's log,
counters, pending decisions, claims and checkpoint live in one hash slot (one shard of a cluster)
and each script touches one slot; models spread over the shards by name. The feedback carries only
the decision id, so the id says where its decision is: :meth:`RedisStore.route` appends ``.tag``
to the 128 random bits, ``tag`` being the shortest base-36 string of the model's hash slot
(:func:`slot_tag`): it names the slot, not the model, and adds no guessable part. An id without a
valid tag is unknown (404) without a command.

Keys (``prefix`` defaults to ``cb:``; one prefix per deployment or per test; ``{t}``: the slot tag of
the decision's model, ``{name}``: the model name as hash tag):

======================================  ======  ==============================================
``{p}{_registry}:models``               hash    model name -> JSON config
``{p}{_registry}:events``               stream  model creations and deletions (``op``, ``name``):
                                                replicas block on it with the logs; also placement
                                                changes (``op`` ``place``)
``{p}{_registry}:placement``            hash    model name -> JSON placement override (moved models;
                                                :mod:`service.placement`)
``{p}{name}:meta``                      hash    ``model`` (the model exists), ``last`` (log position),
                                                click/no-click/expired counts, ``lost`` (records gone
                                                by their TTL unswept; the decision count is derived:
                                                ``_COUNTS``), ``graded`` / ``graded_sum`` (graded
                                                rewards), ``deferred`` / ``activated`` /
                                                ``dropped_unactivated`` (deferred decisions),
                                                ``dlog_min``: the least decision-log entry id kept;
                                                the logged decisions' outcomes: id -> ``outcome reward
                                                at`` (reward ``-`` when dropped), ``id:a`` -> a
                                                deferred one's activation time (a routed id has a dot,
                                                no counter has)
``{p}{name}:log``                       stream  the event log; entry id ``{position}-0``, so positions are
                                                explicit integers without gaps, ``XRANGE``/``XREAD`` read
                                                them in order and ``XTRIM MINID`` trims below a position;
                                                a logged decision's learn event has ``lg`` (its
                                                decision-log entry) instead of ``x``
``{p}{name}:due``                       zset    pending decision ids scored by ``expires_at`` (the sweep)
``{p}{name}:cp``                        hash    the latest checkpoint: ``position``, ``state`` (bytes)
``{p}{name}:dlog``                      stream  the decision log (made with the model, so that an entry
                                                is added only to a model that exists): entry id
                                                ``{created_at ms}-{n}`` (raised
                                                to follow the last entry when a replica's clock is
                                                behind), fields ``id``, ``v`` (model version), ``t``
                                                (created_at), ``x`` (as in the record), ``p``
                                                (probabilities, float64 little-endian), ``l`` (label)
``{p}{name}:dout``                      hash    before issue 40, the outcomes now in the meta hash: still
                                                read and trimmed
``{p}{name}:act``, ``{p}{name}:actz``   hash,   per-minute activity (``{minute}:d`` / ``:c`` / ``:n`` /
                                        zset    ``:e`` / ``:x`` / ``:g`` / ``:r``) and the minutes held
``{p}{t}:r:{decision_id}``              string  the decision: first its pending record (TTL window +
                                                ``grace``): model, version, times, ``lg`` (its
                                                decision-log entry id, when logged), deferred,
                                                activation time, a held feedback (reward, outcome,
                                                time), the decision and, unless logged, the features;
                                                then its claim, which replaces it (TTL ``claim_ttl``):
                                                model, outcome, position, at, ``forget_at`` (honours
                                                the caller's clock), deferred, activated. Format:
                                                ``load`` in the scripts. Before issue 40: two hashes,
                                                ``{p}{t}:d:{id}`` and ``{p}{t}:c:{id}``, still read
``{p}lease:{name}``                     string  a lease (``checkpoint:{model}``) and its holder, with a TTL
``{p}replica:{id}``, ``{p}replicas``    string, a replica's last heartbeat (JSON, TTL); the ids that
                                        set     sent one (pruned when listed)
======================================  ======  ==============================================

**One copy of the context** (issue 40). A logged decision's features are stored once, in its
decision-log entry, and never pass through a script after :meth:`RedisStore.put_decision`: the
record holds the entry's id, and the feedback, activation and expiry scripts write it into the learn
event (``lg``) in place of the features. A follower reads the events, then the features of the
entries they name (:meth:`RedisStore._events`: one range read per model and round, pipelined with
the other models'). The retention therefore keeps every entry that an event still in the event log
names: it stops at the first entry whose claim's position is at or after the log's first event, or
whose claim is forgotten (TTL ``claim_ttl``) while the log holds an event older than that; the
runtime trims the log at each checkpoint (every ``checkpoint_every`` events or
``checkpoint_interval_seconds``), which only a replica at or past the checkpoint reads, and one
behind it loads the checkpoint first. Before it forgets the entry of a decision still pending it
moves the features into the decision's record, whose learn event then carries them (``x``). An
unlogged decision keeps them in its record. Per pair: 5 commands in the predict script (``EVALSHA``,
the taken-id check, the entry, the record, the due set) and 7 in the feedback script (``EVALSHA``,
the record, the meta read, the event, one ``HSET`` of counters and outcome, the claim, the due set),
no count of the decision (derived, ``_COUNTS``).

**Following the logs.** A replica reads every model's new events with one blocking ``XREAD`` over
all the logs and the registry's stream (:meth:`RedisStore.tail`), and applies the entries it gets:
no read per model, no poll. Redis Cluster refuses a command over keys of several slots, so there
the scripts that append also ``SPUBLISH`` the new position on the model's shard channel
``{p}{name}:notify`` (and model creations and deletions on ``{p}{_registry}:notify``); a replica
subscribes to the channels of its models (one connection per shard, redis-py's cluster pub/sub)
and reads (``XRANGE``, pipelined per shard) the logs it was told about. After a subscription is
made or lost, every log is read again, so a notification missed meanwhile is never a missed event.

**Cluster URLs.** ``redis+cluster://host:port`` (``rediss+cluster://`` for TLS) names any node of a
Redis Cluster; the store then uses :class:`redis.asyncio.cluster.RedisCluster`, which discovers the
others. Any other URL is one server (``redis://``, ``rediss://``, ``unix://``).

**Older layouts.** Before issue 25 the keys had no hash tag (``{p}models``, ``{p}m:{name}:meta``, ...,
``{p}d:{id}``). :meth:`RedisStore.prepare` (run by every replica at start) migrates them, one script
per model, under a lock: the per-model keys are renamed, the registry moved, and each old
``{p}m:{name}:meta`` replaced by a string, so that a replica of the old version still running gets
an error instead of writing where nobody reads (stop old replicas before starting new ones).
Pending decisions and claims keep their old keys until their TTL: an id without a slot tag is looked
up there (a single server allows any key in a script).

Encoding is pickle-free: arrays and decisions with :mod:`service.store.codec`, configs as JSON,
times as ``repr(float)`` (exact round trip).
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import functools
import json
import math
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, ParamSpec, TypeVar

import numpy as np
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ClusterDownError, SlotNotCoveredError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

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
    Expiry,
    Heartbeat,
    LoggedDecision,
    ModelExistsError,
    Reward,
    Store,
    StoreUnavailableError,
    Tail,
    UnknownModelError,
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

__all__ = ["RedisStore", "slot_tag"]

#: Redis Cluster's hash slots: CRC16 (XMODEM) of the hash tag modulo this.
SLOTS = 16384
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"
#: A routed decision id: the random part, a dot, the slot tag (at most 4 base-36 digits).
_ROUTED = re.compile(r"^(.+)\.([0-9a-z]{1,4})$")
#: The parts of a model's keys (``{p}{name}:{part}``), all in the model's hash slot.
_PARTS = ("meta", "due", "log", "cp", "dlog", "dout", "act", "actz")
#: Events read per model per tail round (more wait for the next round, which does not block).
_TAIL_BATCH = 256
#: Entries kept in the registry's stream (creations and deletions; replicas read it within seconds).
_REGISTRY_EVENTS = 1000


def key_slot(tag: str) -> int:
    """The hash slot of a key whose hash tag is ``tag`` (Redis Cluster's CRC16 modulo 16384)."""
    return binascii.crc_hqx(tag.encode(), 0) % SLOTS


@functools.cache
def slot_tag(slot: int) -> str:
    """The first base-36 string (``0``, ``1``, ..., ``z``, ``10``, ...) whose hash slot is ``slot``.

    About 16,000 CRCs on average, once per slot and process; every slot has one of at most 4 digits.
    """
    i = 0
    while True:
        n, digits = i, ""
        while True:
            n, r = divmod(n, 36)
            digits = _BASE36[r] + digits
            if not n:
                break
        if key_slot(digits) == slot:
            return digits
        i += 1


# Shared Lua helpers. ``p`` is the key prefix, ``m`` a model name; a model's keys are
# ``p{m}:part``, a decision's ``p{tag}:r:id`` (the tag ends the id, after a dot). A decision's key
# holds one string, first its pending record, then its claim (see ``load`` below). Before issue 40
# a decision had two hashes, ``p{tag}:d:id`` (record) and ``p{tag}:c:id`` (claim), and ids of the
# layout before issue 25 have no tag and keep ``pd:id`` / ``pc:id``: those are still read (and a
# record found there is claimed into the new key) until their TTLs end.
_LUA_COMMON = """
local function mk(p, m, part) return p .. '{' .. m .. '}:' .. part end
local function dk(p, id, kind)
  local tag = string.match(id, '%.([0-9a-z]+)$')
  if tag then return p .. '{' .. tag .. '}:' .. kind .. ':' .. id end
  return p .. kind .. ':' .. id
end
local function notify(p, m, on, pos)
  if on == '1' then redis.call('SPUBLISH', mk(p, m, 'notify'), pos) end
end
local function opt(v) if v == '-' then return nil end return v end
-- A decision's key (one string, one GET for the claim check and the record): a header of
-- space-separated fields ('-' for none) and a newline, then, for a pending record, its decision and
-- (only when the decision log does not hold them) its features.
--   record: R model version created_at expires_at lg df ac hr ho ha len(decision)
--   claim:  C model outcome position at forget_at df ac
-- A claim is {model, outcome, position, at, forget_at, deferred, activated} ('' for none); a record a
-- table. ``load`` returns the live claim or the record or neither.
local function load(p, id, now)
  local v = redis.call('GET', dk(p, id, 'r'))
  if v then
    local nl = string.find(v, '\\n', 1, true)
    local f = {}
    for t in string.gmatch(string.sub(v, 1, nl - 1), '%S+') do f[#f + 1] = t end
    if f[1] == 'C' then
      if tonumber(f[6]) <= tonumber(now) then return nil, nil end  -- forgotten (the caller's clock)
      return {f[2], f[3], opt(f[4]) or '', f[5], f[6], opt(f[7]) or '', opt(f[8]) or ''}, nil
    end
    local n = tonumber(f[12])
    local x = nil
    if #v > nl + n then x = string.sub(v, nl + n + 1) end
    return nil, {model = f[2], version = f[3], created = f[4], expires = f[5], lg = opt(f[6]), df = opt(f[7]),
                 ac = opt(f[8]), hr = opt(f[9]), ho = opt(f[10]), ha = opt(f[11]),
                 decision = string.sub(v, nl + 1, nl + n), x = x}
  end
  -- The layout before issue 40: a claim hash, a record hash.
  local ck = dk(p, id, 'c')
  local c = redis.call('HMGET', ck, 'model', 'outcome', 'position', 'at', 'forget_at', 'df', 'ac')
  if c[1] then
    if tonumber(c[5]) <= tonumber(now) then redis.call('DEL', ck) return nil, nil end
    c[6], c[7] = c[6] or '', c[7] or ''
    return c, nil
  end
  local h = redis.call('HMGET', dk(p, id, 'd'), 'model', 'model_version', 'created_at', 'expires_at', 'lg',
                       'df', 'ac', 'hr', 'ho', 'ha', 'decision', 'x')
  if not h[1] then return nil, nil end
  return nil, {model = h[1], version = h[2], created = h[3], expires = h[4], lg = h[5], df = h[6], ac = h[7],
               hr = h[8], ho = h[9], ha = h[10], decision = h[11], x = h[12], old = true}
end
local function record_text(r)
  local head = {'R', r.model, r.version, r.created, r.expires, r.lg or '-', r.df or '-', r.ac or '-',
                r.hr or '-', r.ho or '-', r.ha or '-', #r.decision}
  return table.concat(head, ' ') .. '\\n' .. r.decision .. (r.x or '')
end
-- Save changed fields of a pending record (its TTL kept).
local function save(p, id, r)
  if r.old then
    local f = {}
    for _, k in ipairs({'ac', 'hr', 'ho', 'ha'}) do
      if r[k] then f[#f + 1] = k f[#f + 1] = r[k] end
    end
    redis.call('HSET', dk(p, id, 'd'), unpack(f))
  else
    redis.call('SET', dk(p, id, 'r'), record_text(r), 'KEEPTTL')
  end
end
-- The claim replaces the record in the decision's key (the record's bytes go with it).
local function claim(p, r, due, id, m, outcome, position, now, forget_at, claim_ttl_ms, df, ac)
  local head = {'C', m, outcome, position ~= '' and position or '-', now, forget_at, df ~= '' and df or '-',
                ac ~= '' and ac or '-'}
  redis.call('SET', dk(p, id, 'r'), table.concat(head, ' ') .. '\\n', 'PX', claim_ttl_ms)
  if r.old then redis.call('DEL', dk(p, id, 'd')) end
  redis.call('ZREM', due, id)
end
-- Stream entry ids 'ms-seq' as numbers (ms < 1e14, see _MAX_SECONDS).
local function entry_id(eid)
  local ms, seq = string.match(eid, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
-- Whether the decision-log entry ``lg`` was forgotten by the retention (its id is below ``low``, the
-- meta's dlog_min); reading the entry itself would copy its features.
local function forgotten(lg, low)
  if not low then return false end
  local ms, seq = entry_id(lg)
  local lms, lseq = entry_id(low)
  return ms < lms or (ms == lms and seq < lseq)
end
-- Where a learn event finds the features of the pending record ``r``: its own ('x'), or its
-- decision-log entry ('lg', the entry id: the one copy, which the follower reads; the retention
-- keeps an entry that an event still in the log names, and moves the features of a decision still
-- pending into its record before it forgets the entry).
local function context(r)
  if r.x then return 'x', r.x end
  return 'lg', r.lg
end
-- The outcome of a logged decision (``lg``: its entry id), unless the retention forgot the entry: added
-- to ``fields``, the field/value pairs of the meta hash that the caller sets in one HSET (a routed id
-- has a dot, which no counter's name has).
local function log_outcome(fields, id, lg, low, outcome, reward, now)
  if not lg or forgotten(lg, low) then return end
  fields[#fields + 1] = id
  fields[#fields + 1] = outcome .. ' ' .. reward .. ' ' .. now
end
-- A feedback's reward as sent ('1', '0' or a graded reward's text): its outcome and counter.
local function outcome_of(click)
  if click == '1' then return 'click', 'clicks' end
  if click == '0' then return 'no_click', 'no_clicks' end
  return 'reward', 'graded'
end
-- Claim the pending decision ``r`` with the feedback ``click``: its learn event, counters,
-- decision-log outcome and claim (``df``: deferred, so also activated). Returns the event's position.
local function learn(p, id, r, click, now, forget_at, claim_ttl_ms, on, df)
  local m = r.model
  local xf, xv = context(r)
  local outcome, counter = outcome_of(click)
  local meta = mk(p, m, 'meta')
  local v = redis.call('HMGET', meta, 'last', counter, 'dlog_min')
  local pos = (tonumber(v[1]) or 0) + 1
  redis.call('XADD', mk(p, m, 'log'), pos .. '-0', 'kind', 'learn', 'at', now, 'decision_id', id,
             xf, xv, 'decision', r.decision, 'reward', click, 'outcome', outcome)
  local fields = {'last', pos, counter, (tonumber(v[2]) or 0) + 1}
  log_outcome(fields, id, r.lg, v[3], outcome, click, now)
  redis.call('HSET', meta, unpack(fields))
  if outcome == 'reward' then redis.call('HINCRBYFLOAT', meta, 'graded_sum', click) end
  claim(p, r, mk(p, m, 'due'), id, m, outcome, tostring(pos), now, forget_at, claim_ttl_ms, df, df)
  notify(p, m, on, pos)
  return pos
end
"""

# KEYS: the decision's key. ARGV: prefix, decision id, reward (1/0 for a click bit, else a graded
# reward as exact text, kept as such in the event), now, forget_at, claim ttl (ms), notify (1/0), the
# model the caller names ('' for any: a decision of another is unknown). Returns {status, model,
# outcome, position ('' if none), at, deferred, activated}; a deferred decision not activated yet holds
# the feedback in its record ('held').
_CLAIM_AND_APPEND = (
    _LUA_COMMON
    + """
local p, id, click, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local c, r = load(p, id, now)
if ARGV[8] ~= '' and ((c and c[1] ~= ARGV[8]) or (r and r.model ~= ARGV[8])) then return {'unknown'} end
if c then
  local status = 'duplicate'
  if c[2] == 'expired' then status = 'expired' end
  return {status, c[1], c[2], c[3], c[4], c[6], c[7]}
end
if not r then return {'unknown'} end
local df = r.df or ''
if tonumber(now) >= tonumber(r.expires) then return {'expired', r.model, 'expired', '', r.expires, df, ''} end
local outcome = outcome_of(click)
if df == '1' and not r.ac then
  if r.ho then return {'duplicate', r.model, r.ho, '', r.ha, '1', ''} end
  r.hr, r.ho, r.ha = click, outcome, now
  save(p, id, r)
  return {'held', r.model, outcome, '', now, '1', ''}
end
local pos = learn(p, id, r, click, now, ARGV[5], ARGV[6], ARGV[7], df)
return {'accepted', r.model, outcome, tostring(pos), now, df, df}
"""
)

# KEYS: the decision's key. ARGV: prefix, decision id, now, forget_at, claim ttl (ms), notify, the model
# the caller names ('' for any). Returns {status, deferred} or {status, deferred, model, outcome,
# position, at, activated, reward} when there is a claim (the held feedback's reward when it was
# learned now).
_ACTIVATE = (
    _LUA_COMMON
    + """
local p, id, now = ARGV[1], ARGV[2], ARGV[3]
local c, r = load(p, id, now)
if ARGV[7] ~= '' and ((c and c[1] ~= ARGV[7]) or (r and r.model ~= ARGV[7])) then return {'unknown', ''} end
if c then
  local status = 'already'
  if c[6] == '1' and c[7] ~= '1' then status = 'expired' end  -- dropped unactivated
  return {status, c[6], c[1], c[2], c[3], c[4], c[7], ''}
end
if not r then return {'unknown', ''} end
if r.df ~= '1' or r.ac then return {'already', r.df or ''} end
if tonumber(now) >= tonumber(r.expires) then
  return {'expired', '1', r.model, 'expired', '', r.expires, '', ''}
end
local m = r.model
local meta = mk(p, m, 'meta')
r.ac = now
save(p, id, r)
redis.call('HINCRBY', meta, 'activated', 1)
if r.lg and not forgotten(r.lg, redis.call('HGET', meta, 'dlog_min')) then
  redis.call('HSET', meta, id .. ':a', now)
end
if not r.ho then return {'activated', '1'} end
local pos = learn(p, id, r, r.hr, now, ARGV[4], ARGV[5], ARGV[6], '1')
return {'activated', '1', m, r.ho, tostring(pos), now, '1', r.hr}
"""
)

# KEYS: meta, due. ARGV: prefix, model, now, forget_at, claim ttl (ms), append ('1' for no_click,
# '0' for drop), batch, notify. Returns -1 when there is no such model, else {claims, next due}:
# claims a flat list id1, position1 ('' if dropped), flags1 ('' not deferred, '1' deferred and dropped
# unactivated, '11' deferred and activated), id2, ... in due order; next due the earliest expiry still
# pending ('' if none).
_EXPIRE_DUE = (
    _LUA_COMMON
    + """
local p, m, now = ARGV[1], ARGV[2], ARGV[3]
local meta, due = KEYS[1], KEYS[2]
local v = redis.call('HMGET', meta, 'model', 'last', 'expired', 'dlog_min', 'dropped_unactivated', 'lost')
if not v[1] then return -1 end
local last, expired, dropped = tonumber(v[2]) or 0, tonumber(v[3]) or 0, tonumber(v[5]) or 0
local lost = tonumber(v[6]) or 0
local ids = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, tonumber(ARGV[7]))
local out, outcomes = {}, {}
for _, id in ipairs(ids) do
  local c, r = load(p, id, now)
  if r and not c then
    local pos, df, ac = '', r.df or '', ''
    if r.ac then ac = '1' end
    if df == '1' and ac == '' then  -- never shown: dropped whatever the default reward
      log_outcome(outcomes, id, r.lg, v[4], 'dropped', '-', now)
      dropped = dropped + 1
      expired = expired - 1
    elseif ARGV[6] == '1' then
      local xf, xv = context(r)
      last = last + 1
      pos = tostring(last)
      redis.call('XADD', mk(p, m, 'log'), pos .. '-0', 'kind', 'learn', 'at', now, 'decision_id', id,
                 xf, xv, 'decision', r.decision, 'reward', '0', 'outcome', 'expired')
      log_outcome(outcomes, id, r.lg, v[4], 'expired', '0', now)
    else
      log_outcome(outcomes, id, r.lg, v[4], 'dropped', '-', now)
    end
    claim(p, r, due, id, m, 'expired', pos, now, ARGV[4], ARGV[5], df, ac)
    expired = expired + 1
    out[#out + 1] = id
    out[#out + 1] = pos
    out[#out + 1] = df .. ac
  else
    redis.call('ZREM', due, id)  -- claimed, or its record gone by its TTL: still counted as a decision
    if not c then lost = lost + 1 end
  end
end
if #ids > 0 then
  redis.call('HSET', meta, 'last', last, 'expired', expired, 'dropped_unactivated', dropped, 'lost', lost,
             unpack(outcomes))
end
if #out > 0 and ARGV[6] == '1' then notify(p, m, ARGV[8], last) end
local nxt = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
return {out, nxt[2] or ''}
"""
)

# KEYS: meta, the decision's key, due, decision log. ARGV: decision id, ttl (ms), the record's text
# before its ``lg`` and after it (see ``load``; the client writes all but the entry id), expires_at (the
# due score), deferred ('1' / '0'), then for a logged decision: created_at in whole ms and the entry's
# field/value pairs. Returns 'ok', 'unknown_model' or 'not_new' (insert if absent: the id has no
# pending record and no claim). The features of a logged decision are kept once, in its decision-log
# entry (the record holds the entry's id), else in the record. Without the shared helpers: Redis
# sleeps between a pair's commands here, and every line a script runs from a cold cache costs.
_PUT_DECISION = """
local meta, lg = KEYS[1], '-'
-- Insert if absent: a taken id is refused before anything is written (issue 51: the entry it added
-- and deleted again had raised the log's last id above every entry, and the next decision behind it
-- failed). A record or claim of the layout before issue 40 is not looked for: only a client reusing
-- its own id within a claim's TTL of the upgrade could meet one.
if redis.call('EXISTS', KEYS[2]) == 1 then return 'not_new' end
if ARGV[7] then
  -- Entry ids follow creation times (Redis numbers the entries of one ms); a replica whose clock is
  -- behind the log's last id follows it (the stream refuses an id below its last). The entry also says
  -- whether the model exists: its decision log is made with it (NOMKSTREAM), except the log of a
  -- model made before issue 40 that never logged a decision.
  lg = redis.pcall('XADD', KEYS[4], 'NOMKSTREAM', ARGV[7] .. '-*', unpack(ARGV, 8))
  if not lg then
    if redis.call('HEXISTS', meta, 'model') == 0 then return 'unknown_model' end
    lg = redis.pcall('XADD', KEYS[4], ARGV[7] .. '-*', unpack(ARGV, 8))
  end
  if type(lg) == 'table' then
    -- Refused: an id below the stream's last, or Redis before 7.0 (no '<ms>-*' ids). The id is built
    -- here as '<ms>-*' would: after the last id the stream gave, not its last entry's (the retention
    -- may have trimmed every entry).
    local last = '0-0'
    if redis.call('EXISTS', KEYS[4]) == 1 then
      local info = redis.call('XINFO', 'STREAM', KEYS[4])
      for i = 1, #info, 2 do
        if info[i] == 'last-generated-id' then last = info[i + 1] end
      end
    elseif redis.call('HEXISTS', meta, 'model') == 0 then
      return 'unknown_model'
    end
    local ms, seq = string.match(last, '^(%d+)-(%d+)$')
    local id = ARGV[7] .. '-0'
    if tonumber(ARGV[7]) <= tonumber(ms) then id = ms .. '-' .. string.format('%d', tonumber(seq) + 1) end
    lg = redis.call('XADD', KEYS[4], id, unpack(ARGV, 8))
  end
elseif redis.call('HEXISTS', meta, 'model') == 0 then
  return 'unknown_model'
end
redis.call('SET', KEYS[2], ARGV[3] .. lg .. ARGV[4], 'PX', ARGV[2])
if ARGV[6] == '1' then redis.call('HINCRBY', meta, 'deferred', 1) end
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
return 'ok'
"""

# A page's slot records in one step (issue 53), so a failure never leaves part of a page: the decision
# script's body as a function of one slot's record key and arguments, run for every slot once no slot
# key is taken. KEYS: meta, slot 0's record, due, decision log, then slots 1.. records (every key in
# the model's hash slot: a page's ids share its routing suffix). ARGV: per slot, its count of
# arguments, then the decision script's arguments.
_PUT_PAGE = (
    "local function put_one(dkey, ARGV)\n"
    + _PUT_DECISION.replace("KEYS[2]", "dkey")
    + """end
local dkeys = {KEYS[2]}
for i = 5, #KEYS do dkeys[#dkeys + 1] = KEYS[i] end
if redis.call('EXISTS', unpack(dkeys)) > 0 then return 'not_new' end
local pos = 1
for s = 1, #dkeys do
  local n, a = tonumber(ARGV[pos]), {}
  for j = 1, n do a[j] = ARGV[pos + j] end
  pos = pos + n + 1
  local status = put_one(dkeys[s], a)
  if status ~= 'ok' then return status end
end
return 'ok'
"""
)

# KEYS: meta, decision log, outcomes, event log. ARGV: age limit ('' for none: entries whose id is
# below this many ms are too old), entries kept ('' for none), batch, prefix, the time a claim made
# before is forgotten by now (now - claim ttl). Forgets the oldest entries beyond either limit, at most
# ``batch``, with their outcomes; a decision still pending keeps its features, moved into its record.
# It stops at the first entry that a learn event still in the event log may name (the follower reads
# the features there): the claim's position is in the log, or its claim is forgotten while the log
# holds an event from before. Returns how many, or -1 when there is no such model.
_TRIM_DECISION_LOG = (
    _LUA_COMMON
    + """
local meta, log, out = KEYS[1], KEYS[2], KEYS[3]
local batch = tonumber(ARGV[3])
if redis.call('HEXISTS', meta, 'model') == 0 then return -1 end
local excess, cut = 0, nil
if ARGV[2] ~= '' then excess = redis.call('XLEN', log) - tonumber(ARGV[2]) end
if ARGV[1] ~= '' then cut = tonumber(ARGV[1]) end
local function too_old(entry)
  return cut ~= nil and entry_id(entry[1]) < cut
end
-- A sweep with nothing to forget (the usual one) reads no entry.
if excess <= 0 then
  if cut == nil then return 0 end
  if #redis.call('XRANGE', log, '-', '(' .. ARGV[1] .. '-0', 'COUNT', 1) == 0 then return 0 end
end
-- The event log's first position still there, and whether its first event is older than a forgotten claim.
local first, stale = math.huge, false
local head = redis.call('XRANGE', KEYS[4], '-', '+', 'COUNT', 1)[1]
if head then
  first = entry_id(head[1])
  for j = 1, #head[2], 2 do
    if head[2][j] == 'at' then stale = tonumber(head[2][j + 1]) < tonumber(ARGV[5]) end
  end
end
local old = redis.call('XRANGE', log, '-', '+', 'COUNT', batch)
local n, ids = 0, {}
for i, entry in ipairs(old) do
  if i > excess and not too_old(entry) then break end
  local f, id, x = entry[2], nil, nil
  for j = 1, #f, 2 do
    if f[j] == 'id' then id = f[j + 1] elseif f[j] == 'x' then x = f[j + 1] end
  end
  local key = dk(ARGV[4], id, 'r')
  local v = redis.call('GET', key)
  local top = v and string.sub(v, 1, string.find(v, '\\n', 1, true)) or ''
  local fields = {}
  for t in string.gmatch(top, '%S+') do fields[#fields + 1] = t end
  if fields[1] == 'C' and fields[4] ~= '-' and tonumber(fields[4]) >= first then break end
  if not v and stale then break end
  n = i
  ids[#ids + 1] = id
  ids[#ids + 1] = id .. ':a'  -- its activation, if deferred
  -- Still pending: its record takes the features (a record holds them after its decision and the
  -- entry's id was the record's own, not an older entry of a reused id).
  if fields[1] == 'R' and fields[6] == entry[1] and #v == #top + tonumber(fields[12]) then
    redis.call('SET', key, v .. x, 'KEEPTTL')
  end
end
if n == 0 then return 0 end
redis.call('HDEL', meta, unpack(ids))
redis.call('HDEL', out, unpack(ids))  -- outcomes kept before they moved into the meta hash
local ms, seq = entry_id(old[n][1])
local low = ms .. '-' .. (seq + 1)
redis.call('XTRIM', log, 'MINID', low)
redis.call('HSET', meta, 'dlog_min', low)
return n
"""
)

# KEYS: meta, log. ARGV: prefix, model, notify, then the event's field/value pairs. Returns the
# position, or -1 (no model).
_APPEND = (
    _LUA_COMMON
    + """
local v = redis.call('HMGET', KEYS[1], 'model', 'last')
if not v[1] then return -1 end
local pos = (tonumber(v[2]) or 0) + 1
redis.call('XADD', KEYS[2], pos .. '-0', unpack(ARGV, 4))
redis.call('HSET', KEYS[1], 'last', pos)
notify(ARGV[1], ARGV[2], ARGV[3], pos)
return pos
"""
)

# KEYS: the model's keys (meta first, due second, decision log fifth). ARGV: prefix, model, batch,
# fresh ('1': start a new model, else delete). Deleting removes the pending decisions of the due set
# and every key of the model and returns 1 if the model existed; a fresh start does the same, marks
# the model as existing (its meta's ``model``) and makes its decision log, empty.
_RESET_MODEL_KEYS = (
    _LUA_COMMON
    + """
local p, batch = ARGV[1], tonumber(ARGV[3])
local existed = redis.call('HEXISTS', KEYS[1], 'model')
local ids = redis.call('ZRANGE', KEYS[2], 0, -1)
for i = 1, #ids, batch do
  local keys = {}
  for j = i, math.min(i + batch - 1, #ids) do
    keys[#keys + 1] = dk(p, ids[j], 'r')
    keys[#keys + 1] = dk(p, ids[j], 'd')
  end
  redis.call('DEL', unpack(keys))
end
redis.call('DEL', unpack(KEYS))
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], 'model', ARGV[2])
  -- Its decision log, empty: a decision's entry is added only to a log that exists (the model does).
  redis.call('XADD', KEYS[5], '0-1', 'made', '1')
  redis.call('XDEL', KEYS[5], '0-1')
end
return existed
"""
)

# KEYS: registry hash, registry stream. ARGV: op ('create' / 'delete'), name, config, events kept.
# Create: HSETNX (0 if taken). Delete: HDEL (0 if unknown). Either way the change is added to the
# stream that replicas follow. Returns 1 or 0.
_REGISTRY = """
local done
if ARGV[1] == 'create' then
  done = redis.call('HSETNX', KEYS[1], ARGV[2], ARGV[3])
else
  done = redis.call('HDEL', KEYS[1], ARGV[2])
end
if done == 1 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'op', ARGV[1], 'name', ARGV[2])
end
return done
"""

# KEYS: meta, due. Returns {exists, decisions, clicks, no-clicks, expired, pending, graded,
# graded_sum, deferred, activated, dropped_unactivated}: one consistent read. The decisions are not
# counted when saved (a command less per pair): each is pending (in the due set) or was settled once,
# clicked, not clicked, graded, expired, dropped unactivated, or lost (its record gone by its TTL
# before any sweep came).
_COUNTS = """
local v = redis.call('HMGET', KEYS[1], 'model', 'clicks', 'no_clicks', 'expired', 'graded', 'graded_sum',
                     'deferred', 'activated', 'dropped_unactivated', 'lost')
if not v[1] then return {0} end
local pending = redis.call('ZCARD', KEYS[2])
local n = pending
for _, i in ipairs({2, 3, 4, 5, 9, 10}) do n = n + (tonumber(v[i]) or 0) end
return {1, n, v[2] or '0', v[3] or '0', v[4] or '0', pending, v[5] or '0', v[6] or '0', v[7] or '0',
        v[8] or '0', v[9] or '0'}
"""

# KEYS: meta, act, actz. ARGV: minutes kept, then per minute: minute, decisions, clicks, no-clicks,
# expired, exploration, graded, graded sum. Adds them, then forgets the minutes more than ``kept``
# before the latest (some hundred per step: HDEL takes its fields as arguments). Returns -1 when
# there is no such model, else 1.
_ADD_ACTIVITY = """
local kept = tonumber(ARGV[1])
if redis.call('HEXISTS', KEYS[1], 'model') == 0 then return -1 end
local h, z = KEYS[2], KEYS[3]
local counters = {'d', 'c', 'n', 'e', 'x', 'g', 'r'}
local floats = {x = true, r = true}
for i = 2, #ARGV, 8 do
  local minute = ARGV[i]
  for j = 1, 7 do
    local f = counters[j]
    if tonumber(ARGV[i + j]) ~= 0 then
      redis.call(floats[f] and 'HINCRBYFLOAT' or 'HINCRBY', h, minute .. ':' .. f, ARGV[i + j])
    end
  end
  redis.call('ZADD', z, minute, minute)
end
local cut = tonumber(redis.call('ZRANGE', z, -1, -1)[1]) - kept
while true do
  local old = redis.call('ZRANGEBYSCORE', z, '-inf', cut, 'LIMIT', 0, 200)
  if #old == 0 then break end
  local fields = {}
  for _, minute in ipairs(old) do
    for _, f in ipairs(counters) do fields[#fields + 1] = minute .. ':' .. f end
  end
  redis.call('HDEL', h, unpack(fields))
  redis.call('ZREM', z, unpack(old))
end
return 1
"""

# KEYS: meta, act, actz. ARGV: first minute. Returns -1 when there is no such model, else a flat
# list: minute, decisions, clicks, no-clicks, expired, exploration, graded, graded sum, then the next
# minute's, in minute order.
_READ_ACTIVITY = """
if redis.call('HEXISTS', KEYS[1], 'model') == 0 then return -1 end
local out = {}
for _, minute in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], ARGV[1], '+inf')) do
  local v = redis.call('HMGET', KEYS[2], minute .. ':d', minute .. ':c', minute .. ':n', minute .. ':e',
                       minute .. ':x', minute .. ':g', minute .. ':r')
  out[#out + 1] = minute
  for j = 1, 7 do out[#out + 1] = v[j] or '0' end
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

# KEYS: meta, checkpoint hash. ARGV: position, state. Keeps the checkpoint at the later position.
# Returns -1 when there is no such model.
_PUT_CHECKPOINT = """
if redis.call('HEXISTS', KEYS[1], 'model') == 0 then return -1 end
local old = redis.call('HGET', KEYS[2], 'position')
if old and tonumber(old) > tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[2], 'position', ARGV[1], 'state', ARGV[2])
return 1
"""

# The migration from the layout before issue 25 (one server only; see the module docstring).
# ARGV: prefix, model. Renames the model's keys to their hash-tagged names, marks it as existing and
# leaves a string at its old meta key, which fails the old version's scripts (WRONGTYPE) before they
# write. Returns 0 when already done.
_MIGRATE_MODEL = """
local p, m = ARGV[1], ARGV[2]
local old, new = p .. 'm:' .. m .. ':', p .. '{' .. m .. '}:'
if redis.call('TYPE', old .. 'meta')['ok'] == 'string' then return 0 end
for _, part in ipairs({'meta', 'log', 'due', 'cp', 'dlog', 'dout', 'act', 'actz'}) do
  if redis.call('EXISTS', old .. part) == 1 then redis.call('RENAME', old .. part, new .. part) end
end
redis.call('HSET', new .. 'meta', 'model', m)
redis.call('SET', old .. 'meta', 'moved to ' .. new .. '* (clickboost key layout 2, issue 25)')
return 1
"""

# ARGV: old registry, new registry, new registry's stream. Moves every config (keeping any already
# at the new key) and removes the old hash, which the old version's scripts check first.
_MIGRATE_REGISTRY = """
local flat = redis.call('HGETALL', ARGV[1])
for i = 1, #flat, 2 do redis.call('HSETNX', ARGV[2], flat[i], flat[i + 1]) end
redis.call('DEL', ARGV[1])
redis.call('XADD', ARGV[3], '*', 'op', 'migrate', 'name', '')
return #flat / 2
"""


P = ParamSpec("P")
T = TypeVar("T")


def _available(method: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Turn "cannot reach Redis" (refused, timed out, loading its AOF, a cluster without a majority)
    into :class:`StoreUnavailableError`."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(*args, **kwargs)
        except (
            RedisConnectionError,
            RedisTimeoutError,
            ClusterDownError,
            SlotNotCoveredError,
            TryAgainError,
            OSError,
        ) as exc:
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


def _reward(text: bytes) -> Reward:
    """A reward as stored: ``1`` / ``0`` the click bit, any other text a graded reward."""
    return text == b"1" if text in (b"0", b"1") else float(text)


def _claim(decision_id: str, fields: list[bytes]) -> Claim:
    """A claim as the scripts return it: model, outcome, position ('' if none), at, deferred and
    activated ('1' or '')."""
    model, outcome, position, at = (v.decode() for v in fields[:4])
    return Claim(
        decision_id,
        model,
        outcome,  # type: ignore[arg-type]
        int(position) if position else None,
        float(at),
        fields[4] == b"1",
        fields[5] == b"1",
    )


def _event(position: int, fields: Mapping[bytes, bytes], x: bytes | None = None) -> Event:
    """Decode one stream entry (see ``_CLAIM_AND_APPEND`` and :meth:`RedisStore.append`); ``x``: the
    features of a learn event that names its decision-log entry (``lg``) instead of holding them."""
    kind = fields[b"kind"].decode()
    at = float(fields[b"at"])
    if kind == "learn":
        return Event(
            position=position,
            kind="learn",
            at=at,
            decision_id=fields[b"decision_id"].decode(),
            x=decode_x(fields[b"x"] if x is None else x),
            decision=decode_decision(fields[b"decision"]),
            reward=_reward(fields[b"reward"]),
            outcome=fields[b"outcome"].decode(),  # type: ignore[arg-type]
        )
    return Event(position=position, kind=kind, at=at, state=fields.get(b"state"))  # type: ignore[arg-type]


Entries = list[tuple[bytes, Mapping[bytes, bytes]]]
#: Decision-log entries read per named entry of a batch (the range between the first and the last
#: entry a batch names also holds decisions without feedback yet); those beyond are read one by one.
_CONTEXT_SPAN = 4


def _entry_order(eid: bytes) -> tuple[int, int]:
    """A stream entry id ``ms-seq`` as numbers, in the stream's order."""
    ms, _, seq = eid.partition(b"-")
    return int(ms), int(seq)


def _cluster_url(url: str) -> str | None:
    """The plain URL of a ``redis+cluster://`` / ``rediss+cluster://`` URL; None for any other."""
    for scheme in ("redis", "rediss"):
        if url.startswith(f"{scheme}+cluster://"):
            return scheme + url[len(scheme) + len("+cluster") :]
    return None


class _Connection(aioredis.Connection):
    """redis-py's TCP connection, its writes timed by :func:`asyncio.timeout`, not
    :func:`asyncio.wait_for`, which on Python 3.11 runs every command's write in a task of its own
    (an extra round of the event loop per command, its largest cost per Redis call after the
    socket's; issue 52). Same timeout, same error: the connection is dropped and redis-py's
    ``TimeoutError`` raised. A ``rediss://`` or ``unix://`` URL names its own class (redis-py's
    ``parse_url`` wins), which keeps ``wait_for``.
    """

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        timeout = self.socket_timeout
        if not timeout:
            await super().send_packed_command(command, check_health)
            return
        self.socket_timeout = None  # the write without wait_for; one command at a time per connection
        try:
            async with asyncio.timeout(timeout):
                await super().send_packed_command(command, check_health)
        except TimeoutError:
            await self.disconnect(nowait=True)
            raise RedisTimeoutError("Timeout writing to socket") from None
        finally:
            self.socket_timeout = timeout


class RedisStore(Store):
    """:class:`~service.store.base.Store` on one Redis server or a Redis Cluster (module docstring).

    Parameters
    ----------
    url : str
        ``redis://host:port/db`` (or ``rediss://``, ``unix://``), as for ``redis.asyncio.from_url``;
        ``redis+cluster://host:port`` (or ``rediss+cluster://``) for a Redis Cluster, any node.
    claim_ttl : float
        Seconds a claim is remembered (duplicates within it get 409).
    prefix : str
        Prefix of every key, so several deployments (or tests) can share one Redis (no braces: the
        hash tags are the model names).
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
        if "{" in prefix or "}" in prefix:
            raise ValueError(f"key prefix {prefix!r}: no braces (the model names are the hash tags)")
        self.url = url
        self.prefix = prefix
        self.grace = grace
        self.socket_timeout = socket_timeout
        plain = _cluster_url(url)
        self.cluster = plain is not None
        # Fail fast when Redis is down (one quick retry on a fresh connection covers a restarted server);
        # the caller answers 503 and the client retries, instead of requests hanging in backoff.
        options: dict[str, Any] = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": socket_timeout,
            "retry": Retry(ExponentialBackoff(cap=0.05, base=0.01), 1),
        }
        self.redis: aioredis.Redis | RedisCluster = (
            RedisCluster.from_url(plain, **options)
            if plain is not None
            else aioredis.from_url(url, connection_class=_Connection, **options)
        )
        self._notify = "1" if self.cluster else "0"  # SPUBLISH on appends: a cluster's replicas need it
        self._registry = f"{prefix}{{_registry}}:models"
        self._registry_events = f"{prefix}{{_registry}}:events"
        self._registry_channel = f"{prefix}{{_registry}}:notify"
        self._placement = f"{prefix}{{_registry}}:placement"
        self._registry_cursor: str | None = None  # last registry event seen by tail()
        self._tags: dict[str, str] = {}  # model -> slot tag of its decision ids
        # Cluster: the shard channels subscribed to, and the logs to read in the next tail round.
        self._pubsub: Any = None
        self._watched: dict[bytes, str] = {}  # channel -> model
        self._dirty: set[str] = set()
        register = self.redis.register_script
        self._claim = register(_CLAIM_AND_APPEND)
        self._activate = register(_ACTIVATE)
        self._expire = register(_EXPIRE_DUE)
        self._put_decision = register(_PUT_DECISION)
        self._put_page = register(_PUT_PAGE)
        self._append = register(_APPEND)
        self._reset_keys = register(_RESET_MODEL_KEYS)
        self._registry_op = register(_REGISTRY)
        self._counts = register(_COUNTS)
        self._put_checkpoint = register(_PUT_CHECKPOINT)
        self._lease = register(_LEASE)
        self._trim_decisions = register(_TRIM_DECISION_LOG)
        self._add_activity = register(_ADD_ACTIVITY)
        self._read_activity = register(_READ_ACTIVITY)

    def key(self, name: str, part: str) -> str:
        """The key of ``part`` (``meta``, ``log``, ``due``, ``cp``, ...) of model ``name``."""
        return f"{self.prefix}{{{name}}}:{part}"

    def _keys(self, name: str, *parts: str) -> list[str]:
        return [self.key(name, part) for part in parts]

    def _channel(self, name: str) -> str:
        return self.key(name, "notify")

    def _decision_key(self, decision_id: str, kind: Literal["r", "d", "c"] = "r") -> str:
        """The key of a decision id (``r``: its record, then its claim), or its record (``d``) or
        claim (``c``) key of the layout before issue 40 (see ``dk`` in the scripts)."""
        routed = _ROUTED.match(decision_id)
        if routed is None:  # an id of the old layout (or none of ours: its key holds nothing)
            return f"{self.prefix}{kind}:{decision_id}"
        return f"{self.prefix}{{{routed[2]}}}:{kind}:{decision_id}"

    def route(self, model: str, decision_id: str) -> str:
        tag = self._tags.get(model)
        if tag is None:
            tag = self._tags[model] = slot_tag(key_slot(model))
        return f"{decision_id}.{tag}"

    # -- models -----------------------------------------------------------------------------

    @_available
    async def create_model(self, name: str, config: Mapping[str, Any]) -> None:
        if "{" in name or "}" in name:
            raise ValueError(f"model name {name!r}: no braces")
        doc = json.dumps(dict(config), sort_keys=True)
        # The name is taken first (the registry), then the model's keys start fresh and say it exists,
        # then the replicas are told (the registry's stream): a replica that loads the model on that
        # news finds it complete.
        if not await self.redis.hsetnx(self._registry, name, doc):
            raise ModelExistsError(f"model {name!r} already exists")
        await self._reset_keys(keys=self._keys(name, *_PARTS), args=[self.prefix, name, 1000, "1"])
        fields = {"op": "create", "name": name}
        await self.redis.xadd(self._registry_events, fields, maxlen=_REGISTRY_EVENTS, approximate=True)  # type: ignore[arg-type]
        if self.cluster:
            await self.redis.spublish(self._registry_channel, name)

    @_available
    async def get_model(self, name: str) -> dict[str, Any]:
        doc = await self.redis.hget(self._registry, name)
        if doc is None:
            raise UnknownModelError(f"unknown model {name!r}")
        return json.loads(doc)

    @_available
    async def list_models(self) -> dict[str, dict[str, Any]]:
        docs = await self.redis.hgetall(self._registry)
        return {name.decode(): json.loads(doc) for name, doc in sorted(docs.items())}

    @_available
    async def delete_model(self, name: str) -> None:
        # The model's keys first (from then on its decisions are refused), the name last: a delete
        # cut short is finished by the next one.
        if not await self.redis.hexists(self._registry, name):
            raise UnknownModelError(f"unknown model {name!r}")
        await self._reset_keys(keys=self._keys(name, *_PARTS), args=[self.prefix, name, 1000, "0"])
        await self.redis.hdel(self._placement, name)  # a model of that name created later starts afresh
        keys = [self._registry, self._registry_events]
        if not await self._registry_op(keys=keys, args=["delete", name, "", _REGISTRY_EVENTS]):
            raise UnknownModelError(f"unknown model {name!r}")
        if self.cluster:
            await self.redis.spublish(self._registry_channel, name)

    @_available
    async def placements(self) -> dict[str, dict[str, Any]]:
        docs = await self.redis.hgetall(self._placement)
        return {name.decode(): json.loads(doc) for name, doc in docs.items()}

    @_available
    async def set_placement(self, model: str, override: Mapping[str, Any] | None) -> None:
        # The override first, then the news on the registry's stream: a replica that reads the news
        # finds the override (one cut short in between is read by the replicas' periodic resync).
        if override is None:
            await self.redis.hdel(self._placement, model)
        else:
            await self.redis.hset(self._placement, model, json.dumps(dict(override), sort_keys=True))
        fields = {"op": "place", "name": model}
        await self.redis.xadd(self._registry_events, fields, maxlen=_REGISTRY_EVENTS, approximate=True)  # type: ignore[arg-type]
        if self.cluster:
            await self.redis.spublish(self._registry_channel, model)

    @_available
    async def counts(self, name: str) -> Counts:
        out = await self._counts(keys=self._keys(name, "meta", "due"))
        if not int(out[0]):
            raise UnknownModelError(f"unknown model {name!r}")
        d, c, n, e, pending, graded = (int(v) for v in out[1:7])
        return Counts(d, c, n, e, pending, graded, float(out[7]), *(int(v) for v in out[8:11]))

    # -- decisions and feedback -------------------------------------------------------------

    @_available
    async def put_decision(self, record: DecisionRecord) -> None:
        keys = [
            self.key(record.model, "meta"),
            self._decision_key(record.decision_id),
            *self._keys(record.model, "due", "dlog"),
        ]
        self._put_status(record, await self._put_decision(keys=keys, args=self._put_args(record)))

    @staticmethod
    def _put_status(record: DecisionRecord, status: bytes) -> None:
        if status == b"unknown_model":
            raise UnknownModelError(f"unknown model {record.model!r}")
        if status == b"not_new":
            raise DecisionExistsError(record.decision_id)

    def _put_args(self, record: DecisionRecord) -> list[Any]:
        """The decision script's arguments for ``record``."""
        ttl_ms = int(1000 * (max(record.expires_at - record.created_at, 0.0) + self.grace))
        i = record.decision_id
        x, decision = encode_x(record.x), encode_decision(record.decision)
        created, expires = _f(record.created_at), _f(record.expires_at)
        # The record's text (``load`` in the scripts) but its decision-log entry id, which the script
        # puts between the two parts: '-' for an unlogged decision, whose record holds the features.
        head = f"R {record.model} {record.model_version} {created} {expires} "
        tail = f" {'1' if record.deferred else '-'} - - - - {len(decision)}\n".encode() + decision
        args: list[Any] = [i, ttl_ms, head, tail if record.logged else tail + x, expires]
        args.append("1" if record.deferred else "0")
        if record.logged:
            probs = np.asarray(record.decision["probs"], dtype="<f8").tobytes()
            args += [_ms(record.created_at), "id", i, "v", record.model_version, "t", created, "x", x]
            args += ["p", probs, "l", int(record.decision["label"])]
            mask = eligible_of(record.decision)
            if mask is not None and mask.size:  # the eligible labels, one byte each (only when restricted)
                args += ["e", mask.astype(np.uint8).tobytes()]
            if record.deferred:
                args += ["df", "1"]
            policy, baseline = rollout_of(record.decision)
            if policy is not None:  # logging or apprentice mode: the learner's own distribution, the baseline
                args += ["q", policy.astype("<f8").tobytes(), "b", baseline]
            slot = slot_of(record.decision)
            if slot is not None:  # a slot of a page (issue 53): its index, for the page's export
                args += ["ps", slot]
            catalog = catalog_of(record.decision)
            if catalog is not None:  # a catalog decision (issue 54): its selection, for a rebuild
                args += ["cm", json.dumps(catalog, separators=(",", ":"))]
        return args

    @_available
    async def put_page(self, records: Sequence[DecisionRecord]) -> None:
        # One script for every slot (_PUT_PAGE): refused whole when any slot's key is taken (a record
        # or a claim), and a failure (a lost connection, a timeout) leaves the whole page or none of it.
        first, *rest = records
        keys = [
            self.key(first.model, "meta"),
            self._decision_key(first.decision_id),
            *self._keys(first.model, "due", "dlog"),
            *(self._decision_key(r.decision_id) for r in rest),
        ]
        args: list[Any] = []
        for r in records:
            one = self._put_args(r)
            args += [len(one), *one]
        self._put_status(first, await self._put_page(keys=keys, args=args))

    @_available
    async def get_decision(self, decision_id: str) -> DecisionRecord | None:
        text = await self.redis.get(self._decision_key(decision_id))
        if text is None:  # none, or a record of the layout before issue 40
            return await self._get_old_decision(decision_id)
        head, _, rest = text.partition(b"\n")
        f = [v.decode() for v in head.split(b" ")]
        if f[0] != "R":  # a claim
            return None
        model, lg, n = f[1], None if f[5] == "-" else f[5], int(f[11])
        x = rest[n:]
        if not x:  # the features are kept once, in the decision log
            assert lg is not None
            entry = await self.redis.xrange(self.key(model, "dlog"), min=lg, max=lg)
            x = entry[0][1][b"x"]
        return DecisionRecord(
            decision_id=decision_id,
            model=model,
            x=decode_x(x),
            decision=decode_decision(rest[:n]),
            model_version=int(f[2]),
            created_at=float(f[3]),
            expires_at=float(f[4]),
            logged=lg is not None,
            deferred=f[6] == "1",
            activated_at=None if f[7] == "-" else float(f[7]),
        )

    async def _get_old_decision(self, decision_id: str) -> DecisionRecord | None:
        h = await self.redis.hgetall(self._decision_key(decision_id, "d"))
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
            logged=b"lg" in h,
            deferred=h.get(b"df") == b"1",
            activated_at=float(h[b"ac"]) if b"ac" in h else None,
        )

    def _claim_args(self, now: float) -> list[Any]:
        return [_f(now), _f(now + self.claim_ttl), max(int(1000 * self.claim_ttl), 1)]

    @_available
    async def claim_and_append(
        self, decision_id: str, reward: Reward, now: float, model: str | None = None
    ) -> ClaimOutcome:
        if self.cluster and _ROUTED.match(decision_id) is None:
            return ClaimOutcome(ClaimStatus.UNKNOWN)  # no slot tag: none of this cluster's ids
        keys = [self._decision_key(decision_id)]
        value = str(int(reward)) if isinstance(reward, bool) else _f(reward)
        args = [self.prefix, decision_id, value, *self._claim_args(now), self._notify, model or ""]
        out = await self._claim(keys=keys, args=args)
        status = ClaimStatus(out[0].decode())
        if status is ClaimStatus.UNKNOWN:
            return ClaimOutcome(status)
        return ClaimOutcome(status, _claim(decision_id, out[1:7]))

    @_available
    async def activate(self, decision_id: str, now: float, model: str | None = None) -> ActivateOutcome:
        if self.cluster and _ROUTED.match(decision_id) is None:
            return ActivateOutcome(ActivateStatus.UNKNOWN)  # no slot tag: none of this cluster's ids
        keys = [self._decision_key(decision_id)]
        now_s, forget_at, ttl_ms = self._claim_args(now)
        args = [self.prefix, decision_id, now_s, forget_at, ttl_ms, self._notify, model or ""]
        out = await self._activate(keys=keys, args=args)
        status, deferred = ActivateStatus(out[0].decode()), out[1] == b"1"
        if len(out) == 2:
            return ActivateOutcome(status, None, deferred)
        model, outcome, position, at, activated, reward = out[2:]
        claim = _claim(decision_id, [model, outcome, position, at, out[1], activated])
        return ActivateOutcome(status, claim, deferred, _reward(reward) if reward else None)

    @_available
    async def expire(self, model: str, now: float, default_reward: Literal["no_click", "drop"]) -> Expiry:
        now_s, forget_at, ttl_ms = self._claim_args(now)
        appended = "1" if default_reward == "no_click" else "0"
        args = [self.prefix, model, now_s, forget_at, ttl_ms, appended, self._EXPIRE_BATCH, self._notify]
        claims: list[Claim] = []
        while True:
            out = await self._expire(keys=self._keys(model, "meta", "due"), args=args)
            if not isinstance(out, list):
                raise UnknownModelError(f"unknown model {model!r}")
            done, nxt = out
            for i in range(0, len(done), 3):
                pos, flags = done[i + 1].decode(), done[i + 2]
                claims.append(
                    Claim(
                        done[i].decode(),
                        model,
                        "expired",
                        int(pos) if pos else None,
                        now,
                        flags.startswith(b"1"),
                        flags == b"11",
                    )
                )
            if len(done) < 3 * self._EXPIRE_BATCH:
                return Expiry(claims, float(nxt) if nxt else math.inf)

    async def expire_due(
        self, model: str, now: float, default_reward: Literal["no_click", "drop"]
    ) -> list[Claim]:
        return (await self.expire(model, now, default_reward)).claims

    # -- event log and checkpoints ------------------------------------------------------------

    @_available
    async def append(self, model: str, event: Event) -> int:
        if event.kind == "learn":
            raise ValueError("learn events are appended by claim_and_append / expire_due only")
        fields: list[Any] = ["kind", event.kind, "at", _f(event.at)]
        if event.state is not None:
            fields += ["state", event.state]
        keys = self._keys(model, "meta", "log")
        position = int(await self._append(keys=keys, args=[self.prefix, model, self._notify, *fields]))
        if position < 0:
            raise UnknownModelError(f"unknown model {model!r}")
        return position

    async def _exists_and(self, model: str, command: Callable[[Any], Any]) -> Any:
        """One round trip to the model's shard: whether it exists, and ``command(pipe)``'s answer."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hexists(self.key(model, "meta"), "model")
            command(pipe)
            exists, answer = await pipe.execute()
        if not exists:
            raise UnknownModelError(f"unknown model {model!r}")
        return answer

    @_available
    async def read_log(self, model: str, after: int, limit: int = 1000) -> list[Event]:
        log = self.key(model, "log")
        entries = await self._exists_and(model, lambda p: p.xrange(log, min=f"{after + 1}-0", count=limit))
        return (await self._events({model: entries}))[model]

    @_available
    async def log_position(self, model: str) -> int:
        exists, last = await self.redis.hmget(self.key(model, "meta"), ["model", "last"])
        if exists is None:
            raise UnknownModelError(f"unknown model {model!r}")
        return int(last or 0)

    @_available
    async def put_checkpoint(self, model: str, checkpoint: Checkpoint) -> None:
        keys = self._keys(model, "meta", "cp")
        if int(await self._put_checkpoint(keys=keys, args=[checkpoint.position, checkpoint.state])) < 0:
            raise UnknownModelError(f"unknown model {model!r}")

    @_available
    async def get_checkpoint(self, model: str) -> Checkpoint | None:
        cp = self.key(model, "cp")
        position, state = await self._exists_and(model, lambda p: p.hmget(cp, ["position", "state"]))
        if position is None or state is None:
            return None
        return Checkpoint(int(position), state)

    @_available
    async def trim_log(self, model: str, upto: int) -> None:
        log = self.key(model, "log")
        await self._exists_and(model, lambda p: p.xtrim(log, minid=f"{upto + 1}-0", approximate=False))

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
        dlog = self.key(model, "dlog")
        entries = await self._exists_and(model, lambda p: p.xrange(dlog, min=start, max=end, count=limit))
        if not entries:
            return [], None
        ids = [fields[b"id"] for _, fields in entries]
        fields = [*ids, *(i + b":a" for i in ids)]
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(self.key(model, "meta"), fields)
            pipe.hmget(self.key(model, "dout"), fields)  # kept there before they moved into meta
            now, before = await pipe.execute()
        found = [a if a is not None else b for a, b in zip(now, before, strict=True)]
        outcomes, activations = found[: len(ids)], found[len(ids) :]
        page = []
        for (_, f), outcome, activated_at in zip(entries, outcomes, activations, strict=True):
            t = float(f[b"t"])
            if not since <= t < until:
                continue
            done: list[Any] = [None, None, None]
            if outcome is not None:
                what, reward, at = outcome.decode().split(" ")
                done = [what, None if reward == "-" else _reward(reward.encode()), float(at)]
            page.append(
                LoggedDecision(
                    f[b"id"].decode(),
                    int(f[b"v"]),
                    t,
                    decode_x(f[b"x"]),
                    np.frombuffer(f[b"p"], dtype="<f8").astype(np.float64),
                    int(f[b"l"]),
                    *done,
                    None if b"e" not in f else np.frombuffer(f[b"e"], dtype=np.uint8).astype(bool),
                    None if b"q" not in f else np.frombuffer(f[b"q"], dtype="<f8").astype(np.float64),
                    None if b"b" not in f else int(f[b"b"]),
                    f.get(b"df") == b"1",
                    None if activated_at is None else float(activated_at),
                    None if b"ps" not in f else int(f[b"ps"]),
                    None if b"cm" not in f else json.loads(f[b"cm"]),
                )
            )
        return page, (entries[-1][0].decode() if len(entries) == limit else None)

    @_available
    async def trim_decision_log(self, model: str, older_than: float | None, keep: int | None) -> int:
        cut = "" if older_than is None else _ms(older_than)
        kept = "" if keep is None else keep
        keys = self._keys(model, "meta", "dlog", "dout", "log")
        # A claim made before this is forgotten by now (the event it names may still be in the log).
        forgotten = _f(time.time() - self.claim_ttl)
        args = [cut, kept, self._TRIM_BATCH, self.prefix, forgotten]
        trimmed = 0
        while True:  # each script forgets at most a batch (a long script would block Redis)
            n = int(await self._trim_decisions(keys=keys, args=args))
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
        args: list[Any] = [ACTIVITY_MINUTES]
        for minute, a in minutes.items():
            args += [minute, a.decisions, a.clicks, a.no_clicks, a.expired, _f(a.exploration), a.graded]
            args.append(_f(a.graded_sum))
        if int(await self._add_activity(keys=self._keys(model, "meta", "act", "actz"), args=args)) < 0:
            raise UnknownModelError(f"unknown model {model!r}")

    @_available
    async def read_activity(self, model: str, since: int) -> dict[int, Activity]:
        out = await self._read_activity(keys=self._keys(model, "meta", "act", "actz"), args=[since])
        if not isinstance(out, list):
            raise UnknownModelError(f"unknown model {model!r}")
        return {
            int(out[i]): Activity(
                *(int(v) for v in out[i + 1 : i + 5]), float(out[i + 5]), int(out[i + 6]), float(out[i + 7])
            )
            for i in range(0, len(out), 8)
        }

    # Heartbeat keys are of no model (different slots in a cluster): pipelines without MULTI, which
    # the cluster client splits by shard.

    @_available
    async def heartbeat(self, beat: Heartbeat, ttl: float) -> None:
        doc = json.dumps({**beat.to_json(), "ttl": ttl})
        async with self.redis.pipeline(transaction=False) as pipe:
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
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(f"{self.prefix}replica:{replica}")
            pipe.srem(f"{self.prefix}replicas", replica)
            await pipe.execute()

    async def _events(self, found: Mapping[str, Entries]) -> dict[str, list[Event]]:
        """The events of the log entries ``found`` per model. A learn event of a logged decision names
        its decision-log entry (``lg``) instead of holding the features (the one copy, module
        docstring): per model one range read over the entries its events name, the few outside it one
        by one, every model's in one pipeline. A model's events stop before one whose entry is gone:
        the log was trimmed past that event meanwhile (a checkpoint holds it), which the caller sees
        at its next read; an entry gone while its event is still in the log is an error."""
        wanted = {}
        for name, entries in found.items():
            named = sorted({f[b"lg"] for _, f in entries if b"lg" in f}, key=_entry_order)
            if named:
                wanted[name] = named
        names = {name: set(named) for name, named in wanted.items()}
        contexts: dict[str, dict[bytes, bytes]] = {name: {} for name in wanted}
        for one_by_one in (False, True):
            asked = []
            async with self.redis.pipeline(transaction=False) as pipe:
                for name, named in wanted.items():
                    dlog = self.key(name, "dlog")
                    if not one_by_one:
                        pipe.xrange(dlog, min=named[0], max=named[-1], count=_CONTEXT_SPAN * len(named))
                        asked.append(name)
                        continue
                    for lg in named:
                        if lg not in contexts[name]:
                            pipe.xrange(dlog, min=lg, max=lg)
                            asked.append(name)
                replies = await pipe.execute() if asked else []
            for name, reply in zip(asked, replies, strict=True):
                have = contexts[name]  # only the named entries (the range holds others too)
                have.update((eid, f[b"x"]) for eid, f in reply if eid in names[name])
            if all(len(contexts[name]) == len(named) for name, named in names.items()):
                break
        events: dict[str, list[Event]] = {}
        for name, entries in found.items():
            got, have = [], contexts.get(name, {})
            for eid, fields in entries:
                position, lg = int(eid.split(b"-")[0]), fields.get(b"lg")
                if lg is not None and lg not in have:
                    if not got and await self._still_logged(name, position):
                        raise RuntimeError(f"the features of event {position} of {name!r} ({lg!r}) are gone")
                    break
                got.append(_event(position, fields, None if lg is None else have[lg]))
            events[name] = got
        return events

    async def _still_logged(self, model: str, position: int) -> bool:
        """Whether ``model``'s event log still holds the event at ``position`` (not trimmed)."""
        first = await self.redis.xrange(self.key(model, "log"), count=1)
        return bool(first) and int(first[0][0].split(b"-")[0]) <= position

    # -- replication ----------------------------------------------------------------------------

    @_available
    async def tail(self, positions: Mapping[str, int], timeout: float) -> Tail:
        """Every log's new events in one blocking read (see the module docstring, "Following the
        logs"); ``models_changed`` when the registry's stream has news (always on the first call)."""
        if self._registry_cursor is None:  # first call: from now on, after a full sync by the caller
            last = await self.redis.xrevrange(self._registry_events, count=1)
            self._registry_cursor = last[0][0].decode() if last else "0-0"
            return Tail(models_changed=True)
        if self.cluster:
            try:
                return await self._tail_notified(positions, timeout)
            except Exception:
                await self._unwatch()  # resubscribe and read every log on the next call
                raise
        block_ms = max(int(1000 * min(timeout, self.socket_timeout / 2)), 1)
        streams = {self._registry_events: self._registry_cursor}
        logs = {self.key(name, "log"): name for name in positions}
        streams.update({key: f"{positions[name]}-0" for key, name in logs.items()})
        found = await self.redis.xread(streams, count=_TAIL_BATCH, block=block_ms)  # type: ignore[arg-type]
        read: dict[str, Entries] = {}
        changed = False
        for key, entries in found or []:
            name = logs.get(key.decode())
            if name is None:  # the registry: models created or deleted
                self._registry_cursor = entries[-1][0].decode()
                changed = True
            elif entries:
                read[name] = entries
        events = await self._events(read)
        more = any(len(entries) == _TAIL_BATCH for entries in read.values())
        return Tail({name: e for name, e in events.items() if e}, changed, more)

    async def _tail_notified(self, positions: Mapping[str, int], timeout: float) -> Tail:
        """:meth:`tail` on a cluster: shard channels say which logs grew; those are read."""
        changed = False
        if self._pubsub is None:
            self._pubsub = self.redis.pubsub()
            await self._pubsub.ssubscribe(self._registry_channel)
            self._watched, changed = {}, True
        want = {self._channel(name).encode(): name for name in positions}
        new = [c for c in want if c not in self._watched]
        gone = [c for c in self._watched if c not in want]
        if new:
            await self._pubsub.ssubscribe(*new)
        if gone:
            await self._pubsub.sunsubscribe(*gone)
        self._watched = want
        # A log just subscribed to is read now and once more next round: an append can land between
        # this read and the moment its shard processes the subscription.
        dirty, self._dirty = self._dirty | {want[c] for c in new}, {want[c] for c in new}
        deadline = time.monotonic() + timeout
        while True:
            message = await self._pubsub.get_sharded_message(ignore_subscribe_messages=True, timeout=0)
            if message is not None:
                channel = message["channel"]
                if channel in want:
                    dirty.add(want[channel])
                elif channel == self._registry_channel.encode():
                    changed = True
                continue
            if dirty or changed or time.monotonic() >= deadline:
                break
            # Polls the subscriptions' sockets in this process, no command to Redis.
            await asyncio.sleep(0.01)
        read: dict[str, Entries] = {}
        names = [name for name in dirty if name in positions]
        if names:
            async with self.redis.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.xrange(self.key(name, "log"), min=f"{positions[name] + 1}-0", count=_TAIL_BATCH)
                found = await pipe.execute()
            for name, entries in zip(names, found, strict=True):
                if entries:
                    read[name] = entries
                    if len(entries) == _TAIL_BATCH:
                        self._dirty.add(name)  # more to read: the next round does not wait
        events = await self._events(read)
        return Tail({name: e for name, e in events.items() if e}, changed, bool(self._dirty))

    async def _unwatch(self) -> None:
        if self._pubsub is not None:
            pubsub, self._pubsub = self._pubsub, None
            self._watched, self._dirty = {}, set()
            with contextlib.suppress(Exception):  # a broken connection: nothing more to release
                await pubsub.aclose()

    @_available
    async def lease(self, name: str, holder: str, ttl: float) -> bool:
        key = f"{self.prefix}lease:{name}"
        return bool(await self._lease(keys=[key], args=[holder, max(int(1000 * ttl), 1)]))

    # -- lifecycle ------------------------------------------------------------------------------

    @_available
    async def prepare(self) -> None:
        """Migrate the key layout from before issue 25, if this Redis holds one (module docstring).

        One replica migrates, under a lock (60 s, renewed by each model's step); the others wait
        until the old registry is gone. A migration cut short is resumed by the next start.
        """
        old = f"{self.prefix}models"
        if self.cluster or not await self.redis.exists(old):
            return
        lock, me = f"{self.prefix}migrating", uuid.uuid4().hex
        migrate_model = self.redis.register_script(_MIGRATE_MODEL)
        deadline = time.monotonic() + 600
        while await self.redis.exists(old):
            if not await self.redis.set(lock, me, nx=True, px=60_000):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the migration of the Redis keys ({lock}) never finished")
                await asyncio.sleep(0.2)
                continue
            try:
                for name in await self.redis.hkeys(old):
                    await migrate_model(args=[self.prefix, name])
                    await self.redis.pexpire(lock, 60_000)
                await self.redis.register_script(_MIGRATE_REGISTRY)(
                    args=[old, self._registry, self._registry_events]
                )
            finally:
                await self.redis.delete(lock)

    @_available
    async def ping(self) -> None:
        await self.redis.ping()

    async def close(self) -> None:
        await self._unwatch()
        await self.redis.aclose()
