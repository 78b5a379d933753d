-- lua/fn/admin.lua
-- The admin Functions on tasks and queues: requeue, the dead-letter stream, cancel,
-- pause and resume, a queue's mode.
local fmt, hgetall, is_name, NAME_RULE, now_ms, opt_error, parse_int, valid_name =
  util.fmt, util.hgetall, util.is_name, util.NAME_RULE, util.now_ms, util.opt_error,
  util.parse_int, util.valid_name
local SCOPE, k =
  scope.SCOPE, scope.k
local reg =
  call.reg
local load_config =
  config.load_config
local audit, emit, emit_task =
  events.audit, events.emit, events.emit_task
local add_entry, qlen_add, queue_known, stream_key =
  streams.add_entry, streams.qlen_add, streams.queue_known, streams.stream_key
local dead_letter_poisoned, finish_terminal, idem_set, quarantine, read_task, task_poison,
      task_queue, waiters_key =
  task.dead_letter_poisoned, task.finish_terminal, task.idem_set, task.quarantine,
  task.read_task, task.task_poison, task.task_queue, task.waiters_key
local DEPS =
  deps.DEPS
local LIM =
  limits.LIM
local LEAN =
  lean.LEAN

local function dlq_remove(h)
  if h.dlq_entry and h.dlq_entry ~= '' then
    redis.call('XDEL', k('stream', 'dead-letter'), h.dlq_entry)
  end
end

--[[ Returns 'queued'; the status a poisoned task was dead-lettered in again (task_poison(),
nothing requeued); or nil, the error reply and, when the task key holds another type, the
reason (nothing written). A task a dependency's failure ended (lib/deps.lua) is revived
instead: waiting for its parents as they stand, released ('queued') when they are done, or
ended again ('cancelled', 'dead_lettered', 'failed') when one of them is still failed. ]]
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
  redis.call('PERSIST', waiters_key(tid)) -- its waiters, kept for its success
  if DEPS.ended_by_dependency(h) then return DEPS.revive(c, ms, tkey, h) end
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
        if r == 'queued' or r == 'waiting' then
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
  redis.call('HDEL', tkey, 'failed_by') -- discarded: its parent's success does not revive it
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
  if not q or not is_name(q) or SCOPE.refuse(q) then return nil end
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
  if h.status == 'queued' or h.status == 'pending' or h.status == 'retrying' or
      h.status == 'waiting' then
    redis.call('ZREM', k('retry', 'schedule'), args[1])
    finish_terminal(c, tkey, h, 'cancelled', ms)
    emit(c, ms, 'TASK_CANCELLED', h, '')
    reply = 'cancelled'
  elseif h.status == 'running' then
    redis.call('HSET', tkey, 'cancel_requested', '1', 'updated_at', fmt(ms))
    reply = 'cancel_requested'
    -- an attempt nothing can end any more (its entry and its worker gone) ends here
    if LIM.end_lost(c, ms, args[1]) then reply = 'cancelled' end
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
  if not is_name(q) then
    return opt_error('queue name must match ' .. NAME_RULE)
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
  if not is_name(q) then
    return opt_error('queue name must match ' .. NAME_RULE)
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
reg('requeue', requeue)
reg('requeue_dlq', requeue_dlq)
reg('discard', discard)
reg('purge_dlq', purge_dlq)
reg('cancel', cancel)
reg('pause', pause)
reg('resume', resume)
reg('queue_mode', queue_mode)

