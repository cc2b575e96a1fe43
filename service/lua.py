"""The queue's Lua scripts: every job transition is one script, so it is atomic.

Kept apart from :mod:`service.queue` (which says why the transitions are safe) so that the
Python side reads as the protocol and this module as its implementation. Job statuses are
never spelled here: :data:`STATUS_LUA` renders :class:`service.jobs.JobStatus` into Lua
constants (``QUEUED``, ..., the list ``STATUSES`` and the set ``UNFINISHED``) that every
script starts with.

The keys (every one starts with the prefix ``{p}``, ``rbfkm`` by default):

- ``{p}:job:{id}`` — a hash per job: status, params (JSON), progress (JSON), error, ISO 8601
  UTC timestamps, ``attempts``, ``cancel`` flag, result metadata (JSON) and ``entry``, the id
  of the one stream entry that currently stands for the job. It is the source of truth.
- ``{p}:jobs`` — the stream, consumer group ``workers``. An entry carries only the job id;
  datasets and results never travel through the queue.
- ``{p}:jobs:dead`` — the dead-letter stream (job id, error, attempts, time), capped at
  about 100 000 entries.
- ``{p}:jobs:index`` and ``{p}:jobs:status:{status}`` — sorted sets of job ids scored by
  creation time, for newest-first paging, status filters and counts without scans;
  ``{p}:jobs:expiry`` — when finished jobs' hashes expire, so the indexes are pruned.
- ``{p}:tenant:{t}:jobs:index``, ``{p}:tenant:{t}:jobs:status:{status}`` and
  ``{p}:tenant:{t}:jobs:dead`` — the same indexes and dead letters of one tenant's jobs (the
  job hash's ``tenant`` field); ``{p}:jobs:owner`` maps a job id to its tenant until the job
  is pruned, so an expired job leaves its tenant's indexes too.
- ``{p}:webhooks:due`` — jobs whose webhook is to be sent, scored by when (added when a job
  with a ``callback_url`` ends; :mod:`service.webhooks` sends them).
- ``{p}:worker:{consumer}`` — a worker's heartbeat key (with a TTL), ``{p}:workers`` the set
  of names seen, for readiness.

Conventions of the job scripts (:data:`JOB_SCRIPTS`): ``KEYS[1]`` the job hash, ``ARGV[1]``
the key prefix, ``ARGV[2]`` the consumer group, ``ARGV[3]`` the job id; each script's own
arguments follow from ``ARGV[4]``, as its comment says. The scripts build the index key
names from the prefix, so they need one Redis (or a primary), not a cluster.
"""

from __future__ import annotations

from service.jobs import STATUSES, UNFINISHED


def _render_statuses() -> str:
    """Lua constants for the job statuses: one local per status, the list, the open set."""
    lines = [f"local {status.name} = '{status.value}'" for status in STATUSES]
    listed = ", ".join(status.name for status in STATUSES)
    open_set = ", ".join(f"[{status.name}] = true" for status in STATUSES if status in UNFINISHED)
    lines.append(f"local STATUSES = {{{listed}}}")
    lines.append(f"local UNFINISHED = {{{open_set}}}")
    return "\n".join(lines) + "\n"


#: The statuses as Lua constants; every script starts with them.
STATUS_LUA = _render_statuses()

