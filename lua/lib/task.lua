-- lua/lib/task.lua
-- The task hash: reading it (poisoned records, quarantine), creating it, its history,
-- its terminal states (dead letters included), the options' bounds and the idempotency
-- record.
local BANDS, MAX_ATTEMPTS, TERMINAL =
  CONST.BANDS, CONST.MAX_ATTEMPTS, CONST.TERMINAL
local first_line, fmt, hgetall_map, is_name, opt_error, options_set =
  util.first_line, util.fmt, util.hgetall_map, util.is_name, util.opt_error, util.options_set
local k =
  scope.k
local emit, emit_task =
  events.emit, events.emit_task
local stream_key =
  streams.stream_key
local UNIQUE =
  unique.UNIQUE

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

local TASK_STATUSES = {pending = true, queued = true, running = true, retrying = true,
                       waiting = true}
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
  if not is_name(h.queue) then return 'queue is not a valid queue name' end
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

-- Whether `tid` was cancelled while queued: one SCARD per call spares a SISMEMBER per entry
-- while the set is empty, which it almost always is.
local function in_cancelled(tid)
  local cx = call.ctx
  if cx.any_cancelled == nil then
    local n = redis.pcall('SCARD', k('cancelled'))
    cx.any_cancelled = type(n) == 'number' and n > 0
  end
  return cx.any_cancelled and redis.pcall('SISMEMBER', k('cancelled'), tid) == 1
end

local function idem_set(h, state, ms)
  if not h.idempotency_key or h.idempotency_key == '' then return end
  local rec = cjson.encode({task_id = h.id, state = state, updated_at = ms})
  redis.call('SET', k('idempotency', h.queue, h.idempotency_key), rec, 'XX', 'KEEPTTL')
end

--[[ The attempt history: the task hash's `history` field, a JSON array of the last
HISTORY_MAX attempts that ended other than in success (retried, dead-lettered or failed,
cancelled, handed back, lost with their worker), oldest first, each {attempt, ended_at,
class, error, worker}: the error's first line, at most HISTORY_ERROR_MAX bytes. Written
only on those paths (a success writes nothing here), so a task's history needs no events
stream. ]]
local HISTORY_MAX, HISTORY_ERROR_MAX = 10, 200

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

--[[ Dependencies (lib/deps.lua, docs/reference.md 4.4). <prefix>:waiters:<id> is the set
of the tasks that wait for task <id> (`after`): this is the one place its name is spelled.
Every end of a task that has waiters is noted in the call's context (ended: task id, then
status, flat; ended_c the config of the call), and the call's wrapper (call.reg) hands the
list to the dependency code once the Function has run (deps.settle): the waiters are
released, ended or revived there, in the same atomic call, after the events of the ends
that caused it. finish_terminal (and so dead_letter) is the funnel of every terminal
transition but a success; the two success paths of <ns>_finish note theirs themselves. ]]
local function waiters_key(tid) return k('waiters', tid) end

