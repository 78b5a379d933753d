-- lua/fn/finish.lua
-- FCALL <ns>_finish and <ns>_handback: the ends of attempts.
local GROUP =
  CONST.GROUP
local fmt, hgetall, is_name, now_ms, num =
  util.fmt, util.hgetall, util.is_name, util.now_ms, util.num
local SCOPE, k =
  scope.SCOPE, scope.k
local reg =
  call.reg
local load_config =
  config.load_config
local emit, emit_task, event_wanted =
  events.emit, events.emit_task, events.event_wanted
local ack, add_entry, delete_acked, qlen_add, stream_queue =
  streams.ack, streams.add_entry, streams.delete_acked, streams.qlen_add, streams.stream_queue
local dead_letter, finish_terminal, history_add, idem_set, in_cancelled, note_ended, quarantine,
      read_task, waiters_key, wrong_type =
  task.dead_letter, task.finish_terminal, task.history_add, task.idem_set, task.in_cancelled,
  task.note_ended, task.quarantine, task.read_task, task.waiters_key, task.wrong_type
local note_batch =
  task.note_batch
local decode_policy =
  policy.decode_policy
local LIM =
  limits.LIM
local LEAN =
  lean.LEAN
local UNIQUE =
  unique.UNIQUE

--[[ The finish record: what the daemon's dtq_finish_record_encode() (src/finisher.c) sends
for one finished attempt, FINISH_RECORD_FIELDS values in this order. tests/lua/finish.c
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
-- has_waiters: whether a task waits for this one (lib/deps.lua), which a success releases;
-- batch: the batch it is a member of (lib/batch.lua), which counts its end; unique_key: a
-- unique task's key (lib/unique.lua), which its end gives back.
local FINISH_FIELDS = {'worker_id', 'cancel_requested', 'idempotency_key', 'status', 'queue',
                       'task_type', 'attempt', 'has_waiters', 'batch', 'unique_key'}

-- The task as the idempotency record and the rarer outcomes need it, from the HMGET of
-- FINISH_FIELDS (a success publishes its event from the values themselves).
local function finish_hash(tid, v)
  return {id = tid, worker_id = v[1] or nil, cancel_requested = v[2] or nil,
          idempotency_key = v[3] or nil, status = v[4] or nil, queue = v[5] or nil,
          task_type = v[6] or nil, attempt = v[7] or nil, batch = v[9],
          unique_key = v[10] or nil}
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
                           call.ctx.lean_policy or decode_policy(nil))
    if st ~= true then return st end
    v = redis.call('HMGET', tkey, unpack(FINISH_FIELDS))
  end
  if v[4] ~= 'running' or v[1] ~= worker then return 'stale' end
  if (v[7] ~= args[b + 2] and num(v[7]) ~= num(args[b + 2])) or not is_name(v[5]) then
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
    if v[8] then note_ended(c, ms, tid, 'succeeded') end -- its waiters: at the call's end
    if v[9] then note_batch(ms, tkey, tid, 'succeeded', v[9]) end -- its batch: too
    if v[10] then UNIQUE.release(v[5], v[10], tid) end
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
    -- Not run here (no handler for its type, or its pool has no process): back to the
    -- schedule at the same attempt, for a worker that can run it, while the grace since its
    -- enqueue lasts (Redis's clock, so every worker agrees); after that, dead-lettered like
    -- the record's error says. A grace of -1 never runs out (a pool that cannot start).
    local created = tonumber(redis.call('HGET', tkey, 'created_at'))
    local grace = tonumber(args[b + 11])
    if grace < 0 or (created and ms < created + grace) then
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
    if wanted or call.ctx.any_cancelled ~= false then
      local q = stream_queue(stream)
      local tid = q and (q .. ':' .. stream:sub(-2) .. ':' .. id)
      if tid and in_cancelled(tid) then
        redis.pcall('SREM', k('cancelled'), tid)
        local tkey = k('task', tid)
        if redis.call('HGET', tkey, 'status') == 'running' then
          redis.call('HSET', tkey, 'status', 'succeeded', 'finished_at', fmt(ms))
          redis.call('EXPIRE', tkey, fmt(c.task_retention_s))
          if redis.call('EXISTS', waiters_key(tid)) == 1 then
            note_ended(c, ms, tid, 'succeeded')
          end
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
    call.ctx.lean_policy = decode_policy(args[nargs + 2])
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
reg('finish', finish)
reg('handback', handback)