# Shared Lua helpers. ARGV[1] prefix, ARGV[2] group, ARGV[3] job id; KEYS[1] the job hash.
_PRELUDE = """
local prefix = ARGV[1]
local group = ARGV[2]
local id = ARGV[3]
local key = KEYS[1]
local stream = prefix .. ':jobs'
local dead = prefix .. ':jobs:dead'

local function status_key(s) return prefix .. ':jobs:status:' .. s end
local function tenant_key(t, suffix) return prefix .. ':tenant:' .. t .. ':jobs:' .. suffix end

local function move(new)
  local h = redis.call('HMGET', key, 'status', 'created_ts', 'tenant')
  local old, score, t = h[1], h[2], h[3]
  if old then
    redis.call('ZREM', status_key(old), id)
    if t then redis.call('ZREM', tenant_key(t, 'status:' .. old), id) end
  end
  redis.call('ZADD', status_key(new), score, id)
  if t then redis.call('ZADD', tenant_key(t, 'status:' .. new), score, id) end
  redis.call('HSET', key, 'status', new)
end

local function finish(new, now_iso, now_ts, ttl)
  move(new)
  redis.call('HSET', key, 'finished_at', now_iso)
  redis.call('HDEL', key, 'consumer')
  redis.call('EXPIRE', key, ttl)
  redis.call('ZADD', prefix .. ':jobs:expiry', tonumber(now_ts) + tonumber(ttl), id)
  -- A job with a callback: its webhook is due now (service.webhooks sends it). Here, in
  -- the one transition that ends the job, so it is queued once, whoever ended it.
  local params = cjson.decode(redis.call('HGET', key, 'params') or '{}')
  if type(params['callback_url']) == 'string' then
    redis.call('ZADD', prefix .. ':webhooks:due', 'NX', now_ts, id)
  end
end

local function ack(entry)
  redis.call('XACK', stream, group, entry)
  redis.call('XDEL', stream, entry)
end

local function dead_letter(err, now_iso)
  local h = redis.call('HMGET', key, 'attempts', 'tenant')
  local t = h[2] or ''
  redis.call('XADD', dead, 'MAXLEN', '~', 100000, '*', 'job', id, 'error', err,
    'attempts', h[1], 'at', now_iso, 'tenant', t)
  if h[2] then
    redis.call('XADD', tenant_key(t, 'dead'), 'MAXLEN', '~', 10000, '*', 'job', id,
      'error', err, 'attempts', h[1], 'at', now_iso, 'tenant', t)
  end
end

local function requeue(entry)
  move(QUEUED)
  ack(entry)
  redis.call('HSET', key, 'entry', redis.call('XADD', stream, '*', 'job', id))
  redis.call('HDEL', key, 'consumer')
end

local function owns(entry, consumer)
  local p = redis.call('XPENDING', stream, group, entry, entry, 1, consumer)
  return #p > 0
end

local function fenced(attempt)
  local v = redis.call('HMGET', key, 'status', 'attempts')
  return v[1] == RUNNING and v[2] == attempt
end

-- Before a worker's last write of an attempt: the job deleted (acknowledge the entry),
-- fenced out (its status, unchanged) or a cancel pending (canceled now); nil: go ahead.
local function preempted(entry, attempt, now_iso, now_ts, ttl)
  if redis.call('EXISTS', key) == 0 then ack(entry) return 'deleted' end
  if not fenced(attempt) then return redis.call('HGET', key, 'status') end
  if redis.call('HGET', key, 'cancel') == '1' then
    finish(CANCELED, now_iso, now_ts, ttl)
    ack(entry)
    return CANCELED
  end
  return nil
end
"""

# ARGV[4..] dataset_id, params, now_iso, now_ts, progress, tenant, max_active (0: no cap).
# Returns 1 (queued), 0 (the id exists) or -1 (the tenant has max_active unfinished jobs).
_SUBMIT = """
if redis.call('EXISTS', key) == 1 then return 0 end
local t = ARGV[9]
local cap = tonumber(ARGV[10])
if cap > 0 then
  local active = 0
  for s, _ in pairs(UNFINISHED) do
    active = active + redis.call('ZCARD', tenant_key(t, 'status:' .. s))
  end
  if active >= cap then return -1 end
end
local entry = redis.call('XADD', stream, '*', 'job', id)
redis.call('HSET', key, 'id', id, 'dataset_id', ARGV[4], 'params', ARGV[5], 'status', QUEUED,
  'progress', ARGV[8], 'created_at', ARGV[6], 'created_ts', ARGV[7], 'attempts', 0,
  'cancel', '0', 'entry', entry, 'tenant', t)
redis.call('ZADD', prefix .. ':jobs:index', ARGV[7], id)
redis.call('ZADD', status_key(QUEUED), ARGV[7], id)
redis.call('ZADD', tenant_key(t, 'index'), ARGV[7], id)
redis.call('ZADD', tenant_key(t, 'status:' .. QUEUED), ARGV[7], id)
redis.call('HSET', prefix .. ':jobs:owner', id, t)
return 1
"""

