-- lua/lib/limits.lua
-- Rate and concurrency limits: what a queue's limits are, admission of a claim, the
-- deferral of a task a limit refuses, the release of slots.
local fmt, hgetall_map =
  util.fmt, util.hgetall_map
local SCOPE, k =
  scope.SCOPE, scope.k
local emit =
  events.emit
local ack, add_entry =
  streams.ack, streams.add_entry
local dead_letter, finish_terminal, history_add =
  task.dead_letter, task.finish_terminal, task.history_add

--[[ The limits (docs/reference.md 5.7): LIM.of(queue) is the queue's limits (false: none),
read once per call (call.sub('limits')); LIM.gate(...) admits a claim or defers its task;
LIM.release(slots, tid) gives back the slots of an attempt that ended (the task hash's
limit_slots); LIM.end_lost(c, ms, tid) ends a running attempt nothing else can end any
more. What a call read or wrote of the limits' state is in call.sub('limit_state'). The
Functions that set, remove and list limits are lua/fn/limit.lua. ]]
local LIM = {}

--[[ Rate and concurrency limits (docs/reference.md 5.7). A limit's target is a queue
(field `*` of <p>:limits:<queue>) or a task type in it (field t:<type>); its value is the
JSON {rate, period_ms, burst, concurrency, per_key} <ns>_limit_set writes. Every state key
names its queue: <p>:limit:<queue>/<target>/<kind>[/<limit key>], with <target> the field
and <kind> rate (GCRA's theoretical arrival time, in microseconds, a string expiring when
it passes), run (the concurrency slots: a zset of task ids, scored by admission time),
due (the deferral horizon, microseconds, expiring) or keys (a per-key limit's keys, scored
by their last admission: what <ns>_limit_list counts). '/' is not in any name, so no two
targets share a key. <p>:limits is the set of queues that have limits. ]]
local LIMIT = { -- the bounds of limits
  RATE_MAX = 1000000000,      -- rate: starts per period
  PERIOD_MAX = 31536000000,   -- period_ms: a year
  BURST_MAX = 1000000,
  CONCURRENCY_MAX = 1000000,
  SPACING_MS = 100,           -- a concurrency limit's deferrals: this / concurrency apart
  HEAL_MAX = 32,              -- slot members a full set checks for stale ones, per call
  KEY_IDLE_MS = 60000,        -- a per-key limit's key leaves <...>/keys after this idle
  CACHE_MAX = 1024,           -- decoded limit texts, and queues, kept across calls
  QUEUES_MAX = 1000,          -- queues <ns>_limit_list reports
  TARGETS_MAX = 100,          -- limits per queue it reports
  KEYS_MAX = 1000,            -- keys of a per-key limit it sums the running tasks of
}
-- The state key of a target (its field in the limits hash) of queue q.
local function lkey(q, field, kind, key)
  local base = SCOPE.prefix .. ':limit:' .. q .. '/' .. field .. '/' .. kind
  if key then return base .. '/' .. key end
  return base
end

-- A limit's JSON text as a table with what admission computes from it (T: the emission
-- interval in microseconds, rounded up so that N of them span at least a period; tol: the
-- burst tolerance), or false when the text is not a limit. Kept by text, across calls.
local decoded, decoded_n = {}, 0
local function decode_limit(text)
  local l = decoded[text]
  if l ~= nil then return l end
  local ok, v = pcall(cjson.decode, text)
  l = false
  if ok and type(v) == 'table' then
    local rate, period, burst, conc = tonumber(v.rate), tonumber(v.period_ms),
                                      tonumber(v.burst) or 0, tonumber(v.concurrency)
    if rate and (rate < 1 or rate % 1 ~= 0 or not period or period < 1 or period % 1 ~= 0 or
                 period * 1000 < rate) then
      rate = nil
    end
    if conc and (conc < 1 or conc % 1 ~= 0) then conc = nil end
    if rate or conc then
      l = {rate = rate, period_ms = rate and period, burst = rate and burst or 0,
           concurrency = conc, per_key = v.per_key == true}
      if rate then
        l.T = math.ceil(period * 1000 / rate)
        l.tol = l.burst * l.T
      end
      if conc then l.spacing = math.max(1, math.floor(LIMIT.SPACING_MS / conc)) * 1000 end
    end
  end
  if decoded_n >= LIMIT.CACHE_MAX then decoded, decoded_n = {}, 0 end
  decoded[text], decoded_n = l, decoded_n + 1
  return l
