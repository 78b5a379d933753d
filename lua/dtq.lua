#!lua name=dtq
--[[
dtq Functions library. Every state transition of a task happens in one of these
functions, atomically. The daemon loads this file with FUNCTION LOAD REPLACE after
replacing the namespace line below, so `<ns>_enqueue` and friends exist per namespace.

Conventions:
- errors are error replies whose first word is a stable code (INVALID_ARGUMENT, NOT_FOUND,
  WRONG_STATE, PAYLOAD_TOO_LARGE, QUEUE_FULL, IDEMPOTENCY_IN_PROGRESS, ID_EXISTS);
- every time comes from the server clock (TIME), never from a caller;
- numbers are written with %d: tostring() would turn epoch ms into 1.7e+12.
The constants the C side owns are not written here: scripts.c replaces the placeholder line
below with them at load (this text alone is refused: it reads a global that is not there). GROUP is the consumer group
of every stream; BANDS the priorities 0..BANDS-1 (BAND_NAMES their stream suffixes);
MAX_ATTEMPTS the cap on max_attempts; TERMINAL the set of terminal statuses (task.c);
DEFAULTS, CONFIG_BOUNDS and CONFIG_NAMES the fields of <prefix>:config (config.c).
]]
local NS, PREFIX = 'dtq', 'dtq' -- replaced at load time (scripts.c)
local VERSION = 'unversioned' -- replaced at load time: <DTQ_VERSION>-<hash of the text>
local GROUP, BANDS, BAND_NAMES, MAX_ATTEMPTS, TERMINAL, DEFAULTS, CONFIG_BOUNDS, CONFIG_NAMES = load_with_dtqctl_functions_install

local TERMINAL_EVENTS = {TASK_SUCCEEDED = true, TASK_FAILED = true, TASK_DEAD_LETTERED = true,
                         TASK_CANCELLED = true, TASK_EXPIRED = true, WORKER_STARTED = true,
                         WORKER_STOPPED = true}

-- Integers as Redis strings. string.format costs about 2,000 server instructions a call
-- and a fetch or finish formats the same few numbers (the call's clock, attempts, limits)
-- for every task, so each call keeps what it formatted (reset by reg()).
local fmt_memo = {}
local function fmt(n)
  local s = fmt_memo[n]
  if s then return s end
  s = string.format('%d', n)
  if n == n then fmt_memo[n] = s end -- NaN cannot be a table key
  return s
end
-- <prefix>:a[:b[:c[:d]]], by plain concatenation (a varargs table per key costs more).
local function k(a, b, c, d)
  if d then return PREFIX .. ':' .. a .. ':' .. b .. ':' .. c .. ':' .. d end
  if c then return PREFIX .. ':' .. a .. ':' .. b .. ':' .. c end
  if b then return PREFIX .. ':' .. a .. ':' .. b end
  return PREFIX .. ':' .. a
end

--[[ The call's scope. Single layout: every key is <PREFIX>:..., PREFIX the namespace (or
{namespace} with cluster_hash_tag). Cluster layout (docs/reference.md 5.9): a call's first
key is a bare hash tag, {<ns>:<queue>} for a queue's calls or {<ns>} for global state; the
wrapper (reg) makes it the prefix of every key of the call and strips it, so a queue's call
sees a namespace that holds that one queue and touches its slot only. ]]
local SCOPE = {base = PREFIX, cluster = false, queue = nil, last = PREFIX}

-- The refusal of a queue that is not the call's own in the cluster layout (its keys would
-- land in the wrong slot, or be refused by the node): an error reply, or nil. The entry
-- points of the per-queue Functions return it before they write; stream_key raises it as
-- a last guard (SCOPE.check).
function SCOPE.refuse(q)
  if SCOPE.cluster and q ~= SCOPE.queue then
    return redis.error_reply('INVALID_ARGUMENT queue \'' .. tostring(q) ..
                             '\' is not the queue of the call\'s key ' .. PREFIX ..
                             ' (cluster layout: the first key is the queue\'s hash tag {' ..
                             NS .. ':<queue>})')
  end
  return nil