# Checks shared by claim and reap, for an entry this consumer holds. Returns a reply when
# there is nothing to run (acknowledging the entry where it is done with), nil otherwise.
# ARGV[4..] entry, consumer, max_attempts, now_iso, now_ts, ttl
_TRIAGE = """
local entry = ARGV[4]
local function triage()
  if not owns(entry, ARGV[5]) then return {'lost'} end
  if redis.call('EXISTS', key) == 0 then ack(entry) return {'skip', 'missing'} end
  local h = redis.call('HMGET', key, 'status', 'entry', 'cancel', 'attempts', 'handbacks')
  if h[2] ~= entry then ack(entry) return {'skip', 'superseded'} end
  if not UNFINISHED[h[1]] then ack(entry) return {'skip', h[1]} end
  if h[3] == '1' then
    finish(CANCELED, ARGV[7], ARGV[8], ARGV[9])
    ack(entry)
    return {'skip', CANCELED}
  end
  local used = tonumber(h[4]) - tonumber(h[5] or '0')
  if used >= tonumber(ARGV[6]) then
    local err = 'gave up after ' .. used .. ' attempts: the worker running the job ' ..
      'died or lost its lease each time'
    redis.call('HSET', key, 'error', err)
    finish(FAILED, ARGV[7], ARGV[8], ARGV[9])
    dead_letter(err, ARGV[7])
    ack(entry)
    return {'dead', used}
  end
  return nil
end
"""

# ARGV[4..] as _TRIAGE, then progress
_CLAIM = (
    _TRIAGE
    + """
local skip = triage()
if skip then return skip end
local n = redis.call('HINCRBY', key, 'attempts', 1)
move(RUNNING)
redis.call('HSET', key, 'started_at', ARGV[7], 'consumer', ARGV[5], 'progress', ARGV[10])
local h = redis.call('HMGET', key, 'dataset_id', 'params')
return {'run', n, h[1], h[2]}
"""
)

# ARGV[4..] as _TRIAGE: a lapsed entry goes back to the queue (or to the dead letters).
_REAP = (
    _TRIAGE
    + """
local skip = triage()
if skip then return skip end
requeue(entry)
return {'requeued'}
"""
)

# ARGV[4..] entry, consumer, attempt
_RENEW = """
if not fenced(ARGV[6]) then return 0 end
if not owns(ARGV[4], ARGV[5]) then return 0 end
redis.call('XCLAIM', stream, group, ARGV[5], 0, ARGV[4], 'JUSTID')
if redis.call('HGET', key, 'cancel') == '1' then return 0 end
return 1
"""

# ARGV[4..] attempt, progress
_PROGRESS = """
if not fenced(ARGV[4]) then return 0 end
if redis.call('HGET', key, 'cancel') == '1' then return 0 end
redis.call('HSET', key, 'progress', ARGV[5])
return 1
"""

# ARGV[4..] entry, attempt, result, now_iso, now_ts, ttl
_SUCCEED = """
if not fenced(ARGV[5]) then return 0 end
if redis.call('HGET', key, 'cancel') == '1' then return 0 end
local progress = cjson.decode(redis.call('HGET', key, 'progress') or '{}')
progress['fraction'] = 1.0
redis.call('HSET', key, 'result', ARGV[6], 'progress', cjson.encode(progress))
redis.call('HDEL', key, 'error')
finish(SUCCEEDED, ARGV[7], ARGV[8], ARGV[9])
ack(ARGV[4])
return 1
"""

# ARGV[4..] entry, attempt, error, retryable, max_attempts, now_iso, now_ts, ttl
_FAIL = """
local stop = preempted(ARGV[4], ARGV[5], ARGV[9], ARGV[10], ARGV[11])
if stop then return stop end
redis.call('HSET', key, 'error', ARGV[6])
local n = tonumber(redis.call('HGET', key, 'attempts'))
n = n - tonumber(redis.call('HGET', key, 'handbacks') or '0')
if ARGV[7] == '1' and n < tonumber(ARGV[8]) then
  requeue(ARGV[4])
  return QUEUED
end
finish(FAILED, ARGV[9], ARGV[10], ARGV[11])
dead_letter(ARGV[6], ARGV[9])
ack(ARGV[4])
return FAILED
"""