local function note_ended(c, ms, tid, status)
  local cx = call.ctx
  local list = cx.ended
  if not list then
    list = {}
    cx.ended, cx.ended_c, cx.ended_ms = list, c, ms
  end
  list[#list + 1], list[#list + 2] = tid, status
end

-- The end of a batch's member (lib/batch.lua), noted in the call's context (batch_ends:
-- batch id, task id, status, flat; batch_ms the call's clock) for its counting at the end
-- of the call. `bid` is the hash's batch field, false when the caller read it and it is
-- not set, nil when the caller did not read it (asked here).
local function note_batch(ms, tkey, tid, status, bid)
  if bid == nil then
    bid = redis.pcall('HGET', tkey, 'batch')
    if type(bid) ~= 'string' then return end
  end
  if not bid then return end
  local cx = call.ctx
  local list = cx.batch_ends
  if not list then
    list = {}
    cx.batch_ends, cx.batch_ms = list, ms
  end
  list[#list + 1], list[#list + 2], list[#list + 3] = bid, tid, status
end

-- Ends a task in a terminal status other than dead_lettered: fields, TTL, idempotency.
-- (No updated_at: finished_at is the time of the change; readers take the latest.)
-- The funnel of every terminal transition but a success: a task that has waiters is noted
-- (note_ended) for their settling at the end of the call; a unique task gives its key back.
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
  local tid = h.id or tkey:sub(#k('task', '') + 1)
  if redis.call('EXISTS', waiters_key(tid)) == 1 then note_ended(c, ms, tid, status) end
  if h.unique_key then UNIQUE.release(h.queue, h.unique_key, tid) end -- lib/unique.lua
  note_batch(ms, tkey, tid, status, h.batch)
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
  if not is_name(h.queue) then h.idempotency_key = nil end -- no record to find
  return dead_letter(c, tkey, h, ms, 'poisoned record: ' .. why, 'poisoned', worker_id)
end

local ENQUEUE_LIMITS = {priority = {0, BANDS - 1}, max_attempts = {1, MAX_ATTEMPTS},
                        timeout_ms = {1, 2^53}, delay_ms = {0, 2^53}, ttl_seconds = {1, 2^53}}

-- Why a payload cannot be enqueued (an error reply), or nil.
local function payload_refusal(c, payload)
  if #payload > c.max_payload_bytes then
    return redis.error_reply('PAYLOAD_TOO_LARGE payload is ' .. fmt(#payload) ..
                             ' bytes, max_payload_bytes is ' .. fmt(c.max_payload_bytes))
  end
  if not pcall(cjson.decode, payload) then return opt_error('payload is not valid JSON') end
  return nil
end

-- The fields create_task writes into every task's hash (without options of its own): the
-- claim's fast path (FULL.first, lib/claim.lua) knows an untouched hash by that count.
local CREATED_FIELDS = 10

-- Writes a new task: its hash, then its stream entry (or its schedule entry when delayed).
-- Returns 1 when it wrote a stream entry, else 0: the caller adds it to the queue's counter.
-- A task with `o.after` (parents: lib/deps.lua) is written `waiting`, in no stream and no
-- schedule; the caller wires it to its parents.
local function create_task(c, ms, tid, queue, ttype, payload, o, tkey)
  local delayed = o.delay_ms and o.delay_ms > 0
  local now = fmt(ms)
  tkey = tkey or k('task', tid)
  -- The fields every task has, without an argument table (a Lua table per task cost 7,000
  -- of a bulk enqueue's 72,000 instructions per task); the optional ones after, if any.
  redis.call('HSET', tkey, 'id', tid, 'queue', queue, 'task_type', ttype, 'payload', payload,
             'status', o.after and 'waiting' or delayed and 'pending' or 'queued', 'attempt',
             '1', 'priority',
             fmt(o.priority), 'created_at', now, 'metadata', '{}',
             'cancel_requested', '0')
  if o.max_attempts or o.timeout_ms or o.ttl_seconds or o.idempotency_key or o.limit_key then
    redis.call(unpack(options_set({'HSET', tkey},
      'own_max_attempts', o.max_attempts and fmt(o.max_attempts),
      'own_timeout_ms', o.timeout_ms and fmt(o.timeout_ms),
      'ttl_seconds', o.ttl_seconds and fmt(o.ttl_seconds),
      'idempotency_key', o.idempotency_key, 'limit_key', o.limit_key)))
  end
  if o.after then return 0 end
  if delayed then
    redis.call('ZADD', k('retry', 'schedule'), fmt(ms + o.delay_ms), tid)
    return 0
  end
  redis.call('XADD', stream_key(queue, o.priority), '*', 'task_id', tid, 'attempt', '1')
  emit_task(c, ms, 'TASK_QUEUED', tid, queue, ttype, 1, '')
  return 1
end

-- The queue named in a task hash, for the audit entry of an action on the task ('' when
-- the hash is gone or of another type).
local function task_queue(tid)
  local q = redis.pcall('HGET', k('task', tid), 'queue')
  return type(q) == 'string' and q or ''
end

return {CREATED_FIELDS = CREATED_FIELDS, ENQUEUE_LIMITS = ENQUEUE_LIMITS, HISTORY_ERROR_MAX = HISTORY_ERROR_MAX,
        create_task = create_task, dead_letter = dead_letter,
        dead_letter_poisoned = dead_letter_poisoned, finish_terminal = finish_terminal,
        history_add = history_add, idem_set = idem_set, in_cancelled = in_cancelled,
        note_batch = note_batch, note_ended = note_ended, waiters_key = waiters_key,
        payload_refusal = payload_refusal, quarantine = quarantine, read_task = read_task,
        task_poison = task_poison, task_queue = task_queue, wrong_type = wrong_type}