end

-- The limits of queue q as {all = <queue-wide limit>, types = {<type> = limit}} with each
-- limit's field and target name; nil when it has none. The hash is read on every call
-- (once per call: LIM.of); only its decoding is kept while its texts are the same.
local parsed_raw, parsed, parsed_n = {}, {}, 0
local function same_map(a, b)
  for f, v in pairs(a) do if b[f] ~= v then return false end end
  for f in pairs(b) do if a[f] == nil then return false end end
  return true
end

local function load_limits(q)
  local map = hgetall_map(k('limits', q)) -- another type reads as no limits
  if not map then return nil end
  local raw = parsed_raw[q]
  if raw and same_map(raw, map) then return parsed[q] end
  local lims, any = {types = {}}, false
  for f, text in pairs(map) do
    local l = decode_limit(text)
    local ttype = f:match('^t:(.+)$')
    if l and (f == '*' or ttype) then
      -- a copy per target: the decoded table is shared by every target of the same text
      local t = {field = f, target = ttype and (q .. ':' .. ttype) or q}
      for name, v in pairs(l) do t[name] = v end
      if ttype then lims.types[ttype] = t else lims.all = t end
      any = true
    end
  end
  if not any then lims = nil end
  if parsed_n >= LIMIT.CACHE_MAX then parsed_raw, parsed, parsed_n = {}, {}, 0 end
  parsed_raw[q], parsed[q], parsed_n = map, lims or false, parsed_n + 1
  return lims
end

function LIM.of(q)
  local memo = call.sub('limits')
  local v = memo[q]
  if v == nil then
    v = load_limits(q) or false
    memo[q] = v
  end
  return v
end