# ARGV[4..] entry, attempt, now_iso, now_ts, ttl
_MARK_CANCELED = """
if redis.call('EXISTS', key) == 0 then ack(ARGV[4]) return 0 end
if not fenced(ARGV[5]) then return 0 end
finish(CANCELED, ARGV[6], ARGV[7], ARGV[8])
ack(ARGV[4])
return 1
"""

# ARGV[4..] entry, attempt, now_iso, now_ts, ttl
_RELEASE = """
local stop = preempted(ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8])
if stop then return stop end
redis.call('HINCRBY', key, 'handbacks', 1)
requeue(ARGV[4])
return QUEUED
"""

# ARGV[4..] now_iso, now_ts, ttl
_CANCEL = """
local st = redis.call('HGET', key, 'status')
if not st then return false end
if st == QUEUED then
  finish(CANCELED, ARGV[4], ARGV[5], ARGV[6])
elseif st == RUNNING then
  redis.call('HSET', key, 'cancel', '1')
end
return st
"""

_DELETE = """
if redis.call('EXISTS', key) == 0 then return 0 end
local t = redis.call('HGET', key, 'tenant')
redis.call('DEL', key)
redis.call('ZREM', prefix .. ':jobs:index', id)
redis.call('ZREM', prefix .. ':jobs:expiry', id)
redis.call('HDEL', prefix .. ':jobs:owner', id)
for _, s in ipairs(STATUSES) do
  redis.call('ZREM', status_key(s), id)
end
if t then
  redis.call('ZREM', tenant_key(t, 'index'), id)
  for _, s in ipairs(STATUSES) do
    redis.call('ZREM', tenant_key(t, 'status:' .. s), id)
  end
end
return 1
"""

# ARGV[1] prefix, ARGV[2] now_ts, ARGV[3] limit: drop expired jobs from the indexes.
_PRUNE = """
local prefix = ARGV[1]
local expiry = prefix .. ':jobs:expiry'
local ids = redis.call('ZRANGEBYSCORE', expiry, '-inf', ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local n = 0
local owners = prefix .. ':jobs:owner'
for _, id in ipairs(ids) do
  if redis.call('EXISTS', prefix .. ':job:' .. id) == 0 then
    redis.call('ZREM', prefix .. ':jobs:index', id)
    for _, s in ipairs(STATUSES) do
      redis.call('ZREM', prefix .. ':jobs:status:' .. s, id)
    end
    local t = redis.call('HGET', owners, id)
    if t then
      local tenant = prefix .. ':tenant:' .. t .. ':jobs:'
      redis.call('ZREM', tenant .. 'index', id)
      for _, s in ipairs(STATUSES) do
        redis.call('ZREM', tenant .. 'status:' .. s, id)
      end
      redis.call('HDEL', owners, id)
    end
    n = n + 1
  end
  redis.call('ZREM', expiry, id)
end
return n
"""

# ARGV[1] stream, ARGV[2] group, ARGV[3] consumer: forget a consumer that holds nothing.
_DROP_CONSUMER = """
local p = redis.call('XPENDING', ARGV[1], ARGV[2], '-', '+', 1, ARGV[3])
if #p > 0 then return 0 end
return redis.call('XGROUP', 'DELCONSUMER', ARGV[1], ARGV[2], ARGV[3])
"""


#: The job scripts by name, each the status constants, the shared helpers and its body.
JOB_SCRIPTS: dict[str, str] = {
    name: STATUS_LUA + _PRELUDE + body
    for name, body in {
        "submit": _SUBMIT,
        "claim": _CLAIM,
        "reap": _REAP,
        "renew": _RENEW,
        "progress": _PROGRESS,
        "succeed": _SUCCEED,
        "fail": _FAIL,
        "mark_canceled": _MARK_CANCELED,
        "release": _RELEASE,
        "cancel": _CANCEL,
        "delete": _DELETE,
    }.items()
}
#: Drops expired jobs from the indexes (ARGV[1] prefix, ARGV[2] now_ts, ARGV[3] limit).
PRUNE = STATUS_LUA + _PRUNE
#: Forgets a consumer that holds no entries (ARGV[1] stream, ARGV[2] group, ARGV[3] consumer).
DROP_CONSUMER = _DROP_CONSUMER