end
-- In the cluster layout, why a stream named by a finish or handback record is not one of
-- the call's queue (a record of another queue: its task id may name another task here);
-- nil when it is.
function SCOPE.foreign_stream(stream)
  if not SCOPE.cluster then return nil end
  local head = PREFIX .. ':stream:'
  if type(stream) ~= 'string' or stream:sub(1, #head) ~= head then
    return 'stream ' .. tostring(stream) .. ' is not a stream of the call\'s key ' .. PREFIX
  end
  return nil
end
function SCOPE.check(q)
  local bad = SCOPE.refuse(q)
  if bad then error(bad) end
end

-- Sets the scope from the call's keys (see above); answers an error text when the first
-- key is a tag of another namespace.
function SCOPE.enter(keys)
  local tag = keys[1]
  if tag and tag:byte(1) == 123 and tag:byte(-1) == 125 then -- '{' ... '}'
    local inner = tag:sub(2, -2)
    local q
    if inner == NS then
      q = false
    elseif inner:sub(1, #NS + 1) == NS .. ':' and #inner <= #NS + 129 and
        inner:find('^[A-Za-z0-9._:-]+$', #NS + 2) then -- a queue name: no braces
      q = inner:sub(#NS + 2)
    else
      return 'INVALID_ARGUMENT key ' .. tag .. ' is not a hash tag of namespace ' .. NS ..
             ' ({' .. NS .. '} or {' .. NS .. ':<queue>})'
    end
    table.remove(keys, 1)
    PREFIX, SCOPE.cluster, SCOPE.queue = tag, true, q
  else
    PREFIX, SCOPE.cluster, SCOPE.queue = SCOPE.base, false, nil
  end
  return nil
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The date part of iso() for the last day asked: the civil-date arithmetic runs once a day.
local iso_day, iso_date = nil, nil

local function iso(ms)
  local s = math.floor(ms / 1000)
  local days, rem = math.floor(s / 86400), s % 86400
  if days == iso_day then
    return string.format('%s%02d:%02d:%02d.%03dZ', iso_date, math.floor(rem / 3600),
                         math.floor(rem % 3600 / 60), rem % 60, ms % 1000)
  end
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
                          - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400 + (m <= 2 and 1 or 0)
  iso_day, iso_date = days, string.format('%04d-%02d-%02dT', y, m, d)
  return iso(ms)
end

-- What load_config() accepts from <prefix>:config: CONFIG_BOUNDS, the bounds of the key
-- table in src/config.c (dlq_enabled is its boolean as 0/1, default_priority a band).
local EVENT_LEVELS = {all = true, terminal = true, off = true}

-- The limits the daemon published in <prefix>:config, with defaults for a fresh Redis. A
-- value that is not a plain integer within CONFIG_BOUNDS (or an events level), or a config
-- key of another type, is not trusted: that field takes its DEFAULTS value. CONFIG_NAMES
-- lists the fields read.
-- What an enqueue reads of it (see enqueue_config): every other field is nil there.
local ENQUEUE_CONFIG_NAMES = {'max_payload_bytes', 'max_queue_depth', 'default_priority',
                              'idem_ttl_s', 'events', 'events_stream_maxlen'}
-- Per list of names, the last config parsed and the raw values it came from. Checking the
-- values costs far less than parsing them again (Lua strings are interned: equal strings
-- are one object); a single-task enqueue spent a third of its time here before. Nothing is
-- trusted from an earlier call: the hash is read every time, only the parse is skipped.
local config_raw, config_parsed = {}, {}

local function read_config(names)
  local vals = redis.pcall('HMGET', k('config'), unpack(names))
  if vals.err then vals = {} end
  local raw = config_raw[names]
  if raw then
    local same = true
    for i = 1, #names do
      if vals[i] ~= raw[i] then same = false break end
    end
    if same then return config_parsed[names] end
  end
  local c = {}
  for i, name in ipairs(names) do
    local v, b = vals[i], CONFIG_BOUNDS[name]
    if name == 'events' then
      if not EVENT_LEVELS[v] then v = DEFAULTS.events end
    else
      v = type(v) == 'string' and v:find('^%d+$') and tonumber(v) or nil
      if not v or v < b[1] or v > b[2] then v = DEFAULTS[name] end
    end
    c[name] = v
  end
  config_raw[names], config_parsed[names] = vals, c
  return c
end

local function load_config() return read_config(CONFIG_NAMES) end

-- The limits an enqueue applies, read alone: six fields instead of eleven, on the path
-- where one task is one call.
local function enqueue_config() return read_config(ENQUEUE_CONFIG_NAMES) end

-- HGETALL as a Lua table, nil when there is no such key; or nil and the error reply of
-- redis.pcall. In RESP3 Redis hands a hash over as a map it builds itself: about a third
-- cheaper than pairing up the RESP2 array here. Only this call speaks RESP3 (elsewhere
-- HMGET's missing fields stay false, not nil).
local function hgetall_map(key)
  redis.setresp(3)
  local r = redis.pcall('HGETALL', key)
  redis.setresp(2)
  if r.err then return nil, r end
  if next(r.map) == nil then return nil end
  return r.map
end

local function hgetall(key)
  local h, err = hgetall_map(key)
  if err then error(err) end -- as redis.call raises it
  return h
end

local function valid_name(s, max)
  return type(s) == 'string' and #s >= 1 and #s <= max and not s:find('[^%w%._:%-]')
end

-- valid_name(s, 128), the rule for queue names and task types, remembered across calls
-- for a bounded number of strings: every task of a fetch, a finish or an enqueue asks it
-- of the same few names, and the answer depends on the string alone.
local name128_memo, name128_memo_n = {}, 0
local function valid_name128(s)
  local ok = name128_memo[s]
  if ok == nil and type(s) == 'string' then
    ok = valid_name(s, 128)
    if name128_memo_n >= 1024 then name128_memo, name128_memo_n = {}, 0 end
    name128_memo[s] = ok
    name128_memo_n = name128_memo_n + 1
  end
  return ok == true
end

-- tonumber(s), with the strings '1' .. '1024' (attempts, the usual counts) looked up: each
-- tonumber of a string is a strtod, and finish compares a few per task. The table is made
-- by the first call that asks (the standard library is out of reach while the library
-- loads) and kept: constants.
local num
do
  local small = nil
  num = function(s)
    if not small then
      small = {}
      for i = 1, 1024 do small[string.format('%d', i)] = i end
    end
    return small[s] or tonumber(s)
  end
end

-- Appends to the list `a` each name-value pair (given flat after it) whose value is set:
-- the options a task was given, as command arguments. Returns `a`.
local function options_set(a, ...)
  local n = select('#', ...)
  for i = 1, n, 2 do
    local v = select(i + 1, ...)
    if v then
      a[#a + 1] = select(i, ...)
      a[#a + 1] = v
    end
  end
  return a
end

local function parse_int(s, lo, hi)
  if type(s) ~= 'string' or not s:match('^%-?%d+$') then return nil end
  local n = tonumber(s)
  if not n or n < lo or n > hi then return nil end
  return n
end

--[[ Poisoned records. A task hash is read with read_task(): redis.pcall turns WRONGTYPE
into a reply at no extra cost, and TYPE is asked only then, for the reason. task_poison()
names the first field the Functions could not compute with; such a task is dead-lettered
(dead_letter_poisoned). A key of another type cannot hold the task: its item is put in
quarantine(). Either way the item is settled and the other items of the call go on. ]]
local function wrong_type(key, want)
  return 'wrong type: ' .. key .. ' is a ' .. redis.call('TYPE', key).ok .. ', not a ' .. want
end

-- The task hash of `tid`, with h.id = tid; nil when it does not exist; or nil and the reason
-- when the key holds another type.
local function read_task(tkey, tid)
  local h, err = hgetall_map(tkey)
  if err then return nil, wrong_type(tkey, 'hash') end
  if not h then return nil end
  h.id = tid
  return h
end

local TASK_STATUSES = {pending = true, queued = true, running = true, retrying = true}
-- Why h[name] is not an integer in [lo, hi] (or missing though required), or nil.
local function int_field_error(h, name, lo, hi, required)
  local v = h[name]
  if v == nil then return required and (name .. ' is missing') or nil end
  local n = tonumber(v)
  if not n then return name .. ' is not a number' end
  if n % 1 ~= 0 or n < lo or n > hi then
    return name .. ' is not an integer in [' .. fmt(lo) .. ', ' .. fmt(hi) .. ']'
  end
  return nil
end

-- Why the Functions cannot compute with this task hash, or nil when they can.
local function task_poison(h)
  if h.status == nil then return 'status is missing' end
  if not TASK_STATUSES[h.status] and not TERMINAL[h.status] then
    return 'status is not a known status'
  end
  if h.queue == nil then return 'queue is missing' end
  if not valid_name128(h.queue) then return 'queue is not a valid queue name' end
  if h.task_type == nil then return 'task_type is missing' end
  -- tonumber and a range: what arithmetic on the field needs, without a pattern match per
  -- field (these run for every task of every fetch). The usual hash has the first three.
  local why = int_field_error(h, 'attempt', 1, 2^53, true) or
              int_field_error(h, 'created_at', 0, 2^53, true) or
              int_field_error(h, 'priority', 0, BANDS - 1)
  if why then return why end
  if h.ttl_seconds or h.max_attempts or h.own_max_attempts or h.own_timeout_ms then
    why = int_field_error(h, 'ttl_seconds', 1, 2^53) or
          int_field_error(h, 'max_attempts', 1, MAX_ATTEMPTS) or
          int_field_error(h, 'own_max_attempts', 1, MAX_ATTEMPTS) or
          int_field_error(h, 'own_timeout_ms', 1, 2^53)
    if why then return why end
  end
  if h.dlq_entry and h.dlq_entry ~= '' and not h.dlq_entry:find('^%d+%-%d+$') then
    return 'dlq_entry is not a stream id'
  end
  return nil
end

-- The quarantine record of an item whose key holds another type: reason, key, source (the
-- stream entry <stream>/<entry-id>, or the Function's name), ts. Never raises.
local function quarantine(reason, key, source, ms)
  local QUARANTINE_MAXLEN = 10000
  redis.pcall('XADD', k('stream', 'quarantine'), 'MAXLEN', '~', fmt(QUARANTINE_MAXLEN), '*',
              'reason', reason, 'key', key, 'source', source, 'ts', fmt(ms))
end

-- Adds a queue to <prefix>:queues, the set <ns>_stats reports on. Never raises.
local function queue_known(queue)
  redis.pcall('SADD', k('queues'), queue)
end

-- Per-call state of the event builder, reset by the wrapper reg() puts around every
-- Function: one INCR of <prefix>:seq per call that emits, however many events it emits.
local call_seq, call_events, call_ts_ms, call_ts = nil, 0, nil, nil
local call_listeners, call_any_cancelled = nil, nil -- per call, looked up when first needed
local call_eid_prefix = nil -- the event ids' common part, per call

-- Whether `tid` was cancelled while queued: one SCARD per call spares a SISMEMBER per entry
-- while the set is empty, which it almost always is.
local function in_cancelled(tid)
  if call_any_cancelled == nil then
    local n = redis.pcall('SCARD', k('cancelled'))
    call_any_cancelled = type(n) == 'number' and n > 0
  end
  return call_any_cancelled and redis.pcall('SISMEMBER', k('cancelled'), tid) == 1
end

-- A fresh value of <prefix>:seq. The first one a call takes also numbers its events.
--[[ <p>:seq after INCRBY by; a value that is not an integer, or a key of another type
(what a producer, who holds SET on it, could leave there) is replaced, so no producer can
stop the others' enqueues. ]]
local function seq_incr(by)
  local n = by == 1 and redis.pcall('INCR', k('seq')) or redis.pcall('INCRBY', k('seq'), by)
  if type(n) == 'table' then
    redis.call('SET', k('seq'), by)
    n = by
  end
  return n
end

local function next_seq()
  local n = fmt(seq_incr(1))
  if not call_seq then call_seq = n end
  return n
end

--[[ A minted task id that no task holds. <p>:seq only grows through INCR/INCRBY, but a
producer holds those (a Function runs with its caller's permissions) and INCRBY takes a
negative step: a rewound counter would mint an id that is taken and overwrite that task.
So a taken id is never used: the counter is stepped on until a free id comes (a bounded
number of times; after that the enqueue is refused with ID_EXISTS, nothing overwritten). ]]
local function free_task_id(ms, tid)
  local MINT_TRIES = 1000
  for _ = 1, MINT_TRIES do
    local tkey = k('task', tid)
    if redis.call('EXISTS', tkey) == 0 then return tid, tkey end
    tid = fmt(ms) .. '-' .. next_seq()
  end
  return nil
end

-- '1' .. '1024', made once (by the first call that emits: the standard library is out of
-- reach while the library loads) and kept, constants as they are: the number of an event
-- within its call would otherwise cost a string.format per event.
local SMALL_INTS = nil

-- The next event id of this call, evt-<ms>-<seq>-<n>: the part before <n> (the call's
-- clock and sequence number) is the same for every event of the call.
local function next_event_id(ms)
  if not call_eid_prefix then
    if not call_seq then next_seq() end
    call_eid_prefix = 'evt-' .. fmt(ms) .. '-' .. call_seq .. '-'
    if not SMALL_INTS then
      SMALL_INTS = {}
      for i = 1, 1024 do SMALL_INTS[i] = string.format('%d', i) end
    end
  end
  call_events = call_events + 1
  return call_eid_prefix .. (SMALL_INTS[call_events] or fmt(call_events))
end

--[[ The one builder and publisher of lifecycle events, for every event type: the id and
the time come from the Redis clock of the call, the level filter is [limits] events as
published in <prefix>:config, and the stream copy honours events_stream_maxlen. ]]
local function event_wanted(c, etype)
  if c.events == 'off' then return false end
  if c.events == 'terminal' and not TERMINAL_EVENTS[etype] then return false end
  if call_listeners == nil then
    -- Once per call: an event nobody can receive (no subscriber, no pattern subscriber,
    -- no events stream) is not built at all. Nothing is lost: PUBLISH to nobody is a no-op.
    -- In a cluster NUMSUB counts this node's subscribers only, and PUBLISH reaches them
    -- all: publish whenever events are on.
    call_listeners = SCOPE.cluster or c.events_stream_maxlen > 0 or
                     redis.call('PUBSUB', 'NUMSUB', k('events'))[2] > 0 or
                     redis.call('PUBSUB', 'NUMPAT') > 0
  end
  return call_listeners
end

-- Publishes one event of task `tid` (its queue, task type and attempt given one by one, so
-- that a caller holding them apart builds no table for it).
local function emit_task(c, ms, etype, tid, queue, ttype, attempt, worker, meta)
  if not event_wanted(c, etype) then return end
  if call_ts_ms ~= ms then call_ts_ms, call_ts = ms, iso(ms) end
  tid, queue, ttype = tid or '', queue or '', ttype or ''
  attempt, worker = tonumber(attempt) or 0, worker or ''
  local eid, json = next_event_id(ms)
  -- The usual event is built as one string: a Lua table per event and its encoding cost
  -- more than the PUBLISH. Queues, task types and worker ids are few and need no escaping
  -- when they are valid names (valid_name128 keeps its answers); the task id, different
  -- every time, is escaped by cjson alone. Anything else takes the table and cjson.
  if (queue == '' or valid_name128(queue)) and (ttype == '' or valid_name128(ttype)) and
      (worker == '' or valid_name128(worker)) and attempt % 1 == 0 and attempt >= 0 and
      attempt < 2^53 then
    json = '{"event_id":"' .. eid .. '","ts":"' .. call_ts .. '","type":"' .. etype ..
           '","task_id":' .. cjson.encode(tid) .. ',"queue":"' .. queue .. '","task_type":"' ..
           ttype .. '","attempt":' .. fmt(attempt) .. ',"worker_id":"' .. worker ..
           (meta and ('","metadata":' .. cjson.encode(meta) .. '}') or '"}')
  else
    local ev = {event_id = eid, ts = call_ts, type = etype, task_id = tid,
                queue = queue, task_type = ttype, attempt = attempt, worker_id = worker}
    if meta then ev.metadata = meta end
    json = cjson.encode(ev)
  end
  -- one channel per namespace in either layout: {<ns>}:events in a cluster
  redis.call('PUBLISH', SCOPE.cluster and ('{' .. NS .. '}:events') or k('events'), json)
  if c.events_stream_maxlen > 0 then
    redis.call('XADD', k('stream', 'events'), 'MAXLEN', '~', fmt(c.events_stream_maxlen), '*',
               'event', json)
  end
end

local function emit(c, ms, etype, h, worker_id, meta)
  emit_task(c, ms, etype, h.id, h.queue, h.task_type, h.attempt, worker_id, meta)
end

local function idem_set(h, state, ms)
  if not h.idempotency_key or h.idempotency_key == '' then return end
  local rec = cjson.encode({task_id = h.id, state = state, updated_at = ms})
  redis.call('SET', k('idempotency', h.queue, h.idempotency_key), rec, 'XX', 'KEEPTTL')
end

-- The names of a queue's streams, kept across calls for a bounded number of queues
-- (each enqueue counts all the bands; building them cost more than the XLENs).
-- stream_queue_memo is the other way round: the queue of each stream named there.
local stream_keys_memo, stream_keys_memo_n, stream_queue_memo = {}, 0, {}
local function stream_key(queue, priority)
  if SCOPE.last ~= PREFIX then -- the names hold the prefix: a call of another scope
    stream_keys_memo, stream_keys_memo_n, stream_queue_memo, SCOPE.last = {}, 0, {}, PREFIX
  end
  local keys = stream_keys_memo[queue]
  if not keys then
    SCOPE.check(queue) -- once per queue and scope: a name kept was checked in this scope
    if stream_keys_memo_n >= 1024 then
      stream_keys_memo, stream_keys_memo_n, stream_queue_memo = {}, 0, {}
    end
    keys = {}
    for band = 0, BANDS - 1 do
      keys[band] = k('stream', queue, BAND_NAMES[band])
      stream_queue_memo[keys[band]] = queue
    end
    stream_keys_memo[queue] = keys
    stream_keys_memo_n = stream_keys_memo_n + 1
  end
  return keys[priority] or k('stream', queue, 'p' .. fmt(priority))
end

--[[ The queue whose band `stream` is, or nil when stream_key() names no band of any queue
so: the names after each ':stream:' up to the last ':' are tried (a queue name may hold
':'), each checked by building its keys. The daemon passes stream names (finish, handback);
the answer is kept with stream_key()'s. ]]
local function stream_queue(stream)
  local q = stream_queue_memo[stream]
  if q then return q end
  local last = stream:match('^.*():')
  local from = 1
  while last do
    local i, j = stream:find(':stream:', from, true)
    if not i or j + 1 >= last then return nil end
    q = stream:sub(j + 1, last - 1)
    if valid_name128(q) and not SCOPE.refuse(q) then
      stream_key(q, 0)
      if stream_queue_memo[stream] == q then return q end
    end
    from = i + 1
  end
  return nil
end

--[[ The queue's length counter <prefix>:queue:<q>:length, what QUEUE_FULL compares with
max_queue_depth: the entries in the queue's streams (waiting or delivered, until deleted),
as the sum of their XLEN, which it replaced (ten XLEN per enqueue). Every Function that
adds an entry adds 1 (enqueue, enqueue_bulk, cron, promotion of delayed and retrying tasks,
requeue, handback, the reaper's requeue); every deletion subtracts what XDEL, XTRIM or DEL
removed (acknowledgements at settle and finish, queue_clear, queue_remove). An entry no
Function wrote (a raw XADD) counts from its first delivery (fetch) or queue_clear's read:
until then it is not in the counter, so raw producers may take a queue past the limit.
Healing: a counter that is missing, not an integer, or would fall below 0 is set to the
XLEN sum; a fetch that finds a queue with nothing new sets it to that sum too (nothing
undelivered then: the sum is exactly what the counter counts). ]]
local function qlen_key(queue) return k('queue', queue, 'length') end

-- The sum of the queue's XLEN (a stream key of another type counts 0).
local function queue_depth(queue)
  local depth = 0
  for band = 0, BANDS - 1 do
    local n = redis.pcall('XLEN', stream_key(queue, band))
    if type(n) == 'number' then depth = depth + n end
  end
  return depth
end

local function qlen_resync(queue)
  local n = queue_depth(queue)
  redis.call('SET', qlen_key(queue), fmt(n))
  return n
end

-- The counter, for a QUEUE_FULL check.
local function qlen(queue)
  local n = tonumber((redis.pcall('GET', qlen_key(queue))))
  if not n or n < 0 or n % 1 ~= 0 then return qlen_resync(queue) end
  return n
end

-- Adds `by` (negative: entries deleted) to the counter of `queue` (nil: none).
local function qlen_add(queue, by)
  if by == 0 or not queue then return end
  local n = redis.pcall('INCRBY', qlen_key(queue), by)
  if type(n) ~= 'number' or n < 0 then qlen_resync(queue) end
end

-- A stream id as two numbers, or nil when it is not one that fits them exactly.
local function split_id(id)
  local dash = id:find('-', 1, true)
  if not dash then return nil end
  local ms, seq = tonumber(id:sub(1, dash - 1)), tonumber(id:sub(dash + 1))
  if not ms or not seq or seq >= 2^53 or ms >= 2^53 then return nil end
  return ms, seq
end

--[[ Deletes the entries `ids` of one stream, all just acknowledged. XDEL finds each entry
by walking its stream node from the start, which made it a fifth of a finish's Redis time.
But every entry older than the group's oldest pending one was delivered (a group reads in
id order) and is no longer pending, so it was acknowledged: one XTRIM MINID removes that
whole prefix, by nodes, and only the ids above it need XDEL. Nothing else is deleted: an
entry not yet delivered is newer than every pending one, and when nothing is pending any
more the cut is just after the newest of `ids`. Returns how many entries were deleted. ]]
local function delete_acked(stream, ids)
  local pend = redis.call('XPENDING', stream, GROUP)
  if pend[1] > 0 then
    -- Below the oldest pending entry all is acknowledged: trimmed by nodes. Ids at or
    -- above it are deleted one by one (all of them if an id is not two plain numbers).
    local cut_ms, cut_seq = split_id(pend[2])
    local above = {}
    for i = 1, #ids do
      local ms, seq = split_id(ids[i])
      if not cut_ms or not ms or ms > cut_ms or (ms == cut_ms and seq >= cut_seq) then
        above[#above + 1] = ids[i]
      end
    end
    local n = 0
    if cut_ms then n = redis.call('XTRIM', stream, 'MINID', pend[2]) end
    if #above > 0 then n = n + redis.call('XDEL', stream, unpack(above)) end
    return n
  end
  -- Nothing pending: every entry up to the newest of `ids` goes.
  local top_ms, top_seq
  for i = 1, #ids do
    local ms, seq = split_id(ids[i])
    if not ms then return redis.call('XDEL', stream, unpack(ids)) end
    if not top_ms or ms > top_ms or (ms == top_ms and seq > top_seq) then
      top_ms, top_seq = ms, seq
    end
  end
  return redis.call('XTRIM', stream, 'MINID', fmt(top_ms) .. '-' .. fmt(top_seq + 1))
end

-- A fresh entry for task `tid` in its own stream (its queue and band), at h.attempt.
local function add_entry(h, tid)
  redis.call('XADD', stream_key(h.queue, tonumber(h.priority) or 5), '*', 'task_id', tid,
             'attempt', h.attempt)
  qlen_add(h.queue, 1)
end

local function ack(stream, entry_id)
  redis.call('XACK', stream, GROUP, entry_id)
  qlen_add(stream_queue(stream), -redis.call('XDEL', stream, entry_id))
end

--[[ The attempt history: the task hash's `history` field, a JSON array of the last
HISTORY_MAX attempts that ended other than in success (retried, dead-lettered or failed,
cancelled, handed back, lost with their worker), oldest first, each {attempt, ended_at,
class, error, worker}: the error's first line, at most HISTORY_ERROR_MAX bytes. Written
only on those paths (a success writes nothing here), so a task's history needs no events
stream. ]]
local HISTORY_MAX, HISTORY_ERROR_MAX = 10, 200

-- The first line of `s`, at most `max` bytes (not cutting a UTF-8 character), and whether
-- anything was cut.
local function first_line(s, max)
  s = type(s) == 'string' and s or ''
  local cut = false
  local nl = s:find('[\r\n]')
  if nl then s, cut = s:sub(1, nl - 1), true end
  if #s > max then
    s, cut = s:sub(1, max), true
    if s:byte(#s) >= 128 then s = s:gsub('[\192-\255][\128-\191]*$', '') end
  end
  return s, cut
end

-- The history `old` (the field's value; nil or false: none) with one more record, as
-- JSON text. A value that is not a JSON array of records starts a new history.
local function history_json(old, attempt, ms, class, err, worker)
  local list = {}
  if type(old) == 'string' and old:sub(1, 1) == '[' then
    local ok, v = pcall(cjson.decode, old)
    if ok and type(v) == 'table' then
      for i = math.max(1, #v - HISTORY_MAX + 2), #v do
        if type(v[i]) == 'table' then list[#list + 1] = v[i] end
      end
    end
  end
  list[#list + 1] = {attempt = tonumber(attempt) or 0, ended_at = ms, class = class or '',
                     error = (first_line(err, HISTORY_ERROR_MAX)), worker = worker or ''}
  return cjson.encode(list)
end

-- Appends one record to the history of task `tkey`. `old` is the field's value when the
-- caller holds the hash (false: none), nil to read it here.
local function history_add(tkey, old, attempt, ms, class, err, worker)
  if old == nil then old = redis.pcall('HGET', tkey, 'history') end
  redis.call('HSET', tkey, 'history', history_json(old, attempt, ms, class, err, worker))
end

-- Ends a task in a terminal status other than dead_lettered: fields, TTL, idempotency.
-- (No updated_at: finished_at is the time of the change; readers take the latest.)
local function finish_terminal(c, tkey, h, status, ms, extra)
  local args = {'status', status, 'finished_at', fmt(ms)}
  for f, v in pairs(extra or {}) do
    args[#args + 1] = f
    args[#args + 1] = v
  end
  redis.call('HSET', tkey, unpack(args))
  redis.call('EXPIRE', tkey, fmt(c.task_retention_s))
  h.status = status
  idem_set(h, status == 'succeeded' and 'completed' or 'failed', ms)
end

-- Permanent failure: dead_lettered + DLQ entry, or failed when the DLQ is disabled. The
-- one place that applies [limits] dlq_enabled (as published in <prefix>:config).
local function dead_letter(c, tkey, h, ms, err, class, worker_id)
  local history = history_json(h.history, h.attempt, ms, class, err, worker_id)
  if c.dlq_enabled == 0 then
    finish_terminal(c, tkey, h, 'failed', ms, {last_error = err, last_error_class = class,
                                               history = history})
    emit(c, ms, 'TASK_FAILED', h, worker_id)
    return 'failed'
  end
  local dlq_id = redis.call('XADD', k('stream', 'dead-letter'), 'MAXLEN', '~',
    fmt(c.dlq_maxlen), '*',
    'task_id', h.id, 'queue', h.queue or '', 'task_type', h.task_type or '',
    'payload', h.payload or '', 'attempt', h.attempt or '1',
    'max_attempts', h.max_attempts or '', 'priority', h.priority or '',
    'timeout_ms', h.timeout_ms or '', 'idempotency_key', h.idempotency_key or '',
    'failed_at_ms', fmt(ms), 'attempts_made', h.attempt or '1', 'last_error', err,
    'last_error_class', class, 'retryable', '0', 'worker_id', worker_id or '',
    'original_queue', h.queue or '')
  finish_terminal(c, tkey, h, 'dead_lettered', ms, {last_error = err, last_error_class = class,
                                                    dlq_entry = dlq_id, history = history})
  emit(c, ms, 'TASK_DEAD_LETTERED', h, worker_id, {last_error = err})
  return 'dead_lettered'
end

-- A task task_poison() refused: dead-lettered (failed with the DLQ disabled) with
-- last_error "poisoned record: <why>" and class `poisoned`. Only the hash's strings are
-- copied; nothing is computed from them.
local function dead_letter_poisoned(c, tkey, h, ms, why, worker_id)
  if not valid_name(h.queue, 128) then h.idempotency_key = nil end -- no record to find
  return dead_letter(c, tkey, h, ms, 'poisoned record: ' .. why, 'poisoned', worker_id)
end

--[[ The one place max_attempts and timeout_ms are resolved: at claim, from the task's own
value, else its handler section's (the policy table the daemon sends), else the defaults.
The result is written into the hash; finish, handback and the reaper read it from there.
own_ma and own_to are the task's own values as stored (nil: none). ]]
local function resolve(policy, ttype, own_ma, own_to)
  local per = policy.t[ttype]
  local ma = (own_ma and tonumber(own_ma)) or (per and per[1]) or policy.d[1]
  local to = (own_to and tonumber(own_to)) or (per and per[2]) or policy.d[2]
  return ma, to
end

-- Why a raw entry cannot become a runnable task, or nil when it can.
local function raw_entry_error(c, f)
  if f.task_type == nil then return 'missing field task_type' end
  if not valid_name(f.task_type, 128) then return 'task_type must match [A-Za-z0-9._:-]{1,128}' end
  if f.payload == nil then return 'missing field payload' end
  if #f.payload > c.max_payload_bytes then
    return 'payload of ' .. fmt(#f.payload) .. ' bytes exceeds max_payload_bytes '
           .. fmt(c.max_payload_bytes)
  end
  if not pcall(cjson.decode, f.payload) then return 'payload is not valid JSON' end
  if f.task_id ~= nil and not valid_name(f.task_id, 64) then
    return 'task_id must match [A-Za-z0-9._:-]{1,64}'
  end
  if f.max_attempts ~= nil and not parse_int(f.max_attempts, 1, MAX_ATTEMPTS) then
    return 'max_attempts must be an integer in [1, ' .. fmt(MAX_ATTEMPTS) .. ']'
  end
  if f.timeout_ms ~= nil and not parse_int(f.timeout_ms, 1, 2^53) then
    return 'timeout_ms must be a positive integer'
  end
  if f.ttl_seconds ~= nil and not parse_int(f.ttl_seconds, 1, 2^53) then
    return 'ttl_seconds must be a positive integer'
  end
  if f.idempotency_key ~= nil and (#f.idempotency_key < 1 or #f.idempotency_key > 256) then
    return 'idempotency_key must be 1-256 bytes'
  end
  if f.limit_key ~= nil and not valid_name128(f.limit_key) then
    return 'limit_key must match [A-Za-z0-9._:-]{1,128}'
  end
  return nil
end

-- The task id of a raw producer entry's fields f: its own task_id when that is a valid id,
-- else the derived <queue>:p<band>:<entry-id> (also returned, second).
local function raw_task_id(f, queue, band, entry_id)
  local derived = queue .. ':p' .. fmt(band) .. ':' .. entry_id
  if f.task_id ~= nil and valid_name(f.task_id, 64) then return f.task_id, derived end
  return derived, derived
end

--[[ A raw producer entry (no `attempt` or `task_id`, or a `task_type`): its task, created on
first read. Returns tid, tkey, h; or nil when the entry was settled here (a duplicate by task
id or idempotency key, malformed: dead-lettered with the reason, or its task key holds
another type: quarantined). ]]
local function materialize_raw(c, ms, worker, stream, queue, band, entry_id, f, source)
  local tid, derived = raw_task_id(f, queue, band, entry_id)
  local tkey = k('task', tid)
  local h, bad = read_task(tkey, tid)
  if bad then
    quarantine(bad, tkey, source, ms)
    ack(stream, entry_id)
    return nil
  end
  if h then
    if h.source ~= source and tid ~= derived then
      -- A producer's id that exists already: the entry is a duplicate.
      ack(stream, entry_id)
      emit(c, ms, 'TASK_DUPLICATE_ABSORBED', h, worker)
      return nil
    end
    return tid, tkey, h -- this entry's own task, read again (a redelivery)
  end
  local err = raw_entry_error(c, f)
  if err == nil and f.idempotency_key ~= nil then
    local ikey = k('idempotency', queue, f.idempotency_key)
    local rec = {task_id = tid, state = 'processing', updated_at = ms}
    if not redis.call('SET', ikey, cjson.encode(rec), 'NX', 'EX', fmt(c.idem_ttl_s)) then
      ack(stream, entry_id)
      emit(c, ms, 'TASK_DUPLICATE_ABSORBED', {id = tid, queue = queue, task_type = f.task_type,
           attempt = 1}, worker, {idempotency_key = f.idempotency_key})
      return nil
    end
  end
  h = {id = tid, queue = queue, task_type = f.task_type or '', payload = f.payload or '',
       status = 'queued', attempt = '1', priority = fmt(band), created_at = fmt(ms),
       metadata = '{}', cancel_requested = '0', source = source}
  if err == nil then
    h.own_max_attempts = f.max_attempts
    h.own_timeout_ms = f.timeout_ms
    h.ttl_seconds = f.ttl_seconds
    h.idempotency_key = f.idempotency_key
    h.limit_key = f.limit_key
  elseif #h.payload > c.max_payload_bytes then
    -- A rejected entry must not park megabytes in its hash and its dead letter.
    h.payload = string.sub(h.payload, 1, c.max_payload_bytes)
    err = err .. ' (payload kept truncated to its first ' .. fmt(c.max_payload_bytes) .. ' bytes)'
  end
  local args = {}
  for name, v in pairs(h) do
    args[#args + 1] = name
    args[#args + 1] = v
  end
  redis.call('HSET', tkey, unpack(args))
  queue_known(queue)
  if err ~= nil then
    dead_letter(c, tkey, h, ms, 'invalid entry: ' .. err, 'invalid_entry', worker)
    ack(stream, entry_id)
    return nil
  end
  return tid, tkey, h
end

--[[ The limits (the `do ... end` block of limits below fills it in, docs/reference.md 5.7):
LIM.of(queue) is the queue's limits (false: none), read once per call; LIM.gate(...)
admits a claim or defers its task; LIM.release(slots, tid) gives back the slots of an
attempt that ended (the task hash's limit_slots). LIM.q is the per-call cache of LIM.of,
reset by reg(). One table, so the main chunk holds one local for all of it. ]]
local LIM = {}

--[[ Whether a task whose entry was delivered may run now. Returns 'claim' (queued at the
entry's attempt), 'adopt' (the entry carries a running attempt of a lost worker), or nil
when the entry was settled here: acknowledged as terminal, retrying, cancelled, expired,
a stale duplicate, or dead-lettered because a lost worker had used the last attempt. ]]
local function settle_or_admit(c, ms, worker, stream, entry_id, tid, tkey, h, ent_attempt, source)
  local status = h.status
  -- <prefix>:cancelled of another type reads as empty (redis.pcall): it cancels nothing.
  if TERMINAL[status] or status == 'retrying' then
    redis.pcall('SREM', k('cancelled'), tid)
    ack(stream, entry_id)
    return nil
  end
  if in_cancelled(tid) then
    redis.pcall('SREM', k('cancelled'), tid)
    finish_terminal(c, tkey, h, 'cancelled', ms)
    emit(c, ms, 'TASK_CANCELLED', h, worker)
    ack(stream, entry_id)
    return nil
  end
  if status == 'running' and h.carrier == source then
    if tonumber(h.attempt) >= (tonumber(h.max_attempts) or 1) then
      if h.limit_slots then LIM.release(h.limit_slots, tid) end
      dead_letter(c, tkey, h, ms, 'worker_lost', 'worker_lost', worker)
      ack(stream, entry_id)
      return nil
    end
    return 'adopt'
  end
  if status ~= 'queued' or ent_attempt ~= tonumber(h.attempt) then
    ack(stream, entry_id)
    emit(c, ms, 'TASK_DUPLICATE_ABSORBED', h, worker, {entry_attempt = ent_attempt})
    return nil
  end
  local ttl = tonumber(h.ttl_seconds)
  if ttl and ms >= tonumber(h.created_at) + ttl * 1000 then
    finish_terminal(c, tkey, h, 'expired', ms)
    emit(c, ms, 'TASK_EXPIRED', h, worker)
    ack(stream, entry_id)
    return nil
  end
  return 'claim'
end

--[[ The claim: queued (or adopted) -> running at the attempt it runs, with the resolved
limits and the carrier entry. Returns the claimed-task array the daemon decodes
(src/task.c): stream, entry_id, task_id, queue, task_type, payload, attempt,
max_attempts, timeout_ms.
Only what no reader can derive is written (each field of the hash costs its write a scan
and a reallocation): status, worker_id, started_at, carrier (and attempt for an adoption).
Not updated_at: started_at is the time of this change, and readers take the latest of the
two (task_view). max_attempts and timeout_ms only when the hash does not hold those values
already: the first claim writes them, a later attempt only if its resolution changed. ]]
local function claim_task(c, ms, worker, policy, stream, entry_id, tid, tkey, h, adopt, source,
                          slots)
  local attempt = tonumber(h.attempt)
  if adopt then attempt = attempt + 1 end
  local ma, to = resolve(policy, h.task_type, h.own_max_attempts, h.own_timeout_ms)
  local now, sma, sto = fmt(ms), fmt(ma), fmt(to)
  local kept = h.max_attempts == sma and h.timeout_ms == sto
  -- A limited claim (LIM.gate ran) records the slot sets it holds (limit_slots: a claim
  -- without slots clears an earlier one), and the task is no longer limited_by anything.
  if h.limited_by then redis.call('HDEL', tkey, 'limited_by') end
  if adopt then
    history_add(tkey, h.history or false, h.attempt, ms, 'worker_lost', 'worker_lost', h.worker_id)
    redis.call('HSET', tkey, 'status', 'running', 'attempt', fmt(attempt), 'worker_id', worker,
               'started_at', now, 'carrier', source)
    if not kept then redis.call('HSET', tkey, 'max_attempts', sma, 'timeout_ms', sto) end
    if slots or h.limit_slots then redis.call('HSET', tkey, 'limit_slots', slots or '') end
  elseif slots or h.limit_slots then
    redis.call('HSET', tkey, 'status', 'running', 'worker_id', worker, 'started_at', now,
               'max_attempts', sma, 'timeout_ms', sto, 'carrier', source,
               'limit_slots', slots or '')
  elseif kept then -- the attempt and the limits are the hash's already
    redis.call('HSET', tkey, 'status', 'running', 'worker_id', worker, 'started_at', now,
               'carrier', source)
  else
    redis.call('HSET', tkey, 'status', 'running', 'worker_id', worker, 'started_at', now,
               'max_attempts', sma, 'timeout_ms', sto, 'carrier', source)
  end
  h.attempt = attempt
  emit(c, ms, 'TASK_STARTED', h, worker)
  return {stream, entry_id, tid, h.queue, h.task_type, h.payload or '', attempt, ma, to}
end

--[[ An adopted task that cannot run here now (no free slot): it goes back to its queue
at once, as a fresh entry, instead of waiting in this worker's pending list. `adopt`
bumps the attempt (the lost worker's attempt counts, as for any crash). ]]
local function requeue_reaped(c, ms, worker, stream, entry_id, tkey, h, adopt)
  if adopt then
    if h.limit_slots then LIM.release(h.limit_slots, h.id) end
    history_add(tkey, h.history or false, h.attempt, ms, 'worker_lost', 'worker_lost', h.worker_id)
    h.attempt = fmt(tonumber(h.attempt) + 1)
  end
  redis.call('HSET', tkey, 'status', 'queued', 'attempt', h.attempt, 'updated_at', fmt(ms))
  redis.call('HDEL', tkey, 'worker_id', 'carrier')
  add_entry(h, h.id)
  ack(stream, entry_id)
  emit(c, ms, 'TASK_QUEUED', h, worker, {reason = 'reaped'})
end

--[[ The lean lane (docs/reference.md 4.3). A queue whose <prefix>:queue:<q>:mode is `lean`
takes its tasks as stream entries alone: no task hash while a task waits or runs. An entry
is lean when its first field is the marker `lean` (what <ns>_enqueue writes into a lean
queue, so a later mode switch changes nothing for it), or when it is a producer's raw entry
(a task_type, neither task_id nor idempotency_key) read from a queue that is lean. Its task
id is <queue>:p<band>:<entry-id>; its attempt is the entry's delivery count; a success is
an acknowledgement and a deletion in the finish call (its lean section). A failure, a lost
attempt that cannot go on lean (the last one, no free slot, a limit) or a cancel request
while it runs materialises the task: its hash is written from the entry as a full task's
would be, and from then on it is one. LEAN.modes is the per-call memo of queue modes
(reset by reg()); LEAN.policy the policy a finish call's lean section carries. ]]
local LEAN = {modes = {}, policy = nil}

function LEAN.mode_key(q) return k('queue', q, 'mode') end

-- Whether queue q is lean (a mode key of another type, or none: full), once per call.
function LEAN.on(q)
  local m = LEAN.modes[q]
  if m == nil then
    m = redis.pcall('GET', LEAN.mode_key(q)) == 'lean'
    LEAN.modes[q] = m
  end
  return m
end

-- Whether an entry's fields f (a table; `first` its first field name) make it a lean entry
-- of `queue`.
function LEAN.is(queue, first, f)
  if first == 'lean' then return true end
  return f.task_type ~= nil and f.task_id == nil and f.idempotency_key == nil and LEAN.on(queue)
end

function LEAN.tid(queue, band, entry_id) return queue .. ':' .. BAND_NAMES[band] .. ':' .. entry_id end

-- Whether a lean entry's fields can run as they are: the rest (a bad name, payload or option)
-- goes the way of a raw entry (materialize_raw dead-letters it as invalid_entry). The payload
-- of a marked entry is not parsed again (<ns>_enqueue parsed it).
function LEAN.sound(c, first, f)
  if not valid_name128(f.task_type) or f.payload == nil or #f.payload > c.max_payload_bytes then
    return false
  end
  if first ~= 'lean' or f.max_attempts or f.timeout_ms or f.ttl_seconds or f.limit_key then
    return raw_entry_error(c, f) == nil
  end
  return true
end


--[[ Writes the hash of lean task `tid` from its entry's fields f, as the full task it becomes:
what creation would have written (created_at is the entry's time), the attempt `attempt`
in `status`, and the extra fields `more` (name, value...). Returns h. ]]
function LEAN.materialise(ms, tid, queue, band, stream, entry_id, f, status, attempt, more)
  local h = {id = tid, queue = queue, task_type = f.task_type, payload = f.payload or '',
             status = status, attempt = fmt(attempt), priority = fmt(band),
             created_at = fmt(tonumber(entry_id:match('^(%d+)')) or ms), metadata = '{}',
             cancel_requested = '0', source = stream .. '/' .. entry_id,
             own_max_attempts = f.max_attempts, own_timeout_ms = f.timeout_ms,
             ttl_seconds = f.ttl_seconds, limit_key = f.limit_key}
  for i = 1, #(more or {}), 2 do h[more[i]] = more[i + 1] end
  local a = {}
  for name, v in pairs(h) do
    a[#a + 1] = name
    a[#a + 1] = v
  end
  redis.call('HSET', k('task', tid), unpack(a))
  queue_known(queue)
  return h
end

-- The group's record of a delivered entry: consumer and delivery count, or nil.
function LEAN.pending(stream, entry_id)
  local p = redis.pcall('XPENDING', stream, GROUP, entry_id, entry_id, 1)
  if type(p) ~= 'table' or p.err or not p[1] then return nil end
  return p[1][2], tonumber(p[1][4]), tonumber(p[1][3])
end

--[[ A lean entry delivered to `worker`. `mode`: nil for a first delivery (fetch), 'reap' for
an adoption by XAUTOCLAIM (which counted the delivery), 'crashed' for recover's adoption of
a dead predecessor's entry (with `requeue`), 'lost' for recover's hand-over at the same
attempt. Returns a claimed task (with a 10th element, 1: lean), nil when the entry was
settled here, or false and a task hash (or false alone) for process_entry to go on the full
path with (nothing: as a raw entry). ]]
function LEAN.process(c, ms, worker, policy, stream, queue, band, entry_id, f, first, mode,
                      requeue)
  if not LEAN.sound(c, first, f) then return false end
  local tid = LEAN.tid(queue, band, entry_id)
  if mode == nil then
    if in_cancelled(tid) then -- an id a cancel left in the set (a lean task is deleted instead)
      redis.pcall('SREM', k('cancelled'), tid)
      ack(stream, entry_id)
      return nil
    end
    local ttl = tonumber(f.ttl_seconds)
    if ttl and ms >= (tonumber(entry_id:match('^(%d+)')) or ms) + ttl * 1000 then
      ack(stream, entry_id)
      emit_task(c, ms, 'TASK_EXPIRED', tid, queue, f.task_type, 1, worker)
      return nil
    end
    if LIM.of(queue) then return false end -- limits keep per-task state: a full task
    local ma, to = resolve(policy, f.task_type, f.max_attempts, f.timeout_ms)
    emit_task(c, ms, 'TASK_STARTED', tid, queue, f.task_type, 1, worker)
    return {stream, entry_id, tid, queue, f.task_type, f.payload, 1, ma, to, 1}
  end
  -- A delivery after the first: the task may have a hash (a cancel request materialised it).
  local tkey = k('task', tid)
  local h, bad = read_task(tkey, tid)
  if bad then
    quarantine(bad, tkey, stream .. '/' .. entry_id, ms)
    ack(stream, entry_id)
    return nil
  end
  if h then return false, h end
  local owner, deliveries = LEAN.pending(stream, entry_id)
  if not deliveries then return nil end -- not pending (any more): nothing to adopt
  local ma, to = resolve(policy, f.task_type, f.max_attempts, f.timeout_ms)
  if mode == 'lost' then
    redis.call('XCLAIM', stream, GROUP, worker, 0, entry_id, 'IDLE', 0, 'JUSTID')
    return {stream, entry_id, tid, queue, f.task_type, f.payload, deliveries, ma, to, 1}
  end
  -- The attempt that was lost: XAUTOCLAIM counted this delivery already, recover did not.
  local lost = mode == 'reap' and math.max(1, deliveries - 1) or deliveries
  if requeue or lost >= ma or LIM.of(queue) then
    -- Ends or waits as a full task: the hash of the running attempt that was lost, which
    -- the full path adopts (or dead-letters as worker_lost, or requeues).
    return false, LEAN.materialise(ms, tid, queue, band, stream, entry_id, f, 'running', lost,
                                   {'worker_id', owner or '', 'max_attempts', fmt(ma),
                                    'timeout_ms', fmt(to), 'carrier', stream .. '/' .. entry_id,
                                    'started_at', fmt(ms)})
  end
  emit_task(c, ms, 'TASK_STARTED', tid, queue, f.task_type, lost + 1, worker)
  return {stream, entry_id, tid, queue, f.task_type, f.payload, lost + 1, ma, to, 1}
end

--[[ The first delivery (fetch) of a lean entry of the plain shape <ns>_enqueue writes
without options (lean 1 task_type T payload P), from its fields' values alone: no field
table, and only the checks that shape leaves (the name and the size of the payload; its
JSON was parsed at enqueue; no ttl, no own limits or options). The caller has found the
queue without limits. The claim is appended to `out`, the flat list of a group of fetch's
lean-claims (entry_id, task_type, payload, max_attempts, timeout_ms: no table per task);
returns true, nil when the entry was settled here (cancelled), or false for the general
path (an entry that is not sound). ]]
function LEAN.first(c, ms, worker, policy, stream, queue, band, entry_id, ttype, payload, out)
  if not valid_name128(ttype) or #payload > c.max_payload_bytes then return false end
  if call_any_cancelled ~= false or c.events ~= 'off' then
    local tid = queue .. ':' .. BAND_NAMES[band] .. ':' .. entry_id
    if in_cancelled(tid) then
      redis.pcall('SREM', k('cancelled'), tid)
      ack(stream, entry_id)
      return nil
    end
    emit_task(c, ms, 'TASK_STARTED', tid, queue, ttype, 1, worker)
  end
  local n = #out
  out[n + 1], out[n + 2], out[n + 3] = entry_id, ttype, payload
  out[n + 4], out[n + 5] = resolve(policy, ttype)
  return true
end

-- The queue's length counter (for QUEUE_FULL) and whether it is lean, in one MGET.
function LEAN.depth_mode(queue)
  local v = redis.pcall('MGET', qlen_key(queue), LEAN.mode_key(queue))
  if v.err then v = {} end
  local n = tonumber(v[1])
  if not n or n < 0 or n % 1 ~= 0 then n = qlen_resync(queue) end
  local lean = v[2] == 'lean'
  LEAN.modes[queue] = lean
  return n, lean
end

-- A lean task: its entry alone (the marker first, then what running it takes). Returns its
-- id; the caller counts the entry in the queue's counter.
function LEAN.add(c, ms, queue, ttype, payload, o)
  local stream, id = stream_key(queue, o.priority), nil
  if o.max_attempts or o.timeout_ms or o.ttl_seconds or o.limit_key then
    id = redis.call(unpack(options_set(
      {'XADD', stream, '*', 'lean', '1', 'task_type', ttype, 'payload', payload},
      'max_attempts', o.max_attempts and fmt(o.max_attempts),
      'timeout_ms', o.timeout_ms and fmt(o.timeout_ms),
      'ttl_seconds', o.ttl_seconds and fmt(o.ttl_seconds), 'limit_key', o.limit_key)))
  else
    id = redis.call('XADD', stream, '*', 'lean', '1', 'task_type', ttype, 'payload', payload)
  end
  local tid = LEAN.tid(queue, o.priority, id)
  emit_task(c, ms, 'TASK_QUEUED', tid, queue, ttype, 1, '')
  return tid
end

--[[ The end of a lean attempt that is not a plain success (finish, handback): the task is
materialised, running at `attempt` on `worker` (the hash a full task would have), when its
entry is a lean one pending for this worker at that attempt. Returns 'gone' (no such entry:
acknowledge it), 'stale' (another delivery holds it: leave it), or true. ]]
function LEAN.settle(ms, worker, stream, entry_id, attempt, policy)
  local e = redis.pcall('XRANGE', stream, entry_id, entry_id)
  if type(e) ~= 'table' or e.err or not e[1] then return 'gone' end
  local fields, f = e[1][2], {}
  for i = 1, #fields, 2 do f[fields[i]] = fields[i + 1] end
  local queue = stream_queue(stream)
  local band = tonumber(stream:match(':p(%d)$'))
  if not queue or not band or not (fields[1] == 'lean' or
      (f.task_type ~= nil and f.task_id == nil and f.idempotency_key == nil)) then
    return 'gone'
  end
  local owner, deliveries = LEAN.pending(stream, entry_id)
  if owner ~= worker or deliveries ~= attempt then return 'stale' end
  local ma, to = resolve(policy, f.task_type, f.max_attempts, f.timeout_ms)
  LEAN.materialise(ms, LEAN.tid(queue, band, entry_id), queue, band, stream, entry_id, f,
                   'running', attempt, {'worker_id', worker, 'max_attempts', fmt(ma),
                   'timeout_ms', fmt(to), 'carrier', stream .. '/' .. entry_id,
                   'started_at', fmt(ms)})
  return true
end

--[[ One stream entry delivered to `worker` (by XREADGROUP or XAUTOCLAIM): returns a
claimed task to run, or nil when the entry was settled here, or, with `requeue` (the
reaper has no slot for it), put back in its queue. A task hash task_poison() refuses is
dead-lettered (unless it is terminal already: then its entry is only acknowledged); a task
key of another type is quarantined. ]]
local function process_entry(c, ms, worker, policy, stream, queue, band, entry_id, fields,
                             requeue, mode)
  local source = stream .. '/' .. entry_id
  local tid, tkey, h, ent_attempt, bad, raw
  if #fields == 4 and fields[1] == 'task_id' and fields[3] == 'attempt' then
    tid, ent_attempt = fields[2], tonumber(fields[4]) -- dtq's own entry, the usual case
  else
    local f = {}
    for i = 1, #fields, 2 do f[fields[i]] = fields[i + 1] end
    raw = f.task_type ~= nil or f.attempt == nil or f.task_id == nil
    tid, ent_attempt = f.task_id, tonumber(f.attempt)
    if raw and LEAN.is(queue, fields[1], f) then
      local t, lh = LEAN.process(c, ms, worker, policy, stream, queue, band, entry_id, f,
                                 fields[1], mode, requeue)
      if t ~= false then return t end
      if lh then -- the task has a hash (now): the full path goes on from it
        tid, tkey, h, ent_attempt = lh.id, k('task', lh.id), lh, tonumber(lh.attempt)
      end
    end
    if raw and not h then
      tid, tkey, h = materialize_raw(c, ms, worker, stream, queue, band, entry_id, f, source)
      ent_attempt = 1
    end
  end
  if not raw then
    tkey = k('task', tid)
    h, bad = read_task(tkey, tid)
    if bad then quarantine(bad, tkey, source, ms) end
    if not h then ack(stream, entry_id) end -- expired, deleted, or quarantined
  end
  if not h then return nil end
  if not TERMINAL[h.status] then
    local why = task_poison(h)
    if why then
      dead_letter_poisoned(c, tkey, h, ms, why, worker)
      ack(stream, entry_id)
      return nil
    end
    -- dtq writes a task's entries only to its own stream (queue and band). An entry of
    -- dtq's shape elsewhere was forged (a raw XADD): absorbed, so that it cannot make a
    -- worker of another queue run the task, or let it jump ahead of its band.
    -- (`stream` is this queue's band `band`: comparing names spares building the key.)
    if not raw and h.carrier ~= source
       and (h.queue ~= queue or (tonumber(h.priority) or 5) ~= band) then
      ack(stream, entry_id)
      emit(c, ms, 'TASK_DUPLICATE_ABSORBED', h, worker, {entry_attempt = ent_attempt})
      return nil
    end
  end
  local admit = settle_or_admit(c, ms, worker, stream, entry_id, tid, tkey, h, ent_attempt, source)
  if not admit then return nil end
  local adopt, slots = admit == 'adopt', nil
  if not requeue then
    -- Limits: one lookup per queue and call; a task over a limit is deferred there (a
    -- claim), or requeued (an adoption: its lost attempt counts, as for any crash).
    local lims = LIM.of(h.queue)
    if lims then
      local ok
      ok, slots = LIM.gate(c, ms, worker, lims, stream, entry_id, tkey, h, adopt)
      if not ok then
        if adopt then requeue = true else return nil end
      end
    end
  end
  if requeue then
    requeue_reaped(c, ms, worker, stream, entry_id, tkey, h, adopt)
    return nil
  end
  return claim_task(c, ms, worker, policy, stream, entry_id, tid, tkey, h, adopt, source, slots)
end

--[[ The full lane's fast path (FULL.first): the claim of a task delivered by dtq's own entry
(task_id, attempt) whose hash is as create_task wrote it and untouched since: its ten
fields (HLEN), queued at attempt 1 in this queue and band. One HMGET of the fields that
decide (the whole hash as a Lua table, and the poison check's field by field conversions,
cost a third of a fetch); any other hash (options of its own, a later attempt, a limit's
or a requeue's fields, damage) takes the general path, process_entry, which reads it again
and decides. The claim is what claim_task writes; it is appended to `out`, the flat list
of a group of fetch's full-claims (entry_id, task_id, task_type, payload, attempt,
max_attempts, timeout_ms: no table per task). Returns true, or false for the general path.
The caller has found the queue valid and without limits. ]]
local FULL = {}
function FULL.first(c, ms, worker, policy, stream, queue, band, entry_id, tid, attempt, out)
  if attempt ~= '1' then return false end
  local tkey = k('task', tid)
  local h = redis.pcall('HMGET', tkey, 'id', 'queue', 'task_type', 'payload', 'status',
                        'attempt', 'priority', 'created_at')
  if h[5] ~= 'queued' or h[1] ~= tid or h[2] ~= queue or h[6] ~= '1' or h[7] ~= fmt(band) or
      not h[3] or not h[4] or not h[8] or redis.call('HLEN', tkey) ~= 10 then
    return false
  end
  local ttype, created = h[3], h[8]
  if #created > 15 or not created:find('^%d+$') then return false end
  if call_any_cancelled ~= false and in_cancelled(tid) then return false end
  local ma, to = resolve(policy, ttype)
  redis.call('HSET', tkey, 'status', 'running', 'worker_id', worker, 'started_at', fmt(ms),
             'max_attempts', fmt(ma), 'timeout_ms', fmt(to), 'carrier', stream .. '/' .. entry_id)
  emit_task(c, ms, 'TASK_STARTED', tid, queue, ttype, 1, worker)
  local i = #out
  out[i + 1], out[i + 2], out[i + 3], out[i + 4] = entry_id, tid, ttype, h[4]
  out[i + 5], out[i + 6], out[i + 7] = 1, ma, to
  return true
end

local function decode_policy_json(json)
  local ok, p = pcall(cjson.decode, json or '')
  if not ok or type(p) ~= 'table' or type(p.d) ~= 'table' then
    return {d = {DEFAULTS.default_max_attempts, DEFAULTS.default_timeout_ms}, t = {}}
  end
  if type(p.t) ~= 'table' then p.t = {} end
  return p
end

-- The last policy decoded, by its JSON text: a daemon sends the same text with every call
-- until its config changes, and the table is only read.
local policy_json, policy_decoded = nil, nil

local function decode_policy(json)
  if json ~= nil and json == policy_json then return policy_decoded end
  local p = decode_policy_json(json)
  policy_json, policy_decoded = json, p
  return p
end

local function ensure_group(stream)
  redis.pcall('XGROUP', 'CREATE', stream, GROUP, '0', 'MKSTREAM')
end

--[[ FCALL <ns>_fetch numkeys KEYS ARGV
KEYS: for each served queue, its paused key then its BANDS streams p9..p0.
ARGV: worker_id, count, policy-json, then the queue names in KEYS order.
Reads up to `count` (at most FETCH_MAX) new entries in strict order (queue order, then p9
first), settles the ones that must not run and claims the rest (queued -> running). Returns
{claimed-tasks, block-streams, entries-read, lean-claims}; block-streams (stream, last-id
pairs) is filled only when nothing was read, for the daemon's XREAD BLOCK; entries-read is
-1 when a missing group was recreated and the daemon should fetch again at once;
lean-claims holds the plain lean entries' claims (LEAN.first), flat, a group per stream:
stream, queue, band, m, then m times entry_id, task_type, payload, max_attempts,
timeout_ms (the task id is <queue>:p<band>:<entry_id>, the attempt 1). ]]
-- The fetch KEYS layout, the same as the daemon's (dtq_streams_fetch_keys in src/streams.c).
local FETCH_KEYS_PER_QUEUE, TOP_BAND = BANDS + 1, BANDS - 1
local function fetch_paused_key(keys, qi) return keys[(qi - 1) * FETCH_KEYS_PER_QUEUE + 1] end
local function fetch_stream_key(keys, qi, band)
  return keys[(qi - 1) * FETCH_KEYS_PER_QUEUE + 2 + (TOP_BAND - band)]
end

local FETCH_MAX = 1000 -- entries read per fetch call at most, whatever count says

local function fetch(keys, args)
  local worker, policy = args[1], decode_policy(args[3])
  local count = math.min(tonumber(args[2]) or 0, FETCH_MAX)
  local c = load_config()
  local ms = now_ms()
  local claimed, lean, full, read, created = {}, {}, {}, 0, false
  local nq = #args - 3
  if SCOPE.cluster then
    for qi = 1, nq do
      local bad = SCOPE.refuse(args[3 + qi])
      if bad then return bad end
    end
  end
  for qi = 1, nq do
    local queue = args[3 + qi]
    if redis.call('EXISTS', fetch_paused_key(keys, qi)) == 0 then
      for band = TOP_BAND, 0, -1 do
        if read >= count then break end
        local stream = fetch_stream_key(keys, qi, band)
        local res = redis.pcall('XREADGROUP', 'GROUP', GROUP, worker, 'COUNT', count - read,
                                'STREAMS', stream, '>')
        if type(res) == 'table' and res.err then
          -- A deleted stream or group is repaired (recreated, read next time); a key of
          -- another type is skipped (recreating it would fail on every call); any other
          -- error goes back to the daemon, which logs it and backs off.
          if string.find(res.err, 'NOGROUP', 1, true) then
            ensure_group(stream)
            queue_known(queue) -- a removed queue (<ns>_queue_remove) a daemon serves again
            created = true
          elseif not string.find(res.err, 'WRONGTYPE', 1, true) then
            -- What was claimed already must reach the daemon; the error can wait a call.
            if read == 0 then return redis.error_reply(res.err) end
            return {claimed, {}, read, lean, full}
          end
          res = nil
        end
        if res then
          -- Entries no Function wrote (neither dtq's two fields nor a lean entry's marker)
          -- count from their first delivery, before any of them is settled (deleted) below.
          local list, raw = res[1][2], 0
          for j = 1, #list do
            local f = list[j][2]
            if not ((#f == 4 and f[1] == 'task_id' and f[3] == 'attempt') or f[1] == 'lean') then
              raw = raw + 1
            end
          end
          qlen_add(queue, raw)
          -- Lean entries of the plain shape take LEAN.first while the queue has no limits:
          -- their claims go in this stream's group of lean-claims.
          -- Full tasks of the usual case take FULL.first, the same way: claims' group.
          local plain, head, fhead = not LIM.of(queue) and valid_name128(queue), #lean, #full
          lean[head + 1], lean[head + 2], lean[head + 3], lean[head + 4] = stream, queue, band, 0
          full[fhead + 1], full[fhead + 2], full[fhead + 3] = stream, queue, 0
          for j = 1, #list do
            read = read + 1
            local e = list[j]
            local f, t = e[2], false
            if plain and #f == 4 and f[1] == 'task_id' and f[3] == 'attempt' then
              t = FULL.first(c, ms, worker, policy, stream, queue, band, e[1], f[2], f[4], full)
            elseif plain and f[1] == 'lean' and f[3] == 'task_type' and f[5] == 'payload' and
                #f == 6 then
              t = LEAN.first(c, ms, worker, policy, stream, queue, band, e[1], f[4], f[6], lean)
            end
            if t == false then
              t = process_entry(c, ms, worker, policy, stream, queue, band, e[1], f)
              if t then claimed[#claimed + 1] = t end
            end
          end
          local m = (#lean - head - 4) / 5
          if m > 0 then
            lean[head + 4] = m
          else -- no group for this stream
            for i = head + 4, head + 1, -1 do lean[i] = nil end
          end
          m = (#full - fhead - 3) / 7
          if m > 0 then
            full[fhead + 3] = m
          else
            for i = fhead + 3, fhead + 1, -1 do full[i] = nil end
          end
        end
      end
    end
  end
  local block = {}
  if read == 0 and not created then
    for qi = 1, nq do
      if redis.call('EXISTS', fetch_paused_key(keys, qi)) == 0 then
        local len = 0
        for band = TOP_BAND, 0, -1 do
          local stream = fetch_stream_key(keys, qi, band)
          local last = redis.pcall('XREVRANGE', stream, '+', '-', 'COUNT', 1)
          if not last.err then -- a key of another type is not blocked on
            block[#block + 1] = stream
            block[#block + 1] = (last[1] and last[1][1]) or '0-0'
            if last[1] then len = len + redis.call('XLEN', stream) end
          end
        end
        -- Nothing undelivered: the queue's counter is its streams' length (qlen_key).
        local q = args[3 + qi]
        if valid_name128(q) and tonumber((redis.pcall('GET', qlen_key(q)))) ~= len then
          redis.call('SET', qlen_key(q), fmt(len))
        end
      end
    end
  end
  if created then read = -1 end -- tells the daemon to fetch again at once
  return {claimed, block, read, lean, full}
end

--[[ Consumers of dead workers are removed from the groups: no pending entry, idle longer
than min_idle_ms, and no live worker hash (its heartbeat expired). XINFO CONSUMERS is
O(consumers), which this pruning itself keeps small. A few dead names are also dropped
from <p>:workers per call. ]]
local function prune_consumers(keys, worker, min_idle)
  for _, stream in ipairs(keys) do
    local info = redis.pcall('XINFO', 'CONSUMERS', stream, GROUP)
    if type(info) == 'table' and not info.err then
      for _, cons in ipairs(info) do
        local f = {}
        for i = 1, #cons, 2 do f[cons[i]] = cons[i + 1] end
        if f.name ~= worker and tonumber(f.pending) == 0 and tonumber(f.idle) > min_idle and
            redis.call('EXISTS', k('worker', f.name)) == 0 then
          redis.call('XGROUP', 'DELCONSUMER', stream, GROUP, f.name)
        end
      end
    end
  end
  for _, w in ipairs(redis.call('SRANDMEMBER', k('workers'), 5)) do
    if redis.call('EXISTS', k('worker', w)) == 0 then redis.call('SREM', k('workers'), w) end
  end
end

--[[ FCALL <ns>_reap numkeys streams... ARGV: worker_id, min_idle_ms, run_slots,
min_count, policy-json, then for each stream its queue name, band and XAUTOCLAIM cursor.
Takes entries idle longer than min_idle_ms from lost workers and adopts or settles them:
up to run_slots adopted tasks are claimed to run here, and at least min_count entries are
examined every call whatever the free slots, the ones beyond run_slots requeued. The
cursors (0-0 to start) carry each stream's scan across calls, so live entries at the
head of a pending list cannot hide lost ones behind them. Returns {claimed-tasks,
next-cursors}, one cursor per stream. ]]
--[[ Whether reaps may adopt yet, as Redis saw the fleet: every reap (each daemon calls one
every visibility_timeout / 2) leaves its time in <p>:reaper. A reap that finds the last one
longer ago than that plus 2 s (or none) follows a time in which no daemon reached Redis: an
outage, or no daemon running. Running attempts of live daemons then look idle for as long
as it lasted, and their daemons may not have reconnected yet, so nothing is adopted until
min_idle after that reap (`up_since`), whichever daemon asks and however new it is. ]]
local function reap_may_adopt(ms, min_idle)
  local REAP_GAP_SLACK_MS = 2000
  local key = k('reaper')
  local st = redis.pcall('HMGET', key, 'last_reap', 'up_since')
  if st.err then
    redis.call('DEL', key) -- a key of another type: start over, as after an outage
    st = {}
  end
  local last, up = tonumber(st[1]), tonumber(st[2])
  if not last or not up or ms - last > min_idle / 2 + REAP_GAP_SLACK_MS then
    up = ms
    redis.call('HSET', key, 'last_reap', fmt(ms), 'up_since', fmt(ms))
  else
    redis.call('HSET', key, 'last_reap', fmt(ms))
  end
  return ms - up >= min_idle
end

local function reap(keys, args)
  local worker, min_idle = args[1], args[2]
  local run_slots, min_count = tonumber(args[3]), tonumber(args[4])
  local policy = decode_policy(args[5])
  local c = load_config()
  local ms = now_ms()
  if not reap_may_adopt(ms, tonumber(min_idle) or 0) then
    local cursors = {}
    for i = 1, #keys do cursors[i] = args[5 + (i - 1) * 3 + 3] end
    prune_consumers(keys, worker, tonumber(min_idle) or 0)
    return {{}, cursors}
  end
  local claimed, cursors, taken = {}, {}, 0
  local budget = math.max(run_slots, min_count)
  for i, stream in ipairs(keys) do
    local b = 5 + (i - 1) * 3
    local queue, band, cursor = args[b + 1], tonumber(args[b + 2]), args[b + 3]
    cursors[i] = cursor
    if taken < budget then
      local res = redis.pcall('XAUTOCLAIM', stream, GROUP, worker, min_idle, cursor, 'COUNT',
                              budget - taken)
      if type(res) == 'table' and not res.err then
        cursors[i] = res[1]
        for _, e in ipairs(res[2]) do
          if e[2] then
            taken = taken + 1
            local t = process_entry(c, ms, worker, policy, stream, queue, band, e[1], e[2],
                                    #claimed >= run_slots, 'reap')
            if t then claimed[#claimed + 1] = t end
          end
        end
        for _, gone in ipairs(res[3] or {}) do redis.call('XACK', stream, GROUP, gone) end
      end
    end
  end
  prune_consumers(keys, worker, tonumber(min_idle) or 0)
  return {claimed, cursors}
end

--[[ A pending entry of this worker that this process never heard of, because the reply
of the fetch or reap that claimed it was lost: if the claim is still this worker's, it is
handed over again at the same attempt (it never started: the reply never arrived), with
its idle time reset; otherwise the entry is processed like any delivered entry. ]]
local function reclaim_lost(c, ms, worker, policy, stream, queue, band, entry_id, fields, source)
  local f = {}
  for i = 1, #fields, 2 do f[fields[i]] = fields[i + 1] end
  local tid = f.task_id
  if f.task_type ~= nil or f.attempt == nil or tid == nil then
    tid = raw_task_id(f, queue, band, entry_id)
  end
  -- A task key of another type reads as nil here: process_entry quarantines it.
  local h = tid and hgetall_map(k('task', tid))
  if h and h.status == 'running' and h.worker_id == worker and h.carrier == source then
    redis.call('XCLAIM', stream, GROUP, worker, 0, entry_id, 'IDLE', 0, 'JUSTID')
    return {stream, entry_id, tid, h.queue, h.task_type, h.payload or '', tonumber(h.attempt),
            tonumber(h.max_attempts), tonumber(h.timeout_ms)}
  end
  return process_entry(c, ms, worker, policy, stream, queue, band, entry_id, fields, nil, 'lost')
end

--[[ FCALL <ns>_deregister numkeys streams... ARGV: worker_id — a stopping worker leaves:
its consumer is deleted from each group where it holds no pending entry (one that does
keeps it: deleting it would drop those entries), and its name leaves <p>:workers.
Returns the number of groups it left. ]]
local function deregister(keys, args)
  local worker, n = args[1], 0
  for _, stream in ipairs(keys) do
    local pend = redis.pcall('XPENDING', stream, GROUP, '-', '+', 1, worker)
    if type(pend) == 'table' and not pend.err and #pend == 0 then
      redis.call('XGROUP', 'DELCONSUMER', stream, GROUP, worker)
      n = n + 1
    end
  end
  redis.call('SREM', k('workers'), worker)
  return n
end

local RECOVER_MAX = 1000 -- pending entries looked at per stream and call

--[[ FCALL <ns>_recover numkeys streams... ARGV: worker_id, mode, policy-json, nknown,
known... (stream/entry-id of every attempt the daemon runs or holds a result for), then for
each stream its queue name and band. The entries pending for worker_id that are not known:
mode 'lost' (after a reconnect of the same process) hands them over again at the same
attempt (reclaim_lost); mode 'crashed' (a new process with a fixed worker_id, whose
predecessor died) treats them as a lost worker's, at once: adopted (attempt + 1) and
requeued, or dead-lettered when that was the last attempt. Returns claimed tasks. ]]
local function recover(keys, args)
  local worker, mode, policy = args[1], args[2], decode_policy(args[3])
  local nknown = tonumber(args[4]) or 0
  local known = {}
  for i = 1, nknown do known[args[4 + i]] = true end
  local b0 = 4 + nknown
  local c = load_config()
  local ms = now_ms()
  local claimed = {}
  for i, stream in ipairs(keys) do
    local queue, band = args[b0 + 2 * i - 1], tonumber(args[b0 + 2 * i])
    local pend = redis.pcall('XPENDING', stream, GROUP, '-', '+', RECOVER_MAX, worker)
    if type(pend) == 'table' and not pend.err then
      for _, p in ipairs(pend) do
        local id = p[1]
        local source = stream .. '/' .. id
        if not known[source] then
          local e = redis.call('XRANGE', stream, id, id)
          if #e == 0 then
            redis.call('XACK', stream, GROUP, id) -- the entry itself was deleted
          elseif mode == 'lost' then
            local t = reclaim_lost(c, ms, worker, policy, stream, queue, band, id, e[1][2],
                                   source)
            if t then claimed[#claimed + 1] = t end
          else
            process_entry(c, ms, worker, policy, stream, queue, band, id, e[1][2], true,
                          'crashed')
          end
        end
      end
    end
  end
  return claimed
end

--[[ The finish record: what the daemon's dtq_finish_record_encode() (src/finisher.c) sends
for one finished attempt, FINISH_RECORD_FIELDS values in this order. tests/it_scripts.c
pins the two sides together. ]]
local FINISH_RECORD_FIELDS = 11
local FINISH_OUTCOMES = {succeeded = true, retry = true, dead_letter = true, cancelled = true,
                         defer = true}
local RESULT_STATES = {none = true, full = true, truncated = true}

-- A record is read where it stands in ARGV (from index b + 1): a table per record cost
-- about a tenth of a finish.
local function finish_record_error(args, b)
  local tid, outcome, rstate = args[b + 1], args[b + 3], args[b + 7]
  if not tid or tid == '' then return 'task_id is empty' end
  if not num(args[b + 2]) then return 'attempt is not a number' end
  if not FINISH_OUTCOMES[outcome] then return 'unknown outcome ' .. tostring(outcome) end
  if not RESULT_STATES[rstate] then return 'unknown result_state ' .. tostring(rstate) end
  if (outcome == 'retry' or outcome == 'defer') and not tonumber(args[b + 10]) then
    return 'delay_ms is not a number'
  end
  if outcome == 'defer' and not tonumber(args[b + 11]) then return 'grace_ms is not a number' end
  return SCOPE.foreign_stream(args[b + 4])
end

-- Only what the guard and the writes need: the claim that this record ends already found
-- the hash sound (task_poison at fetch or reap), and a hash damaged since then fails the
-- guard below ('stale': nothing written), so its entry stays pending and the reaper's
-- task_poison settles it. Reading and checking all of it here cost ~15% of the Redis time.
-- limit_slots is read only when the task's queue has limits: a claim takes slots only then,
-- and the slots of a limit removed since are healed when the limit comes back (heal).
local FINISH_FIELDS = {'worker_id', 'cancel_requested', 'idempotency_key', 'status', 'queue',
                       'task_type', 'attempt'}

-- The task as the idempotency record and the rarer outcomes need it, from the HMGET of
-- FINISH_FIELDS (a success publishes its event from the values themselves).
local function finish_hash(tid, v)
  return {id = tid, worker_id = v[1] or nil, cancel_requested = v[2] or nil,
          idempotency_key = v[3] or nil, status = v[4] or nil, queue = v[5] or nil,
          task_type = v[6] or nil, attempt = v[7] or nil}
end

-- Applies the finish record at args[b + 1 ..]; returns the task's new status, 'stale',
-- 'gone', or 'quarantined' (the task key holds another type).
local function finish_one(c, ms, worker, args, b)
  local tid, outcome = args[b + 1], args[b + 3]
  local tkey = k('task', tid)
  local v = redis.pcall('HMGET', tkey, unpack(FINISH_FIELDS))
  if v.err then
    quarantine(wrong_type(tkey, 'hash'), tkey, args[b + 4] .. '/' .. args[b + 5], ms)
    return 'quarantined'
  end
  if not v[4] then
    -- A lean task's attempt that did not just succeed: it becomes a full task here.
    local st = LEAN.settle(ms, worker, args[b + 4], args[b + 5], tonumber(args[b + 2]),
                           LEAN.policy or decode_policy(nil))
    if st ~= true then return st end
    v = redis.call('HMGET', tkey, unpack(FINISH_FIELDS))
  end
  if v[4] ~= 'running' or v[1] ~= worker then return 'stale' end
  if (v[7] ~= args[b + 2] and num(v[7]) ~= num(args[b + 2])) or not valid_name128(v[5]) then
    return 'stale'
  end
  if LIM.of(v[5]) then -- the attempt ends, however it ends: its slots go back
    local slots = redis.call('HGET', tkey, 'limit_slots')
    if slots then LIM.release(slots, tid) end
  end
  if v[2] == '1' and outcome ~= 'succeeded' then outcome = 'cancelled' end
  if outcome == 'succeeded' then
    local rstate = args[b + 7]
    if rstate ~= 'none' then
      redis.call('SET', k('result', tid), args[b + 6], 'EX', fmt(c.result_retention_s))
    end
    if rstate == 'truncated' then
      redis.call('HSET', tkey, 'status', 'succeeded', 'finished_at', fmt(ms),
                 'result_truncated', '1')
    else
      redis.call('HSET', tkey, 'status', 'succeeded', 'finished_at', fmt(ms))
    end
    emit_task(c, ms, 'TASK_SUCCEEDED', tid, v[5], v[6], v[7], worker)
    redis.call('EXPIRE', tkey, fmt(c.task_retention_s))
    if v[3] then idem_set(finish_hash(tid, v), 'completed', ms) end
    return 'succeeded'
  end
  local h = finish_hash(tid, v)
  local err, class = args[b + 8], args[b + 9]
  if outcome == 'retry' then
    local delay = tonumber(args[b + 10])
    history_add(tkey, nil, v[7], ms, class, err, worker)
    redis.call('HSET', tkey, 'status', 'retrying', 'updated_at', fmt(ms), 'last_error', err,
               'last_error_class', class)
    emit(c, ms, 'TASK_RETRY_SCHEDULED', h, worker, {delay_ms = delay})
    redis.call('ZADD', k('retry', 'schedule'), fmt(ms + delay), tid)
    return 'retrying'
  elseif outcome == 'defer' then
    -- Not run here (no handler for its type): back to the schedule at the same attempt, for
    -- a worker that knows the type, while the grace since its enqueue lasts (Redis's clock,
    -- so every worker agrees); after that, dead-lettered like the record's error says.
    local created = tonumber(redis.call('HGET', tkey, 'created_at'))
    if created and ms < created + tonumber(args[b + 11]) then
      local delay = tonumber(args[b + 10])
      redis.call('HSET', tkey, 'status', 'pending', 'updated_at', fmt(ms), 'last_error', err,
                 'last_error_class', class)
      emit(c, ms, 'TASK_DEFERRED', h, worker, {delay_ms = delay})
      redis.call('ZADD', k('retry', 'schedule'), fmt(ms + delay), tid)
      return 'pending'
    end
  elseif outcome == 'cancelled' then
    redis.pcall('SREM', k('cancelled'), tid) -- a lean task's cancel request put it there
    history_add(tkey, nil, v[7], ms, 'cancelled', err, worker)
    finish_terminal(c, tkey, h, 'cancelled', ms)
    emit(c, ms, 'TASK_CANCELLED', h, worker)
    return 'cancelled'
  end
  return dead_letter(c, tkey, hgetall(tkey), ms, err, class, worker)
end

--[[ FCALL <ns>_finish 0 worker_id n record... — completes n attempts at once. Every record
is checked before anything is written. Per record, in this order: the hash's status, the
event, the follow-up write (result, schedule, DLQ), the idempotency record, and only then
the acknowledgement; all entries of a stream are acknowledged with one XACK and one XDEL.
Replies one word per record: the task's new status (succeeded, retrying, dead_lettered,
failed, cancelled), 'stale' when the task is no longer at this attempt with this worker
(nothing written, nothing acknowledged), or 'gone' when its hash no longer exists. ]]
local LEAN_RECORD_FIELDS = 4 -- stream entry_id task_type attempt

-- The successes of lean tasks (lean records from args[b + 1 ..]): their entries join the
-- call's acknowledgements; nothing else is written per task, unless events are on or the
-- task was asked to cancel while it ran (its hash then ends succeeded).
local function finish_lean(c, ms, worker, args, b, m, acks)
  local wanted = event_wanted(c, 'TASK_SUCCEEDED')
  for i = 1, m do
    local lb = b + (i - 1) * LEAN_RECORD_FIELDS
    local stream, id = args[lb + 1], args[lb + 2]
    local ids = acks[stream]
    if not ids then
      ids = {}
      acks[stream] = ids
    end
    ids[#ids + 1] = id
    if wanted or call_any_cancelled ~= false then
      local q = stream_queue(stream)
      local tid = q and (q .. ':' .. stream:sub(-2) .. ':' .. id)
      if tid and in_cancelled(tid) then
        redis.pcall('SREM', k('cancelled'), tid)
        local tkey = k('task', tid)
        if redis.call('HGET', tkey, 'status') == 'running' then
          redis.call('HSET', tkey, 'status', 'succeeded', 'finished_at', fmt(ms))
          redis.call('EXPIRE', tkey, fmt(c.task_retention_s))
        end
      end
      if tid and wanted then
        emit_task(c, ms, 'TASK_SUCCEEDED', tid, q, args[lb + 3], args[lb + 4], worker)
      end
    end
  end
end

local function finish(keys, args)
  local worker, n = args[1], tonumber(args[2])
  local nargs, m = n and 2 + n * FINISH_RECORD_FIELDS, 0
  if n and #args > nargs and args[nargs + 1] == 'lean' then
    -- The lean section: lean policy-json m (stream entry_id task_type attempt)...
    m = tonumber(args[nargs + 3])
    if not m or #args ~= nargs + 3 + m * LEAN_RECORD_FIELDS then
      return redis.error_reply('INVALID_ARGUMENT the lean section takes lean, policy-json, m ' ..
                               'and m records of 4 values')
    end
    LEAN.policy = decode_policy(args[nargs + 2])
  elseif not n or #args ~= nargs then
    return redis.error_reply('INVALID_ARGUMENT finish takes worker_id, n and n records of ' ..
                             fmt(FINISH_RECORD_FIELDS) .. ' values')
  end
  for i = 1, n do
    local err = finish_record_error(args, 2 + (i - 1) * FINISH_RECORD_FIELDS)
    if err then return redis.error_reply('INVALID_ARGUMENT record ' .. fmt(i) .. ': ' .. err) end
  end
  local c = load_config()
  local ms = now_ms()
  local out, acks = {}, {}
  for i = 1, n do
    local b = 2 + (i - 1) * FINISH_RECORD_FIELDS
    local verdict = finish_one(c, ms, worker, args, b)
    if verdict ~= 'stale' then
      local stream = args[b + 4]
      local ids = acks[stream]
      if not ids then
        ids = {}
        acks[stream] = ids
      end
      ids[#ids + 1] = args[b + 5]
    end
    out[i] = verdict
  end
  if m > 0 then
    finish_lean(c, ms, worker, args, nargs + 3, m, acks)
    out[n + 1] = m
  end
  for stream, ids in pairs(acks) do
    redis.call('XACK', stream, GROUP, unpack(ids))
    qlen_add(stream_queue(stream), -delete_acked(stream, ids))
  end
  return out
end

--[[ FCALL <ns>_handback 0 worker_id n (task_id attempt stream entry_id reason)...
Drain: gives interrupted attempts back for another worker at once: attempt + 1 and a
fresh entry, also after the last attempt (an interrupted attempt never ends a task). ]]
local function handback(keys, args)
  local worker, n = args[1], tonumber(args[2])
  if not n or #args ~= 2 + n * 5 then
    return redis.error_reply('INVALID_ARGUMENT handback takes worker_id, n and n records of 5 values')
  end
  for i = 0, n - 1 do
    local bad = SCOPE.foreign_stream(args[2 + i * 5 + 3])
    if bad then return redis.error_reply('INVALID_ARGUMENT record ' .. fmt(i + 1) .. ': ' .. bad) end
  end
  local c = load_config()
  local ms = now_ms()
  local out = {}
  for i = 0, n - 1 do
    local b = 2 + i * 5
    local tid, attempt, stream, entry_id = args[b + 1], tonumber(args[b + 2]), args[b + 3],
                                           args[b + 4]
    local tkey = k('task', tid)
    local h, bad = read_task(tkey, tid)
    if not h and not bad and
        LEAN.settle(ms, worker, stream, entry_id, attempt, decode_policy(nil)) == true then
      h = read_task(tkey, tid) -- a lean task: handed back as the full task it becomes
    end
    if bad then
      quarantine(bad, tkey, stream .. '/' .. entry_id, ms)
      out[#out + 1] = 'quarantined'
      ack(stream, entry_id)
    elseif h and h.status == 'running' and tonumber(h.attempt) == attempt and
        h.worker_id == worker then
      -- Even on its last attempt: a stop is the infrastructure's doing, never the task's,
      -- so the task runs once more (a new attempt number: none runs twice) and only its
      -- own outcome there can end it.
      history_add(tkey, h.history or false, attempt, ms, 'interrupted', args[b + 5], worker)
      if h.limit_slots then LIM.release(h.limit_slots, tid) end
      h.attempt = fmt(attempt + 1)
      redis.call('HSET', tkey, 'status', 'queued', 'attempt', h.attempt, 'updated_at', fmt(ms),
                 'last_error', args[b + 5], 'last_error_class', 'interrupted')
      add_entry(h, tid)
      emit(c, ms, 'TASK_QUEUED', h, worker, {reason = 'handback'})
      out[#out + 1] = 'queued'
      ack(stream, entry_id)
    else
      out[#out + 1] = 'stale'
    end
  end
  return out
end

local function opt_error(msg) return redis.error_reply('INVALID_ARGUMENT ' .. msg) end

local ENQUEUE_LIMITS = {priority = {0, BANDS - 1}, max_attempts = {1, MAX_ATTEMPTS},
                        timeout_ms = {1, 2^53}, delay_ms = {0, 2^53}, ttl_seconds = {1, 2^53}}

-- Enqueue options from args[first..]: a table, or nil and the INVALID_ARGUMENT message.
-- `per_task` allows the options that name one task (idempotency_key, task_id).
local function enqueue_options(c, args, first, per_task)
  local o = {priority = c.default_priority}
  if (#args - first + 1) % 2 ~= 0 then return nil, 'options come in name value pairs' end
  for i = first, #args, 2 do
    local name, v = args[i], args[i + 1]
    local lim = ENQUEUE_LIMITS[name]
    if lim then
      local n = parse_int(v, lim[1], lim[2])
      if not n then
        return nil, name .. ' must be an integer in [' .. fmt(lim[1]) .. ', ' .. fmt(lim[2]) .. ']'
      end
      o[name] = n
    elseif name == 'limit_key' then
      if not valid_name128(v) then return nil, 'limit_key must match [A-Za-z0-9._:-]{1,128}' end
      o.limit_key = v
    elseif per_task and name == 'idempotency_key' then
      if #v < 1 or #v > 256 then return nil, 'idempotency_key must be 1-256 bytes' end
      o.idempotency_key = v
    elseif per_task and name == 'task_id' then
      if not valid_name(v, 64) then return nil, 'task_id must match [A-Za-z0-9._:-]{1,64}' end
      o.task_id = v
    else
      return nil, 'unknown option ' .. name
    end
  end
  return o
end

-- Why a payload cannot be enqueued (an error reply), or nil.
local function payload_refusal(c, payload)
  if #payload > c.max_payload_bytes then
    return redis.error_reply('PAYLOAD_TOO_LARGE payload is ' .. fmt(#payload) ..
                             ' bytes, max_payload_bytes is ' .. fmt(c.max_payload_bytes))
  end
  if not pcall(cjson.decode, payload) then return opt_error('payload is not valid JSON') end
  return nil
end

local function queue_full(c, queue, depth)
  return redis.error_reply('QUEUE_FULL queue ' .. queue .. ' holds ' .. fmt(depth) ..
                           ' entries, max_queue_depth is ' .. fmt(c.max_queue_depth))
end

-- Writes a new task: its hash, then its stream entry (or its schedule entry when delayed).
-- Returns 1 when it wrote a stream entry, else 0: the caller adds it to the queue's counter.
local function create_task(c, ms, tid, queue, ttype, payload, o, tkey)
  local delayed = o.delay_ms and o.delay_ms > 0
  local now = fmt(ms)
  tkey = tkey or k('task', tid)
  -- The fields every task has, without an argument table (a Lua table per task cost 7,000
  -- of a bulk enqueue's 72,000 instructions per task); the optional ones after, if any.
  redis.call('HSET', tkey, 'id', tid, 'queue', queue, 'task_type', ttype, 'payload', payload,
             'status', delayed and 'pending' or 'queued', 'attempt', '1', 'priority',
             fmt(o.priority), 'created_at', now, 'metadata', '{}',
             'cancel_requested', '0')
  if o.max_attempts or o.timeout_ms or o.ttl_seconds or o.idempotency_key or o.limit_key then
    redis.call(unpack(options_set({'HSET', tkey},
      'own_max_attempts', o.max_attempts and fmt(o.max_attempts),
      'own_timeout_ms', o.timeout_ms and fmt(o.timeout_ms),
      'ttl_seconds', o.ttl_seconds and fmt(o.ttl_seconds),
      'idempotency_key', o.idempotency_key, 'limit_key', o.limit_key)))
  end
  if delayed then
    redis.call('ZADD', k('retry', 'schedule'), fmt(ms + o.delay_ms), tid)
    return 0
  end
  redis.call('XADD', stream_key(queue, o.priority), '*', 'task_id', tid, 'attempt', '1')
  emit_task(c, ms, 'TASK_QUEUED', tid, queue, ttype, 1, '')
  return 1
end

--[[ FCALL <ns>_enqueue 0 <queue> <task_type> <payload-json> [option value]...
Options: priority, max_attempts, timeout_ms, delay_ms, ttl_seconds, idempotency_key,
task_id, limit_key. Replies {task_id, 'created'|'duplicate'}. ]]
local function enqueue(keys, args)
  local queue, ttype, payload = args[1], args[2], args[3]
  if not valid_name128(queue) then
    return opt_error('queue name must match [A-Za-z0-9._:-]{1,128}')
  end
  local bad = SCOPE.refuse(queue)
  if bad then return bad end
  if not valid_name128(ttype) then
    return opt_error('task_type must match [A-Za-z0-9._:-]{1,128}')
  end
  if payload == nil then return opt_error('payload is required') end
  local c = enqueue_config()
  local o, oerr = enqueue_options(c, args, 4, true)
  if not o then return opt_error(oerr) end
  local refusal = payload_refusal(c, payload)
  if refusal then return refusal end
  local depth, lean = LEAN.depth_mode(queue)
  lean = lean and not (o.delay_ms and o.delay_ms > 0) -- a delayed task is a full one
  if lean and (o.idempotency_key or o.task_id) then
    return opt_error((o.task_id and 'task_id' or 'idempotency_key') .. ' is refused on lean ' ..
                     'queue ' .. queue .. ' (a lean task keeps no record by id)')
  end

  local ikey
  if o.idempotency_key then
    ikey = k('idempotency', queue, o.idempotency_key)
    local rec = redis.call('GET', ikey)
    if rec then
      local ok, r = pcall(cjson.decode, rec)
      if ok and type(r) == 'table' then
        if r.state == 'processing' then
          return redis.error_reply('IDEMPOTENCY_IN_PROGRESS ' .. tostring(r.task_id))
        end
        return {tostring(r.task_id), 'duplicate'}
      end
    end
  end
  if o.task_id and redis.call('EXISTS', k('task', o.task_id)) == 1 then
    return redis.error_reply('ID_EXISTS task ' .. o.task_id .. ' exists')
  end
  if depth >= c.max_queue_depth then return queue_full(c, queue, depth) end

  local ms = now_ms()
  if lean then
    local tid = LEAN.add(c, ms, queue, ttype, payload, o)
    qlen_add(queue, 1)
    queue_known(queue)
    return {tid, 'created'}
  end
  local tid, tkey = o.task_id, nil
  if not tid then tid, tkey = free_task_id(ms, fmt(ms) .. '-' .. next_seq()) end
  if not tid then return redis.error_reply('ID_EXISTS every id minted was taken (<p>:seq rewound?)') end
  qlen_add(queue, create_task(c, ms, tid, queue, ttype, payload, o, tkey))
  queue_known(queue)
  if ikey then
    redis.call('SET', ikey, cjson.encode({task_id = tid, state = 'processing', updated_at = ms}),
               'EX', fmt(c.idem_ttl_s))
  end
  return {tid, 'created'}
end

local ENQUEUE_BULK_MAX = 10000

--[[ FCALL <ns>_enqueue_bulk 0 <queue> <task_type> <n> <payload-json>... [option value]...
n tasks of one type into one queue in one call (at most ENQUEUE_BULK_MAX); the options
(priority, max_attempts, timeout_ms, delay_ms, ttl_seconds, limit_key) apply to every one. Ids are
minted as for <ns>_enqueue. Replies a flat array, one element per payload, in order: the
task id of the task created, or the error that payload alone got (PAYLOAD_TOO_LARGE,
INVALID_ARGUMENT, QUEUE_FULL once the queue is full); the others are created all the same.
(Not a {task_id, 'created'} pair per task: a table per task, and its conversion to RESP,
cost a fifth of the call.) An error in the arguments themselves refuses the whole call. ]]
local function enqueue_bulk(keys, args)
  local queue, ttype, n = args[1], args[2], parse_int(args[3], 0, ENQUEUE_BULK_MAX)
  if not valid_name128(queue) then
    return opt_error('queue name must match [A-Za-z0-9._:-]{1,128}')
  end
  local bad = SCOPE.refuse(queue)
  if bad then return bad end
  if not valid_name128(ttype) then
    return opt_error('task_type must match [A-Za-z0-9._:-]{1,128}')
  end
  if not n or #args < 3 + n then
    return opt_error('n must be the number of payloads that follow, at most ' ..
                     fmt(ENQUEUE_BULK_MAX))
  end
  local c = load_config()
  local o, oerr = enqueue_options(c, args, 4 + n, false)
  if not o then return opt_error(oerr) end
  local ms = now_ms()
  local depth, lean = LEAN.depth_mode(queue)
  local added = 0
  local out = {}
  if lean and not (o.delay_ms and o.delay_ms > 0) then -- lean: the entries alone, no ids minted
    for i = 1, n do
      local payload = args[3 + i]
      local refusal = payload_refusal(c, payload)
      if refusal then
        out[i] = refusal
      elseif depth >= c.max_queue_depth then
        out[i] = queue_full(c, queue, depth)
      else
        out[i] = LEAN.add(c, ms, queue, ttype, payload, o)
        depth, added = depth + 1, added + 1
      end
    end
    qlen_add(queue, added)
    queue_known(queue)
    return out
  end
  local seq = seq_incr(n) - n
  -- Whether any id of this call's range is taken, in one EXISTS per 1,000 ids rather
  -- than one per task; only then is each checked on its own (free_task_id).
  local taken, tids, tkeys, at = false, {}, {}, fmt(ms) .. '-'
  for first = 1, n, 1000 do
    local last = math.min(n, first + 999)
    for i = first, last do
      tids[i] = at .. fmt(seq + i)
      tkeys[i] = k('task', tids[i])
    end
    if redis.call('EXISTS', unpack(tkeys, first, last)) > 0 then taken = true end
  end
  for i = 1, n do
    local payload = args[3 + i]
    local refusal = payload_refusal(c, payload)
    if refusal then
      out[i] = refusal
    elseif depth >= c.max_queue_depth then
      out[i] = queue_full(c, queue, depth)
    else
      local tid, tkey = tids[i], tkeys[i]
      if taken then tid, tkey = free_task_id(ms, tid) end
      if tid then
        local one = create_task(c, ms, tid, queue, ttype, payload, o, tkey)
        depth, added = depth + one, added + one
        out[i] = tid
      else
        out[i] = redis.error_reply('ID_EXISTS every id minted was taken (<p>:seq rewound?)')
      end
    end
  end
  qlen_add(queue, added)
  queue_known(queue)
  return out
end
--[[ Scheduler. FCALL <ns>_sched_claim 2 <schedule> <claimed> <batch> <claim_timeout_ms>
Returns stale claims to the schedule (due now), then moves up to `batch` due members from
the schedule to the claimed set, scored with the claim time. Replies with the claimed ids,
then four more elements that the pass renders (its gauges, its next wake-up): the schedule's
and the claimed set's sizes as the call found them (before its moves, so the claimed size
counts the claims earlier passes left, never this one's, which its promote removes), the
schedule's soonest due time after the moves (epoch ms; nil when empty) and the Redis time
the claim used (epoch ms). The ids are strings, the four integers (or nil): the last four
elements are always these.
`batch` is at most SCHED_CLAIM_MAX, whatever the caller passes. ]]
local SCHED_CLAIM_MAX = 10000

local function sched_claim(keys, args)
  local batch = math.max(1, math.min(tonumber(args[1]) or 1, SCHED_CLAIM_MAX))
  local claim_timeout = tonumber(args[2])
  local ms = now_ms()
  local scheduled, claimed = redis.call('ZCARD', keys[1]), redis.call('ZCARD', keys[2])
  local stale = redis.call('ZRANGEBYSCORE', keys[2], '-inf', fmt(ms - claim_timeout), 'LIMIT',
                           0, batch)
  for _, id in ipairs(stale) do
    redis.call('ZREM', keys[2], id)
    redis.call('ZADD', keys[1], fmt(ms), id)
  end
  local due = redis.call('ZRANGEBYSCORE', keys[1], '-inf', fmt(ms), 'LIMIT', 0, batch)
  for _, id in ipairs(due) do
    redis.call('ZREM', keys[1], id)
    redis.call('ZADD', keys[2], fmt(ms), id)
  end
  local soonest = redis.call('ZRANGE', keys[1], 0, 0, 'WITHSCORES')
  local n = #due
  due[n + 1], due[n + 2] = scheduled, claimed
  due[n + 3] = soonest[2] and math.floor(tonumber(soonest[2])) or false
  due[n + 4] = ms
  return due
end

--[[ One task the scheduler (or <ns>_sched_run_now) takes out of the schedule, by its hash:
gone/terminal -> drop; cancelled -> cancelled; TTL passed -> expired; already queued ->
drop without XADD (an earlier pass got that far); retrying -> attempt+1, queued, XADD,
TASK_RETRIED; pending -> queued, XADD, TASK_QUEUED (`meta`: the event's metadata). A hash
task_poison() refuses is dead-lettered; a task key of another type is quarantined (source:
`source`). Returns 'queued', the terminal status it ended in, or 'gone', 'quarantined',
'dropped'. A queued task's queue is added to <prefix>:queues again (it may have been
removed while the task waited). ]]
local function promote_one(c, ms, worker, tid, source, meta)
  local tkey = k('task', tid)
  local h, bad = read_task(tkey, tid)
  if bad then
    quarantine(bad, tkey, source, ms)
    return 'quarantined'
  end
  if not h then return 'gone' end
  if TERMINAL[h.status] then return 'dropped' end
  local why = task_poison(h)
  if why then return dead_letter_poisoned(c, tkey, h, ms, why, worker) end
  local ttl = tonumber(h.ttl_seconds)
  if in_cancelled(tid) then
    redis.pcall('SREM', k('cancelled'), tid)
    finish_terminal(c, tkey, h, 'cancelled', ms)
    emit(c, ms, 'TASK_CANCELLED', h, worker)
    return 'cancelled'
  elseif (h.status == 'pending' or h.status == 'queued') and ttl and
         ms >= tonumber(h.created_at) + ttl * 1000 then
    finish_terminal(c, tkey, h, 'expired', ms)
    emit(c, ms, 'TASK_EXPIRED', h, worker)
    return 'expired'
  elseif h.status == 'retrying' or h.status == 'pending' then
    local etype = 'TASK_QUEUED'
    if h.status == 'retrying' then
      h.attempt = fmt(tonumber(h.attempt) + 1)
      etype = 'TASK_RETRIED'
    end
    redis.call('HSET', tkey, 'status', 'queued', 'attempt', h.attempt, 'updated_at', fmt(ms))
    add_entry(h, tid)
    queue_known(h.queue)
    emit(c, ms, etype, h, worker, meta)
    return 'queued'
  end
  return 'dropped'
end

--[[ FCALL <ns>_sched_promote 1 <claimed> <worker_id> id... — enqueues claimed tasks
(promote_one), each claim removed after its entry is written. Returns the number of
entries written. ]]
local function sched_promote(keys, args)
  local worker = args[1]
  local c = load_config()
  local ms = now_ms()
  local moved = 0
  for i = 2, #args do
    local tid = args[i]
    if promote_one(c, ms, worker, tid, NS .. '_sched_promote') == 'queued' then
      moved = moved + 1
    end
    redis.call('ZREM', keys[1], tid)
  end
  return moved
end

-- FCALL <ns>_lock_refresh 1 <lock> <worker_id> <ms>: compare-and-pexpire.
local function lock_refresh(keys, args)
  if redis.call('GET', keys[1]) == args[1] then
    redis.call('PEXPIRE', keys[1], args[2])
    return 1
  end
  return 0
end

-- FCALL <ns>_lock_release 1 <lock> <worker_id>: compare-and-delete.
local function lock_release(keys, args)
  if redis.call('GET', keys[1]) == args[1] then
    redis.call('DEL', keys[1])
    return 1
  end
  return 0
end

------------------------------------------------------------------------------ admin

--[[ One entry of <prefix>:stream:audit: who (`actor`; none or empty: redis-cli) did what
(`action`) to which task (`task_id`, and `queue`, the task's queue) or queue (`queue`, an
empty `task_id`), when (`ts`); `more` adds field/value pairs (purge_dlq's `removed`). ]]
local function audit(action, tid, actor, ms, queue, more)
  if actor == nil or actor == '' then actor = 'redis-cli' end
  local cmd = {'XADD', k('stream', 'audit'), 'MAXLEN', '~', '10000', '*', 'actor', actor,
               'action', action, 'task_id', tid or '', 'queue', queue or '', 'ts', fmt(ms)}
  for _, v in ipairs(more or {}) do cmd[#cmd + 1] = v end
  redis.call(unpack(cmd))
end

-- The queue named in a task hash, for the audit entry of an action on the task ('' when
-- the hash is gone or of another type).
local function task_queue(tid)
  local q = redis.pcall('HGET', k('task', tid), 'queue')
  return type(q) == 'string' and q or ''
end

local function dlq_remove(h)
  if h.dlq_entry and h.dlq_entry ~= '' then
    redis.call('XDEL', k('stream', 'dead-letter'), h.dlq_entry)
  end
end

--[[ Returns 'queued'; the status a poisoned task was dead-lettered in again (task_poison(),
nothing requeued); or nil, the error reply and, when the task key holds another type, the
reason (nothing written). ]]
local function requeue_one(c, tid, ms)
  local tkey = k('task', tid)
  local h, bad = read_task(tkey, tid)
  if bad then return nil, 'NOT_FOUND task ' .. tid .. ': ' .. bad, bad end
  if not h then return nil, 'NOT_FOUND task ' .. tid end
  if h.status ~= 'dead_lettered' and h.status ~= 'failed' then
    return nil, 'WRONG_STATE ' .. (h.status or 'missing')
  end
  local why = task_poison(h)
  if why then
    if h.dlq_entry and h.dlq_entry:find('^%d+%-%d+$') then dlq_remove(h) end
    return dead_letter_poisoned(c, tkey, h, ms, why, '')
  end
  local ok, meta = pcall(cjson.decode, h.metadata or '{}')
  if not ok or type(meta) ~= 'table' then meta = {} end
  meta.previous_attempts = tonumber(h.attempt) or 1
  dlq_remove(h)
  h.attempt = '1'
  h.status = 'queued'
  redis.call('HSET', tkey, 'status', 'queued', 'attempt', '1', 'metadata', cjson.encode(meta),
             'updated_at', fmt(ms), 'dlq_entry', '')
  redis.call('HDEL', tkey, 'finished_at', 'worker_id', 'carrier')
  redis.call('PERSIST', tkey)
  idem_set(h, 'processing', ms)
  add_entry(h, tid)
  queue_known(h.queue)
  emit(c, ms, 'TASK_QUEUED', h, '', {requeued = true})
  return 'queued'
end

-- FCALL <ns>_requeue 0 <task_id> [actor]
local function requeue(keys, args)
  if not args[1] then return opt_error('task_id is required') end
  local ms = now_ms()
  local r, err = requeue_one(load_config(), args[1], ms)
  if not r then return redis.error_reply(err) end
  audit('requeue', args[1], args[2], ms, task_queue(args[1]))
  return r
end

-- FCALL <ns>_requeue_dlq 0 [count [actor [cursor [class]]]]: one chunk, from the oldest
-- dead letter on. Requeues at most min(count, REQUEUE_DLQ_CHUNK) tasks (default: the chunk)
-- and examines at most REQUEUE_DLQ_SCAN entries, none added during the call. Entries whose
-- task is gone or moved on are dropped; a poisoned task is dead-lettered again (a new entry at
-- the end, counted against the chunk, not in the reply); an entry whose task key holds another
-- type is dropped and quarantined.
-- Without `cursor` it returns how many it requeued: callers loop until 0. With `cursor` (`-`
-- first, then the one it returned) the calls work through the entries there were at the first
-- one, of failure class `class` alone when given (the others stay), and it returns
-- {requeued, next cursor or nil once none of those is left, skipped}: callers loop until the
-- cursor is nil, knowing nothing of the chunk. A cursor is <last examined id>:<last id>.
local REQUEUE_DLQ_CHUNK, REQUEUE_DLQ_SCAN, REQUEUE_DLQ_PAGE = 1000, 10000, 100

local function requeue_dlq(keys, args)
  local count = REQUEUE_DLQ_CHUNK
  if args[1] and args[1] ~= '' then
    count = parse_int(args[1], 1, 2^53)
    if not count then return opt_error('count must be a positive integer') end
    count = math.min(count, REQUEUE_DLQ_CHUNK)
  end
  local cursor, class = args[3], args[4]
  if cursor == '' then cursor = nil end
  if class == '' then class = nil end
  local after, upto
  if cursor and cursor ~= '-' then
    after, upto = cursor:match('^(%d+%-%d+):(%d+%-%d+)$')
    if not after then return opt_error('cursor must be - or a cursor this Function returned') end
  end
  if class and not cursor then return opt_error('class needs a cursor') end
  if class and not valid_name(class, 64) then
    return opt_error('class must match [A-Za-z0-9._:-]{1,64}')
  end
  local c = load_config()
  local ms = now_ms()
  local dlq = k('stream', 'dead-letter')
  if not upto then
    local last = redis.call('XREVRANGE', dlq, '+', '-', 'COUNT', 1)
    if not last[1] then
      if cursor then return {0, false, 0} end
      return 0
    end
    upto = last[1][1] -- poisoned tasks dead-lettered again land after upto
  end
  local from = after and ('(' .. after) or '-'
  local done, used, seen, skipped = 0, 0, 0, 0
  while used < count and seen < REQUEUE_DLQ_SCAN do
    local page = redis.call('XRANGE', dlq, from, upto, 'COUNT',
                            math.min(REQUEUE_DLQ_PAGE, REQUEUE_DLQ_SCAN - seen))
    if #page == 0 then break end
    for _, e in ipairs(page) do
      if used >= count then break end
      seen = seen + 1
      from, after = '(' .. e[1], e[1]
      local f = {}
      for i = 1, #e[2], 2 do f[e[2][i]] = e[2][i + 1] end
      if not class or f.last_error_class == class then
        local r, err, bad
        if f.task_id then r, err, bad = requeue_one(c, f.task_id, ms) end
        if r == 'queued' then
          done, used = done + 1, used + 1
          audit('requeue_dlq', f.task_id, args[2], ms, task_queue(f.task_id))
        else
          -- Poisoned: dead-lettered again. Otherwise the task is gone, moved on, or its key
          -- holds another type: drop the stale record.
          if r then used = used + 1 end
          skipped = skipped + 1
          if bad then quarantine(bad, k('task', f.task_id), NS .. '_requeue_dlq', ms) end
          redis.call('XDEL', dlq, e[1])
        end
      end
    end
  end
  if not cursor then return done end
  after = after or '0-0'
  local more = redis.call('XRANGE', dlq, '(' .. after, upto, 'COUNT', 1)[1] ~= nil
  return {done, more and (after .. ':' .. upto) or false, skipped}
end

-- FCALL <ns>_discard 0 <task_id> [actor]
local function discard(keys, args)
  if not args[1] then return opt_error('task_id is required') end
  local tkey = k('task', args[1])
  local h = hgetall(tkey)
  if not h then return redis.error_reply('NOT_FOUND task ' .. args[1]) end
  if h.status ~= 'dead_lettered' then return redis.error_reply('WRONG_STATE ' .. h.status) end
  local c = load_config()
  local ms = now_ms()
  local ok, meta = pcall(cjson.decode, h.metadata or '{}')
  if not ok or type(meta) ~= 'table' then meta = {} end
  meta.discarded = true
  dlq_remove(h)
  redis.call('HSET', tkey, 'metadata', cjson.encode(meta), 'updated_at', fmt(ms), 'dlq_entry', '')
  redis.call('EXPIRE', tkey, fmt(c.task_retention_s))
  audit('discard', args[1], args[2], ms, h.queue)
  return 'discarded'
end

-- FCALL <ns>_purge_dlq 0 [actor]: every dead-letter entry; returns how many.
local function purge_dlq(keys, args)
  local n = redis.call('XLEN', k('stream', 'dead-letter'))
  redis.call('DEL', k('stream', 'dead-letter'))
  audit('purge_dlq', '', args[1], now_ms(), '', {'removed', fmt(n)})
  return n
end

--[[ The cancel of lean task `tid` (<queue>:p<band>:<entry-id>, no hash): a waiting entry is
deleted at once (cancelled); a delivered one (running) is materialised as the running task
it is, with cancel_requested, and its id put in <prefix>:cancelled (the lean success of
<ns>_finish looks there, so the hash cannot stay running). nil when tid is no lean task. ]]
local function cancel_lean(tid, actor)
  local q, bname, eid = tid:match('^(.+):p(%d):(%d+%-%d+)$')
  if not q or not valid_name128(q) or SCOPE.refuse(q) then return nil end
  local band = tonumber(bname)
  local stream = stream_key(q, band)
  local e = redis.pcall('XRANGE', stream, eid, eid)
  if type(e) ~= 'table' or e.err or not e[1] then return nil end
  local fields, f = e[1][2], {}
  for i = 1, #fields, 2 do f[fields[i]] = fields[i + 1] end
  if not LEAN.is(q, fields[1], f) then return nil end
  local c = load_config()
  local ms = now_ms()
  local owner, deliveries, idle = LEAN.pending(stream, eid)
  local reply
  if deliveries then
    LEAN.materialise(ms, tid, q, band, stream, eid, f, 'running', deliveries,
                     {'worker_id', owner, 'carrier', stream .. '/' .. eid, 'cancel_requested', '1',
                      'started_at', fmt(ms - (idle or 0)), 'updated_at', fmt(ms)})
    redis.call('SADD', k('cancelled'), tid)
    reply = 'cancel_requested'
  else
    qlen_add(q, -redis.call('XDEL', stream, eid))
    emit_task(c, ms, 'TASK_CANCELLED', tid, q, f.task_type, 1, '')
    reply = 'cancelled'
  end
  audit('cancel', tid, actor, ms, q)
  return reply
end

-- FCALL <ns>_cancel 0 <task_id> [actor]
local function cancel(keys, args)
  if not args[1] then return opt_error('task_id is required') end
  local tkey = k('task', args[1])
  local h = hgetall(tkey)
  if not h then
    return cancel_lean(args[1], args[2]) or redis.error_reply('NOT_FOUND task ' .. args[1])
  end
  local c = load_config()
  local ms = now_ms()
  local reply
  if h.status == 'queued' or h.status == 'pending' or h.status == 'retrying' then
    redis.call('ZREM', k('retry', 'schedule'), args[1])
    finish_terminal(c, tkey, h, 'cancelled', ms)
    emit(c, ms, 'TASK_CANCELLED', h, '')
    reply = 'cancelled'
  elseif h.status == 'running' then
    redis.call('HSET', tkey, 'cancel_requested', '1', 'updated_at', fmt(ms))
    reply = 'cancel_requested'
  else
    return redis.error_reply('WRONG_STATE ' .. h.status)
  end
  audit('cancel', args[1], args[2], ms, h.queue)
  return reply
end

-- FCALL <ns>_pause|<ns>_resume 0 <queue> [actor [create]]. A queue nobody has used (not in
-- <prefix>:queues, and not paused) is refused with NOT_FOUND unless `create` is given, which
-- adds it to <prefix>:queues: a mistyped name must not pass for a pause.
local function pause_resume(action, args)
  local q = args[1]
  if not valid_name(q, 128) then
    return opt_error('queue name must match [A-Za-z0-9._:-]{1,128}')
  end
  local bad = SCOPE.refuse(q)
  if bad then return bad end
  local create = args[3]
  if create ~= nil and create ~= '' and create ~= 'create' then
    return opt_error('the argument after the actor must be create or empty')
  end
  local pkey = k('queue', q, 'paused')
  if create == 'create' then
    queue_known(q)
  elseif redis.pcall('SISMEMBER', k('queues'), q) ~= 1 and redis.call('EXISTS', pkey) == 0 then
    return redis.error_reply('NOT_FOUND queue ' .. q .. ' is not in ' .. k('queues') ..
                             ' (pass create to ' .. action .. ' it anyway)')
  end
  if action == 'pause' then
    redis.call('SET', pkey, '1')
  else
    redis.call('DEL', pkey)
  end
  audit(action, '', args[2], now_ms(), q)
  return action == 'pause' and 'paused' or 'resumed'
end

local function pause(keys, args) return pause_resume('pause', args) end
local function resume(keys, args) return pause_resume('resume', args) end

--[[ FCALL <ns>_queue_mode 0 <actor> <queue> lean|full: the queue's mode (4.3), kept in
<prefix>:queue:<q>:mode (`lean`; no key: full). Entries already in the queue keep theirs.
Audited (queue_mode, with mode) when the mode changes. Replies the mode. ]]
local function queue_mode(keys, args)
  local actor, q, mode = args[1], args[2], args[3]
  if not valid_name(q, 128) then
    return opt_error('queue name must match [A-Za-z0-9._:-]{1,128}')
  end
  local bad = SCOPE.refuse(q)
  if bad then return bad end
  if mode ~= 'lean' and mode ~= 'full' then return opt_error('mode must be lean or full') end
  local key = LEAN.mode_key(q)
  local was = redis.pcall('GET', key) == 'lean' and 'lean' or 'full'
  if mode == 'lean' then
    if redis.pcall('GET', key) ~= 'lean' then redis.call('SET', key, 'lean') end
  else
    redis.call('DEL', key)
  end
  queue_known(q)
  if was ~= mode then audit('queue_mode', '', actor, now_ms(), q, {'mode', mode}) end
  return mode
end

-- Registers <ns>_<name>; the wrapper resets the event builder's per-call state.
local function reg(name, fn, ro)
  local wrapped = function(keys, args)
    call_seq, call_events, call_listeners, call_any_cancelled = nil, 0, nil, nil
    call_eid_prefix = nil
    fmt_memo = {}
    LIM.q = nil
    LEAN.modes, LEAN.policy = {}, nil
    local bad = SCOPE.enter(keys)
    if bad then return redis.error_reply(bad) end
    if SCOPE.cluster then
      -- The slot being moved (resharding): a node that is not the slot's owner runs the
      -- call only after ASKING, while the slot's keys are split between the two nodes; the
      -- call would read and write half a queue (and a key it creates would stop the move
      -- with BUSYKEY). There a command on two keys of the slot that do not exist is
      -- refused; so the call answers TRYAGAIN before it touches anything, until the move is
      -- over (the owner, with every key, answers EXISTS 0). The old owner never runs it:
      -- the tag is not a key, so a MIGRATING node answers ASK.
      local moving = redis.pcall('EXISTS', PREFIX, PREFIX .. ':moving')
      if type(moving) == 'table' and moving.err then
        -- (the importing node refuses it as "a non local key"; a permission is the
        -- caller's own problem, said as it is)
        if moving.err:sub(1, 6) == 'NOPERM' then return moving end
        return redis.error_reply('TRYAGAIN the slot of ' .. PREFIX .. ' is being moved to ' ..
                                 'this node: try again once the move is over')
      end
    end
    return fn(keys, args)
  end
  local spec = {function_name = NS .. '_' .. name, callback = wrapped}
  if ro then spec.flags = {'no-writes'} end
  redis.register_function(spec)
end

------------------------------------------------------------------------------ read model

--[[ The counts of a queue's ten streams, the one definition every reader uses (stats,
overview, queue_view): per band its length (XLEN) and pending count (XPENDING of the
group), a missing stream, a key of another type or a stream without the group counting 0;
per band depth = max(0, length - pending), and the queue's depth the sum of those. ]]
local function queue_counts(q)
  local r = {len = {}, pend = {}, depth_by_band = {}, length = 0, pending = 0, depth = 0}
  for band = 0, BANDS - 1 do
    local s, l, p = stream_key(q, band), 0, 0
    if redis.call('EXISTS', s) == 1 then
      local n = redis.pcall('XLEN', s)
      if type(n) == 'number' then l = n end
      local ok, x = pcall(redis.call, 'XPENDING', s, GROUP)
      if ok then p = x[1] end
    end
    local d = math.max(0, l - p)
    r.len[band], r.pend[band], r.depth_by_band[band] = l, p, d
    r.length, r.pending, r.depth = r.length + l, r.pending + p, r.depth + d
  end
  return r
end

-- The known queues, sorted (a <prefix>:queues of another type lists none). In the cluster
-- layout a queue's call knows its queue, and a {<ns>} call none (its answer is the global
-- part: the clients ask each queue of {<ns>}:queues and merge).
local function sorted_queues()
  if SCOPE.cluster then return SCOPE.queue and {SCOPE.queue} or {} end
  local names = redis.pcall('SMEMBERS', k('queues'))
  if names.err then names = {} end
  table.sort(names)
  return names
end

-- FCALL_RO <ns>_stats 0: flat name/value pairs (SPEC 8), for the queues in <prefix>:queues
-- (added by enqueue, by raw-entry fetch and by the daemon's setup): no keyspace SCAN.
local function stats(keys, args)
  local order = sorted_queues()
  local out = {}
  for _, q in ipairs(order) do
    local n = queue_counts(q)
    out[#out + 1] = 'queue:' .. q .. ':depth'
    out[#out + 1] = n.depth
    out[#out + 1] = 'queue:' .. q .. ':pending'
    out[#out + 1] = n.pending
    out[#out + 1] = 'queue:' .. q .. ':paused'
    out[#out + 1] = redis.call('EXISTS', k('queue', q, 'paused'))
    out[#out + 1] = 'queue:' .. q .. ':mode'
    out[#out + 1] = LEAN.on(q) and 'lean' or 'full'
  end
  local live = 0
  for _, w in ipairs(redis.call('SMEMBERS', k('workers'))) do
    live = live + redis.call('EXISTS', k('worker', w))
  end
  for _, kv in ipairs({{'scheduled', redis.call('ZCARD', k('retry', 'schedule'))},
                       {'claimed', redis.call('ZCARD', k('retry', 'claimed'))},
                       {'dlq', redis.call('XLEN', k('stream', 'dead-letter'))},
                       {'workers', live}}) do
    out[#out + 1] = kv[1]
    out[#out + 1] = kv[2]
  end
  return out
end

--[[ The read model: FCALL_RO Functions that answer what dtq-web and dtqctl show as one JSON
text, so that its shape is spelled here alone and clients parse and render it
(docs/reference.md 5.5). Every one is bounded per call and reads no keyspace SCAN. ]]
local READ = { -- the bounds of the read model
  QUEUES_MAX = 1000,    -- queues, and workers, that one overview or workers reports
  SCHEDULE_SCAN = 1000, -- schedule members an overview counts per queue
  LIST_MAX = 200,       -- waiting, and running, entries of a queue_view
  PAGE_MAX = 500,       -- entries of a dead_letters or audit_page page
  SCAN_MAX = 10000,     -- entries a filtered page or a task's event search examines
  FIELD_MAX = 2048,     -- bytes of a value a page shows, by default
  FILTER_PAGE = 500,    -- entries read per XRANGE by a filtered page
  EVENTS_PAGE = 1000,   -- events read per XREVRANGE by task_view
  DLQ_SCAN = 1000,      -- dead letters (the newest) a metrics call counts by queue and class
  DLQ_PAGE = 100,       -- dead letters read per XREVRANGE by metrics
}

--[[ cjson (Redis 7.0) encodes an empty table as {} and cannot embed JSON text as it is.
Both are marked by a one-key object whose key begins with a NUL byte, put in place in the
encoded text: {"\u0000dtq":0} becomes [], {"\u0000dtq":<i>} the JSON text raws[i]. No
object built here has such a key with a number (names are valid names; hash and stream
values are strings), and decoded JSON that holds a NUL is not decoded (json_decode). ]]
local MARK = '\0dtq'
local EMPTY_ARRAY = {[MARK] = 0}
local function arr(t)
  if next(t) == nil then return EMPTY_ARRAY end
  return t
end

local function json_encode(v, raws)
  return (cjson.encode(v):gsub('{"\\u0000dtq":(%d+)}', function(i)
    if i == '0' then return '[]' end
    return raws[tonumber(i)]
  end))
end

-- JSON text from Redis (a result, an event) decoded, or nil: not JSON as RFC 8259 writes
-- numbers (cjson would take 0x10, inf, nan), or holding a NUL (which could forge a mark).
local function json_decode(text)
  if text:find('\0', 1, true) or text:find('\\u0000', 1, true) then return nil end
  cjson.decode_invalid_numbers(false)
  local ok, v = pcall(cjson.decode, text)
  cjson.decode_invalid_numbers(true)
  if ok then return v end
  return nil
end

-- Whether JSON text json_decode took can be embedded as it is: cjson also takes raw
-- control characters in strings and numbers such as 1. or -.5, which JSON does not.
local function json_verbatim(text)
  local bad = false
  local t = text:gsub('\\.', '') -- escapes out: the quotes left pair up
  t = t:gsub('"[^"]*"', function(s)
    if s:find('[%z\1-\31]') then bad = true end
    return '0'
  end)
  return not bad and not t:find('%D%.') and not t:find('^%.') and not t:find('%.%D') and
         not t:find('%.$')
end

-- strtoll's reading of a hash value: its leading integer, 0 when there is none.
local function int_of(v)
  return tonumber(type(v) == 'string' and v:match('^%s*([-+]?%d+)') or '') or 0
end

local function id_ms(id) return tonumber(id:match('^(%d+)')) or 0 end

-- A stream id <ms>-<seq> or <ms>, as clients pass cursors.
local function valid_stream_id(s)
  return type(s) == 'string' and (s:match('^%d+$') or s:match('^%d+%-%d+$')) ~= nil and
         #s <= 41
end

-- A flat field/value list (a stream entry's fields) as an object of strings, the first of
-- equal fields kept; values longer than `cap` bytes (nil: no cap) cut, <field>_truncated set.
local function fields_object(flat, cap)
  local o = {}
  for i = 1, #flat - 1, 2 do
    local f, v = flat[i], flat[i + 1]
    if o[f] == nil then
      if cap and #v > cap then
        o[f], o[f .. '_truncated'] = v:sub(1, cap), true
      else
        o[f] = v
      end
    end
  end
  return o
end

-- A worker hash as clients show it: the hash fields (but worker_id), these typed as
-- numbers; heartbeat_age_ms from the Redis clock; the q:<queue>:<counter> fields of the
-- heartbeat as numbers under queues.<queue>.<counter>.
local WORKER_NUMBERS = {pid = true, started_at = true, last_heartbeat = true,
                        active_tasks = true, concurrency = true, tasks_processed = true,
                        tasks_failed = true, tasks_retried = true}
local WORKER_OWN = {worker_id = true, id = true, queues = true, heartbeat_age_ms = true}
local function worker_object(id, h, now)
  local o, queues = {id = id}, {}
  for f, v in pairs(h) do
    if f:sub(1, 2) == 'q:' then
      local q, kind = f:match('^q:(.+):([^:]+)$')
      if q and valid_name(q, 128) and valid_name(kind, 64) then
        queues[q] = queues[q] or {}
        queues[q][kind] = int_of(v)
      end
    elseif not WORKER_OWN[f] then
      o[f] = WORKER_NUMBERS[f] and int_of(v) or v
    end
  end
  if h.last_heartbeat then o.heartbeat_age_ms = now - int_of(h.last_heartbeat) end
  o.queues = queues
  return o
end

-- The members of <prefix>:workers, sorted, at most READ.QUEUES_MAX: the live ones as
-- worker objects, how many were left out, and how many have no hash any more (expired).
local function live_workers(now)
  local ids = redis.pcall('SMEMBERS', k('workers'))
  if ids.err then ids = {} end
  table.sort(ids)
  local list, gone = {}, 0
  for i = 1, math.min(#ids, READ.QUEUES_MAX) do
    local h = hgetall_map(k('worker', ids[i])) -- another type reads as gone
    if h then list[#list + 1] = worker_object(ids[i], h, now) else gone = gone + 1 end
  end
  return arr(list), #ids > READ.QUEUES_MAX, gone
end

-- The integer reply of a read, 0 for a key of another type.
local function count_of(...)
  local n = redis.pcall(...)
  return type(n) == 'number' and n or 0
end

-- The group's last-delivered id of a stream, nil when it has no group.
local function last_delivered(s)
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', s)
  if not ok then return nil end
  for _, g in ipairs(groups) do
    local f = {}
    for i = 1, #g - 1, 2 do f[g[i]] = g[i + 1] end
    if f.name == GROUP then return f['last-delivered-id'] end
  end
  return nil
end

-- The read Functions, in a block of their own: Lua allows a function (the library's main
-- chunk included) 200 local variables, so each group of Functions keeps its locals to
-- itself and registers what it defines; what others share stays above.
do
-- The schedule's size, and per queue its members among the READ.SCHEDULE_SCAN soonest due.
local function scheduled_by_queue()
  local skey = k('retry', 'schedule')
  local scheduled, per = count_of('ZCARD', skey), {}
  local due = redis.pcall('ZRANGE', skey, 0, READ.SCHEDULE_SCAN - 1)
  if due.err then due = {} end
  for _, tid in ipairs(due) do
    local q = redis.pcall('HGET', k('task', tid), 'queue')
    if type(q) == 'string' then per[q] = (per[q] or 0) + 1 end
  end
  return scheduled, per
end

--[[ FCALL_RO <ns>_overview 0: the queues (sorted, at most READ.QUEUES_MAX) with their
counts, the live workers, the scheduler, the dead letters and the events settings. ]]
local function overview(keys, args)
  local now, c = now_ms(), load_config()
  local names = sorted_queues()
  local scheduled, per = scheduled_by_queue()
  local queues = {}
  for i = 1, math.min(#names, READ.QUEUES_MAX) do
    local q = names[i]
    local n = queue_counts(q)
    local d, p = {}, {}
    for band = 0, BANDS - 1 do d[band + 1], p[band + 1] = n.depth_by_band[band], n.pend[band] end
    queues[i] = {name = q, paused = redis.call('EXISTS', k('queue', q, 'paused')) == 1,
                 mode = LEAN.on(q) and 'lean' or 'full',
                 depth = n.depth, pending = n.pending, length = n.length, depth_by_band = d,
                 pending_by_band = p, scheduled = per[q] or 0}
  end
  local wlist, wmore, gone = live_workers(now)
  local leader = redis.pcall('GET', k('lock', 'scheduler'))
  return json_encode({
    time_ms = now, queues = arr(queues), queues_truncated = #names > READ.QUEUES_MAX,
    workers = wlist, workers_truncated = wmore, workers_gone = gone,
    scheduler = {leader = type(leader) == 'string' and leader or cjson.null,
                 scheduled = scheduled, claimed = count_of('ZCARD', k('retry', 'claimed')),
                 by_queue_complete = scheduled <= READ.SCHEDULE_SCAN},
    dlq = {length = count_of('XLEN', k('stream', 'dead-letter'))},
    events = {level = c.events, stream = c.events_stream_maxlen > 0 or
                                         redis.call('EXISTS', k('stream', 'events')) == 1}})
end

-- FCALL_RO <ns>_workers 0: the live workers, as in the overview.
local function workers(keys, args)
  local now = now_ms()
  local list, more, gone = live_workers(now)
  return json_encode({time_ms = now, workers = list, workers_truncated = more,
                      workers_gone = gone})
end

-- A stream entry of queue `queue`, band `band`, as queue_view lists it: the task fetch
-- would run for it (raw_task_id for a producer's raw entry).
local function entry_item(queue, band, e)
  local m = {}
  for i = 1, #e[2] - 1, 2 do m[e[2][i]] = e[2][i + 1] end -- as process_entry reads them
  local raw = m.task_type ~= nil or m.attempt == nil or m.task_id == nil
  return {band = band, entry_id = e[1], enqueued_ms = id_ms(e[1]), raw = raw,
          task_id = raw and raw_task_id(m, queue, band, e[1]) or m.task_id,
          attempt = m.attempt and int_of(m.attempt) or nil, task_type = m.task_type}
end

-- status, task_type and attempt of a listed item, from its task hash when there is one.
local function item_task(o)
  if not o.task_id then return end
  local v = redis.pcall('HMGET', k('task', o.task_id), 'status', 'task_type', 'attempt')
  if v.err then return end
  if v[1] then o.status = v[1] end
  if v[2] then o.task_type = v[2] end
  if v[3] then o.attempt = int_of(v[3]) end
end

--[[ FCALL_RO <ns>_queue_view 0 <queue> [limit]: a queue's bands (p9 first), what workers
will read next (waiting) and what they hold (running), at most `limit` of each (1-200,
default 20). NOT_FOUND when the queue is not in <prefix>:queues. ]]
local function queue_view(keys, args)
  local q = args[1]
  if not valid_name(q, 128) then
    return opt_error('queue name must match [A-Za-z0-9._:-]{1,128}')
  end
  local bad = SCOPE.refuse(q)
  if bad then return bad end
  local limit = 20
  if args[2] and args[2] ~= '' then
    limit = parse_int(args[2], 1, READ.LIST_MAX)
    if not limit then return opt_error('limit must be an integer in [1, 200]') end
  end
  if redis.pcall('SISMEMBER', k('queues'), q) ~= 1 then
    return redis.error_reply('NOT_FOUND queue ' .. q .. ' is not in ' .. k('queues'))
  end
  local n = queue_counts(q)
  local bands, waiting, running = {}, {}, {}
  for band = BANDS - 1, 0, -1 do
    bands[#bands + 1] = {band = band, length = n.len[band], pending = n.pend[band],
                         depth = n.depth_by_band[band]}
    local s = stream_key(q, band)
    if n.depth_by_band[band] > 0 and #waiting < limit then
      local from = last_delivered(s)
      local page = redis.pcall('XRANGE', s, from and ('(' .. from) or '-', '+', 'COUNT',
                               limit - #waiting)
      if page.err then page = {} end
      for _, e in ipairs(page) do waiting[#waiting + 1] = entry_item(q, band, e) end
    end
    if n.pend[band] > 0 and #running < limit then
      local ok, pend = pcall(redis.call, 'XPENDING', s, GROUP, '-', '+', limit - #running)
      for _, p in ipairs(ok and pend or {}) do
        local o = {band = band, entry_id = p[1], worker_id = p[2], idle_ms = p[3],
                   deliveries = p[4]}
        local e = redis.call('XRANGE', s, p[1], p[1], 'COUNT', 1)[1]
        if e then
          local it = entry_item(q, band, e)
          o.task_id, o.enqueued_ms = it.task_id, it.enqueued_ms
        end
        running[#running + 1] = o
      end
    end
  end
  for _, o in ipairs(waiting) do item_task(o) end
  for _, o in ipairs(running) do item_task(o) end
  return json_encode({name = q, paused = redis.call('EXISTS', k('queue', q, 'paused')) == 1,
                      mode = LEAN.on(q) and 'lean' or 'full', length = n.length, depth = n.depth, pending = n.pending, bands = bands,
                      count = limit, waiting = arr(waiting), running = arr(running)})
end

--[[ FCALL_RO <ns>_task_view 0 <task_id> [events_max]: the task hash (its fields as Redis
holds them, strings), its due time (schedule or claimed set), its result, its dead-letter
entry, and its events from
<prefix>:stream:events, searched from the newest back to its creation, at most events_max
entries (0-10000, default 10000). NOT_FOUND when there is no task hash. ]]
local function task_view(keys, args)
  local tid = args[1]
  if not valid_name(tid, 256) then
    return opt_error('task_id must match [A-Za-z0-9._:-]{1,256}')
  end
  local scan_max = READ.SCAN_MAX
  if args[2] and args[2] ~= '' then
    scan_max = parse_int(args[2], 0, READ.SCAN_MAX)
    if not scan_max then return opt_error('events_max must be an integer in [0, 10000]') end
  end
  local tkey = k('task', tid)
  local h, err = hgetall_map(tkey)
  if err then
    return redis.error_reply('NOT_FOUND task ' .. tid .. ': ' .. wrong_type(tkey, 'hash'))
  end
  if not h then return redis.error_reply('NOT_FOUND task ' .. tid) end
  -- updated_at: the latest change, also those written with a time of their own only
  -- (creation, claim, end: docs/reference.md 3.2)
  local upd = math.max(int_of(h.updated_at), int_of(h.created_at), int_of(h.started_at),
                       int_of(h.finished_at))
  if upd > 0 then h.updated_at = fmt(upd) end
  local raws = {}
  local o = {id = tid, status = h.status or '', fields = h, result = cjson.null,
             ttl_ms = redis.call('PTTL', tkey), dead_letter = cjson.null, due_ms = cjson.null,
             due_claimed = false}
  -- due: its score in the schedule; once a scheduler pass took it, the claim time
  local due = redis.pcall('ZSCORE', k('retry', 'schedule'), tid)
  if type(due) ~= 'string' then
    due = redis.pcall('ZSCORE', k('retry', 'claimed'), tid)
    o.due_claimed = type(due) == 'string'
  end
  if type(due) == 'string' then o.due_ms = tonumber(due) end
  local res = redis.pcall('GET', k('result', tid))
  if type(res) == 'string' then
    local v = json_decode(res)
    o.result_is_json = v ~= nil
    if v == nil then
      o.result = res
    elseif json_verbatim(res) then
      raws[1], o.result = res, {[MARK] = 1}
    else
      o.result = v
    end
  end
  if valid_stream_id(h.dlq_entry) then
    local e = redis.pcall('XRANGE', k('stream', 'dead-letter'), h.dlq_entry, h.dlq_entry)
    if not e.err and #e == 1 then
      o.dead_letter = fields_object(e[1][2])
      o.dead_letter.entry_id = e[1][1]
    end
  end
  -- events: newest first, page by page, back to the task's creation or scan_max entries
  local ekey, created = k('stream', 'events'), int_of(h.created_at)
  local events_stream = redis.call('EXISTS', ekey) == 1
  local found, scanned, cursor, full = {}, 0, nil, true
  local needle = '"task_id":' .. cjson.encode(tid)
  while events_stream and full and scanned < scan_max and
        not (cursor and id_ms(cursor) < created) do
    local want = math.min(READ.EVENTS_PAGE, scan_max - scanned)
    local page = redis.pcall('XREVRANGE', ekey, cursor and ('(' .. cursor) or '+', '-',
                             'COUNT', want)
    if page.err then page = {} end
    full = #page == want
    for _, e in ipairs(page) do
      scanned, cursor = scanned + 1, e[1]
      local f = e[2]
      for i = 1, #f - 1, 2 do
        if f[i] == 'event' then
          if f[i + 1]:find(needle, 1, true) then
            local ev = json_decode(f[i + 1])
            if type(ev) == 'table' and ev.task_id == tid then
              ev.stream_id = e[1]
              found[#found + 1] = ev
            end
          end
          break
        end
      end
    end
  end
  local events = {}
  for i = #found, 1, -1 do events[#events + 1] = found[i] end -- oldest first
  o.events, o.events_stream, o.events_scanned = arr(events), events_stream, scanned
  -- the attempt history (history_json), from the hash alone: [] when there is none
  local attempts, hist = {}, type(h.history) == 'string' and json_decode(h.history)
  if type(hist) == 'table' then
    for i = 1, #hist do
      if type(hist[i]) == 'table' then attempts[#attempts + 1] = hist[i] end
    end
  end
  o.attempts = arr(attempts)
  o.events_complete = not events_stream or not full or
                      (cursor ~= nil and id_ms(cursor) < created)
  return json_encode(o, raws)
end

--[[ One page of a stream for the pagers below, newest or oldest first, after `cursor`
(exclusive; nil: from the end or the start), optionally only the entries whose `field`
equals `value`: pages are read until `count` entries matched, the stream ended, or
READ.SCAN_MAX entries were examined. next_cursor is set only when more may follow. ]]
local function stream_page(key, cursor, count, newest, field, value, cap)
  local size = value and READ.FILTER_PAGE or count + 1 -- one more: is there a next page?
  local entries, matched, scanned, last, next_cursor, done = {}, 0, 0, nil, nil, false
  while not done do
    local from = last or cursor
    local want = math.min(size, READ.SCAN_MAX - scanned + 1)
    local page
    if newest then
      page = redis.pcall('XREVRANGE', key, from and ('(' .. from) or '+', '-', 'COUNT', want)
    else
      page = redis.pcall('XRANGE', key, from and ('(' .. from) or '-', '+', 'COUNT', want)
    end
    if page.err then page = {} end
    for _, e in ipairs(page) do
      if matched == count or scanned == READ.SCAN_MAX then -- more follow: go on from here
        next_cursor, done = last, true
        break
      end
      scanned, last = scanned + 1, e[1]
      local match = not value
      if value then
        for i = 1, #e[2] - 1, 2 do
          if e[2][i] == field then
            match = e[2][i + 1] == value
            break
          end
        end
      end
      if match then
        local o = fields_object(e[2], cap)
        o.entry_id, o.entry_ms = e[1], id_ms(e[1])
        entries[#entries + 1] = o
        matched = matched + 1
      end
    end
    if #page < want then done = true end
  end
  return json_encode({total = count_of('XLEN', key), count = count,
                      order = newest and 'newest' or 'oldest', filter = value or cjson.null,
                      scanned = scanned, entries = arr(entries),
                      next_cursor = next_cursor or cjson.null})
end

-- The arguments of the pagers: <cursor|-> [count [order [filter [field_max]]]].
local function page_args(args, filter_name)
  local cursor, count, newest, value, cap = args[1], 50, true, args[4], READ.FIELD_MAX
  if cursor == nil or cursor == '' or cursor == '-' then
    cursor = nil
  elseif not valid_stream_id(cursor) then
    return nil, opt_error('cursor must be a stream id (<ms>-<seq>) from next_cursor, or -')
  end
  if args[2] and args[2] ~= '' then
    count = parse_int(args[2], 1, READ.PAGE_MAX)
    if not count then return nil, opt_error('count must be an integer in [1, 500]') end
  end
  if args[3] and args[3] ~= '' then
    if args[3] ~= 'newest' and args[3] ~= 'oldest' then
      return nil, opt_error('order must be newest or oldest')
    end
    newest = args[3] == 'newest'
  end
  if value == '' then value = nil end
  if value ~= nil and not valid_name(value, 256) then
    return nil, opt_error(filter_name .. ' must match [A-Za-z0-9._:-]{1,256}')
  end
  if args[5] and args[5] ~= '' then
    cap = parse_int(args[5], 0, 2^31)
    if not cap then return nil, opt_error('field_max must be an integer in [0, 2147483648]') end
    if cap == 0 then cap = nil end
  end
  return {cursor = cursor, count = count, newest = newest, value = value, cap = cap}
end

-- FCALL_RO <ns>_dead_letters 0 <cursor|-> [count [order [class [field_max]]]]
local function dead_letters(keys, args)
  local a, err = page_args(args, 'class')
  if not a then return err end
  return stream_page(k('stream', 'dead-letter'), a.cursor, a.count, a.newest,
                     'last_error_class', a.value, a.cap)
end

-- FCALL_RO <ns>_audit_page 0 <cursor|-> [count [order [task_id [field_max]]]]
local function audit_page(keys, args)
  local a, err = page_args(args, 'task')
  if not a then return err end
  return stream_page(k('stream', 'audit'), a.cursor, a.count, a.newest, 'task_id', a.value,
                     a.cap)
end

--[[ FCALL_RO <ns>_metrics 0: what a Prometheus scrape of dtq-web shows, in one bounded
call (docs/reference.md 5.5): per queue (at most READ.QUEUES_MAX) the depth per band, the
pending count, whether it is paused, the age of its oldest waiting entry and its scheduled
tasks (among the READ.SCHEDULE_SCAN soonest due, as the overview counts them); the dead
letters of the READ.DLQ_SCAN newest entries by queue and class; the live workers by
status; the scheduler's leader. ]]
local function metrics(keys, args)
  local now = now_ms()
  local names = sorted_queues()
  local scheduled, per = scheduled_by_queue()
  local queues = {}
  for i = 1, math.min(#names, READ.QUEUES_MAX) do
    local q = names[i]
    local n = queue_counts(q)
    local d, oldest = {}, nil
    for band = 0, BANDS - 1 do
      d[band + 1] = n.depth_by_band[band]
      if n.depth_by_band[band] > 0 then -- the first entry after the group's last-delivered id
        local s = stream_key(q, band)
        local from = last_delivered(s)
        local e = redis.pcall('XRANGE', s, from and ('(' .. from) or '-', '+', 'COUNT', 1)
        if not e.err and e[1] then
          local ms = id_ms(e[1][1])
          if not oldest or ms < oldest then oldest = ms end
        end
      end
    end
    queues[i] = {name = q, paused = redis.call('EXISTS', k('queue', q, 'paused')) == 1,
                 depth_by_band = d, pending = n.pending, scheduled = per[q] or 0,
                 oldest_waiting_ms = oldest and math.max(0, now - oldest) or 0}
  end
  -- dead letters: the newest READ.DLQ_SCAN entries, read a page at a time
  local dkey, by, dl, scanned, from = k('stream', 'dead-letter'), {}, {}, 0, '+'
  local dlen = count_of('XLEN', dkey)
  while scanned < READ.DLQ_SCAN do
    local page = redis.pcall('XREVRANGE', dkey, from, '-', 'COUNT',
                             math.min(READ.DLQ_PAGE, READ.DLQ_SCAN - scanned))
    if page.err or #page == 0 then break end
    for _, e in ipairs(page) do
      local f = fields_object(e[2])
      local q, c = f.queue or '', f.last_error_class or ''
      local key = q .. '\0' .. c
      if not by[key] then
        by[key] = {queue = q, class = c, count = 0}
        dl[#dl + 1] = by[key]
      end
      by[key].count = by[key].count + 1
      from = '(' .. e[1]
    end
    scanned = scanned + #page
  end
  table.sort(dl, function(a, b)
    if a.queue ~= b.queue then return a.queue < b.queue end
    return a.class < b.class
  end)
  local wlist, wmore, gone = live_workers(now)
  local statuses = {running = 0, draining = 0, stopped = 0}
  for _, w in ipairs(wlist) do
    local st = type(w.status) == 'string' and w.status or ''
    statuses[st] = (statuses[st] or 0) + 1
  end
  local leader = redis.pcall('GET', k('lock', 'scheduler'))
  return json_encode({
    time_ms = now, queues = arr(queues), queues_truncated = #names > READ.QUEUES_MAX,
    scheduled = {total = scheduled, claimed = count_of('ZCARD', k('retry', 'claimed')),
                 by_queue_complete = scheduled <= READ.SCHEDULE_SCAN},
    dead_letters = {length = dlen, scanned = scanned, complete = scanned >= dlen,
                    by_queue_class = arr(dl)},
    workers = statuses, workers_truncated = wmore, workers_gone = gone,
    leader = type(leader) == 'string' and leader or cjson.null})
end

reg('overview', overview, true)
reg('workers', workers, true)
reg('queue_view', queue_view, true)
reg('task_view', task_view, true)
reg('dead_letters', dead_letters, true)
reg('audit_page', audit_page, true)
reg('metrics', metrics, true)
end

------------------------------------------------------------------------------ the schedule
do

--[[ Scheduled tasks, and what an admin does with them and with a queue (docs/reference.md
5.6). <prefix>:retry:schedule is one sorted set per namespace (member = task id, score =
due ms), so a page filtered by queue, task type or class examines members one by one: at
most SCHED.SCAN_MAX per call, with a cursor to go on from. ]]
local SCHED = { -- the bounds of the schedule and queue admin Functions
  SCAN_MAX = 1000,    -- schedule members one scheduled page examines
  RANGE = 100,        -- members read per ZRANGE by a filtered page
  IDS_MAX = 500,      -- ids per sched_run_now or sched_delete call
  CLEAR_MAX = 1000,   -- waiting entries one queue_clear takes
  REMOVE_SCAN = 10000, -- schedule (and claimed) members queue_remove examines
}
local SCHED_KINDS = {pending = 'delayed', retrying = 'retrying'}
local SCHED_FILTER_MAX = {queue = 128, id_prefix = 256, task_type = 128, class = 64}
local SCHED_FIELDS = {'status', 'queue', 'task_type', 'attempt', 'max_attempts',
                      'own_max_attempts', 'last_error', 'last_error_class', 'priority'}

-- a < b bytewise, the order of members of equal score (Lua's < follows the locale).
local function bytes_less(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = a:byte(i), b:byte(i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- The rank in `key` of the first member after (score s, member m) in the set's order.
local function sched_start(key, s, m)
  local cur = redis.pcall('ZSCORE', key, m)
  if type(cur) == 'string' and tonumber(cur) == tonumber(s) then
    return redis.call('ZRANK', key, m) + 1
  end
  -- m left (or moved): among the members scored s, the first that sorts after it
  local lo, hi = count_of('ZCOUNT', key, '-inf', '(' .. s), count_of('ZCOUNT', key, '-inf', s)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local x = redis.call('ZRANGE', key, mid, mid)[1]
    if x and bytes_less(m, x) then hi = mid else lo = mid + 1 end
  end
  return lo
end

local function or_null(v) if v == nil or v == false then return cjson.null end return v end

-- A schedule member as the scheduled page lists it, from the HMGET of SCHED_FIELDS.
local function sched_item(tid, score, v)
  local kind = SCHED_KINDS[v[1]] or 'other'
  local o = {task_id = tid, due_ms = tonumber(score), status = or_null(v[1]), kind = kind,
             queue = or_null(v[2]), task_type = or_null(v[3]),
             attempt = v[4] and int_of(v[4]) or cjson.null, next_attempt = cjson.null,
             max_attempts = cjson.null, last_error = cjson.null,
             last_error_class = or_null(v[8]), priority = v[9] and int_of(v[9]) or cjson.null}
  if v[4] and kind ~= 'other' then
    o.next_attempt = int_of(v[4]) + (kind == 'retrying' and 1 or 0)
  end
  local ma = (kind == 'retrying' and v[5]) or v[6] or v[5]
  if ma then o.max_attempts = int_of(ma) end
  if v[7] then
    local line, cut = first_line(v[7], HISTORY_ERROR_MAX)
    o.last_error = line
    if cut then o.last_error_truncated = true end
  end
  return o
end

--[[ FCALL_RO <ns>_scheduled 0 <cursor|-> [count [filter value]...]: a page of
<prefix>:retry:schedule, soonest due first. Filters: queue, kind (delayed, retrying, all),
id_prefix, task_type, class (last_error_class); an empty value is no filter. The cursor is
<score>:<member> of the last member examined. ]]
local function scheduled(keys, args)
  local cursor, count, f = args[1], 50, {kind = 'all'}
  local cs, cm
  if cursor ~= nil and cursor ~= '' and cursor ~= '-' then
    cs, cm = cursor:match('^([^:]+):(.+)$')
    if not cs or not tonumber(cs) or not valid_name(cm, 256) then
      return opt_error('cursor must be <score>:<task_id> from next_cursor, or -')
    end
  end
  if args[2] and args[2] ~= '' then
    count = parse_int(args[2], 1, READ.PAGE_MAX)
    if not count then return opt_error('count must be an integer in [1, 500]') end
  end
  if #args > 2 and #args % 2 ~= 0 then return opt_error('filters come in name value pairs') end
  for i = 3, #args, 2 do
    local name, v = args[i], args[i + 1]
    if name == 'kind' then
      if v ~= '' and v ~= 'delayed' and v ~= 'retrying' and v ~= 'all' then
        return opt_error('kind must be delayed, retrying or all')
      end
      f.kind = v ~= '' and v or 'all'
    elseif SCHED_FILTER_MAX[name] then
      if v ~= '' and not valid_name(v, SCHED_FILTER_MAX[name]) then
        return opt_error(name .. ' must match [A-Za-z0-9._:-]{1,' ..
                         fmt(SCHED_FILTER_MAX[name]) .. '}')
      end
      if v ~= '' then f[name] = v end
    else
      return opt_error('unknown filter ' .. name)
    end
  end
  local filtered = f.kind ~= 'all' or f.queue or f.id_prefix or f.task_type or f.class
  local key, now = k('retry', 'schedule'), now_ms()
  local total = count_of('ZCARD', key)
  local pos = cs and sched_start(key, cs, cm) or 0
  local entries, scanned, last = {}, 0, nil
  while #entries < count and scanned < SCHED.SCAN_MAX and pos < total do
    local want = filtered and math.min(SCHED.RANGE, SCHED.SCAN_MAX - scanned) or
                 count - #entries
    local page = redis.pcall('ZRANGE', key, pos, pos + want - 1, 'WITHSCORES')
    if page.err or #page == 0 then break end
    for i = 1, #page - 1, 2 do
      local tid, score = page[i], page[i + 1]
      scanned, pos, last = scanned + 1, pos + 1, score .. ':' .. tid
      if not f.id_prefix or tid:sub(1, #f.id_prefix) == f.id_prefix then
        local v = redis.pcall('HMGET', k('task', tid), unpack(SCHED_FIELDS))
        if v.err then v = {} end
        local it = sched_item(tid, score, v)
        if (f.kind == 'all' or it.kind == f.kind) and (not f.queue or v[2] == f.queue) and
            (not f.task_type or v[3] == f.task_type) and (not f.class or v[8] == f.class) then
          entries[#entries + 1] = it
          if #entries == count then break end
        end
      end
      if scanned == SCHED.SCAN_MAX then break end
    end
  end
  local filter = {}
  for name in pairs(SCHED_FILTER_MAX) do filter[name] = or_null(f[name]) end
  filter.kind = f.kind
  return json_encode({time_ms = now, total = total,
                      claimed = count_of('ZCARD', k('retry', 'claimed')), count = count,
                      filter = filter, scanned = scanned, entries = arr(entries),
                      next_cursor = (pos < total and last) or cjson.null})
end

-- The task ids of a sched_run_now or sched_delete call (args[2..]), or nil and the error.
local function sched_ids(args)
  local ids = {}
  for i = 2, #args do
    if not valid_name(args[i], 256) then
      return nil, opt_error('task_id must match [A-Za-z0-9._:-]{1,256}')
    end
    ids[#ids + 1] = args[i]
  end
  if #ids == 0 or #ids > SCHED.IDS_MAX then
    return nil, opt_error('give 1 to ' .. fmt(SCHED.IDS_MAX) .. ' task ids after the actor')
  end
  return ids
end

local function actor_of(a)
  if a == nil or a == '' then return 'redis-cli' end
  return a
end

-- Takes `tid` out of the schedule and of the scheduler's claims; whether it was in either.
local function unschedule(tid)
  return redis.call('ZREM', k('retry', 'schedule'), tid) +
         redis.call('ZREM', k('retry', 'claimed'), tid) > 0
end

-- Ends a task an admin deleted: `cancelled`, metadata.deleted = true, TASK_CANCELLED.
local function end_deleted(c, tkey, h, ms)
  local ok, meta = pcall(cjson.decode, h.metadata or '{}')
  if not ok or type(meta) ~= 'table' then meta = {} end
  meta.deleted = true
  finish_terminal(c, tkey, h, 'cancelled', ms, {metadata = cjson.encode(meta)})
  emit(c, ms, 'TASK_CANCELLED', h, '', {deleted = true})
end

--[[ FCALL <ns>_sched_run_now 0 <actor> <task_id>...: each task leaves the schedule (or
the scheduler's claims) and is promoted at once, as the scheduler would (promote_one), in
this call: the scheduler cannot promote it again. One reply word per id: done (queued in
its stream), cancelled/expired/dead_lettered/failed (promotion ended it instead),
not_scheduled, not_found. ]]
local RUN_NOW_META = {reason = 'run_now'}
local function sched_run_now(keys, args)
  local ids, err = sched_ids(args)
  if not ids then return err end
  local actor, c, ms, out = actor_of(args[1]), load_config(), now_ms(), {}
  for i, tid in ipairs(ids) do
    local r
    if unschedule(tid) then
      r = promote_one(c, ms, '', tid, NS .. '_sched_run_now', RUN_NOW_META)
      if r == 'queued' then
        r = 'done'
      elseif r == 'gone' or r == 'quarantined' then
        r = 'not_found'
      elseif r == 'dropped' then
        r = 'not_scheduled'
      end
    else
      r = redis.call('TYPE', k('task', tid)).ok == 'hash' and 'not_scheduled' or 'not_found'
    end
    if r ~= 'not_found' and r ~= 'not_scheduled' then
      audit('sched_run_now', tid, actor, ms, task_queue(tid))
    end
    out[i] = r
  end
  return out
end

--[[ FCALL <ns>_sched_delete 0 <actor> <task_id>...: each delayed or retrying task leaves
the schedule and ends `cancelled` with metadata.deleted = true. One reply word per id:
done, not_scheduled (not in the schedule, or not pending/retrying: a stale member is
removed all the same), not_found; dead_lettered/failed for a poisoned hash. ]]
local function sched_delete(keys, args)
  local ids, err = sched_ids(args)
  if not ids then return err end
  local actor, c, ms, out = actor_of(args[1]), load_config(), now_ms(), {}
  for i, tid in ipairs(ids) do
    local was = unschedule(tid)
    local tkey = k('task', tid)
    local h, bad = read_task(tkey, tid)
    local r
    if bad then
      if was then quarantine(bad, tkey, NS .. '_sched_delete', ms) end
      r = 'not_found'
    elseif not h then
      r = 'not_found'
    elseif not was or (h.status ~= 'pending' and h.status ~= 'retrying') then
      r = 'not_scheduled'
    else
      local why = task_poison(h)
      if why then
        r = dead_letter_poisoned(c, tkey, h, ms, why, '')
      else
        end_deleted(c, tkey, h, ms)
        r = 'done'
      end
      audit('sched_delete', tid, actor, ms, task_queue(tid))
    end
    out[i] = r
  end
  return out
end

-- One waiting entry of queue `q`, band `band` (stream `s`), taken by queue_clear: its task
-- dead-lettered with class `cleared` (or, `delete`, ended as end_deleted does), and the
-- entry deleted. Returns whether a task was cleared (false: the entry was stale, or
-- settled as fetch would settle it, and only deleted).
local function clear_entry(c, ms, actor, s, q, band, e, delete)
  local entry_id, fields, f = e[1], e[2], {}
  local source = s .. '/' .. entry_id
  for i = 1, #fields - 1, 2 do f[fields[i]] = fields[i + 1] end
  local tid, tkey, h, bad, attempt
  if f.task_type ~= nil or f.attempt == nil or f.task_id == nil then
    qlen_add(q, 1) -- a raw entry counts from its first read (qlen_key)
    tid, tkey, h = materialize_raw(c, ms, '', s, q, band, entry_id, f, source)
    if not h then return false end -- absorbed, invalid (dead-lettered) or quarantined
    attempt = 1
  else
    tid, attempt = f.task_id, tonumber(f.attempt)
    tkey = k('task', tid)
    h, bad = read_task(tkey, tid)
    if bad then quarantine(bad, tkey, source, ms) end
  end
  if not h or h.status ~= 'queued' or tonumber(h.attempt) ~= attempt or h.queue ~= q or
      (tonumber(h.priority) or 5) ~= band then
    -- gone, stale, or not this stream's: fetch drops it too
    qlen_add(q, -redis.call('XDEL', s, entry_id))
    return false
  end
  if in_cancelled(tid) then redis.pcall('SREM', k('cancelled'), tid) end
  local why = task_poison(h)
  if why then
    dead_letter_poisoned(c, tkey, h, ms, why, '')
  elseif delete then
    end_deleted(c, tkey, h, ms)
  else
    dead_letter(c, tkey, h, ms, 'cleared: queue ' .. q .. ' cleared by ' .. actor, 'cleared', '')
  end
  qlen_add(q, -redis.call('XDEL', s, entry_id))
  return true
end

-- The first `n` waiting entries of stream `s` (after the group's last-delivered id).
local function waiting_page(s, n)
  local from = last_delivered(s)
  local page = redis.pcall('XRANGE', s, from and ('(' .. from) or '-', '+', 'COUNT', n)
  if page.err then return {} end
  return page
end

--[[ FCALL <ns>_queue_clear 0 <actor> <queue> [delete]: the queue's waiting entries (not
yet delivered; pending ones stay with their workers), p9 first, at most SCHED.CLEAR_MAX per
call. Replies {cleared, dropped, more}: more = 1 while waiting entries are left (call
again). One audit entry per call, with queue, mode and count. ]]
local function queue_clear(keys, args)
  local actor, q, mode = actor_of(args[1]), args[2], args[3]
  if not valid_name(q, 128) then
    return opt_error('queue name must match [A-Za-z0-9._:-]{1,128}')
  end
  local bad = SCOPE.refuse(q)
  if bad then return bad end
  if mode ~= nil and mode ~= '' and mode ~= 'delete' then
    return opt_error('the third argument must be delete, or nothing')
  end
  local delete = mode == 'delete'
  local c, ms = load_config(), now_ms()
  local cleared, dropped, left = 0, 0, SCHED.CLEAR_MAX
  for band = BANDS - 1, 0, -1 do
    if left == 0 then break end
    local s = stream_key(q, band)
    if redis.call('EXISTS', s) == 1 then
      for _, e in ipairs(waiting_page(s, left)) do
        left = left - 1
        if clear_entry(c, ms, actor, s, q, band, e, delete) then
          cleared = cleared + 1
        else
          dropped = dropped + 1
        end
      end
    end
  end
  local more = 0
  if left == 0 then
    for band = BANDS - 1, 0, -1 do
      local s = stream_key(q, band)
      if more == 0 and redis.call('EXISTS', s) == 1 and #waiting_page(s, 1) > 0 then more = 1 end
    end
  end
  audit('queue_clear', '', actor, ms, q,
        {'mode', delete and 'delete' or 'dead_letter', 'count', fmt(cleared)})
  return {cleared, dropped, more}
end

-- The non-terminal tasks of queue `q` among the first SCHED.REMOVE_SCAN members of the
-- schedule and of the claims.
local function scheduled_for(q)
  local n = 0
  for _, key in ipairs({k('retry', 'schedule'), k('retry', 'claimed')}) do
    local ids = redis.pcall('ZRANGE', key, 0, SCHED.REMOVE_SCAN - 1)
    if ids.err then ids = {} end
    for _, tid in ipairs(ids) do
      local v = redis.pcall('HMGET', k('task', tid), 'queue', 'status')
      if not v.err and v[1] == q and v[2] and not TERMINAL[v[2]] then n = n + 1 end
    end
  end
  return n
end

--[[ FCALL <ns>_queue_remove 0 <actor> <queue>: the queue leaves <prefix>:queues, and its
streams and paused flag are deleted, only when it holds nothing: no waiting entry, no
pending one, no task scheduled for it. Else NOT_EMPTY with the counts. ]]
local function queue_remove(keys, args)
  local actor, q = actor_of(args[1]), args[2]
  if not valid_name(q, 128) then
    return opt_error('queue name must match [A-Za-z0-9._:-]{1,128}')
  end
  local bad = SCOPE.refuse(q)
  if bad then return bad end
  if redis.pcall('SISMEMBER', k('queues'), q) ~= 1 then
    return redis.error_reply('NOT_FOUND queue ' .. q .. ' is not in ' .. k('queues'))
  end
  local n, sched = queue_counts(q), scheduled_for(q)
  if n.depth + n.pending + sched > 0 then
    return redis.error_reply('NOT_EMPTY queue ' .. q .. ' holds ' .. fmt(n.depth) ..
                             ' waiting, ' .. fmt(n.pending) .. ' pending, ' .. fmt(sched) ..
                             ' scheduled')
  end
  for band = 0, BANDS - 1 do
    local s = stream_key(q, band)
    if redis.call('TYPE', s).ok == 'stream' then redis.call('DEL', s) end
  end
  redis.call('DEL', k('queue', q, 'paused'), qlen_key(q))
  redis.call('SREM', k('queues'), q)
  audit('queue_remove', '', actor, now_ms(), q)
  return 'removed'
end

reg('scheduled', scheduled, true)
reg('sched_run_now', sched_run_now)
reg('sched_delete', sched_delete)
reg('queue_clear', queue_clear)
reg('queue_remove', queue_remove)
end

------------------------------------------------------------------------------ periodic tasks
do

--[[ Periodic tasks (docs/reference.md 5.8). A schedule is the hash
<prefix>:cron:<queue>:<name>, with its queue so that it lives where the queue's keys do;
<prefix>:crons (name -> queue) is the index. The Functions own every state change of a
schedule and its firing; what a spec means in time (a time-zone database the Functions do
not have) is computed by the scheduler leader (src/cron.c), which hands the fire times it
found to <ns>_cron_fire. That Function decides which of them run (the catch-up policy) and
enqueues each at most once: a schedule's `last_fire` only grows, and a fire time at or
before it is never enqueued again, whichever leader asks and however often. ]]
local CRON = {
  MAX = 1000,        -- schedules per namespace
  DUE_MAX = 100,     -- schedules one cron_due hands out
  FIRES_MAX = 101,   -- fire times one cron_fire takes (100 missed + the latest)
  CATCH_UP_ALL = 100, -- missed fire times catch-up `all` runs at most
  SPEC_MAX = 256, TZ_MAX = 64, ORIGIN_MAX = 300,
}
local CATCH_UP = {skip = true, none = true, all = true}
local CRON_OPTIONS = {tz = true, catch_up = true, priority = true, max_attempts = true,
                      timeout_ms = true, ttl_seconds = true, origin = true, paused = true}
-- What a schedule's enqueue options are bounded by: enqueue's own bounds.
local CRON_INT = {priority = ENQUEUE_LIMITS.priority, max_attempts = ENQUEUE_LIMITS.max_attempts,
                  timeout_ms = ENQUEUE_LIMITS.timeout_ms, ttl_seconds = ENQUEUE_LIMITS.ttl_seconds}
-- The fields that decide when a schedule fires: changing one replans it.
local CRON_TIMING = {'spec', 'tz'}

local function cron_valid_name(s)
  return type(s) == 'string' and #s >= 1 and #s <= 64 and not s:find('[^%w%._%-]')
end
local function cron_key(queue, name) return k('cron', queue, name) end
local function cron_index() return k('crons') end

-- The schedule `name` as a table, with its key; nil when there is none (an index entry
-- that points at a key that is not this schedule's hash reads as none; cron_set and
-- cron_remove overwrite or drop it).
local function cron_read(name)
  local queue = redis.pcall('HGET', cron_index(), name)
  if type(queue) ~= 'string' then return nil end
  local key = cron_key(queue, name)
  local s = hgetall_map(key)
  if not s or s.name ~= name then return nil end
  return s, key
end

local function cron_not_found(name)
  return redis.error_reply('NOT_FOUND no periodic schedule named ' .. tostring(name))
end

--[[ FCALL <ns>_cron_set 0 <actor> <name> <spec> <queue> <task_type> <payload-json>
[option value]... Options: tz (IANA name, default UTC), catch_up (skip|none|all, default
skip), priority, max_attempts, timeout_ms, ttl_seconds, origin (who defines it: `runtime`
by default, `config:...` for a daemon's config file), paused (0|1). Creates or replaces
the schedule `name`; a replaced schedule keeps its paused state unless `paused` is given,
and its last fire time always (a fire time it has run is never run again). Its fire times
are (re)planned by the leader when spec or tz change. The spec and zone are checked by
dtqctl and dtq-worker before they call, and by the leader when it plans (a schedule it
cannot plan records `error` and does not fire). Replies created, replaced or unchanged. ]]
local function cron_set(keys, args)
  local actor, name, spec, queue, ttype, payload = args[1], args[2], args[3],
    args[4], args[5], args[6]
  if not cron_valid_name(name) then return opt_error('name must match [A-Za-z0-9._-]{1,64}') end
  if type(spec) ~= 'string' or #spec < 1 or #spec > CRON.SPEC_MAX or spec:find('[%c]') then
    return opt_error('spec must be 1-' .. fmt(CRON.SPEC_MAX) .. ' printable bytes')
  end
  if not valid_name128(queue) then return opt_error('queue name must match [A-Za-z0-9._:-]{1,128}') end
  if not valid_name128(ttype) then return opt_error('task_type must match [A-Za-z0-9._:-]{1,128}') end
  if payload == nil then return opt_error('payload is required') end
  local bad = SCOPE.refuse(queue)
  if bad then return bad end
  local c = enqueue_config()
  local refusal = payload_refusal(c, payload)
  if refusal then return refusal end
  local o = {tz = 'UTC', catch_up = 'skip', origin = 'runtime'}
  if (#args - 6) % 2 ~= 0 then return opt_error('options come in name value pairs') end
  for i = 7, #args, 2 do
    local opt, v = args[i], args[i + 1]
    if not CRON_OPTIONS[opt] then return opt_error('unknown option ' .. opt) end
    if CRON_INT[opt] then
      local lim = CRON_INT[opt]
      if not parse_int(v, lim[1], lim[2]) then
        return opt_error(opt .. ' must be an integer in [' .. fmt(lim[1]) .. ', ' .. fmt(lim[2]) .. ']')
      end
    elseif opt == 'tz' then
      if #v < 1 or #v > CRON.TZ_MAX or v:find('[^%w/_+%-]') or v:find('%.%.') then
        return opt_error('tz must be an IANA time zone name such as Europe/Berlin')
      end
    elseif opt == 'catch_up' then
      if not CATCH_UP[v] then return opt_error('catch_up must be skip, none or all') end
    elseif opt == 'origin' then
      if #v < 1 or #v > CRON.ORIGIN_MAX or v:find('[%c]') then
        return opt_error('origin must be 1-' .. fmt(CRON.ORIGIN_MAX) .. ' printable bytes')
      end
    elseif opt == 'paused' then
      if v ~= '0' and v ~= '1' then return opt_error('paused must be 0 or 1') end
    end
    o[opt] = v
  end
  local ms = now_ms()
  local old, oldkey = cron_read(name)
  if not old and redis.call('HLEN', cron_index()) >= CRON.MAX then
    return opt_error('at most ' .. fmt(CRON.MAX) .. ' periodic schedules per namespace')
  end
  local s = {name = name, spec = spec, tz = o.tz, queue = queue, task_type = ttype,
             payload = payload, catch_up = o.catch_up, origin = o.origin,
             priority = o.priority or '', max_attempts = o.max_attempts or '',
             timeout_ms = o.timeout_ms or '', ttl_seconds = o.ttl_seconds or ''}
  local verdict = 'created'
  if old then
    verdict = 'unchanged'
    for f, v in pairs(s) do
      if old[f] ~= v then verdict = 'replaced' end
    end
    if o.paused and o.paused ~= old.paused then verdict = 'replaced' end
    if verdict == 'unchanged' then
      -- Setting a schedule again clears the error a leader recorded (the cause may have
      -- been fixed outside the schedule: a zone the hosts now know): it is planned afresh.
      if (old.error or '') ~= '' then
        redis.call('HSET', oldkey, 'error', '', 'next_fire', '', 'gen', fmt(seq_incr(1)),
                   'updated_at', fmt(now_ms()))
      end
      return verdict
    end
    s.paused = o.paused or old.paused or '0'
    s.last_fire, s.last_task_id = old.last_fire or '', old.last_task_id or ''
    s.created_at = old.created_at or fmt(ms)
    local replan = old.queue ~= queue or (old.paused == '1' and s.paused == '0')
    for _, f in ipairs(CRON_TIMING) do
      if old[f] ~= s[f] then replan = true end
    end
    if replan then
      s.anchor_ms, s.next_fire, s.gen = fmt(ms), '', fmt(seq_incr(1))
    else
      s.anchor_ms, s.next_fire = old.anchor_ms or fmt(ms), old.next_fire or ''
      s.gen = old.gen or '1'
    end
    if old.queue ~= queue then redis.call('DEL', oldkey) end
  else
    s.paused, s.last_fire, s.last_task_id = o.paused or '0', '', ''
    -- gen comes from the namespace's counter: a schedule removed and set again never
    -- takes a generation an old leader's cron_fire still carries.
    s.created_at, s.anchor_ms, s.next_fire, s.gen = fmt(ms), fmt(ms), '', fmt(seq_incr(1))
  end
  s.updated_at, s.error = fmt(ms), ''
  local flat = {}
  for f, v in pairs(s) do
    flat[#flat + 1] = f
    flat[#flat + 1] = v
  end
  local key = cron_key(queue, name)
  redis.call('DEL', key) -- a replaced schedule keeps nothing it did not copy above
  redis.call('HSET', key, unpack(flat))
  redis.call('HSET', cron_index(), name, queue)
  audit('cron_set', '', actor, ms, queue, {'name', name, 'result', verdict})
  return verdict
end

local function cron_remove_one(name)
  local s, key = cron_read(name)
  redis.call('HDEL', cron_index(), name)
  if not s then return nil end
  redis.call('DEL', key)
  return s
end

-- FCALL <ns>_cron_remove 0 <actor> <name>: 1, or NOT_FOUND.
local function cron_remove(keys, args)
  local s = cron_remove_one(args[2])
  if not s then return cron_not_found(args[2]) end
  audit('cron_remove', '', args[1], now_ms(), s.queue, {'name', s.name})
  return 1
end

--[[ FCALL <ns>_cron_pause|_cron_resume 0 <actor> <name>: 1 (changed) or 0 (it was so
already), or NOT_FOUND. A resumed schedule is planned again from now: the fire times that
passed while it was paused are not caught up. ]]
local function cron_pause_resume(action, args)
  local s, key = cron_read(args[2])
  if not s then return cron_not_found(args[2]) end
  local want = action == 'cron_pause' and '1' or '0'
  if s.paused == want then return 0 end
  local ms = now_ms()
  if want == '0' then
    redis.call('HSET', key, 'paused', '0', 'next_fire', '', 'anchor_ms', fmt(ms), 'gen',
               fmt(seq_incr(1)), 'updated_at', fmt(ms))
  else
    redis.call('HSET', key, 'paused', '1', 'updated_at', fmt(ms))
  end
  audit(action, '', args[1], ms, s.queue, {'name', s.name})
  return 1
end
local function cron_pause(keys, args) return cron_pause_resume('cron_pause', args) end
local function cron_resume(keys, args) return cron_pause_resume('cron_resume', args) end

-- The schedule's task for fire time `fire`: a new task of its queue, with `cron` and
-- `fire_time` in its hash. Returns its id, or nil and the refusal (QUEUE_FULL).
local function cron_enqueue(s, ms, fire)
  local c = enqueue_config()
  local depth, lean = LEAN.depth_mode(s.queue)
  if depth >= c.max_queue_depth then return nil, 'QUEUE_FULL' end
  local o = {priority = tonumber(s.priority) or c.default_priority,
             max_attempts = tonumber(s.max_attempts), timeout_ms = tonumber(s.timeout_ms),
             ttl_seconds = tonumber(s.ttl_seconds)}
  if lean then -- a lean task: its entry alone (no cron nor fire_time recorded with it)
    local tid = LEAN.add(c, ms, s.queue, s.task_type, s.payload, o)
    qlen_add(s.queue, 1)
    queue_known(s.queue)
    return tid
  end
  local tid, tkey = free_task_id(ms, fmt(ms) .. '-' .. next_seq())
  if not tid then return nil, 'ID_EXISTS' end
  tkey = tkey or k('task', tid)
  -- cron and fire_time first: create_task's entry is written last, so no worker can read
  -- the task before they are there.
  redis.call('HSET', tkey, 'cron', s.name, 'fire_time', fmt(fire))
  qlen_add(s.queue, create_task(c, ms, tid, s.queue, s.task_type, s.payload, o, tkey))
  queue_known(s.queue)
  return tid
end

-- FCALL <ns>_cron_run 0 <actor> <name>: enqueues the schedule's task now, outside its
-- fire times (fire_time = now; last_fire is not moved). Replies the task id.
local function cron_run(keys, args)
  local s, key = cron_read(args[2])
  if not s then return cron_not_found(args[2]) end
  local ms = now_ms()
  local tid, refusal = cron_enqueue(s, ms, ms)
  if not tid then
    return redis.error_reply(refusal .. ' periodic task ' .. s.name .. ' not enqueued into ' .. s.queue)
  end
  redis.call('HSET', key, 'last_task_id', tid)
  audit('cron_run', tid, args[1], ms, s.queue, {'name', s.name})
  return tid
end

-- The fields of a schedule as the read side shows them.
local function cron_item(s)
  local function int(v) return tonumber(v) or cjson.null end
  local function str(v) if v == nil or v == '' then return cjson.null end return v end
  return {name = s.name, spec = s.spec, tz = s.tz, queue = s.queue, task_type = s.task_type,
          payload = s.payload, catch_up = s.catch_up, paused = s.paused == '1',
          priority = int(s.priority), max_attempts = int(s.max_attempts),
          timeout_ms = int(s.timeout_ms), ttl_seconds = int(s.ttl_seconds),
          next_fire_ms = int(s.next_fire), last_fire_ms = int(s.last_fire),
          last_task_id = str(s.last_task_id), origin = s.origin, error = str(s.error),
          last_refusal = str(s.last_refusal), created_at = int(s.created_at),
          updated_at = int(s.updated_at)}
end

-- The schedules, by name (at most CRON.MAX: cron_set refuses more).
local function cron_all()
  local idx = redis.pcall('HGETALL', cron_index())
  local out = {}
  if type(idx) ~= 'table' or idx.err then return out end
  local names = {}
  for i = 1, #idx, 2 do names[#names + 1] = idx[i] end
  table.sort(names)
  for _, name in ipairs(names) do
    local s = cron_read(name)
    if s then out[#out + 1] = s end
  end
  return out
end

--[[ FCALL_RO <ns>_cron_list 0 [name]: one JSON text, {"now_ms":..., "schedules":[...]}
(every schedule, or the one named: NOT_FOUND when none), each with its spec, zone, queue,
task type, payload, options, catch_up, paused, next_fire_ms, last_fire_ms, last_task_id,
origin and error (null when it plans fine). ]]
local function cron_list(keys, args)
  local list = {}
  if args[1] and args[1] ~= '' then
    local s = cron_read(args[1])
    if not s then return cron_not_found(args[1]) end
    list[1] = cron_item(s)
  else
    for _, s in ipairs(cron_all()) do list[#list + 1] = cron_item(s) end
  end
  return json_encode({now_ms = now_ms(), schedules = arr(list)})
end

--[[ FCALL_RO <ns>_cron_due 0: what the leader has to plan or fire now. Replies {now_ms,
next_ms, more, fires_max, schedule...}: next_ms the earliest planned fire time after now
('' when none), so the leader can wake then; more 1 when there were more due schedules
than one reply holds (CRON.DUE_MAX: ask again at once); fires_max the fire times one
cron_fire takes; each schedule (not paused, without an error, unplanned or due) a flat
array {name, queue, gen, spec, tz, anchor_ms, next_fire} (next_fire '' when unplanned). ]]
local function cron_due(keys, args)
  local ms = now_ms()
  local out, soonest = {fmt(ms), '', 0, CRON.FIRES_MAX}, nil
  for _, s in ipairs(cron_all()) do
    if s.paused ~= '1' and (s.error or '') == '' then
      local nf = tonumber(s.next_fire)
      if not nf or nf <= ms then
        if #out - 4 < CRON.DUE_MAX then
          out[#out + 1] = {s.name, s.queue, s.gen or '0', s.spec, s.tz, s.anchor_ms or fmt(ms),
                           s.next_fire or ''}
        else
          out[3] = 1
        end
      elseif not soonest or nf < soonest then
        soonest = nf
      end
    end
  end
  if soonest then out[2] = fmt(soonest) end
  return out
end

--[[ FCALL <ns>_cron_fire 0 <worker_id> <name> <queue> <gen> <grace_ms> <next_ms> <error>
[fire_ms...]. The leader's verdict on one schedule it got from cron_due: the fire times it
found due (ascending, at most CRON.FIRES_MAX, each at or before now) and the first one
after them (next_ms), or an error (the spec or zone cannot be planned: recorded, nothing
fires until the schedule is set again). Nothing happens if the schedule changed since
(`gen`), was paused or removed. A fire time at most grace_ms old is on time and runs; an
older one was missed (no leader ran then) and the catch-up policy decides: skip runs the
latest missed one, none none, all each (the latest CRON.CATCH_UP_ALL). A fire time at or
before last_fire has run already and is never enqueued again. Replies {fired, missed
dropped, refused (the queue was full: recorded in last_refusal), last task id or ''}. ]]
local function cron_fire(keys, args)
  local name, queue, gen, grace = args[2], args[3], args[4], tonumber(args[5])
  local next_ms, err = args[6], args[7]
  local bad = SCOPE.refuse(queue)
  if bad then return bad end
  local key = cron_key(queue or '', name or '')
  local s = hgetall_map(key)
  if not s or s.name ~= name or s.gen ~= gen or s.paused == '1' or not grace then
    return {0, 0, 0, ''}
  end
  local ms = now_ms()
  if err and err ~= '' then
    redis.call('HSET', key, 'error', err, 'next_fire', '')
    return {0, 0, 0, ''}
  end
  if #args - 7 > CRON.FIRES_MAX then return opt_error('at most ' .. fmt(CRON.FIRES_MAX) .. ' fire times') end
  local last = tonumber(s.last_fire) or -1
  local on_time, missed = {}, {}
  local newest = last
  for i = 8, #args do
    local f = tonumber(args[i])
    if not f or f ~= math.floor(f) then return opt_error('fire times must be integers') end
    if f > ms then
      -- Never early, whatever the caller's clock says (Redis's may have stepped back, on
      -- a failover): this one is the next fire time, not lost.
      next_ms = fmt(f)
      break
    end
    if f > last then
      if ms - f <= grace then on_time[#on_time + 1] = f else missed[#missed + 1] = f end
      if f > newest then newest = f end
    end
  end
  local run = {}
  if s.catch_up == 'all' then
    for i = math.max(1, #missed - CRON.CATCH_UP_ALL + 1), #missed do run[#run + 1] = missed[i] end
  elseif s.catch_up == 'skip' and #missed > 0 then
    -- Of the missed fire times only the latest runs (the ones on time run as usual).
    run[1] = missed[#missed]
  end
  local dropped = #missed
  for _, f in ipairs(run) do dropped = dropped - 1 end
  for _, f in ipairs(on_time) do run[#run + 1] = f end
  local fired, refused, last_tid = 0, 0, ''
  for _, f in ipairs(run) do
    local tid, refusal = cron_enqueue(s, ms, f)
    if tid then
      fired, last_tid = fired + 1, tid
    else
      refused = refused + 1
      redis.call('HSET', key, 'last_refusal', refusal .. ' at fire time ' .. fmt(f))
    end
  end
  local upd = {'next_fire', (tonumber(next_ms) and next_ms) or ''}
  if newest > last then
    upd[#upd + 1], upd[#upd + 2] = 'last_fire', fmt(newest)
  end
  if last_tid ~= '' then
    upd[#upd + 1], upd[#upd + 2] = 'last_task_id', last_tid
    if refused == 0 and (s.last_refusal or '') ~= '' then
      upd[#upd + 1], upd[#upd + 2] = 'last_refusal', ''
    end
  end
  redis.call('HSET', key, unpack(upd))
  return {fired, dropped, refused, last_tid}
end

--[[ FCALL <ns>_cron_sync 0 <actor> <origin> [name...]: the schedules of `origin` (a
daemon's config file) that are not named are removed; schedules of any other origin
(runtime ones, another file's) are kept. Replies the number removed. ]]
local function cron_sync(keys, args)
  local actor, origin = args[1], args[2]
  if type(origin) ~= 'string' or origin == '' then return opt_error('origin is required') end
  local keep = {}
  for i = 3, #args do keep[args[i]] = true end
  local removed, ms = 0, now_ms()
  for _, s in ipairs(cron_all()) do
    if s.origin == origin and not keep[s.name] then
      cron_remove_one(s.name)
      audit('cron_remove', '', actor, ms, s.queue, {'name', s.name, 'origin', origin})
      removed = removed + 1
    end
  end
  return removed
end

reg('cron_set', cron_set)
reg('cron_remove', cron_remove)
reg('cron_pause', cron_pause)
reg('cron_resume', cron_resume)
reg('cron_run', cron_run)
reg('cron_list', cron_list, true)
reg('cron_due', cron_due, true)
reg('cron_fire', cron_fire)
reg('cron_sync', cron_sync)
end

------------------------------------------------------------------------------ limits
do

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
  local base = PREFIX .. ':limit:' .. q .. '/' .. field .. '/' .. kind
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
  local memo = LIM.q
  if not memo then
    memo = {}
    LIM.q = memo
  end
  local v = memo[q]
  if v == nil then
    v = load_limits(q) or false
    memo[q] = v
  end
  return v
end

function LIM.release(slots, tid)
  local memo = LIM.q
  for zk in slots:gmatch('%S+') do
    -- only slot sets: the field is dtq's, but a key it names is checked all the same
    local lpfx = PREFIX .. ':limit:'
    if zk:sub(1, #lpfx) == lpfx then
      redis.pcall('ZREM', zk, tid)
      if memo and memo.n then memo.n[zk] = nil end -- the call's count of it is stale
    end
  end
end

-- The members of a full slot set whose task is gone or not running are removed (the
-- oldest HEAL_MAX, once per set and call: a lease a lost release left). Its size after
-- (n, its size before, when it was healed already in this call).
local function heal(zk, n)
  local memo = LIM.q
  memo.healed = memo.healed or {}
  if memo.healed[zk] then return n end
  memo.healed[zk] = true
  local ids = redis.pcall('ZRANGE', zk, 0, LIMIT.HEAL_MAX - 1)
  if not ids.err then
    for _, id in ipairs(ids) do
      local st = redis.pcall('HGET', k('task', id), 'status')
      if st ~= 'running' then redis.call('ZREM', zk, id) end
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
  local memo = LIM.q
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
  local memo = LIM.q
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
        if n >= l.concurrency then n = heal(zk, n) end
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

-- ------------------------------------------------------------ the admin Functions

-- The target's field and name from <queue> <task_type or ''>, or nil and the error reply.
local function target_of(q, ttype)
  if not valid_name128(q) then
    return nil, opt_error('queue name must match [A-Za-z0-9._:-]{1,128}')
  end
  if ttype == nil or ttype == '' then return '*', q end
  if not valid_name128(ttype) then
    return nil, opt_error('task_type must match [A-Za-z0-9._:-]{1,128}')
  end
  return 't:' .. ttype, q .. ':' .. ttype
end

local SET_OPTS = {rate = {1, LIMIT.RATE_MAX}, period_ms = {1, LIMIT.PERIOD_MAX},
                  burst = {0, LIMIT.BURST_MAX}, concurrency = {1, LIMIT.CONCURRENCY_MAX},
                  per_key = {0, 1}}

--[[ FCALL <ns>_limit_set 0 <actor> <queue> <task_type or ''> [option value]...
Options: rate N and period_ms P (together: at most N + burst starts in any period), burst
B (with a rate; default 0), concurrency C (at most C running), per_key 0|1 (each
limit_key apart). At least one of rate and concurrency. Replaces the target's limit;
replies 'set'. ]]
local function limit_set(keys, args)
  local actor, q, ttype = args[1], args[2], args[3]
  local field, target = target_of(q, ttype)
  if not field then return target end
  local bad = SCOPE.refuse(q)
  if bad then return bad end
  if (#args - 3) % 2 ~= 0 then return opt_error('options come in name value pairs') end
  local o = {}
  for i = 4, #args, 2 do
    local name, v = args[i], args[i + 1]
    local lim = SET_OPTS[name]
    if not lim then return opt_error('unknown option ' .. tostring(name)) end
    local n = parse_int(v, lim[1], lim[2])
    if not n then
      return opt_error(name .. ' must be an integer in [' .. fmt(lim[1]) .. ', ' ..
                       fmt(lim[2]) .. ']')
    end
    o[name] = n
  end
  if (o.rate == nil) ~= (o.period_ms == nil) then
    return opt_error((o.rate and 'rate' or 'period_ms') .. ' needs ' ..
                     (o.rate and 'period_ms' or 'rate'))
  end
  if o.burst and not o.rate then return opt_error('burst needs rate') end
  if not o.rate and not o.concurrency then
    return opt_error('give rate (with period_ms) or concurrency, or both')
  end
  if o.rate and o.period_ms * 1000 < o.rate then
    return opt_error('rate must be at most 1000 per ms of period_ms')
  end
  local l = {per_key = o.per_key == 1}
  if o.rate then l.rate, l.period_ms, l.burst = o.rate, o.period_ms, o.burst or 0 end
  l.concurrency = o.concurrency
  local text = cjson.encode(l)
  redis.call('HSET', k('limits', q), field, text)
  redis.call('SADD', k('limits'), q)
  audit('limit_set', '', actor, now_ms(), q, {'target', target, 'limit', text})
  return 'set'
end

--[[ FCALL <ns>_limit_remove 0 <actor> <queue> <task_type or ''>: the target's limit goes
(NOT_FOUND when it has none); its state runs out by itself (rate and horizon keys expire,
slots are given back as their attempts end). Replies 'removed'. ]]
local function limit_remove(keys, args)
  local actor, q, ttype = args[1], args[2], args[3]
  local field, target = target_of(q, ttype)
  if not field then return target end
  local bad = SCOPE.refuse(q)
  if bad then return bad end
  local lk = k('limits', q)
  if redis.pcall('HDEL', lk, field) ~= 1 then
    return redis.error_reply('NOT_FOUND no limit on ' .. target)
  end
  if redis.call('EXISTS', lk) == 0 then redis.call('SREM', k('limits'), q) end
  audit('limit_remove', '', actor, now_ms(), q, {'target', target})
  return 'removed'
end

-- The use of limit l of queue q now: {running, tokens_left, keys, deferred_until_ms}.
local function limit_use(q, l, now)
  local use = {running = cjson.null, tokens_left = cjson.null, keys = cjson.null,
               deferred_until_ms = cjson.null}
  local function card(key) return count_of('ZCARD', key) end
  if l.per_key then
    local ik = lkey(q, l.field, 'keys')
    use.keys = card(ik)
    if l.concurrency then
      local ids = redis.pcall('ZRANGE', ik, 0, LIMIT.KEYS_MAX - 1)
      local n = 0
      if not ids.err then
        for _, key in ipairs(ids) do n = n + card(lkey(q, l.field, 'run', key)) end
      end
      use.running = n
    end
    return use
  end
  if l.concurrency then use.running = card(lkey(q, l.field, 'run')) end
  if l.rate then
    local tat = tonumber(redis.pcall('GET', lkey(q, l.field, 'rate'))) or 0
    local left = math.floor((now * 1000 + 999 + l.tol - tat) / l.T) + 1
    use.tokens_left = math.max(0, math.min(l.burst + 1, left))
  end
  local hz = tonumber(redis.pcall('GET', lkey(q, l.field, 'due')))
  if hz and hz > now * 1000 then use.deferred_until_ms = math.ceil(hz / 1000) end
  return use
end

--[[ FCALL_RO <ns>_limit_list 0: one JSON text, the limits of the queues in <p>:limits
(sorted, at most QUEUES_MAX; per queue the queue-wide limit first, then by task type, at
most TARGETS_MAX), each {queue, task_type (null: queue-wide), target, rate, period_ms,
burst, concurrency (null when not set), per_key, use}: an array. ]]
local function limit_list(keys, args)
  local now = now_ms()
  local names = redis.pcall('SMEMBERS', k('limits'))
  if names.err then names = {} end
  table.sort(names)
  local out = {}
  for i = 1, math.min(#names, LIMIT.QUEUES_MAX) do
    local q = names[i]
    local map = valid_name128(q) and hgetall_map(k('limits', q))
    local fields = {}
    for f in pairs(map or {}) do fields[#fields + 1] = f end
    table.sort(fields) -- '*' sorts before 't:...'
    for j = 1, math.min(#fields, LIMIT.TARGETS_MAX) do
      local f = fields[j]
      local l, ttype = decode_limit(map[f]), f:match('^t:(.+)$')
      if l and (f == '*' or ttype) then
        local t = {field = f}
        for name, v in pairs(l) do t[name] = v end
        out[#out + 1] = {queue = q, task_type = ttype or cjson.null,
                         target = ttype and (q .. ':' .. ttype) or q,
                         rate = l.rate or cjson.null, period_ms = l.period_ms or cjson.null,
                         burst = l.rate and l.burst or cjson.null,
                         concurrency = l.concurrency or cjson.null, per_key = l.per_key,
                         use = limit_use(q, t, now)}
      end
    end
  end
  return json_encode(arr(out))
end

reg('limit_set', limit_set)
reg('limit_remove', limit_remove)
reg('limit_list', limit_list, true)
end

--[[ FCALL <ns>_worker_event 0 <worker_id> <type>: publishes WORKER_STARTED or
WORKER_STOPPED through the one event builder. ]]
local WORKER_EVENTS = {WORKER_STARTED = true, WORKER_STOPPED = true}
local function worker_event(keys, args)
  if not WORKER_EVENTS[args[2] or ''] then
    return opt_error('type must be WORKER_STARTED or WORKER_STOPPED')
  end
  emit(load_config(), now_ms(), args[2], {}, args[1])
  return 'ok'
end

--[[ FCALL_RO <ns>_version 0: the library's version marker, <DTQ_VERSION>-<hash of the
library text> (scripts.c). A worker that may not FUNCTION LOAD checks it against its own
before serving on a library an admin installed (dtqctl functions install). ]]
local function version(keys, args) return VERSION end

reg('enqueue', enqueue)
reg('enqueue_bulk', enqueue_bulk)
reg('fetch', fetch)
reg('reap', reap)
reg('recover', recover)
reg('deregister', deregister)
reg('finish', finish)
reg('handback', handback)
reg('worker_event', worker_event)
reg('sched_claim', sched_claim)
reg('sched_promote', sched_promote)
reg('lock_refresh', lock_refresh)
reg('lock_release', lock_release)
reg('requeue', requeue)
reg('requeue_dlq', requeue_dlq)
reg('discard', discard)
reg('purge_dlq', purge_dlq)
reg('cancel', cancel)
reg('pause', pause)
reg('resume', resume)
reg('queue_mode', queue_mode)
reg('stats', stats, true)
reg('version', version, true)

do
--[[ FCALL <ns>_layout 0 single, or FCALL <ns>_layout 1 {<ns>} cluster: the caller's layout
(docs/reference.md 5.9), checked against the namespace's marker <prefix>:layout and written
when there is none. A namespace keeps the layout it was created with: the other one would
not find its keys. A cluster-layout call also refuses a namespace without a marker that
holds {<ns>}:config, which only the single layout writes (cluster_hash_tag on a cluster).
Replies 'single' or 'cluster'; WRONG_LAYOUT with the way to move otherwise. ]]
local MOVE = ' To move: stop the producers, let the daemons of the old layout drain the queues, ' ..
             'then start everything with the new URL (or use another namespace); see ' ..
             'docs/reference.md 5.9.'
local function layout(keys, args)
  local want = args[1]
  if want ~= 'single' and want ~= 'cluster' then
    return opt_error('the argument must be single or cluster')
  end
  if (want == 'cluster') ~= SCOPE.cluster or SCOPE.queue then
    return opt_error('single takes no key, cluster the key {' .. NS .. '}')
  end
  local key = k('layout')
  local have = redis.pcall('GET', key)
  if type(have) == 'table' then
    return redis.error_reply('WRONG_LAYOUT ' .. key .. ' holds a ' ..
                             redis.call('TYPE', key).ok .. ', not the layout marker')
  end
  if not have and want == 'cluster' and redis.call('EXISTS', k('config')) == 1 then
    have = 'single'
  end
  if have and have ~= want then
    local what = have == 'cluster' and 'Redis Cluster (redis-cluster:// URLs)' or
                 (have == 'single' and 'a single Redis (with cluster_hash_tag on a cluster)' or
                  ('an unknown layout \'' .. have .. '\''))
    return redis.error_reply('WRONG_LAYOUT namespace ' .. NS .. ' is laid out for ' .. what ..
                             ', this client for ' ..
                             (want == 'cluster' and 'Redis Cluster.' or 'a single Redis.') .. MOVE)
  end
  if not have then redis.call('SET', key, want) end
  return want
end
reg('layout', layout)
end