function LIM.release(slots, tid)
  local memo = call.sub('limit_state')
  for zk in slots:gmatch('%S+') do
    -- only slot sets: the field is dtq's, but a key it names is checked all the same
    local lpfx = SCOPE.prefix .. ':limit:'
    if zk:sub(1, #lpfx) == lpfx then
      redis.pcall('ZREM', zk, tid)
      if memo.n then memo.n[zk] = nil end -- the call's count of it is stale
    end
  end
end

--[[ A running attempt that nothing can end any more, ended: its carrier entry is gone (a
producer's XADD MAXLEN or XTRIM deleted it, so no reaper finds the attempt) and its worker
with it (no <p>:worker:<id> key; in the cluster layout, where a queue's call cannot see the
worker keys, its timeout_ms long past instead). It ends as a lost worker's attempt does:
requeued at the next attempt, dead-lettered worker_lost after the last, cancelled when a
cancel was asked; its slots go back. Returns true when it ended it. A full slot set asks it
of its members (heal), and so does a cancel. ]]
function LIM.end_lost(c, ms, tid)
  local LOST_MARGIN_MS = 60000 -- past timeout_ms: the daemon's kill grace and its finish
  local tkey = k('task', tid)
  local h = hgetall_map(tkey)
  if not h or h.status ~= 'running' or type(h.carrier) ~= 'string' then return false end
  local stream, eid = h.carrier:match('^(.+)/([^/]+)$')
  if not stream or SCOPE.foreign_stream(stream) then return false end
  local e = redis.pcall('XRANGE', stream, eid, eid)
  if type(e) ~= 'table' or e.err or e[1] then return false end -- the reaper's to settle
  if SCOPE.cluster then
    local started, timeout = tonumber(h.started_at), tonumber(h.timeout_ms)
    if not started or not timeout or ms < started + timeout + LOST_MARGIN_MS then return false end
  elseif redis.call('EXISTS', k('worker', h.worker_id or '')) == 1 then
    return false
  end
  h.id = tid
  if h.limit_slots then LIM.release(h.limit_slots, tid) end
  if h.cancel_requested == '1' then
    history_add(tkey, h.history or false, h.attempt, ms, 'cancelled', 'worker_lost', h.worker_id)
    finish_terminal(c, tkey, h, 'cancelled', ms)
    emit(c, ms, 'TASK_CANCELLED', h, '', {reason = 'worker_lost'})
  elseif (tonumber(h.attempt) or 1) >= (tonumber(h.max_attempts) or 1) then
    dead_letter(c, tkey, h, ms, 'worker_lost', 'worker_lost', h.worker_id)
  else
    history_add(tkey, h.history or false, h.attempt, ms, 'worker_lost', 'worker_lost', h.worker_id)
    h.attempt = fmt((tonumber(h.attempt) or 1) + 1)
    redis.call('HSET', tkey, 'status', 'queued', 'attempt', h.attempt, 'updated_at', fmt(ms))
    redis.call('HDEL', tkey, 'worker_id', 'carrier', 'limit_slots')
    add_entry(h, tid)
    emit(c, ms, 'TASK_QUEUED', h, '', {reason = 'worker_lost'})
  end
  return true
end

-- The members of a full slot set whose task is gone, not running, or running an attempt
-- nothing can end any more (LIM.end_lost) are removed (the oldest HEAL_MAX, once per set
-- and call: a lease a lost release left). Its size after (n, its size before, when it was
-- healed already in this call).
local function heal(c, ms, zk, n)
  local memo = call.sub('limit_state')
  memo.healed = memo.healed or {}
  if memo.healed[zk] then return n end
  memo.healed[zk] = true
  local ids = redis.pcall('ZRANGE', zk, 0, LIMIT.HEAL_MAX - 1)
  if not ids.err then
    for _, id in ipairs(ids) do
      local st = redis.pcall('HGET', k('task', id), 'status')
      if st ~= 'running' then
        redis.call('ZREM', zk, id)
      else
        LIM.end_lost(c, ms, id)
      end
    end
  end
  n = redis.pcall('ZCARD', zk)
  return type(n) == 'number' and n or 0
end

local function integer(n) return fmt(math.floor(n + 0.5)) end

--[[ Defers the task of a claim that limit l (kind 'rate' or 'concurrency', key: its
per-key bucket) refused, without using an attempt: its entry is settled (acknowledged and
deleted), its hash is pending with limited_by, and it waits in the schedule until
due = max(earliest admissible time, the limit's horizon + spacing) (spacing: T for a rate,
SPACING_MS / concurrency for a concurrency limit), which becomes the horizon: deferred
tasks come back one spacing apart instead of all at once. ]]
local function defer(c, ms, worker, stream, entry_id, tkey, h, l, kind, key, earliest_us)
  local hk = lkey(h.queue, l.field, 'due', key)
  local space = kind == 'rate' and l.T or l.spacing
  local memo = call.sub('limit_state')
  memo.hz = memo.hz or {}
  local hz = memo.hz[hk] or tonumber(redis.pcall('GET', hk)) or 0
  local due_us = math.max(earliest_us, hz + space, ms * 1000)
  local due = math.ceil(due_us / 1000)
  redis.pcall('SET', hk, integer(due_us), 'PX', integer(due - ms + space / 1000 + 1000))
  memo.hz[hk] = due_us
  local label = kind .. ':' .. l.target .. (key and ('/' .. key) or '')
  ack(stream, entry_id)
  redis.call('HSET', tkey, 'status', 'pending', 'updated_at', fmt(ms), 'limited_by', label)
  h.status = 'pending'
  redis.call('ZADD', k('retry', 'schedule'), fmt(due), h.id)
  emit(c, ms, 'TASK_DEFERRED', h, worker, {reason = 'limited', limited_by = label,
                                           delay_ms = due - ms})
end

--[[ Admission of a claim under the limits `lims` of its queue: the queue-wide limit and
its type's, each per key (the task's limit_key; '' for none) when per_key. Every limit is
checked before anything is taken: a rate admits when now >= tat - tol (GCRA; now is
the call's millisecond, which stands for all of it: now_us + 999 >= tat - tol, so a rate
above one per ms starts several tasks in one ms, and still at most N + burst in any
period of started_at, started_at being that millisecond), a
concurrency limit when its set has a free slot (after heal() when full) or, for an
adoption, holds the task already. Then the rate states advance (tat = max(tat, now) + T)
and the task joins the slot sets. Returns true and the slot sets (space separated; nil:
none), or false when a limit refused it: a claim is then deferred here (defer()), an
adoption is left to the caller (it requeues the task). ]]
function LIM.gate(c, ms, worker, lims, stream, entry_id, tkey, h, adopt)
  local a, b = lims.all, lims.types[h.task_type]
  if not a and not b then return true, nil end
  local now_us, tid = ms * 1000, h.id
  local lk = h.limit_key or ''
  -- What this call read or wrote of the state, so that the claims after the first in one
  -- call read nothing again: nothing else writes it while a Function runs.
  local memo = call.sub('limit_state')
  local tats, counts = memo.tat, memo.n
  if not tats then
    tats, counts = {}, {}
    memo.tat, memo.n = tats, counts
  end
  local rates, joins, slots, seen = {}, {}, nil, nil
  for _, l in ipairs({a or b, a and b or nil}) do
    local key = l.per_key and lk or nil
    if l.rate then
      local rk = lkey(h.queue, l.field, 'rate', key)
      local tat = tats[rk]
      if not tat then tat = tonumber(redis.pcall('GET', rk)) or 0 end
      tat = math.max(tat, now_us)
      if now_us + 999 < tat - l.tol then
        if not adopt then
          defer(c, ms, worker, stream, entry_id, tkey, h, l, 'rate', key, tat - l.tol - 999)
        end
        return false
      end
      rates[#rates + 1] = {rk, tat + l.T}
    end
    if l.concurrency then
      local zk = lkey(h.queue, l.field, 'run', key)
      local held = adopt and type(redis.pcall('ZSCORE', zk, tid)) == 'string'
      if not held then
        local n = counts[zk] or redis.pcall('ZCARD', zk)
        if type(n) ~= 'number' then
          redis.call('DEL', zk) -- a key of another type: the slots start over
          n = 0
        end
        if n >= l.concurrency then n = heal(c, ms, zk, n) end
        counts[zk] = n
        if n >= l.concurrency then
          if not adopt then
            defer(c, ms, worker, stream, entry_id, tkey, h, l, 'concurrency', key,
                  now_us + l.spacing)
          end
          return false
        end
        joins[#joins + 1] = zk
      end
      slots = slots and (slots .. ' ' .. zk) or zk
    end
    if key then
      seen = seen or {}
      seen[#seen + 1] = lkey(h.queue, l.field, 'keys')
    end
  end
  for _, r in ipairs(rates) do
    redis.call('SET', r[1], integer(r[2]), 'PX', integer(math.ceil((r[2] - now_us) / 1000)))
    tats[r[1]] = r[2]
  end
  for _, zk in ipairs(joins) do
    redis.call('ZADD', zk, fmt(ms), tid)
    counts[zk] = counts[zk] + 1
  end
  for _, ik in ipairs(seen or {}) do
    if redis.pcall('ZADD', ik, fmt(ms), lk) == 1 then -- a new key: the idle ones leave
      redis.pcall('ZREMRANGEBYSCORE', ik, '-inf', '(' .. fmt(ms - LIMIT.KEY_IDLE_MS))
    end
  end
  return true, slots
end

return {LIM = LIM, LIMIT = LIMIT, decode_limit = decode_limit, lkey = lkey}
